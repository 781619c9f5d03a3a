//! A striped lock table that makes read-modify-write commands atomic.
//!
//! The engine has no transactions, so commands that read a key and write it
//! back (INCR, APPEND, SET NX, GETSET, MSETNX, …) hold the stripe lock of
//! every key they touch, taken in ascending stripe order so two commands
//! never deadlock. Plain writes take the same locks, so a plain SET cannot
//! slip between the read and the write of an INCR. Reads take no lock.
//! Locks are held only around the engine calls, never across an `await`.

use parking_lot::{Mutex, MutexGuard};
use xxhash_rust::xxh3::xxh3_64;

/// Number of stripes (a power of two).
pub const STRIPES: usize = 1024;

/// The lock table.
#[derive(Debug)]
pub struct LockTable {
    stripes: Vec<Mutex<()>>,
}

impl Default for LockTable {
    fn default() -> Self {
        LockTable {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

/// Guards for a set of stripes; dropping it releases them.
pub struct Guards<'a>(#[allow(dead_code)] Vec<MutexGuard<'a, ()>>);

impl LockTable {
    fn stripe(key: &[u8]) -> usize {
        (xxh3_64(key) as usize) & (STRIPES - 1)
    }

    /// Locks the stripe of `key`.
    pub fn lock(&self, key: &[u8]) -> Guards<'_> {
        Guards(vec![self.stripes[Self::stripe(key)].lock()])
    }

    /// Locks the stripes of all `keys`, in ascending order.
    pub fn lock_all<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> Guards<'_> {
        let mut idx: Vec<usize> = keys.into_iter().map(Self::stripe).collect();
        idx.sort_unstable();
        idx.dedup();
        Guards(idx.into_iter().map(|i| self.stripes[i].lock()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_key_sets_do_not_deadlock() {
        let t = std::sync::Arc::new(LockTable::default());
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for j in 0..2000u32 {
                        let a = (i * j).to_le_bytes();
                        let b = (j + 7).to_le_bytes();
                        let keys: [&[u8]; 3] = [&a, &b, &a];
                        let _g = t.lock_all(keys);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
}
