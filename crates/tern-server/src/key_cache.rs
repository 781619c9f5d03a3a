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
//! the engine again when next written. The map keeps the standard library's
//! keyed hasher, since clients choose the keys.

use std::collections::HashMap;

use crate::store::KeyState;

/// Memory the cache may use by default: about 700,000 keys of 30 bytes
/// (each costs its length plus [`ENTRY_OVERHEAD`]).
pub const DEFAULT_CAPACITY: usize = 64 << 20;

/// Bytes one entry costs besides its key: the key's `Vec`, the state and
/// the map's own slot and control byte, rounded up.
const ENTRY_OVERHEAD: usize = 64;

/// Committed key states of one generation.
#[derive(Debug)]
pub struct KeyCache {
    map: HashMap<Vec<u8>, KeyState>,
    generation: u32,
    bytes: usize,
    capacity: usize,
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
            map: HashMap::new(),
            generation: 0,
            bytes: 0,
            capacity,
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
        self.map.get(key).copied()
    }

    /// Forgets everything (a commit failed).
    pub fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
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
            if let Some(s) = self.map.get_mut(&key) {
                *s = state;
                continue;
            }
            let cost = key.len() + ENTRY_OVERHEAD;
            if cost > self.capacity {
                // Keeping it would mean evicting everything else.
                continue;
            }
            if self.bytes + cost > self.capacity {
                self.evict_half();
            }
            self.map.insert(key, state);
            self.bytes += cost;
        }
    }

    /// Drops every other entry in iteration order (arbitrary, since the
    /// hasher is randomly keyed). Refilling takes as many inserts as were
    /// dropped, so eviction costs O(1) per insert over time.
    fn evict_half(&mut self) {
        let mut keep = false;
        let mut freed = 0;
        self.map.retain(|k, _| {
            keep = !keep;
            if !keep {
                freed += k.len() + ENTRY_OVERHEAD;
            }
            keep
        });
        self.bytes -= freed;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn live(expire_at: Option<u64>) -> KeyState {
        KeyState {
            exists: true,
            expire_at,
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
        let cap = 100 * (8 + ENTRY_OVERHEAD);
        let mut c = KeyCache::new(cap);
        for i in 0..10_000u64 {
            c.extend(1, [(i.to_be_bytes().to_vec(), live(Some(i)))]);
            assert!(c.bytes <= cap, "{} bytes after {i} inserts", c.bytes);
            assert_eq!(c.get(1, &i.to_be_bytes()), Some(live(Some(i))));
        }
        assert!(
            c.len() >= 50,
            "eviction dropped more than half: {}",
            c.len()
        );
        // Whatever it still holds is what was inserted for that key.
        for (k, s) in &c.map {
            let i = u64::from_be_bytes(k.as_slice().try_into().unwrap());
            assert_eq!(*s, live(Some(i)));
        }
    }

    #[test]
    fn a_key_larger_than_the_cache_is_not_kept() {
        let mut c = KeyCache::new(ENTRY_OVERHEAD + 4);
        c.extend(1, [(b"k".to_vec(), live(None))]);
        c.extend(1, [(vec![b'k'; 10], live(None))]);
        assert_eq!(c.get(1, &[b'k'; 10]), None);
        assert_eq!(c.get(1, b"k"), Some(live(None)));
    }
}
