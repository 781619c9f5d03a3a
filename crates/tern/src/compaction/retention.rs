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

    /// The snapshots, ascending.
    pub fn snapshots(&self) -> &[SeqNo] {
        &self.snapshots
    }

    /// The stripe of `seq`: the index of the oldest snapshot that sees it,
    /// or `snapshots.len()` for versions newer than every snapshot.
    pub fn stripe(&self, seq: SeqNo) -> usize {
        self.snapshots.partition_point(|&s| s < seq)
    }
}

/// Where one version stands among the versions of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// The first version seen of its user key.
    pub new_key: bool,
    /// Its stripe ([`Retention::stripe`]).
    pub stripe: usize,
    /// A newer version of the key in the same stripe hides it from everyone.
    pub shadowed: bool,
}

/// Classifies versions fed in internal-key order (user key ascending, each
/// key's newest version first): the walk flush and compaction share to
/// decide what they may drop.
#[derive(Debug)]
pub struct VersionWalk<'a> {
    retention: &'a Retention,
    key: Vec<u8>,
    have_key: bool,
    last_stripe: usize,
}

impl<'a> VersionWalk<'a> {
    /// A walk under `retention`'s snapshots.
    pub fn new(retention: &'a Retention) -> Self {
        VersionWalk {
            retention,
            key: Vec::new(),
            have_key: false,
            last_stripe: usize::MAX,
        }
    }

    /// Places the next version, `user_key` at sequence `seq`.
    pub fn place(&mut self, user_key: &[u8], seq: SeqNo) -> Placed {
        let new_key = !self.have_key || user_key != self.key.as_slice();
        if new_key {
            self.key.clear();
            self.key.extend_from_slice(user_key);
            self.have_key = true;
            self.last_stripe = usize::MAX;
        }
        let stripe = self.retention.stripe(seq);
        let shadowed = stripe == self.last_stripe;
        self.last_stripe = stripe;
        Placed {
            new_key,
            stripe,
            shadowed,
        }
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

    #[test]
    fn walk_hides_all_but_the_newest_version_per_stripe() {
        let r = Retention::new(vec![5]);
        let mut w = VersionWalk::new(&r);
        let shadowed: Vec<bool> = [(b"a", 9), (b"a", 7), (b"a", 5), (b"a", 2), (b"b", 3)]
            .iter()
            .map(|(k, seq)| w.place(&k[..], *seq).shadowed)
            .collect();
        // a@9 kept, a@7 hidden by it, a@5 seen by the snapshot, a@2 hidden
        // by a@5, b@3 is a new key.
        assert_eq!(shadowed, [false, true, false, true, false]);
        // An empty first key is still a new key.
        let mut w = VersionWalk::new(&r);
        assert!(w.place(b"", 1).new_key);
        assert!(!w.place(b"", 0).new_key);
    }
}
