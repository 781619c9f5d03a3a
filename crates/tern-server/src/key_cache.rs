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
//! bounded by its capacity: when full, about half the entries (a random
//! half, see below) are dropped, and their keys are read from the engine
//! again when next written.
//!
//! Entries are found by a 128-bit keyed fingerprint of the key (SipHash-1-3
//! under one random key, of the key followed by 0 and by 1) instead of the
//! key itself: a lookup then touches the table's slot and nothing else,
//! where a stored key was one more cache miss (a profile of pipelined
//! random `SET`s had a quarter of the committer in this lookup). Clients
//! choose the keys but never see the hash key, so they cannot aim at a
//! collision. Taking SipHash as the pseudorandom function it is designed
//! to be, the two halves of distinct keys' fingerprints agree by chance
//! with probability 2^-128 per pair, about 2^-89 among a million keys.
//!
//! The table is open-addressed with linear probing over slots of one
//! cache line each (fingerprint and state), at most three quarters full,
//! so a hit is usually one cache miss, and that line is known from the
//! fingerprint alone: the committer fingerprints the keys of the commands
//! it is about to run and asks for their lines ahead
//! ([`KeyCache::prefetch`]), so the misses overlap instead of stalling it
//! one after another. A general hash map keeps its control bytes apart
//! from its slots (a second miss) and cannot name a key's slot before the
//! lookup. The table grows by doubling up to its capacity (the old and the
//! new table live together while it moves, once per doubling) and, full,
//! drops the entries with one fingerprint bit set, a different bit each
//! time, in place, by backward-shift deletion.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::store::KeyState;

/// Memory the cache may use by default: 2^20 slots, about 786,000 keys.
pub const DEFAULT_CAPACITY: usize = 64 << 20;

/// A key's 128-bit keyed fingerprint ([`KeyCache::fingerprint`]); never 0,
/// which marks an empty slot.
pub type Fingerprint = u128;

/// Hashes a fingerprint, already uniform, by taking half of it: maps keyed
/// by fingerprints hash nothing again.
#[derive(Default)]
pub struct FingerprintHasher(u64);

/// A map keyed by fingerprints.
pub type FingerprintMap<V> = HashMap<Fingerprint, V, BuildHasherDefault<FingerprintHasher>>;

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

/// One entry: a cache line holding the fingerprint (0: empty) and the
/// state.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct Slot {
    fp: Fingerprint,
    state: KeyState,
}

/// Bytes one slot takes.
const SLOT_BYTES: usize = std::mem::size_of::<Slot>();
const _: () = assert!(SLOT_BYTES == 64);

/// Slots a table starts with.
const MIN_SLOTS: usize = 16;

/// Entries a table of `slots` slots holds at most (three quarters full,
/// so a probe for an absent key ends within a few lines; a table of two
/// holds one, so a probe always meets an empty slot).
fn load_limit(slots: usize) -> usize {
    slots * 3 / 4
}

/// Committed key states of one generation.
#[derive(Debug)]
pub struct KeyCache {
    /// A power of two in length, or empty; at most [`load_limit`] full.
    slots: Vec<Slot>,
    /// Slots in use.
    len: usize,
    /// The fingerprint's random key.
    key: RandomState,
    generation: u32,
    /// The most slots it may have: the largest power of two whose slots
    /// fit in its capacity (0: it keeps nothing).
    max_slots: usize,
    /// Halvings so far: picks the fingerprint bit the next one drops by.
    halvings: u32,
}

impl Default for KeyCache {
    fn default() -> Self {
        KeyCache::new(DEFAULT_CAPACITY)
    }
}

impl KeyCache {
    /// An empty cache whose table takes at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        let fit = capacity / SLOT_BYTES;
        let max_slots = match fit {
            // One slot alone could never take an entry (three quarters of
            // one is none).
            0 | 1 => 0,
            n => 1 << n.ilog2(),
        };
        KeyCache {
            slots: Vec::new(),
            len: 0,
            key: RandomState::new(),
            generation: 0,
            max_slots,
            halvings: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most entries it holds before it drops half.
    pub fn max_entries(&self) -> usize {
        load_limit(self.max_slots)
    }

    /// Bytes its table takes now.
    pub fn table_bytes(&self) -> usize {
        self.slots.len() * SLOT_BYTES
    }

    /// `key`'s fingerprint under this cache's random key: the name the
    /// cache, and the pending writes' per-key states, know it by.
    pub fn fingerprint(&self, key: &[u8]) -> Fingerprint {
        let hi = self.key.hash_one((key, 0u8));
        let lo = self.key.hash_one((key, 1u8));
        // 0 marks an empty slot; folding it into 1 doubles the chance of
        // that one value, which stays negligible.
        ((u128::from(hi) << 64) | u128::from(lo)).max(1)
    }

    /// Where the probe for `fp` starts.
    fn home(&self, fp: Fingerprint) -> usize {
        (fp as u64 as usize) & (self.slots.len() - 1)
    }

    /// Brings the slot a lookup of `fp` starts at into the CPU's caches,
    /// so the lookup soon after does not wait on memory.
    pub fn prefetch(&self, fp: Fingerprint) {
        if !self.slots.is_empty() {
            tern::hint::prefetch_read(&self.slots[self.home(fp)]);
        }
    }

    /// The slot holding `fp`, or the empty one where it would go.
    fn find(&self, fp: Fingerprint) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(fp);
        // Ends: the table is never full (at most three quarters).
        loop {
            let s = &self.slots[i];
            if s.fp == fp || s.fp == 0 {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// The committed state of the key with fingerprint `fp` in
    /// `generation`, if remembered.
    pub fn get(&self, generation: u32, fp: Fingerprint) -> Option<KeyState> {
        // 0 is no key's fingerprint (it marks an empty slot).
        if generation != self.generation || self.slots.is_empty() || fp == 0 {
            return None;
        }
        let s = &self.slots[self.find(fp)];
        (s.fp == fp).then_some(s.state)
    }

    /// Forgets everything (a commit failed). The table keeps its size.
    pub fn clear(&mut self) {
        if self.len > 0 {
            self.slots.fill(Slot::default());
            self.len = 0;
        }
    }

    /// Records states that committed in `generation`, by fingerprint; a
    /// new generation forgets the old one first.
    pub fn extend(
        &mut self,
        generation: u32,
        states: impl IntoIterator<Item = (Fingerprint, KeyState)>,
    ) {
        if generation != self.generation {
            self.clear();
            self.generation = generation;
        }
        for (fp, state) in states {
            self.insert(fp, state);
        }
    }

    fn insert(&mut self, fp: Fingerprint, state: KeyState) {
        // A cache with no room keeps nothing (and has no table to halve).
        if fp == 0 || self.max_slots == 0 {
            return;
        }
        if !self.slots.is_empty() {
            let i = self.find(fp);
            if self.slots[i].fp == fp {
                self.slots[i].state = state;
                return;
            }
        }
        if self.len + 1 > load_limit(self.slots.len()) && self.slots.len() < self.max_slots {
            self.grow((self.slots.len() * 2).max(MIN_SLOTS).min(self.max_slots));
        }
        while self.len + 1 > load_limit(self.slots.len()) {
            self.halve();
        }
        let i = self.find(fp);
        self.slots[i] = Slot { fp, state };
        self.len += 1;
    }

    /// Moves the entries into a table of `slots` slots.
    fn grow(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); slots]);
        for s in old.into_iter().filter(|s| s.fp != 0) {
            let i = self.find(s.fp);
            self.slots[i] = s;
        }
    }

    /// Drops about half the entries, in place: those with one bit of the
    /// fingerprint set, a different bit each time (the fingerprints are
    /// keyed, so that is a random half whatever the keys). Refilling takes
    /// as many inserts as were dropped, so it costs O(1) per insert over
    /// time, and it needs no second table.
    fn halve(&mut self) {
        let bit = 64 + self.halvings % 64;
        self.halvings = self.halvings.wrapping_add(1);
        let n = self.slots.len();
        let mut i = 0;
        while i < n {
            let fp = self.slots[i].fp;
            if fp != 0 && (fp >> bit) & 1 == 1 {
                self.remove_at(i);
                // A later entry may have moved into `i`: look again.
                continue;
            }
            i += 1;
        }
    }

    /// Empties slot `i` and moves later entries of its probe run back so
    /// that every entry stays reachable from its home (linear probing's
    /// backward-shift deletion).
    fn remove_at(&mut self, mut i: usize) {
        let mask = self.slots.len() - 1;
        self.slots[i] = Slot::default();
        self.len -= 1;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.fp == 0 {
                return;
            }
            // The entry at `j` may fill the hole at `i` unless its home
            // lies cyclically in (i, j]: then a probe from its home would
            // not pass `i`.
            let home = self.home(s.fp);
            let home_after_hole = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !home_after_hole {
                self.slots[i] = s;
                self.slots[j] = Slot::default();
                i = j;
            }
        }
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
            int: None,
        }
    }

    /// Records `key`'s state as committed in `generation`.
    fn put(c: &mut KeyCache, generation: u32, key: &[u8], state: KeyState) {
        let fp = c.fingerprint(key);
        c.extend(generation, [(fp, state)]);
    }

    /// `key`'s state in `generation`, if remembered.
    fn get(c: &KeyCache, generation: u32, key: &[u8]) -> Option<KeyState> {
        c.get(generation, c.fingerprint(key))
    }

    #[test]
    fn remembers_the_latest_state_of_a_key() {
        let mut c = KeyCache::default();
        put(&mut c, 1, b"a", live(None));
        put(&mut c, 1, b"a", live(Some(5)));
        assert_eq!(get(&c, 1, b"a"), Some(live(Some(5))));
        assert_eq!(c.len(), 1);
        assert_eq!(get(&c, 1, b"b"), None);
    }

    #[test]
    fn another_generation_sees_nothing_and_replaces_the_old_one() {
        let mut c = KeyCache::default();
        put(&mut c, 1, b"a", live(None));
        assert_eq!(get(&c, 2, b"a"), None);
        put(&mut c, 2, b"b", KeyState::default());
        assert_eq!(get(&c, 2, b"a"), None, "the old generation was forgotten");
        assert_eq!(get(&c, 2, b"b"), Some(KeyState::default()));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut c = KeyCache::default();
        put(&mut c, 1, b"a", live(None));
        c.clear();
        assert!(c.is_empty());
        assert_eq!(get(&c, 1, b"a"), None);
    }

    #[test]
    fn stays_within_its_capacity_and_keeps_what_it_inserted_last() {
        let cap = 100 * SLOT_BYTES;
        let mut c = KeyCache::new(cap);
        assert_eq!(c.max_entries(), 48, "64 slots, three quarters full");
        // How full it was after each insert, summed: each halving keeps a
        // random half (a fingerprint bit), so one moment's count can fall
        // below half by chance, the average over many cannot.
        let mut filled = 0;
        for i in 0..10_000u64 {
            put(&mut c, 1, &i.to_be_bytes(), live(Some(i)));
            assert!(c.table_bytes() <= cap, "{} bytes", c.table_bytes());
            assert!(c.len() <= c.max_entries(), "{} entries", c.len());
            assert_eq!(get(&c, 1, &i.to_be_bytes()), Some(live(Some(i))));
            filled += c.len();
        }
        // Between half and all of `max_entries`: about three quarters.
        let average = filled / 10_000;
        assert!(
            average >= c.max_entries() * 3 / 5,
            "eviction kept {average} entries on average of {}",
            c.max_entries()
        );
        // Whatever it still holds is what was inserted for that key.
        let mut held = 0;
        for i in 0..10_000u64 {
            if let Some(s) = get(&c, 1, &i.to_be_bytes()) {
                assert_eq!(s, live(Some(i)));
                held += 1;
            }
        }
        assert_eq!(held, c.len());
    }

    #[test]
    fn fingerprints_that_start_at_one_slot_are_all_found() {
        let mut c = KeyCache::new(16 * SLOT_BYTES);
        // The same low half puts every one at the last slot's home, so the
        // probe runs from the end of the table round to its start.
        let fp = |i: u64| (u128::from(i) << 64) | 15;
        c.extend(1, (1..=12).map(|i| (fp(i), live(Some(i)))));
        assert_eq!(c.len(), 12);
        for i in 1..=12 {
            assert_eq!(c.get(1, fp(i)), Some(live(Some(i))));
        }
        assert_eq!(c.get(1, fp(13)), None, "absent, probe ends");
        assert_eq!(c.get(1, 0), None, "0 is no fingerprint");
        // Replacing one leaves the others.
        c.extend(1, [(fp(6), live(None))]);
        assert_eq!(c.get(1, fp(6)), Some(live(None)));
        assert_eq!(c.get(1, fp(12)), Some(live(Some(12))));
        assert_eq!(c.len(), 12);
        // A thirteenth does not fit in 16 slots at three quarters: those
        // with bit 64 set (the odd ones) go, from the middle of the run,
        // and the rest move back and stay reachable.
        c.extend(1, [(fp(13), live(Some(13)))]);
        assert_eq!(c.len(), 7);
        for i in 1..=13 {
            let want = match i {
                6 => Some(live(None)),
                13 => Some(live(Some(13))),
                i if i % 2 == 1 => None,
                i => Some(live(Some(i))),
            };
            assert_eq!(c.get(1, fp(i)), want, "{i}");
        }
    }

    /// Random inserts over few homes (long runs that wrap), many
    /// halvings: the cache answers only with the latest state of a key, or
    /// nothing, and counts what it holds.
    #[test]
    fn runs_that_wrap_survive_growth_and_halving_against_a_model() {
        for seed in 0..20u64 {
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut next = move || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut c = KeyCache::new(64 * SLOT_BYTES);
            let mut model = std::collections::HashMap::new();
            for step in 0..5_000u64 {
                // 200 keys, homes among the last 4 slots and the first 4.
                let k = next() % 200;
                let home = [60u128, 61, 62, 63, 0, 1, 2, 3][(k % 8) as usize];
                let fp = ((u128::from(k) + 1) << 64) | home;
                let state = live(Some(step));
                c.extend(1, [(fp, state)]);
                model.insert(fp, state);
                assert!(c.len() <= c.max_entries(), "seed {seed} step {step}");
                assert_eq!(c.get(1, fp), Some(state), "seed {seed} step {step}");
            }
            let held = model
                .iter()
                .filter(|(fp, want)| match c.get(1, **fp) {
                    Some(s) => {
                        assert_eq!(s, **want, "seed {seed}: a stale state");
                        true
                    }
                    None => false,
                })
                .count();
            assert_eq!(held, c.len(), "seed {seed}");
            assert!(held >= c.max_entries() / 4, "seed {seed}: {held} held");
        }
    }

    #[test]
    fn a_cache_of_two_slots_holds_its_newest_entry() {
        let mut c = KeyCache::new(2 * SLOT_BYTES);
        assert_eq!(c.max_entries(), 1);
        put(&mut c, 1, b"a", live(None));
        put(&mut c, 1, b"b", live(Some(2)));
        assert_eq!(c.len(), 1);
        assert_eq!(get(&c, 1, b"b"), Some(live(Some(2))));
        assert_eq!(get(&c, 1, b"a"), None);
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
            put(&mut c, 1, k, live(Some(i as u64)));
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(get(&c, 1, k), Some(live(Some(i as u64))), "{k:?}");
        }
        assert_eq!(get(&c, 1, b"key:"), None);
    }

    #[test]
    fn a_cache_too_small_for_one_entry_keeps_nothing() {
        let mut c = KeyCache::new(2 * SLOT_BYTES - 1);
        put(&mut c, 1, b"k", live(None));
        assert_eq!(get(&c, 1, b"k"), None);
        assert!(c.is_empty());
    }
}
