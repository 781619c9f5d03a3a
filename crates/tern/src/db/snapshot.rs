//! Snapshots: a pinned sequence number that compaction must respect.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::format::internal_key::SeqNo;

/// The set of live snapshots (a multiset of sequence numbers).
#[derive(Default)]
pub struct SnapshotList {
    seqs: Mutex<BTreeMap<SeqNo, usize>>,
}

impl SnapshotList {
    /// Registers a snapshot at the current value of `visible`, read under
    /// the list's lock: compaction reads the list under the same lock, so it
    /// either sees the snapshot or started before the sequence was read (and
    /// then only holds data at or below it, whose newest versions it keeps).
    pub(crate) fn acquire_current(&self, visible: &AtomicU64) -> SeqNo {
        let mut seqs = self.seqs.lock();
        let seq = visible.load(Ordering::Acquire);
        *seqs.entry(seq).or_insert(0) += 1;
        seq
    }

    /// Registers one more snapshot at `seq`, which a live one holds.
    fn acquire(&self, seq: SeqNo) {
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
}

/// A consistent read-only view of the store as of one moment. Reads through
/// it (`ReadOptions::snapshot`) see exactly the writes acknowledged before it
/// was taken. Dropping it lets compaction reclaim the versions it pinned.
pub struct Snapshot {
    seq: SeqNo,
    list: Arc<SnapshotList>,
}

impl Snapshot {
    /// A snapshot at the current visible sequence number.
    pub(crate) fn register(visible: &AtomicU64, list: Arc<SnapshotList>) -> Self {
        let seq = list.acquire_current(visible);
        Snapshot { seq, list }
    }

    /// The sequence number this snapshot reads at.
    pub fn seq(&self) -> SeqNo {
        self.seq
    }

    /// Another registration of the same sequence, for a reader (an
    /// iterator) that may outlive this one.
    pub(crate) fn duplicate(&self) -> Snapshot {
        self.list.acquire(self.seq);
        Snapshot {
            seq: self.seq,
            list: Arc::clone(&self.list),
        }
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

/// Options for reads and iterators.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions<'a> {
    /// Read as of this snapshot; default: the latest state.
    pub snapshot: Option<&'a Snapshot>,
    /// Iterators start at keys `>= lower_bound`.
    pub lower_bound: Option<Vec<u8>>,
    /// Iterators stop before keys `>= upper_bound`.
    pub upper_bound: Option<Vec<u8>>,
    /// Entries an iterator's caller expects to read after a seek (a scan
    /// with a limit). Separated values are read ahead in batches that start
    /// small and double, since a scan may stop early; with the hint the
    /// first batch covers the whole scan, so records of one blob file that
    /// it needs are read together. At most 256 count; a wrong hint costs
    /// time, never results.
    pub scan_len_hint: Option<usize>,
    /// Read the values of a batch one after another even when they are not
    /// in memory. By default, a batch whose values would wait for the
    /// device announces them all first, so the device fetches them
    /// together (`docs/engine.md`, "Scans read separated values in
    /// batches"); this turns that off, for comparison or for a device that
    /// serves one read at a time best. Default: false.
    pub serial_reads: bool,
    /// Never read blob files: an iterator serves each separated value by
    /// its head, the first `blob_head_size` bytes kept beside its
    /// reference (`DbIterator::value_is_head` tells which). For walks that
    /// need keys and value headers only (counting, expiry). Default: false.
    pub value_heads: bool,
}
