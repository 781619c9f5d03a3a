//! The hash index: 64-byte buckets of seven 8-byte entries and an overflow
//! link. An entry holds a tag (14 more bits of the key's hash) and the log
//! address of the newest record of its chain; keys whose hash shares bucket
//! and tag share the chain, told apart by their records' keys.
//!
//! Entries change only by compare-and-swap, so no operation takes a latch.
//! An entry is created in two steps (as in FASTER): a tentative entry is
//! claimed, the bucket is checked for another entry with the same tag, and
//! the loser of such a race clears its claim and starts over. The claim and
//! the check are sequentially consistent: each creator's claim is a store
//! followed by loads of the other slots, which weaker orders could reorder.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::record::backoff;
use crate::{Error, Result};

const SLOTS: usize = 7;
const ADDRESS_MASK: u64 = (1 << 48) - 1;
const TAG_SHIFT: u32 = 48;
const TAG_MASK: u64 = 0x3fff;
const OCCUPIED: u64 = 1 << 62;
const TENTATIVE: u64 = 1 << 63;

#[repr(align(64))]
#[derive(Default)]
struct Bucket {
    /// Seven entries, then the overflow link (1-based index into the
    /// overflow area, 0: none).
    slots: [AtomicU64; SLOTS + 1],
}

/// A key's 64-bit hash: the low bits pick the bucket, the top 14 the tag.
#[derive(Clone, Copy, Debug)]
pub struct KeyHash(pub u64);

impl KeyHash {
    /// The hash of `key`.
    pub fn of(key: &[u8]) -> KeyHash {
        KeyHash(xxhash_rust::xxh3::xxh3_64(key))
    }

    fn tag(self) -> u64 {
        (self.0 >> 50) & TAG_MASK
    }
}

/// The log address an entry points at (0: none yet).
pub fn entry_address(entry: u64) -> u64 {
    entry & ADDRESS_MASK
}

/// The same entry pointing at `address`.
pub fn with_address(entry: u64, address: u64) -> u64 {
    (entry & !ADDRESS_MASK) | (address & ADDRESS_MASK)
}

/// Overflow buckets come in chunks that double in size, made as needed, so
/// the index never fills: a larger table only makes chains shorter.
const OVERFLOW_CHUNKS: usize = 40;

/// The hash index.
pub struct HashIndex {
    buckets: Box<[Bucket]>,
    overflow: [OnceLock<Box<[Bucket]>>; OVERFLOW_CHUNKS],
    /// Buckets in the first overflow chunk.
    overflow_base: usize,
    next_overflow: AtomicUsize,
    mask: u64,
}

impl HashIndex {
    /// An empty index of `1 << bits` buckets.
    pub fn new(bits: u32) -> HashIndex {
        let n = 1usize << bits;
        HashIndex {
            buckets: (0..n).map(|_| Bucket::default()).collect(),
            overflow: std::array::from_fn(|_| OnceLock::new()),
            overflow_base: (n / 8).max(8),
            next_overflow: AtomicUsize::new(0),
            mask: n as u64 - 1,
        }
    }

    /// Chunk and position in it of overflow bucket `at` (0-based).
    fn overflow_place(&self, at: usize) -> (usize, usize) {
        let units = at / self.overflow_base + 1;
        let chunk = (usize::BITS - 1 - units.leading_zeros()) as usize;
        (chunk, at - self.overflow_base * ((1 << chunk) - 1))
    }

    fn overflow_bucket(&self, at: usize) -> &Bucket {
        let (chunk, pos) = self.overflow_place(at);
        let size = self.overflow_base << chunk;
        &self.overflow[chunk].get_or_init(|| (0..size).map(|_| Bucket::default()).collect())[pos]
    }

    fn bucket_chain(&self, hash: KeyHash) -> impl Iterator<Item = &Bucket> {
        let first = &self.buckets[(hash.0 & self.mask) as usize];
        std::iter::successors(Some(first), move |b| {
            let link = b.slots[SLOTS].load(Ordering::SeqCst) as usize;
            (link != 0).then(|| self.overflow_bucket(link - 1))
        })
    }

    fn slots(&self, hash: KeyHash) -> impl Iterator<Item = &AtomicU64> {
        self.bucket_chain(hash)
            .flat_map(|b| b.slots[..SLOTS].iter())
    }

    /// Buckets in the main table.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The addresses the entries of main bucket `b` (and its overflow
    /// buckets) point at.
    pub fn bucket_addresses(&self, b: usize) -> Vec<u64> {
        std::iter::successors(self.buckets.get(b), |bucket| {
            let link = bucket.slots[SLOTS].load(Ordering::SeqCst) as usize;
            (link != 0).then(|| self.overflow_bucket(link - 1))
        })
        .flat_map(|bucket| bucket.slots[..SLOTS].iter())
        .map(|s| s.load(Ordering::SeqCst))
        .filter(|e| e & (OCCUPIED | TENTATIVE) == OCCUPIED && entry_address(*e) != 0)
        .map(entry_address)
        .collect()
    }

    /// The entry for `hash`'s tag, if there is one.
    pub fn find(&self, hash: KeyHash) -> Option<&AtomicU64> {
        let tag = hash.tag();
        self.slots(hash).find(|s| {
            let e = s.load(Ordering::SeqCst);
            e & (OCCUPIED | TENTATIVE) == OCCUPIED && (e >> TAG_SHIFT) & TAG_MASK == tag
        })
    }

    /// The entry for `hash`'s tag, created (pointing nowhere) if missing.
    pub fn find_or_create(&self, hash: KeyHash) -> Result<&AtomicU64> {
        let tag = hash.tag();
        let mut spins = 0u32;
        loop {
            let mut free = None;
            let mut creating = false;
            for slot in self.slots(hash) {
                let e = slot.load(Ordering::SeqCst);
                if e == 0 {
                    free = free.or(Some(slot));
                } else if (e >> TAG_SHIFT) & TAG_MASK == tag {
                    if e & TENTATIVE == 0 {
                        return Ok(slot);
                    }
                    creating = true;
                }
            }
            if creating {
                // Another thread is creating this tag's entry: wait for it.
                backoff(&mut spins);
                continue;
            }
            let Some(slot) = free else {
                self.add_overflow(hash)?;
                continue;
            };
            let claim = OCCUPIED | TENTATIVE | (tag << TAG_SHIFT);
            if slot
                .compare_exchange(0, claim, Ordering::SeqCst, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let duplicate = self.slots(hash).any(|s| {
                !std::ptr::eq(s, slot) && {
                    let e = s.load(Ordering::SeqCst);
                    e != 0 && (e >> TAG_SHIFT) & TAG_MASK == tag
                }
            });
            if duplicate {
                slot.store(0, Ordering::SeqCst);
                backoff(&mut spins);
                continue;
            }
            slot.store(claim & !TENTATIVE, Ordering::SeqCst);
            return Ok(slot);
        }
    }

    fn add_overflow(&self, hash: KeyHash) -> Result<()> {
        let last = self.bucket_chain(hash).last().unwrap_or(&self.buckets[0]);
        if last.slots[SLOTS].load(Ordering::SeqCst) != 0 {
            return Ok(());
        }
        let at = self.next_overflow.fetch_add(1, Ordering::Relaxed);
        if self.overflow_place(at).0 >= OVERFLOW_CHUNKS {
            return Err(Error::IndexFull {
                buckets: self.buckets.len() as u64,
            });
        }
        self.overflow_bucket(at);
        // Losing this race leaves the bucket unused: two threads overflowing
        // one bucket at once is rare.
        let _ = last.slots[SLOTS].compare_exchange(
            0,
            at as u64 + 1,
            Ordering::SeqCst,
            Ordering::Relaxed,
        );
        Ok(())
    }

    fn all_buckets(&self) -> impl Iterator<Item = &Bucket> {
        let overflow = self
            .overflow
            .iter()
            .filter_map(OnceLock::get)
            .flat_map(|c| c.iter());
        self.buckets.iter().chain(overflow)
    }

    /// Entries in use (walks the whole index).
    #[cfg(test)]
    pub fn entries(&self) -> u64 {
        self.all_buckets()
            .flat_map(|b| b.slots[..SLOTS].iter())
            .filter(|s| s.load(Ordering::Relaxed) & OCCUPIED != 0)
            .count() as u64
    }

    /// Bytes the index takes in memory.
    pub fn memory(&self) -> u64 {
        (self.all_buckets().count() * std::mem::size_of::<Bucket>()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_created_once_and_found_again() {
        let index = HashIndex::new(4);
        let h = KeyHash::of(b"a");
        assert!(index.find(h).is_none());
        let slot = index.find_or_create(h).expect("room");
        assert_eq!(entry_address(slot.load(Ordering::Relaxed)), 0);
        slot.store(
            with_address(slot.load(Ordering::Relaxed), 4096),
            Ordering::Relaxed,
        );
        let again = index.find(h).expect("found");
        assert!(std::ptr::eq(slot, again));
        assert_eq!(entry_address(again.load(Ordering::Relaxed)), 4096);
    }

    #[test]
    fn full_buckets_overflow_into_chunks_made_as_needed() {
        let index = HashIndex::new(4);
        // Every bucket gets 300 distinct tags: 43 overflow buckets each,
        // 688 in all, across several chunks.
        let hashes: Vec<KeyHash> = (0..300u64)
            .flat_map(|t| (0..16u64).map(move |b| KeyHash(t << 50 | b)))
            .collect();
        for h in &hashes {
            index.find_or_create(*h).expect("the index grows");
        }
        for h in &hashes {
            assert!(index.find(*h).is_some());
        }
        assert_eq!(index.entries(), hashes.len() as u64);
        assert!(index.overflow[3].get().is_some(), "several chunks in use");
        let mut seen = std::collections::HashSet::new();
        for at in 0..1000 {
            let (chunk, pos) = index.overflow_place(at);
            assert!(pos < index.overflow_base << chunk, "{at}");
            assert!(seen.insert((chunk, pos)));
        }
    }

    #[test]
    fn racing_creators_of_one_tag_end_with_one_entry() {
        for round in 0..50u64 {
            let index = HashIndex::new(4);
            let h = KeyHash(round << 50 | 3);
            let slots: Vec<usize> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4)
                    .map(|_| {
                        s.spawn(|| index.find_or_create(h).expect("room") as *const _ as usize)
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("no panic"))
                    .collect()
            });
            assert!(
                slots.windows(2).all(|w| w[0] == w[1]),
                "round {round}: {slots:?}"
            );
            assert_eq!(index.entries(), 1);
        }
    }
}
