//! Background output written to the device as it grows (`bytes_per_sync`;
//! the background file system of `direct.rs` wraps the files it creates).
//!
//! Flush, compaction and GC write files of tens to hundreds of megabytes
//! through the page cache and sync each once, at its end. Until then the
//! kernel holds the bytes dirty and writes them when it chooses: in bursts
//! of hundreds of megabytes, during which a foreground `fdatasync` of the
//! WAL (every write under `appendfsync always`) queues behind them at the
//! device, and on ext4 its journal commit may wait for their data blocks
//! too. Starting the writeback of every `bytes_per_sync` bytes as they are
//! appended keeps what is dirty, and what a foreground sync can find ahead
//! of it, to about that much per writer; the sync at the file's end then
//! has little left to do. RocksDB's option of the same name does the same.
//! Durability is unchanged: nothing counts as written before that sync.

use std::io;
use std::sync::Arc;

use super::{FileSync, WritableFile};

/// `file`, starting its writeback every `every` bytes appended; `file`
/// itself for 0.
pub(super) fn every(file: Box<dyn WritableFile>, every: u64) -> Box<dyn WritableFile> {
    if every == 0 {
        return file;
    }
    Box::new(WritebackFile {
        inner: file,
        sync: None,
        every,
        pending: 0,
    })
}

/// A file that starts its writeback every `every` bytes appended.
struct WritebackFile {
    inner: Box<dyn WritableFile>,
    /// Taken at the first writeback: most files a test writes never get
    /// one, and it costs an open.
    sync: Option<Arc<dyn FileSync>>,
    every: u64,
    /// Bytes appended since the last writeback started.
    pending: u64,
}

impl WritebackFile {
    /// Hands the appended bytes to the kernel and starts their writeback.
    /// Only the first part can fail: the writeback is a hint, and the
    /// file's final sync reports any write error it met, so a handle that
    /// cannot be opened (no descriptor to spare) or a failed
    /// `sync_file_range` only ends the hints for this file.
    fn start_writeback(&mut self) -> io::Result<()> {
        self.inner.flush()?;
        self.pending = 0;
        if self.sync.is_none() {
            match self.inner.sync_handle() {
                Ok(s) => self.sync = Some(s),
                Err(_) => {
                    self.every = u64::MAX;
                    return Ok(());
                }
            }
        }
        if let Some(sync) = &self.sync {
            if sync.start_writeback().is_err() {
                self.every = u64::MAX;
            }
        }
        Ok(())
    }
}

impl WritableFile for WritebackFile {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.inner.append(data)?;
        self.pending += data.len() as u64;
        if self.pending >= self.every {
            self.start_writeback()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn sync(&mut self) -> io::Result<()> {
        self.pending = 0;
        self.inner.sync()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn sync_handle(&self) -> io::Result<Arc<dyn FileSync>> {
        self.inner.sync_handle()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::Path;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::io::{FsRef, MemFs};

    /// What a test file's sync handle does.
    #[derive(Clone)]
    enum Handle {
        /// Counts the writebacks started.
        Counting(Arc<AtomicU64>),
        /// Cannot be opened (no descriptor to spare).
        Unavailable,
        /// Opens, but every writeback fails.
        Failing,
    }

    impl FileSync for Handle {
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }

        fn start_writeback(&self) -> io::Result<()> {
            match self {
                Handle::Counting(n) => {
                    n.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
                _ => Err(io::Error::other("writeback failed")),
            }
        }
    }

    /// An in-memory file with a [`Handle`] for its sync handle.
    struct TestFile(Box<dyn WritableFile>, Handle);

    impl WritableFile for TestFile {
        fn append(&mut self, data: &[u8]) -> io::Result<()> {
            self.0.append(data)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.0.flush()
        }
        fn sync(&mut self) -> io::Result<()> {
            self.0.sync()
        }
        fn len(&self) -> u64 {
            self.0.len()
        }
        fn sync_handle(&self) -> io::Result<Arc<dyn FileSync>> {
            match &self.1 {
                Handle::Unavailable => Err(io::Error::other("too many open files")),
                h => Ok(Arc::new(h.clone())),
            }
        }
    }

    /// `/f` on a fresh in-memory file system, starting its writeback every
    /// `every` bytes through `handle`.
    fn file(every: u64, handle: Handle) -> (Box<dyn WritableFile>, FsRef) {
        let mem: FsRef = MemFs::new();
        let inner = Box::new(TestFile(mem.create(Path::new("/f")).unwrap(), handle));
        (super::every(inner, every), mem)
    }

    fn counting(every: u64) -> (Box<dyn WritableFile>, Arc<AtomicU64>, FsRef) {
        let n = Arc::new(AtomicU64::new(0));
        let (f, mem) = file(every, Handle::Counting(n.clone()));
        (f, n, mem)
    }

    #[test]
    fn writeback_starts_every_so_many_bytes_and_the_file_reads_back_whole() {
        let (mut f, writebacks, mem) = counting(1000);
        let chunk = vec![7u8; 300];
        for _ in 0..10 {
            f.append(&chunk).unwrap();
        }
        // 3000 bytes in appends of 300: at 1200, 2400 (the count restarts).
        assert_eq!(writebacks.load(Ordering::Relaxed), 2);
        f.sync().unwrap();
        f.append(&chunk).unwrap();
        assert_eq!(
            writebacks.load(Ordering::Relaxed),
            2,
            "a sync restarts the count"
        );
        f.sync().unwrap();
        assert_eq!(f.len(), 3300);
        assert_eq!(mem.read_all(Path::new("/f")).unwrap(), vec![7u8; 3300]);
    }

    #[test]
    fn one_large_append_starts_one_writeback() {
        let (mut f, writebacks, _mem) = counting(1000);
        f.append(&vec![1u8; 10_000]).unwrap();
        assert_eq!(writebacks.load(Ordering::Relaxed), 1);
    }

    /// The writeback is a hint: a handle that cannot be opened or a
    /// writeback that fails leaves the appends and the file whole.
    #[test]
    fn a_failed_writeback_fails_no_append() {
        for handle in [Handle::Unavailable, Handle::Failing] {
            let (mut f, mem) = file(100, handle);
            for _ in 0..10 {
                f.append(&[5u8; 64]).unwrap();
            }
            f.sync().unwrap();
            assert_eq!(mem.read_all(Path::new("/f")).unwrap(), vec![5u8; 640]);
        }
    }

    #[test]
    fn off_leaves_the_file_as_it_is() {
        let (mut f, writebacks, mem) = counting(0);
        f.append(&vec![1u8; 10_000]).unwrap();
        f.sync().unwrap();
        assert_eq!(writebacks.load(Ordering::Relaxed), 0);
        assert_eq!(mem.read_all(Path::new("/f")).unwrap().len(), 10_000);
    }
}
