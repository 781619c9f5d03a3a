//! A fixed-capacity bump arena addressed by `u32` offsets.
//!
//! The arena is the only place in the memtable that turns offsets into memory
//! accesses, so all of the memtable's `unsafe` lives in the three accessors
//! [`Arena::write`], [`Arena::bytes`] and [`Arena::atomic_u32`]. Their callers
//! (the skiplist) prove the preconditions from the skiplist's own invariants.
//!
//! Invariants:
//!
//! 1. The arena is one heap allocation of `capacity` bytes, 8-byte aligned and
//!    zero-filled when first allocated (with `alloc_zeroed`, so pages never
//!    touched cost nothing). It is never resized or moved while the arena
//!    lives. In `Drop`, when no borrow of the arena remains, it is freed or
//!    handed to the [`ArenaPool`] the arena came from, for the next arena:
//!    a reused allocation still holds an earlier arena's bytes, so every
//!    byte is initialised but its value is unspecified until written.
//! 2. `capacity` is a multiple of 8 and at most [`MAX_CAPACITY`], so every
//!    offset into the arena fits in a `u32`.
//! 3. `used` only grows and never exceeds `capacity`. Bytes in `[0, used)`
//!    belong to regions handed out by [`Arena::allocate`]; bytes in
//!    `[used, capacity)` have not been handed out by this arena. An owner
//!    writes every byte of its region (links included) before publishing
//!    it, so no reader depends on what the allocation held before.
//! 4. Every region returned by [`Arena::allocate`] starts at a multiple of
//!    [`ALIGN`] and is disjoint from every other region. Until its owner
//!    publishes it, no other thread knows its offset.
//! 5. A word used as an atomic (a skiplist link) is only ever accessed through
//!    [`Arena::atomic_u32`]; plain bytes are written with [`Arena::write`]
//!    only before their region is published and are afterwards only read with
//!    [`Arena::bytes`]. The two kinds of access never overlap, so there is no
//!    data race and no mixed atomic/non-atomic access to the same byte.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Alignment of every region handed out by [`Arena::allocate`].
pub(crate) const ALIGN: usize = 4;

/// Largest arena: offsets must fit in a `u32`, and allocations in an `isize`.
pub(crate) const MAX_CAPACITY: usize = {
    let m = if (u32::MAX as usize) < (isize::MAX as usize) {
        u32::MAX as usize
    } else {
        isize::MAX as usize
    };
    m & !7
};

/// Rounds `n` up to a multiple of [`ALIGN`], or `None` on overflow.
#[inline]
pub(crate) fn align_up(n: usize) -> Option<usize> {
    Some(n.checked_add(ALIGN - 1)? & !(ALIGN - 1))
}

/// A fixed-capacity bump allocator shared between threads.
pub(crate) struct Arena {
    /// Start of the allocation (invariant 1).
    ptr: NonNull<u8>,
    /// Size of the allocation in bytes (invariant 2).
    capacity: usize,
    /// Bytes handed out so far (invariant 3).
    used: AtomicUsize,
    /// Where the allocation goes when the arena is dropped (freed if none).
    pool: Option<Arc<ArenaPool>>,
}

// SAFETY: the arena owns its allocation exclusively (like a `Box<[u8]>`), so
// moving it to another thread is fine.
unsafe impl Send for Arena {}
// SAFETY: shared access only reaches memory through `allocate` (an atomic
// CAS on `used`), atomic link words, and the `unsafe` accessors whose
// contracts rule out data races (invariant 5).
unsafe impl Sync for Arena {}

impl Arena {
    /// The capacity an arena asked for `requested` bytes really gets: rounded
    /// up to a multiple of 8, at least 8 and at most [`MAX_CAPACITY`].
    pub(crate) fn effective_capacity(requested: usize) -> usize {
        // MAX_CAPACITY is a multiple of 8, so rounding up after the clamp
        // cannot exceed it.
        (requested.clamp(8, MAX_CAPACITY) + 7) & !7
    }

    /// Reserves an arena of (about) `capacity` bytes; see
    /// [`Arena::effective_capacity`].
    pub(crate) fn new(capacity: usize) -> Arena {
        let capacity = Self::effective_capacity(capacity);
        Arena {
            ptr: Self::allocate_zeroed(capacity),
            capacity,
            used: AtomicUsize::new(0),
            pool: None,
        }
    }

    /// Like [`Arena::new`], but reuses the spare allocation `pool` keeps
    /// when it fits, and gives the allocation back to `pool` when dropped.
    /// A reused allocation's pages are already mapped, so writing the new
    /// arena costs no page faults and no zeroing by the kernel. The arena
    /// may be somewhat larger than asked for (see [`ArenaPool`]).
    pub(crate) fn pooled(capacity: usize, pool: &Arc<ArenaPool>) -> Arena {
        let want = Self::effective_capacity(capacity);
        let (ptr, capacity) = match pool.take(want) {
            Some(spare) => (spare.ptr, spare.capacity),
            None => (Self::allocate_zeroed(want), want),
        };
        Arena {
            ptr,
            capacity,
            used: AtomicUsize::new(0),
            pool: Some(pool.clone()),
        }
    }

    fn allocate_zeroed(capacity: usize) -> NonNull<u8> {
        let layout = Self::layout(capacity);
        // SAFETY: `layout` has a non-zero size (capacity >= 8).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout))
    }

    fn layout(capacity: usize) -> Layout {
        // Cannot fail: capacity <= MAX_CAPACITY <= isize::MAX and is a
        // multiple of the (power of two) alignment.
        Layout::from_size_align(capacity, 8).unwrap_or_else(|_| unreachable!("arena layout"))
    }

    /// Total bytes reserved.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes handed out so far.
    #[inline]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Hands out a fresh region of `size` bytes starting at a multiple of
    /// [`ALIGN`], or `None` if it does not fit. Its bytes are unspecified
    /// (invariant 1): the caller writes all of them before publishing it.
    /// A failed call changes nothing, so a later smaller request may still
    /// succeed.
    pub(crate) fn allocate(&self, size: usize) -> Option<usize> {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let start = align_up(cur)?;
            let end = start.checked_add(size)?;
            if end > self.capacity {
                return None;
            }
            // Relaxed is enough: the region's contents are written by its
            // owner and published later through the skiplist's
            // Release/Acquire links.
            match self
                .used
                .compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(start),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Copies `data` into the arena at `off`.
    ///
    /// # Safety
    ///
    /// `[off, off + data.len())` lies inside a region that [`Arena::allocate`]
    /// returned to the caller and that the caller has not yet published (no
    /// other thread can access it), and it contains no word used as an atomic.
    #[inline]
    pub(crate) unsafe fn write(&self, off: usize, data: &[u8]) {
        debug_assert!(off + data.len() <= self.used());
        // SAFETY: the range is inside an allocated region (caller contract),
        // so inside `[0, used) ⊆ [0, capacity)` of our live allocation
        // (invariants 1 and 3); `u8` needs no alignment; the caller has
        // exclusive access to the range, so nothing else reads or writes it
        // concurrently, and `data` cannot overlap it (it is not published).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len());
        }
    }

    /// Borrows `len` bytes at `off`.
    ///
    /// # Safety
    ///
    /// `[off, off + len)` lies inside allocated regions whose bytes were all
    /// written before this call in the happens-before order (by this thread,
    /// or published with Release and reached with Acquire), are never written
    /// again, and contain no word used as an atomic.
    #[inline]
    pub(crate) unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
        debug_assert!(off + len <= self.capacity);
        // SAFETY: the range is inside allocated regions (caller contract), so
        // inside our live allocation (invariants 1 and 3), which outlives the
        // returned borrow of `self`; `u8` needs no alignment; the bytes are
        // initialised (zeroed when first allocated, then written) and
        // immutable from now on, and no atomic word overlaps them
        // (invariant 5).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) }
    }

    /// Asks the CPU to bring the cache line at `off` in; a hint only.
    #[inline]
    pub(crate) fn prefetch(&self, off: usize) {
        if off < self.capacity {
            crate::hint::prefetch_read(self.ptr.as_ptr().wrapping_add(off));
        }
    }

    /// Views the 4 bytes at `off` as an atomic word.
    ///
    /// # Safety
    ///
    /// `off` is a multiple of 4 inside an allocated region with
    /// `off + 4 <= capacity`, and those 4 bytes are only ever accessed
    /// through this function (never by [`Arena::write`] or [`Arena::bytes`]).
    #[inline]
    pub(crate) unsafe fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.capacity);
        // SAFETY: in bounds of our live allocation (caller contract and
        // invariant 1), which outlives the borrow of `self`; 4-byte aligned
        // because the allocation is 8-aligned and `off` is a multiple of 4;
        // the bytes are initialised (zeroed when first allocated) and, by the caller
        // contract, only ever accessed atomically, as `AtomicU32::from_ptr`
        // requires.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast::<u32>()) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let spare = Spare {
            ptr: self.ptr,
            capacity: self.capacity,
        };
        match &self.pool {
            // `&mut self`: no borrow into the arena is alive, so the
            // allocation can serve another arena.
            Some(pool) => pool.give(spare),
            None => spare.free(),
        }
    }
}

/// An allocation no arena uses: from `alloc_zeroed` with
/// [`Arena::layout`]`(capacity)`, all bytes initialised.
struct Spare {
    ptr: NonNull<u8>,
    capacity: usize,
}

// SAFETY: a spare is owned by whoever holds it, like a `Box<[u8]>`.
unsafe impl Send for Spare {}

impl Spare {
    fn free(self) {
        // SAFETY: `ptr` was returned by `alloc_zeroed` with this layout and
        // no arena or other spare owns it (the type's invariant).
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Arena::layout(self.capacity)) }
    }
}

/// Keeps the allocation of one dropped arena for the next one.
///
/// A memtable's arena is tens of MiB written once front to back; freeing it
/// and allocating the next one made every page fault in and be zeroed by
/// the kernel again, on the committing thread (a sixth of its time under
/// small writes). A store's memtables follow one another at one size, so
/// one spare suffices: it is reused when it is at least the size asked for
/// and at most a quarter larger (a memtable made big for one huge batch is
/// not kept for every later one).
#[derive(Default)]
pub struct ArenaPool {
    spare: parking_lot::Mutex<Option<Spare>>,
}

impl ArenaPool {
    /// Bytes kept for the next arena (0 if none).
    pub fn spare_bytes(&self) -> usize {
        self.spare.lock().as_ref().map_or(0, |s| s.capacity)
    }

    fn take(&self, want: usize) -> Option<Spare> {
        let spare = self.spare.lock().take()?;
        if spare.capacity >= want && spare.capacity - want <= want / 4 {
            Some(spare)
        } else {
            spare.free();
            None
        }
    }

    fn give(&self, spare: Spare) {
        let mut slot = self.spare.lock();
        match &*slot {
            Some(kept) if kept.capacity >= spare.capacity => {
                drop(slot);
                spare.free();
            }
            _ => {
                let old = slot.replace(spare);
                drop(slot);
                if let Some(old) = old {
                    old.free();
                }
            }
        }
    }
}

impl Drop for ArenaPool {
    fn drop(&mut self) {
        if let Some(spare) = self.spare.get_mut().take() {
            spare.free();
        }
    }
}

/// `n` zeroed atomic words from `alloc_zeroed`, so pages never touched cost
/// no memory (a memtable's index and filter are mostly untouched while it
/// is young).
pub(crate) fn zeroed_words(n: usize) -> Box<[AtomicU64]> {
    let n = n.max(1);
    let Ok(layout) = Layout::array::<AtomicU64>(n) else {
        alloc::handle_alloc_error(Layout::new::<AtomicU64>())
    };
    // SAFETY: `layout` has a non-zero size (n >= 1).
    let raw = unsafe { alloc::alloc_zeroed(layout) }.cast::<AtomicU64>();
    if raw.is_null() {
        alloc::handle_alloc_error(layout);
    }
    // SAFETY: `raw` is a live allocation of `layout`, i.e. of `[AtomicU64;
    // n]`, which is what the box frees with; `AtomicU64` has `u64`'s size and
    // alignment, and all-zero bytes are a valid `AtomicU64` (zero).
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(raw, n)) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_disjoint_and_bounded() {
        let a = Arena::new(100);
        assert_eq!(a.capacity(), 104);
        let x = a.allocate(5).unwrap();
        let y = a.allocate(3).unwrap();
        assert_eq!(x, 0);
        assert_eq!(y, 8);
        assert_eq!(a.used(), 11);
        // Too big: fails without consuming anything.
        assert!(a.allocate(200).is_none());
        assert_eq!(a.used(), 11);
        let z = a.allocate(104 - 12).unwrap();
        assert_eq!(z, 12);
        assert!(a.allocate(1).is_none());
        assert_eq!(a.allocate(0), Some(104));
    }

    #[test]
    fn fresh_memory_is_zero_and_roundtrips() {
        let a = Arena::new(64);
        let off = a.allocate(16).unwrap();
        // SAFETY: [off, off+16) was just allocated to this thread.
        unsafe { a.write(off + 4, b"hello") };
        // SAFETY: written above by this thread; never written again.
        assert_eq!(unsafe { a.bytes(off, 12) }, b"\0\0\0\0hello\0\0\0");
        let w = a.allocate(4).unwrap();
        // SAFETY: a fresh 4-aligned word used only atomically.
        let word = unsafe { a.atomic_u32(w) };
        assert_eq!(word.load(Ordering::Relaxed), 0);
        word.store(7, Ordering::Relaxed);
        assert_eq!(word.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn capacity_is_clamped() {
        assert_eq!(Arena::effective_capacity(0), 8);
        assert_eq!(Arena::effective_capacity(9), 16);
        assert_eq!(Arena::effective_capacity(usize::MAX), MAX_CAPACITY);
        assert!(MAX_CAPACITY <= u32::MAX as usize);
    }

    #[test]
    fn a_dropped_pooled_arena_serves_the_next_one() {
        let pool = Arc::new(ArenaPool::default());
        let a = Arena::pooled(4096, &pool);
        let first = a.ptr;
        assert_eq!(pool.spare_bytes(), 0);
        drop(a);
        assert_eq!(pool.spare_bytes(), 4096);
        // A little smaller asked for: the spare serves, at its own size.
        let b = Arena::pooled(4000, &pool);
        assert_eq!((b.ptr, b.capacity()), (first, 4096));
        assert_eq!(pool.spare_bytes(), 0);
        // Two dropped at once: the larger one is kept.
        let c = Arena::pooled(8192, &pool);
        drop(b);
        drop(c);
        assert_eq!(pool.spare_bytes(), 8192);
        // Far smaller asked for: the spare is freed rather than kept for a
        // memtable a quarter its size, and a new allocation is made.
        let d = Arena::pooled(1024, &pool);
        assert_eq!(d.capacity(), 1024);
        assert_eq!(pool.spare_bytes(), 0);
        // Too small for what is asked: freed as well.
        drop(d);
        let e = Arena::pooled(2048, &pool);
        assert_eq!(e.capacity(), 2048);
        assert_eq!(pool.spare_bytes(), 0);
    }
}
