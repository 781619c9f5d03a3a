//! The log's stable region on disk: segment files `hlog.NNNNNN`, each holding
//! `1 << segment_bits` bytes of the log's address space, written in address
//! order by the flusher and read at any address below what it flushed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tern::io::{FileSystem, RandomAccessFile, WritableFile};

use crate::{Error, Result};

/// The file name of segment `n`.
pub fn segment_file_name(n: u64) -> String {
    format!("hlog.{n:06}")
}

/// Parses a segment file name.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("hlog.")?;
    (digits.len() >= 6 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

struct Writer {
    segment: u64,
    /// The log address the next append lands at.
    end: u64,
    file: Box<dyn WritableFile>,
}

/// The segment files of one store.
pub struct Segments {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    segment_bits: u32,
    writer: Mutex<Option<Writer>>,
    readers: RwLock<Readers>,
}

/// Open segment files, and the first segment not deleted: a handle opened
/// while its file was being deleted is not kept.
#[derive(Default)]
struct Readers {
    open: HashMap<u64, Arc<dyn RandomAccessFile>>,
    removed_below: u64,
}

impl Segments {
    /// The segments in `dir`. Writing starts with [`Segments::start`] (a new
    /// log) or [`Segments::resume_at`] (a recovered one).
    pub fn new(fs: Arc<dyn FileSystem>, dir: &Path, segment_bits: u32) -> Segments {
        Segments {
            fs,
            dir: dir.to_path_buf(),
            segment_bits,
            writer: Mutex::new(None),
            readers: RwLock::new(Readers::default()),
        }
    }

    /// The path of segment `n`.
    pub fn path(&self, n: u64) -> PathBuf {
        self.dir.join(segment_file_name(n))
    }

    fn segment_of(&self, address: u64) -> u64 {
        address >> self.segment_bits
    }

    fn segment_start(&self, n: u64) -> u64 {
        n << self.segment_bits
    }

    fn io<'p>(&self, path: &'p Path) -> impl FnOnce(std::io::Error) -> Error + 'p {
        move |e| Error::io(path, e)
    }

    /// Starts a new log: segment 0 holding the zero bytes below the log's
    /// first address, synced.
    pub fn start(&self, first: u64) -> Result<()> {
        let path = self.path(0);
        let mut file = self.fs.create(&path).map_err(self.io(&path))?;
        file.append(&vec![0u8; first as usize])
            .map_err(self.io(&path))?;
        file.sync().map_err(self.io(&path))?;
        self.fs.sync_dir(&self.dir).map_err(self.io(&self.dir))?;
        *self.writer.lock() = Some(Writer {
            segment: 0,
            end: first,
            file,
        });
        Ok(())
    }

    /// Makes the next write continue at `end`: segment `end`'s file must hold
    /// at least `end - segment start` bytes. A longer file (writes after the
    /// last checkpoint) is cut by copying its prefix to a new file that
    /// replaces it.
    pub fn resume_at(&self, end: u64) -> Result<()> {
        let n = self.segment_of(end);
        let path = self.path(n);
        let keep = end - self.segment_start(n);
        let tmp = self.dir.join(format!("{}.tmp", segment_file_name(n)));
        let mut file = self.fs.create(&tmp).map_err(self.io(&tmp))?;
        if keep > 0 {
            let old = self.fs.open(&path).map_err(self.io(&path))?;
            if old.len() < keep {
                return Err(Error::Corruption {
                    file: path,
                    offset: old.len(),
                    reason: format!("segment ends before the checkpointed log end ({keep} bytes)"),
                });
            }
            // In pieces: a segment may be far larger than what should be in
            // memory at once.
            let mut buf = vec![0u8; keep.min(1 << 20) as usize];
            let mut at = 0u64;
            while at < keep {
                let len = (keep - at).min(buf.len() as u64) as usize;
                old.read_exact_at(at, &mut buf[..len])
                    .map_err(self.io(&path))?;
                file.append(&buf[..len]).map_err(self.io(&tmp))?;
                at += len as u64;
            }
        }
        file.sync().map_err(self.io(&tmp))?;
        self.fs.rename(&tmp, &path).map_err(self.io(&path))?;
        self.fs.sync_dir(&self.dir).map_err(self.io(&self.dir))?;
        self.readers.write().open.remove(&n);
        *self.writer.lock() = Some(Writer {
            segment: n,
            end,
            file,
        });
        Ok(())
    }

    /// Appends `bytes` at log address `address`, which must be where the
    /// last write ended; crosses into new segment files as needed.
    pub fn write(&self, mut address: u64, mut bytes: &[u8]) -> Result<()> {
        let mut guard = self.writer.lock();
        while !bytes.is_empty() {
            let n = self.segment_of(address);
            if guard.as_ref().is_none_or(|w| w.segment != n) {
                let start = self.segment_start(n);
                if address != start {
                    return Err(Error::Stopped(format!(
                        "log write at {address:#x} starts inside segment {n}, which has no file"
                    )));
                }
                if let Some(mut old) = guard.take() {
                    let path = self.path(old.segment);
                    old.file.sync().map_err(self.io(&path))?;
                }
                let path = self.path(n);
                let file = self.fs.create(&path).map_err(self.io(&path))?;
                self.fs.sync_dir(&self.dir).map_err(self.io(&self.dir))?;
                *guard = Some(Writer {
                    segment: n,
                    end: start,
                    file,
                });
            }
            let Some(w) = guard.as_mut() else {
                continue;
            };
            if w.end != address {
                return Err(Error::Stopped(format!(
                    "log write at {address:#x} while the log file ends at {:#x}",
                    w.end
                )));
            }
            let room = (self.segment_start(n + 1) - address) as usize;
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            w.file.append(now).map_err(self.io(&self.path(n)))?;
            w.end += now.len() as u64;
            address += now.len() as u64;
            bytes = rest;
        }
        if let Some(w) = guard.as_mut() {
            w.file.flush().map_err(self.io(&self.path(w.segment)))?;
        }
        Ok(())
    }

    /// Makes everything written so far durable.
    pub fn sync(&self) -> Result<()> {
        let mut guard = self.writer.lock();
        if let Some(w) = guard.as_mut() {
            w.file.sync().map_err(self.io(&self.path(w.segment)))?;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at log address `address` (within one
    /// segment, already written).
    pub fn read(&self, address: u64, buf: &mut [u8]) -> Result<()> {
        let n = self.segment_of(address);
        let offset = address - self.segment_start(n);
        let end = offset + buf.len() as u64;
        let cached = self.readers.read().open.get(&n).cloned();
        let file = match cached {
            Some(f) if f.len() >= end => f,
            _ => {
                let path = self.path(n);
                let f = self.fs.open(&path).map_err(self.io(&path))?;
                let mut readers = self.readers.write();
                if n >= readers.removed_below {
                    readers.open.insert(n, f.clone());
                }
                f
            }
        };
        file.read_exact_at(offset, buf)
            .map_err(self.io(&self.path(n)))
    }

    /// The file and offset of a log address, for error messages.
    pub fn locate(&self, address: u64) -> (PathBuf, u64) {
        let n = self.segment_of(address);
        (self.path(n), address - self.segment_start(n))
    }

    /// Deletes every segment file wholly below `address`.
    pub fn remove_below(&self, address: u64) -> Result<u64> {
        let names = self.fs.list_dir(&self.dir).map_err(self.io(&self.dir))?;
        let limit = self.segment_of(address);
        {
            let mut readers = self.readers.write();
            readers.removed_below = readers.removed_below.max(limit);
            readers.open.retain(|&n, _| n >= limit);
        }
        let mut removed = 0;
        for n in names.iter().filter_map(|s| parse_segment_file_name(s)) {
            if n < limit {
                let path = self.path(n);
                self.fs.remove_file(&path).map_err(self.io(&path))?;
                removed += 1;
            }
        }
        if removed > 0 {
            self.fs.sync_dir(&self.dir).map_err(self.io(&self.dir))?;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern::io::MemFs;

    #[test]
    fn writes_cross_segments_and_read_back() {
        let fs: Arc<dyn FileSystem> = MemFs::new();
        fs.create_dir_all(Path::new("/s")).expect("dir");
        let seg = Segments::new(fs.clone(), Path::new("/s"), 12);
        let data: Vec<u8> = (0..10_000u32)
            .map(|i| if i < 64 { 0 } else { i as u8 })
            .collect();
        seg.start(64).expect("start");
        seg.write(64, &data[64..5000]).expect("write");
        seg.write(5000, &data[5000..]).expect("write");
        let mut back = vec![0u8; 100];
        seg.read(4090, &mut back[..6]).expect("read");
        assert_eq!(&back[..6], &data[4090..4096]);
        seg.read(8192, &mut back).expect("read");
        assert_eq!(&back[..], &data[8192..8292]);
        assert!(
            seg.write(20_000, b"x").is_err(),
            "a gap in the log is refused"
        );
        assert_eq!(parse_segment_file_name(&segment_file_name(17)), Some(17));
        assert_eq!(seg.remove_below(8192).expect("removed"), 2);
    }
}
