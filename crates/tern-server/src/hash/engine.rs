//! The engine threads: each holds a session of the hash store and runs the
//! jobs connections hand over (a pipeline's run of engine commands). A job
//! that wrote, under `appendfsync always`, is answered only once a
//! checkpoint covers it; one thread waits for those, so the jobs of every
//! connection share checkpoints (group commit) and no engine thread waits
//! on the disk.

use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Where the replies go, in order, with the commands not run (a job
    /// stops once its replies pass [`JOB_REPLY_BYTES`]).
    pub reply: oneshot::Sender<Done>,
}

/// What a job did: the replies of the commands it ran, and the rest.
pub struct Done {
    /// Replies of the first `replies.len()` commands.
    pub replies: Vec<Reply>,
    /// The commands not run yet.
    pub rest: Vec<(String, Vec<Vec<u8>>)>,
}

/// Reply bytes after which a job stops and hands back its other commands,
/// so a pipeline of large reads is answered in pieces, each written out
/// before the next runs.
pub const JOB_REPLY_BYTES: usize = 16 << 20;

/// Replies waiting for a checkpoint.
struct Waiting {
    point: u64,
    wrote: bool,
    done: Done,
    reply: oneshot::Sender<Done>,
}

/// State the engine threads share.
struct Shared {
    /// Write jobs run whose replies wait for a checkpoint: while there are
    /// any, a read may see a write that is not durable yet, so its reply
    /// waits too (`appendfsync always`).
    unsynced: AtomicU64,
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
    /// replies to writes, and to reads that may have seen one, wait for a
    /// checkpoint.
    pub fn start(
        store: &Arc<HashStore>,
        threads: usize,
        durable_writes: bool,
    ) -> std::io::Result<Engine> {
        let (jobs, rx) = crossbeam_channel::bounded::<Job>(threads * 64);
        let shared = Arc::new(Shared {
            unsynced: AtomicU64::new(0),
        });
        let mut handles = Vec::new();
        let waiter = if durable_writes {
            let (tx, wrx) = crossbeam_channel::unbounded::<Waiting>();
            let (store, shared) = (store.clone(), shared.clone());
            handles.push(
                std::thread::Builder::new()
                    .name("tern-hash-durable".into())
                    .spawn(move || wait_durable(&store, &shared, &wrx))?,
            );
            Some(tx)
        } else {
            None
        };
        for i in 0..threads {
            let (store, rx, waiter, shared) =
                (store.clone(), rx.clone(), waiter.clone(), shared.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("tern-hash-engine-{i}"))
                    .spawn(move || work(&store, &shared, &rx, waiter.as_ref()))?,
            );
        }
        Ok(Engine {
            jobs: Some(jobs),
            threads: handles,
        })
    }

    /// Runs `commands` (or their first part; see [`Done`]); `None` if the
    /// engine has stopped.
    pub async fn run(&self, commands: Vec<(String, Vec<Vec<u8>>)>) -> Option<Done> {
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

fn work(
    store: &Arc<HashStore>,
    shared: &Shared,
    jobs: &Receiver<Job>,
    waiter: Option<&Sender<Waiting>>,
) {
    let mut session = store.session();
    while let Ok(job) = jobs.recv() {
        let writes = waiter.is_some() && job.commands.iter().any(|(n, _)| writes_data(n));
        if writes {
            shared.unsynced.fetch_add(1, Ordering::SeqCst);
        }
        let mut cx = Cx {
            session: &mut session,
            store,
            wrote: false,
        };
        let mut commands = job.commands.into_iter();
        let mut replies = Vec::new();
        let mut bytes = 0;
        for (name, args) in commands.by_ref() {
            // A command that panics fails alone; the thread goes on.
            let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run(&mut cx, &name, &args)
            }))
            .unwrap_or_else(|_| {
                Reply::err(format!(
                    "internal error running {name}; the command was not completed"
                ))
            });
            bytes += reply.size_hint();
            replies.push(reply);
            if bytes >= JOB_REPLY_BYTES {
                break;
            }
        }
        let done = Done {
            replies,
            rest: commands.collect(),
        };
        match waiter {
            Some(w) if writes || shared.unsynced.load(Ordering::SeqCst) > 0 => {
                let waiting = Waiting {
                    point: store.sync_point(),
                    wrote: writes,
                    done,
                    reply: job.reply,
                };
                if let Err(e) = w.send(waiting) {
                    let _ = e.0.reply.send(Done {
                        replies: vec![Reply::err("the server is stopping")],
                        rest: Vec::new(),
                    });
                }
            }
            _ => {
                let _ = job.reply.send(done);
            }
        }
    }
}

/// Whether a command may change data (its job's replies then wait for a
/// checkpoint under `appendfsync always`).
fn writes_data(name: &str) -> bool {
    !matches!(
        name,
        "GET"
            | "MGET"
            | "EXISTS"
            | "STRLEN"
            | "GETRANGE"
            | "SUBSTR"
            | "TTL"
            | "PTTL"
            | "EXPIRETIME"
            | "PEXPIRETIME"
            | "TYPE"
            | "SCAN"
            | "KEYS"
            | "DBSIZE"
            | "PING"
            | "ECHO"
            | "TIME"
    )
}

fn wait_durable(store: &HashStore, shared: &Shared, waiting: &Receiver<Waiting>) {
    while let Ok(first) = waiting.recv() {
        let mut batch = vec![first];
        batch.extend(waiting.try_iter());
        let point = batch.iter().map(|w| w.point).max().unwrap_or(0);
        let failed = store.wait_durable(point).err();
        for w in batch {
            if w.wrote {
                shared.unsynced.fetch_sub(1, Ordering::SeqCst);
            }
            let done = match &failed {
                None => w.done,
                Some(e) => Done {
                    replies: w
                        .done
                        .replies
                        .iter()
                        .map(|_| Reply::err(format!("the write is not durable: {e}")))
                        .collect(),
                    rest: w.done.rest,
                },
            };
            let _ = w.reply.send(done);
        }
    }
}
