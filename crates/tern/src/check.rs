//! Offline consistency check of a store directory (`tern check`).
//!
//! [`check_store`] reads every file a store depends on and verifies every
//! checksum and cross-reference it can, without opening the store: nothing
//! is created, locked, renamed or written. It keeps going after a problem,
//! so one run lists every damaged file (and, inside a table, every damaged
//! block).
//!
//! What is verified:
//! 1. `CURRENT` is well formed and names an existing manifest.
//! 2. Every manifest record passes its checksum and decodes as a version
//!    edit that applies to the version before it; a torn tail is a warning.
//! 3. Every table of the resulting version exists, has the size the manifest
//!    records, opens (footer, index, filter and properties checksums), and
//!    every data block passes its checksum and decodes; keys are strictly
//!    increasing in internal order and each at most its index entry; the
//!    entry count, deletion count, key range and sequence range match both
//!    the table's properties and the manifest.
//! 4. Tables of levels 1 and deeper do not overlap; no table is in two
//!    levels; no table number is at or above the next file number.
//! 5. The blob tags of the manifest apply as recovery applies them (files
//!    added once, dead ordinals only for live files and below their record
//!    count, files retired or deleted only while live, lineage dropped only
//!    where it exists), and every lineage chain ends in a live blob file.
//! 6. Every live blob file exists, has the size the manifest records, opens
//!    (header, footer, index and lineage checksums), every record passes
//!    its checksum, and the record count and record bytes match the
//!    manifest; the bytes recorded dead match the dead records; a GC
//!    output's lineage block matches the manifest's lineage.
//! 7. Every blob reference of every table decodes, names a blob file the
//!    table lists, and resolves through lineage to a live, undamaged record
//!    that is not marked dead, holds the same key and value size and, when
//!    the reference was not moved by GC, sits at the same offset. Every
//!    blob file a table lists is live or retired with lineage.
//! 8. Every WAL numbered at or above the manifest's log number parses: each
//!    record passes its checksum and decodes as a write batch; a torn tail
//!    is a warning.
//! 9. Files the store does not reference (orphan tables and blob files,
//!    blob files retired by GC, old WALs and manifests, temp files, foreign
//!    names) are warnings.

use std::cmp::Ordering;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use crate::blob::BlobReader;
use crate::error::{Error, IoContext, Result};
use crate::format::blob::{BlobRef, LineageEntry};
use crate::format::internal_key::{self, ValueKind};
use crate::format::log_record::RECORD_HEADER_LEN;
use crate::format::version_edit::FileMeta;
use crate::format::write_batch::WriteBatch;
use crate::io::FsRef;
use crate::sst::Table;
use crate::version::{
    replay_manifest, resolve, BlobFileState, BlobFiles, OnProblem, Relocation, Relocations,
    Replayed, Version,
};
use crate::wal::{
    blob_file_name, manifest_file_name, parse_current, parse_file_name, table_file_name, FileType,
    LogKind, LogReader, CURRENT_FILE_NAME,
};

/// One thing found wrong: a damaged or inconsistent unit of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file at fault.
    pub file: PathBuf,
    /// Byte offset of the damaged unit (block, record, footer) in the file;
    /// 0 when the problem concerns the file as a whole.
    pub offset: u64,
    /// What is wrong.
    pub reason: String,
}

impl Problem {
    fn new(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Problem {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// A problem from an engine error: a corruption keeps its file and
    /// offset, anything else is charged to `file` at offset 0.
    fn from_error(file: &Path, e: Error) -> Self {
        match e {
            Error::Corruption {
                file,
                offset,
                reason,
            } => Problem::new(file, offset, reason),
            other => Problem::new(file, 0, other.to_string()),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: offset {}: {}",
            self.file.display(),
            self.offset,
            self.reason
        )
    }
}

/// The outcome of [`check_store`].
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Damage and inconsistencies, in the order they were found.
    pub problems: Vec<Problem>,
    /// Things worth knowing that open handles on its own (torn tails,
    /// orphan files).
    pub warnings: Vec<String>,
    /// Number of the manifest that was checked, if one could be chosen.
    pub manifest_number: Option<u64>,
    /// Manifest records (version edits) read.
    pub manifest_records_checked: u64,
    /// Tables opened and scanned.
    pub tables_checked: u64,
    /// Data blocks read and verified.
    pub blocks_checked: u64,
    /// Table entries read.
    pub entries_checked: u64,
    /// Blob files opened and read.
    pub blob_files_checked: u64,
    /// Blob records read and verified.
    pub blob_records_checked: u64,
    /// Blob references (table entries of kind `BlobRef`) checked.
    pub blob_refs_checked: u64,
    /// WAL files read.
    pub wals_checked: u64,
    /// WAL records read and decoded.
    pub wal_records_checked: u64,
    /// Bytes of files read.
    pub bytes_checked: u64,
}

impl CheckReport {
    /// True when no problem was found (warnings allowed).
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(&mut self, file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) {
        self.problems.push(Problem::new(file, offset, reason));
    }

    fn error(&mut self, file: &Path, e: Error) {
        self.problems.push(Problem::from_error(file, e));
    }
}

/// Checks the store in `dir` through `fs`, reading only.
///
/// Returns `Err` only when `dir` cannot be listed or holds no store at all;
/// everything found wrong inside a store is reported in the
/// [`CheckReport`].
pub fn check_store(dir: &Path, fs: FsRef) -> Result<CheckReport> {
    let names = fs.list_dir(dir).ctx(dir)?;
    let mut files: Vec<(String, Option<(FileType, u64)>)> = names
        .iter()
        .map(|n| (n.clone(), parse_file_name(n)))
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let manifests: Vec<u64> = files
        .iter()
        .filter_map(|(_, p)| match p {
            Some((FileType::Manifest, n)) => Some(*n),
            _ => None,
        })
        .collect();
    let has_current = names.iter().any(|n| n == CURRENT_FILE_NAME);
    if !has_current && manifests.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{} holds no Tern store (no CURRENT file and no manifest)",
            dir.display()
        )));
    }

    let mut report = CheckReport::default();
    let manifest_number = choose_manifest(dir, &fs, has_current, &manifests, &mut report);
    report.manifest_number = manifest_number;
    let replay = match manifest_number {
        Some(n) => check_manifest(dir, &fs, n, &mut report),
        None => None,
    };
    let Some(replay) = replay else {
        report
            .warnings
            .push("no usable manifest: tables and WALs were not checked against it".to_string());
        return Ok(report);
    };

    let blobs = check_blob_files(dir, &fs, &replay.version, &mut report);
    // The WALs recovery replays, oldest first: damage in one is a torn tail
    // only if no later one shows writes (point-in-time recovery).
    let mut recovered_wals: Vec<u64> = files
        .iter()
        .filter_map(|(_, p)| match p {
            Some((FileType::Wal, n)) if *n >= replay.log_number => Some(*n),
            _ => None,
        })
        .collect();
    recovered_wals.sort_unstable();
    let mut live = HashSet::new();
    for (level, files) in replay.version.levels.iter().enumerate() {
        for meta in files {
            live.insert(meta.number);
            check_table(dir, &fs, level, meta, &blobs, &mut report);
        }
    }
    for (name, parsed) in &files {
        let path = dir.join(name);
        match parsed {
            Some((FileType::Wal, n)) if *n >= replay.log_number => {
                let later = recovered_wals.partition_point(|w| w <= n);
                // A later WAL that cannot be read counts as written:
                // the damage is then reported as a problem.
                let may_be_torn = || {
                    !crate::wal::later_wal_shows_writes(fs.as_ref(), dir, &recovered_wals[later..])
                        .unwrap_or(true)
                };
                check_wal(&fs, &path, may_be_torn, &mut report);
            }
            Some((FileType::Wal, _)) => report.warnings.push(format!(
                "{}: WAL below the log number {} (already flushed; removed at next open)",
                path.display(),
                replay.log_number
            )),
            Some((FileType::Table, n)) if !live.contains(n) => report.warnings.push(format!(
                "{}: table not referenced by the manifest (removed at next open)",
                path.display()
            )),
            Some((FileType::Manifest, n)) if Some(*n) != manifest_number => {
                report.warnings.push(format!(
                    "{}: manifest not named by CURRENT (removed at next open)",
                    path.display()
                ))
            }
            Some((FileType::Temp, _)) => report.warnings.push(format!(
                "{}: leftover temporary file (removed at next open)",
                path.display()
            )),
            Some((FileType::Blob, n)) if replay.version.relocations.contains_key(n) => {
                report.warnings.push(format!(
                    "{}: blob file retired by GC (removed at next open)",
                    path.display()
                ))
            }
            Some((FileType::Blob, n)) if !replay.version.blob_files.contains_key(n) => {
                report.warnings.push(format!(
                    "{}: blob file not referenced by the manifest (removed at next open)",
                    path.display()
                ))
            }
            Some(_) => {}
            None => report
                .warnings
                .push(format!("{}: not a Tern file (ignored)", path.display())),
        }
    }
    Ok(report)
}

/// Picks the manifest to check: the one `CURRENT` names, or the newest one
/// present when `CURRENT` is missing or unusable (reported as a problem).
fn choose_manifest(
    dir: &Path,
    fs: &FsRef,
    has_current: bool,
    manifests: &[u64],
    report: &mut CheckReport,
) -> Option<u64> {
    let current = dir.join(CURRENT_FILE_NAME);
    let named = if has_current {
        match fs.read_all(&current) {
            Ok(data) => {
                report.bytes_checked += data.len() as u64;
                let n = parse_current(&data);
                if n.is_none() {
                    report.problem(
                        &current,
                        0,
                        "CURRENT does not name a manifest (expected \"MANIFEST-NNNNNN\\n\")",
                    );
                }
                n
            }
            Err(e) => {
                report.error(&current, Error::io(&current, e));
                None
            }
        }
    } else {
        report.problem(&current, 0, "CURRENT is missing");
        None
    };
    match named {
        Some(n) if manifests.contains(&n) => Some(n),
        Some(n) => {
            report.problem(
                &current,
                0,
                format!(
                    "CURRENT names {}, which does not exist",
                    manifest_file_name(n)
                ),
            );
            None
        }
        None => {
            let newest = manifests.iter().max().copied();
            if let Some(n) = newest {
                report.warnings.push(format!(
                    "checking the newest manifest present, {}, instead",
                    manifest_file_name(n)
                ));
            }
            newest
        }
    }
}

/// Replays manifest `number` as recovery does, reporting every problem.
/// Returns `None` when not even its header could be read.
fn check_manifest(
    dir: &Path,
    fs: &FsRef,
    number: u64,
    report: &mut CheckReport,
) -> Option<Replayed> {
    let path = dir.join(manifest_file_name(number));
    let data = match fs.read_all(&path) {
        Ok(d) => d,
        Err(e) => {
            report.error(&path, Error::io(&path, e));
            return None;
        }
    };
    report.bytes_checked += data.len() as u64;
    let mut replay = match replay_manifest(&path, data, OnProblem::Collect) {
        Ok(r) => r,
        Err(e) => {
            report.error(&path, e);
            return None;
        }
    };
    report.manifest_records_checked += replay.records;
    for e in std::mem::take(&mut replay.problems) {
        report.error(&path, e);
    }
    if let Some(at) = replay.torn_tail {
        report.warnings.push(format!(
            "{}: torn tail at offset {at} (an interrupted write; the incomplete edit is dropped)",
            path.display()
        ));
    }
    Some(replay)
}

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
struct BlobContext<'a> {
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
fn check_blob_files<'a>(
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
                Ok(value_len) => records.push(Some(RecordInfo {
                    key_hash: key_hash(&rec.key),
                    value_len,
                    seq: rec.seq,
                })),
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
    fn check_ref(
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
                    r.ordinal,
                    r.file,
                    reason_of(e)
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
    fn check_list(&self, path: &Path, meta: &FileMeta, report: &mut CheckReport) {
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
fn check_table(
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

/// Checks every record of the WAL at `path`. An incomplete or damaged
/// record is a warning when `may_be_torn()` says recovery treats it as the
/// end of the log, and a problem otherwise.
fn check_wal(
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

/// Formats an internal key for messages: escaped user key, sequence, kind.
pub fn describe_key(ikey: &[u8]) -> String {
    if ikey.is_empty() {
        return "(none)".to_string();
    }
    match internal_key::parse(ikey) {
        Ok(p) => format!("{} @{} {:?}", escape_bytes(p.user_key), p.seq, p.kind),
        Err(_) => format!("{} (malformed)", escape_bytes(ikey)),
    }
}

/// Escapes bytes for display: printable ASCII as is, backslash doubled,
/// everything else as `\xNN`.
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// Asserts that `report` has a problem in `file` whose reason mentions `needle`.
    fn assert_problem(report: &CheckReport, file: &std::path::Path, needle: &str) {
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.file == file && p.reason.contains(needle)),
            "no problem in {} mentioning {needle:?}: {:?}",
            file.display(),
            report.problems
        );
    }
    use crate::format::log_record::FILE_HEADER_LEN;
    use crate::format::version_edit::VersionEdit;
    use crate::io::{FileSystem, MemFs};
    use crate::{Db, Options, WriteOptions};

    fn dir() -> PathBuf {
        PathBuf::from("/store")
    }

    /// A store with tables in L0 and a deeper level, plus a WAL holding
    /// synced records that were never flushed. The Db stays open (and
    /// idle) so the WAL keeps its records.
    fn build_store() -> (Arc<MemFs>, Db) {
        let fs = MemFs::new();
        let opts = Options {
            fs: fs.clone(),
            write_buffer_size: 32 << 10,
            target_file_size: 16 << 10,
            max_bytes_for_level_base: 64 << 10,
            level0_file_num_compaction_trigger: 20,
            level0_slowdown_writes_trigger: 30,
            level0_stop_writes_trigger: 40,
            ..Options::default()
        };
        let db = Db::open(dir(), opts).unwrap();
        for i in 0..3000u32 {
            db.put(format!("key{i:06}").as_bytes(), &[b'v'; 40])
                .unwrap();
        }
        db.compact_range(None, None).unwrap();
        for i in (0..3000u32).step_by(7) {
            db.delete(format!("key{i:06}").as_bytes()).unwrap();
        }
        db.flush().unwrap();
        db.wait_for_background().unwrap();
        for i in 0..20u32 {
            let mut b = WriteBatch::new();
            b.put(format!("wal{i:03}").as_bytes(), b"x").delete(b"gone");
            db.write(b, WriteOptions::synced()).unwrap();
        }
        (fs, db)
    }

    fn check(fs: &Arc<MemFs>) -> CheckReport {
        let fs: FsRef = fs.clone();
        check_store(&dir(), fs).unwrap()
    }

    fn snapshot(fs: &MemFs) -> Vec<(PathBuf, Vec<u8>)> {
        fs.file_names()
            .into_iter()
            .map(|p| {
                let data = fs.read_all(&p).unwrap();
                (p, data)
            })
            .collect()
    }

    fn first_table(fs: &Arc<MemFs>, deep: bool) -> (PathBuf, u64) {
        let number = check(fs).manifest_number.unwrap();
        let fsr: FsRef = fs.clone();
        let replay = check_manifest(&dir(), &fsr, number, &mut CheckReport::default()).unwrap();
        let level = if deep {
            (1..crate::options::NUM_LEVELS)
                .find(|&l| !replay.version.levels[l].is_empty())
                .unwrap()
        } else {
            0
        };
        let meta = &replay.version.levels[level][0];
        (dir().join(table_file_name(meta.number)), meta.number)
    }

    fn live_wal(fs: &Arc<MemFs>) -> PathBuf {
        let mut wals: Vec<PathBuf> = fs
            .file_names()
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        wals.sort();
        wals.pop().unwrap()
    }

    /// Rewrites the live manifest with `extra` appended as one more record;
    /// returns the manifest's path and the new record's offset.
    fn append_manifest_edit(fs: &Arc<MemFs>, extra: &VersionEdit) -> (PathBuf, u64) {
        let number = check(fs).manifest_number.unwrap();
        let path = dir().join(manifest_file_name(number));
        let mut reader =
            LogReader::new(fs.read_all(&path).unwrap(), path.clone(), LogKind::Manifest).unwrap();
        let mut records = Vec::new();
        while let Some(rec) = reader.next_record().unwrap() {
            records.push(rec.to_vec());
        }
        let mut writer =
            crate::wal::LogWriter::new(fs.create(&path).unwrap(), LogKind::Manifest).unwrap();
        for rec in &records {
            writer.add_record(rec).unwrap();
        }
        let offset = writer.len();
        writer.add_record(&extra.encode()).unwrap();
        writer.sync().unwrap();
        (path, offset)
    }

    /// Recovery and check replay a manifest with one function, so a
    /// manifest one rejects the other rejects with the same error: same
    /// file, same offset, same reason.
    #[test]
    fn open_and_check_reject_a_bad_manifest_with_the_same_error() {
        let table_in_l1 = |fs: &Arc<MemFs>| {
            let number = check(fs).manifest_number.unwrap();
            let fsr: FsRef = fs.clone();
            let v = check_manifest(&dir(), &fsr, number, &mut CheckReport::default())
                .unwrap()
                .version;
            let level = (1..crate::options::NUM_LEVELS)
                .find(|&l| !v.levels[l].is_empty())
                .unwrap();
            (level as u32, (*v.levels[level][0]).clone())
        };
        type MakeEdit = fn(u32, FileMeta) -> VersionEdit;
        let cases: [(&str, MakeEdit, bool); 5] = [
            (
                "edit deletes table 999999 that is not in level 1",
                |_, _| VersionEdit {
                    deleted_files: vec![(1, 999_999)],
                    ..Default::default()
                },
                true,
            ),
            (
                "beyond the last level",
                |_, mut meta| {
                    meta.number = 999_998;
                    VersionEdit {
                        new_files: vec![(9, meta)],
                        ..Default::default()
                    }
                },
                true,
            ),
            (
                "which is not live",
                |_, _| VersionEdit {
                    blob_files_deleted: vec![424_242],
                    ..Default::default()
                },
                true,
            ),
            (
                "appears in two levels",
                |_, meta| VersionEdit {
                    new_files: vec![(0, meta)],
                    ..Default::default()
                },
                false,
            ),
            (
                "overlap in level",
                |level, mut meta| {
                    meta.number = 999_997;
                    VersionEdit {
                        new_files: vec![(level, meta)],
                        ..Default::default()
                    }
                },
                false,
            ),
        ];
        for (needle, make, at_record) in cases {
            let (fs, db) = build_store();
            db.close().unwrap();
            let (level, meta) = table_in_l1(&fs);
            let (path, offset) = append_manifest_edit(&fs, &make(level, meta));
            let report = check(&fs);
            let opts = Options {
                fs: fs.clone(),
                ..Options::default()
            };
            let err = match Db::open(dir(), opts) {
                Ok(_) => panic!("{needle}: open accepted the manifest"),
                Err(e) => e,
            };
            let from_open = Problem::from_error(&path, err);
            assert_eq!(report.problems.first(), Some(&from_open), "{needle}");
            assert_eq!(from_open.file, path, "{needle}");
            let expected_offset = if at_record { offset } else { 0 };
            let named = report
                .problems
                .iter()
                .find(|p| p.reason.contains(needle))
                .unwrap_or_else(|| panic!("{needle}: {:?}", report.problems));
            assert_eq!((&named.file, named.offset), (&path, expected_offset));
        }
    }

    #[test]
    fn clean_store_checks_ok_and_is_left_untouched() {
        let (fs, _db) = build_store();
        let before = snapshot(&fs);
        let report = check(&fs);
        assert!(report.is_ok(), "{:?}", report.problems);
        assert!(report.tables_checked >= 2, "{report:?}");
        assert!(report.blocks_checked > report.tables_checked);
        assert!(report.entries_checked >= 3000);
        assert!(report.wal_records_checked >= 20);
        assert!(report.manifest_records_checked >= 1);
        assert!(report.bytes_checked > 0);
        assert_eq!(snapshot(&fs), before);
        let (_, l0) = first_table(&fs, false);
        let (_, deep) = first_table(&fs, true);
        assert_ne!(l0, deep);
    }

    #[test]
    fn flipped_byte_in_data_block_names_table_and_block() {
        let (fs, _db) = build_store();
        let (path, number) = first_table(&fs, true);
        let fsr: FsRef = fs.clone();
        let table = Table::open(&fsr, &path, number, None).unwrap();
        let mut index = table.index_iter();
        index.seek_to_first();
        index.next();
        let second = table.decode_handle(index.value()).unwrap();
        index.next();
        let third = table.decode_handle(index.value()).unwrap();
        drop(table);
        fs.corrupt_byte(&path, second.offset + 10, 0x01).unwrap();
        fs.corrupt_byte(&path, third.offset + 3, 0x80).unwrap();
        let report = check(&fs);
        let offsets: Vec<u64> = report
            .problems
            .iter()
            .filter(|p| p.file == path)
            .map(|p| p.offset)
            .collect();
        assert_eq!(
            offsets,
            vec![second.offset, third.offset],
            "{:?}",
            report.problems
        );
        assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
        assert!(
            report.problems[0].reason.contains("checksum"),
            "{:?}",
            report.problems
        );
        let shown = report.problems[0].to_string();
        assert!(shown.starts_with(&format!("{}: offset {}: ", path.display(), second.offset)));
    }

    /// Damage in the newest WAL is what recovery treats as the end of the
    /// log (point-in-time recovery): a warning naming the WAL and record.
    /// Damage in an older WAL is a problem (see `db::open`'s tests).
    #[test]
    fn flipped_byte_in_the_newest_wal_is_a_warning_naming_wal_and_record() {
        let (fs, _db) = build_store();
        let wal = live_wal(&fs);
        let rec = FILE_HEADER_LEN as u64;
        fs.corrupt_byte(&wal, rec + RECORD_HEADER_LEN as u64 + 3, 0x20)
            .unwrap();
        let report = check(&fs);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let needle = format!("{}: damaged record", wal.display());
        let warning = report.warnings.iter().find(|w| w.starts_with(&needle));
        let warning = warning.unwrap_or_else(|| panic!("{:?}", report.warnings));
        assert!(warning.contains(&format!("offset {rec}")), "{warning}");
    }

    #[test]
    fn missing_and_resized_tables_are_reported_together() {
        let (fs, _db) = build_store();
        let (l0, _) = first_table(&fs, false);
        let (deep, _) = first_table(&fs, true);
        fs.remove_file(&l0).unwrap();
        let len = fs.file_size(&deep).unwrap();
        fs.truncate(&deep, len - 1).unwrap();
        let report = check(&fs);
        assert_problem(&report, &l0, "missing");
        assert_problem(&report, &deep, "bytes");
    }

    #[test]
    fn torn_manifest_tail_is_a_warning() {
        let (fs, db) = build_store();
        db.close().unwrap();
        drop(db);
        let report = check(&fs);
        assert!(report.is_ok(), "{:?}", report.problems);
        let path = dir().join(manifest_file_name(report.manifest_number.unwrap()));
        let mut data = fs.read_all(&path).unwrap();
        let mut reader = LogReader::new(data.clone(), path.clone(), LogKind::Manifest).unwrap();
        while reader.next_record().unwrap().is_some() {}
        let last = reader.last_record_offset() as usize;
        let half: Vec<u8> = data[last..last + (data.len() - last) / 2 + RECORD_HEADER_LEN].to_vec();
        let torn_at = data.len();
        data.extend_from_slice(&half);
        let mut f = fs.create(&path).unwrap();
        f.append(&data).unwrap();
        f.sync().unwrap();
        drop(f);
        let report = check(&fs);
        assert!(report.is_ok(), "{:?}", report.problems);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("torn tail") && w.contains(&format!("offset {torn_at}"))),
            "{:?}",
            report.warnings
        );
    }

    #[test]
    fn bad_current_and_empty_dir() {
        let (fs, db) = build_store();
        db.close().unwrap();
        drop(db);
        let current = dir().join(CURRENT_FILE_NAME);
        let mut f = fs.create(&current).unwrap();
        f.append(b"MANIFEST-999999\n").unwrap();
        drop(f);
        let report = check(&fs);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].file, current);
        let empty = MemFs::new();
        empty.create_dir_all(Path::new("/empty")).unwrap();
        let fsr: FsRef = empty;
        assert!(check_store(Path::new("/empty"), fsr).is_err());
    }

    /// A closed store whose values all live in blob files, with overwrites,
    /// compaction and a GC pass behind it, so that tables hold references
    /// to a retired blob file that resolve through lineage.
    fn build_blob_store() -> Arc<MemFs> {
        let fs = MemFs::new();
        let opts = Options {
            fs: fs.clone(),
            blob_threshold: Some(0),
            enable_gc: false,
            write_buffer_size: 1 << 20,
            target_file_size: 16 << 10,
            level0_file_num_compaction_trigger: 20,
            level0_slowdown_writes_trigger: 30,
            level0_stop_writes_trigger: 40,
            ..Options::default()
        };
        let db = Db::open(dir(), opts).unwrap();
        for i in 0..1000u32 {
            db.put(format!("key{i:06}").as_bytes(), &[b'a'; 60])
                .unwrap();
        }
        db.flush().unwrap();
        for i in 0..700u32 {
            db.put(
                format!("key{i:06}").as_bytes(),
                format!("new{i}").as_bytes(),
            )
            .unwrap();
        }
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
        assert!(db.collect_garbage().unwrap() > 0);
        for i in 0..50u32 {
            db.put(format!("late{i:03}").as_bytes(), b"late value")
                .unwrap();
        }
        db.flush().unwrap();
        db.close().unwrap();
        fs
    }

    fn blob_replay(fs: &Arc<MemFs>) -> Version {
        let number = check(fs).manifest_number.unwrap();
        let fsr: FsRef = fs.clone();
        check_manifest(&dir(), &fsr, number, &mut CheckReport::default())
            .unwrap()
            .version
    }

    /// The live blob file a GC pass wrote (a target of lineage).
    fn gc_output(fs: &Arc<MemFs>) -> PathBuf {
        let replay = blob_replay(fs);
        let r = replay.relocations.values().next().unwrap();
        assert!(replay.blob_files.contains_key(&r.new_file));
        dir().join(blob_file_name(r.new_file))
    }

    #[test]
    fn blob_store_with_lineage_checks_ok() {
        let fs = build_blob_store();
        let replay = blob_replay(&fs);
        assert!(!replay.relocations.is_empty());
        assert!(replay.blob_files.len() >= 2);
        let report = check(&fs);
        assert!(report.is_ok(), "{:?}", report.problems);
        assert_eq!(report.blob_files_checked, replay.blob_files.len() as u64);
        assert!(report.blob_records_checked >= 1050, "{report:?}");
        assert_eq!(report.blob_refs_checked, 1050, "{report:?}");
        assert!(
            !report.warnings.iter().any(|w| w.contains(".blob")),
            "{:?}",
            report.warnings
        );
    }

    #[test]
    fn blob_record_of_another_version_of_the_key_is_reported() {
        let fs = MemFs::new();
        let opts = Options {
            fs: fs.clone(),
            blob_threshold: Some(0),
            enable_gc: false,
            ..Options::default()
        };
        let db = Db::open(dir(), opts).unwrap();
        db.put(b"k", b"one").unwrap();
        db.put(b"k", b"two").unwrap();
        db.flush().unwrap();
        db.close().unwrap();
        let path = fs
            .file_names()
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "blob"))
            .unwrap();
        let fsr: FsRef = fs.clone();
        let reader = BlobReader::open(&fsr, &path, 0).unwrap();
        let (a, b) = (reader.offset_of(0).unwrap(), reader.offset_of(1).unwrap());
        drop(reader);
        // Swap the two equal-length records: each keeps a valid checksum.
        let (a, b) = (a as usize, b as usize);
        fs.rewrite(&path, |data| data[a..b + (b - a)].rotate_left(b - a))
            .unwrap();
        let report = check(&fs);
        let wrong_version = report
            .problems
            .iter()
            .filter(|p| p.reason.contains("holds the version at sequence"))
            .count();
        assert_eq!(wrong_version, 2, "{:?}", report.problems);
    }

    #[test]
    fn flipped_byte_in_blob_record_names_file_and_record() {
        let fs = build_blob_store();
        let path = gc_output(&fs);
        let fsr: FsRef = fs.clone();
        let reader = BlobReader::open(&fsr, &path, 0).unwrap();
        let third = reader.offset_of(3).unwrap();
        let key = reader.read_ordinal(3).unwrap().key;
        drop(reader);
        fs.corrupt_byte(
            &path,
            third + crate::format::blob::RECORD_HEADER_LEN as u64 + 1,
            0x04,
        )
        .unwrap();
        let report = check(&fs);
        let on_blob: Vec<&Problem> = report.problems.iter().filter(|p| p.file == path).collect();
        assert_eq!(on_blob.len(), 1, "{:?}", report.problems);
        assert_eq!(on_blob[0].offset, third);
        assert!(on_blob[0].reason.contains("checksum"), "{:?}", on_blob);
        // The table entry whose value was lost is named too.
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.file.extension().is_some_and(|e| e == "sst")
                    && p.reason.contains(&escape_bytes(&key))
                    && p.reason.contains("damaged")),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn missing_and_truncated_blob_files_are_reported() {
        let fs = build_blob_store();
        let gc = gc_output(&fs);
        let replay = blob_replay(&fs);
        let other = replay
            .blob_files
            .keys()
            .map(|&n| dir().join(blob_file_name(n)))
            .find(|p| *p != gc)
            .unwrap();
        fs.remove_file(&gc).unwrap();
        let len = fs.file_size(&other).unwrap();
        fs.truncate(&other, len - 10).unwrap();
        let report = check(&fs);
        assert_problem(&report, &gc, "missing");
        assert_problem(&report, &other, "bytes");
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.file == other && p.offset == len - 10 - 48),
            "{:?}",
            report.problems
        );
    }

    #[test]
    fn orphan_blob_file_is_a_warning() {
        let fs = build_blob_store();
        let gc = gc_output(&fs);
        let data = fs.read_all(&gc).unwrap();
        let orphan = dir().join(blob_file_name(999_999));
        let mut f = fs.create(&orphan).unwrap();
        f.append(&data).unwrap();
        drop(f);
        let report = check(&fs);
        assert!(report.is_ok(), "{:?}", report.problems);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("999999.blob") && w.contains("not referenced")),
            "{:?}",
            report.warnings
        );
    }

    /// Random overwrites and deletes with background compaction and GC of
    /// small blob files, then a full compaction and GC after reopening.
    #[test]
    fn busy_blob_store_checks_ok() {
        for round in 0..4u32 {
            let fs = MemFs::new();
            let opts = Options {
                fs: fs.clone(),
                blob_threshold: Some(if round % 2 == 0 { 0 } else { 30 }),
                write_buffer_size: 16 << 10,
                target_file_size: 8 << 10,
                max_bytes_for_level_base: 32 << 10,
                blob_file_size: 8 << 10,
                gc_garbage_ratio: 0.2,
                ..Options::default()
            };
            let db = Db::open(dir(), opts.clone()).unwrap();
            let mut x = 12345u64 + round as u64;
            for i in 0..20000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = format!("key{:05}", x % 3000);
                if x % 11 == 0 {
                    db.delete(k.as_bytes()).unwrap();
                } else {
                    db.put(
                        k.as_bytes(),
                        format!("{i}-{}", "v".repeat((x % 80) as usize)).as_bytes(),
                    )
                    .unwrap();
                }
                if i % 5000 == 4999 {
                    db.collect_garbage().unwrap();
                }
            }
            db.wait_for_background().unwrap();
            db.close().unwrap();
            drop(db);
            let report = check(&fs);
            assert!(report.is_ok(), "round {round}: {:#?}", report.problems);
            assert!(report.blob_refs_checked > 1000, "{report:?}");
            let db = Db::open(dir(), opts).unwrap();
            db.compact_range(None, None).unwrap();
            db.collect_garbage().unwrap();
            db.close().unwrap();
            drop(db);
            let report = check(&fs);
            assert!(
                report.is_ok(),
                "round {round} reopened: {:#?}",
                report.problems
            );
        }
    }

    #[test]
    fn escaping() {
        assert_eq!(escape_bytes(b"ab\\c\x00\xff "), "ab\\\\c\\x00\\xff ");
        let k = crate::format::internal_key::make_internal_key(b"k\n", 7, ValueKind::Value);
        assert_eq!(describe_key(&k), "k\\x0a @7 Value");
    }
}
