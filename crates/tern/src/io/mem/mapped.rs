//! Mapped in-memory files: the mapping is private memory, and
//! [`MappedFile::flush_range`] copies a range into the file as written and
//! synced at once, so a simulated crash keeps exactly the flushed bytes
//! (stricter than a real process crash, which keeps every store).

use std::io;
use std::path::Path;

use super::*;
use crate::io::MappedFile;

pub(super) struct MemMapped {
    /// Keeps the memory alive; accessed through `ptr`.
    _map: memmap2::MmapMut,
    ptr: *mut u8,
    len: usize,
    node: Node,
}

// SAFETY: the mapping is plain memory owned by this value; `as_ptr`'s users
// synchronise their accesses, and `flush_range`'s caller guarantees no
// store into the range runs while it is copied.
unsafe impl Send for MemMapped {}
// SAFETY: as above.
unsafe impl Sync for MemMapped {}

impl MemMapped {
    pub(super) fn open(fs: &MemFs, path: &Path, len: u64) -> io::Result<MemMapped> {
        let size = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        let (node, _) = fs.state.lock().open_for_write(path)?;
        let mut map = memmap2::MmapOptions::new().len(size.max(1)).map_anon()?;
        {
            let mut data = node.lock();
            // The length change is durable at once, as `set_len` and a
            // sync make it on a real file.
            let data = &mut *data;
            data.data.resize(size, 0);
            data.synced.clone_from(&data.data);
            data.diverged = false;
            map[..size].copy_from_slice(&data.data);
        }
        let ptr = map.as_mut_ptr();
        Ok(MemMapped {
            _map: map,
            ptr,
            len: size,
            node,
        })
    }
}

impl MappedFile for MemMapped {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn flush_range(&self, offset: usize, len: usize) -> io::Result<()> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "range past the mapping"))?;
        // SAFETY: `[offset, end)` lies in the mapping, and the caller
        // guarantees nothing stores into it while it is copied.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) };
        let mut data = self.node.lock();
        if data.data.len() < end || data.synced.len() < end {
            return Err(io::Error::other("the mapped file was cut while mapped"));
        }
        data.data[offset..end].copy_from_slice(bytes);
        data.synced[offset..end].copy_from_slice(bytes);
        Ok(())
    }
}
