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
use super::{Request, JOB_REPLY_BYTES};
use crate::commands::{execute, store_error, Access, Session};
use crate::pending::Pending;
use crate::resp::Reply;
use crate::state::State;

/// Most jobs taken into one commit group.
const MAX_JOBS: usize = 4096;
/// Pending bytes that make the committer commit before the group ends.
const GROUP_MAX_BYTES: usize = 4 << 20;

/// Commands that commit what is pending before they run (they write to the
/// engine themselves).
fn commits_first(args: &[Vec<u8>]) -> bool {
    args.first()
        .is_some_and(|n| n.eq_ignore_ascii_case(b"flushdb") || n.eq_ignore_ascii_case(b"flushall"))
}

/// What a job hands back: the session, the requests it did not run, and
/// the replies of those it did.
pub type JobDone = (Session, VecDeque<Request>, Vec<Reply>);

/// One connection's run of write commands.
pub struct WriteJob {
    /// Shared state.
    pub state: Arc<State>,
    /// The connection's session, handed back with the replies.
    pub session: Session,
    /// The requests, in order; those not run (see [`JOB_REPLY_BYTES`]) go
    /// back with the replies.
    pub requests: VecDeque<Request>,
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
        requests: VecDeque<Request>,
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

fn run_group(jobs: &mut [WriteJob], status: &ExecStatus) -> Vec<Vec<Reply>> {
    let mut replies: Vec<Vec<Reply>> = jobs
        .iter()
        .map(|j| Vec::with_capacity(j.requests.len()))
        .collect();
    let Some(state) = jobs.first().map(|j| j.state.clone()) else {
        return replies;
    };
    let mut pending = Pending::default();
    // Per job, how many of its replies a commit has settled; the rest wait
    // on the next commit.
    let mut settled = vec![0; jobs.len()];
    for (ji, job) in jobs.iter_mut().enumerate() {
        let mut reply_bytes = 0;
        while reply_bytes < JOB_REPLY_BYTES {
            let Some(req) = job.requests.pop_front() else {
                break;
            };
            if commits_first(&req.args) {
                commit(&state, &mut pending, &mut replies, &mut settled, status);
            }
            let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                execute(
                    &state,
                    &mut job.session,
                    &req.args,
                    Access::Write(&mut pending),
                )
            }))
            .unwrap_or_else(|_| Reply::err("internal error: the command panicked"));
            reply_bytes += reply.size_hint();
            replies[ji].push(reply);
            if pending.bytes() >= GROUP_MAX_BYTES {
                commit(&state, &mut pending, &mut replies, &mut settled, status);
            }
        }
    }
    commit(&state, &mut pending, &mut replies, &mut settled, status);
    replies
}

/// Commits what is pending. Every reply given since the last commit waits
/// on this one, not only those that wrote: a command that wrote nothing may
/// have read a pending write (SET NX seeing a key a failed commit never
/// made). If the commit fails, they all become the error.
fn commit(
    state: &State,
    pending: &mut Pending,
    replies: &mut [Vec<Reply>],
    settled: &mut [usize],
    status: &ExecStatus,
) {
    if !pending.is_empty() {
        let result = state.store.write(pending.take());
        status.commits.fetch_add(1, Relaxed);
        if let Err(e) = result {
            let err = store_error(e);
            for (r, s) in replies.iter_mut().zip(settled.iter()) {
                r[*s..].fill(err.clone());
            }
        }
    }
    for (r, s) in replies.iter().zip(settled.iter_mut()) {
        *s = r.len();
    }
}
