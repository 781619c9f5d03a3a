//! Readahead for files read front to back with direct I/O: compaction and
//! GC inputs.
//!
//! Direct reads get no readahead from the kernel, so a compaction reading
//! its input tables block by block would make one small device read per
//! block. A [`Readahead`] serves a read that continues the previous one
//! from a window read ahead of it; the window doubles, from
//! [`WINDOW_MIN`] to [`WINDOW_MAX`], while reads keep continuing, and a
//! jump (a table's footer, index or filter, a seek) is read as asked and
//! starts the window over (RocksDB's `compaction_readahead_size` does the
//! same for its compactions).

use std::io;
use std::sync::Arc;

use parking_lot::Mutex;

use super::RandomAccessFile;

/// First window after a jump.
const WINDOW_MIN: usize = 64 << 10;
/// Largest window.
const WINDOW_MAX: usize = 1 << 20;

/// A file read mostly front to back by one reader at a time.
pub(crate) struct Readahead {
    file: Arc<dyn RandomAccessFile>,
    window: Mutex<Window>,
}

#[derive(Default)]
struct Window {
    /// File offset of `bytes[0]`.
    start: u64,
    bytes: Vec<u8>,
    /// Where the last read ended: a read from here continues it.
    next: u64,
    /// Size of the next window to read; 0 before the first continuation.
    size: usize,
}

impl Readahead {
    /// `file`, read through a readahead window.
    pub(crate) fn new(file: Arc<dyn RandomAccessFile>) -> Readahead {
        Readahead {
            file,
            window: Mutex::new(Window::default()),
        }
    }
}

impl RandomAccessFile for Readahead {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let Some(end) = offset.checked_add(buf.len() as u64) else {
            return Err(io::ErrorKind::UnexpectedEof.into());
        };
        // The lock is held across the device read: one reader reads such a
        // file at a time, and a second would want the same window.
        let mut w = self.window.lock();
        let held = w.start + w.bytes.len() as u64;
        if offset >= w.start && end <= held {
            // Fits: inside `bytes`, whose length is a usize.
            let at = (offset - w.start) as usize;
            buf.copy_from_slice(&w.bytes[at..at + buf.len()]);
            w.next = end;
            return Ok(());
        }
        let continues = offset == w.next && w.next != 0;
        w.size = if continues {
            (w.size * 2).clamp(WINDOW_MIN, WINDOW_MAX)
        } else {
            0
        };
        let ahead = (w.size as u64).min(self.file.len().saturating_sub(offset));
        if ahead <= buf.len() as u64 {
            // A jump, or a read as large as the window: read it as asked.
            self.file.read_exact_at(offset, buf)?;
            w.next = end;
            return Ok(());
        }
        // Fits: at most WINDOW_MAX.
        w.bytes.resize(ahead as usize, 0);
        if let Err(e) = self.file.read_exact_at(offset, &mut w.bytes) {
            w.bytes.clear();
            return Err(e);
        }
        buf.copy_from_slice(&w.bytes[..buf.len()]);
        w.start = offset;
        w.next = end;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.file.len()
    }

    fn read_cached_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        self.file.read_cached_at(offset, buf)
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.file.prefetch(offset, len);
    }

    fn uncached(&self) -> bool {
        self.file.uncached()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A file in memory that counts its reads.
    struct Counting {
        data: Vec<u8>,
        reads: AtomicUsize,
        fail_at: Option<u64>,
    }

    impl RandomAccessFile for Counting {
        fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            let end = offset as usize + buf.len();
            if self
                .fail_at
                .is_some_and(|f| (offset..end as u64).contains(&f))
            {
                return Err(io::Error::other("injected"));
            }
            let src = self
                .data
                .get(offset as usize..end)
                .ok_or(io::ErrorKind::UnexpectedEof)?;
            buf.copy_from_slice(src);
            Ok(())
        }
        fn len(&self) -> u64 {
            self.data.len() as u64
        }
    }

    fn file(n: usize, fail_at: Option<u64>) -> Arc<Counting> {
        Arc::new(Counting {
            data: (0..n).map(|i| (i * 7 % 253) as u8).collect(),
            reads: AtomicUsize::new(0),
            fail_at,
        })
    }

    #[test]
    fn a_front_to_back_read_takes_few_device_reads_and_reads_back_exactly() {
        let f = file(10 << 20, None);
        let r = Readahead::new(f.clone());
        // A footer first, then 4 KiB blocks of odd sizes from the start.
        let mut tail = vec![0u8; 48];
        r.read_exact_at((10 << 20) - 48, &mut tail).unwrap();
        assert_eq!(tail, f.data[(10 << 20) - 48..]);
        let mut at = 0usize;
        let mut i = 0;
        while at < 10 << 20 {
            let len = (4096 + i * 37 % 300).min((10 << 20) - at);
            let mut b = vec![0u8; len];
            r.read_exact_at(at as u64, &mut b).unwrap();
            assert!(b == f.data[at..at + len], "at {at}");
            at += len;
            i += 1;
        }
        let reads = f.reads.load(Ordering::Relaxed);
        assert!(
            i > 2000 && reads < 30,
            "{reads} device reads for {i} blocks"
        );
    }

    #[test]
    fn jumps_are_read_as_asked_and_errors_leave_nothing_behind() {
        let f = file(4 << 20, Some(3 << 20));
        let r = Readahead::new(f.clone());
        // Random reads: one device read each, no window.
        for &at in &[5000u64, 900_000, 12, 2_000_000] {
            let mut b = vec![0u8; 100];
            r.read_exact_at(at, &mut b).unwrap();
            assert!(b == f.data[at as usize..at as usize + 100]);
        }
        assert_eq!(f.reads.load(Ordering::Relaxed), 4);
        // Reading on from 2,000,100 grows a window that reaches the bad
        // byte: the error is reported, and nothing stale is served after.
        let mut at = 2_000_100u64;
        let err = loop {
            let mut b = vec![0u8; 4096];
            match r.read_exact_at(at, &mut b) {
                Ok(()) => {
                    assert!(b == f.data[at as usize..at as usize + 4096]);
                    at += 4096;
                }
                Err(e) => break e,
            }
            assert!(at < 4 << 20, "never reached the bad byte");
        };
        assert_eq!(err.to_string(), "injected");
        let mut b = vec![0u8; 10];
        r.read_exact_at(100, &mut b).unwrap();
        assert!(b == f.data[100..110]);
        // Past the end is an error, as for the file itself.
        assert!(r.read_exact_at((4 << 20) - 5, &mut b).is_err());
        assert!(r.read_exact_at(u64::MAX - 3, &mut b).is_err());
    }
}
