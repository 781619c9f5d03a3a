//! Append-only logs: the write-ahead log and the manifest share one framing
//! ([`crate::format::log_record`]); this module adds the file I/O on top of
//! it, plus the names of the files in a database directory.
//!
//! The WAL module stores opaque payloads: write batches are encoded by
//! [`crate::format::write_batch`] and version edits by
//! [`crate::format::version_edit`]. Formats: `docs/format/wal.md` and
//! `docs/format/manifest.md`.

mod filename;
mod reader;
mod writer;

pub use crate::format::log_record::LogKind;
pub use filename::{
    blob_file_name, current_file_contents, lock_file_name, manifest_file_name, parse_current,
    parse_file_name, read_current, set_current, table_file_name, temp_file_name, wal_file_name,
    FileType, CURRENT_FILE_NAME, LOCK_FILE_NAME,
};
pub use reader::LogReader;
pub use writer::LogWriter;
