//! Read-ahead for a batch of point reads.
//!
//! A point read of a key in the memtable costs up to three cache misses
//! that depend on each other: the key's slot in the memtable's hash index,
//! the node the slot points at, and for an overwritten key the newest
//! version chained to that node. A caller about to read several keys (a
//! pipeline of GETs, an MGET) names them first; the slots of all of them
//! are prefetched, then the nodes, then the newest versions, so the misses
//! of the whole batch overlap and the reads that follow find their lines
//! in the cache.
//!
//! The batch's reads may also share its view: the super version pinned and
//! the sequence read when it was made ([`crate::Db::get_if_cached_in`]),
//! instead of each pinning its own (a lock and an unlock of the thread's
//! slot per read). They then see the store as of the batch's start, as
//! reads that started together would.

use std::sync::Arc;

use super::core::SuperVersion;
use super::sv_cache::Pinned;
use crate::format::bloom::bloom_hash;
use crate::format::internal_key::SeqNo;

/// Keys one read-ahead takes; later ones are ignored (their slots' lines
/// would start to push out the first ones').
pub const READ_AHEAD_KEYS: usize = 32;

/// Keys named for read-ahead; [`ReadAhead::prefetch`] (or dropping it)
/// runs the later passes. Get one from [`crate::Db::read_ahead`].
pub struct ReadAhead<'a> {
    pub(super) sv: Pinned<'a, SuperVersion>,
    /// The sequence the batch's reads see.
    pub(super) seq: SeqNo,
    hashes: [u64; READ_AHEAD_KEYS],
    len: usize,
}

impl<'a> ReadAhead<'a> {
    pub(super) fn new(sv: Pinned<'a, SuperVersion>, seq: SeqNo) -> Self {
        ReadAhead {
            sv,
            seq,
            hashes: [0; READ_AHEAD_KEYS],
            len: 0,
        }
    }

    /// Names a key about to be read: its index slot in the active memtable
    /// is prefetched now.
    #[inline]
    pub fn key(&mut self, key: &[u8]) {
        if self.len == READ_AHEAD_KEYS {
            return;
        }
        let h = bloom_hash(key);
        self.sv.mem.prefetch_slot(h);
        self.hashes[self.len] = h;
        self.len += 1;
    }

    /// Keys named so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key was named.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Runs the later passes for the keys named so far (each key's node,
    /// then its newest version), before the reads that share this view.
    pub fn prefetch(&mut self) {
        let mem: &Arc<_> = &self.sv.mem;
        for &h in &self.hashes[..self.len] {
            mem.prefetch_node(h);
        }
        for &h in &self.hashes[..self.len] {
            mem.prefetch_newest(h);
        }
        self.len = 0;
    }
}

impl Drop for ReadAhead<'_> {
    fn drop(&mut self) {
        self.prefetch();
    }
}
