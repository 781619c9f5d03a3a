//! Direct I/O: file access that bypasses the operating system's page cache
//! (`O_DIRECT`), for the `use_direct_reads` and
//! `use_direct_io_for_flush_and_compaction` settings.
//!
//! With the page cache out of the way the engine's own caches are the only
//! ones: memory use is what the settings give them, background I/O does not
//! push the foreground's data out of memory, and a benchmark measures the
//! engine rather than the kernel's cache (RocksDB's options of the same
//! names).
//!
//! The kernel moves the bytes straight between the device and the buffer,
//! so offsets, lengths and buffer addresses must be multiples of the
//! device's logical block size. Everything here works in [`ALIGN`] units,
//! which covers 512-byte and 4 KiB devices: a read of any range reads the
//! aligned blocks around it into an aligned buffer and copies the range
//! out; a writer keeps its output in an aligned buffer, writes it whole
//! when full, and on `flush` writes the partial last block padded with
//! zeros, then cuts the file back to the bytes appended.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::readahead::Readahead;
use super::{FileLock, FileSync, FileSystem, FsRef, MappedFile, RandomAccessFile, WritableFile};

/// Alignment of every direct transfer's offset, length and buffer.
pub(crate) const ALIGN: usize = 4096;

/// Bytes a direct writer gathers before it writes them.
const WRITE_BUFFER: usize = 1 << 20;

/// Largest read a thread's scratch buffer grows to; a larger read gets a
/// buffer of its own, so one big read does not pin memory on the thread.
/// GC's 1 MiB reads, aligned, fit.
const SCRATCH_MAX: usize = (1 << 20) + 2 * ALIGN;

/// A zeroed buffer whose start is [`ALIGN`]-aligned.
struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + ALIGN];
        let start = (ALIGN - raw.as_ptr() as usize % ALIGN) % ALIGN;
        AlignedBuf { raw, start, len }
    }

    fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

fn round_up(n: u64) -> u64 {
    n.div_ceil(ALIGN as u64) * ALIGN as u64
}

thread_local! {
    /// Each thread's buffer for reads that are not aligned themselves.
    static SCRATCH: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
}

/// Opens `path` with `O_DIRECT` added to `opts`; a file system that
/// refuses it (tmpfs, some network file systems) gets an error that says
/// which setting to turn off.
fn open_direct_file(opts: &mut OpenOptions, path: &Path) -> io::Result<File> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_DIRECT).open(path).map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!(
                        "the file system under {} does not support direct I/O (O_DIRECT); \
                         turn off use_direct_reads and use_direct_io_for_flush_and_compaction",
                        path.display()
                    ),
                )
            } else {
                e
            }
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = opts;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "direct I/O is only supported on Linux ({}); turn off use_direct_reads and \
                 use_direct_io_for_flush_and_compaction",
                path.display()
            ),
        ))
    }
}

/// `e` from a direct transfer, explained if the kernel refused the
/// transfer itself (EINVAL: an alignment the device does not take).
fn explain(e: io::Error) -> io::Error {
    if e.raw_os_error() != Some(libc::EINVAL) {
        return e;
    }
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "direct I/O refused a transfer ({e}); the device may need an alignment above \
             {ALIGN} bytes: turn off use_direct_reads and use_direct_io_for_flush_and_compaction"
        ),
    )
}

/// Opens `path` for direct positional reads.
pub(super) fn open(path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
    let file = open_direct_file(OpenOptions::new().read(true), path)?;
    let len = file.metadata()?.len();
    Ok(Arc::new(DirectRandom { file, len }))
}

/// Creates (or truncates) `path` for direct appends.
pub(super) fn create(path: &Path) -> io::Result<Box<dyn WritableFile>> {
    let file = open_direct_file(
        OpenOptions::new().write(true).create(true).truncate(true),
        path,
    )?;
    Ok(Box::new(DirectWritable {
        file,
        path: path.to_path_buf(),
        buf: AlignedBuf::new(WRITE_BUFFER),
        filled: 0,
        base: 0,
        unwritten: false,
        disk_len: 0,
    }))
}

/// Reads `need` bytes (at least) from aligned `at` into aligned `buf`,
/// which may ask for more: the file may end inside it.
fn read_aligned(file: &File, buf: &mut [u8], at: u64, need: usize) -> io::Result<()> {
    let mut done = 0;
    while done < need {
        // A short read ends on a block boundary unless the file ended.
        if done % ALIGN != 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(explain(e)),
        }
    }
    Ok(())
}

/// A file read with `O_DIRECT`.
struct DirectRandom {
    file: File,
    len: u64,
}

impl RandomAccessFile for DirectRandom {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&end| end <= self.len)
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        // An aligned range into an aligned buffer (the allocator hands out
        // page-aligned buffers of page-multiple sizes) needs no scratch.
        let aligned = offset % ALIGN as u64 == 0
            && buf.len() % ALIGN == 0
            && buf.as_ptr() as usize % ALIGN == 0;
        if aligned {
            let need = buf.len();
            return read_aligned(&self.file, buf, offset, need);
        }
        let start = offset - offset % ALIGN as u64;
        let span = usize::try_from(round_up(end) - start)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // Fits: `offset - start` < ALIGN.
        let skip = (offset - start) as usize;
        let mut read = |scratch: &mut AlignedBuf| -> io::Result<()> {
            let window = &mut scratch.bytes_mut()[..span];
            read_aligned(&self.file, window, start, skip + buf.len())?;
            buf.copy_from_slice(&window[skip..skip + buf.len()]);
            Ok(())
        };
        if span > SCRATCH_MAX {
            return read(&mut AlignedBuf::new(span));
        }
        let cached = SCRATCH.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.as_ref().is_some_and(|b| b.len < span) {
                *s = None;
            }
            read(s.get_or_insert_with(|| AlignedBuf::new(span.max(64 << 10))))
        });
        match cached {
            Ok(r) => r,
            // A thread being torn down has no scratch buffer left.
            Err(_) => read(&mut AlignedBuf::new(span)),
        }
    }

    fn len(&self) -> u64 {
        self.len
    }

    /// Every direct read waits for the device.
    fn read_cached_at(&self, _offset: u64, _buf: &mut [u8]) -> io::Result<bool> {
        Ok(false)
    }

    fn uncached(&self) -> bool {
        true
    }
}

/// A file written with `O_DIRECT`.
struct DirectWritable {
    file: File,
    path: PathBuf,
    buf: AlignedBuf,
    /// Bytes of `buf` that hold appended data.
    filled: usize,
    /// File offset of `buf`'s first byte, a multiple of [`ALIGN`]; the
    /// bytes appended are `base + filled`.
    base: u64,
    /// Appended bytes in `buf` not written to the file yet.
    unwritten: bool,
    /// The file's length on disk, padding included.
    disk_len: u64,
}

impl DirectWritable {
    /// Writes `buf[..span]` (`span` a multiple of [`ALIGN`]) at `base`.
    fn write_out(&mut self, span: usize) -> io::Result<()> {
        self.file
            .write_all_at(&self.buf.bytes()[..span], self.base)
            .map_err(explain)?;
        self.disk_len = self.disk_len.max(self.base + span as u64);
        Ok(())
    }
}

impl WritableFile for DirectWritable {
    fn append(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = (WRITE_BUFFER - self.filled).min(data.len());
            self.buf.bytes_mut()[self.filled..self.filled + n].copy_from_slice(&data[..n]);
            self.filled += n;
            self.unwritten = true;
            data = &data[n..];
            if self.filled == WRITE_BUFFER {
                self.write_out(WRITE_BUFFER)?;
                self.base += WRITE_BUFFER as u64;
                self.filled = 0;
                self.unwritten = false;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.unwritten {
            // Fits: `filled` <= WRITE_BUFFER, a multiple of ALIGN.
            let span = round_up(self.filled as u64) as usize;
            self.buf.bytes_mut()[self.filled..span].fill(0);
            // The partial block stays in `buf`: the next write of it
            // replaces this one.
            self.write_out(span)?;
            self.unwritten = false;
        }
        let len = self.len();
        if self.disk_len != len {
            self.file.set_len(len)?;
            self.disk_len = len;
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.base + self.filled as u64
    }

    fn sync_handle(&self) -> io::Result<Arc<dyn FileSync>> {
        // A descriptor of its own (see `PosixWritable::sync_handle`); a
        // buffered one serves, as fdatasync covers direct writes too.
        let file = OpenOptions::new().write(true).open(&self.path)?;
        Ok(Arc::new(super::file_sync::PosixSync(file)))
    }
}

impl Drop for DirectWritable {
    /// Writes what is left, as a buffered writer does when dropped.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// A [`FileSystem`] whose `open` and `create` bypass the page cache where
/// asked, through [`FileSystem::open_direct`] and
/// [`FileSystem::create_direct`] of the one it wraps; everything else
/// passes through. The table and blob caches get one for direct reads;
/// flush, compaction and GC one for direct reads and writes, whose reads
/// go through a [`Readahead`] window (they read their inputs front to
/// back, and direct reads get no readahead from the kernel). Without
/// direct I/O, the background one starts the writeback of the files it
/// creates as they grow (`bytes_per_sync`, see `writeback.rs`).
pub struct DirectIo {
    inner: FsRef,
    /// Files are opened for direct reads (and created for direct writes
    /// if `background`).
    direct: bool,
    /// Flush, compaction and GC: files are created direct too, and read
    /// through a [`Readahead`] window.
    background: bool,
    /// Bytes a created file grows by between writebacks (0: none).
    writeback: u64,
}

impl DirectIo {
    /// `inner` opening files for direct reads if `on` (`inner` itself if
    /// not); files are created as `inner` creates them.
    pub fn for_reads(inner: &FsRef, on: bool) -> FsRef {
        if !on {
            return inner.clone();
        }
        Arc::new(DirectIo {
            inner: inner.clone(),
            direct: true,
            background: false,
            writeback: 0,
        })
    }

    /// `inner` opening files for direct reads through a readahead window
    /// and creating them for direct writes if `on`; if not, creating files
    /// that start their writeback every `bytes_per_sync` bytes (`inner`
    /// itself for neither).
    pub fn for_background(inner: &FsRef, on: bool, bytes_per_sync: u64) -> FsRef {
        if !on && bytes_per_sync == 0 {
            return inner.clone();
        }
        Arc::new(DirectIo {
            inner: inner.clone(),
            direct: on,
            background: true,
            // Direct writes leave nothing in the page cache to write back.
            writeback: if on { 0 } else { bytes_per_sync },
        })
    }
}

impl FileSystem for DirectIo {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = if self.direct && self.background {
            self.inner.create_direct(path)?
        } else {
            self.inner.create(path)?
        };
        Ok(super::writeback::every(file, self.writeback))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        if !self.direct {
            return self.inner.open(path);
        }
        let file = self.inner.open_direct(path)?;
        if self.background {
            return Ok(Arc::new(Readahead::new(file)));
        }
        Ok(file)
    }

    fn open_direct(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.inner.open_direct(path)
    }

    fn create_direct(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.inner.create_direct(path)
    }

    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read_all(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.inner.file_size(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }

    fn map_file(&self, path: &Path, len: u64) -> io::Result<Arc<dyn MappedFile>> {
        self.inner.map_file(path, len)
    }

    fn link_in(&self, outside: &Path, to: &Path) -> io::Result<()> {
        self.inner.link_in(outside, to)
    }
}

#[cfg(all(test, target_os = "linux"))]
/// A directory on a file system that takes `O_DIRECT` (the build
/// directory; `/tmp` may be tmpfs), or `None` with a note.
pub(crate) fn test_dir(name: &str) -> Option<tempfile::TempDir> {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    std::fs::create_dir_all(&base).ok()?;
    let dir = tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(base)
        .ok()?;
    match open_direct_file(
        OpenOptions::new().write(true).create(true),
        &dir.path().join("probe"),
    ) {
        Ok(_) => Some(dir),
        Err(e) => {
            eprintln!("skipped: no direct I/O under {}: {e}", dir.path().display());
            None
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::io::PosixFs;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn direct_writes_read_back_exactly_at_any_offset_and_length() {
        let Some(dir) = test_dir("direct-rw") else {
            return;
        };
        let fs = PosixFs::shared();
        let path = dir.path().join("f");
        let data = pattern(3 * WRITE_BUFFER + 12_345);
        let mut w = fs.create_direct(&path).unwrap();
        // Appends of odd sizes, across buffer boundaries, with a flush in
        // the middle of a block.
        let mut at = 0;
        for (i, step) in [1, 4095, 4097, 700_000, 3, WRITE_BUFFER + 17]
            .iter()
            .cycle()
            .enumerate()
        {
            let end = (at + step).min(data.len());
            w.append(&data[at..end]).unwrap();
            at = end;
            if i == 2 {
                w.flush().unwrap();
                assert_eq!(std::fs::metadata(&path).unwrap().len(), at as u64);
            }
            if at == data.len() {
                break;
            }
        }
        w.sync().unwrap();
        assert_eq!(w.len(), data.len() as u64);
        drop(w);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            data,
            "the file is exactly what was appended"
        );

        let r = fs.open_direct(&path).unwrap();
        assert_eq!(r.len(), data.len() as u64);
        for (offset, len) in [
            (0, 1),
            (0, 4096),
            (1, 4096),
            (4095, 2),
            (8192, 8192),
            (10_000, 300_000),
            (0, data.len()),
            (data.len() - 1, 1),
            (data.len() - 5000, 5000),
            (123_456, 2 * SCRATCH_MAX + 3),
        ] {
            let mut buf = vec![0u8; len];
            r.read_exact_at(offset as u64, &mut buf).unwrap();
            assert!(
                buf == data[offset..offset + len],
                "offset {offset} len {len}"
            );
        }
        // An aligned range into an aligned buffer goes straight in.
        let mut b = AlignedBuf::new(8192);
        r.read_exact_at(4096, b.bytes_mut()).unwrap();
        assert!(b.bytes() == &data[4096..12_288]);
    }

    #[test]
    fn direct_reads_past_the_end_fail_and_never_claim_the_page_cache() {
        let Some(dir) = test_dir("direct-eof") else {
            return;
        };
        let fs = PosixFs::shared();
        let path = dir.path().join("f");
        let mut w = fs.create_direct(&path).unwrap();
        w.append(&pattern(5000)).unwrap();
        w.sync().unwrap();
        drop(w);
        let r = fs.open_direct(&path).unwrap();
        let mut buf = vec![0u8; 10];
        let e = r.read_exact_at(4995, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(r.read_exact_at(u64::MAX - 2, &mut buf).is_err());
        assert!(!r.read_cached_at(0, &mut buf).unwrap());
        assert!(r.mapped().is_none());
    }

    #[test]
    fn a_dropped_direct_writer_leaves_what_it_was_given() {
        let Some(dir) = test_dir("direct-drop") else {
            return;
        };
        let path = dir.path().join("f");
        let mut w = create(&path).unwrap();
        w.append(b"hello").unwrap();
        drop(w);
        assert_eq!(std::fs::read(&path).unwrap(), b"hello");
        // Empty files stay empty.
        let mut w = create(&dir.path().join("e")).unwrap();
        w.sync().unwrap();
        assert_eq!(std::fs::metadata(dir.path().join("e")).unwrap().len(), 0);
    }

    #[test]
    fn the_wrapper_sends_only_what_it_was_asked_to_direct_io() {
        let Some(dir) = test_dir("direct-wrap") else {
            return;
        };
        let fs = PosixFs::shared();
        // Whether a file just written is in the page cache.
        let cached = |name: &str| {
            let f = fs.open(&dir.path().join(name)).unwrap();
            f.read_cached_at(0, &mut [0; 3]).unwrap()
        };
        let write = |through: &FsRef, name: &str| {
            let mut w = through.create(&dir.path().join(name)).unwrap();
            w.append(b"abc").unwrap();
            w.sync().unwrap();
        };
        let reads = DirectIo::for_reads(&fs, true);
        let background = DirectIo::for_background(&fs, true, 1 << 20);
        write(&reads, "r");
        write(&background, "b");
        assert!(cached("r"), "reads alone create buffered files");
        assert!(!cached("b"), "background work creates direct ones");
        for name in ["r", "b"] {
            assert_eq!(std::fs::read(dir.path().join(name)).unwrap(), b"abc");
        }
        let direct = |through: &FsRef, name: &str| {
            let f = through.open(&dir.path().join(name)).unwrap();
            !f.read_cached_at(0, &mut [0; 3]).unwrap() && f.uncached()
        };
        assert!(direct(&reads, "r") && direct(&background, "b"));
        assert!(!DirectIo::for_reads(&fs, false)
            .open(&dir.path().join("r"))
            .unwrap()
            .uncached());
    }

    #[test]
    fn a_file_system_without_direct_io_says_which_setting_to_turn_off() {
        // procfs refuses O_DIRECT (as tmpfs did before Linux 6.6).
        let e = match open(Path::new("/proc/self/status")) {
            Err(e) => e,
            Ok(_) => panic!("procfs took O_DIRECT"),
        };
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("use_direct_reads"), "{e}");
        assert!(e.to_string().contains("/proc/self/status"), "{e}");
        // Other errors pass through as they are.
        let e = match open(Path::new("/proc/self/no-such-file")) {
            Err(e) => e,
            Ok(_) => panic!("opened a missing file"),
        };
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
