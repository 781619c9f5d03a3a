//! A blocked Bloom filter over the user keys a memtable's hash index
//! (`index.rs`) left out, so a point read skips a memtable that cannot
//! hold its key without searching the list even once the index is full.
//!
//! Most point reads of a large store miss the memtables: their keys were
//! flushed long ago. Each miss still cost a full skiplist descent, about
//! one cache miss per level. The filter answers in one cache line: a key
//! picks a 512-bit block and sets [`PROBES`] bits inside it (a "blocked"
//! filter, as RocksDB's memtable and format-version-5 filters are), at the
//! price of a slightly higher false-positive rate than a standard filter
//! with as many bits.
//!
//! Bits are only ever set, with `Relaxed` `fetch_or`s, before the writer
//! publishes the entry's sequence number. A reader that may see an entry has loaded, with
//! `Acquire`, a sequence number the writer stored with `Release` after the
//! insert, so the bits are visible to it; a reader racing the insert may
//! miss both the bits and the node, which it was allowed to miss anyway.

use std::sync::atomic::{AtomicU64, Ordering};

use super::arena::zeroed_words;

#[cfg(doc)]
use crate::format::bloom::bloom_hash;

/// Bits set per key, all inside one block.
const PROBES: u32 = 6;
/// 64-bit words per block (one 64-byte cache line).
const BLOCK_WORDS: usize = 8;
/// Arena bytes per filter bit: a memtable of 64 MiB gets a 1 MiB filter,
/// about 8 bits per entry for the smallest entries (~60 bytes each) and
/// far more for larger ones.
const ARENA_BYTES_PER_BIT: usize = 8;

/// The filter of one memtable.
pub(crate) struct MemFilter {
    words: Box<[AtomicU64]>,
    blocks: u64,
}

impl MemFilter {
    /// A filter sized for a memtable arena of `arena_capacity` bytes.
    pub(crate) fn for_arena(arena_capacity: usize) -> MemFilter {
        let bits = arena_capacity / ARENA_BYTES_PER_BIT;
        let blocks = (bits / (64 * BLOCK_WORDS)).max(1);
        MemFilter {
            words: zeroed_words(blocks * BLOCK_WORDS),
            blocks: blocks as u64,
        }
    }

    /// Bytes the filter takes.
    pub(crate) fn size(&self) -> usize {
        self.words.len() * 8
    }

    /// Records a key by its [`bloom_hash`]. The probes are gathered per word first, and a
    /// word is only written (a locked read-modify-write) when it lacks one
    /// of its bits: keys already in the table, the common case under
    /// overwrites, cost plain loads of one cache line.
    #[inline]
    pub(crate) fn add(&self, hash: u64) {
        let (block, mut h) = self.locate(hash);
        let mut masks = [0u64; BLOCK_WORDS];
        for _ in 0..PROBES {
            let bit = (h & 511) as usize;
            masks[bit / 64] |= 1 << (bit % 64);
            h >>= 9;
        }
        for (word, mask) in self.words[block..block + BLOCK_WORDS].iter().zip(masks) {
            if mask != 0 && word.load(Ordering::Relaxed) & mask != mask {
                word.fetch_or(mask, Ordering::Relaxed);
            }
        }
    }

    /// False only if no key with this [`bloom_hash`] was added.
    #[inline]
    pub(crate) fn may_contain(&self, hash: u64) -> bool {
        let (block, mut h) = self.locate(hash);
        for _ in 0..PROBES {
            let bit = (h & 511) as usize;
            if self.words[block + bit / 64].load(Ordering::Relaxed) & (1 << (bit % 64)) == 0 {
                return false;
            }
            h >>= 9;
        }
        true
    }

    /// The first word of the key's block and the bits that pick its
    /// probes (a second, independent-looking hash of the same key).
    #[inline]
    fn locate(&self, h: u64) -> (usize, u64) {
        // Multiply-shift maps the high half onto 0..blocks without a
        // division; the low half, remixed, picks the bits.
        let block = ((h >> 32) * self.blocks) >> 32;
        let probes = (h as u32 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (block as usize * BLOCK_WORDS, probes >> 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::bloom::bloom_hash;

    #[test]
    fn every_added_key_may_be_contained() {
        let f = MemFilter::for_arena(1 << 20);
        for i in 0..20_000u32 {
            f.add(bloom_hash(format!("key:{i:012}").as_bytes()));
        }
        for i in 0..20_000u32 {
            assert!(
                f.may_contain(bloom_hash(format!("key:{i:012}").as_bytes())),
                "{i}"
            );
        }
    }

    #[test]
    fn absent_keys_are_mostly_rejected() {
        // 1 MiB of arena: 131,072 bits; 16,384 keys is 8 bits per key.
        let f = MemFilter::for_arena(1 << 20);
        assert_eq!(f.size(), 1 << 14);
        for i in 0..16_384u32 {
            f.add(bloom_hash(format!("key:{i:012}").as_bytes()));
        }
        let false_positives = (0..100_000u32)
            .filter(|i| f.may_contain(bloom_hash(format!("other:{i:012}").as_bytes())))
            .count();
        // A standard filter at 8 bits per key is near 2%; a blocked one a
        // little worse.
        assert!(false_positives < 5_000, "{false_positives} of 100000");
        assert!(!MemFilter::for_arena(1 << 20).may_contain(bloom_hash(b"anything")));
    }

    #[test]
    fn a_tiny_arena_still_gets_one_block() {
        let f = MemFilter::for_arena(100);
        f.add(1);
        assert!(f.may_contain(1));
        assert_eq!(f.size(), 64);
    }
}
