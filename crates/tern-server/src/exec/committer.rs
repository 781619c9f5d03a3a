//! The committer: one thread that runs every command that writes.
//!
//! Connections hand it jobs (one connection's run of consecutive write
//! commands) and wait for the replies. It takes every job queued at that
//! moment, runs their commands in order against a [`Pending`] batch, and
//! commits the batch to the engine once (more often only when it grows
//! large), so `appendfsync always` costs one fsync for all the writes that
//! queued behind the previous one. A command that reads before it writes
//! (INCR, SET NX, APPEND, …) sees the writes pending before it; and since
//! one thread runs all writes, no lock is needed to make it atomic.
//!
//! A reply that depends on a write is sent only after the write committed;
//! if the commit fails, those replies become the error. While the engine
//! stalls a commit, only this thread and the connections whose writes wait
//! are held: reads run on the read pool, everything else on the tokio
//! workers. [`ExecStatus`] makes the wait visible to INFO and metrics.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::status::ExecStatus;
use super::JOB_REPLY_BYTES;
use crate::commands::{execute, store_error, Session};
use crate::pending::Pending;
use crate::resp::Reply;
use crate::state::State;

/// Most jobs taken into one commit group.
const MAX_JOBS: usize = 4096;
/// Pending bytes that make the committer commit before the group ends.
const GROUP_MAX_BYTES: usize = 4 << 20;

/// Commands that commit what is pending before they run (they write to the
/// engine themselves).
fn commits_first(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"flushdb") || name.eq_ignore_ascii_case(b"flushall")
}

/// What a job hands back: the session, the requests it did not run, and
/// the replies of those it did.
pub type JobDone = (Session, VecDeque<Vec<Vec<u8>>>, Vec<Reply>);

/// One connection's run of write commands.
pub struct WriteJob {
    /// Shared state.
    pub state: Arc<State>,
    /// The connection's session, handed back with the replies.
    pub session: Session,
    /// The requests, in order; those not run (see [`JOB_REPLY_BYTES`]) go
    /// back with the replies.
    pub requests: VecDeque<Vec<Vec<u8>>>,
    /// Where the session, the requests not run and the replies go.
    pub done: tokio::sync::oneshot::Sender<JobDone>,
}

/// The committer thread and its queue.
pub struct Committer {
    tx: Sender<Option<WriteJob>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    status: Arc<ExecStatus>,
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer")
            .field("status", &self.status)
            .finish()
    }
}

impl Committer {
    /// Starts the committer thread.
    pub fn start(status: Arc<ExecStatus>) -> std::io::Result<Committer> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let st = status.clone();
        let thread = std::thread::Builder::new()
            .name("tern-commit".into())
            .spawn(move || run(rx, &st))?;
        Ok(Committer {
            tx,
            thread: Mutex::new(Some(thread)),
            status,
        })
    }

    /// Runs `requests` (or, if their replies grow large, a prefix of them)
    /// on the committer; `None` if the committer stopped.
    pub async fn run(
        &self,
        state: Arc<State>,
        session: Session,
        requests: VecDeque<Vec<Vec<u8>>>,
    ) -> Option<JobDone> {
        let (done, rx) = tokio::sync::oneshot::channel();
        self.status.write_queue.fetch_add(1, Relaxed);
        let job = WriteJob {
            state,
            session,
            requests,
            done,
        };
        if self.tx.send(Some(job)).is_err() {
            self.status.write_queue.fetch_sub(1, Relaxed);
            return None;
        }
        rx.await.ok()
    }

    /// Finishes the queued jobs and stops the thread.
    pub fn stop(&self) {
        let _ = self.tx.send(None);
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

fn run(rx: Receiver<Option<WriteJob>>, status: &ExecStatus) {
    while let Ok(Some(first)) = rx.recv() {
        let mut jobs = vec![first];
        let mut stop = false;
        while jobs.len() < MAX_JOBS {
            match rx.try_recv() {
                Ok(Some(j)) => jobs.push(j),
                Ok(None) => {
                    stop = true;
                    break;
                }
                Err(_) => break,
            }
        }
        status.write_queue.fetch_sub(jobs.len(), Relaxed);
        let start = status.group_started();
        let group = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_group(&mut jobs, status)
        }));
        status.group_finished(start);
        // A panic drops the jobs: their connections close, none is told a
        // write succeeded that may not have.
        if let Ok(replies) = group {
            for (job, replies) in jobs.into_iter().zip(replies) {
                let _ = job.done.send((job.session, job.requests, replies));
            }
        }
        if stop {
            break;
        }
    }
}

/// Replies given since the last commit, whose fate waits on the next one:
/// (job, reply) indices.
type Dependents = Vec<(usize, usize)>;

fn run_group(jobs: &mut [WriteJob], status: &ExecStatus) -> Vec<Vec<Reply>> {
    let mut replies: Vec<Vec<Reply>> = jobs
        .iter()
        .map(|j| Vec::with_capacity(j.requests.len()))
        .collect();
    let Some(state) = jobs.first().map(|j| j.state.clone()) else {
        return replies;
    };
    let mut pending = Pending::default();
    let mut dependents: Dependents = Vec::new();
    for (ji, job) in jobs.iter_mut().enumerate() {
        let mut reply_bytes = 0;
        while reply_bytes < JOB_REPLY_BYTES {
            let Some(args) = job.requests.pop_front() else {
                break;
            };
            if args.first().is_some_and(|n| commits_first(n)) {
                commit(&state, &mut pending, &mut dependents, &mut replies, status);
            }
            let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                execute(&state, &mut job.session, &args, Some(&mut pending))
            }))
            .unwrap_or_else(|_| Reply::err("internal error: the command panicked"));
            // Every reply until the commit depends on it: one that wrote
            // nothing may still have read a pending write (SET NX seeing a
            // key a failed commit never made).
            dependents.push((ji, replies[ji].len()));
            reply_bytes += reply.size_hint();
            replies[ji].push(reply);
            status.write_commands.fetch_add(1, Relaxed);
            if pending.bytes() >= GROUP_MAX_BYTES {
                commit(&state, &mut pending, &mut dependents, &mut replies, status);
            }
        }
    }
    commit(&state, &mut pending, &mut dependents, &mut replies, status);
    replies
}

fn commit(
    state: &State,
    pending: &mut Pending,
    dependents: &mut Dependents,
    replies: &mut [Vec<Reply>],
    status: &ExecStatus,
) {
    if pending.is_empty() {
        return;
    }
    let result = state.store.write(pending.take());
    status.commits.fetch_add(1, Relaxed);
    if let Err(e) = result {
        let err = store_error(e);
        for (j, i) in dependents.drain(..) {
            replies[j][i] = err.clone();
        }
    }
    dependents.clear();
}
