//! Checks of write-ahead logs.

use std::path::Path;

use super::CheckReport;
use crate::error::Error;
use crate::format::log_record::RECORD_HEADER_LEN;
use crate::format::write_batch::WriteBatch;
use crate::io::FsRef;
use crate::wal::{LogKind, LogReader};

/// Checks every record of the WAL at `path`. An incomplete or damaged
/// record is a warning when `may_be_torn()` says recovery treats it as the
/// end of the log, and a problem otherwise.
pub(super) fn check_wal(
    fs: &FsRef,
    path: &Path,
    may_be_torn: impl FnOnce() -> bool,
    report: &mut CheckReport,
) {
    let data = match fs.read_all(path) {
        Ok(d) => d,
        Err(e) => {
            report.error(path, Error::io(path, e));
            return;
        }
    };
    report.bytes_checked += data.len() as u64;
    report.wals_checked += 1;
    let mut reader = match LogReader::new(data, path.to_path_buf(), LogKind::Wal) {
        Ok(r) => r,
        Err(e) => {
            report.error(path, e);
            return;
        }
    };
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
    let Some(at) = reader.stopped_at() else {
        return;
    };
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
            "incomplete record in a write-ahead log that a later log with records follows",
        ),
    }
}
