//! Snapshots: a pinned sequence number that compaction must respect.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::format::internal_key::SeqNo;

/// The set of live snapshots (a multiset of sequence numbers).
#[derive(Default)]
pub struct SnapshotList {
    seqs: Mutex<BTreeMap<SeqNo, usize>>,
}

impl SnapshotList {
    pub(crate) fn acquire(&self, seq: SeqNo) {
        *self.seqs.lock().entry(seq).or_insert(0) += 1;
    }

    pub(crate) fn release(&self, seq: SeqNo) {
        let mut seqs = self.seqs.lock();
        if let Some(n) = seqs.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                seqs.remove(&seq);
            }
        }
    }

    /// Sequence numbers of all live snapshots, ascending.
    pub fn all(&self) -> Vec<SeqNo> {
        self.seqs.lock().keys().copied().collect()
    }

    /// Number of distinct live snapshots.
    pub fn len(&self) -> usize {
        self.seqs.lock().len()
    }

    /// True when no snapshot is live.
    pub fn is_empty(&self) -> bool {
        self.seqs.lock().is_empty()
    }
}

/// A consistent read-only view of the store as of one moment. Reads through
/// it (`ReadOptions::snapshot`) see exactly the writes acknowledged before it
/// was taken. Dropping it lets compaction reclaim the versions it pinned.
pub struct Snapshot {
    seq: SeqNo,
    list: Arc<SnapshotList>,
}

impl Snapshot {
    pub(crate) fn new(seq: SeqNo, list: Arc<SnapshotList>) -> Self {
        list.acquire(seq);
        Snapshot { seq, list }
    }

    /// The sequence number this snapshot reads at.
    pub fn seq(&self) -> SeqNo {
        self.seq
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.list.release(self.seq);
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot").field("seq", &self.seq).finish()
    }
}
