//! The commit queue: writes wait here in arrival order; the writer at the
//! front leads a group (see `write.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

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
    cv: Condvar,
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
            cv: Condvar::new(),
        })
    }

    /// Waits until the writer ahead says to lead (`None`) or hands over
    /// the outcome of the group this write was committed in.
    pub(super) fn wait(&self) -> Option<Result<()>> {
        let mut signal = self.signal.lock();
        loop {
            match std::mem::replace(&mut *signal, Signal::Waiting) {
                Signal::Waiting => self.cv.wait(&mut signal),
                Signal::Lead => return None,
                Signal::Done(result) => return Some(result),
            }
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
