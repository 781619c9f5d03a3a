//! YCSB's acknowledged counter: hands out insert sequence numbers and tracks
//! the highest number below which every insert has completed, so readers
//! never choose a key that is still being written.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A counter whose `last()` only moves past values that were acknowledged.
#[derive(Debug)]
pub struct AcknowledgedCounter {
    next: AtomicU64,
    limit: AtomicU64,
    pending: Mutex<BTreeSet<u64>>,
}

impl AcknowledgedCounter {
    /// A counter whose first value is `start`; `last()` starts at `start - 1`.
    pub fn new(start: u64) -> Self {
        AcknowledgedCounter {
            next: AtomicU64::new(start),
            limit: AtomicU64::new(start.wrapping_sub(1)),
            pending: Mutex::new(BTreeSet::new()),
        }
    }

    /// The next sequence number to insert.
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks `v` as written.
    pub fn acknowledge(&self, v: u64) {
        let mut pending = match self.pending.lock() {
            Ok(p) => p,
            Err(p) => p.into_inner(),
        };
        pending.insert(v);
        let mut limit = self.limit.load(Ordering::Relaxed);
        while pending.remove(&limit.wrapping_add(1)) {
            limit = limit.wrapping_add(1);
        }
        self.limit.store(limit, Ordering::Release);
    }

    /// The highest value such that it and every value before it were acknowledged.
    pub fn last(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_only_past_contiguous_acks() {
        let c = AcknowledgedCounter::new(10);
        assert_eq!(c.last(), 9);
        let a = c.next_value();
        let b = c.next_value();
        c.acknowledge(b);
        assert_eq!(c.last(), 9);
        c.acknowledge(a);
        assert_eq!(c.last(), 11);
    }
}
