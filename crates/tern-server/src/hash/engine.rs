//! The engine threads: each holds a session of the hash store and runs the
//! jobs connections hand over (a pipeline's run of engine commands). A job
//! that wrote, under `appendfsync always`, is answered only once a
//! checkpoint covers it; one thread waits for those, so the jobs of every
//! connection share checkpoints (group commit) and no engine thread waits
//! on the disk.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use tern_hash::HashStore;
use tokio::sync::oneshot;

use super::commands::{run, Cx};
use crate::resp::Reply;

/// A run of engine commands from one connection: upper-cased name and
/// arguments of each.
pub struct Job {
    /// The commands.
    pub commands: Vec<(String, Vec<Vec<u8>>)>,
    /// Where the replies go, in order.
    pub reply: oneshot::Sender<Vec<Reply>>,
}

/// Replies waiting for a checkpoint.
struct Waiting {
    point: u64,
    replies: Vec<Reply>,
    reply: oneshot::Sender<Vec<Reply>>,
}

/// The engine threads of a server. Dropping it stops them and waits, so
/// their sessions (and with them the store) are gone when it returns.
pub struct Engine {
    jobs: Option<Sender<Job>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Engine {
    /// Starts `threads` engine threads on `store`; with `durable_writes`,
    /// replies to writes wait for a checkpoint.
    pub fn start(
        store: &Arc<HashStore>,
        threads: usize,
        durable_writes: bool,
    ) -> std::io::Result<Engine> {
        let (jobs, rx) = crossbeam_channel::bounded::<Job>(threads * 64);
        let mut handles = Vec::new();
        let waiter = if durable_writes {
            let (tx, wrx) = crossbeam_channel::unbounded::<Waiting>();
            let store = store.clone();
            handles.push(
                std::thread::Builder::new()
                    .name("tern-hash-durable".into())
                    .spawn(move || wait_durable(&store, &wrx))?,
            );
            Some(tx)
        } else {
            None
        };
        for i in 0..threads {
            let (store, rx, waiter) = (store.clone(), rx.clone(), waiter.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("tern-hash-engine-{i}"))
                    .spawn(move || work(&store, &rx, waiter.as_ref()))?,
            );
        }
        Ok(Engine {
            jobs: Some(jobs),
            threads: handles,
        })
    }

    /// Runs `commands`; `None` if the engine has stopped.
    pub async fn run(&self, commands: Vec<(String, Vec<Vec<u8>>)>) -> Option<Vec<Reply>> {
        let (reply, rx) = oneshot::channel();
        let jobs = self.jobs.clone()?;
        let job = Job { commands, reply };
        // A full queue means the engine is saturated: wait off the runtime.
        match jobs.try_send(job) {
            Ok(()) => {}
            Err(crossbeam_channel::TrySendError::Full(job)) => {
                tokio::task::spawn_blocking(move || jobs.send(job))
                    .await
                    .ok()?
                    .ok()?;
            }
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => return None,
        }
        rx.await.ok()
    }
}

fn work(store: &Arc<HashStore>, jobs: &Receiver<Job>, waiter: Option<&Sender<Waiting>>) {
    let mut session = store.session();
    while let Ok(job) = jobs.recv() {
        let mut cx = Cx {
            session: &mut session,
            store,
            wrote: false,
        };
        let replies: Vec<Reply> = job
            .commands
            .iter()
            .map(|(name, args)| run(&mut cx, name, args))
            .collect();
        match waiter {
            Some(w) if cx.wrote => {
                let waiting = Waiting {
                    point: store.sync_point(),
                    replies,
                    reply: job.reply,
                };
                if let Err(e) = w.send(waiting) {
                    let _ = e.0.reply.send(vec![Reply::err("the server is stopping")]);
                }
            }
            _ => {
                let _ = job.reply.send(replies);
            }
        }
    }
}

fn wait_durable(store: &HashStore, waiting: &Receiver<Waiting>) {
    while let Ok(first) = waiting.recv() {
        let mut batch = vec![first];
        batch.extend(waiting.try_iter());
        let point = batch.iter().map(|w| w.point).max().unwrap_or(0);
        let failed = store.wait_durable(point).err();
        for w in batch {
            let replies = match &failed {
                None => w.replies,
                Some(e) => w
                    .replies
                    .iter()
                    .map(|_| Reply::err(format!("the write is not durable: {e}")))
                    .collect(),
            };
            let _ = w.reply.send(replies);
        }
    }
}
