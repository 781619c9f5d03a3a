//! The read pool: threads that run read-only commands, so a read that waits
//! on the disk holds one of these threads and never a tokio worker.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::status::ExecStatus;

type Task = Box<dyn FnOnce() + Send>;

/// A fixed pool of reader threads fed by one queue.
pub struct Readers {
    tx: Sender<Option<Task>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    status: Arc<ExecStatus>,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers")
            .field("queued", &self.tx.len())
            .finish()
    }
}

fn work(rx: Receiver<Option<Task>>) {
    while let Ok(Some(task)) = rx.recv() {
        // A panicking command drops its reply channel: that connection is
        // closed, the thread stays.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(task));
    }
}

impl Readers {
    /// Starts `threads` reader threads.
    pub fn start(threads: usize, status: Arc<ExecStatus>) -> std::io::Result<Readers> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("tern-read-{i}"))
                    .spawn(move || work(rx))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Readers {
            tx,
            threads: Mutex::new(threads),
            status,
        })
    }

    /// Runs `f` on a reader thread; `None` if the pool is stopped or `f`
    /// panicked.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Option<R> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let status = self.status.clone();
        status.read_queue.fetch_add(1, Relaxed);
        let task: Task = Box::new(move || {
            status.read_queue.fetch_sub(1, Relaxed);
            let _ = tx.send(f());
        });
        if self.tx.send(Some(task)).is_err() {
            self.status.read_queue.fetch_sub(1, Relaxed);
            return None;
        }
        rx.await.ok()
    }

    /// Lets the threads finish the queued tasks and waits for them.
    pub fn stop(&self) {
        let mut threads = self.threads.lock();
        for _ in 0..threads.len() {
            let _ = self.tx.send(None);
        }
        for t in threads.drain(..) {
            let _ = t.join();
        }
    }
}
