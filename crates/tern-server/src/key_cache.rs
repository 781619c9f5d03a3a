//! The committer's memory of what it last committed for each key.
//!
//! Every write needs its key's previous state (does it exist, what expiry)
//! to keep the counts and the expiry index exact. Reading it from the
//! engine is a point lookup through the memtables and tables on the one
//! thread that runs every write; with pipelined writes that lookup cost a
//! third or more of the committer's time. Since the committer is the only
//! writer of keys, the state it committed for a key stays true until it
//! writes that key again, so it can remember it: a hit is one hash lookup.
//!
//! The cache is exact or absent, never stale: it holds only states that
//! committed, forgets everything when a commit fails (the engine's state is
//! then unknown to it) and when the generation changes (FLUSHDB). Memory is
//! bounded by its capacity: when full, half the entries, picked
//! by the map's iteration order, are dropped, and their keys are read from
//! the engine again when next written.
//!
//! Entries are found by a 128-bit keyed fingerprint of the key (SipHash-1-3
//! under one random key, of the key followed by 0 and by 1) instead of the
//! key itself: a lookup then
//! touches the map's slot and nothing else, where a stored key was one more
//! cache miss (a profile of pipelined random `SET`s had a quarter of the
//! committer in this lookup). Clients choose the keys but never see the
//! hash key, so they cannot aim at a collision. Taking SipHash as the
//! pseudorandom function it is designed to be, the two halves of distinct
//! keys' fingerprints agree by chance with probability 2^-128 per pair,
//! about 2^-89 among a million keys.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::store::KeyState;

/// Memory the cache may use by default: about 840,000 keys (each
/// counted as [`ENTRY_BYTES`]).
pub const DEFAULT_CAPACITY: usize = 64 << 20;

/// Bytes one entry is counted as: its 64-byte slot (the fingerprint and
/// the state, an integer value included) and control byte, and the room a
/// hash map keeps free after it grows (up to half its slots).
/// Approximate: just after growing, the map holds up to twice its entries'
/// slots.
const ENTRY_BYTES: usize = 80;

/// A key's 128-bit keyed fingerprint.
type Fingerprint = u128;

/// Hashes a fingerprint, already uniform, by taking half of it.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u128` is used; fold anything else in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

/// Committed key states of one generation.
#[derive(Debug)]
pub struct KeyCache {
    map: HashMap<Fingerprint, KeyState, BuildHasherDefault<FingerprintHasher>>,
    /// The fingerprint's random key.
    key: RandomState,
    generation: u32,
    /// Entries it may hold: its capacity over [`ENTRY_BYTES`].
    max_entries: usize,
}

impl Default for KeyCache {
    fn default() -> Self {
        KeyCache::new(DEFAULT_CAPACITY)
    }
}

impl KeyCache {
    /// An empty cache that holds up to about `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        KeyCache {
            map: HashMap::default(),
            key: RandomState::new(),
            generation: 0,
            max_entries: capacity / ENTRY_BYTES,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The committed state of `key` in `generation`, if remembered.
    pub fn get(&self, generation: u32, key: &[u8]) -> Option<KeyState> {
        if generation != self.generation {
            return None;
        }
        self.map.get(&self.fingerprint(key)).copied()
    }

    fn fingerprint(&self, key: &[u8]) -> Fingerprint {
        let hi = self.key.hash_one((key, 0u8));
        let lo = self.key.hash_one((key, 1u8));
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// Forgets everything (a commit failed).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Records states that committed in `generation`; a new generation
    /// forgets the old one first.
    pub fn extend(
        &mut self,
        generation: u32,
        states: impl IntoIterator<Item = (Vec<u8>, KeyState)>,
    ) {
        if generation != self.generation {
            self.clear();
            self.generation = generation;
        }
        for (key, state) in states {
            let fp = self.fingerprint(&key);
            if let Some(s) = self.map.get_mut(&fp) {
                *s = state;
                continue;
            }
            if self.max_entries == 0 {
                continue;
            }
            if self.map.len() >= self.max_entries {
                self.evict_half();
            }
            self.map.insert(fp, state);
        }
    }

    /// Drops every other entry in iteration order (arbitrary, since the
    /// fingerprints are randomly keyed). Refilling takes as many inserts as
    /// were dropped, so eviction costs O(1) per insert over time.
    fn evict_half(&mut self) {
        let mut keep = false;
        self.map.retain(|_, _| {
            keep = !keep;
            keep
        });
    }
}

/// The slot size [`ENTRY_BYTES`] counts on.
const _: () = assert!(std::mem::size_of::<(Fingerprint, KeyState)>() <= 64);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn live(expire_at: Option<u64>) -> KeyState {
        KeyState {
            exists: true,
            expire_at,
            int: None,
        }
    }

    #[test]
    fn remembers_the_latest_state_of_a_key() {
        let mut c = KeyCache::default();
        c.extend(1, [(b"a".to_vec(), live(None))]);
        c.extend(1, [(b"a".to_vec(), live(Some(5)))]);
        assert_eq!(c.get(1, b"a"), Some(live(Some(5))));
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(1, b"b"), None);
    }

    #[test]
    fn another_generation_sees_nothing_and_replaces_the_old_one() {
        let mut c = KeyCache::default();
        c.extend(1, [(b"a".to_vec(), live(None))]);
        assert_eq!(c.get(2, b"a"), None);
        c.extend(2, [(b"b".to_vec(), KeyState::default())]);
        assert_eq!(c.get(2, b"a"), None, "the old generation was forgotten");
        assert_eq!(c.get(2, b"b"), Some(KeyState::default()));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut c = KeyCache::default();
        c.extend(1, [(b"a".to_vec(), live(None))]);
        c.clear();
        assert!(c.is_empty());
        assert_eq!(c.get(1, b"a"), None);
    }

    #[test]
    fn stays_within_its_capacity_and_keeps_what_it_inserted_last() {
        let cap = 100 * ENTRY_BYTES;
        let mut c = KeyCache::new(cap);
        for i in 0..10_000u64 {
            c.extend(1, [(i.to_be_bytes().to_vec(), live(Some(i)))]);
            assert!(
                c.len() * ENTRY_BYTES <= cap,
                "{} entries after {i} inserts",
                c.len()
            );
            assert_eq!(c.get(1, &i.to_be_bytes()), Some(live(Some(i))));
        }
        assert!(
            c.len() >= 50,
            "eviction dropped more than half: {}",
            c.len()
        );
        // Whatever it still holds is what was inserted for that key.
        let mut held = 0;
        for i in 0..10_000u64 {
            if let Some(s) = c.get(1, &i.to_be_bytes()) {
                assert_eq!(s, live(Some(i)));
                held += 1;
            }
        }
        assert_eq!(held, c.len());
    }

    #[test]
    fn keys_that_differ_anywhere_are_told_apart() {
        let mut c = KeyCache::default();
        let keys: Vec<Vec<u8>> = (0..50_000u32)
            .flat_map(|i| {
                let k = format!("key:{i:012}").into_bytes();
                // With a byte more at the end, and without the first.
                [k.clone(), [&k[..], b"\0"].concat(), k[1..].to_vec()]
            })
            .collect();
        for (i, k) in keys.iter().enumerate() {
            c.extend(1, [(k.clone(), live(Some(i as u64)))]);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(c.get(1, k), Some(live(Some(i as u64))), "{k:?}");
        }
        assert_eq!(c.get(1, b"key:"), None);
    }

    #[test]
    fn a_cache_too_small_for_one_entry_keeps_nothing() {
        let mut c = KeyCache::new(ENTRY_BYTES - 1);
        c.extend(1, [(b"k".to_vec(), live(None))]);
        assert_eq!(c.get(1, b"k"), None);
        assert!(c.is_empty());
    }
}
