//! The memtable: recent writes, in memory, in internal-key order.
//!
//! A [`MemTable`] is an arena-allocated concurrent skiplist (see
//! `skiplist.rs`) whose links are `u32` offsets into one fixed-size arena
//! (see `arena.rs`), not pointers. The whole table is therefore one
//! contiguous, relocatable block of memory; allocation is a bump of an atomic
//! counter. Inserts are lock-free and may run from many threads at once;
//! reads and iteration never wait.
//!
//! Entries are never removed. When the arena has no room for an entry,
//! [`MemTable::add`] returns [`MemTableFull`] and leaves the table unchanged;
//! the caller then switches to a fresh memtable.
//!
//! **Version chains.** Only the first version of a key to reach the table
//! goes into the list (its *listed* node); each newer version is pushed on
//! a chain hanging from that node's version word, newest first, found
//! through the hash index, which names the listed node. An overwrite of a
//! key the table holds therefore costs an index probe and one CAS, not a
//! search of the list: under an overwrite load most entries are versions
//! of keys already present, and ordering each of them into the list was
//! the largest cost of a pipelined `SET` load (a third of the server's
//! CPU). Readers see the versions where the list has the listed node:
//! iterators yield the chain, then the node (internal-key order, since
//! every chained version is newer); point reads walk it. A version older
//! than the listed node (writers that raced) goes into the list after it,
//! and a key the index has no room for keeps every version in the list.
//! A table made [`MemTable::without_version_chains`] lists every version,
//! as the memory tier's one-piece copy needs.

mod arena;
mod backlog;
mod cursor;
mod filter;
mod index;
mod iter;
pub(crate) mod skiplist;

pub(crate) use cursor::{ListCursor, NodeList};

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::format::bloom::bloom_hash;
use crate::format::internal_key::{self, SeqNo, ValueKind, MAX_SEQ, TRAILER_LEN};

use arena::Arena;
pub use arena::ArenaPool;
use backlog::Run;
use filter::MemFilter;
use index::{Claim, Lookup, MemIndex};
pub use iter::MemTableIter;
use skiplist::{node_size, Nodes, SkipList, HEAD_REGION, MAX_HEIGHT};

/// Whether node `n` holds `user_key`: the check behind every index slot
/// whose hash tag matches.
fn holds(nodes: &Nodes<'_, Arena>, n: u32, user_key: &[u8]) -> bool {
    internal_key::user_key(nodes.key_at(n)) == user_key
}

/// The trailer of a group entry.
fn entry_trailer((_, seq, kind, _): (&[u8], SeqNo, ValueKind, &[u8])) -> u64 {
    debug_assert!(seq <= MAX_SEQ, "sequence number out of range");
    internal_key::pack_trailer(seq, kind as u8)
}

/// The version word of `node`: for a listed node, the newest version
/// chained to it; for a chained one, the next older; 0 for none (and for
/// every node of a table without chains).
#[inline]
pub(crate) fn newer_versions(nodes: &Nodes<'_, Arena>, node: u32) -> u32 {
    nodes
        .versions(node)
        .map_or(0, |w| w.load(Ordering::Acquire))
}

/// How many entries ahead of the one being inserted a deferred group
/// prefetches index slots (and half as far, the nodes they name).
const PREFETCH_AHEAD: usize = 8;

/// Deferred nodes the background linker leaves for later while no reader
/// has needed the list lately: linked in one sorted run, neighbours are a
/// few nodes apart and each link is a short walk, where a run the size of
/// one commit group costs a search of several levels per node (about half
/// the linker's time in a pipelined overwrite load, measured). Readers
/// meanwhile merge the waiting nodes' sorted runs with the list
/// (`backlog.rs`) rather than link them.
pub const LAZY_LINK_BATCH: usize = 65536;

/// A reader that needs the list links a backlog of up to this many nodes
/// itself (about a millisecond), unless a linker is at work; a larger one
/// it merges as runs.
const READER_LINKS: usize = 4096;

/// Runs the linker lets the backlog hold before it merges them; below
/// that it only sorts each new group.
const MERGE_RUNS_OVER: usize = 16;

/// How long after a reader needed the list (an iterator, a read at an older
/// snapshot) the background linker links every group at once again, so
/// that readers who keep coming find little to link or merge.
const ORDER_WANTED_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// Returned by [`MemTable::add`] when the arena has no room for the entry.
/// The table is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemTableFull;

impl fmt::Display for MemTableFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("memtable arena is full")
    }
}

impl std::error::Error for MemTableFull {}

/// An in-memory, concurrently writable, sorted table of internal entries.
///
/// `Send + Sync`: share it behind an [`Arc`] between writers and readers.
pub struct MemTable {
    list: SkipList,
    /// User key → the key's listed node (with chains) or newest node
    /// (without), so point reads skip the list.
    index: MemIndex,
    /// The keys the index had no room for.
    filter: MemFilter,
    /// Runs of nodes written and indexed but not linked into the list yet
    /// (see [`MemTable::add_all_deferred`] and `backlog.rs`), oldest first.
    /// A run leaves only once its nodes are linked.
    backlog: parking_lot::Mutex<Vec<Arc<Run>>>,
    /// How many nodes `backlog` holds: zero once every node is in the list.
    unlinked: AtomicUsize,
    /// Held by whoever links or rearranges the backlog (one at a time);
    /// only its holder removes or replaces runs, writers append.
    linking: parking_lot::Mutex<()>,
    /// When this table was made: the origin of `order_wanted_at`.
    created: std::time::Instant,
    /// Milliseconds after `created`, plus one, at which a reader last
    /// needed the list's order while nodes were deferred; 0: never.
    order_wanted_at: AtomicU64,
    /// Whether overwrites join version chains (see the module doc).
    chains: bool,
}

impl fmt::Debug for MemTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemTable")
            .field("len", &self.len())
            .field("used", &self.approximate_memory_usage())
            .field("capacity", &self.arena_capacity())
            .finish()
    }
}

impl MemTable {
    /// Creates an empty memtable, reserving `arena_capacity` bytes of zeroed
    /// memory up front (pages never touched cost nothing). The capacity is
    /// rounded up to a multiple of 8, raised to at least the head node's size
    /// and capped just below 4 GiB (offsets are 32-bit); see
    /// [`MemTable::arena_capacity`].
    pub fn new(arena_capacity: usize) -> MemTable {
        Self::with_list(SkipList::new(arena_capacity))
    }

    /// Like [`MemTable::new`], but the arena reuses the allocation of an
    /// earlier memtable that `pool` kept, and goes back to `pool` when this
    /// memtable is dropped: a store's memtables follow one another, and
    /// reusing one's memory spares the next one's page faults.
    pub fn pooled(arena_capacity: usize, pool: &Arc<ArenaPool>) -> MemTable {
        Self::with_list(SkipList::pooled(arena_capacity, pool))
    }

    fn with_list(list: SkipList) -> MemTable {
        // Sized from the arena as capped, not as asked for.
        let capacity = list.capacity();
        MemTable {
            list,
            index: MemIndex::for_arena(capacity),
            filter: MemFilter::for_arena(capacity),
            backlog: parking_lot::Mutex::new(Vec::new()),
            unlinked: AtomicUsize::new(0),
            linking: parking_lot::Mutex::new(()),
            created: std::time::Instant::now(),
            order_wanted_at: AtomicU64::new(0),
            chains: true,
        }
    }

    /// This (still empty) table, with every version of a key in the list
    /// rather than in a version chain: what the memory tier copies whole
    /// (its tables are plain lists, `docs/format/memtier.md`).
    pub fn without_version_chains(mut self) -> MemTable {
        debug_assert!(self.is_empty());
        self.chains = false;
        self
    }

    /// Inserts `user_key ‖ (seq, kind) → value`. Thread-safe and lock-free.
    ///
    /// Each internal key must be inserted at most once (sequence numbers are
    /// unique per key). On [`MemTableFull`] nothing was inserted and the
    /// table is unchanged; smaller entries may still fit.
    pub fn add(
        &self,
        seq: SeqNo,
        kind: ValueKind,
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), MemTableFull> {
        debug_assert!(seq <= MAX_SEQ, "sequence number out of range");
        let trailer = internal_key::pack_trailer(seq, kind as u8);
        if !self.chains {
            let node = self
                .list
                .insert(user_key, trailer, value)
                .map_err(|()| MemTableFull)?;
            self.index_node(bloom_hash(user_key), user_key, trailer, node);
            return Ok(());
        }
        let (node, _) = self
            .list
            .new_node(user_key, trailer, value, true)
            .map_err(|()| MemTableFull)?;
        if self.place(bloom_hash(user_key), user_key, trailer, node) {
            self.list.link(node);
        }
        Ok(())
    }

    /// Files a node just written: in a table with version chains, on its
    /// key's chain if the index names a listed node of that key older than
    /// it, else in the index as the key's listed node (or the filter, if
    /// the index has no room); in one without, in the index as the key's
    /// newest node. Returns whether the node must go into the list. Runs
    /// before the writer publishes the entry's sequence number.
    fn place(&self, hash: u64, user_key: &[u8], trailer: u64, node: u32) -> bool {
        if !self.chains {
            self.index_node(hash, user_key, trailer, node);
            return true;
        }
        let nodes = self.list.nodes();
        match self.index.claim(hash, node, |n| holds(&nodes, n, user_key)) {
            Claim::Placed => true,
            Claim::Held(listed) => !self.chain_version(&nodes, listed, node, trailer),
            Claim::Full => {
                self.filter.add(hash);
                true
            }
        }
    }

    /// Pushes `node` (holding `trailer`) on the version chain of `listed`,
    /// a listed node of the same key, where its sequence number puts it
    /// (writers of one key may race): `false`, leaving it for the list, if
    /// it is older than `listed`. Lock-free: a CAS on the version word
    /// before it, retried from there if another version got in first.
    fn chain_version(
        &self,
        nodes: &Nodes<'_, Arena>,
        listed: u32,
        node: u32,
        trailer: u64,
    ) -> bool {
        if internal_key::trailer(nodes.key_at(listed)) > trailer {
            return false;
        }
        let (Some(mut word), Some(mine)) = (nodes.versions(listed), nodes.versions(node)) else {
            // Every node of a table with chains has a version word.
            debug_assert!(
                false,
                "a node without a version word in a table with chains"
            );
            return false;
        };
        loop {
            let next = word.load(Ordering::Acquire);
            if next == 0 || internal_key::trailer(nodes.key_at(next)) < trailer {
                // Not reachable yet: Relaxed; the Release CAS publishes it.
                mine.store(next, Ordering::Relaxed);
                if word
                    .compare_exchange(next, node, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            // `next` is newer: this version goes somewhere after it.
            match nodes.versions(next) {
                Some(w) => word = w,
                None => {
                    // Unreachable: every node of a table with chains has a
                    // version word (`new_node` is told so by `self.chains`).
                    debug_assert!(false, "a chained version without a version word");
                    return false;
                }
            }
        }
    }

    /// Points the index at a freshly linked node, or records its key in
    /// the filter if the index has no room for it. Runs before the writer
    /// publishes the entry's sequence number (see `index.rs`).
    fn index_node(&self, hash: u64, user_key: &[u8], trailer: u64, node: u32) {
        let nodes = self.list.nodes();
        let placed = self.index.insert(
            hash,
            node,
            |n| holds(&nodes, n, user_key),
            |n| trailer > internal_key::trailer(nodes.key_at(n)),
        );
        if !placed {
            self.filter.add(hash);
        }
    }

    /// Inserts a group of `(user_key, seq, kind, value)` entries, as
    /// [`MemTable::add`] would one by one. The slice is sorted into
    /// internal-key order first so that each insert starts its search where
    /// the previous one ended: for a large group of random keys that is a
    /// short walk instead of a descent from the head. Thread-safe and
    /// lock-free. On [`MemTableFull`] a prefix of the sorted entries may
    /// have gone in; callers reserve room for the whole group first.
    pub fn add_all(
        &self,
        entries: &mut [(&[u8], SeqNo, ValueKind, &[u8])],
    ) -> Result<(), MemTableFull> {
        if let [(key, seq, kind, value)] = entries {
            return self.add(*seq, *kind, key, value);
        }
        entries.sort_unstable_by(|a, b| internal_key::compare_bytes(a.0, b.0).then(b.1.cmp(&a.1)));
        let sorted = &*entries;
        if self.chains {
            // Versions go on chains, the rest into the list in one sorted
            // pass (even after running out of room: they are indexed).
            let mut listed = Vec::with_capacity(sorted.len());
            let mut full = Ok(());
            for &e in sorted {
                let trailer = entry_trailer(e);
                match self.list.new_node(e.0, trailer, e.3, true) {
                    Ok((node, _)) => {
                        if self.place(bloom_hash(e.0), e.0, trailer, node) {
                            listed.push(node);
                        }
                    }
                    Err(()) => {
                        full = Err(MemTableFull);
                        break;
                    }
                }
            }
            self.list.link_sorted(&listed);
            return full;
        }
        self.list
            .insert_sorted(
                sorted.iter().map(|&e| (e.0, entry_trailer(e), e.3)),
                |i, node| {
                    let e = sorted[i];
                    self.index_node(bloom_hash(e.0), e.0, entry_trailer(e), node);
                },
            )
            .map_err(|_| MemTableFull)
    }

    /// Inserts a group as [`MemTable::add_all`] does, but leaves ordering
    /// it into the list for later: each entry is written and put in the
    /// hash index now (point reads of the newest versions find it at once)
    /// and linked into the list later by a background thread
    /// ([`MemTable::link_deferred_lazily`]). Until then a reader that needs
    /// the list (an iterator, a read at an older snapshot, a key the index
    /// left out) links a small backlog itself or merges the backlog's runs
    /// with the list (`backlog.rs`). The writer's cost is a copy and an
    /// index insert per entry; the list's searches run on another core.
    /// On [`MemTableFull`] some entries may have gone in.
    pub fn add_all_deferred(
        &self,
        entries: &[(&[u8], SeqNo, ValueKind, &[u8])],
    ) -> Result<(), MemTableFull> {
        let mut written = Vec::with_capacity(entries.len());
        let mut full = Ok(());
        // Each insert misses the cache twice for a random key: on its index
        // slot, and on the key of the node an overwrite finds there. A few
        // entries ahead, the slot is prefetched, then the node it names, so
        // those misses overlap the inserts before them.
        let hashes: Vec<u64> = entries.iter().map(|e| bloom_hash(e.0)).collect();
        for (i, &e) in entries.iter().enumerate() {
            if let Some(&h) = hashes.get(i + PREFETCH_AHEAD) {
                self.index.prefetch(h);
            }
            if let Some(&h) = hashes.get(i + PREFETCH_AHEAD / 2) {
                self.prefetch_node(h);
            }
            let trailer = entry_trailer(e);
            match self.list.new_node(e.0, trailer, e.3, self.chains) {
                Ok((node, _)) => {
                    if self.place(hashes[i], e.0, trailer, node) {
                        written.push(node);
                    }
                }
                Err(()) => {
                    full = Err(MemTableFull);
                    break;
                }
            }
        }
        // In the backlog before the group's sequence number is published
        // (the caller publishes it after this returns), so a reader at
        // that sequence finds them there or, later, in the list.
        if !written.is_empty() {
            let n = written.len();
            let mut backlog = self.backlog.lock();
            backlog.push(Run::unsorted(written));
            self.unlinked.fetch_add(n, Ordering::Release);
        }
        full
    }

    /// Nodes not yet linked into the list.
    pub fn deferred_len(&self) -> usize {
        self.unlinked.load(Ordering::Relaxed)
    }

    /// What the background linker calls for the active memtable: links the
    /// backlog if it holds [`LAZY_LINK_BATCH`] nodes, if a reader needed
    /// the list within the last second, or if the index has left keys out
    /// (their point reads search the list); otherwise sorts and merges its
    /// new runs and leaves them to gather into a larger, cheaper pass.
    pub fn link_deferred_lazily(&self) {
        let n = self.unlinked.load(Ordering::Acquire);
        if n == 0 {
            return;
        }
        if n >= LAZY_LINK_BATCH || self.order_wanted_lately() || !self.index.is_complete() {
            self.link_deferred();
            return;
        }
        let _linking = self.linking.lock();
        let runs = self.backlog.lock().clone();
        let merge = runs.len() > MERGE_RUNS_OVER;
        if !merge && runs.iter().all(|r| r.sorted) {
            return;
        }
        let tidy = backlog::compact_runs(&runs, &self.list.nodes(), merge);
        // Only a holder of `linking` replaces runs, so the ones taken are
        // still the backlog's first; writers appended after them.
        let mut backlog = self.backlog.lock();
        debug_assert!(runs
            .iter()
            .zip(backlog.iter())
            .all(|(a, b)| Arc::ptr_eq(a, b)));
        backlog.splice(..runs.len(), tidy);
    }

    /// The backlog as a reader that needs the list's order finds it: empty
    /// if it was small enough to link here and now, else its runs (sorted
    /// if `sorted`) to merge with or search beside the list. Every node
    /// deferred before the call is in the list or in the runs returned (or
    /// both).
    fn reader_runs(&self, sorted: bool) -> Vec<Arc<Run>> {
        let n = self.unlinked.load(Ordering::Acquire);
        if n == 0 {
            return Vec::new();
        }
        let now = self.created.elapsed().as_millis() as u64 + 1;
        self.order_wanted_at.store(now, Ordering::Relaxed);
        // Not behind a linker at work, which may be linking a long run,
        // and not more than a small backlog (it may have grown since).
        if n <= READER_LINKS {
            if let Some(linking) = self.linking.try_lock() {
                if self.unlinked.load(Ordering::Acquire) <= READER_LINKS {
                    self.link_locked(&linking);
                    return Vec::new();
                }
            }
        }
        let runs = self.backlog.lock().clone();
        if sorted {
            backlog::for_reader(&runs, &self.list.nodes())
        } else {
            runs
        }
    }

    /// Whether readers found nodes waiting that they needed in order
    /// within the last second; the engine then wakes the linker, which
    /// links them (a backlog left by writes that stopped would otherwise
    /// wait for the next deferred group).
    pub fn order_wanted_with_backlog(&self) -> bool {
        self.unlinked.load(Ordering::Relaxed) > 0 && self.order_wanted_lately()
    }

    fn order_wanted_lately(&self) -> bool {
        match self.order_wanted_at.load(Ordering::Relaxed) {
            0 => false,
            at => {
                let now = self.created.elapsed().as_millis() as u64 + 1;
                now.saturating_sub(at) < ORDER_WANTED_FOR.as_millis() as u64
            }
        }
    }

    /// Links every deferred node (see [`MemTable::add_all_deferred`]) into
    /// the list; returns once every node deferred before the call is in
    /// it, whether this call or another linker linked it.
    pub fn link_deferred(&self) {
        if self.unlinked.load(Ordering::Acquire) == 0 {
            return;
        }
        let linking = self.linking.lock();
        self.link_locked(&linking);
    }

    /// [`MemTable::link_deferred`] with `linking` held.
    fn link_locked(&self, _linking: &parking_lot::MutexGuard<'_, ()>) {
        let runs = self.backlog.lock().clone();
        if runs.is_empty() {
            return;
        }
        let nodes = self.list.nodes();
        let mut batch: Vec<u32> = runs.iter().flat_map(|r| r.nodes.iter().copied()).collect();
        backlog::sort_nodes(&mut batch, &nodes);
        self.list.link_sorted(&batch);
        // Removed once linked: a reader that took the runs meanwhile
        // finds their nodes in them, or in the list, or both.
        let mut backlog = self.backlog.lock();
        debug_assert!(runs
            .iter()
            .zip(backlog.iter())
            .all(|(a, b)| Arc::ptr_eq(a, b)));
        backlog.drain(..runs.len());
        self.unlinked.fetch_sub(batch.len(), Ordering::Release);
    }

    /// The newest entry for `user_key` whose sequence number is `<= seq`, as
    /// `(entry_seq, kind, value)`. A [`ValueKind::Delete`] entry is returned
    /// as such (with an empty or arbitrary value); the caller decides what it
    /// means.
    pub fn get(&self, user_key: &[u8], seq: SeqNo) -> Option<(SeqNo, ValueKind, &[u8])> {
        let hash = bloom_hash(user_key);
        let nodes = self.list.nodes();
        match self.index.find(hash, |n| holds(&nodes, n, user_key)) {
            Lookup::Found(node) => {
                // Newest first, which most reads want: the versions
                // chained to the node, then the node itself; no links
                // needed (the node may not be linked yet).
                let (listed_key, listed_value, mut word) = nodes.parts(node);
                let listed_seq = internal_key::trailer(listed_key) >> 8;
                loop {
                    let next = word.map_or(0, |w| w.load(Ordering::Acquire));
                    let (key, value, older) = match next {
                        0 => (listed_key, listed_value, None),
                        v => nodes.parts(v),
                    };
                    let trailer = internal_key::trailer(key);
                    if trailer >> 8 <= seq {
                        let kind = ValueKind::from_u8(trailer as u8)?;
                        return Some((trailer >> 8, kind, value));
                    }
                    // A snapshot older than the listed node needs nothing
                    // chained to it (all newer): a long-held snapshot's
                    // reads of a hot key do not walk the versions since.
                    if next == 0 || listed_seq > seq {
                        break;
                    }
                    word = older;
                }
                // An older snapshot, or a version a writer has not
                // published yet: older versions are in the list after the
                // indexed node, or in the backlog.
                self.newest_ordered(user_key, seq)
            }
            Lookup::Absent => None,
            Lookup::Unknown if !self.filter.may_contain(hash) => None,
            Lookup::Unknown => self.newest_ordered(user_key, seq),
        }
    }

    /// [`MemTable::get`] by search: the list and the backlog's runs.
    fn newest_ordered(&self, user_key: &[u8], seq: SeqNo) -> Option<(SeqNo, ValueKind, &[u8])> {
        let runs = self.reader_runs(false);
        let nodes = self.list.nodes();
        let mut best = nodes.newest(user_key, seq);
        for run in &runs {
            if let Some((s, kind, node)) = run.newest(&nodes, user_key, seq) {
                if best.is_none_or(|(b, _, _)| s > b) {
                    best = Some((s, kind, nodes.value_at(node)));
                }
            }
        }
        best
    }

    /// Read-ahead for [`MemTable::get`] of several keys, in three passes:
    /// [`MemTable::prefetch_slot`] for every key, then
    /// [`MemTable::prefetch_node`] for every key, then
    /// [`MemTable::prefetch_newest`], so the cache misses of all the keys
    /// overlap instead of coming one after another. `hash` is
    /// [`bloom_hash`] of the user key.
    #[inline]
    pub fn prefetch_slot(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    /// The second pass of read-ahead: the node `hash`'s slot points at.
    #[inline]
    pub fn prefetch_node(&self, hash: u64) {
        if let Some(node) = self.index.guess(hash) {
            self.list.prefetch_node(node);
        }
    }

    /// The third pass of read-ahead: the newest version chained to the
    /// node `hash`'s slot points at, which a read of an overwritten key
    /// reaches next. It reads the node's header and version word, which
    /// the second pass brought in. Two lines, since a small version's key
    /// (whose sequence number a read checks first) often ends in the line
    /// after its header.
    #[inline]
    pub fn prefetch_newest(&self, hash: u64) {
        if !self.chains {
            return;
        }
        let Some(node) = self.index.guess(hash) else {
            return;
        };
        let nodes = self.list.nodes();
        if let Some(word) = nodes.versions(node) {
            match word.load(Ordering::Relaxed) {
                0 => {}
                newest => {
                    self.list.prefetch_node(newest);
                    self.list.prefetch_node(newest.saturating_add(64));
                }
            }
        }
    }

    /// An iterator over all entries, in internal-key order. It holds a clone
    /// of the `Arc`, so it may outlive the caller's handle, and it sees
    /// entries inserted concurrently if it reaches them.
    pub fn iter(self: &Arc<Self>) -> MemTableIter {
        MemTableIter::new(Arc::clone(self), self.reader_runs(true))
    }

    /// An iterator over the list alone, once every deferred node is linked
    /// (waiting for a linker at work): for a flush, which reads the whole
    /// table, and walks the list faster than a merge of the list and runs.
    pub fn iter_linked(self: &Arc<Self>) -> MemTableIter {
        self.link_deferred();
        MemTableIter::new(Arc::clone(self), Vec::new())
    }

    /// Arena bytes used so far (including per-entry overhead and the head
    /// node). Never more than [`MemTable::arena_capacity`].
    pub fn approximate_memory_usage(&self) -> usize {
        self.list.used()
    }

    /// Bytes of the hash index and key filter beside the arena, about an
    /// eighth of its capacity (pages are taken as keys land on them).
    pub fn index_bytes(&self) -> usize {
        self.index.size() + self.filter.size()
    }

    /// Bytes reserved for the arena.
    pub fn arena_capacity(&self) -> usize {
        self.list.capacity()
    }

    /// The skiplist with every entry linked, for the memory tier's
    /// one-piece copy; `None` for a table with version chains, whose
    /// versions are not all in the list.
    pub(crate) fn list(&self) -> Option<&SkipList> {
        if self.chains {
            return None;
        }
        self.link_deferred();
        Some(&self.list)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when no entry has been added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest `user_key.len() + value.len()` that always fits into an
    /// empty memtable created with `arena_capacity` (0 if none does).
    pub fn max_entry_size(arena_capacity: usize) -> usize {
        let cap = Arena::effective_capacity(arena_capacity.max(HEAD_REGION));
        let room = (cap - HEAD_REGION) & !3;
        // A node of maximal height: links, version word, header, key,
        // trailer, value.
        room.saturating_sub(4 * (MAX_HEIGHT + 1) + 8 + TRAILER_LEN)
    }

    /// The smallest `arena_capacity` whose empty memtable is guaranteed to
    /// hold one entry with a `key_len`-byte user key and a `value_len`-byte
    /// value (saturating at `usize::MAX`; entries beyond about 4 GiB never
    /// fit).
    pub fn required_capacity(key_len: usize, value_len: usize) -> usize {
        key_len
            .checked_add(TRAILER_LEN)
            // The version word counts as one more link.
            .and_then(|k| node_size(MAX_HEIGHT + 1, k, value_len))
            .and_then(|n| n.checked_add(HEAD_REGION))
            .unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
