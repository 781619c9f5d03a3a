//! Keys connections WATCH, and a stamp per key that moves whenever a commit
//! changed the key, so EXEC can tell whether a watched key changed since
//! WATCH.
//!
//! The committer moves stamps after each commit (committed or failed: a
//! failed one may have reached the engine), for the keys the commit wrote;
//! an EXEC in the same commit group checks the keys pending before it
//! itself. Only watched keys have stamps, so with no WATCH in force a
//! commit costs one atomic load here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// The watched keys and their stamps.
#[derive(Debug, Default)]
pub struct Watches {
    /// Watches in force (a key watched twice counts twice).
    count: AtomicUsize,
    /// Key → (watches of it, its stamp).
    keys: Mutex<HashMap<Vec<u8>, (usize, u64)>>,
    /// The last stamp handed out.
    clock: AtomicU64,
}

/// What a WATCH remembers of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    /// The key.
    pub key: Vec<u8>,
    /// Its stamp at WATCH.
    pub stamp: u64,
    /// When the key expires, if it existed and had not expired at WATCH:
    /// EXEC fails once that time has passed, as in Redis.
    pub expire_at: Option<u64>,
}

impl Watches {
    /// Starts watching `key`, which expires at `expire_at` if it is live.
    pub fn watch(&self, key: &[u8], expire_at: Option<u64>) -> Watched {
        let mut keys = self.keys.lock();
        self.count.fetch_add(1, Ordering::SeqCst);
        let e = keys.entry(key.to_vec()).or_insert((0, 0));
        e.0 += 1;
        Watched {
            key: key.to_vec(),
            stamp: e.1,
            expire_at,
        }
    }

    /// Stops one watch of `key`.
    pub fn unwatch(&self, key: &[u8]) {
        let mut keys = self.keys.lock();
        if let Some(e) = keys.get_mut(key) {
            e.0 -= 1;
            if e.0 == 0 {
                keys.remove(key);
            }
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether any key is watched.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// Moves the stamps of the watched keys among `keys` (a commit wrote
    /// them).
    pub fn touch<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) {
        if !self.any() {
            return;
        }
        let mut map = self.keys.lock();
        for k in keys {
            if let Some(e) = map.get_mut(k) {
                e.1 = self.clock.fetch_add(1, Ordering::SeqCst) + 1;
            }
        }
    }

    /// The keys watched now (FLUSHDB touches those that exist, as Redis
    /// does).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        if !self.any() {
            return Vec::new();
        }
        self.keys.lock().keys().cloned().collect()
    }

    /// Whether `w`'s key is unchanged since it was watched, as of `now`.
    pub fn unchanged(&self, w: &Watched, now: u64) -> bool {
        if w.expire_at.is_some_and(|t| t <= now) {
            return false;
        }
        self.keys.lock().get(&w.key).is_some_and(|e| e.1 == w.stamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touch_after_watch_is_seen_and_unwatched_keys_cost_nothing() {
        let w = Watches::default();
        w.touch([&b"a"[..]]);
        let a = w.watch(b"a", None);
        let b = w.watch(b"b", Some(100));
        assert!(w.unchanged(&a, 0) && w.unchanged(&b, 0));
        w.touch([&b"a"[..], b"zzz"]);
        assert!(!w.unchanged(&a, 0), "a was written after WATCH");
        assert!(w.unchanged(&b, 50));
        assert!(!w.unchanged(&b, 100), "b expired after WATCH");
        let b2 = w.watch(b"b", None);
        w.unwatch(b"b");
        assert!(w.unchanged(&b2, 0), "b is still watched once");
        assert_eq!(w.keys().len(), 2);
        w.unwatch(b"a");
        w.unwatch(b"b");
        assert!(!w.any());
    }
}
