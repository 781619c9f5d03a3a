//! Open file readers by file number, shared by tables and blob files.
//!
//! A reader holds a descriptor and, for a table, its index and filter in
//! memory, so the set is bounded two ways: at most `max_files` readers, and
//! their resident bytes at most `max_bytes`. When either bound is passed the
//! least recently used reader is closed, picked by CLOCK (an LRU
//! approximation whose hits take only a read lock and set a flag). A closed
//! reader still in use by a read or an iterator stays open until that one
//! drops it; the next read of its file opens it again.
//!
//! Readers of different types share one cache (file numbers are unique
//! across tables and blob files) and are stored type-erased.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use crate::error::{Error, Result};

/// A type-erased reader.
type Reader = Arc<dyn Any + Send + Sync>;

struct Slot {
    number: u64,
    reader: Reader,
    bytes: u64,
    /// Set on every hit, cleared as the clock hand passes.
    referenced: AtomicBool,
}

#[derive(Default)]
struct Ring {
    slots: Vec<Slot>,
    /// File number → position in `slots`.
    index: HashMap<u64, usize>,
    /// Next slot the clock hand examines.
    hand: usize,
    /// Resident bytes of all slots.
    bytes: u64,
}

impl Ring {
    fn remove_at(&mut self, i: usize) -> Slot {
        let slot = self.slots.swap_remove(i);
        self.index.remove(&slot.number);
        if let Some(moved) = self.slots.get(i) {
            self.index.insert(moved.number, i);
        }
        self.bytes -= slot.bytes;
        if self.hand >= self.slots.len() {
            self.hand = 0;
        }
        slot
    }

    /// Closes the least recently used reader (clock order), only among
    /// those holding resident bytes if `for_bytes`; `None` if there is none.
    fn evict_one(&mut self, for_bytes: bool) -> Option<Slot> {
        let candidate = |s: &Slot| !for_bytes || s.bytes > 0;
        // Two sweeps at most: the first clears every flag it passes.
        for _ in 0..2 * self.slots.len() {
            let hand = self.hand % self.slots.len();
            let slot = &self.slots[hand];
            if candidate(slot) && !slot.referenced.swap(false, Ordering::Relaxed) {
                return Some(self.remove_at(hand));
            }
            self.hand = (hand + 1) % self.slots.len();
        }
        let i = self.slots.iter().position(candidate)?;
        Some(self.remove_at(i))
    }
}

/// A bounded set of open readers, by file number.
pub struct OpenFiles {
    ring: RwLock<Ring>,
    max_files: usize,
    max_bytes: u64,
    /// Readers opened (misses), for spotting a bound set too low.
    opens: AtomicU64,
    /// Readers closed to make room (not because their file went), or
    /// served uncached for want of it.
    closed_for_room: AtomicU64,
    /// Called the first time a reader is closed or refused for room.
    on_first_room: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl OpenFiles {
    /// At most `max_files` readers (at least one) holding at most
    /// `max_bytes` resident.
    pub fn new(max_files: usize, max_bytes: u64) -> Self {
        OpenFiles {
            ring: RwLock::new(Ring::default()),
            max_files: max_files.max(1),
            max_bytes,
            opens: AtomicU64::new(0),
            closed_for_room: AtomicU64::new(0),
            on_first_room: OnceLock::new(),
        }
    }

    /// Sets what runs (once, on the thread that hit it, outside every lock
    /// of this set) the first time the set closes or refuses a reader for
    /// room: readers kept outside the set must go then. Ignored if already
    /// set.
    pub fn on_first_room(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_first_room.set(Box::new(f));
    }

    /// Counts `n` readers closed or refused for room.
    fn closed_for_room(&self, n: u64) {
        if self.closed_for_room.fetch_add(n, Ordering::Relaxed) == 0 {
            if let Some(f) = self.on_first_room.get() {
                f();
            }
        }
    }

    /// The reader for file `number`. On a miss `open` opens it and says how
    /// many bytes it keeps resident; the open runs without any lock held.
    pub fn get_or_open<T: Any + Send + Sync>(
        &self,
        number: u64,
        open: impl FnOnce() -> Result<(Arc<T>, u64)>,
    ) -> Result<Arc<T>> {
        {
            let ring = self.ring.read();
            if let Some(&i) = ring.index.get(&number) {
                let slot = &ring.slots[i];
                // Load first: a hit on a hot file then writes no shared line.
                if !slot.referenced.load(Ordering::Relaxed) {
                    slot.referenced.store(true, Ordering::Relaxed);
                }
                return downcast(number, slot.reader.clone());
            }
        }
        let (reader, bytes) = open()?;
        self.opens.fetch_add(1, Ordering::Relaxed);
        if bytes > self.max_bytes {
            // Keeping it would close every other reader: serve it uncached.
            self.closed_for_room(1);
            return Ok(reader);
        }
        let mut ring = self.ring.write();
        if let Some(&i) = ring.index.get(&number) {
            // Another reader opened it meanwhile: use theirs, close ours.
            return downcast(number, ring.slots[i].reader.clone());
        }
        let i = ring.slots.len();
        ring.slots.push(Slot {
            number,
            reader: reader.clone(),
            bytes,
            referenced: AtomicBool::new(true),
        });
        ring.index.insert(number, i);
        ring.bytes += bytes;
        let mut closed = Vec::new();
        while ring.slots.len() > self.max_files || ring.bytes > self.max_bytes {
            // Over the byte budget, close only readers that free bytes.
            let for_bytes = ring.slots.len() <= self.max_files;
            match ring.evict_one(for_bytes) {
                Some(slot) => closed.push(slot),
                None => break,
            }
        }
        drop(ring);
        let n = closed.len() as u64;
        // Readers close (descriptors, index memory) outside the lock.
        drop(closed);
        if n > 0 {
            self.closed_for_room(n);
        }
        Ok(reader)
    }

    /// The reader for file `number` if it is open; `None` if reading it
    /// would need an open (reads that must not wait on the device).
    pub fn get_open<T: Any + Send + Sync>(&self, number: u64) -> Option<Result<Arc<T>>> {
        let ring = self.ring.read();
        let &i = ring.index.get(&number)?;
        let slot = &ring.slots[i];
        if !slot.referenced.load(Ordering::Relaxed) {
            slot.referenced.store(true, Ordering::Relaxed);
        }
        Some(downcast(number, slot.reader.clone()))
    }

    /// Forgets file `number` (it is being deleted).
    pub fn evict(&self, number: u64) {
        let mut ring = self.ring.write();
        let closed = ring.index.get(&number).copied().map(|i| ring.remove_at(i));
        drop(ring);
        drop(closed);
    }

    /// Readers open.
    pub fn len(&self) -> usize {
        self.ring.read().slots.len()
    }

    /// True when no reader is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resident bytes of the open readers.
    pub fn bytes(&self) -> u64 {
        self.ring.read().bytes
    }

    /// Readers closed (or served uncached) so far to stay within the
    /// bounds: zero while every file read so far fits.
    pub fn closed_for_room_count(&self) -> u64 {
        self.closed_for_room.load(Ordering::Relaxed)
    }

    /// Readers opened so far (each miss opens one).
    pub fn opens(&self) -> u64 {
        self.opens.load(Ordering::Relaxed)
    }
}

fn downcast<T: Any + Send + Sync>(number: u64, reader: Reader) -> Result<Arc<T>> {
    reader.downcast::<T>().map_err(|_| {
        Error::InvalidArgument(format!(
            "file number {number} is open as another kind of file"
        ))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn open(files: &OpenFiles, n: u64, bytes: u64) -> Arc<u64> {
        files.get_or_open(n, || Ok((Arc::new(n), bytes))).unwrap()
    }

    fn cached(files: &OpenFiles, n: u64) -> bool {
        files.ring.read().index.contains_key(&n)
    }

    /// Regression: a reader too big for the byte budget was served
    /// uncached without counting as closed for room, so readers kept per
    /// thread (`db::sv_cache`) could each keep a private copy of it.
    #[test]
    fn a_reader_too_big_to_keep_counts_as_closed_for_room() {
        let files = OpenFiles::new(4, 100);
        open(&files, 1, 10);
        assert_eq!(files.closed_for_room_count(), 0);
        open(&files, 2, 1000);
        assert!(!cached(&files, 2));
        assert_eq!(files.closed_for_room_count(), 1);
    }

    #[test]
    fn at_most_max_files_stay_open_and_recently_used_ones_survive() {
        let files = OpenFiles::new(4, u64::MAX);
        for n in 0..4 {
            open(&files, n, 10);
        }
        // Clear every flag with one eviction, then touch 0 and 2.
        open(&files, 4, 10);
        assert_eq!(files.len(), 4);
        open(&files, 0, 10);
        open(&files, 2, 10);
        open(&files, 5, 10);
        open(&files, 6, 10);
        assert_eq!(files.len(), 4);
        assert!(
            cached(&files, 0) && cached(&files, 2),
            "recently used files closed"
        );
        assert_eq!(files.bytes(), 40);
    }

    #[test]
    fn a_miss_opens_and_a_hit_does_not() {
        let files = OpenFiles::new(8, u64::MAX);
        open(&files, 1, 1);
        let again: Arc<u64> = files
            .get_or_open(1, || -> Result<(Arc<u64>, u64)> { panic!("opened twice") })
            .unwrap();
        assert_eq!(*again, 1);
        let err = files.get_or_open(2, || -> Result<(Arc<u64>, u64)> {
            Err(Error::InvalidArgument("no such file".into()))
        });
        assert!(err.is_err());
        assert!(!cached(&files, 2), "a failed open is not cached");
        let wrong = files.get_or_open(1, || Ok((Arc::new(String::new()), 0)));
        assert!(wrong.is_err(), "a number open as another type is an error");
    }

    #[test]
    fn evict_forgets_and_keeps_the_ring_consistent() {
        let files = OpenFiles::new(8, u64::MAX);
        for n in 0..6 {
            open(&files, n, n);
        }
        files.evict(2);
        files.evict(2);
        files.evict(5);
        assert_eq!(files.len(), 4);
        assert_eq!(files.bytes(), 1 + 3 + 4);
        for n in [0, 1, 3, 4] {
            assert!(cached(&files, n));
        }
        let ring = files.ring.read();
        for (i, s) in ring.slots.iter().enumerate() {
            assert_eq!(ring.index[&s.number], i);
        }
    }

    #[test]
    fn resident_bytes_are_held_to_the_budget() {
        let files = OpenFiles::new(100, 500);
        for n in 0..10 {
            open(&files, n, 120);
        }
        assert_eq!((files.len(), files.bytes()), (4, 480));
        assert_eq!(files.opens(), 10);
        for n in 0..10 {
            files.evict(n);
        }
        assert_eq!(files.bytes(), 0);
        // One reader larger than the budget is returned but not kept.
        assert_eq!(*open(&files, 99, 600), 99);
        assert!(files.is_empty());
    }

    #[test]
    fn byte_pressure_closes_readers_that_hold_bytes_only() {
        let files = OpenFiles::new(100, 100);
        for n in 0..5 {
            open(&files, n, 0);
        }
        for n in 10..13 {
            open(&files, n, 40);
        }
        assert_eq!((files.len(), files.bytes()), (7, 80));
        assert!(
            (0..5).all(|n| cached(&files, n)),
            "zero-byte readers closed"
        );
        // Over the budget on its own: served, not kept, nothing closed.
        assert_eq!(*open(&files, 99, 200), 99);
        assert_eq!((files.len(), files.bytes()), (7, 80));
    }

    #[test]
    fn concurrent_readers_share_one_bounded_set() {
        let files = Arc::new(OpenFiles::new(8, u64::MAX));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let files = files.clone();
                std::thread::spawn(move || {
                    for i in 0..2000u64 {
                        let n = (i * 7 + t) % 20;
                        assert_eq!(*open(&files, n, 1), n);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(files.len() <= 8);
        assert_eq!(files.bytes(), files.len() as u64);
    }
}
