//! A hash index from user key to a node of that key (its listed node, or
//! without version chains its newest), so a point read of a key the
//! memtable holds costs two or three cache lines instead of a skiplist
//! descent (a cache miss per level).
//!
//! Open addressing with linear probing over 8-byte slots: the high 32 bits
//! hold a tag from the key's hash, the low 32 the node's arena offset (never
//! 0, so an all-zero slot is empty). The index holds keys, not versions, so
//! overwrites never use a slot. In a memtable with version chains the
//! slot names the key's listed node for good ([`MemIndex::claim`]) and
//! newer versions hang from that node; in one without, a new version
//! replaces the slot's node when its sequence number is higher
//! ([`MemIndex::insert`]). A reader whose snapshot is older than every
//! version it reaches from the slot searches the list instead (the node
//! may not be linked yet: `MemTable::add_all_deferred`).
//!
//! When a new key finds no free slot within [`MAX_PROBES`], it is left out
//! and the index is marked incomplete. From then on an index miss proves
//! nothing, and the caller falls back to the filter and the list; an index
//! hit stays exact, since versions of an indexed key always find its slot:
//! every inserter of a key walks the same probe sequence, slots never empty
//! again, so one that gives up saw every slot of it taken by other keys,
//! and no inserter of the same key can have claimed one after it. (A limit
//! on the fill, checked apart from the claim, would break that: one
//! inserter could refuse a slot another then claims for an older version.)
//!
//! Ordering: a node's bytes are written before its slot (it may be linked
//! into the list before or after), and slots are
//! written (and the incomplete mark stored) before the writer publishes the
//! group's sequence number with `Release`. A reader loaded that number with
//! `Acquire` first, so it sees every slot and mark it may need; a slot it
//! loads with `Acquire` makes the node's bytes visible.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::arena::zeroed_words;

/// Slots a lookup or insert examines before giving up (eight cache lines).
const MAX_PROBES: usize = 64;
/// Arena bytes per slot, at least: the slot count is the power of two at
/// or below `capacity / 64`, so a 64 MiB memtable (whose arena is a little
/// larger) gets 1M slots (8 MiB).
const ARENA_BYTES_PER_SLOT: usize = 64;

/// What the index knows about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The key's listed node, from which its newer versions are chained
    /// (in a table without chains: its newest node, or one at least as
    /// new as the reader's snapshot may see).
    Found(u32),
    /// The memtable holds no version of the key.
    Absent,
    /// The index cannot tell: the key may be one that was left out.
    Unknown,
}

/// What [`MemIndex::claim`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The key had no slot; now one names the node.
    Placed,
    /// The key's slot names this node, put there earlier.
    Held(u32),
    /// The key had no slot and none was free within reach: the index is
    /// now incomplete.
    Full,
}

/// Where [`MemIndex::probe`] ended.
enum Probe<'a> {
    Placed,
    /// The key's slot and what it held.
    Held(&'a AtomicU64, u64),
    Full,
}

/// The index of one memtable.
pub(crate) struct MemIndex {
    slots: Box<[AtomicU64]>,
    mask: usize,
    complete: AtomicBool,
}

impl MemIndex {
    /// An index sized for a memtable arena of `arena_capacity` bytes.
    pub(crate) fn for_arena(arena_capacity: usize) -> MemIndex {
        let want = (arena_capacity / ARENA_BYTES_PER_SLOT).max(MAX_PROBES);
        // The largest power of two not above `want`.
        let len = 1usize << (usize::BITS - 1 - want.leading_zeros());
        MemIndex {
            slots: zeroed_words(len),
            mask: len - 1,
            complete: AtomicBool::new(true),
        }
    }

    /// Whether every key inserted has a slot (a miss proves absence).
    pub(crate) fn is_complete(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    /// Bytes the index takes.
    pub(crate) fn size(&self) -> usize {
        self.slots.len() * 8
    }

    /// Points `hash`'s key at `node` unless the slot already holds a newer
    /// version. `same_key(n)` tells whether node `n` holds the key;
    /// `newer(n)` whether `node` is newer than node `n` (of the same key).
    /// Returns `false` when a new key could not be placed (the index is
    /// then incomplete and the caller must remember the key elsewhere).
    pub(crate) fn insert(
        &self,
        hash: u64,
        node: u32,
        same_key: impl Fn(u32) -> bool,
        newer: impl Fn(u32) -> bool,
    ) -> bool {
        match self.probe(hash, node, same_key) {
            Probe::Full => false,
            Probe::Placed => true,
            Probe::Held(slot, mut cur) => {
                let word = (hash >> 32) << 32 | u64::from(node);
                // The slot stays the key's: only a newer version replaces
                // the one it names.
                while newer(cur as u32) {
                    match slot.compare_exchange(cur, word, Ordering::AcqRel, Ordering::Acquire) {
                        Ok(_) => break,
                        Err(now) => cur = now,
                    }
                }
                true
            }
        }
    }

    /// Gives `hash`'s key a slot naming `node`, unless it has one: for a
    /// memtable with version chains, whose slots name each key's listed
    /// node (the first to claim one) for good. `same_key` as for
    /// [`MemIndex::insert`].
    pub(crate) fn claim(&self, hash: u64, node: u32, same_key: impl Fn(u32) -> bool) -> Claim {
        match self.probe(hash, node, same_key) {
            Probe::Placed => Claim::Placed,
            Probe::Held(_, cur) => Claim::Held(cur as u32),
            Probe::Full => Claim::Full,
        }
    }

    /// Walks `hash`'s probe sequence to the key's slot, claiming the first
    /// empty one for `node` if the key has none; marks the index incomplete
    /// when neither is within reach.
    fn probe(&self, hash: u64, node: u32, same_key: impl Fn(u32) -> bool) -> Probe<'_> {
        let tag = hash >> 32;
        let word = tag << 32 | u64::from(node);
        let mut i = hash as usize & self.mask;
        for _ in 0..MAX_PROBES {
            let slot = &self.slots[i];
            let mut cur = slot.load(Ordering::Acquire);
            if cur == 0 {
                match slot.compare_exchange(0, word, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Probe::Placed,
                    // Taken meanwhile, maybe by this very key.
                    Err(now) => cur = now,
                }
            }
            if cur >> 32 == tag && same_key(cur as u32) {
                return Probe::Held(slot, cur);
            }
            i = (i + 1) & self.mask;
        }
        self.complete.store(false, Ordering::Relaxed);
        Probe::Full
    }

    /// Brings `hash`'s first slot into the CPU cache.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        crate::hint::prefetch_read(&self.slots[hash as usize & self.mask]);
    }

    /// The node `hash`'s first slot points at if its tag matches: a guess
    /// (the key is not compared), good only for prefetching. The load is
    /// `Acquire`, like [`MemIndex::find`]'s, so the node's bytes may be
    /// read.
    #[inline]
    pub(crate) fn guess(&self, hash: u64) -> Option<u32> {
        let cur = self.slots[hash as usize & self.mask].load(Ordering::Acquire);
        (cur != 0 && cur >> 32 == hash >> 32).then_some(cur as u32)
    }

    /// Looks `hash`'s key up; `same_key` as for [`MemIndex::insert`].
    pub(crate) fn find(&self, hash: u64, same_key: impl Fn(u32) -> bool) -> Lookup {
        let tag = hash >> 32;
        let mut i = hash as usize & self.mask;
        for _ in 0..MAX_PROBES {
            let cur = self.slots[i].load(Ordering::Acquire);
            if cur == 0 {
                break;
            }
            if cur >> 32 == tag && same_key(cur as u32) {
                return Lookup::Found(cur as u32);
            }
            i = (i + 1) & self.mask;
        }
        if self.complete.load(Ordering::Relaxed) {
            Lookup::Absent
        } else {
            Lookup::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nodes are plain numbers here: node `n` holds key `n % 1000` at
    /// sequence `n`.
    fn insert(ix: &MemIndex, node: u32) -> bool {
        let key = node % 1000;
        ix.insert(hash(key), node, |n| n % 1000 == key, |n| node > n)
    }

    fn hash(key: u32) -> u64 {
        crate::format::bloom::bloom_hash(&key.to_le_bytes())
    }

    fn find(ix: &MemIndex, key: u32) -> Lookup {
        ix.find(hash(key), |n| n % 1000 == key)
    }

    #[test]
    fn keeps_the_newest_version_of_each_key() {
        let ix = MemIndex::for_arena(1 << 20);
        for node in [5, 1005, 7, 3005, 2005] {
            assert!(insert(&ix, node));
        }
        assert_eq!(find(&ix, 5), Lookup::Found(3005));
        assert_eq!(find(&ix, 7), Lookup::Found(7));
        assert_eq!(find(&ix, 6), Lookup::Absent);
        let used = ix.slots.iter().filter(|s| s.load(Ordering::Relaxed) != 0);
        assert_eq!(used.count(), 2);
    }

    #[test]
    fn a_claim_keeps_the_first_node_of_each_key() {
        let ix = MemIndex::for_arena(1 << 20);
        let claim = |node: u32| ix.claim(hash(node % 1000), node, |n| n % 1000 == node % 1000);
        assert_eq!(claim(5), Claim::Placed);
        assert_eq!(claim(1005), Claim::Held(5));
        assert_eq!(claim(7), Claim::Placed);
        assert_eq!(claim(3005), Claim::Held(5));
        assert_eq!(find(&ix, 5), Lookup::Found(5));
        assert_eq!(find(&ix, 6), Lookup::Absent);
    }

    #[test]
    fn guess_names_the_node_in_a_keys_first_slot() {
        let ix = MemIndex::for_arena(1 << 20);
        assert_eq!(ix.guess(hash(5)), None);
        assert!(insert(&ix, 5));
        assert!(insert(&ix, 1005));
        assert_eq!(ix.guess(hash(5)), Some(1005));
        // Another key's hash with another tag guesses nothing.
        assert_eq!(ix.guess(hash(6)), None);
        ix.prefetch(hash(5));
    }

    #[test]
    fn a_full_index_says_it_cannot_tell() {
        // 64 slots, all within reach of every key's probes.
        let ix = MemIndex::for_arena(0);
        assert_eq!(ix.size(), 64 * 8);
        let placed = (1..200).filter(|&n| insert(&ix, n)).count();
        assert_eq!(placed, 64);
        // Keys that went in are still exact; the others are unknown.
        let mut found = 0;
        for key in 1..200 {
            match find(&ix, key) {
                Lookup::Found(n) => {
                    assert_eq!(n, key);
                    found += 1;
                }
                Lookup::Unknown => {}
                Lookup::Absent => panic!("an incomplete index answered absent for {key}"),
            }
        }
        assert_eq!(found, 64);
        // New versions of an indexed key still find its slot.
        let first = (1..200)
            .find(|&k| find(&ix, k) == Lookup::Found(k))
            .unwrap_or(0);
        assert!(insert(&ix, first + 1000));
        assert_eq!(find(&ix, first), Lookup::Found(first + 1000));
    }

    #[test]
    fn slots_are_a_power_of_two_at_most_one_per_64_bytes() {
        assert_eq!(MemIndex::for_arena(64 << 20).size(), 8 << 20);
        assert_eq!(MemIndex::for_arena((72 << 20) + 4096).size(), 8 << 20);
        assert_eq!(MemIndex::for_arena(1 << 12).size(), 64 * 8);
    }

    /// Two inserters of one new key racing for the last free slots: the
    /// index must end at the newer version, or say it cannot tell.
    #[test]
    fn racing_inserts_of_a_new_key_into_a_nearly_full_index_stay_exact() {
        for round in 0..200u32 {
            let ix = std::sync::Arc::new(MemIndex::for_arena(0));
            // Fill all but a few slots with other keys.
            let mut filler = 100;
            while ix
                .slots
                .iter()
                .filter(|s| s.load(Ordering::Relaxed) == 0)
                .count()
                > 3
            {
                insert(&ix, filler);
                filler += 1;
            }
            let key = 7 + round % 50;
            let threads: Vec<_> = [1000u32, 2000, 3000]
                .into_iter()
                .map(|v| {
                    let ix = ix.clone();
                    std::thread::spawn(move || {
                        insert(&ix, v + key);
                        // A third inserter takes slots meanwhile.
                        insert(&ix, 900 + v / 1000);
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap_or_else(|_| panic!("inserter panicked"));
            }
            match find(&ix, key) {
                Lookup::Found(n) => assert_eq!(n, 3000 + key, "round {round}"),
                Lookup::Unknown => {}
                Lookup::Absent => panic!("round {round}: absent"),
            }
        }
    }

    #[test]
    fn concurrent_versions_end_at_the_newest() {
        let ix = std::sync::Arc::new(MemIndex::for_arena(1 << 20));
        let threads: Vec<_> = (0..4u32)
            .map(|t| {
                let ix = ix.clone();
                std::thread::spawn(move || {
                    for round in 0..50u32 {
                        for key in 0..200u32 {
                            // Node numbers grow with the round; threads
                            // interleave theirs.
                            let node = ((round * 4 + t) * 1000) + key;
                            insert(&ix, node);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap_or_else(|_| panic!("inserter panicked"));
        }
        for key in 0..200u32 {
            assert_eq!(find(&ix, key), Lookup::Found(((49 * 4 + 3) * 1000) + key));
        }
    }
}
