//! The hybrid log: one address space whose tail pages are in memory and
//! whose older part is on disk.
//!
//! ```text
//!  begin        head          safe_read_only  read_only           tail
//!    |  on disk  |   in memory, read-only        |  mutable: updated  |
//!    |  (stable) |   (updates copy to the tail)  |  in place          |
//! ```
//!
//! Records are appended at the tail with one `fetch_add`; the thread whose
//! record would cross a page's end turns the page. Moving `read_only` and
//! `head` forward takes effect for other threads through epoch protection
//! (`crossbeam-epoch`): the move is published at once, and the `safe_*`
//! twin follows once every thread that could have seen the old value has
//! left its operation. Only then are pages below `safe_read_only` flushed
//! (no in-place update can still be running there) and frames below
//! `safe_head` reused (no reader can still be looking at them).

mod flusher;
mod read;
pub mod scan;
pub mod segments;

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_epoch::{Collector, Guard, LocalHandle};
use parking_lot::{Condvar, Mutex};

pub use flusher::spawn_flusher;
use segments::Segments;

use crate::record::Record;
use crate::Error;

/// The first address of a log; 0 means "no record".
pub const FIRST_ADDRESS: u64 = 64;
/// Addresses are 48 bits wide (the index and record headers hold them so).
pub const MAX_ADDRESS: u64 = 1 << 48;
const OFFSET_MASK: u64 = 0xffff_ffff;

/// The log's region boundaries, shared with the deferred actions that move
/// the `safe_*` ones (which must not own the log itself).
#[derive(Default)]
pub struct Regions {
    /// Lowest address still in the log.
    pub begin: AtomicU64,
    /// Lowest address in memory.
    pub head: AtomicU64,
    /// Below this, no reader can be looking at memory: frames may be reused.
    pub safe_head: AtomicU64,
    /// Below this, records are not updated in place.
    pub read_only: AtomicU64,
    /// Below this, no in-place update can still be running: safe to flush.
    pub safe_read_only: AtomicU64,
    /// Below this, the log is written to its segment files.
    pub flushed: AtomicU64,
    stopped: AtomicBool,
    stop_reason: Mutex<String>,
    shutdown: AtomicBool,
    wake: Mutex<()>,
    flusher_wake: Condvar,
    progress: Condvar,
}

impl Regions {
    /// Wakes the flusher.
    pub fn wake_flusher(&self) {
        let _g = self.wake.lock();
        self.flusher_wake.notify_all();
    }

    fn notify_progress(&self) {
        let _g = self.wake.lock();
        self.progress.notify_all();
    }

    /// Waits a moment for the flusher or an epoch action to move something.
    pub fn wait_progress(&self) {
        let mut g = self.wake.lock();
        self.progress.wait_for(&mut g, Duration::from_millis(1));
    }

    /// Stops the store after a failed log write.
    pub fn stop(&self, reason: String) {
        *self.stop_reason.lock() = reason;
        self.stopped.store(true, Ordering::Release);
        self.wake_flusher();
        self.notify_progress();
    }

    /// The failure that stopped the store, if one did.
    pub fn check(&self) -> crate::Result<()> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(Error::Stopped(self.stop_reason.lock().clone()));
        }
        Ok(())
    }
}

struct Frame {
    memory: NonNull<u8>,
    /// The page the frame holds (`u64::MAX`: none yet).
    page: AtomicU64,
}

/// The in-memory pages of the log and its segment files.
pub struct HybridLog {
    page_bits: u32,
    page_size: u64,
    memory_pages: u64,
    mutable_pages: u64,
    frames: Box<[Frame]>,
    layout: Layout,
    /// `page << 32 | offset` of the next append.
    tail: AtomicU64,
    /// Serializes page turns (one per page of appends).
    turn: Mutex<()>,
    /// Region boundaries.
    pub regions: Arc<Regions>,
    /// The stable region's files.
    pub segments: Segments,
    collector: Collector,
}

// SAFETY: the frames' memory is only reached through the region and epoch
// protocol described at the top of this module; the raw pointers are owned by
// the log and freed only when it drops.
unsafe impl Send for HybridLog {}
// SAFETY: as above; all shared mutable state is atomics or behind locks.
unsafe impl Sync for HybridLog {}

impl HybridLog {
    /// A log over `segments` whose next append goes at `tail` and whose
    /// older part, from `begin`, is on disk (everything below `tail`).
    pub fn new(
        page_bits: u32,
        memory_pages: u32,
        mutable_pages: u32,
        segments: Segments,
        begin: u64,
        tail: u64,
    ) -> HybridLog {
        let page_size = 1u64 << page_bits;
        let layout = Layout::from_size_align(page_size as usize, 4096)
            .unwrap_or_else(|_| Layout::new::<u64>());
        let frames = (0..memory_pages)
            .map(|_| {
                // SAFETY: the layout has a non-zero size (at least 4 KiB).
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                let Some(memory) = NonNull::new(p) else {
                    std::alloc::handle_alloc_error(layout)
                };
                Frame {
                    memory,
                    page: AtomicU64::new(u64::MAX),
                }
            })
            .collect::<Box<[Frame]>>();
        let tail_page = tail >> page_bits;
        frames[(tail_page % memory_pages as u64) as usize]
            .page
            .store(tail_page, Ordering::Relaxed);
        let regions = Regions::default();
        regions.begin.store(begin, Ordering::Relaxed);
        for r in [
            &regions.head,
            &regions.safe_head,
            &regions.read_only,
            &regions.safe_read_only,
            &regions.flushed,
        ] {
            r.store(tail, Ordering::Relaxed);
        }
        HybridLog {
            page_bits,
            page_size,
            memory_pages: memory_pages as u64,
            mutable_pages: mutable_pages as u64,
            frames,
            layout,
            tail: AtomicU64::new((tail_page << 32) | (tail & (page_size - 1))),
            turn: Mutex::new(()),
            regions: Arc::new(regions),
            segments,
            collector: Collector::new(),
        }
    }

    /// A new epoch participant (one per session and background thread).
    pub fn register(&self) -> LocalHandle {
        self.collector.register()
    }

    /// The page size.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// The address the next append lands at (or past, when the tail page is
    /// full and not yet turned).
    pub fn tail_address(&self) -> u64 {
        let t = self.tail.load(Ordering::SeqCst);
        ((t >> 32) << self.page_bits) + (t & OFFSET_MASK).min(self.page_size)
    }

    /// The record at `address`. The caller is pinned and read `head` after
    /// pinning, and `address` is at or above it and below the tail.
    pub fn record(&self, address: u64) -> Record {
        let page = address >> self.page_bits;
        let frame = &self.frames[(page % self.memory_pages) as usize];
        debug_assert_eq!(
            frame.page.load(Ordering::Relaxed),
            page,
            "address {address:#x}"
        );
        let offset = (address & (self.page_size - 1)) as usize;
        // SAFETY: the frame holds `page` for as long as the caller is pinned
        // (frames are reused only below `safe_head`), and records start at
        // 8-aligned offsets.
        unsafe { Record::from_ptr(frame.memory.as_ptr().add(offset)) }
    }

    /// Reserves `len` bytes (8-aligned, at most a page) at the tail; `None`
    /// when the next page's frame is not free yet (the caller unpins, waits
    /// with [`HybridLog::wait_for_room`] and retries).
    pub fn allocate(&self, len: u64, guard: &Guard) -> Option<u64> {
        debug_assert!(len <= self.page_size && len % 8 == 0);
        loop {
            let now = self.tail.load(Ordering::SeqCst);
            if (now & OFFSET_MASK) + len <= self.page_size {
                let t = self.tail.fetch_add(len, Ordering::SeqCst);
                let (page, offset) = (t >> 32, t & OFFSET_MASK);
                if offset + len <= self.page_size {
                    return Some((page << self.page_bits) + offset);
                }
                // The page filled between the load and the add.
            }
            if !self.turn_page(now >> 32, guard) {
                return None;
            }
        }
    }

    /// Moves the tail to the page after `page`, if it is still there; `false`
    /// when that page's frame still holds an older page.
    fn turn_page(&self, page: u64, guard: &Guard) -> bool {
        let _turn = self.turn.lock();
        if self.tail.load(Ordering::Acquire) >> 32 != page {
            return true;
        }
        let next = page + 1;
        // The tail word holds the page number in its upper 32 bits.
        let limit = MAX_ADDRESS.min(1 << (32 + self.page_bits));
        if (next + 1) << self.page_bits > limit {
            self.regions
                .stop("the log's 48-bit address space is used up".into());
            return false;
        }
        self.shift_read_only(
            next.saturating_sub(self.mutable_pages) << self.page_bits,
            guard,
        );
        let evict_to = (next + 1).saturating_sub(self.memory_pages) << self.page_bits;
        self.shift_head(evict_to, guard);
        guard.flush();
        if self.regions.safe_head.load(Ordering::Acquire) < evict_to {
            return false;
        }
        let frame = &self.frames[(next % self.memory_pages) as usize];
        // SAFETY: the frame's old page is below `safe_head`, so no pinned
        // thread can be reading it, and no append reaches it before the tail
        // store below.
        unsafe { std::ptr::write_bytes(frame.memory.as_ptr(), 0, self.page_size as usize) };
        frame.page.store(next, Ordering::Release);
        self.tail.store(next << 32, Ordering::SeqCst);
        true
    }

    /// Makes everything below `to` read-only; it is flushed once no update
    /// in place can still be running there.
    pub fn shift_read_only(&self, to: u64, guard: &Guard) {
        let regions = &self.regions;
        if regions.read_only.fetch_max(to, Ordering::SeqCst) < to {
            let regions = self.regions.clone();
            guard.defer(move || {
                regions.safe_read_only.fetch_max(to, Ordering::SeqCst);
                regions.wake_flusher();
            });
        }
    }

    /// Evicts pages below `to`, as far as they are flushed.
    fn shift_head(&self, to: u64, guard: &Guard) {
        let to = to.min(self.regions.flushed.load(Ordering::Acquire));
        if self.regions.head.fetch_max(to, Ordering::SeqCst) < to {
            let regions = self.regions.clone();
            guard.defer(move || {
                regions.safe_head.fetch_max(to, Ordering::SeqCst);
                regions.notify_progress();
            });
        }
    }

    /// Helps the epoch along and waits a moment for flushes or evictions;
    /// called unpinned after [`HybridLog::allocate`] found no room.
    pub fn wait_for_room(&self, handle: &LocalHandle) {
        handle.pin().flush();
        self.regions.wake_flusher();
        self.regions.wait_progress();
        handle.pin().flush();
    }

    /// Copies the bytes of `[from, to)` (one page at most) out of memory.
    /// Every word is read atomically: lock bits of record headers may change
    /// while a page is flushed.
    fn copy_out(&self, from: u64, to: u64, out: &mut Vec<u8>) {
        let page = from >> self.page_bits;
        debug_assert_eq!((to - 1) >> self.page_bits, page);
        let frame = &self.frames[(page % self.memory_pages) as usize];
        let offset = (from & (self.page_size - 1)) as usize;
        out.clear();
        for i in (0..(to - from) as usize).step_by(8) {
            // SAFETY: the range is below `safe_read_only` and above `head`
            // (flushes come before evictions), so the frame holds the page;
            // the words are 8-aligned and accessed atomically by everyone.
            let word = unsafe {
                std::sync::atomic::AtomicU64::from_ptr(frame.memory.as_ptr().add(offset + i).cast())
                    .load(Ordering::Relaxed)
            };
            out.extend_from_slice(&word.to_le_bytes());
        }
    }
}

impl Drop for HybridLog {
    fn drop(&mut self) {
        for f in self.frames.iter() {
            // SAFETY: allocated in `new` with this layout; nothing uses the
            // frames once the log drops.
            unsafe { std::alloc::dealloc(f.memory.as_ptr(), self.layout) };
        }
    }
}
