//! Reading the records of a log file during recovery.

use std::path::{Path, PathBuf};

use super::wal_file_name;
use crate::error::{DecodeError, IoContext, Result};
use crate::format::log_record::{
    decode_file_header, decode_record, FileHeader, LogKind, RecordOutcome, FILE_HEADER_LEN,
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
        })
    }

    /// The next record's payload, `Ok(None)` at the end of the log (including
    /// a dropped torn tail), or a corruption error. After an error every
    /// later call returns the same error.
    pub fn next_record(&mut self) -> Result<Option<&[u8]>> {
        if let Some(e) = self.damage() {
            return Err(e);
        }
        if self.done {
            return Ok(None);
        }
        let start = self.pos;
        match decode_record(&self.data, start, self.kind) {
            RecordOutcome::Record { payload, next } => {
                self.last_record_offset = start as u64;
                self.pos = next;
                Ok(Some(payload))
            }
            RecordOutcome::End => {
                self.done = true;
                Ok(None)
            }
            RecordOutcome::TornTail => {
                self.done = true;
                self.torn_tail = Some(start as u64);
                Ok(None)
            }
            RecordOutcome::Corrupt(e) => {
                self.done = true;
                self.error = Some(e.clone());
                Err(e.in_file(&self.path, 0))
            }
        }
    }

    /// The corruption that ended reading, if any (what `next_record`
    /// returned). Only final once `next_record` has returned `Ok(None)` or
    /// an error.
    pub fn damage(&self) -> Option<crate::Error> {
        self.error.clone().map(|e| e.in_file(&self.path, 0))
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

/// Point-in-time recovery's test for damage found in a WAL: it may end the
/// log (a crash's unsynced tail) only when none of the `later` WALs in `dir`
/// shows a write. A WAL is synced whole before any write lands in the next
/// one, so a later WAL with any non-zero byte past its header (a record,
/// even a damaged or incomplete one) or with a damaged header proves the
/// earlier WAL once reached the disk complete. A later WAL that is empty,
/// header-only or zero-filled is one created just before a crash. Reads the
/// later WALs only when called, that is, on damage.
pub fn later_wal_shows_writes(fs: &dyn FileSystem, dir: &Path, later: &[u64]) -> Result<bool> {
    for &number in later {
        let path = dir.join(wal_file_name(number));
        let data = fs.read_all(&path).ctx(&path)?;
        let written = match decode_file_header(&data, LogKind::Wal) {
            Err(_) => true,
            Ok(_) => data
                .get(FILE_HEADER_LEN..)
                .is_some_and(|rest| rest.iter().any(|&b| b != 0)),
        };
        if written {
            return Ok(true);
        }
    }
    Ok(false)
}
