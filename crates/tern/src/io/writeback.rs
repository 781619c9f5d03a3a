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

    /// Counts the writebacks started and the bytes flushed before each.
    struct Counting {
        inner: FsRef,
        writebacks: Arc<AtomicU64>,
    }

    struct CountingSync(Arc<AtomicU64>);

    impl FileSync for CountingSync {
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }

        fn start_writeback(&self) -> io::Result<()> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    struct CountingFile(Box<dyn WritableFile>, Arc<AtomicU64>);

    impl WritableFile for CountingFile {
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
            Ok(Arc::new(CountingSync(self.1.clone())))
        }
    }

    impl Counting {
        fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
            Ok(Box::new(CountingFile(
                self.inner.create(path)?,
                self.writebacks.clone(),
            )))
        }
    }

    fn file(every: u64) -> (Box<dyn WritableFile>, Arc<AtomicU64>, FsRef) {
        let mem: FsRef = MemFs::new();
        let counting = Counting {
            inner: mem.clone(),
            writebacks: Arc::new(AtomicU64::new(0)),
        };
        let inner = counting.create(Path::new("/f")).unwrap();
        (super::every(inner, every), counting.writebacks, mem)
    }

    #[test]
    fn writeback_starts_every_so_many_bytes_and_the_file_reads_back_whole() {
        let (mut f, writebacks, mem) = file(1000);
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
        let (mut f, writebacks, _mem) = file(1000);
        f.append(&vec![1u8; 10_000]).unwrap();
        assert_eq!(writebacks.load(Ordering::Relaxed), 1);
    }

    /// A file whose sync handle, or whose writeback, fails.
    struct Failing(Box<dyn WritableFile>, bool);

    struct FailingSync;

    impl FileSync for FailingSync {
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }

        fn start_writeback(&self) -> io::Result<()> {
            Err(io::Error::other("writeback failed"))
        }
    }

    impl WritableFile for Failing {
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
            if self.1 {
                Err(io::Error::other("too many open files"))
            } else {
                Ok(Arc::new(FailingSync))
            }
        }
    }

    /// The writeback is a hint: a handle that cannot be opened or a
    /// writeback that fails leaves the appends and the file whole.
    #[test]
    fn a_failed_writeback_fails_no_append() {
        for no_handle in [true, false] {
            let mem: FsRef = MemFs::new();
            let inner = Box::new(Failing(mem.create(Path::new("/f")).unwrap(), no_handle));
            let mut f = super::every(inner, 100);
            for _ in 0..10 {
                f.append(&[5u8; 64]).unwrap();
            }
            f.sync().unwrap();
            assert_eq!(mem.read_all(Path::new("/f")).unwrap(), vec![5u8; 640]);
        }
    }

    #[test]
    fn off_leaves_the_file_as_it_is() {
        let (mut f, writebacks, mem) = file(0);
        f.append(&vec![1u8; 10_000]).unwrap();
        f.sync().unwrap();
        assert_eq!(writebacks.load(Ordering::Relaxed), 0);
        assert_eq!(mem.read_all(Path::new("/f")).unwrap().len(), 10_000);
    }
}
