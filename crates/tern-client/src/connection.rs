//! One pipelined RESP connection.
//!
//! Calls from any number of tasks go through a queue to a writer task,
//! which writes whatever has queued up in one write (so concurrent callers
//! share round trips) and does not wait for replies before writing more:
//! several batches are in flight at once. A reader task hands each reply
//! to its caller in order. When the connection fails, every caller still
//! waiting gets the error, and the connection reports itself broken.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::reply::{encode, parse, Reply};
use crate::{Cmd, Result};

/// Jobs queued before callers wait for room.
const QUEUE: usize = 4096;
/// Longest wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for a pipeline's replies: a server that stops answering
/// (frozen, cut off) fails its callers instead of hanging them.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A batch of commands written together, answered together.
struct Job {
    bytes: Vec<u8>,
    count: usize,
    done: oneshot::Sender<Result<Vec<Reply>>>,
}

/// A batch written and waiting for its replies.
struct Waiting {
    count: usize,
    got: Vec<Reply>,
    done: oneshot::Sender<Result<Vec<Reply>>>,
}

type Queue = Arc<Mutex<VecDeque<Waiting>>>;

/// A pipelined connection to one server.
#[derive(Debug, Clone)]
pub struct Connection {
    addr: String,
    tx: mpsc::Sender<Job>,
    broken: Arc<AtomicBool>,
}

impl Connection {
    /// Connects to `addr` (`host:port`).
    pub async fn connect(addr: &str) -> Result<Connection> {
        let sock = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::Io(format!("connecting to {addr} timed out")))?
            .map_err(|e| Error::Io(format!("cannot connect to {addr}: {e}")))?;
        sock.set_nodelay(true)?;
        let (rd, wr) = sock.into_split();
        let (tx, rx) = mpsc::channel(QUEUE);
        let queue: Queue = Arc::default();
        let broken = Arc::new(AtomicBool::new(false));
        tokio::spawn(write_loop(wr, rx, queue.clone(), broken.clone()));
        tokio::spawn(read_loop(rd, queue, broken.clone()));
        Ok(Connection {
            addr: addr.to_string(),
            tx,
            broken,
        })
    }

    /// The address connected to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the connection failed (it answers nothing more).
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed) || self.tx.is_closed()
    }

    /// Sends `cmds` as one pipeline; their replies, in order. Error
    /// replies are replies, not errors.
    pub async fn pipeline(&self, cmds: &[Cmd]) -> Result<Vec<Reply>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let mut bytes = Vec::with_capacity(
            cmds.iter()
                .map(|c| 16 + c.iter().map(|a| a.len() + 16).sum::<usize>())
                .sum(),
        );
        for c in cmds {
            encode(&mut bytes, c);
        }
        let (done, rx) = oneshot::channel();
        let job = Job {
            bytes,
            count: cmds.len(),
            done,
        };
        self.tx
            .send(job)
            .await
            .map_err(|_| Error::Io(format!("the connection to {} is closed", self.addr)))?;
        match tokio::time::timeout(REPLY_TIMEOUT, rx).await {
            Ok(r) => r.map_err(|_| Error::Io(format!("the connection to {} closed", self.addr)))?,
            Err(_) => {
                // Replies may still come for it: the connection is unusable.
                self.broken.store(true, Ordering::Relaxed);
                Err(Error::Io(format!(
                    "{} did not answer within {REPLY_TIMEOUT:?}",
                    self.addr
                )))
            }
        }
    }

    /// Sends one command; its reply.
    pub async fn call(&self, cmd: Cmd) -> Result<Reply> {
        let mut r = self.pipeline(std::slice::from_ref(&cmd)).await?;
        r.pop()
            .ok_or_else(|| Error::Protocol("no reply to a command".into()))
    }
}

fn fail_all(queue: &Queue, why: &str) {
    for w in queue.lock().drain(..) {
        let _ = w.done.send(Err(Error::Io(why.to_string())));
    }
}

async fn write_loop(
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Job>,
    queue: Queue,
    broken: Arc<AtomicBool>,
) {
    let mut buf = Vec::new();
    while let Some(job) = rx.recv().await {
        buf.clear();
        let mut next = Some(job);
        // Everything queued meanwhile goes out in the same write.
        while let Some(j) = next {
            buf.extend_from_slice(&j.bytes);
            queue.lock().push_back(Waiting {
                count: j.count,
                got: Vec::with_capacity(j.count),
                done: j.done,
            });
            next = if buf.len() < (1 << 20) {
                rx.try_recv().ok()
            } else {
                None
            };
        }
        if let Err(e) = wr.write_all(&buf).await {
            broken.store(true, Ordering::Relaxed);
            fail_all(&queue, &format!("write failed: {e}"));
            return;
        }
    }
    // Every handle is gone: the server closes its side once it has
    // answered, which ends the reader.
    let _ = wr.shutdown().await;
}

async fn read_loop(mut rd: tokio::net::tcp::OwnedReadHalf, queue: Queue, broken: Arc<AtomicBool>) {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut start = 0;
    let why = loop {
        // Hand out every complete reply the buffer holds.
        loop {
            match parse(&buf[start..]) {
                Ok(Some((reply, n))) => {
                    start += n;
                    let mut q = queue.lock();
                    let Some(front) = q.front_mut() else {
                        drop(q);
                        broken.store(true, Ordering::Relaxed);
                        return;
                    };
                    front.got.push(reply);
                    if front.got.len() == front.count {
                        if let Some(w) = q.pop_front() {
                            let _ = w.done.send(Ok(w.got));
                        }
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    broken.store(true, Ordering::Relaxed);
                    fail_all(&queue, &e.to_string());
                    return;
                }
            }
        }
        if start > 0 {
            buf.drain(..start);
            start = 0;
        }
        let old = buf.len();
        buf.resize(old + 16 * 1024, 0);
        match rd.read(&mut buf[old..]).await {
            Ok(0) => break "the server closed the connection".to_string(),
            Ok(n) => buf.truncate(old + n),
            Err(e) => break format!("read failed: {e}"),
        }
    };
    broken.store(true, Ordering::Relaxed);
    fail_all(&queue, &why);
}
