//! Appending records to a log file.

use std::io;

use crate::format::log_record::{
    encode_file_header, encode_record, encode_typed_record, LogKind, RecordType, SyncMark,
    MAX_PAYLOAD_LEN, RECORD_HEADER_LEN, SYNC_MARK_LEN,
};
use crate::io::WritableFile;

/// Scratch buffers that grew past this are released after use, so one huge
/// record does not pin its size in memory for the life of the log.
const MAX_RETAINED_BUF: usize = 4 << 20;

/// Appends framed records to a log file (a WAL or a manifest).
///
/// Each record is written with a single `append` call on the underlying
/// file. After any error from this writer the file's tail is in an unknown
/// state: the caller must stop writing to it (the database poisons itself).
pub struct LogWriter {
    file: Box<dyn WritableFile>,
    kind: LogKind,
    buf: Vec<u8>,
}

impl LogWriter {
    /// Wraps a newly created, empty file and writes the file header.
    pub fn new(mut file: Box<dyn WritableFile>, kind: LogKind) -> io::Result<Self> {
        if !file.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a log writer must start on an empty file",
            ));
        }
        file.append(&encode_file_header(kind))?;
        Ok(LogWriter {
            file,
            kind,
            buf: Vec::new(),
        })
    }

    /// Appends one record holding `payload` (may be empty; at most
    /// `u32::MAX` bytes). Durable only after [`LogWriter::sync`].
    pub fn add_record(&mut self, payload: &[u8]) -> io::Result<()> {
        if payload.len() > MAX_PAYLOAD_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "log record of {} bytes exceeds the 4 GiB limit",
                    payload.len()
                ),
            ));
        }
        self.buf.clear();
        self.buf.reserve(RECORD_HEADER_LEN + payload.len());
        encode_record(&mut self.buf, payload);
        let res = self.file.append(&self.buf);
        if self.buf.capacity() > MAX_RETAINED_BUF {
            self.buf = Vec::new();
        }
        res
    }

    /// Appends a [`SyncMark`] record (WAL only): `mark.number` and every
    /// earlier WAL reached the disk whole.
    pub fn add_sync_mark(&mut self, mark: SyncMark) -> io::Result<()> {
        self.add_wal_record(RecordType::SyncMark, mark)
    }

    /// Appends a [`RecordType::Predecessor`] record (WAL only, first):
    /// `prev.number` was the active WAL before this one, `prev.len` long.
    pub fn add_predecessor(&mut self, prev: SyncMark) -> io::Result<()> {
        debug_assert!(self.is_empty());
        self.add_wal_record(RecordType::Predecessor, prev)
    }

    fn add_wal_record(&mut self, ty: RecordType, mark: SyncMark) -> io::Result<()> {
        debug_assert_eq!(self.kind, LogKind::Wal);
        self.buf.clear();
        encode_typed_record(&mut self.buf, ty, &mark.encode());
        debug_assert_eq!(self.buf.len(), RECORD_HEADER_LEN + SYNC_MARK_LEN);
        self.file.append(&self.buf)
    }

    /// Pushes buffered records to the operating system (survives a process
    /// crash, not a power loss).
    pub fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }

    /// Flushes and makes every record appended so far durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync()
    }

    /// A handle that syncs this log's file from another thread (see
    /// [`WritableFile::sync_handle`]).
    pub fn sync_handle(&self) -> io::Result<std::sync::Arc<dyn crate::io::FileSync>> {
        self.file.sync_handle()
    }

    /// Bytes written to the file so far, header included.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// True when no record was added yet (the file holds only its header).
    pub fn is_empty(&self) -> bool {
        self.file.len() <= crate::format::log_record::FILE_HEADER_LEN as u64
    }

    /// Which kind of log this is.
    pub fn kind(&self) -> LogKind {
        self.kind
    }
}

impl std::fmt::Debug for LogWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWriter")
            .field("kind", &self.kind)
            .field("len", &self.file.len())
            .finish()
    }
}
