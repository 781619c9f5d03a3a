//! Which versions a compaction must keep (MVCC garbage collection).
//!
//! Versions of a key are grouped into *stripes* by the snapshots that can see
//! them: a stripe is the range of sequence numbers between two consecutive
//! snapshots. Only the newest version in each stripe is visible to anyone, so
//! older ones in the same stripe are dropped. A tombstone in the oldest stripe
//! can be dropped too once no deeper level may hold the key, since nothing
//! older remains for it to hide.

use crate::format::internal_key::SeqNo;

/// Snapshot-aware retention rules for one compaction.
#[derive(Debug, Clone, Default)]
pub struct Retention {
    snapshots: Vec<SeqNo>,
}

impl Retention {
    /// Rules for the live snapshots (any order).
    pub fn new(mut snapshots: Vec<SeqNo>) -> Self {
        snapshots.sort_unstable();
        snapshots.dedup();
        Retention { snapshots }
    }

    /// The stripe of `seq`: the index of the oldest snapshot that sees it,
    /// or `snapshots.len()` for versions newer than every snapshot.
    pub fn stripe(&self, seq: SeqNo) -> usize {
        self.snapshots.partition_point(|&s| s < seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes() {
        let r = Retention::new(vec![10, 5]);
        assert_eq!(r.stripe(3), 0);
        assert_eq!(r.stripe(5), 0);
        assert_eq!(r.stripe(6), 1);
        assert_eq!(r.stripe(10), 1);
        assert_eq!(r.stripe(11), 2);
        assert_eq!(
            Retention::new(vec![]).stripe(99),
            0,
            "no snapshots: one stripe"
        );
    }
}
