//! Handles on in-memory files: writers, readers and directory locks.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;

pub(super) struct MemWritable {
    pub(super) node: Node,
    pub(super) len: u64,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.node.lock().data.extend_from_slice(data);
        self.len += data.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.node.lock().sync();
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn sync_handle(&self) -> io::Result<Arc<dyn FileSync>> {
        Ok(Arc::new(MemSync(self.node.clone())))
    }
}

/// Syncs an in-memory file from another handle (nothing is buffered, so
/// every appended byte counts as flushed).
struct MemSync(Node);

impl FileSync for MemSync {
    fn sync_data(&self) -> io::Result<()> {
        self.0.lock().sync();
        Ok(())
    }

    fn start_writeback(&self) -> io::Result<()> {
        // A crash already keeps any part of the unsynced bytes.
        Ok(())
    }
}

pub(super) struct MemRandom {
    pub(super) node: Node,
    pub(super) len: u64,
    pub(super) open_readers: Arc<AtomicU64>,
}

impl Drop for MemRandom {
    fn drop(&mut self) {
        self.open_readers.fetch_sub(1, Ordering::Relaxed);
    }
}

fn eof(offset: u64, n: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("read of {n} bytes at {offset} is past the end of the file"),
    )
}

impl RandomAccessFile for MemRandom {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&end| end <= self.len)
            .ok_or_else(|| eof(offset, buf.len()))?;
        let node = self.node.lock();
        // The file may have been truncated since it was opened.
        let (start, end) = (offset as usize, end as usize);
        let src = node
            .data
            .get(start..end)
            .ok_or_else(|| eof(offset, buf.len()))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

pub(super) struct MemLock {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) path: PathBuf,
    pub(super) id: u64,
}

impl FileLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut state = self.state.lock();
        // After a crash the lock may already belong to someone else.
        if state.locks.get(&self.path) == Some(&self.id) {
            state.locks.remove(&self.path);
        }
    }
}
