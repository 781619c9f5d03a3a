//! Checks the durable memory tier's tables against the manifest.

use std::path::Path;

use super::CheckReport;
use crate::io::FsRef;
use crate::memtier::memory::check_header;
use crate::memtier::scan::verify;
use crate::version::TierTables;

/// Verifies every table the manifest names in the tier file at `path`:
/// the file's header, then each table's extent (inside the file, its nodes
/// parse, and their checksum, count and sequence range match the
/// manifest).
pub(super) fn check_tier(fs: &FsRef, path: &Path, tables: &TierTables, report: &mut CheckReport) {
    if tables.is_empty() {
        return;
    }
    let file = match fs.open(path) {
        Ok(f) => f,
        Err(e) => {
            report.problem(
                path,
                0,
                format!(
                    "cannot open the memory tier file ({e}); the manifest names {} tables in it (pass the store's memtier_path if it lives elsewhere)",
                    tables.len()
                ),
            );
            return;
        }
    };
    let mut head = vec![0u8; 64.min(file.len()) as usize];
    let header = file
        .read_exact_at(0, &mut head)
        .map_err(|e| e.to_string())
        .and_then(|()| check_header(&head));
    match header {
        Ok(len) if len == file.len() => {}
        Ok(len) => report.problem(
            path,
            0,
            format!("the header says {len} bytes, the file has {}", file.len()),
        ),
        Err(why) => report.problem(path, 0, format!("memory tier file header: {why}")),
    }
    for t in tables.values() {
        let inside = t.offset.checked_add(t.len).is_some_and(|e| e <= file.len());
        if !inside || t.len > usize::MAX as u64 {
            report.problem(
                path,
                t.offset,
                format!(
                    "memory tier table {}: {} bytes at {} run past the file's {} bytes",
                    t.id,
                    t.len,
                    t.offset,
                    file.len()
                ),
            );
            continue;
        }
        let mut bytes = vec![0u8; t.len as usize];
        if let Err(e) = file.read_exact_at(t.offset, &mut bytes) {
            report.problem(path, t.offset, format!("memory tier table {}: {e}", t.id));
            continue;
        }
        report.tier_tables_checked += 1;
        report.bytes_checked += t.len;
        match verify(
            &bytes,
            t.checksum,
            t.entries,
            (t.smallest_seq, t.largest_seq),
        ) {
            Ok(s) => report.tier_entries_checked += s.entries,
            Err(e) => report.problem(
                path,
                t.offset + e.offset as u64,
                format!("memory tier table {}: {}", t.id, e.why),
            ),
        }
    }
}
