//! Reading the records of a log file during recovery.

use std::path::{Path, PathBuf};

use super::wal_file_name;
use crate::error::{DecodeError, IoContext, Result};
use crate::format::log_record::{
    decode_file_header, decode_record, FileHeader, LogKind, RecordOutcome, RecordType, SyncMark,
    FILE_HEADER_LEN,
};
use crate::io::FileSystem;

/// Iterates over the records of a whole log file held in memory, applying
/// the recovery policy of `docs/format/wal.md`: an incomplete tail (a torn
/// final write, unwritten zero space) ends the log without an error and is
/// reported by [`LogReader::torn_tail`]; damage followed by more data is an
/// [`crate::Error::Corruption`] naming the file and the record's offset.
#[derive(Debug)]
pub struct LogReader {
    data: Vec<u8>,
    path: PathBuf,
    kind: LogKind,
    /// Offset of the next record to decode.
    pos: usize,
    last_record_offset: u64,
    torn_tail: Option<u64>,
    /// Set once the end, a torn tail or corruption was reached.
    done: bool,
    /// The corruption found, returned again by later calls.
    error: Option<DecodeError>,
    /// The newest earlier WAL a sync mark read so far vouches for.
    synced_through: Option<SyncMark>,
}

impl LogReader {
    /// Validates the file header of `data` (the whole file read from `path`).
    ///
    /// An empty file has no records. A file shorter than its header (or with
    /// an all-zero header) has no records and a torn tail at offset 0. A
    /// wrong magic (for example a manifest opened as a WAL), an unsupported
    /// version or a header checksum mismatch is a corruption at offset 0.
    pub fn new(data: Vec<u8>, path: PathBuf, kind: LogKind) -> Result<Self> {
        let header = decode_file_header(&data, kind).map_err(|e| e.in_file(&path, 0))?;
        let (pos, done, torn_tail) = match header {
            FileHeader::Empty => (0, true, None),
            FileHeader::Torn => (0, true, Some(0)),
            FileHeader::Valid => (FILE_HEADER_LEN, false, None),
        };
        Ok(LogReader {
            data,
            path,
            kind,
            pos,
            last_record_offset: 0,
            torn_tail,
            done,
            error: None,
            synced_through: None,
        })
    }

    /// The next record's payload, `Ok(None)` at the end of the log (including
    /// a dropped torn tail), or a corruption error. After an error every
    /// later call returns the same error. Sync marks are not returned
    /// ([`LogReader::synced_through`] collects them), nor predecessor
    /// records ([`LogReader::predecessor`]).
    pub fn next_record(&mut self) -> Result<Option<&[u8]>> {
        if let Some(e) = self.damage() {
            return Err(e);
        }
        loop {
            if self.done {
                return Ok(None);
            }
            let start = self.pos;
            match decode_record(&self.data, start, self.kind) {
                RecordOutcome::Record {
                    ty: RecordType::SyncMark,
                    payload,
                    next,
                } => {
                    if let Some(mark) = SyncMark::decode(payload) {
                        if self.synced_through.is_none_or(|m| m.number < mark.number) {
                            self.synced_through = Some(mark);
                        }
                    }
                    self.pos = next;
                }
                RecordOutcome::Record {
                    ty: RecordType::Predecessor,
                    next,
                    ..
                } => self.pos = next,
                RecordOutcome::Record { payload, next, .. } => {
                    self.last_record_offset = start as u64;
                    self.pos = next;
                    return Ok(Some(payload));
                }
                RecordOutcome::End => {
                    self.done = true;
                    return Ok(None);
                }
                RecordOutcome::TornTail => {
                    self.done = true;
                    self.torn_tail = Some(start as u64);
                    return Ok(None);
                }
                RecordOutcome::Corrupt(e) => {
                    self.done = true;
                    self.error = Some(e.clone());
                    return Err(e.in_file(&self.path, 0));
                }
            }
        }
    }

    /// The corruption that ended reading, if any (what `next_record`
    /// returned). Only final once `next_record` has returned `Ok(None)` or
    /// an error.
    pub fn damage(&self) -> Option<crate::Error> {
        self.error.clone().map(|e| e.in_file(&self.path, 0))
    }

    /// Whether the file holds no more than a header that tore: a WAL
    /// created just before a crash that received nothing.
    pub fn only_a_torn_header(&self) -> bool {
        self.torn_tail == Some(0) && self.data.len() <= FILE_HEADER_LEN
    }

    /// Offset where reading stopped at a torn tail or damage, if it did.
    /// Only final once `next_record` has returned `Ok(None)` or an error.
    pub fn stopped_at(&self) -> Option<u64> {
        if self.error.is_some() {
            Some(self.pos as u64)
        } else {
            self.torn_tail
        }
    }

    /// The log's first record if it is a [`RecordType::Predecessor`] one
    /// (read past it), before any other record is read; `None` otherwise.
    pub fn predecessor(&mut self) -> Option<SyncMark> {
        if self.done || self.pos != FILE_HEADER_LEN {
            return None;
        }
        match decode_record(&self.data, self.pos, self.kind) {
            RecordOutcome::Record {
                ty: RecordType::Predecessor,
                payload,
                next,
            } => {
                let prev = SyncMark::decode(payload);
                self.pos = next;
                prev
            }
            _ => None,
        }
    }

    /// The newest earlier WAL that the sync marks read so far name as
    /// durable (see `docs/format/wal.md`).
    pub fn synced_through(&self) -> Option<SyncMark> {
        self.synced_through
    }

    /// Offset in the file of the record last returned by
    /// [`LogReader::next_record`] (0 before the first record).
    pub fn last_record_offset(&self) -> u64 {
        self.last_record_offset
    }

    /// Offset just past the last valid record read so far (the header's end
    /// for a log without records, 0 for an empty or torn-header file). Once
    /// the log is exhausted, this is the length of its valid prefix.
    pub fn valid_len(&self) -> u64 {
        self.pos as u64
    }

    /// Where an incomplete tail was dropped, if one was found so far. Only
    /// final once `next_record` has returned `Ok(None)`.
    pub fn torn_tail(&self) -> Option<u64> {
        self.torn_tail
    }

    /// The file this log was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which kind of log this is.
    pub fn kind(&self) -> LogKind {
        self.kind
    }
}

/// Point-in-time recovery's test for damage found in WAL `damaged`: it is
/// corruption only when one of the `later` WALs in `dir` holds a sync mark
/// (before any damage of its own) naming `damaged` or a newer WAL, proof
/// that `damaged` once reached the disk whole. Otherwise it may be the
/// unsynced tail a crash left: a memtable switch does not wait for the old
/// WAL's fsync, so the page cache may have written a later WAL's records
/// while the earlier one's were lost. A later WAL whose header is damaged
/// counts as vouching: its marks cannot be read, and a header never tears
/// into non-zero garbage. Reads the later WALs only when called, that is,
/// on damage.
pub fn later_wal_vouches_for(
    fs: &dyn FileSystem,
    dir: &Path,
    damaged: u64,
    later: &[u64],
) -> Result<bool> {
    for &number in later {
        let path = dir.join(wal_file_name(number));
        let data = fs.read_all(&path).ctx(&path)?;
        let Ok(mut reader) = LogReader::new(data, path, LogKind::Wal) else {
            return Ok(true);
        };
        while let Ok(Some(_)) = reader.next_record() {}
        if reader.synced_through().is_some_and(|m| m.number >= damaged) {
            return Ok(true);
        }
    }
    Ok(false)
}
