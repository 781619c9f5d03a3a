//! All file access goes through [`FileSystem`], so tests can run the engine on
//! memory, simulate a crash that drops everything not fsynced, and inject I/O
//! errors on chosen operations.
//!
//! Contract for implementations:
//! 1. Data appended to a [`WritableFile`] is durable only after
//!    [`WritableFile::sync`] returns `Ok`.
//! 2. A created, renamed or removed directory entry is durable only after
//!    [`FileSystem::sync_dir`] on its parent returns `Ok`.
//! 3. [`FileSystem::rename`] atomically replaces the target.
//! 4. Readers of a file see all data appended and `flush`ed before they opened it.

use std::io;
use std::path::Path;
use std::sync::Arc;

mod direct;
mod fault;
mod file_sync;
mod mem;
mod posix;
mod rate_limit;
mod readahead;
mod writeback;

#[cfg(all(test, target_os = "linux"))]
pub(crate) use direct::test_dir as direct_test_dir;
pub use direct::DirectIo;
pub use fault::{FaultFs, FaultKind};
pub use mem::{CrashMode, MemFs};
pub use posix::{descriptor_limit, PosixFs};
pub use rate_limit::{RateLimitedFile, RateLimiter};

/// A file opened for appending.
pub trait WritableFile: Send + Sync {
    /// Appends `data` (may be buffered).
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Pushes buffered data to the operating system (visible to readers, not durable).
    fn flush(&mut self) -> io::Result<()>;
    /// Flushes and makes all appended data durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
    /// Bytes appended so far.
    fn len(&self) -> u64;
    /// True when nothing was appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A handle that syncs this file from another thread while this writer
    /// goes on appending (a duplicated descriptor), so a slow `fdatasync`
    /// holds no lock the writer needs.
    fn sync_handle(&self) -> io::Result<Arc<dyn FileSync>>;
}

/// Syncs a file on behalf of its [`WritableFile`], from any thread.
pub trait FileSync: Send + Sync {
    /// Makes every byte the writer had flushed before the call durable
    /// (fdatasync). Bytes still in the writer's buffer are not covered.
    fn sync_data(&self) -> io::Result<()>;
    /// Starts writing the flushed bytes to the device without waiting and
    /// without a journal commit (Linux `sync_file_range`), so a later
    /// [`FileSync::sync_data`] has little left to do. Promises nothing
    /// about durability; where there is no such call it syncs.
    fn start_writeback(&self) -> io::Result<()> {
        self.sync_data()
    }
}

/// A file opened for positional reads, shared between threads.
pub trait RandomAccessFile: Send + Sync {
    /// Fills `buf` from `offset`; an error if the file is shorter.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// File size when it was opened.
    fn len(&self) -> u64;
    /// Fills `buf` from `offset` as `read_exact_at` does if the bytes are
    /// in memory already; `Ok(false)` (and `buf` unspecified) if reading
    /// them would wait for the device. The default always reads.
    fn read_cached_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        self.read_exact_at(offset, buf).map(|()| true)
    }
    /// Hints that `len` bytes from `offset` will be read soon, so the
    /// device can fetch them while the caller reads others. A hint only:
    /// it never fails and may do nothing (the default).
    fn prefetch(&self, _offset: u64, _len: u64) {}
    /// The whole file mapped read-only into memory, for a file nobody
    /// changes while it is open (a finished blob file); mapped on the first
    /// call. `None` where the file system does not map files for reading
    /// (the default) or the mapping failed.
    fn mapped(&self) -> Option<&[u8]> {
        None
    }
    /// True when reads bypass every cache below the engine (direct I/O):
    /// [`RandomAccessFile::prefetch`] then has nothing to fetch into, and
    /// a caller that wants its reads to overlap must issue them together.
    /// Default: false.
    fn uncached(&self) -> bool {
        false
    }
    /// True for an empty file.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file mapped into memory and shared with it: stores into the mapping
/// reach the file, and [`MappedFile::flush_range`] makes them durable
/// (`msync`). The memory tier keeps its durable tables in one.
pub trait MappedFile: Send + Sync {
    /// Start of the mapping: [`MappedFile::len`] bytes, readable and
    /// writable, at this address for the mapping's whole life.
    fn as_ptr(&self) -> *mut u8;
    /// Length of the mapping (and of the file) in bytes.
    fn len(&self) -> usize;
    /// True for an empty mapping.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Makes the mapping's bytes in `[offset, offset + len)`, as stored
    /// before the call, durable in the file. The caller makes sure no other
    /// thread stores into that range meanwhile.
    fn flush_range(&self, offset: usize, len: usize) -> io::Result<()>;
}

/// A held advisory lock on a file; released on drop.
pub trait FileLock: Send + Sync {}

/// The file-system operations the engine needs.
pub trait FileSystem: Send + Sync + 'static {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates (or truncates) a file for appending.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Opens a file for positional reads.
    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>>;
    /// Opens a file for positional reads that bypass the operating
    /// system's page cache (direct I/O), or fails saying why. The default,
    /// for file systems without a page cache of their own to bypass, is
    /// [`FileSystem::open`].
    fn open_direct(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.open(path)
    }
    /// Creates (or truncates) a file for appends that bypass the page
    /// cache, or fails saying why; the default is [`FileSystem::create`].
    fn create_direct(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.create(path)
    }
    /// Reads a whole file.
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Names (not paths) of the entries in a directory.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// True if the path exists.
    fn exists(&self, path: &Path) -> bool;
    /// Size of a file in bytes.
    fn file_size(&self, path: &Path) -> io::Result<u64>;
    /// Makes the directory's entries durable (fsync of the directory).
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path` (created if missing); fails if held.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>>;
    /// Opens `path` (created if missing) for [`MappedFile`] access at
    /// exactly `len` bytes: a longer file is cut, a shorter one extended
    /// with zeros, and the new length is durable before this returns (a
    /// new file's directory entry needs [`FileSystem::sync_dir`], as for
    /// `create`). `Unsupported` (the default) where files cannot be mapped.
    fn map_file(&self, path: &Path, len: u64) -> io::Result<Arc<dyn MappedFile>> {
        let _ = (path, len);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this file system cannot map files",
        ))
    }
    /// Makes `outside`, a file on the machine's own file system that
    /// nothing will change again, appear at `to` without copying it (a
    /// hard link), with its data synced. `Unsupported` (the default, and
    /// across devices) tells the caller to copy instead.
    fn link_in(&self, outside: &Path, to: &Path) -> io::Result<()> {
        let _ = (outside, to);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this file system cannot link files in",
        ))
    }
}

/// splitmix64: a tiny deterministic generator, so simulated faults and
/// crashes follow from a seed without a dependency.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Shared handle to a file system.
pub type FsRef = Arc<dyn FileSystem>;

/// Creates `dir` and its missing parents, and syncs the parent of each
/// directory it created and of `dir` itself (which an earlier `mkdir` may
/// have left unsynced), so a power loss cannot take the directory (and
/// whatever is later synced inside it) with it. Costs one directory fsync
/// when everything exists.
pub fn create_dir_all_durable(fs: &dyn FileSystem, dir: &Path) -> io::Result<()> {
    let entries: Vec<&Path> = dir
        .ancestors()
        .enumerate()
        .take_while(|(i, d)| !d.as_os_str().is_empty() && (*i == 0 || !fs.exists(d)))
        .map(|(_, d)| d)
        .collect();
    fs.create_dir_all(dir)?;
    for d in entries {
        // A relative path's top directory has the empty path as parent,
        // which stands for the working directory.
        fs.sync_dir(d.parent().unwrap_or(Path::new("")))?;
    }
    Ok(())
}
