//! Checks of tables: every block, key order, properties against the
//! manifest, and each blob reference through the blob files.

use std::cmp::Ordering;
use std::path::Path;

use super::blobs::BlobContext;
use super::CheckReport;
use crate::error::Error;
use crate::format::internal_key::{self, ValueKind};
use crate::format::version_edit::FileMeta;
use crate::io::FsRef;
use crate::sst::Table;
use crate::tools::describe_key;
use crate::wal::table_file_name;

/// What scanning a table's blocks observed.
#[derive(Default)]
struct Scan {
    entries: u64,
    deletions: u64,
    first: Option<Vec<u8>>,
    last: Vec<u8>,
    min_seq: u64,
    max_seq: u64,
    /// Some block could not be read: counts and ranges are incomplete.
    damaged: bool,
}

/// Checks one table against its manifest record.
pub(super) fn check_table(
    dir: &Path,
    fs: &FsRef,
    level: usize,
    meta: &FileMeta,
    blobs: &BlobContext<'_>,
    report: &mut CheckReport,
) {
    let path = dir.join(table_file_name(meta.number));
    blobs.check_list(&path, meta, report);
    let size = match fs.file_size(&path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            report.problem(
                &path,
                0,
                format!("table in level {level} is missing (referenced by the manifest)"),
            );
            return;
        }
        Err(e) => {
            report.error(&path, Error::io(&path, e));
            return;
        }
    };
    if size != meta.file_size {
        report.problem(
            &path,
            0,
            format!(
                "file is {size} bytes, the manifest records {}",
                meta.file_size
            ),
        );
    }
    let table = match Table::open(fs, &path, meta.number, None) {
        Ok(t) => t,
        Err(e) => {
            report.error(&path, e);
            return;
        }
    };
    report.tables_checked += 1;
    report.bytes_checked += size;
    let scan = scan_table(&table, meta, blobs, report);
    report.entries_checked += scan.entries;
    if scan.damaged {
        return;
    }
    let props = table.properties();
    let mut mismatch = |what: &str, seen: String, props_v: String, meta_v: String| {
        if seen != props_v || seen != meta_v {
            report.problem(
                &path,
                0,
                format!(
                    "{what}: table holds {seen}, properties say {props_v}, manifest says {meta_v}"
                ),
            );
        }
    };
    mismatch(
        "entry count",
        scan.entries.to_string(),
        props.num_entries.to_string(),
        meta.num_entries.to_string(),
    );
    mismatch(
        "deletion count",
        scan.deletions.to_string(),
        props.num_deletions.to_string(),
        meta.num_deletions.to_string(),
    );
    let first = scan.first.unwrap_or_default();
    mismatch(
        "smallest key",
        describe_key(&first),
        describe_key(&props.smallest_key),
        describe_key(&meta.smallest),
    );
    mismatch(
        "largest key",
        describe_key(&scan.last),
        describe_key(&props.largest_key),
        describe_key(&meta.largest),
    );
    if scan.entries > 0 {
        mismatch(
            "sequence range",
            format!("{}..={}", scan.min_seq, scan.max_seq),
            format!("{}..={}", props.smallest_seq, props.largest_seq),
            format!("{}..={}", meta.smallest_seq, meta.largest_seq),
        );
    }
}

/// Reads every data block of `table`, reporting each damaged block, each
/// key out of order and each bad blob reference, and carrying on with the
/// next block.
fn scan_table(
    table: &Table,
    meta: &FileMeta,
    blobs: &BlobContext<'_>,
    report: &mut CheckReport,
) -> Scan {
    let path = table.path().to_path_buf();
    let mut scan = Scan {
        min_seq: u64::MAX,
        ..Scan::default()
    };
    let mut index = table.index_iter();
    index.seek_to_first();
    let mut prev_index_key: Vec<u8> = Vec::new();
    while index.valid() {
        if !prev_index_key.is_empty()
            && internal_key::compare(&prev_index_key, index.key()) != Ordering::Less
        {
            report.error(
                &path,
                table.index_err(crate::error::DecodeError::new(0, "index keys out of order")),
            );
            scan.damaged = true;
        }
        prev_index_key.clear();
        prev_index_key.extend_from_slice(index.key());
        let handle = match table.decode_handle(index.value()) {
            Ok(h) => h,
            Err(e) => {
                report.error(&path, e);
                scan.damaged = true;
                index.next();
                continue;
            }
        };
        let block = match table.read_block(handle, false) {
            Ok(b) => b,
            Err(e) => {
                report.error(&path, e);
                scan.damaged = true;
                index.next();
                continue;
            }
        };
        report.blocks_checked += 1;
        let mut it = crate::format::block::BlockIter::new(block, internal_key::compare);
        it.seek_to_first();
        let mut block_ok = true;
        while it.valid() {
            let key = it.key();
            match internal_key::parse(key) {
                Ok(p) => {
                    if p.kind == ValueKind::Delete {
                        scan.deletions += 1;
                    }
                    if p.kind == ValueKind::BlobRef {
                        blobs.check_ref(&path, handle.offset, meta, p, it.value(), report);
                    }
                    scan.min_seq = scan.min_seq.min(p.seq);
                    scan.max_seq = scan.max_seq.max(p.seq);
                }
                Err(e) => {
                    report.problem(
                        &path,
                        handle.offset,
                        format!("data block: bad internal key: {}", e.reason),
                    );
                    block_ok = false;
                    break;
                }
            }
            if scan.first.is_some() && internal_key::compare(&scan.last, key) != Ordering::Less {
                report.problem(
                    &path,
                    handle.offset,
                    format!(
                        "data block: key {} does not sort after the previous key {}",
                        describe_key(key),
                        describe_key(&scan.last)
                    ),
                );
                block_ok = false;
                break;
            }
            if internal_key::compare(key, index.key()) == Ordering::Greater {
                report.problem(
                    &path,
                    handle.offset,
                    format!(
                        "data block: key {} is above its index entry",
                        describe_key(key)
                    ),
                );
                block_ok = false;
                break;
            }
            if scan.first.is_none() {
                scan.first = Some(key.to_vec());
            }
            scan.last.clear();
            scan.last.extend_from_slice(key);
            scan.entries += 1;
            it.next();
        }
        if block_ok {
            if let Err(e) = it.status() {
                report.problem(
                    &path,
                    handle.offset,
                    format!("data block: {} (at byte {} of it)", e.reason, e.offset),
                );
                block_ok = false;
            }
        }
        scan.damaged |= !block_ok;
        index.next();
    }
    if let Err(e) = index.status() {
        report.error(&path, table.index_err(e));
        scan.damaged = true;
    }
    scan
}
