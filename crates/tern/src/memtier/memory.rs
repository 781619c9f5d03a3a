//! The tier's memory: one mapping of `memtier_size` bytes, handed out in
//! extents, each holding one memtable's arena copied in one piece.
//!
//! Offsets into the mapping are `u32`, like arena offsets, so a copied
//! arena's links become tier links by adding its extent's start; offset 0
//! is never handed out, so a link of 0 still means "null".
//!
//! Invariants (the `SAFETY` comments refer to them by number):
//!
//! 1. The mapping is `len` bytes, page-aligned, readable and writable, and
//!    stays mapped at the same address while the [`TierMemory`] lives.
//! 2. Extents are disjoint, start at multiples of [`EXTENT_ALIGN`] and lie
//!    in `[EXTENT_ALIGN, len)`. An extent's bytes are written only through
//!    [`Extent::fill`], which takes the extent by `&mut` before any table
//!    names it, so no reader can see them while they change.
//! 3. After `fill`, the plain bytes of every node (header, key, value) never
//!    change while the extent lives; link words are accessed only
//!    atomically, through [`NodeMemory::atomic_u32`]. Readers reach an
//!    extent's nodes only through a table published behind a lock or an
//!    `Arc`, which orders the fill before their reads.
//! 4. An extent returns to the free list only when dropped, which happens
//!    when no table (and so no reader) holds it.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::MmapMut;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::memtable::skiplist::NodeMemory;

/// Alignment (and granularity) of extents.
pub(crate) const EXTENT_ALIGN: usize = 64;

/// Largest tier: offsets, ends included, must fit in a `u32`.
pub const MAX_TIER_SIZE: u64 = (u32::MAX as u64) & !(EXTENT_ALIGN as u64 - 1);

/// The tier's mapping and its free space.
pub(crate) struct TierMemory {
    /// Keeps the mapping alive (invariant 1); accessed through `base`.
    _map: MmapMut,
    base: NonNull<u8>,
    len: usize,
    /// Free ranges `(start, len)`, sorted by start and never adjacent.
    free: Mutex<Vec<(usize, usize)>>,
    used: AtomicU64,
}

// SAFETY: the mapping is owned by this value; shared access goes through
// the free list's mutex, atomics, and the `unsafe` accessors whose
// contracts (invariants 2 and 3) rule out data races.
unsafe impl Send for TierMemory {}
// SAFETY: as above.
unsafe impl Sync for TierMemory {}

impl TierMemory {
    /// Maps `size` bytes of anonymous memory (rounded down to
    /// [`EXTENT_ALIGN`], at most [`MAX_TIER_SIZE`]).
    pub(crate) fn anonymous(size: u64) -> Result<Arc<TierMemory>> {
        let len = (size.min(MAX_TIER_SIZE) as usize) & !(EXTENT_ALIGN - 1);
        if len < 2 * EXTENT_ALIGN {
            return Err(Error::InvalidArgument(format!(
                "memtier_size {size} is too small for a memory tier"
            )));
        }
        let mut map = memmap2::MmapOptions::new()
            .len(len)
            .map_anon()
            .map_err(|e| Error::io(std::path::Path::new("memtier (anonymous)"), e))?;
        let base = NonNull::new(map.as_mut_ptr())
            .ok_or_else(|| Error::Internal("memory map at address 0".into()))?;
        Ok(Arc::new(TierMemory {
            _map: map,
            base,
            len,
            free: Mutex::new(vec![(EXTENT_ALIGN, len - EXTENT_ALIGN)]),
            used: AtomicU64::new(0),
        }))
    }

    /// Bytes the tier can hand out in all.
    pub(crate) fn capacity(&self) -> u64 {
        (self.len - EXTENT_ALIGN) as u64
    }

    /// Bytes held by extents.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// An extent of at least `len` bytes, or `None` if no free range holds
    /// one (first fit).
    pub(crate) fn allocate(self: &Arc<Self>, len: usize) -> Option<Extent> {
        let len = len.checked_add(EXTENT_ALIGN - 1)? & !(EXTENT_ALIGN - 1);
        let mut free = self.free.lock();
        let i = free.iter().position(|&(_, l)| l >= len)?;
        let (start, avail) = free[i];
        if avail == len {
            free.remove(i);
        } else {
            free[i] = (start + len, avail - len);
        }
        self.used.fetch_add(len as u64, Ordering::Relaxed);
        Some(Extent {
            mem: Arc::clone(self),
            start,
            len,
        })
    }

    fn release(&self, start: usize, len: usize) {
        // Before the range is free: once it is, a fill may already be
        // writing it.
        self.discard(start, len);
        {
            let mut free = self.free.lock();
            let i = free.partition_point(|&(s, _)| s < start);
            free.insert(i, (start, len));
            // Merge with the next range, then with the previous one.
            if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
                free[i].1 += free[i + 1].1;
                free.remove(i + 1);
            }
            if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
                free[i - 1].1 += free[i].1;
                free.remove(i);
            }
        }
        self.used.fetch_sub(len as u64, Ordering::Relaxed);
    }

    /// Gives the whole pages inside `[start, start + len)` back to the
    /// system; they read as zero afterwards. Best effort.
    fn discard(&self, start: usize, len: usize) {
        const PAGE: usize = 4096;
        let lo = start.div_ceil(PAGE) * PAGE;
        let hi = (start + len) / PAGE * PAGE;
        if hi > lo {
            // SAFETY: `[lo, hi)` lies inside the mapping (invariant 1) and in
            // a range no extent holds any more (invariant 4), so nothing
            // reads or writes it; MADV_DONTNEED on a private anonymous
            // mapping only replaces its pages with zero pages.
            unsafe {
                libc::madvise(
                    self.base.as_ptr().add(lo).cast(),
                    hi - lo,
                    libc::MADV_DONTNEED,
                );
            }
        }
    }
}

impl NodeMemory for TierMemory {
    #[inline]
    unsafe fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: in bounds of the live mapping (caller contract and
        // invariant 1), 4-aligned (the mapping is page-aligned and `off` a
        // multiple of 4), and only accessed atomically (invariant 3).
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off).cast::<u32>()) }
    }

    #[inline]
    unsafe fn bytes(&self, off: usize, len: usize) -> &[u8] {
        debug_assert!(off + len <= self.len);
        // SAFETY: in bounds of the live mapping (caller contract and
        // invariant 1), initialised (zeroed or filled), and immutable while
        // borrowed (invariant 3).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len) }
    }
}

/// A range of the tier's memory holding one copied arena; freed on drop.
pub(crate) struct Extent {
    mem: Arc<TierMemory>,
    start: usize,
    len: usize,
}

impl Extent {
    /// Where the extent starts in the tier.
    pub(crate) fn start(&self) -> usize {
        self.start
    }

    /// Its size in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies `src` to the extent's start, in one piece.
    pub(crate) fn fill(&mut self, src: &[u8]) {
        assert!(src.len() <= self.len, "fill beyond the extent");
        // SAFETY: `[start, start + src.len())` lies in this extent
        // (invariant 2), which no table names yet: `&mut self` is the only
        // access to it; `src` is another allocation, so they cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.mem.base.as_ptr().add(self.start),
                src.len(),
            );
        }
    }
}

impl Drop for Extent {
    fn drop(&mut self) {
        self.mem.release(self.start, self.len);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn extents_are_aligned_disjoint_and_coalesce_when_freed() {
        let mem = TierMemory::anonymous(64 * 1024).unwrap();
        assert_eq!(mem.capacity(), 64 * 1024 - 64);
        let a = mem.allocate(100).unwrap();
        let b = mem.allocate(64).unwrap();
        let c = mem.allocate(1000).unwrap();
        assert_eq!((a.start(), a.len()), (64, 128));
        assert_eq!((b.start(), b.len()), (192, 64));
        assert_eq!(c.start(), 256);
        assert_eq!(mem.used(), 128 + 64 + 1024);
        assert!(
            mem.allocate(64 * 1024).is_none(),
            "too big for what is left"
        );
        drop(a);
        drop(c);
        // The hole a left is reused first.
        let d = mem.allocate(64).unwrap();
        assert_eq!(d.start(), 64);
        drop(b);
        drop(d);
        assert_eq!(mem.used(), 0);
        assert_eq!(
            *mem.free.lock(),
            vec![(64, 64 * 1024 - 64)],
            "one range again"
        );
        let all = mem.allocate(64 * 1024 - 64).unwrap();
        assert_eq!(all.start(), 64);
    }

    #[test]
    fn a_tiny_tier_is_refused() {
        assert!(TierMemory::anonymous(100).is_err());
    }
}
