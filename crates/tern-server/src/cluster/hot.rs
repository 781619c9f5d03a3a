//! A sample of the keys a node serves most, so a slot's new owner gets its
//! hottest records with the ownership change instead of pulling each on
//! first use (Shadowfax ships a sample of hot records the same way).
//!
//! One keyed request in [`SAMPLE_EVERY`] is counted, in a map of at most
//! [`CAPACITY`] keys; when it is full every count is halved and the keys
//! that reach zero leave, so the sample follows what is hot now.

use std::cell::Cell;
use std::collections::HashMap;

use parking_lot::Mutex;

use super::slot::key_slot;

/// Keyed requests per sampled one.
pub const SAMPLE_EVERY: u64 = 8;
/// Most keys remembered.
pub const CAPACITY: usize = 8192;
/// Longest key remembered (longer ones are never hot enough to matter
/// and would make the sample large).
const MAX_KEY: usize = 256;

/// The sample.
#[derive(Debug, Default)]
pub struct HotKeys {
    counts: Mutex<HashMap<Vec<u8>, u32>>,
}

thread_local! {
    /// Keyed requests this thread has seen: per thread, so sampling puts
    /// no shared cache line on every request.
    static SEEN: Cell<u64> = const { Cell::new(0) };
}

impl HotKeys {
    /// Notes a request for `key` (counted one time in [`SAMPLE_EVERY`]).
    pub fn touch(&self, key: &[u8]) {
        let seen = SEEN.with(|n| {
            n.set(n.get().wrapping_add(1));
            n.get()
        });
        if seen % SAMPLE_EVERY != 0 || key.len() > MAX_KEY {
            return;
        }
        let mut counts = self.counts.lock();
        if counts.len() >= CAPACITY && !counts.contains_key(key) {
            counts.retain(|_, c| {
                *c /= 2;
                *c > 0
            });
            if counts.len() >= CAPACITY {
                return;
            }
        }
        *counts.entry(key.to_vec()).or_insert(0) += 1;
    }

    /// Up to `n` of the hottest sampled keys whose slot `wanted` accepts,
    /// hottest first.
    pub fn hottest(&self, n: usize, wanted: impl Fn(u16) -> bool) -> Vec<Vec<u8>> {
        let counts = self.counts.lock();
        let mut keys: Vec<(&Vec<u8>, u32)> = counts
            .iter()
            .filter(|(k, _)| wanted(key_slot(k)))
            .map(|(k, c)| (k, *c))
            .collect();
        keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        keys.into_iter().take(n).map(|(k, _)| k.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hottest_keys_come_first_and_the_sample_stays_bounded() {
        let h = HotKeys::default();
        for i in 0..(SAMPLE_EVERY * 100) {
            h.touch(b"hot");
            if i % 4 == 0 {
                h.touch(b"warm");
            }
        }
        for i in 0..(CAPACITY as u64 * SAMPLE_EVERY * 3) {
            h.touch(format!("cold{i}").as_bytes());
        }
        assert!(h.counts.lock().len() <= CAPACITY);
        let top = h.hottest(2, |_| true);
        assert_eq!(
            top.first().map(|k| k.as_slice()),
            Some(&b"hot"[..]),
            "{top:?}"
        );
        let slot = key_slot(b"hot");
        assert!(h.hottest(10, |s| s != slot).iter().all(|k| k != b"hot"));
    }
}
