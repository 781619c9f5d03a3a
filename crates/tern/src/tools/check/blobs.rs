//! Checks of blob files and of the blob references tables hold.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::Path;

use super::CheckReport;
use crate::blob::BlobReader;
use crate::error::Error;
use crate::format::blob::{BlobRef, LineageEntry};
use crate::format::internal_key::{self};
use crate::format::version_edit::FileMeta;
use crate::io::FsRef;
use crate::tools::escape_bytes;
use crate::version::{resolve, BlobFileState, BlobFiles, Relocation, Relocations, Version};
use crate::wal::blob_file_name;

/// What a blob reference is checked against: one record of a blob file.
#[derive(Clone, Copy)]
struct RecordInfo {
    /// Hash of the record's key (keys are not kept, to bound memory).
    key_hash: u64,
    /// Length of the record's value.
    value_len: u32,
    /// Sequence number of the version the record holds.
    seq: u64,
}

/// A live blob file that opened.
struct OpenBlob {
    reader: BlobReader,
    /// Per ordinal; `None` for a record that failed its check.
    records: Vec<Option<RecordInfo>>,
}

/// The blob files of the version, as found on disk.
pub(super) struct BlobContext<'a> {
    dir: &'a Path,
    live: &'a BlobFiles,
    relocations: &'a Relocations,
    /// Per live file; `None` when it is missing or did not open.
    files: BTreeMap<u64, Option<OpenBlob>>,
}

fn key_hash(key: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// The reason of an engine error, without the file and offset a
/// corruption carries (the caller names those).
fn reason_of(e: Error) -> String {
    match e {
        Error::Corruption { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// Checks every live blob file of the version.
pub(super) fn check_blob_files<'a>(
    dir: &'a Path,
    fs: &FsRef,
    version: &'a Version,
    report: &mut CheckReport,
) -> BlobContext<'a> {
    let mut files = BTreeMap::new();
    for (&number, state) in &version.blob_files {
        let path = dir.join(blob_file_name(number));
        let lineage: Vec<&Relocation> = version
            .relocations
            .values()
            .filter(|r| r.new_file == number)
            .map(|r| &**r)
            .collect();
        let open = check_blob_file(fs, &path, state, &lineage, report);
        files.insert(number, open);
    }
    BlobContext {
        dir,
        live: &version.blob_files,
        relocations: &version.relocations,
        files,
    }
}

/// Checks one live blob file against its manifest record; returns it open
/// when it could be read.
fn check_blob_file(
    fs: &FsRef,
    path: &Path,
    state: &BlobFileState,
    lineage: &[&Relocation],
    report: &mut CheckReport,
) -> Option<OpenBlob> {
    let meta = &state.meta;
    let size = match fs.file_size(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            report.problem(path, 0, "blob file is missing (referenced by the manifest)");
            return None;
        }
        Err(e) => {
            report.error(path, Error::io(path, e));
            return None;
        }
    };
    if size != meta.file_size {
        report.problem(
            path,
            0,
            format!(
                "file is {size} bytes, the manifest records {}",
                meta.file_size
            ),
        );
    }
    let reader = match BlobReader::open(fs, path, meta.number) {
        Ok(r) => r,
        Err(e) => {
            report.error(path, e);
            return None;
        }
    };
    report.blob_files_checked += 1;
    report.bytes_checked += size;
    let count = reader.record_count();
    if count != meta.record_count {
        report.problem(
            path,
            0,
            format!(
                "file holds {count} records, the manifest records {}",
                meta.record_count
            ),
        );
    }
    let mut records = Vec::with_capacity(count.min(1 << 20) as usize);
    // A sorted run's keys: in order, within the range the manifest records.
    let mut run_order = meta.run_keys.as_ref().map(RunOrder::new);
    let mut data_bytes = 0u64;
    let mut dead_bytes = 0u64;
    for ordinal in 0..count {
        let Ok(ordinal) = u32::try_from(ordinal) else {
            report.problem(
                path,
                0,
                format!("{count} records are more than ordinals can name"),
            );
            break;
        };
        let (offset, len) = match (reader.offset_of(ordinal), reader.record_len(ordinal)) {
            (Ok(o), Ok(l)) => (o, l),
            (Err(e), _) | (_, Err(e)) => {
                report.error(path, e);
                break;
            }
        };
        data_bytes += len;
        if state.dead.contains(ordinal) {
            dead_bytes += len;
        }
        report.blob_records_checked += 1;
        match reader.read_ordinal(ordinal) {
            Ok(rec) => match u32::try_from(rec.value.len()) {
                Ok(value_len) => {
                    // The record reads fine; only the run's mark is wrong.
                    if run_order.as_mut().is_some_and(|r| !r.admits(&rec.key)) {
                        report.problem(
                            path,
                            offset,
                            format!("record {ordinal}: key out of the sorted run's order or range"),
                        );
                    }
                    records.push(Some(RecordInfo {
                        key_hash: key_hash(&rec.key),
                        value_len,
                        seq: rec.seq,
                    }))
                }
                Err(_) => {
                    report.problem(path, offset, format!("record {ordinal}: value too long"));
                    records.push(None);
                }
            },
            Err(e) => {
                report.problem(path, offset, format!("record {ordinal}: {}", reason_of(e)));
                records.push(None);
            }
        }
    }
    if records.len() as u64 == count && data_bytes != meta.data_bytes {
        report.problem(
            path,
            0,
            format!(
                "records hold {data_bytes} bytes, the manifest records {}",
                meta.data_bytes
            ),
        );
    }
    if records.len() as u64 == count && dead_bytes != state.dead_bytes {
        report.problem(
            path,
            0,
            format!(
                "the {} records marked dead hold {dead_bytes} bytes, the manifest records {}",
                state.dead.len(),
                state.dead_bytes
            ),
        );
    }
    match reader.lineage() {
        Ok(entries) => check_lineage_block(path, &reader, &entries, lineage, report),
        Err(e) => report.error(path, e),
    }
    Some(OpenBlob { reader, records })
}

/// Compares a GC output's lineage block with the manifest's lineage
/// entries that lead to it.
fn check_lineage_block(
    path: &Path,
    reader: &BlobReader,
    entries: &[LineageEntry],
    manifest: &[&Relocation],
    report: &mut CheckReport,
) {
    for r in manifest {
        let old = r.entry.old_file;
        match entries.iter().find(|e| e.old_file == old) {
            None => report.problem(
                path,
                0,
                format!(
                    "the manifest moves blob file {old} here, the file's lineage does not list it"
                ),
            ),
            Some(e) if *e != r.entry => report.problem(
                path,
                0,
                format!(
                    "lineage of blob file {old}: file says base {} with {} dead, \
                     the manifest says base {} with {} dead",
                    e.base,
                    e.dead.len(),
                    r.entry.base,
                    r.entry.dead.len()
                ),
            ),
            Some(_) => {}
        }
    }
    for e in entries {
        if u64::from(e.base) > reader.record_count() {
            report.problem(
                path,
                0,
                format!(
                    "lineage of blob file {}: base ordinal {} is beyond the {} records",
                    e.old_file,
                    e.base,
                    reader.record_count()
                ),
            );
        }
    }
}

impl BlobContext<'_> {
    /// Checks the blob reference `value` of table entry `entry`, found in the data
    /// block at `block` of the table at `path`.
    pub(super) fn check_ref(
        &self,
        path: &Path,
        block: u64,
        meta: &FileMeta,
        entry: internal_key::ParsedKey<'_>,
        value: &[u8],
        report: &mut CheckReport,
    ) {
        let (user_key, seq) = (entry.user_key, entry.seq);
        report.blob_refs_checked += 1;
        let key = escape_bytes(user_key);
        let mut problem = |why: String| {
            report.problem(
                path,
                block,
                format!("data block: blob reference of {key}: {why}"),
            )
        };
        let r = match BlobRef::decode(value) {
            Ok(r) => r,
            Err(e) => return problem(format!("does not decode: {}", e.reason)),
        };
        if !meta.blob_files.contains(&r.file) {
            problem(format!(
                "names blob file {}, which the table's blob file list {:?} lacks",
                r.file, meta.blob_files
            ));
        }
        let (file, ordinal, moved) = match resolve(self.live, self.relocations, r.file, r.ordinal) {
            Ok(x) => x,
            Err(e) => {
                return problem(format!(
                    "record {} of blob file {} does not resolve: {}",
                    r.ordinal, r.file, e
                ))
            }
        };
        let at = if moved {
            format!(
                "record {ordinal} of blob file {file} (moved from record {} of {})",
                r.ordinal, r.file
            )
        } else {
            format!("record {ordinal} of blob file {file}")
        };
        if self
            .live
            .get(&file)
            .is_some_and(|s| s.dead.contains(ordinal))
        {
            problem(format!("{at} is marked dead"));
        }
        // A missing or unreadable file was reported on its own.
        let Some(Some(blob)) = self.files.get(&file) else {
            return;
        };
        let Some(rec) = blob.records.get(ordinal as usize) else {
            return problem(format!(
                "{at} is beyond the file's {} records",
                blob.records.len()
            ));
        };
        let offset = blob.reader.offset_of(ordinal).unwrap_or(0);
        let Some(rec) = rec else {
            return problem(format!(
                "{at} (offset {offset} of {}) is damaged",
                self.dir.join(blob_file_name(file)).display()
            ));
        };
        if rec.key_hash != key_hash(user_key) {
            let theirs = blob
                .reader
                .read_ordinal(ordinal)
                .map(|rec| escape_bytes(&rec.key))
                .unwrap_or_default();
            problem(format!("{at} belongs to key {theirs}"));
        }
        if rec.seq != seq {
            problem(format!(
                "{at} holds the version at sequence {}, the table entry is at {seq}",
                rec.seq
            ));
        }
        if rec.value_len != r.size {
            problem(format!(
                "{at} holds {} value bytes, the reference says {}",
                rec.value_len, r.size
            ));
        }
        if !moved && offset != r.offset {
            problem(format!(
                "{at} is at offset {offset}, the reference says {}",
                r.offset
            ));
        }
    }

    /// Checks that every blob file the table lists is live or retired.
    pub(super) fn check_list(&self, path: &Path, meta: &FileMeta, report: &mut CheckReport) {
        for n in &meta.blob_files {
            if !self.live.contains_key(n) && !self.relocations.contains_key(n) {
                report.problem(
                    path,
                    0,
                    format!("table lists blob file {n}, which is neither live nor retired"),
                );
            }
        }
    }
}

/// Where a walk over a sorted run's records is: its recorded first and
/// last key, and the key of the record before.
pub(super) struct RunOrder<'a> {
    first: &'a [u8],
    last: &'a [u8],
    /// Empty before the first record: no key sorts below it.
    prev: Vec<u8>,
}

impl<'a> RunOrder<'a> {
    pub(super) fn new((first, last): &'a (Vec<u8>, Vec<u8>)) -> Self {
        RunOrder {
            first,
            last,
            prev: Vec::new(),
        }
    }

    /// Whether `key`, the next record's, keeps the run in key order and
    /// inside its first and last key.
    pub(super) fn admits(&mut self, key: &[u8]) -> bool {
        let ok = self.first <= key && key <= self.last && self.prev.as_slice() <= key;
        self.prev.clear();
        self.prev.extend_from_slice(key);
        ok
    }
}
