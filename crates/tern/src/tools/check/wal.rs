//! Checks of write-ahead logs.

use std::path::Path;

use super::CheckReport;
use crate::error::Error;
use crate::format::log_record::{SyncMark, RECORD_HEADER_LEN};
use crate::format::write_batch::WriteBatch;
use crate::io::FsRef;
use crate::wal::{LogKind, LogReader};

/// What recovery needs to know of a WAL that [`check_wal`] read: the
/// predecessor its first record names and the length of its valid records.
pub(super) struct WalEnd {
    /// The WAL active before this one and its length at the switch.
    pub predecessor: Option<SyncMark>,
    /// Bytes up to the end of the last valid record.
    pub valid_len: u64,
}

/// Checks every record of the WAL at `path`. An incomplete or damaged
/// record is a warning when `may_be_torn()` says recovery treats it as the
/// end of the log, and a problem otherwise. A torn header with nothing
/// after it is a WAL created just before a crash, as recovery takes it.
pub(super) fn check_wal(
    fs: &FsRef,
    path: &Path,
    may_be_torn: impl FnOnce() -> bool,
    report: &mut CheckReport,
) -> Option<WalEnd> {
    let data = match fs.read_all(path) {
        Ok(d) => d,
        Err(e) => {
            report.error(path, Error::io(path, e));
            return None;
        }
    };
    report.bytes_checked += data.len() as u64;
    report.wals_checked += 1;
    let mut reader = match LogReader::new(data, path.to_path_buf(), LogKind::Wal) {
        Ok(r) => r,
        Err(e) => {
            report.error(path, e);
            return None;
        }
    };
    let predecessor = reader.predecessor();
    let mut prev_end: Option<u64> = None;
    // Damage ends the loop like the end of the log; `stopped_at` and
    // `damage` below tell the two apart.
    while let Ok(Some(rec)) = reader.next_record() {
        report.wal_records_checked += 1;
        let batch = WriteBatch::from_wal_bytes(rec);
        let offset = reader.last_record_offset();
        match batch {
            Ok(batch) => {
                let seq = batch.seq();
                if let Some(end) = prev_end {
                    if seq < end {
                        report.problem(
                            path,
                            offset,
                            format!(
                                "record starts at sequence {seq}, below the previous record's end {end}"
                            ),
                        );
                    }
                }
                prev_end = Some(seq.saturating_add(batch.len() as u64));
            }
            Err(e) => report.error(path, e.in_file(path, offset + RECORD_HEADER_LEN as u64)),
        }
    }
    let end = WalEnd {
        predecessor,
        valid_len: reader.valid_len(),
    };
    let Some(at) = reader.stopped_at() else {
        return Some(end);
    };
    if reader.only_a_torn_header() {
        report.warnings.push(format!(
            "{}: empty WAL with a torn header (created just before a crash; removed at next open)",
            path.display()
        ));
        return Some(end);
    }
    match (reader.damage(), may_be_torn()) {
        (Some(e), true) => report.warnings.push(format!(
            "{}: damaged record ({e}); recovery keeps the records before it and drops the rest (unsynced writes)",
            path.display()
        )),
        (None, true) => report.warnings.push(format!(
            "{}: torn tail at offset {at} (an interrupted write; recovery drops it)",
            path.display()
        )),
        (Some(e), false) => report.error(path, e),
        (None, false) => report.problem(
            path,
            at,
            "incomplete record in a write-ahead log that a later log's sync mark says was synced whole",
        ),
    }
    Some(end)
}
