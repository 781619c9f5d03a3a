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
//!
//! A pinned super version also carries the file readers (tables, blob
//! files) its thread used with it: a point read borrows `&Table` from the
//! pin instead of taking the open-file set's lock and a count on the
//! reader's `Arc`, both written by every reading thread. The readers go
//! back into the slot with the super version and are dropped with it, so
//! an install (which comes before any file it made obsolete is deleted)
//! releases them too; at most [`READERS_KEPT`] stay per thread between
//! reads. Kept readers are outside the open-file set's bounds, so they are
//! kept only while every file fits in them (as RocksDB pins table readers
//! only with unlimited open files): once the set first closes a reader for
//! room, [`SvCache::stop_keeping_readers`] turns this off for good.

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// File readers a thread keeps with its cached super version between
/// reads (a point read uses one table per level it probes and one blob
/// file).
pub const READERS_KEPT: usize = 32;

/// A type-erased file reader, by file number.
type Reader = (u64, Arc<dyn Any + Send + Sync>);

/// What a slot holds between reads: the super version, the generation it
/// was current at, and the readers used with it.
struct Held {
    generation: u64,
    sv: Arc<dyn Any + Send + Sync>,
    readers: Vec<Reader>,
}

/// What [`SvCache::scrape`] took out of the slots, to drop outside locks.
#[must_use = "drop it outside the caller's locks"]
pub struct Scraped {
    /// Dropped with it.
    _held: Vec<Held>,
}

/// One thread's cached super version for one store, on a cache line of its
/// own.
#[repr(align(128))]
struct Slot {
    held: Mutex<Option<Held>>,
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
    /// Whether pins put their readers back into the slot.
    keep_readers: AtomicBool,
    /// Set when the store closes: nothing goes back into a slot after.
    closed: AtomicBool,
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
            keep_readers: AtomicBool::new(true),
            closed: AtomicBool::new(false),
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
    /// Readers used with `sv`, least recently used first. Entries are
    /// only added or reordered while pinned, never dropped, which is what
    /// lets [`Pinned::reader`] hand out borrows of them.
    readers: RefCell<Vec<Reader>>,
}

impl<T: Send + Sync + 'static> Pinned<'_, T> {
    /// The reader of file `number`, kept with this pin: `open` supplies it
    /// the first time this thread uses the file with this super version.
    pub fn reader<R: Any + Send + Sync>(
        &self,
        number: u64,
        open: impl FnOnce() -> Result<Arc<R>>,
    ) -> Result<&R> {
        if let Some(r) = self.kept(number) {
            return r;
        }
        let reader = open()?;
        Ok(self.keep(number, reader))
    }

    /// [`Pinned::reader`] for reads that must not wait on the device:
    /// `open` returns `None` when the file is not open, and so does this.
    pub fn open_reader<R: Any + Send + Sync>(
        &self,
        number: u64,
        open: impl FnOnce() -> Option<Result<Arc<R>>>,
    ) -> Option<Result<&R>> {
        if let Some(r) = self.kept(number) {
            return Some(r);
        }
        Some(open()?.map(|reader| self.keep(number, reader)))
    }

    /// File readers kept with this pin so far.
    pub fn readers_kept(&self) -> usize {
        self.readers.borrow().len()
    }

    /// Whether this pin came from `cache`.
    pub fn is_from(&self, cache: &SvCache<T>) -> bool {
        std::ptr::eq(self.cache, cache)
    }

    /// The kept reader of file `number`, if any.
    fn kept<R: Any + Send + Sync>(&self, number: u64) -> Option<Result<&R>> {
        let mut readers = self.readers.borrow_mut();
        let i = readers.iter().rposition(|(n, _)| *n == number)?;
        if i + 1 < readers.len() {
            // Most recently used last: `drop` keeps the tail.
            let hit = readers.remove(i);
            readers.push(hit);
        }
        let ptr = Arc::as_ptr(&readers[readers.len() - 1].1);
        drop(readers);
        // SAFETY: `ptr` points into an `Arc` that `self.readers` holds until
        // `self` is dropped: entries are never dropped while pinned (only
        // `drop` takes them), and growing or reordering the vector moves
        // the `Arc` pointers, not what they point to.
        let any: &(dyn Any + Send + Sync) = unsafe { &*ptr };
        Some(any.downcast_ref::<R>().ok_or_else(|| other_kind(number)))
    }

    /// Keeps `reader` for the rest of the pin and returns it.
    fn keep<R: Any + Send + Sync>(&self, number: u64, reader: Arc<R>) -> &R {
        let ptr = Arc::as_ptr(&reader);
        self.readers.borrow_mut().push((number, reader));
        // SAFETY: as in `kept`: the `Arc` just pushed stays in
        // `self.readers` until `self` is dropped, and what it points to
        // never moves.
        unsafe { &*ptr }
    }
}

/// A file number kept as one kind of reader and asked for as another.
fn other_kind(number: u64) -> Error {
    Error::InvalidArgument(format!(
        "file number {number} is open as another kind of file"
    ))
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
        let mut readers = std::mem::take(self.readers.get_mut());
        // Keep the most recently used, if any.
        let keep = if self.cache.keep_readers.load(Ordering::Acquire) {
            READERS_KEPT
        } else {
            0
        };
        let surplus = readers.len().saturating_sub(keep);
        let evicted: Vec<Reader> = readers.drain(..surplus).collect();
        let back = self.cache.with_slot(|slot| {
            let mut held = slot.held.lock();
            // Checked under the slot's lock: an install bumps the generation
            // before it empties the slots, so either this sees the new
            // generation or the install empties the slot after this.
            if held.is_none()
                && !self.cache.closed.load(Ordering::Acquire)
                && self.cache.generation.load(Ordering::Acquire) == self.generation
            {
                *held = Some(Held {
                    generation: self.generation,
                    sv: sv as Arc<dyn Any + Send + Sync>,
                    readers,
                });
                None
            } else {
                Some((sv, readers))
            }
        });
        // Dropped outside the slot: it may be the last reference to a
        // memtable or a file.
        drop((back, evicted));
    }
}

impl<T: Send + Sync + 'static> SvCache<T> {
    /// The current super version, from this thread's slot when no install
    /// came since it was cached, from `current` otherwise.
    pub fn pin<'a>(&'a self, current: &Mutex<Arc<T>>) -> Pinned<'a, T> {
        let generation = self.generation.load(Ordering::Acquire);
        let cached = self.with_slot(|slot| slot.held.lock().take()).flatten();
        let stale = match cached {
            Some(held) if held.generation == generation => match held.sv.downcast::<T>() {
                Ok(sv) => {
                    return Pinned {
                        sv: Some(sv),
                        generation,
                        cache: self,
                        readers: RefCell::new(held.readers),
                    }
                }
                Err(other) => Some((other, held.readers)),
            },
            other => other.map(|held| (held.sv, held.readers)),
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
            readers: RefCell::new(Vec::new()),
        }
    }

    /// Whether this thread's slot holds a super version (for tests).
    #[cfg(test)]
    pub fn holds_on_this_thread(&self) -> bool {
        self.with_slot(|slot| slot.held.lock().is_some())
            .unwrap_or(false)
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

    /// Stops caching for good (the store is closing); then bump and
    /// scrape. A pin taken after the bump sees this when it drops.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Stops pins keeping file readers between reads; `true` the first
    /// time, when the caller must then bump and scrape to release the
    /// readers already kept.
    pub fn stop_keeping_readers(&self) -> bool {
        self.keep_readers.swap(false, Ordering::AcqRel)
    }

    /// Empties every thread's slot and forgets the slots of exited threads;
    /// returns what they held, for the caller to drop outside its locks.
    pub fn scrape(&self) -> Scraped {
        let mut slots = self.slots.lock();
        // A slot only this list holds belongs to an exited thread.
        slots.retain(|s| Arc::strong_count(s) > 1);
        let taken = slots.iter().filter_map(|s| s.held.lock().take()).collect();
        Scraped { _held: taken }
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

    /// A file reader for the tests: its `Arc` count shows who holds it.
    struct FileReader(u64);

    #[test]
    fn readers_are_opened_once_per_generation_and_released_by_an_install() {
        let current = Mutex::new(Arc::new("v".to_string()));
        let cache = SvCache::default();
        let file = Arc::new(FileReader(7));
        let opens = std::cell::Cell::new(0);
        let open = || {
            opens.set(opens.get() + 1);
            Ok(file.clone())
        };
        {
            let pin = cache.pin(&current);
            let a: &FileReader = pin.reader(7, open).unwrap();
            let b: &FileReader = pin.reader(7, open).unwrap();
            assert_eq!((a.0, b.0), (7, 7));
            assert!(std::ptr::eq(a, b));
        }
        // Kept with the cached version: no open for the next read.
        assert_eq!(cache.pin(&current).reader(7, open).unwrap().0, 7);
        assert_eq!(opens.get(), 1);
        assert_eq!(Arc::strong_count(&file), 2, "the slot keeps one count");
        install(&current, &cache, "w");
        assert_eq!(Arc::strong_count(&file), 1, "the install released it");
        assert_eq!(cache.pin(&current).reader(7, open).unwrap().0, 7);
        assert_eq!(opens.get(), 2);
    }

    #[test]
    fn a_file_asked_for_as_another_kind_is_an_error() {
        let current = Mutex::new(Arc::new("v".to_string()));
        let cache = SvCache::default();
        let pin = cache.pin(&current);
        pin.reader(3, || Ok(Arc::new(FileReader(3)))).unwrap();
        let other = pin.reader::<String>(3, || Ok(Arc::new(String::new())));
        assert!(matches!(other, Err(Error::InvalidArgument(_))));
        // A reader that is not open is not opened for a cached read.
        assert!(pin.open_reader::<FileReader>(4, || None).is_none());
    }

    #[test]
    fn a_thread_keeps_at_most_readers_kept_between_reads() {
        let current = Mutex::new(Arc::new("v".to_string()));
        let cache = SvCache::default();
        let files: Vec<Arc<FileReader>> = (0..READERS_KEPT as u64 + 8)
            .map(|n| Arc::new(FileReader(n)))
            .collect();
        {
            let pin = cache.pin(&current);
            for f in &files {
                pin.reader(f.0, || Ok(f.clone())).unwrap();
            }
            // Used again: most recent now.
            pin.reader(0, || Ok(files[0].clone())).unwrap();
        }
        let kept = files.iter().filter(|f| Arc::strong_count(f) == 2).count();
        assert_eq!(kept, READERS_KEPT);
        // The most recently used ones.
        assert_eq!(Arc::strong_count(&files[files.len() - 1]), 2);
        assert_eq!(Arc::strong_count(&files[0]), 2);
        assert_eq!(Arc::strong_count(&files[1]), 1);
    }
}
