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
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use super::status::ExecStatus;
use super::{Request, JOB_REPLY_BYTES};
use crate::commands::{execute_in_run, store_error, Access, RunClock, Session};
use crate::expiry::now_ms;
use crate::key_cache::{Fingerprint, KeyCache};
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

/// What a job hands back.
pub struct JobDone {
    /// The connection's session.
    pub session: Session,
    /// The requests it did not run, in order.
    pub rest: VecDeque<Request>,
    /// The replies of those it ran.
    pub replies: Vec<Reply>,
    /// The requests it ran, for the connection's thread to drop: their
    /// arguments were allocated there, and freeing memory of another
    /// thread is the allocator's slow path (a sixth of the committer's time
    /// under pipelined `MSET`s when it freed them itself).
    pub ran: Vec<Request>,
}

/// One connection's run of write commands.
pub struct WriteJob {
    /// Shared state.
    pub state: Arc<State>,
    /// The connection's session, handed back with the replies.
    pub session: Session,
    /// The requests, in order; those not run (see [`JOB_REPLY_BYTES`]) go
    /// back with the replies.
    pub requests: VecDeque<Request>,
    /// The requests run, handed back with the replies ([`JobDone::ran`]).
    pub ran: Vec<Request>,
    /// Where the session, the requests not run and the replies go.
    pub done: tokio::sync::oneshot::Sender<JobDone>,
}

/// What the committer's queue carries.
enum Work {
    /// Commands to run.
    Job(WriteJob),
    /// Delete keys whose expiry has passed.
    Expire(Arc<State>),
    /// Finish and stop.
    Stop,
}

/// The committer thread and its queue.
pub struct Committer {
    tx: Sender<Work>,
    /// An expiry cycle is queued (at most one is).
    expire_queued: Arc<std::sync::atomic::AtomicBool>,
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
        let expire_queued = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let queued = expire_queued.clone();
        let thread = std::thread::Builder::new()
            .name("tern-commit".into())
            .spawn(move || run(rx, &st, &queued))?;
        Ok(Committer {
            tx,
            expire_queued,
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
            ran: Vec::with_capacity(requests.len()),
            requests,
            done,
        };
        if self.tx.send(Work::Job(job)).is_err() {
            self.status.write_queue.fetch_sub(1, Relaxed);
            return None;
        }
        rx.await.ok()
    }

    /// Queues an active expiry cycle unless one is queued already.
    pub fn expire(&self, state: Arc<State>) {
        if !self.expire_queued.swap(true, Relaxed) && self.tx.send(Work::Expire(state)).is_err() {
            self.expire_queued.store(false, Relaxed);
        }
    }

    /// Finishes the queued jobs and stops the thread.
    pub fn stop(&self) {
        let _ = self.tx.send(Work::Stop);
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

fn run(rx: Receiver<Work>, status: &ExecStatus, expire_queued: &AtomicBool) {
    let mut expiry = ExpiryCursor::default();
    // Taken by each group and handed back; a group that panics leaves an
    // empty one, which is still exact.
    let mut cache = KeyCache::default();
    while let Ok(work) = rx.recv() {
        let mut jobs = Vec::new();
        let mut stop = false;
        let mut expire = None;
        match work {
            Work::Job(j) => jobs.push(j),
            Work::Expire(state) => expire = Some(state),
            Work::Stop => stop = true,
        }
        while !stop && expire.is_none() && jobs.len() < MAX_JOBS {
            match rx.try_recv() {
                Ok(Work::Job(j)) => jobs.push(j),
                Ok(Work::Expire(state)) => expire = Some(state),
                Ok(Work::Stop) => stop = true,
                Err(_) => break,
            }
        }
        status.write_queue.fetch_sub(jobs.len(), Relaxed);
        if !jobs.is_empty() {
            let start = status.group_started();
            let group = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_group(&mut jobs, status, &mut cache)
            }));
            status.group_finished(start);
            // A panic drops the jobs: their connections close, none is told a
            // write succeeded that may not have.
            if let Ok(replies) = group {
                for (job, replies) in jobs.into_iter().zip(replies) {
                    let _ = job.done.send(JobDone {
                        session: job.session,
                        rest: job.requests,
                        replies,
                        ran: job.ran,
                    });
                }
            }
        }
        if let Some(state) = expire {
            expire_queued.store(false, Relaxed);
            let start = status.group_started();
            let cycle = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                expire_cycle(&state, &mut expiry, &mut cache)
            }));
            status.group_finished(start);
            match cycle {
                Ok(Ok(n)) => {
                    state.metrics.expired_keys.fetch_add(n, Relaxed);
                }
                Ok(Err(e)) => tracing::error!("tern serve: active expiry failed: {e}"),
                Err(_) => tracing::error!("tern serve: active expiry panicked"),
            }
        }
        if stop {
            break;
        }
    }
}

/// Expiry index entries one cycle step reads.
const EXPIRE_BATCH: usize = 256;
/// Longest an expiry cycle holds the committer.
const EXPIRE_BUDGET: std::time::Duration = std::time::Duration::from_millis(25);

/// Where active expiry resumes: entries before it were handled (their
/// tombstones need not be walked again).
#[derive(Default)]
struct ExpiryCursor {
    generation: u32,
    from: u64,
}

/// Deletes keys whose expiry passed, oldest first, through the expiry
/// index, for up to [`EXPIRE_BUDGET`]; returns how many it deleted. Each
/// step is one commit, like any other write group.
fn expire_cycle(
    state: &State,
    cursor: &mut ExpiryCursor,
    cache: &mut KeyCache,
) -> crate::store::StoreResult<u64> {
    let store = &state.store;
    // Exact (kept in the same batches as the index entries): with no key
    // to expire there is no index to walk, and an engine iterator is not
    // free (it orders the memtable's deferred writes on this thread).
    if store.meta().expires == 0 {
        return Ok(0);
    }
    let mut pending = Pending::new(store.layout(), store.meta(), std::mem::take(cache));
    if let Some(c) = &state.cluster {
        pending.set_importing(c.view().importing());
    }
    let result = expire_steps(store, cursor, &mut pending);
    *cache = pending.into_cache();
    result
}

fn expire_steps(
    store: &crate::store::Store,
    cursor: &mut ExpiryCursor,
    pending: &mut Pending,
) -> crate::store::StoreResult<u64> {
    let started = std::time::Instant::now();
    let mut deleted = 0;
    loop {
        let gen = pending.generation();
        if cursor.generation != gen {
            *cursor = ExpiryCursor {
                generation: gen,
                from: 0,
            };
        }
        let now = now_ms();
        // Entries below the cursor were handled, unless one was written
        // there since (a clock that stepped back) or the clock itself is
        // now behind the cursor.
        let floor = store.take_expiry_floor();
        if floor < cursor.from || now < cursor.from {
            cursor.from = floor.min(now);
        }
        let due = store.due_expiries(gen, cursor.from, now, EXPIRE_BATCH)?;
        for (at, key) in &due {
            if pending.expire(store, key, *at)? {
                deleted += 1;
            }
        }
        let (batch, meta) = pending.take();
        let result = store.commit(batch, meta);
        pending.settle(store, result.is_ok());
        result?;
        // Moved only once the deletes committed.
        if let Some((at, _)) = due.last() {
            cursor.from = *at;
        }
        if due.len() < EXPIRE_BATCH || started.elapsed() >= EXPIRE_BUDGET {
            return Ok(deleted);
        }
    }
}

fn run_group(jobs: &mut [WriteJob], status: &ExecStatus, cache: &mut KeyCache) -> Vec<Vec<Reply>> {
    let mut replies: Vec<Vec<Reply>> = jobs
        .iter()
        .map(|j| Vec::with_capacity(j.requests.len()))
        .collect();
    let Some(state) = jobs.first().map(|j| j.state.clone()) else {
        return replies;
    };
    let mut pending = Pending::new(
        state.store.layout(),
        state.store.meta(),
        std::mem::take(cache),
    );
    // Per job, how many of its replies a commit has settled; the rest wait
    // on the next commit.
    let mut settled = vec![0; jobs.len()];
    let mut clock = RunClock::start();
    // The key of each request (its first argument, where every write
    // command but a few names it) is fingerprinted one job ahead and its
    // cache slot fetched, so that the cache misses of a job's commands
    // overlap with the job before instead of stalling one by one.
    let keys_of = |pending: &Pending, job: Option<&WriteJob>| -> Vec<Option<Fingerprint>> {
        job.map_or_else(Vec::new, |job| {
            job.requests
                .iter()
                .map(|r| r.args.get(1).map(|k| pending.prefetch(k)))
                .collect()
        })
    };
    let mut next = keys_of(&pending, jobs.first());
    for ji in 0..jobs.len() {
        let keys = std::mem::replace(&mut next, keys_of(&pending, jobs.get(ji + 1)));
        let job = &mut jobs[ji];
        // At least as new as the view the job was routed with: writes to a
        // slot being imported leave import markers.
        if let Some(c) = &state.cluster {
            pending.set_importing(c.view().importing());
        }
        let mut reply_bytes = 0;
        let mut ri = 0;
        while reply_bytes < JOB_REPLY_BYTES {
            let Some(req) = job.requests.pop_front() else {
                break;
            };
            if let (Some(key), Some(&Some(fp))) = (req.args.get(1), keys.get(ri)) {
                pending.expect(key, fp);
            }
            ri += 1;
            // FLUSHDB writes to the engine itself: it runs between two
            // commits, so a later commit's failure cannot turn its reply
            // into an error.
            let alone = commits_first(&req.args);
            if alone {
                commit(&state, &mut pending, &mut replies, &mut settled, status);
                clock.restart();
            }
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                execute_in_run(
                    &state,
                    &mut job.session,
                    &req.args,
                    Access::Write(&mut pending),
                    &mut clock,
                )
            }));
            let Ok(reply) = ran else {
                // What the command wrote so far is half a command (half an
                // EXEC): nothing pending is committed, and every reply that
                // waited on it, this one's included, becomes the error.
                let err = Reply::err("internal error: the command panicked; nothing it or the commands grouped with it wrote was kept");
                replies[ji].push(err.clone());
                job.ran.push(req);
                abandon(&state, &mut pending, &mut replies, &mut settled, err);
                continue;
            };
            job.ran.push(req);
            reply_bytes += reply.size_hint();
            replies[ji].push(reply);
            if alone || pending.bytes() >= GROUP_MAX_BYTES {
                commit(&state, &mut pending, &mut replies, &mut settled, status);
                clock.restart();
            }
        }
    }
    commit(&state, &mut pending, &mut replies, &mut settled, status);
    *cache = pending.into_cache();
    replies
}

/// Drops what is pending without committing it: every reply given since
/// the last commit becomes `err`.
fn abandon(
    state: &State,
    pending: &mut Pending,
    replies: &mut [Vec<Reply>],
    settled: &mut [usize],
    err: Reply,
) {
    if !pending.is_empty() {
        let _ = pending.take();
    }
    pending.settle(&state.store, false);
    for (r, s) in replies.iter_mut().zip(settled.iter_mut()) {
        r[*s..].fill(err.clone());
        *s = r.len();
    }
}

/// Commits what is pending. Every reply given since the last commit waits
/// on this one, not only those that wrote: a command that wrote nothing may
/// have read a pending write (SET NX seeing a key a failed commit never
/// made). If the commit fails, they all become the error. Either way the
/// next writes start from the store's committed counts and generation
/// (which FLUSHDB changes without going through `pending`).
fn commit(
    state: &State,
    pending: &mut Pending,
    replies: &mut [Vec<Reply>],
    settled: &mut [usize],
    status: &ExecStatus,
) {
    let mut committed = true;
    if !pending.is_empty() {
        let (batch, meta) = pending.take();
        // A cluster node that may have lost its slots (its registration
        // lapsed) writes nothing: the group fails, and retrying elsewhere
        // is safe because nothing here took effect.
        let fenced = state.cluster.as_ref().is_some_and(|c| !c.lease_fresh());
        let result = if fenced {
            Err(Reply::Error(
                "TRYAGAIN the node lost touch with the cluster; nothing was written, retry".into(),
            ))
        } else {
            state.store.commit(batch, meta).map_err(store_error)
        };
        status.commits.fetch_add(1, Relaxed);
        if let Err(err) = result {
            committed = false;
            for (r, s) in replies.iter_mut().zip(settled.iter()) {
                r[*s..].fill(err.clone());
            }
        }
    }
    pending.settle(&state.store, committed);
    for (r, s) in replies.iter().zip(settled.iter_mut()) {
        *s = r.len();
    }
}
