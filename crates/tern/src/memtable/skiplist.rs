//! A concurrent skiplist of `(internal key, value)` entries living in an
//! [`Arena`], linked by `u32` arena offsets instead of pointers.
//!
//! Insertion is lock-free (CAS on links, as in RocksDB's `InlineSkipList`);
//! reads never wait: they only follow links with Acquire loads.
//!
//! Node layout, for a node of height `h` whose arena region starts at `n`:
//!
//! ```text
//! n                             n + 8                         n + 8 + 4h
//! | key_word u32 | value_len u32 | link[0] | ... | link[h-1] | ikey | value | pad |
//! ```
//!
//! `key_word` holds the internal key's length in its low 27 bits, the
//! [`VERSIONED`] flag in bit 27 and the node's height in its top 4. A
//! versioned node has one more word after its links, before the key: its
//! version word (see `MemTable`'s version chains). The header comes first so that an arena can
//! be parsed node by node from its bytes alone, links ignored: the memory
//! tier rebuilds a persistent table's links that way after a crash. Link
//! `i` is the `AtomicU32` at `n + 8 + 4i`; the internal key
//! (`user_key ‖ trailer`) is stored contiguously after the links.
//!
//! Invariants (the `SAFETY` comments below refer to them by number, and to
//! the arena's own invariants as "arena invariant N"):
//!
//! 1. Every node is exactly one arena region laid out as above. Regions start
//!    at multiples of 4, so `n` and every link word are 4-aligned.
//! 2. A node's header, key and value are written once, by its inserter,
//!    before the node is published, and never change afterwards. Its link
//!    words are only ever accessed atomically.
//! 3. A node is published by a Release CAS of its offset into a predecessor's
//!    link word, level 0 first, or into another node's version word (a
//!    version chain). Readers reach a node other than the head only through
//!    an Acquire load of a link or version word holding its offset, so
//!    everything its inserter wrote before publishing (invariant 2) is
//!    visible to them. The version word, like the links, is only ever
//!    accessed atomically.
//! 4. The head node, of height [`MAX_HEIGHT`] with an empty key and value,
//!    sits at [`HEAD`] in the arena's first region (after 8 bytes that keep
//!    offset 0 free). No link ever points at the head or at offset 0, so a
//!    link value of 0 is unambiguous and means "null". Every [`NodeRef`] therefore names a
//!    published node (or the head, inside this module only).
//! 5. At every level, links lead to nodes in strictly increasing internal-key
//!    order. A node linked at level `i` was already linked at every level
//!    below `i`, and link `i` is only read from a node reached at a level
//!    `>= i`, hence only for `i < height` of that node: within its region.
//! 6. Nodes are never removed, and a link only changes from `next` to a new
//!    node that sorts between the link's owner and `next`. So a node offset a
//!    reader holds stays valid for the arena's whole life, and a splice
//!    predecessor stays before the key it was computed for.

use std::cell::Cell;
use std::cmp::Ordering as CmpOrdering;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use std::sync::Arc;

use super::arena::{align_up, Arena, ArenaPool, ALIGN};
use crate::format::internal_key::{self, TRAILER_LEN};

/// Tallest node.
pub(crate) const MAX_HEIGHT: usize = 12;
/// Each level holds about one node in `BRANCHING` of the level below.
const BRANCHING: u64 = 4;
/// How many nodes ahead of the one being linked [`SkipList::link_sorted`]
/// prefetches (each one's first 128 bytes: header, links, key).
const LINK_PREFETCH_AHEAD: usize = 8;
/// Size of the node header (`ikey_len`, `value_len`).
pub(crate) const HEADER_LEN: usize = 8;
/// Offset of the head node (invariant 4).
pub(crate) const HEAD: u32 = 8;
/// Arena bytes before the first node: the null guard and the head node.
pub(crate) const HEAD_REGION: usize = HEAD as usize + HEADER_LEN + 4 * MAX_HEIGHT;

/// Arena bytes a node of `height` holding an internal key of `ikey_len` bytes
/// and a value of `value_len` bytes takes, or `None` on overflow.
/// A versioned node's extra word counts as one more link: pass `height + 1`.
#[inline]
pub(crate) fn node_size(height: usize, ikey_len: usize, value_len: usize) -> Option<usize> {
    align_up(
        (4 * height + HEADER_LEN)
            .checked_add(ikey_len)?
            .checked_add(value_len)?,
    )
}

/// A node read from an arena's plain bytes (links ignored), as
/// [`parse_node`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawNode {
    /// Its height.
    pub(crate) height: usize,
    /// Where its header is (the node's offset).
    pub(crate) at: usize,
    /// Where its internal key is.
    pub(crate) key: std::ops::Range<usize>,
    /// Where its value is.
    pub(crate) value: std::ops::Range<usize>,
    /// Where the next node starts.
    pub(crate) end: usize,
}

/// Reads the node whose header is at `at` in `bytes`, a copy of an arena
/// (nodes follow each other from [`HEAD_REGION`] on, each region
/// [`node_size`] long). An error names what is wrong with it.
pub(crate) fn parse_node(bytes: &[u8], at: usize) -> Result<RawNode, &'static str> {
    let word = |o: usize| -> Option<u32> {
        let b = bytes.get(o..o.checked_add(4)?)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (Some(key_word), Some(value_len)) = (word(at), at.checked_add(4).and_then(word)) else {
        return Err("node header past the end");
    };
    let height = (key_word >> HEIGHT_SHIFT) as usize;
    if !(1..=MAX_HEIGHT).contains(&height) {
        return Err("node height out of range");
    }
    // Only a memtable with version chains makes versioned nodes, and no
    // such memtable is ever copied as a whole.
    if key_word & VERSIONED != 0 {
        return Err("node carries a version word");
    }
    let ikey_len = key_word as usize & MAX_IKEY_LEN;
    if ikey_len < TRAILER_LEN {
        return Err("internal key shorter than its trailer");
    }
    let size = node_size(height, ikey_len, value_len as usize).ok_or("node size overflows")?;
    let end = at.checked_add(size).filter(|&e| e <= bytes.len());
    let Some(end) = end else {
        return Err("node runs past the end");
    };
    let key = at + HEADER_LEN + 4 * height;
    let value = key + ikey_len;
    Ok(RawNode {
        height,
        at,
        key: key..value,
        value: value..value + value_len as usize,
        end,
    })
}

/// A published node (never the head outside this module; invariant 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeRef(NonZeroU32);

impl NodeRef {
    /// The node's arena offset.
    #[inline]
    pub(crate) fn offset(self) -> u32 {
        self.0.get()
    }
}

/// What a search looks for: an internal key split into its two parts, so
/// lookups need not build one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    user_key: &'a [u8],
    trailer: u64,
}

impl<'a> Target<'a> {
    /// Target for `user_key ‖ trailer`.
    #[inline]
    pub(crate) fn new(user_key: &'a [u8], trailer: u64) -> Self {
        Target { user_key, trailer }
    }

    /// Target for an encoded internal key (split as [`internal_key::compare`]
    /// would).
    #[inline]
    pub(crate) fn from_ikey(ikey: &'a [u8]) -> Self {
        Target {
            user_key: internal_key::user_key(ikey),
            trailer: internal_key::trailer(ikey),
        }
    }

    /// `internal_key::compare(node_key, self)`.
    #[inline]
    fn cmp_node(&self, node_key: &[u8]) -> CmpOrdering {
        match internal_key::compare_bytes(internal_key::user_key(node_key), self.user_key) {
            CmpOrdering::Equal => self.trailer.cmp(&internal_key::trailer(node_key)),
            o => o,
        }
    }
}

/// Memory holding skiplist nodes: a memtable's [`Arena`], or the memory
/// tier's mapping (`crate::memtier`). The two accessors carry the arena's
/// contracts: plain bytes written once before the node is published, link
/// words only ever accessed atomically.
pub(crate) trait NodeMemory {
    /// Views the 4 bytes at `off` as an atomic word.
    ///
    /// # Safety
    ///
    /// As [`Arena::atomic_u32`]: `off` is a 4-aligned link word inside a
    /// node region, only ever accessed atomically.
    unsafe fn atomic_u32(&self, off: usize) -> &AtomicU32;

    /// Borrows `len` bytes at `off`.
    ///
    /// # Safety
    ///
    /// As [`Arena::bytes`]: the bytes lie inside node regions, were written
    /// before their node was published (and that publication was observed),
    /// never change again and contain no link word.
    unsafe fn bytes(&self, off: usize, len: usize) -> &[u8];
}

impl NodeMemory for Arena {
    #[inline]
    unsafe fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        // SAFETY: the caller upholds `Arena::atomic_u32`'s contract.
        unsafe { Arena::atomic_u32(self, off) }
    }

    #[inline]
    unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
        // SAFETY: the caller upholds `Arena::bytes`'s contract.
        unsafe { Arena::bytes(self, off, len) }
    }
}

/// Largest internal key a node header can describe: the top 4 bits of the
/// key length word hold the node's height, the bit below them the
/// [`VERSIONED`] flag. (Keys are limited to 16 MiB long before this.)
pub(crate) const MAX_IKEY_LEN: usize = VERSIONED as usize - 1;
/// Where the height sits in the key length word.
const HEIGHT_SHIFT: u32 = 28;
/// The key length word's flag for a node with a version word after its
/// links. Never set in a memory tier table (`docs/format/memtier.md`).
pub(crate) const VERSIONED: u32 = 1 << 27;

/// The nodes of one list in some [`NodeMemory`], read-only: every search
/// of the memtable and of the memory tier's tables. `head` is the list's
/// head node (of height [`MAX_HEIGHT`], with an empty key), `top` the
/// height searches start at (a stale lower value only makes them slower).
pub(crate) struct Nodes<'m, M: NodeMemory + ?Sized> {
    mem: &'m M,
    head: u32,
    top: usize,
}

impl<'m, M: NodeMemory + ?Sized> Nodes<'m, M> {
    /// The list headed by `head`, searched from height `top`.
    ///
    /// `head` is a head node in `mem` and every link reachable from it
    /// names a published node of `mem` (the skiplist invariants 1–5).
    #[inline]
    pub(crate) fn new(mem: &'m M, head: u32, top: usize) -> Self {
        Nodes {
            mem,
            head,
            top: top.clamp(1, MAX_HEIGHT),
        }
    }

    /// The head node's offset.
    #[inline]
    pub(crate) fn head(&self) -> u32 {
        self.head
    }

    /// The link word of `node` at `level`.
    ///
    /// `node` is the head or a published node, or a node this thread is
    /// inserting, and `level` is below its height (invariant 5 for readers;
    /// the inserter knows its own height).
    #[inline]
    pub(crate) fn link(&self, node: u32, level: usize) -> &'m AtomicU32 {
        debug_assert!(level < MAX_HEIGHT && node != 0);
        let off = node as usize + HEADER_LEN + 4 * level;
        // SAFETY: by the contract above `level < height(node)`, so `off` is
        // inside the node's link area (invariant 1), which is in bounds, 4-
        // aligned (invariant 1) and only accessed atomically (invariant 2).
        unsafe { self.mem.atomic_u32(off) }
    }

    /// Reads the next node at `level`; `node` as for [`Nodes::link`].
    #[inline]
    pub(crate) fn next(&self, node: u32, level: usize) -> u32 {
        self.link(node, level).load(Ordering::Acquire)
    }

    /// The raw header words of a published node or the head.
    #[inline]
    fn header(&self, node: u32) -> (u32, u32) {
        // SAFETY: the header is the 8 bytes at `node` (invariant 1), written
        // before publication (or zero for the head) and immutable; we reached
        // the node via an Acquire load, so the writes are visible
        // (invariants 2, 3 and 4). No link word overlaps the header.
        let h = unsafe { self.mem.bytes(node as usize, HEADER_LEN) };
        (
            u32::from_le_bytes([h[0], h[1], h[2], h[3]]),
            u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
        )
    }

    /// `(version word offset if it has one, key offset, ikey_len,
    /// value_len)` of a published node or the head (whose zero header puts
    /// an empty key right after it), from one read of its header.
    #[inline]
    fn layout(&self, node: u32) -> (Option<usize>, usize, usize, usize) {
        let (k, v) = self.header(node);
        let links_end = node as usize + HEADER_LEN + 4 * (k >> HEIGHT_SHIFT) as usize;
        let versioned = k & VERSIONED != 0;
        (
            versioned.then_some(links_end),
            links_end + 4 * usize::from(versioned),
            (k as usize) & MAX_IKEY_LEN,
            v as usize,
        )
    }

    /// `(key offset, ikey_len, value_len)`, as [`Nodes::layout`].
    #[inline]
    fn lens(&self, node: u32) -> (usize, usize, usize) {
        let (_, at, k, v) = self.layout(node);
        (at, k, v)
    }

    /// The height of a published node (the head's is [`MAX_HEIGHT`]).
    #[inline]
    pub(crate) fn height(&self, node: u32) -> usize {
        if node == self.head {
            return MAX_HEIGHT;
        }
        (self.header(node).0 >> HEIGHT_SHIFT) as usize
    }

    /// The version word of a published node (or one this thread is
    /// writing), if it has one: in a memtable with version chains, the
    /// newest of the versions chained to a listed node, or the next older
    /// one after a chained node; 0 for none.
    #[inline]
    pub(crate) fn versions(&self, node: u32) -> Option<&'m AtomicU32> {
        self.version_word(self.layout(node).0)
    }

    /// The atomic at `off`, a version word's offset from [`Nodes::layout`].
    #[inline]
    fn version_word(&self, off: Option<usize>) -> Option<&'m AtomicU32> {
        // SAFETY: a versioned node's region holds the word right after its
        // links (invariant 1, `new_node`); it is 4-aligned like them and
        // only accessed atomically (invariant 3).
        off.map(|off| unsafe { self.mem.atomic_u32(off) })
    }

    /// The internal key, value and version word (see [`Nodes::versions`])
    /// of a published node, its header read once.
    #[inline]
    pub(crate) fn parts(&self, node: u32) -> (&'m [u8], &'m [u8], Option<&'m AtomicU32>) {
        let (word, at, ikey_len, value_len) = self.layout(node);
        // SAFETY: as in `key_at` and `value_at`: key and value follow the
        // links (and version word) inside the node's region, written before
        // publication and immutable.
        let (key, value) = unsafe {
            (
                self.mem.bytes(at, ikey_len),
                self.mem.bytes(at + ikey_len, value_len),
            )
        };
        (key, value, self.version_word(word))
    }

    /// The internal key of a published node or the head.
    #[inline]
    pub(crate) fn key_at(&self, node: u32) -> &'m [u8] {
        let (at, k, _) = self.lens(node);
        // SAFETY: the key follows the links inside the node's region
        // (invariant 1); it was written before publication, is visible to us
        // and never changes (invariants 2 and 3).
        unsafe { self.mem.bytes(at, k) }
    }

    /// The value of a published node.
    #[inline]
    pub(crate) fn value_at(&self, node: u32) -> &'m [u8] {
        let (at, k, v) = self.lens(node);
        // SAFETY: the value follows the key inside the node's region
        // (invariant 1); written before publication, visible and immutable
        // (invariants 2 and 3).
        unsafe { self.mem.bytes(at + k, v) }
    }

    /// Walks `level` from `before` (which sorts before `target`) and returns
    /// `(prev, next)` with `prev < target <= next` (next 0 = end).
    #[inline]
    pub(crate) fn find_splice_for_level(
        &self,
        target: &Target<'_>,
        before: u32,
        level: usize,
    ) -> (u32, u32) {
        let mut x = before;
        loop {
            let next = self.next(x, level);
            if next == 0 || target.cmp_node(self.key_at(next)) != CmpOrdering::Less {
                return (x, next);
            }
            x = next;
        }
    }

    /// `(prev, next)` of `target` at every level below `height`, as
    /// [`Nodes::find_splice_for_level`] finds them top-down.
    pub(crate) fn splice(&self, target: &Target<'_>, height: usize) -> Splice {
        let mut prev = [self.head; MAX_HEIGHT];
        let mut next = [0u32; MAX_HEIGHT];
        let mut before = self.head;
        for level in (0..self.top.max(height)).rev() {
            let (p, x) = self.find_splice_for_level(target, before, level);
            prev[level] = p;
            next[level] = x;
            before = p;
        }
        Splice { prev, next }
    }

    /// Moves a splice made for a smaller key on to `target`, for a node of
    /// `height`: finds the lowest level whose `next` still bounds `target`,
    /// searches the levels below it again (each from the `prev` of the level
    /// above), and re-searches any level up to `height` whose `next` no
    /// longer bounds it (concurrent inserts can leave the levels of a reused
    /// splice out of step). Every `prev` must sort before `target`. Returns
    /// `false` when no level bounds it; the caller then makes a fresh splice.
    pub(crate) fn advance_splice(
        &self,
        target: &Target<'_>,
        splice: &mut Splice,
        height: usize,
    ) -> bool {
        let bounded = |n: u32| n == 0 || target.cmp_node(self.key_at(n)) != CmpOrdering::Less;
        let Some(bound) = (0..MAX_HEIGHT).find(|&l| bounded(splice.next[l])) else {
            return false;
        };
        for level in (0..bound).rev() {
            let (p, x) = self.find_splice_for_level(target, splice.prev[level + 1], level);
            splice.prev[level] = p;
            splice.next[level] = x;
        }
        for level in bound + 1..height {
            if !bounded(splice.next[level]) {
                let (p, x) = self.find_splice_for_level(target, splice.prev[level], level);
                splice.prev[level] = p;
                splice.next[level] = x;
            }
        }
        true
    }

    #[inline]
    fn node_ref(&self, node: u32) -> Option<NodeRef> {
        if node == self.head {
            None
        } else {
            NonZeroU32::new(node).map(NodeRef)
        }
    }

    /// Walks down from the head, advancing on each level while `advance`
    /// holds for the next node's key; returns the last node passed at level 0
    /// (the head if none) and the node after it.
    #[inline]
    fn descend(&self, mut advance: impl FnMut(&[u8]) -> bool) -> (u32, u32) {
        let mut x = self.head;
        let mut level = self.top - 1;
        loop {
            let next = self.next(x, level);
            if next != 0 && advance(self.key_at(next)) {
                x = next;
            } else if level == 0 {
                return (x, next);
            } else {
                level -= 1;
            }
        }
    }

    /// The newest entry for `user_key` whose sequence number is `<= seq`,
    /// as `(entry_seq, kind, value)` (see [`crate::memtable::MemTable::get`]).
    pub(crate) fn newest(
        &self,
        user_key: &[u8],
        seq: internal_key::SeqNo,
    ) -> Option<(internal_key::SeqNo, internal_key::ValueKind, &'m [u8])> {
        let seq = seq.min(internal_key::MAX_SEQ);
        let target = Target::new(
            user_key,
            internal_key::pack_trailer(seq, internal_key::KIND_FOR_SEEK),
        );
        let node = self.seek_ge(&target)?;
        let ikey = self.key(node);
        if internal_key::user_key(ikey) != user_key {
            return None;
        }
        let trailer = internal_key::trailer(ikey);
        let kind = internal_key::ValueKind::from_u8(trailer as u8)?;
        Some((trailer >> 8, kind, self.value(node)))
    }

    /// First node with key `>= target`.
    pub(crate) fn seek_ge(&self, target: &Target<'_>) -> Option<NodeRef> {
        let (_, next) = self.descend(|k| target.cmp_node(k) == CmpOrdering::Less);
        self.node_ref(next)
    }

    /// Last node with key `< target`.
    pub(crate) fn seek_lt(&self, target: &Target<'_>) -> Option<NodeRef> {
        let (x, _) = self.descend(|k| target.cmp_node(k) == CmpOrdering::Less);
        self.node_ref(x)
    }

    /// Last node with key `<= target`.
    pub(crate) fn seek_le(&self, target: &Target<'_>) -> Option<NodeRef> {
        let (x, _) = self.descend(|k| target.cmp_node(k) != CmpOrdering::Greater);
        self.node_ref(x)
    }

    /// First node.
    pub(crate) fn first(&self) -> Option<NodeRef> {
        self.node_ref(self.next(self.head, 0))
    }

    /// Last node.
    pub(crate) fn last(&self) -> Option<NodeRef> {
        let (x, _) = self.descend(|_| true);
        self.node_ref(x)
    }

    /// The node after `node`.
    #[inline]
    pub(crate) fn next_node(&self, node: NodeRef) -> Option<NodeRef> {
        self.node_ref(self.next(node.0.get(), 0))
    }

    /// The internal key of `node`.
    #[inline]
    pub(crate) fn key(&self, node: NodeRef) -> &'m [u8] {
        self.key_at(node.0.get())
    }

    /// The value of `node`.
    #[inline]
    pub(crate) fn value(&self, node: NodeRef) -> &'m [u8] {
        self.value_at(node.0.get())
    }
}

/// Where a key goes in a list: its predecessor and successor per level.
pub(crate) struct Splice {
    pub(crate) prev: [u32; MAX_HEIGHT],
    pub(crate) next: [u32; MAX_HEIGHT],
}

/// The skiplist proper. Thread-safe: `&self` methods may run concurrently.
pub(crate) struct SkipList {
    arena: Arena,
    /// Height of the tallest node ever inserted (only grows; Relaxed is fine:
    /// a reader that sees a stale value just starts lower, one that sees a
    /// new value before the links finds them null and moves down).
    max_height: AtomicUsize,
    len: AtomicUsize,
}

impl SkipList {
    /// An empty list in an arena of `capacity` bytes (at least room for the
    /// head node).
    pub(crate) fn new(capacity: usize) -> SkipList {
        Self::in_arena(Arena::new(capacity.max(HEAD_REGION)))
    }

    /// An empty list in an arena taken from `pool` (see [`ArenaPool`]).
    pub(crate) fn pooled(capacity: usize, pool: &Arc<ArenaPool>) -> SkipList {
        Self::in_arena(Arena::pooled(capacity.max(HEAD_REGION), pool))
    }

    fn in_arena(arena: Arena) -> SkipList {
        let start = arena.allocate(HEAD_REGION);
        // The arena is fresh and at least HEAD_REGION bytes long, so the
        // region lands at offset 0 and the head at `HEAD` (invariant 4).
        assert_eq!(start, Some(0), "head node must be the first allocation");
        // A reused allocation holds old bytes: write the null guard, the
        // head's header (zero lengths) and its links (null). The list is not
        // shared yet.
        // SAFETY: `[0, HEAD + HEADER_LEN)` is the start of the region just
        // allocated, unpublished, and holds no link word.
        unsafe { arena.write(0, &[0; HEAD as usize + HEADER_LEN]) };
        let list = SkipList {
            arena,
            max_height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
        };
        let nodes = Nodes::new(&list.arena, HEAD, MAX_HEIGHT);
        for level in 0..MAX_HEIGHT {
            nodes.link(HEAD, level).store(0, Ordering::Relaxed);
        }
        list
    }

    /// The arena's capacity.
    pub(crate) fn capacity(&self) -> usize {
        self.arena.capacity()
    }

    /// Arena bytes used, head node included.
    pub(crate) fn used(&self) -> usize {
        self.arena.used()
    }

    /// Entries inserted.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Height of the tallest node.
    pub(crate) fn max_height(&self) -> usize {
        self.max_height.load(Ordering::Relaxed)
    }

    /// Brings the start of node `node` (its links and key) into the CPU
    /// cache; a hint only.
    #[inline]
    pub(crate) fn prefetch_node(&self, node: u32) {
        self.arena.prefetch(node as usize);
    }

    /// The list's nodes, for searches.
    #[inline]
    pub(crate) fn nodes(&self) -> Nodes<'_, Arena> {
        Nodes::new(&self.arena, HEAD, self.max_height())
    }

    /// The arena's first `len` bytes, for a one-piece copy of a list no
    /// thread inserts into any more.
    ///
    /// # Safety
    ///
    /// No insert into this list runs concurrently with the borrow and
    /// every insert happened-before this call, so no byte in the range is
    /// written while it is borrowed (link words included: reading them as
    /// plain bytes only races with writes, and none remain).
    pub(crate) unsafe fn raw_bytes(&self, len: usize) -> &[u8] {
        debug_assert!(len <= self.used());
        // SAFETY: `[0, used)` is allocated and initialised (every region is
        // written whole before it is published); by the contract nothing
        // writes it any more.
        unsafe { self.arena.bytes(0, len) }
    }

    // ---- insertion ----

    /// Inserts `user_key ‖ trailer → value`. Lock-free; safe to call from
    /// many threads at once. Returns `Err(())` without changing the list when
    /// the arena has no room (or the entry is too large to encode).
    /// On success returns the new node's offset.
    pub(crate) fn insert(&self, user_key: &[u8], trailer: u64, value: &[u8]) -> Result<u32, ()> {
        let (node, height) = self.new_node(user_key, trailer, value, false)?;
        let nodes = self.nodes();
        let target = Target::new(user_key, trailer);
        let mut splice = nodes.splice(&target, height);
        self.link_node(&nodes, node, height, &target, &mut splice);
        Ok(node)
    }

    /// Inserts entries given in ascending internal-key order (`(user key,
    /// trailer, value)`), each search starting from where the previous
    /// entry went in rather than from the head. Neighbouring entries of a
    /// sorted batch are usually a few nodes apart, so an insert costs a
    /// walk over those few nodes instead of a full descent (RocksDB reuses
    /// a splice the same way). Lock-free like [`SkipList::insert`]; on
    /// `Err(n)` the first `n` entries went in and the rest did not (no room).
    /// `linked(i, node)` is called once entry `i` is linked as `node`.
    pub(crate) fn insert_sorted<'e>(
        &self,
        entries: impl IntoIterator<Item = (&'e [u8], u64, &'e [u8])>,
        mut linked: impl FnMut(usize, u32),
    ) -> Result<(), usize> {
        let mut splice: Option<Splice> = None;
        for (i, (user_key, trailer, value)) in entries.into_iter().enumerate() {
            let (node, height) = self
                .new_node(user_key, trailer, value, false)
                .map_err(|()| i)?;
            self.link_after(&mut splice, node, height, &Target::new(user_key, trailer));
            linked(i, node);
        }
        Ok(())
    }

    /// Links nodes [`SkipList::new_node`] wrote and nobody linked yet,
    /// given in ascending internal-key order, each search starting where
    /// the previous node went in (as [`SkipList::insert_sorted`]). The
    /// nodes' bytes must have been handed to this thread with a
    /// happens-before edge (a mutex, or a slot loaded with Acquire).
    pub(crate) fn link_sorted(&self, sorted: &[u32]) {
        let mut splice: Option<Splice> = None;
        for (i, &node) in sorted.iter().enumerate() {
            // Nodes sorted by key lie anywhere in the arena: reading each
            // one's height and key was a cache miss per link. Fetched a few
            // links ahead, those misses overlap the walks before them.
            if let Some(&ahead) = sorted.get(i + LINK_PREFETCH_AHEAD) {
                self.arena.prefetch(ahead as usize);
                self.arena.prefetch(ahead as usize + 64);
            }
            let nodes = self.nodes();
            let height = nodes.height(node);
            let target = Target::from_ikey(nodes.key_at(node));
            self.link_after(&mut splice, node, height, &target);
        }
    }

    /// Links one node [`SkipList::new_node`] wrote and nobody linked yet,
    /// searching from the head.
    pub(crate) fn link(&self, node: u32) {
        let nodes = self.nodes();
        let height = nodes.height(node);
        let target = Target::from_ikey(nodes.key_at(node));
        let mut splice = nodes.splice(&target, height);
        self.link_node(&nodes, node, height, &target, &mut splice);
    }

    /// Links `node` (of `height`, holding `target`) with `splice`, the one
    /// the previous, smaller node of a sorted run left (searched afresh if
    /// none or if it no longer brackets `target`).
    fn link_after(
        &self,
        splice: &mut Option<Splice>,
        node: u32,
        height: usize,
        target: &Target<'_>,
    ) {
        let nodes = self.nodes();
        let fresh = match splice.as_mut() {
            Some(s) => {
                debug_assert!(
                    target.cmp_node(nodes.key_at(s.prev[0])) == CmpOrdering::Less,
                    "entries out of order"
                );
                !nodes.advance_splice(target, s, height)
            }
            None => true,
        };
        if fresh {
            *splice = Some(nodes.splice(target, height));
        }
        if let Some(s) = splice.as_mut() {
            self.link_node(&nodes, node, height, target, s);
            // The new node is now the predecessor of the next (larger)
            // entry on every level it is linked at.
            s.prev[..height].fill(node);
        }
    }

    /// Allocates and writes an unpublished node, with a version word (0)
    /// if `versioned`; returns its offset and height. `Err(())` when the
    /// arena has no room or the entry is too large to encode. The node counts as an entry from here on; it is
    /// linked by [`SkipList::insert`], [`SkipList::insert_sorted`] or
    /// later by [`SkipList::link_sorted`].
    pub(crate) fn new_node(
        &self,
        user_key: &[u8],
        trailer: u64,
        value: &[u8],
        versioned: bool,
    ) -> Result<(u32, usize), ()> {
        let ikey_len = user_key.len().checked_add(TRAILER_LEN).ok_or(())?;
        if ikey_len > MAX_IKEY_LEN {
            return Err(());
        }
        let value_len32 = u32::try_from(value.len()).map_err(|_| ())?;
        let height = random_height();
        let words = height + usize::from(versioned);
        // Fits: checked against MAX_IKEY_LEN (27 bits), height <= 12.
        let key_word = (ikey_len as u32)
            | ((height as u32) << HEIGHT_SHIFT)
            | if versioned { VERSIONED } else { 0 };
        let size = node_size(words, ikey_len, value.len()).ok_or(())?;
        let start = self.arena.allocate(size).ok_or(())?;
        let n = start;
        // Fits: the arena's capacity is at most u32::MAX (arena invariant 2).
        let node = n as u32;
        let k = n + HEADER_LEN + 4 * words;

        // SAFETY: the header `[n, n + 8)` and `[k, k + ikey_len +
        // value_len)` are the parts of the region `[start, start + size)`
        // around the links (and version word); `allocate` just handed that
        // region to this thread and it is unpublished (arena invariant 4),
        // and no link or version word lies in them.
        unsafe {
            self.arena.write(n, &key_word.to_le_bytes());
            self.arena.write(n + 4, &value_len32.to_le_bytes());
            self.arena.write(k, user_key);
            self.arena.write(k + user_key.len(), &trailer.to_le_bytes());
            self.arena.write(k + ikey_len, value);
            // The padding too: a copy of the arena's bytes (the memory
            // tier's) must not carry what a reused allocation held.
            let end = k + ikey_len + value.len();
            self.arena.write(end, &[0; ALIGN][..start + size - end]);
        }
        // Links are null until the node is linked (a reused allocation
        // holds old bytes there). Unpublished, so Relaxed suffices.
        let nodes = self.nodes();
        for level in 0..height {
            nodes.link(node, level).store(0, Ordering::Relaxed);
        }
        if let Some(word) = nodes.versions(node) {
            word.store(0, Ordering::Relaxed);
        }

        let mut max = self.max_height.load(Ordering::Relaxed);
        while height > max {
            match self.max_height.compare_exchange_weak(
                max,
                height,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(m) => max = m,
            }
        }
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok((node, height))
    }

    /// Publishes `node` (of `height`, holding `target`) level 0 first,
    /// between `splice.prev` and `splice.next`, which must bracket `target`
    /// on every level below `height` (`prev < target <= next`). A link that
    /// changed since is re-searched from its `prev` (invariant 6); the
    /// splice is left holding the node's final neighbours.
    fn link_node(
        &self,
        nodes: &Nodes<'_, Arena>,
        node: u32,
        height: usize,
        target: &Target<'_>,
        splice: &mut Splice,
    ) {
        let Splice { prev, next } = splice;
        for level in 0..height {
            loop {
                // Not yet reachable at this level, so Relaxed suffices; the
                // Release CAS below publishes it.
                nodes
                    .link(node, level)
                    .store(next[level], Ordering::Relaxed);
                match nodes.link(prev[level], level).compare_exchange(
                    next[level],
                    node,
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(_) => {
                        // Someone inserted between prev and next: search again
                        // from prev, which still sorts before us (invariant 6).
                        let (p, x) = nodes.find_splice_for_level(target, prev[level], level);
                        prev[level] = p;
                        next[level] = x;
                    }
                }
            }
        }
    }
}

/// A random height in `1..=MAX_HEIGHT`, each level with probability
/// `1 / BRANCHING` of the one below, from a cheap per-thread xorshift.
fn random_height() -> usize {
    static SEEDS: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            SEEDS.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) | 1,
        );
    }
    let mut r = STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    });
    let mut h = 1;
    while h < MAX_HEIGHT && r % BRANCHING == 0 {
        h += 1;
        r /= BRANCHING;
    }
    h
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn heights_are_geometric() {
        let mut counts = [0usize; MAX_HEIGHT + 1];
        for _ in 0..100_000 {
            counts[random_height()] += 1;
        }
        assert_eq!(counts[0], 0);
        // About 3/4 of nodes have height 1, 3/16 height 2.
        assert!((70_000..80_000).contains(&counts[1]), "{counts:?}");
        assert!((16_000..21_500).contains(&counts[2]), "{counts:?}");
    }

    #[test]
    fn node_size_accounts_links_header_and_padding() {
        assert_eq!(node_size(1, 8, 0), Some(4 + 8 + 8));
        assert_eq!(node_size(2, 9, 1), Some(8 + 8 + 12));
        assert_eq!(node_size(1, usize::MAX, 1), None);
    }

    #[test]
    fn an_arena_parses_node_by_node_from_its_bytes() {
        let l = SkipList::new(1 << 16);
        let mut want = vec![];
        for i in 0..300u64 {
            let key = format!("key{}", i * 7919 % 300);
            let value = vec![b'v'; (i % 13) as usize];
            l.insert(key.as_bytes(), i << 8 | 1, &value).unwrap();
            let mut ikey = key.into_bytes();
            ikey.extend_from_slice(&(i << 8 | 1).to_le_bytes());
            want.push((ikey, value));
        }
        // SAFETY: no insert runs any more.
        let bytes = unsafe { l.raw_bytes(l.used()) };
        let mut got = vec![];
        let mut at = HEAD_REGION;
        while at < bytes.len() {
            let n = parse_node(bytes, at).unwrap();
            assert_eq!(n.height, l.nodes().height(at as u32));
            got.push((bytes[n.key.clone()].to_vec(), bytes[n.value].to_vec()));
            at = n.end;
        }
        assert_eq!(at, bytes.len());
        assert_eq!(got, want, "in insertion (arena) order");
        assert_eq!(
            parse_node(bytes, bytes.len() - 2),
            Err("node header past the end")
        );
        let mut bad = bytes.to_vec();
        bad[HEAD_REGION + 3] = 0xf0;
        assert_eq!(
            parse_node(&bad, HEAD_REGION),
            Err("node height out of range")
        );
        assert_eq!(
            parse_node(&bytes[..HEAD_REGION + 12], HEAD_REGION),
            Err("node runs past the end")
        );
    }

    /// Concurrent inserts can leave a reused splice's upper levels behind
    /// its lower ones; every level a node will be linked at must bracket
    /// the new key again, or the CAS would link it out of order.
    #[test]
    fn advance_splice_brackets_every_level_it_links() {
        let l = SkipList::new(1 << 20);
        for i in 0..2000u64 {
            l.insert(format!("k{:04}", i * 7 % 2000).as_bytes(), 1 << 8 | 1, b"v")
                .unwrap();
        }
        let nodes = l.nodes();
        let small = Target::new(b"k0100", 2 << 8 | 1);
        let big = Target::new(b"k0900", 2 << 8 | 1);
        let mut splice = nodes.splice(&small, MAX_HEIGHT);
        // Level 0 still bounds `big`, the levels above end before it.
        splice.next[0] = 0;
        let before_big = nodes.seek_lt(&big).unwrap().0.get();
        for level in 1..MAX_HEIGHT {
            splice.next[level] = before_big;
        }
        assert!(nodes.advance_splice(&big, &mut splice, MAX_HEIGHT));
        for level in 0..MAX_HEIGHT {
            let (p, n) = (splice.prev[level], splice.next[level]);
            assert!(
                p == HEAD || big.cmp_node(nodes.key_at(p)) == CmpOrdering::Less,
                "level {level}: prev after the key"
            );
            assert!(
                n == 0 || big.cmp_node(nodes.key_at(n)) != CmpOrdering::Less,
                "level {level}: next before the key"
            );
        }
    }

    #[test]
    fn insert_sorted_after_a_stale_level_keeps_order() {
        let l = SkipList::new(1 << 20);
        let keys: Vec<String> = (0..3000)
            .map(|i| format!("k{:05}", i * 11 % 3000))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        for chunk in sorted.chunks(500) {
            l.insert_sorted(
                chunk
                    .iter()
                    .map(|k| (k.as_bytes(), 1u64 << 8 | 1, &b"v"[..])),
                |_, _| {},
            )
            .unwrap();
        }
        let nodes = l.nodes();
        let mut got = vec![];
        let mut n = nodes.first();
        while let Some(x) = n {
            got.push(String::from_utf8(internal_key::user_key(nodes.key(x)).to_vec()).unwrap());
            n = nodes.next_node(x);
        }
        assert_eq!(got, sorted);
        // Every level is in order too, not only level 0.
        for level in 0..MAX_HEIGHT {
            let mut x = nodes.next(HEAD, level);
            while x != 0 {
                let next = nodes.next(x, level);
                if next != 0 {
                    assert_eq!(
                        internal_key::compare(nodes.key_at(x), nodes.key_at(next)),
                        CmpOrdering::Less,
                        "level {level}"
                    );
                }
                x = next;
            }
        }
    }

    #[test]
    fn links_and_order() {
        let l = SkipList::new(1 << 16);
        assert!(l.nodes().first().is_none() && l.nodes().last().is_none());
        for (k, s) in [(b"b", 1u64), (b"a", 1), (b"c", 1), (b"b", 5)] {
            l.insert(k, s << 8 | 1, b"v").unwrap();
        }
        let mut keys = vec![];
        let nodes = l.nodes();
        let mut n = nodes.first();
        while let Some(x) = n {
            keys.push(nodes.key(x).to_vec());
            assert!((1..=MAX_HEIGHT).contains(&nodes.height(x.0.get())));
            n = nodes.next_node(x);
        }
        let mut sorted = keys.clone();
        sorted.sort_by(|a, b| internal_key::compare(a, b));
        assert_eq!(keys, sorted);
        assert_eq!(keys.len(), 4);
        assert_eq!(l.len(), 4);
        assert_eq!(
            internal_key::user_key(nodes.key(nodes.last().unwrap())),
            b"c"
        );
    }
}
