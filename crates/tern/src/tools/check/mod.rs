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
//! 9. Every table of a durable memory tier lies inside the tier file,
//!    whose header is valid, and its nodes parse and match the checksum,
//!    entry count and sequence range the manifest records.
//! 10. Files the store does not reference (orphan tables and blob files,
//!     blob files retired by GC, old WALs and manifests, temp files, foreign
//!     names) are warnings.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::io::FsRef;
use crate::version::{replay_manifest, OnProblem, Replayed};
use crate::wal::{manifest_file_name, parse_current, parse_file_name, FileType, CURRENT_FILE_NAME};
use blobs::check_blob_files;
use tables::check_table;
use wal::check_wal;

mod blobs;
mod memtier;
mod tables;
mod wal;

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
    /// Durable memory tier tables read and verified.
    pub tier_tables_checked: u64,
    /// Entries of those tables.
    pub tier_entries_checked: u64,
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

/// Checks the store in `dir` through `fs`, reading only; a durable memory
/// tier is looked for at [`crate::DEFAULT_MEMTIER_FILE`] in `dir`.
///
/// Returns `Err` only when `dir` cannot be listed or holds no store at all;
/// everything found wrong inside a store is reported in the
/// [`CheckReport`].
pub fn check_store(dir: &Path, fs: FsRef) -> Result<CheckReport> {
    check_store_with_tier(dir, fs, Path::new(crate::DEFAULT_MEMTIER_FILE))
}

/// [`check_store`] with the durable memory tier's file at `memtier_path`
/// (relative to `dir`, as the `memtier_path` setting is).
pub fn check_store_with_tier(dir: &Path, fs: FsRef, memtier_path: &Path) -> Result<CheckReport> {
    let tier_path = dir.join(memtier_path);
    let tier_lock = crate::memtier::memory::lock_path(&tier_path);
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
    memtier::check_tier(&fs, &tier_path, &replay.version.tier, &mut report);
    let mut live = HashSet::new();
    for (level, files) in replay.version.levels.iter().enumerate() {
        for meta in files {
            live.insert(meta.number);
            check_table(dir, &fs, level, meta, &blobs, &mut report);
        }
    }
    let mut wal_ends = std::collections::BTreeMap::new();
    for (name, parsed) in &files {
        let path = dir.join(name);
        match parsed {
            Some((FileType::Wal, n)) if *n >= replay.log_number => {
                let later = recovered_wals.partition_point(|w| w <= n);
                // A later WAL that cannot be read counts as vouching:
                // the damage is then reported as a problem.
                let may_be_torn = || {
                    let later = &recovered_wals[later..];
                    !crate::wal::later_wal_vouches_for(fs.as_ref(), dir, *n, later).unwrap_or(true)
                };
                if let Some(end) = check_wal(&fs, &path, may_be_torn, &mut report) {
                    wal_ends.insert(*n, end);
                }
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
            None if path == tier_path || path == tier_lock => {}
            None => report
                .warnings
                .push(format!("{}: not a Tern file (ignored)", path.display())),
        }
    }
    check_predecessors(
        dir,
        &fs,
        replay.log_number,
        &recovered_wals,
        &wal_ends,
        &mut report,
    );
    Ok(report)
}

/// Recovery's predecessor rule: a WAL whose first record says its
/// predecessor (one recovery replays) was longer than the predecessor's
/// valid records is a crash's cut, and recovery drops it and every later
/// WAL (a warning), unless a later WAL's sync mark vouches for the
/// predecessor (a problem).
fn check_predecessors(
    dir: &Path,
    fs: &FsRef,
    log_number: u64,
    wals: &[u64],
    ends: &std::collections::BTreeMap<u64, wal::WalEnd>,
    report: &mut CheckReport,
) {
    for (i, (&number, end)) in ends.iter().enumerate() {
        let Some(prev) = end.predecessor else {
            continue;
        };
        let had = ends.get(&prev.number).map_or(0, |e| e.valid_len);
        if prev.number < log_number || had >= prev.len {
            continue;
        }
        let prev_path = dir.join(crate::wal::wal_file_name(prev.number));
        let later = &wals[wals.partition_point(|&w| w < number)..];
        let vouched =
            crate::wal::later_wal_vouches_for(fs.as_ref(), dir, prev.number, later).unwrap_or(true);
        let what = format!(
            "write-ahead log ends at {had} but was {} bytes at the memtable switch",
            prev.len
        );
        if vouched {
            report.problem(
                prev_path,
                had,
                format!("{what}, and a later log's sync mark says it was synced whole"),
            );
        } else {
            report.warnings.push(format!(
                "{}: {what} (a crash's cut); recovery drops {} later WALs (unsynced writes)",
                prev_path.display(),
                ends.len() - i
            ));
        }
        return;
    }
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

#[cfg(test)]
mod tests;
