//! A tier table: a skiplist in the tier's memory, made by copying a full
//! memtable's arena in one piece and adding its extent's start to every
//! link (no key or value is re-encoded or moved), and grown afterwards by
//! relinking newer tables' nodes into it (`merge.rs`).

use std::sync::Arc;

use parking_lot::Mutex;

use super::memory::{Extent, TierMemory};
use super::scan::{scan, ScanError};
use crate::error::{Error, Result};
use crate::format::bloom::{bloom_hash, BloomBuilder, BloomFilter};
use crate::format::internal_key::{self, SeqNo};
use crate::format::version_edit::TierTableMeta;
use crate::memtable::skiplist::{Nodes, HEAD, MAX_HEIGHT};
use crate::memtable::{ListCursor, MemTable, NodeList};

/// Bits per key of a tier table's filter when the store writes no table
/// filters: the tier's filters live in memory only and always pay off.
const DEFAULT_FILTER_BITS: u32 = 10;

/// One table of the memory tier. Its node graph lives in the tier's memory
/// and is shared by every `TierTable` value naming the same head: a merge
/// makes a new value over the older table's head, holding both tables'
/// extents and filters, while readers of the previous values go on.
pub(crate) struct TierTable {
    mem: Arc<TierMemory>,
    head: u32,
    top: usize,
    /// The extents its nodes live in, shared by every value naming this
    /// head: a merge links nodes of other extents into the list that older
    /// values (held by running reads) walk too, so those extents must live
    /// as long as any of them.
    extents: Arc<Mutex<Vec<Arc<Extent>>>>,
    /// One filter per copied memtable, over user keys.
    filters: Vec<Arc<[u8]>>,
    /// Entries linked in (before any unlinking).
    entries: usize,
    /// The WALs whose writes it holds, oldest first (none in a durable
    /// tier: the tier file holds them).
    wals: Vec<u64>,
    /// Smallest and largest sequence number it holds.
    seqs: (SeqNo, SeqNo),
}

impl std::fmt::Debug for TierTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierTable")
            .field("head", &self.head)
            .field("entries", &self.entries)
            .field("bytes", &self.bytes())
            .field("wals", &self.wals)
            .finish()
    }
}

impl NodeList for TierTable {
    type Mem = TierMemory;
    fn nodes(&self) -> Nodes<'_, TierMemory> {
        Nodes::new(&self.mem, self.head, self.top)
    }
}

impl TierTable {
    /// Copies `table`, which holds the writes of WAL `wal`, into the tier:
    /// one copy of its arena into a fresh extent, then one pass per level
    /// rebasing its links. `Ok(None)` if the tier has no free extent that
    /// large, or `table` is empty.
    ///
    /// In a durable tier, `id` names the table in the manifest: the copy
    /// is made durable (`msync`) before this returns, and the metadata to
    /// record comes back with it. The table names no WAL: until that
    /// metadata is in the manifest, the immutable memtable holds its own.
    ///
    /// `table` must be immutable: no insert into it may run or follow (a
    /// memtable is once it is switched out; see `db/write.rs`).
    pub(crate) fn copy_in(
        mem: &Arc<TierMemory>,
        table: &MemTable,
        wal: u64,
        id: Option<u64>,
        bloom_bits_per_key: u32,
    ) -> Result<Option<(TierTable, Option<TierTableMeta>)>> {
        if table.is_empty() {
            return Ok(None);
        }
        let Some(list) = table.list() else {
            return Err(Error::Internal(
                "a memtable with version chains was sent to the memory tier".into(),
            ));
        };
        let used = list.used();
        let Some(mut extent) = mem.allocate(used) else {
            return Ok(None);
        };
        // SAFETY: the caller guarantees no insert runs or follows, and the
        // inserts that filled it happened before the switch that made it
        // immutable, which happened before this call.
        let src_bytes = unsafe { list.raw_bytes(used) };
        let summary = match id {
            Some(_) => Some(scan(src_bytes, |_| {}).map_err(|e| {
                Error::Internal(format!("a memtable arena does not parse: {}", e.why))
            })?),
            None => None,
        };
        extent.fill(src_bytes);
        let Ok(base) = u32::try_from(extent.start()) else {
            return Ok(None);
        };
        let top = list.max_height();
        let src = list.nodes();
        let dst = Nodes::new(&**mem, base + HEAD, top);
        let bits = match bloom_bits_per_key {
            0 => DEFAULT_FILTER_BITS,
            b => b,
        };
        let mut bloom = BloomBuilder::new(bits);
        let mut seqs = (SeqNo::MAX, 0);
        let mut entries = 0;
        for level in 0..top.min(MAX_HEIGHT) {
            let mut x = HEAD;
            loop {
                let next = src.next(x, level);
                if next == 0 {
                    break;
                }
                // Not yet reachable by any reader: the table is published
                // later, behind the state lock.
                dst.link(x + base, level)
                    .store(next + base, std::sync::atomic::Ordering::Relaxed);
                if level == 0 {
                    let ikey = src.key_at(next);
                    bloom.add_key(internal_key::user_key(ikey));
                    let seq = internal_key::trailer(ikey) >> 8;
                    seqs = (seqs.0.min(seq), seqs.1.max(seq));
                    entries += 1;
                }
                x = next;
            }
        }
        extent.set_contents(entries, id);
        let meta = match (id, summary) {
            (Some(id), Some(s)) => {
                mem.persist(extent.start(), used)?;
                Some(TierTableMeta {
                    id,
                    offset: extent.start() as u64,
                    len: used as u64,
                    entries: s.entries,
                    smallest_seq: s.seqs.0,
                    largest_seq: s.seqs.1,
                    checksum: s.checksum,
                })
            }
            _ => None,
        };
        let table = TierTable {
            mem: Arc::clone(mem),
            head: base + HEAD,
            top,
            extents: Arc::new(Mutex::new(vec![Arc::new(extent)])),
            filters: vec![bloom.finish().into()],
            entries,
            // A durable table's writes are in the tier file: it holds no
            // WAL (until its manifest edit, the immutable memtable does).
            wals: if id.is_some() { Vec::new() } else { vec![wal] },
            seqs,
        };
        Ok(Some((table, meta)))
    }

    /// Rebuilds the durable table `meta` from the tier file after a
    /// restart: verifies its nodes against the recorded checksum, then
    /// links them afresh in key order (the links in the file are whatever
    /// merges left and are never trusted). Versions a merge had unlinked
    /// come back; newer versions of the same keys hide them again.
    pub(crate) fn restore(
        mem: &Arc<TierMemory>,
        meta: &TierTableMeta,
        bloom_bits_per_key: u32,
    ) -> std::result::Result<TierTable, ScanError> {
        let bad = |offset: u64, why: String| ScanError {
            offset: offset as usize,
            why,
        };
        let (Ok(start), Ok(len)) = (usize::try_from(meta.offset), usize::try_from(meta.len)) else {
            return Err(bad(meta.offset, "extent out of range".into()));
        };
        let Some(mut extent) = mem.reserve(start, len) else {
            return Err(bad(
                meta.offset,
                format!(
                    "extent of {} bytes is misaligned, past the file's end or overlaps another table",
                    meta.len
                ),
            ));
        };
        // Every node takes at least 20 bytes: no more than that many.
        let mut nodes = Vec::with_capacity(meta.entries.min(meta.len / 20) as usize);
        verify_and_collect(&mut extent, len, meta, &mut nodes)
            .map_err(|e| bad(meta.offset + e.offset as u64, e.why))?;
        let base = extent.start() as u32;
        let all = Nodes::new(&**mem, base + HEAD, MAX_HEIGHT);
        nodes.sort_by(|a, b| internal_key::compare(all.key_at(a.0), all.key_at(b.0)));
        // A memtable never holds one internal key twice (every write has
        // its own sequence number); a list with duplicates cannot be
        // searched backwards.
        if let Some(w) = nodes
            .windows(2)
            .find(|w| all.key_at(w[0].0) == all.key_at(w[1].0))
        {
            return Err(bad(
                u64::from(w[1].0),
                "an internal key appears twice".into(),
            ));
        }
        let bits = match bloom_bits_per_key {
            0 => DEFAULT_FILTER_BITS,
            b => b,
        };
        let mut bloom = BloomBuilder::new(bits);
        // Not reachable by any reader yet: plain ordering is enough.
        let relaxed = std::sync::atomic::Ordering::Relaxed;
        let mut last = [base + HEAD; MAX_HEIGHT];
        let mut top = 1;
        for &(node, height) in &nodes {
            for (level, prev) in last.iter_mut().enumerate().take(height) {
                all.link(*prev, level).store(node, relaxed);
                *prev = node;
            }
            top = top.max(height);
            bloom.add_key(internal_key::user_key(all.key_at(node)));
        }
        for (level, prev) in last.iter().enumerate() {
            all.link(*prev, level).store(0, relaxed);
        }
        extent.set_contents(nodes.len(), Some(meta.id));
        Ok(TierTable {
            mem: Arc::clone(mem),
            head: base + HEAD,
            top,
            extents: Arc::new(Mutex::new(vec![Arc::new(extent)])),
            filters: vec![bloom.finish().into()],
            entries: nodes.len(),
            wals: Vec::new(),
            seqs: (meta.smallest_seq, meta.largest_seq),
        })
    }

    /// The newest entry for `user_key` at or below `seq`, as
    /// [`MemTable::get`] returns it; the filters are asked first.
    pub(crate) fn get(
        &self,
        user_key: &[u8],
        seq: SeqNo,
    ) -> Option<(SeqNo, internal_key::ValueKind, &[u8])> {
        let h = bloom_hash(user_key);
        let maybe = self
            .filters
            .iter()
            .any(|f| BloomFilter::new(f).map_or(true, |f| f.may_contain_hash(h)));
        if !maybe {
            return None;
        }
        self.nodes().newest(user_key, seq)
    }

    /// A cursor over its entries, in internal-key order.
    pub(crate) fn iter(self: &Arc<Self>) -> ListCursor<TierTable> {
        ListCursor::new(Arc::clone(self))
    }

    /// Tier bytes its extents hold.
    pub(crate) fn bytes(&self) -> u64 {
        self.extents.lock().iter().map(|e| e.len() as u64).sum()
    }

    /// Entries linked into it.
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    /// The WALs whose writes it holds, oldest first.
    pub(crate) fn wals(&self) -> &[u64] {
        &self.wals
    }

    /// Ids of the durable tables it is made of, oldest first.
    pub(crate) fn ids(&self) -> Vec<u64> {
        self.extents.lock().iter().filter_map(|e| e.id()).collect()
    }

    /// The extents holding its nodes (for counting unlinked nodes).
    pub(crate) fn extents(&self) -> Vec<Arc<Extent>> {
        self.extents.lock().clone()
    }

    /// Takes the extents all of whose nodes merges unlinked out of the set
    /// its values share (never the one holding its head). Readers that
    /// started before the unlinking may still stand on their nodes: the
    /// caller frees them once those readers are gone.
    pub(crate) fn take_unlinked_extents(&self) -> Vec<Arc<Extent>> {
        let head = self.head as usize;
        let mut extents = self.extents.lock();
        let (dead, live): (Vec<_>, Vec<_>) = extents
            .drain(..)
            .partition(|e| e.all_unlinked() && !e.contains(head));
        *extents = live;
        dead
    }

    /// Smallest and largest sequence number it holds.
    pub(crate) fn seqs(&self) -> (SeqNo, SeqNo) {
        self.seqs
    }

    /// Its head node.
    pub(crate) fn head(&self) -> u32 {
        self.head
    }

    /// The height its searches start at.
    pub(crate) fn nodes_top(&self) -> usize {
        self.top
    }

    /// The tier memory its nodes live in.
    pub(crate) fn memory(&self) -> &Arc<TierMemory> {
        &self.mem
    }

    /// The table after `newer`'s nodes were linked into this one's list:
    /// this head, both tables' extents (added to the set every value of
    /// this list shares), filters and WALs.
    pub(crate) fn absorbing(&self, newer: &TierTable, top: usize) -> TierTable {
        let theirs: Vec<Arc<Extent>> = newer.extents.lock().clone();
        self.extents.lock().extend(theirs);
        TierTable {
            mem: Arc::clone(&self.mem),
            head: self.head,
            top,
            extents: Arc::clone(&self.extents),
            filters: self.filters.iter().chain(&newer.filters).cloned().collect(),
            entries: self.entries + newer.entries,
            wals: self.wals.iter().chain(&newer.wals).copied().collect(),
            seqs: (self.seqs.0.min(newer.seqs.0), self.seqs.1.max(newer.seqs.1)),
        }
    }
}

/// Checks a restored extent's nodes against `meta` and collects each
/// node's offset in the tier and height.
fn verify_and_collect(
    extent: &mut Extent,
    len: usize,
    meta: &TierTableMeta,
    nodes: &mut Vec<(u32, usize)>,
) -> std::result::Result<(), ScanError> {
    let base = extent.start() as u32;
    let bytes = extent.contents(len);
    scan(bytes, |n| nodes.push((base + n.at as u32, n.height)))?.matches(
        meta.checksum,
        meta.entries,
        (meta.smallest_seq, meta.largest_seq),
    )
}
