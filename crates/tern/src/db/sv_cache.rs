//! Per-thread cached super versions, so point reads share no written cache
//! line.
//!
//! Every read needs the current [`SuperVersion`]. Taking it from
//! `Shared::current` costs a mutex and two updates of the `Arc`'s count,
//! all on cache lines that every reading thread writes: with readers on
//! several cores those lines move between them on every read. Instead each
//! thread keeps the super version it last read with in a slot of its own,
//! tagged with the generation it was current at, and borrows it back for its
//! next read while the generation has not moved (RocksDB's thread-local
//! super version, with a mutex per slot in place of its atomic swaps).
//!
//! An install bumps the generation and empties every slot, so no idle
//! thread keeps an old memtable or table version (and with it files the
//! install made obsolete) alive past it. A slot whose thread has exited is
//! emptied when the thread-local list is destroyed and dropped at the next
//! install; a thread's entry for a store that is gone is dropped the next
//! time that thread registers with another store.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// One thread's cached super version for one store, on a cache line of its
/// own.
#[repr(align(128))]
struct Slot {
    held: Mutex<Option<(u64, Arc<dyn Any + Send + Sync>)>>,
}

/// This thread's slots, by store id.
struct Local(Vec<(u64, Arc<Slot>)>);

impl Drop for Local {
    fn drop(&mut self) {
        // The thread is exiting: what it cached must not outlive it until
        // the next install.
        for (_, slot) in &self.0 {
            let held = slot.held.lock().take();
            drop(held);
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Local> = const { RefCell::new(Local(Vec::new())) };
}

/// Source of store ids.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The per-thread super version slots of one store (`T` is
/// [`super::core::SuperVersion`]; generic for tests).
pub struct SvCache<T> {
    id: u64,
    /// Bumped (under `Shared::current`) by every install.
    generation: AtomicU64,
    /// Every thread's slot, for installs to empty.
    slots: Mutex<Vec<Arc<Slot>>>,
    _holds: PhantomData<fn() -> Arc<T>>,
}

impl<T> Default for SvCache<T> {
    fn default() -> Self {
        SvCache {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            slots: Mutex::new(Vec::new()),
            _holds: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for SvCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SvCache")
            .field("id", &self.id)
            .field("generation", &self.generation.load(Ordering::Relaxed))
            .finish()
    }
}

/// A super version borrowed for one read; it goes back to the thread's
/// slot when dropped, if no install came in between.
pub struct Pinned<'a, T: Send + Sync + 'static> {
    sv: Option<Arc<T>>,
    generation: u64,
    cache: &'a SvCache<T>,
}

impl<T: Send + Sync + 'static> Deref for Pinned<'_, T> {
    type Target = Arc<T>;

    fn deref(&self) -> &Arc<T> {
        match &self.sv {
            Some(sv) => sv,
            // `sv` is taken only in `drop`.
            None => unreachable!("a pinned super version is held until dropped"),
        }
    }
}

impl<T: Send + Sync + 'static> Drop for Pinned<'_, T> {
    fn drop(&mut self) {
        let Some(sv) = self.sv.take() else {
            return;
        };
        let back = self.cache.with_slot(|slot| {
            let mut held = slot.held.lock();
            // Checked under the slot's lock: an install bumps the generation
            // before it empties the slots, so either this sees the new
            // generation or the install empties the slot after this.
            if held.is_none() && self.cache.generation.load(Ordering::Acquire) == self.generation {
                *held = Some((self.generation, sv as Arc<dyn Any + Send + Sync>));
                None
            } else {
                Some(sv)
            }
        });
        // Dropped outside the slot: it may be the last reference to a
        // memtable.
        drop(back);
    }
}

impl<T: Send + Sync + 'static> SvCache<T> {
    /// The current super version, from this thread's slot when no install
    /// came since it was cached, from `current` otherwise.
    pub fn pin<'a>(&'a self, current: &Mutex<Arc<T>>) -> Pinned<'a, T> {
        let generation = self.generation.load(Ordering::Acquire);
        let cached = self.with_slot(|slot| slot.held.lock().take()).flatten();
        let stale = match cached {
            Some((g, sv)) if g == generation => match sv.downcast::<T>() {
                Ok(sv) => {
                    return Pinned {
                        sv: Some(sv),
                        generation,
                        cache: self,
                    }
                }
                Err(other) => Some(other),
            },
            other => other.map(|(_, sv)| sv),
        };
        let (sv, generation) = {
            let cur = current.lock();
            // Read under `current`, where installs bump it: it tags `sv`.
            (cur.clone(), self.generation.load(Ordering::Relaxed))
        };
        drop(stale);
        Pinned {
            sv: Some(sv),
            generation,
            cache: self,
        }
    }

    /// Runs `f` on this thread's slot for this store, registering one on
    /// first use; `None` while the thread is exiting.
    fn with_slot<R>(&self, f: impl FnOnce(&Slot) -> R) -> Option<R> {
        LOCAL
            .try_with(|local| {
                let mut local = local.borrow_mut();
                // `f` only locks the slot: it cannot come back here.
                if let Some((_, slot)) = local.0.iter().find(|(id, _)| *id == self.id) {
                    return f(slot);
                }
                // Entries of stores that are gone: only this list holds
                // their slots.
                local.0.retain(|(_, s)| Arc::strong_count(s) > 1);
                let slot = Arc::new(Slot {
                    held: Mutex::new(None),
                });
                self.slots.lock().push(slot.clone());
                let r = f(&slot);
                local.0.push((self.id, slot));
                r
            })
            .ok()
    }
}

impl<T> SvCache<T> {
    /// Marks every cached super version stale. Call with `Shared::current`
    /// held, right after replacing it; then [`SvCache::scrape`].
    pub fn bump(&self) {
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Empties every thread's slot and forgets the slots of exited threads;
    /// returns what they held, for the caller to drop outside its locks.
    #[must_use]
    pub fn scrape(&self) -> Vec<Arc<dyn Any + Send + Sync>> {
        let mut slots = self.slots.lock();
        // A slot only this list holds belongs to an exited thread.
        slots.retain(|s| Arc::strong_count(s) > 1);
        slots
            .iter()
            .filter_map(|s| s.held.lock().take().map(|(_, sv)| sv))
            .collect()
    }
}

impl<T> Drop for SvCache<T> {
    fn drop(&mut self) {
        drop(self.scrape());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    fn install(current: &Mutex<Arc<String>>, cache: &SvCache<String>, v: &str) -> Arc<String> {
        let new = Arc::new(v.to_string());
        {
            let mut cur = current.lock();
            *cur = new.clone();
            cache.bump();
        }
        drop(cache.scrape());
        new
    }

    #[test]
    fn a_read_after_an_install_sees_the_new_version() {
        let first = Arc::new("first".to_string());
        let current = Mutex::new(first.clone());
        let cache = SvCache::default();
        assert_eq!(***cache.pin(&current), *"first");
        // Cached now: the same allocation comes back.
        assert!(Arc::ptr_eq(&cache.pin(&current), &first));
        let second = install(&current, &cache, "second");
        assert!(Arc::ptr_eq(&cache.pin(&current), &second));
        assert!(Arc::ptr_eq(&cache.pin(&current), &second));
    }

    #[test]
    fn an_install_releases_what_idle_threads_cached() {
        let first = Arc::new("first".to_string());
        let current = Arc::new(Mutex::new(first.clone()));
        let cache = Arc::new(SvCache::default());
        let (cached_tx, cached_rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let reader = {
            let (current, cache) = (current.clone(), cache.clone());
            std::thread::spawn(move || {
                drop(cache.pin(&current));
                cached_tx.send(()).expect("send");
                // Idle, with its slot filled, until told to exit.
                let _ = done_rx.recv();
            })
        };
        cached_rx.recv().expect("reader cached");
        // The test, `current` and the reader's slot.
        assert_eq!(Arc::strong_count(&first), 3);
        install(&current, &cache, "second");
        assert_eq!(Arc::strong_count(&first), 1);
        done_tx.send(()).expect("send");
        reader.join().expect("reader");
    }

    #[test]
    fn an_exiting_thread_releases_its_slot() {
        let first = Arc::new("first".to_string());
        let current = Arc::new(Mutex::new(first.clone()));
        let cache = Arc::new(SvCache::default());
        {
            let (current, cache) = (current.clone(), cache.clone());
            std::thread::spawn(move || drop(cache.pin(&current)))
                .join()
                .expect("reader");
        }
        assert_eq!(Arc::strong_count(&first), 2);
        assert_eq!(cache.slots.lock().len(), 1);
        drop(cache.scrape());
        assert!(cache.slots.lock().is_empty());
    }

    #[test]
    fn nested_pins_on_one_thread_each_hold_a_version() {
        let current = Mutex::new(Arc::new("first".to_string()));
        let cache = SvCache::default();
        let outer = cache.pin(&current);
        let second = install(&current, &cache, "second");
        {
            // The slot is empty while `outer` holds its version.
            let inner = cache.pin(&current);
            assert!(Arc::ptr_eq(&inner, &second));
            assert_eq!(***outer, *"first");
        }
        drop(outer);
        // The stale outer one was not put back over the fresh one.
        assert!(Arc::ptr_eq(&cache.pin(&current), &second));
    }

    #[test]
    fn a_version_pinned_across_an_install_is_not_cached_afterwards() {
        let first = Arc::new("first".to_string());
        let current = Mutex::new(first.clone());
        let cache = SvCache::default();
        let pinned = cache.pin(&current);
        install(&current, &cache, "second");
        drop(pinned);
        // Only the test holds the old one: the slot did not take it back.
        assert_eq!(Arc::strong_count(&first), 1);
    }

    #[test]
    fn two_stores_on_one_thread_keep_apart() {
        let (a, b) = (
            Mutex::new(Arc::new("a".to_string())),
            Mutex::new(Arc::new("b".to_string())),
        );
        let (ca, cb) = (SvCache::default(), SvCache::default());
        for _ in 0..3 {
            assert_eq!(***ca.pin(&a), *"a");
            assert_eq!(***cb.pin(&b), *"b");
        }
    }

    #[test]
    fn a_dropped_store_releases_every_slot() {
        let first = Arc::new("first".to_string());
        let current = Mutex::new(first.clone());
        let cache = SvCache::default();
        drop(cache.pin(&current));
        assert_eq!(Arc::strong_count(&first), 3);
        drop(cache);
        assert_eq!(Arc::strong_count(&first), 2);
    }
}
