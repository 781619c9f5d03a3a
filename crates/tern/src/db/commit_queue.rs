//! The commit queue: writes wait here in arrival order; the writer at the
//! front leads a group (see `write.rs`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::format::write_batch::WriteBatch;
use crate::options::WriteOptions;

/// Pending writes, oldest first.
pub type CommitQueue = Mutex<VecDeque<Arc<Writer>>>;

/// A pending write in the commit queue.
pub struct Writer {
    /// Taken by the group leader.
    pub(super) batch: Mutex<Option<WriteBatch>>,
    /// Encoded size of the batch, so grouping needs no lock per writer.
    pub(super) size: usize,
    pub(super) opts: WriteOptions,
    /// Switch the memtable even if it is not full (used by `flush`).
    pub(super) force_switch: bool,
    /// What the leader ahead tells this writer. A waiting writer holds no
    /// lock but its own: with the queue's mutex behind the wait, every
    /// follower woke into a fight for that mutex with the writers joining,
    /// and on a busy machine a woken thread that lost it waited whole
    /// scheduler ticks.
    signal: Mutex<Signal>,
    /// Set once `signal` has held news, so a waiter can poll without the
    /// lock. Never cleared: a writer leads after one wait or returns, and
    /// a stale flag would only cut a later poll short.
    told: AtomicBool,
    cv: Condvar,
}

/// How long a waiting writer polls before it sleeps. A group commits in a
/// few microseconds (one WAL `write`, memtable inserts), less than a
/// futex sleep and wake-up costs the follower and the leader together;
/// with more writers than cores the woken follower then waits for a core
/// besides. RocksDB's write thread polls the same way (up to 100 µs,
/// `max_yield_usec`).
const POLL_FOR: Duration = Duration::from_micros(50);

/// Polls with the CPU's pause hint before yielding the core between polls,
/// for a group that is nearly done.
const SPIN_POLLS: u32 = 64;

/// A yield that takes this long gave the core to another thread: the
/// cores are busy, and polling takes time from threads with work to do.
const SLOW_YIELD: Duration = Duration::from_micros(3);

/// Slow yields (not necessarily in a row) after which a waiter stops
/// polling and sleeps.
const MAX_SLOW_YIELDS: u32 = 3;

/// What a waiting writer is told.
enum Signal {
    Waiting,
    /// It is at the front of the queue: lead the next group.
    Lead,
    /// A leader committed its batch in a group, with this outcome.
    Done(Result<()>),
}

impl Writer {
    pub(super) fn new(
        batch: Option<WriteBatch>,
        opts: WriteOptions,
        force_switch: bool,
    ) -> Arc<Self> {
        Arc::new(Writer {
            size: batch.as_ref().map_or(0, WriteBatch::approximate_size),
            batch: Mutex::new(batch),
            opts,
            force_switch,
            signal: Mutex::new(Signal::Waiting),
            told: AtomicBool::new(false),
            cv: Condvar::new(),
        })
    }

    /// Waits until the writer ahead says to lead (`None`) or hands over
    /// the outcome of the group this write was committed in.
    pub(super) fn wait(&self) -> Option<Result<()>> {
        self.poll();
        let mut signal = self.signal.lock();
        loop {
            match std::mem::replace(&mut *signal, Signal::Waiting) {
                Signal::Waiting => self.cv.wait(&mut signal),
                Signal::Lead => return None,
                Signal::Done(result) => return Some(result),
            }
        }
    }

    /// Polls for news for up to [`POLL_FOR`], spinning first, then giving
    /// the core away between polls (to the leader, when it is the thread
    /// waiting for it). Returns early once told; the caller takes the news
    /// under the lock either way.
    fn poll(&self) {
        for _ in 0..SPIN_POLLS {
            if self.told.load(Ordering::Acquire) {
                return;
            }
            std::hint::spin_loop();
        }
        let start = Instant::now();
        let mut last = start;
        let mut slow = 0;
        while !self.told.load(Ordering::Acquire) {
            std::thread::yield_now();
            let now = Instant::now();
            if now - start >= POLL_FOR {
                return;
            }
            if now - last >= SLOW_YIELD {
                slow += 1;
                if slow >= MAX_SLOW_YIELDS {
                    return;
                }
            }
            last = now;
        }
    }

    /// Tells the writer now at the front of the queue to lead.
    pub(super) fn lead(&self) {
        self.tell(Signal::Lead);
    }

    /// Hands a follower the outcome of the group it was committed in.
    pub(super) fn finish(&self, result: Result<()>) {
        self.tell(Signal::Done(result));
    }

    fn tell(&self, s: Signal) {
        *self.signal.lock() = s;
        self.told.store(true, Ordering::Release);
        self.cv.notify_one();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_gets_what_it_was_told_before_it_waits() {
        let w = Writer::new(None, WriteOptions::default(), false);
        w.lead();
        assert!(w.wait().is_none(), "told to lead");
        w.finish(Err(crate::Error::Closed));
        assert!(matches!(w.wait(), Some(Err(crate::Error::Closed))));
    }

    #[test]
    fn a_writer_told_from_another_thread_at_any_moment_wakes() {
        // Telling races the wait: before it, while the waiter takes its
        // lock, or once it sleeps. A lost wake-up hangs the test.
        for i in 0..2000 {
            let w = Writer::new(None, WriteOptions::default(), false);
            let teller = {
                let w = w.clone();
                std::thread::spawn(move || {
                    if i % 2 == 0 {
                        w.lead();
                    } else {
                        w.finish(Ok(()));
                    }
                })
            };
            let got = w.wait();
            teller.join().unwrap();
            assert_eq!(got.is_none(), i % 2 == 0, "round {i}");
        }
    }
}
