//! The default [`FileSystem`]: the operating system's files.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::file_sync::PosixSync;
use super::{FileLock, FileSync, FileSystem, RandomAccessFile, WritableFile};

/// Files on the local disk.
#[derive(Debug, Default, Clone, Copy)]
pub struct PosixFs;

impl PosixFs {
    /// A shared handle to the local file system.
    pub fn shared() -> super::FsRef {
        Arc::new(PosixFs)
    }
}

struct PosixWritable {
    out: BufWriter<File>,
    len: u64,
    path: PathBuf,
}

impl WritableFile for PosixWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.out.write_all(data)?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn sync(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn sync_handle(&self) -> io::Result<Arc<dyn FileSync>> {
        // A new open file description rather than `dup`: Linux reports a
        // writeback error once per description, so a shared one would let
        // one syncer consume the error the other must also see.
        let file = OpenOptions::new().write(true).open(&self.path)?;
        Ok(Arc::new(PosixSync(file)))
    }
}

struct PosixRandom {
    file: File,
    len: u64,
    /// The file system refused a no-wait read once: never try again.
    no_nowait: AtomicBool,
    /// The read-only mapping [`RandomAccessFile::mapped`] made, if asked.
    map: std::sync::OnceLock<Option<ReadMap>>,
}

/// Read-only mappings alive in the process. Each is one of the process's
/// memory areas, of which Linux allows 65,530 by default
/// (`vm.max_map_count`), shared with the allocator, thread stacks and
/// the memory tier; files past [`READ_MAPS_MAX`] are read without one.
static READ_MAPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Most read-only mappings at once.
const READ_MAPS_MAX: usize = 16 << 10;

/// A read-only mapping, counted in [`READ_MAPS`].
struct ReadMap(memmap2::Mmap);

impl ReadMap {
    /// Maps `len` bytes of `file`, if the process has mappings to spare.
    fn new(file: &File, len: usize) -> Option<ReadMap> {
        Self::new_within(file, len, READ_MAPS_MAX)
    }

    /// [`ReadMap::new`] with at most `max` mappings alive.
    fn new_within(file: &File, len: usize, max: usize) -> Option<ReadMap> {
        if READ_MAPS.fetch_add(1, Ordering::Relaxed) >= max {
            READ_MAPS.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        // SAFETY: a mapping is unsound only if the file is cut or rewritten
        // while mapped. `mapped`'s contract limits it to files nobody
        // changes while open: the engine never writes a blob file after it
        // is finished (GC writes new ones), and a deleted file stays
        // readable while mapped. Only `len` bytes, the size at open, are
        // mapped.
        match unsafe { memmap2::MmapOptions::new().len(len).map(file) } {
            Ok(map) => {
                // Values are read one by one at random offsets: a fault
                // must bring in its own page, not the 128 KiB around it.
                let _ = map.advise(memmap2::Advice::Random);
                Some(ReadMap(map))
            }
            Err(_) => {
                READ_MAPS.fetch_sub(1, Ordering::Relaxed);
                None
            }
        }
    }
}

impl Drop for ReadMap {
    fn drop(&mut self) {
        READ_MAPS.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RandomAccessFile for PosixRandom {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn mapped(&self) -> Option<&[u8]> {
        self.map
            .get_or_init(|| {
                let len = usize::try_from(self.len).ok().filter(|&l| l > 0)?;
                ReadMap::new(&self.file, len)
            })
            .as_ref()
            .map(|m| &m.0[..])
    }

    #[cfg(target_os = "linux")]
    fn read_cached_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        use std::os::fd::AsRawFd;
        if self.no_nowait.load(Ordering::Relaxed) {
            return self.read_exact_at(offset, buf).map(|()| true);
        }
        let mut done = 0usize;
        while done < buf.len() {
            let rest = &mut buf[done..];
            let iov = libc::iovec {
                iov_base: rest.as_mut_ptr().cast(),
                iov_len: rest.len(),
            };
            let Ok(at) = i64::try_from(offset + done as u64) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "offset too large",
                ));
            };
            // SAFETY: `iov` points at `rest`, which is valid for writes of
            // its length for the duration of the call; the descriptor is
            // open for as long as `self.file` lives.
            let n = unsafe { libc::preadv2(self.file.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
            if n > 0 {
                done += n as usize;
                continue;
            }
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(false),
                Some(libc::EINTR) => continue,
                // A kernel or file system without RWF_NOWAIT here: say so
                // once and read the plain way from then on, as if the bytes
                // were in memory (no hints, as before such reads existed).
                Some(libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS) => {
                    self.no_nowait.store(true, Ordering::Relaxed);
                    self.read_exact_at(offset, buf).map(|()| true)
                }
                _ => Err(e),
            };
        }
        Ok(true)
    }

    #[cfg(target_os = "linux")]
    fn prefetch(&self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: the descriptor is open for as long as `self.file` lives,
        // and posix_fadvise only reads its integer arguments. A failed hint
        // changes nothing, so its result is not needed.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset,
                len,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }

    fn len(&self) -> u64 {
        self.len
    }
}

struct PosixLock {
    _file: File,
}

impl FileLock for PosixLock {}

impl FileSystem for PosixFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(PosixWritable {
            out: BufWriter::with_capacity(64 * 1024, file),
            len: 0,
            path: path.to_path_buf(),
        }))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Arc::new(PosixRandom {
            file,
            len,
            no_nowait: AtomicBool::new(false),
            map: std::sync::OnceLock::new(),
        }))
    }

    fn open_direct(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        super::direct::open(path)
    }

    fn create_direct(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        super::direct::create(path)
    }

    fn map_file(&self, path: &Path, len: u64) -> io::Result<Arc<dyn super::MappedFile>> {
        PosixMapped::open(path, len).map(|m| Arc::new(m) as Arc<dyn super::MappedFile>)
    }

    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(path)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        Ok(fs::metadata(path)?.len())
    }

    fn link_in(&self, outside: &Path, to: &Path) -> io::Result<()> {
        fs::hard_link(outside, to)?;
        // The writer may never have synced it.
        let synced = File::open(to).and_then(|f| f.sync_all());
        if synced.is_err() {
            // Leave nothing a copy could then write into: `to` shares
            // `outside`'s data.
            let _ = fs::remove_file(to);
        }
        synced
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        // The empty path (a relative path's parent) is the working directory.
        let path = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        File::open(path)?.sync_all()
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        use std::os::fd::AsRawFd;
        let file = open_or_create(path)?;
        // SAFETY: flock on a file descriptor we own; it has no memory effects.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "{} is locked by another process: {}",
                    path.display(),
                    io::Error::last_os_error()
                ),
            ));
        }
        Ok(Box::new(PosixLock { _file: file }))
    }
}

/// Opens `path` for reading and writing, created if missing, never cut.
fn open_or_create(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// The process's soft limit on open descriptors (`ulimit -n`); `None` when
/// unlimited or unknown.
pub fn descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through a valid pointer to a
    // local and touches nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// A file mapped shared (`MAP_SHARED`): stores reach the page cache at
/// once, so they outlive a crash of the process; `msync` makes them
/// outlive a crash of the machine.
struct PosixMapped {
    map: memmap2::MmapMut,
    ptr: *mut u8,
}

// SAFETY: the mapping is plain shared memory; `as_ptr`'s users synchronise
// their accesses (the memory tier's invariants), and `flush_range` only
// asks the kernel to write pages back.
unsafe impl Send for PosixMapped {}
// SAFETY: as above.
unsafe impl Sync for PosixMapped {}

impl PosixMapped {
    fn open(path: &Path, len: u64) -> io::Result<PosixMapped> {
        let file = open_or_create(path)?;
        if file.metadata()?.len() != len {
            file.set_len(len)?;
            file.sync_all()?;
        }
        let size = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        // SAFETY: the mapping is only unsound if another process cuts or
        // rewrites the file while it is mapped; the engine maps it only
        // while it holds the store's lock and the lock beside the file
        // (`memtier::memory`), and the documentation says not to touch it.
        let mut map = unsafe { memmap2::MmapOptions::new().len(size).map_mut(&file)? };
        let ptr = map.as_mut_ptr();
        Ok(PosixMapped { map, ptr })
    }
}

impl super::MappedFile for PosixMapped {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn flush_range(&self, offset: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        // memmap2 widens the range to whole pages and calls msync(MS_SYNC).
        self.map.flush_range(offset, len)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn reads_that_must_not_wait_return_the_bytes_or_say_they_would_wait() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..64 << 10).map(|i| (i % 251) as u8).collect();
        let mut f = PosixFs.create(&path).unwrap();
        f.append(&data).unwrap();
        f.sync().unwrap();
        let r = PosixFs.open(&path).unwrap();
        let mut buf = vec![0u8; 1000];
        // Just written: in memory.
        assert!(r.read_cached_at(5000, &mut buf).unwrap());
        assert_eq!(buf, data[5000..6000]);
        // Past the end: an error, as `read_exact_at` gives.
        assert!(r.read_cached_at(data.len() as u64 - 10, &mut buf).is_err());
        // Dropped from the page cache (where the file system lets it go),
        // the read says it would wait; announced and read, it is the same.
        let file = File::open(&path).unwrap();
        // SAFETY: a valid descriptor; posix_fadvise reads only integers.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
        if !r.read_cached_at(40_000, &mut buf).unwrap() {
            r.prefetch(40_000, 1000);
            r.read_exact_at(40_000, &mut buf).unwrap();
        }
        assert_eq!(buf, data[40_000..41_000]);
    }

    #[test]
    fn a_sync_handle_works_on_its_own_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = PosixFs.create(&path).unwrap();
        let handle = f.sync_handle().unwrap();
        f.append(b"data").unwrap();
        f.flush().unwrap();
        handle.start_writeback().unwrap();
        handle.sync_data().unwrap();
        // The handle's descriptor is its own: dropping the writer leaves it
        // usable.
        drop(f);
        handle.start_writeback().unwrap();
        handle.sync_data().unwrap();
    }

    #[test]
    fn files_past_the_mapping_cap_are_read_without_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = File::open(&path).unwrap();
        assert!(ReadMap::new_within(&file, 10, 0).is_none());
        let map = ReadMap::new_within(&file, 10, usize::MAX).unwrap();
        assert_eq!(&map.0[..], b"0123456789");
        // Through the trait, a file maps once and reads its bytes.
        let f = PosixFs.open(&path).unwrap();
        assert_eq!(f.mapped(), Some(&b"0123456789"[..]));
        assert_eq!(
            f.mapped().map(|m| m.as_ptr()),
            f.mapped().map(|m| m.as_ptr())
        );
    }
}
