//! The publisher: the committer's second stage under `appendfsync always`.
//!
//! A synced commit is mostly a wait for the fsync, and a committer that
//! waited for each one left the device idle while it ran the next group's
//! commands. So it writes each group unpublished ([`tern::Unpublished`]:
//! in the WAL and the memtable, seen by no reader but the committer) and
//! hands it here, then goes on with the next group while this thread syncs
//! and publishes. Every write this thread takes at once shares one fsync.
//!
//! Replies wait here behind the writes they may depend on (the queue keeps
//! the committer's order), so no client hears of a write, or of a read of
//! one, before it is durable. Once a sync or publication fails, the store
//! is poisoned and every reply after that point becomes the error: the
//! commands behind the failed write may have read it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use super::committer::{JobDone, WriteJob};
use super::status::ExecStatus;
use crate::commands::store_error;
use crate::resp::Reply;

/// Stages the committer may run ahead of the publisher.
const QUEUE: usize = 16;

/// Groups handed over and not yet answered that the committer may have
/// before it takes another: one syncing and one written behind it. More
/// would only split the writes that queue during a sync into more, smaller
/// groups, each costing a commit's work: with no limit, one request per
/// client at a time (`redis-benchmark -P 1 -c 50`) ran 7–15% slower than
/// without the publisher.
const GROUPS_AHEAD: usize = 2;

/// Groups handed over and not yet answered.
#[derive(Default)]
struct InFlight {
    groups: parking_lot::Mutex<usize>,
    answered: parking_lot::Condvar,
}

/// What the committer hands the publisher, in its order.
pub enum Stage {
    /// A commit to sync and publish.
    Written(tern::Unpublished),
    /// A group's jobs and their replies, to send once everything written
    /// before them is published.
    Done(Vec<WriteJob>, Vec<Vec<Reply>>),
}

/// The publisher thread and its queue.
pub struct Publisher {
    tx: Option<Sender<Stage>>,
    thread: Option<JoinHandle<()>>,
    in_flight: Arc<InFlight>,
}

impl Publisher {
    /// Starts the publisher thread; a running sync shows in `status`.
    pub fn start(status: Arc<ExecStatus>) -> std::io::Result<Publisher> {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let in_flight = Arc::new(InFlight::default());
        let flight = in_flight.clone();
        let thread = std::thread::Builder::new()
            .name("tern-publish".into())
            .spawn(move || run(rx, &status, &flight))?;
        Ok(Publisher {
            tx: Some(tx),
            thread: Some(thread),
            in_flight,
        })
    }

    /// Waits until the committer may take another group: fewer than
    /// [`GROUPS_AHEAD`] handed over and not yet answered.
    pub fn wait_for_room(&self) {
        let mut n = self.in_flight.groups.lock();
        while *n >= GROUPS_AHEAD && self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            self.in_flight
                .answered
                .wait_for(&mut n, std::time::Duration::from_millis(10));
        }
    }

    /// Hands `stage` over; waits while the queue is full. If the thread is
    /// gone, an unpublished write is dropped (which poisons the store) and
    /// jobs are dropped (their connections close).
    pub fn send(&self, stage: Stage) {
        if let Some(tx) = &self.tx {
            let group = matches!(stage, Stage::Done(..));
            if group {
                *self.in_flight.groups.lock() += 1;
            }
            if tx.send(stage).is_err() && group {
                *self.in_flight.groups.lock() -= 1;
            }
        }
    }
}

impl Drop for Publisher {
    /// Publishes and answers everything handed over, then stops.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(rx: Receiver<Stage>, status: &ExecStatus, in_flight: &InFlight) {
    // Set once a sync or publication failed.
    let mut failed: Option<Reply> = None;
    while let Ok(first) = rx.recv() {
        let mut stages = VecDeque::from([first]);
        while let Ok(s) = rx.try_recv() {
            stages.push_back(s);
        }
        // Replies behind writes already published go out at once.
        while let Some(Stage::Done(..)) = stages.front() {
            if let Some(Stage::Done(jobs, replies)) = stages.pop_front() {
                answer(jobs, replies, failed.as_ref(), in_flight);
            }
        }
        // One fsync for all: the last write's covers those before it.
        if failed.is_none() {
            let last = stages.iter().rev().find_map(|s| match s {
                Stage::Written(w) => Some(w),
                Stage::Done(..) => None,
            });
            if let Some(last) = last {
                let start = status.publish_started();
                let synced = last.sync();
                status.publish_finished(start);
                if let Err(e) = synced {
                    failed = Some(store_error(e.into()));
                }
            }
        }
        for s in stages {
            match s {
                Stage::Written(w) => {
                    if failed.is_none() {
                        if let Err(e) = w.publish() {
                            failed = Some(store_error(e.into()));
                        }
                    }
                    // Else dropped: the store is poisoned already.
                }
                Stage::Done(jobs, replies) => answer(jobs, replies, failed.as_ref(), in_flight),
            }
        }
    }
}

/// Sends each job its replies, or `failed` for every one.
fn answer(
    jobs: Vec<WriteJob>,
    replies: Vec<Vec<Reply>>,
    failed: Option<&Reply>,
    in_flight: &InFlight,
) {
    for (job, mut replies) in jobs.into_iter().zip(replies) {
        if let Some(err) = failed {
            replies.fill(err.clone());
        }
        let _ = job.done.send(JobDone {
            session: job.session,
            rest: job.requests,
            replies,
            ran: job.ran,
        });
    }
    *in_flight.groups.lock() -= 1;
    in_flight.answered.notify_one();
}
