//! The commit queue: writes wait here in arrival order; the writer at the
//! front leads a group (see `write.rs`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Polls with the CPU's pause hint before yielding the core between polls,
/// for a group that is nearly done.
const SPIN_POLLS: u32 = 64;

/// A yield that takes this long gave the core to another thread: the
/// cores are busy, and polling takes time from threads with work to do.
const SLOW_YIELD: Duration = Duration::from_micros(3);

/// Slow yields (not necessarily in a row) after which a waiter stops
/// polling and sleeps.
const MAX_SLOW_YIELDS: u32 = 3;

/// How many waiting writers may poll at once: two per core. A poller
/// takes a core between its yields, and with many more of them than cores
/// (sixteen writers on two) they took the cores from the leader and the
/// background work: a 2M-record load with 16 threads ran at 142k and 179k
/// inserts/s with every follower polling, 182k and 213k with four at most,
/// and 205k and 222k with none. YCSB A with 4 threads kept its gain at
/// four (186k and 220k, against 174k and 183k with all polling); at two it
/// lost it (151k). The rest sleep at once. Each running compaction or
/// GC job takes two slots ([`PollSlots::background_job`]): a poller holds
/// a core the job could use, and on a store that mostly writes the jobs
/// run all the time (updates about 1.06× with it).
pub struct PollSlots {
    used: AtomicUsize,
    max: usize,
    /// Background jobs running now.
    busy: AtomicUsize,
}

impl PollSlots {
    /// `max` pollers at once.
    pub fn new(max: usize) -> PollSlots {
        PollSlots {
            used: AtomicUsize::new(0),
            max,
            busy: AtomicUsize::new(0),
        }
    }

    /// Two pollers per core of this machine, for one store (each store
    /// open in a process has its own).
    pub fn for_this_machine() -> PollSlots {
        PollSlots::new(2 * std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    fn take(&self) -> bool {
        let max = self
            .max
            .saturating_sub(2 * self.busy.load(Ordering::Relaxed));
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |u| {
                (u < max).then_some(u + 1)
            })
            .is_ok()
    }

    /// Marks a background job (compaction or GC) running until the guard
    /// drops.
    pub fn background_job(&self) -> BusyGuard<'_> {
        self.busy.fetch_add(1, Ordering::Relaxed);
        BusyGuard(self)
    }

    fn give(&self) {
        self.used.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A running background job, for [`PollSlots::background_job`].
pub struct BusyGuard<'a>(&'a PollSlots);

impl Drop for BusyGuard<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

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
    /// It polls for up to `poll_for` first (zero: it sleeps at once) if
    /// it gets one of `slots`.
    pub(super) fn wait(&self, poll_for: Duration, slots: &PollSlots) -> Option<Result<()>> {
        if !poll_for.is_zero() && slots.take() {
            self.poll(poll_for);
            slots.give();
        }
        let mut signal = self.signal.lock();
        loop {
            match std::mem::replace(&mut *signal, Signal::Waiting) {
                Signal::Waiting => self.cv.wait(&mut signal),
                Signal::Lead => return None,
                Signal::Done(result) => return Some(result),
            }
        }
    }

    /// Polls for news for up to `poll_for` (`write_thread_max_yield_usec`),
    /// spinning first, then giving the core away between polls (to the
    /// leader, when it is the thread waiting for it). Returns early once
    /// told; the caller takes the news under the lock either way.
    ///
    /// A group commits in a few microseconds (one WAL `write`, memtable
    /// inserts), less than a futex sleep and wake-up costs the follower
    /// and the leader together; with more writers than cores the woken
    /// follower then waits for a core besides. RocksDB's write thread
    /// polls the same way (up to 100 µs by default).
    fn poll(&self, poll_for: Duration) {
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
            if now - start >= poll_for {
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

    const POLL: Duration = Duration::from_micros(50);

    #[test]
    fn no_more_writers_poll_at_once_than_the_slots_allow() {
        let slots = PollSlots::new(2);
        assert!(slots.take() && slots.take());
        assert!(!slots.take(), "a third poller sleeps at once");
        slots.give();
        assert!(slots.take(), "a slot given back is taken again");
        assert!(!slots.take());
    }

    #[test]
    fn each_running_background_job_takes_two_slots_from_the_pollers() {
        let slots = PollSlots::new(4);
        let compaction = slots.background_job();
        assert!(slots.take() && slots.take());
        assert!(!slots.take(), "two of four slots left to pollers");
        slots.give();
        slots.give();
        let gc = slots.background_job();
        assert!(!slots.take(), "no poller while two jobs run");
        drop(compaction);
        drop(gc);
        assert!((0..4).all(|_| slots.take()), "all four back once they end");
    }

    #[test]
    fn a_writer_gets_what_it_was_told_before_it_waits() {
        let w = Writer::new(None, WriteOptions::default(), false);
        w.lead();
        assert!(w.wait(POLL, &PollSlots::new(1)).is_none(), "told to lead");
        w.finish(Err(crate::Error::Closed));
        assert!(matches!(
            w.wait(POLL, &PollSlots::new(1)),
            Some(Err(crate::Error::Closed))
        ));
    }

    #[test]
    fn a_writer_told_from_another_thread_at_any_moment_wakes() {
        // Telling races the wait: before it, while the waiter takes its
        // lock, or once it sleeps; polling first, sleeping at once, or
        // finding every poll slot taken. A lost wake-up hangs the test.
        for i in 0..3000 {
            let (poll_for, slots) = match (i / 2) % 3 {
                0 => (POLL, 1),
                1 => (Duration::ZERO, 1),
                _ => (POLL, 0),
            };
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
            let got = w.wait(poll_for, &PollSlots::new(slots));
            teller.join().unwrap();
            assert_eq!(got.is_none(), i % 2 == 0, "round {i}");
        }
    }
}
