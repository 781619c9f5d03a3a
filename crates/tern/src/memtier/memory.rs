//! The tier's memory: one mapping of `memtier_size` bytes, handed out in
//! extents, each holding one memtable's arena copied in one piece. The
//! mapping is anonymous memory, or a file (`memtier_path`) for a durable
//! tier: then [`TierMemory::persist`] makes an extent durable (`msync`),
//! and the first [`EXTENT_ALIGN`] bytes hold the file's header
//! (`docs/format/memtier.md`).
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

use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::MmapMut;
use parking_lot::Mutex;

use crate::error::{Error, IoContext, Result};
use crate::format::checksum::crc;
use crate::io::{FileLock, FileSystem, MappedFile};
use crate::memtable::skiplist::NodeMemory;
use crate::version::TierTables;

/// Alignment (and granularity) of extents.
pub(crate) const EXTENT_ALIGN: usize = 64;

/// Largest tier: offsets, ends included, must fit in a `u32`.
pub const MAX_TIER_SIZE: u64 = (u32::MAX as u64) & !(EXTENT_ALIGN as u64 - 1);

/// What the tier's memory is.
enum Backing {
    /// Anonymous memory: the tier is lost in a crash.
    Anonymous { _map: MmapMut },
    /// A mapped file: the durable tier.
    File {
        file: Arc<dyn MappedFile>,
        path: PathBuf,
        /// Keeps another store from mapping the same file; released when
        /// the store closes (`Db::close`), as the store's own lock is.
        lock: Mutex<Option<Box<dyn FileLock>>>,
    },
}

/// The durable tier file's header: magic, format version, mapping length.
const MAGIC: &[u8; 8] = b"TERNTIER";
/// The tier file format's version.
pub const TIER_FORMAT_VERSION: u32 = 1;
/// Bytes of the header (then a checksum; the rest of the first extent
/// slot is zero).
const HEADER_BODY: usize = 24;

/// The header of a tier file of `len` bytes.
fn header(len: usize) -> [u8; HEADER_BODY + 4] {
    let mut h = [0u8; HEADER_BODY + 4];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&TIER_FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&(len as u64).to_le_bytes());
    let c = crc(&h[..HEADER_BODY]);
    h[HEADER_BODY..].copy_from_slice(&c.to_le_bytes());
    h
}

/// Checks a tier file's first bytes: `Ok(len)` for a valid header of a
/// file of `len` bytes, else what is wrong.
pub fn check_header(bytes: &[u8]) -> std::result::Result<u64, String> {
    let Some(h) = bytes.get(..HEADER_BODY + 4) else {
        return Err("shorter than its header".into());
    };
    if &h[..8] != MAGIC {
        return Err("not a Tern memory tier file (bad magic)".into());
    }
    let stored = u32::from_le_bytes([h[24], h[25], h[26], h[27]]);
    if crc(&h[..HEADER_BODY]) != stored {
        return Err("header checksum mismatch".into());
    }
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version != TIER_FORMAT_VERSION {
        return Err(format!(
            "format version {version}; this build reads {TIER_FORMAT_VERSION}"
        ));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&h[16..24]);
    Ok(u64::from_le_bytes(len))
}

/// The tier's mapping and its free space.
pub(crate) struct TierMemory {
    /// Keeps the mapping alive (invariant 1); accessed through `base`.
    backing: Backing,
    base: NonNull<u8>,
    len: usize,
    /// Free ranges `(start, len)`, sorted by start and never adjacent.
    free: Mutex<Vec<(usize, usize)>>,
    used: AtomicU64,
    /// Set by [`TierMemory::close`].
    closing: std::sync::atomic::AtomicBool,
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
        let len = tier_len(size)?;
        let mut map = memmap2::MmapOptions::new()
            .len(len)
            .map_anon()
            .map_err(|e| Error::io(std::path::Path::new("memtier (anonymous)"), e))?;
        let base = NonNull::new(map.as_mut_ptr())
            .ok_or_else(|| Error::Internal("memory map at address 0".into()))?;
        Ok(TierMemory::over(
            Backing::Anonymous { _map: map },
            base,
            len,
        ))
    }

    /// A tier of `len` bytes at `base`, all free but the header slot.
    fn over(backing: Backing, base: NonNull<u8>, len: usize) -> Arc<TierMemory> {
        Arc::new(TierMemory {
            backing,
            base,
            len,
            free: Mutex::new(vec![(EXTENT_ALIGN, len - EXTENT_ALIGN)]),
            used: AtomicU64::new(0),
            closing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Maps the durable tier file at `path`, `size` bytes (rounded as for
    /// [`TierMemory::anonymous`]), created if missing. `live` are the
    /// tables the manifest says it holds: with any, the file must exist
    /// with a valid header of the same size; with none, it is (re)made at
    /// `size`. The live tables' extents are not free: restore them with
    /// [`TierMemory::reserve`].
    pub(crate) fn file(
        fs: &dyn FileSystem,
        path: &Path,
        size: u64,
        live: &TierTables,
    ) -> Result<Arc<TierMemory>> {
        let len = tier_len(size)?;
        let lock_path = lock_path(path);
        let lock = fs.lock(&lock_path).map_err(|e| {
            Error::Busy(format!(
                "cannot lock {}: {e}; is another store using this memory tier file?",
                lock_path.display()
            ))
        })?;
        let existed = fs.exists(path);
        if !live.is_empty() {
            if !existed {
                return Err(Error::corruption(
                    path,
                    0,
                    format!(
                        "the memory tier file is missing, and the manifest names {} tables in it (the writes they hold are lost unless the file is put back)",
                        live.len()
                    ),
                ));
            }
            let head = read_head(fs, path)?;
            let on_disk = check_header(&head).map_err(|why| Error::corruption(path, 0, why))?;
            if on_disk != len as u64 {
                return Err(Error::InvalidArgument(format!(
                    "memory tier file {} is {on_disk} bytes but memtier_size makes it {len}; open with memtier_size = {on_disk} until its tables are copied out (Db::flush)",
                    path.display()
                )));
            }
        }
        let file = fs.map_file(path, len as u64).ctx(path)?;
        if !existed {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                fs.sync_dir(dir).ctx(dir)?;
            }
        }
        let base = NonNull::new(file.as_ptr())
            .ok_or_else(|| Error::Internal("memory map at address 0".into()))?;
        if live.is_empty() {
            let h = header(len);
            // SAFETY: the header slot `[0, EXTENT_ALIGN)` lies in the new
            // mapping (len >= 2 * EXTENT_ALIGN) and is never an extent;
            // nothing else knows the mapping yet.
            unsafe { std::ptr::copy_nonoverlapping(h.as_ptr(), base.as_ptr(), h.len()) };
            file.flush_range(0, EXTENT_ALIGN).ctx(path)?;
        }
        let backing = Backing::File {
            file,
            path: path.to_path_buf(),
            lock: Mutex::new(Some(lock)),
        };
        Ok(TierMemory::over(backing, base, len))
    }

    /// The durable tier's file, if this is one.
    pub(crate) fn path(&self) -> Option<&Path> {
        match &self.backing {
            Backing::File { path, .. } => Some(path),
            Backing::Anonymous { .. } => None,
        }
    }

    /// The store closed: the tier file's lock goes as soon as no extent
    /// is held any more (now, or when the last reader of the closed handle
    /// lets go), so a new handle never maps memory a reader still uses.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.unlock_if_unused();
    }

    fn unlock_if_unused(&self) {
        if !self.closing.load(Ordering::Acquire) {
            return;
        }
        if let Backing::File { lock, .. } = &self.backing {
            // Checked under the lock's mutex, which `release` takes after
            // counting its extent out, so the last one cannot be missed.
            let mut held = lock.lock();
            if self.used.load(Ordering::Acquire) == 0 {
                held.take();
            }
        }
    }

    /// Makes `[start, start + len)` durable in the tier file (nothing for
    /// an anonymous tier). Nothing may store into the range meanwhile.
    pub(crate) fn persist(&self, start: usize, len: usize) -> Result<()> {
        match &self.backing {
            Backing::File { file, path, .. } => file.flush_range(start, len).ctx(path),
            Backing::Anonymous { .. } => Ok(()),
        }
    }

    /// Takes the extent `[start, start + len)` (len rounded up to
    /// [`EXTENT_ALIGN`]) out of the free space, for a table restored from
    /// the tier file; `None` if any of it is not free or not aligned.
    pub(crate) fn reserve(self: &Arc<Self>, start: usize, len: usize) -> Option<Extent> {
        let len = len.checked_add(EXTENT_ALIGN - 1)? & !(EXTENT_ALIGN - 1);
        let end = start.checked_add(len)?;
        if start % EXTENT_ALIGN != 0 || len == 0 {
            return None;
        }
        let mut free = self.free.lock();
        let i = free.iter().position(|&(s, l)| s <= start && end <= s + l)?;
        let (s, l) = free[i];
        free.remove(i);
        if end < s + l {
            free.insert(i, (end, s + l - end));
        }
        if s < start {
            free.insert(i, (s, start - s));
        }
        Some(self.extent(start, len))
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
        Some(self.extent(start, len))
    }

    /// Counts `[start, start + len)`, just taken off the free list, as an
    /// extent.
    fn extent(self: &Arc<Self>, start: usize, len: usize) -> Extent {
        self.used.fetch_add(len as u64, Ordering::Relaxed);
        Extent {
            mem: Arc::clone(self),
            start,
            len,
            keep_bytes: false,
            linked: std::sync::atomic::AtomicUsize::new(0),
            id: None,
        }
    }

    fn release(&self, start: usize, len: usize, discard: bool) {
        // Before the range is free: once it is, a fill may already be
        // writing it.
        if discard {
            self.discard(start, len);
        }
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
        self.used.fetch_sub(len as u64, Ordering::AcqRel);
        self.unlock_if_unused();
    }

    /// Gives the whole pages inside `[start, start + len)` of an anonymous
    /// tier back to the system; they read as zero afterwards. Best effort.
    /// A file's pages stay: the next copy-in overwrites them.
    fn discard(&self, start: usize, len: usize) {
        if !matches!(self.backing, Backing::Anonymous { .. }) {
            return;
        }
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

/// The bytes a tier of `size` maps: rounded down to [`EXTENT_ALIGN`], at
/// most [`MAX_TIER_SIZE`], and room for the header slot and an extent.
fn tier_len(size: u64) -> Result<usize> {
    let len = (size.min(MAX_TIER_SIZE) as usize) & !(EXTENT_ALIGN - 1);
    if len < 2 * EXTENT_ALIGN {
        return Err(Error::InvalidArgument(format!(
            "memtier_size {size} is too small for a memory tier"
        )));
    }
    Ok(len)
}

/// Where the lock beside a tier file is.
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The first bytes of the tier file at `path`, for its header.
fn read_head(fs: &dyn FileSystem, path: &Path) -> Result<Vec<u8>> {
    let f = fs.open(path).ctx(path)?;
    let n = f.len().min(EXTENT_ALIGN as u64) as usize;
    let mut head = vec![0u8; n];
    f.read_exact_at(0, &mut head).ctx(path)?;
    Ok(head)
}

/// A range of the tier's memory holding one copied arena; freed on drop.
pub(crate) struct Extent {
    mem: Arc<TierMemory>,
    start: usize,
    len: usize,
    /// Free it without discarding its pages.
    keep_bytes: bool,
    /// Its nodes still linked into a list: merges count unlinked ones
    /// down, and an extent at zero holds nothing any reader needs.
    linked: std::sync::atomic::AtomicUsize,
    /// The durable table it holds (the manifest's id), if the tier is.
    id: Option<u64>,
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

    /// Records what it holds once filled: `nodes` linked nodes, and the
    /// durable table `id`.
    pub(crate) fn set_contents(&mut self, nodes: usize, id: Option<u64>) {
        *self.linked.get_mut() = nodes;
        self.id = id;
    }

    /// The durable table it holds, if any.
    pub(crate) fn id(&self) -> Option<u64> {
        self.id
    }

    /// Counts one of its nodes unlinked.
    pub(crate) fn unlinked_one(&self) {
        self.linked.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether every node it holds was unlinked.
    pub(crate) fn all_unlinked(&self) -> bool {
        self.linked.load(Ordering::Relaxed) == 0
    }

    /// Whether tier offset `at` lies in it.
    pub(crate) fn contains(&self, at: usize) -> bool {
        (self.start..self.start + self.len).contains(&at)
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

impl Extent {
    /// Its first `len` bytes, links included, for a table restored from
    /// the tier file; `&mut self` proves no table names the extent yet.
    pub(crate) fn contents(&mut self, len: usize) -> &[u8] {
        let len = len.min(self.len);
        // SAFETY: `[start, start + len)` lies in this extent (invariant 2),
        // which no table names yet: `&mut self` is the only access to it,
        // and the borrow ends before any link in it is stored.
        unsafe { std::slice::from_raw_parts(self.mem.base.as_ptr().add(self.start), len) }
    }
}

impl Extent {
    /// Frees the extent with its bytes left as they are (a drop may zero
    /// them), so a restore can find what was filled in.
    pub(crate) fn free_keeping_bytes(mut self) {
        self.keep_bytes = true;
    }
}

impl Drop for Extent {
    fn drop(&mut self) {
        self.mem.release(self.start, self.len, !self.keep_bytes);
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
