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
//! 5. Every WAL numbered at or above the manifest's log number parses: each
//!    record passes its checksum and decodes as a write batch; a torn tail
//!    is a warning.
//! 6. Files the store does not reference (orphan tables, old WALs and
//!    manifests, temp files, foreign names) are warnings.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::internal_key::{self, ValueKind};
use crate::format::log_record::RECORD_HEADER_LEN;
use crate::format::version_edit::{FileMeta, VersionEdit};
use crate::format::write_batch::WriteBatch;
use crate::io::FsRef;
use crate::options::NUM_LEVELS;
use crate::sst::Table;
use crate::wal::{
    manifest_file_name, parse_current, parse_file_name, table_file_name, FileType, LogKind,
    LogReader, CURRENT_FILE_NAME,
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

/// What replaying the manifest produced.
#[derive(Default)]
struct Replay {
    /// Tables per level, keyed by file number.
    levels: Vec<BTreeMap<u64, FileMeta>>,
    log_number: u64,
    next_file_number: Option<u64>,
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
        Some(n) => replay_manifest(dir, &fs, n, &mut report),
        None => None,
    };
    let Some(replay) = replay else {
        report
            .warnings
            .push("no usable manifest: tables and WALs were not checked against it".to_string());
        return Ok(report);
    };

    check_shape(dir, &replay, &mut report);
    let mut live = HashSet::new();
    for (level, files) in replay.levels.iter().enumerate() {
        for meta in files.values() {
            live.insert(meta.number);
            check_table(dir, &fs, level, meta, &mut report);
        }
    }
    for (name, parsed) in &files {
        let path = dir.join(name);
        match parsed {
            Some((FileType::Wal, n)) if *n >= replay.log_number => {
                check_wal(&fs, &path, &mut report);
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
            Some((FileType::Blob, _)) => report.warnings.push(format!(
                "{}: blob file (not checked: blob files are not yet recorded in the manifest)",
                path.display()
            )),
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

/// Replays manifest `number`, reporting every bad record. Returns `None`
/// when not even its header could be read.
fn replay_manifest(
    dir: &Path,
    fs: &FsRef,
    number: u64,
    report: &mut CheckReport,
) -> Option<Replay> {
    let path = dir.join(manifest_file_name(number));
    let data = match fs.read_all(&path) {
        Ok(d) => d,
        Err(e) => {
            report.error(&path, Error::io(&path, e));
            return None;
        }
    };
    report.bytes_checked += data.len() as u64;
    let mut reader = match LogReader::new(data, path.clone(), LogKind::Manifest) {
        Ok(r) => r,
        Err(e) => {
            report.error(&path, e);
            return None;
        }
    };
    let mut replay = Replay {
        levels: vec![BTreeMap::new(); NUM_LEVELS],
        ..Replay::default()
    };
    loop {
        let rec = match reader.next_record() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e) => {
                // The framing is lost past this point.
                report.error(&path, e);
                break;
            }
        };
        report.manifest_records_checked += 1;
        let edit = VersionEdit::decode(rec);
        let offset = reader.last_record_offset();
        match edit {
            Ok(edit) => apply_edit(&path, offset, &edit, &mut replay, report),
            Err(e) => report.error(&path, e.in_file(&path, offset + RECORD_HEADER_LEN as u64)),
        }
    }
    if let Some(at) = reader.torn_tail() {
        report.warnings.push(format!(
            "{}: torn tail at offset {at} (an interrupted write; the incomplete edit is dropped)",
            path.display()
        ));
    }
    if replay.next_file_number.is_none() {
        report.problem(&path, 0, "manifest has no next-file-number");
    }
    Some(replay)
}

/// Applies one edit as recovery would, reporting what does not apply.
fn apply_edit(
    path: &Path,
    offset: u64,
    edit: &VersionEdit,
    replay: &mut Replay,
    report: &mut CheckReport,
) {
    if let Some(n) = edit.log_number {
        replay.log_number = n;
    }
    if let Some(n) = edit.next_file_number {
        replay.next_file_number = Some(n);
    }
    for &(level, number) in &edit.deleted_files {
        let removed = replay
            .levels
            .get_mut(level as usize)
            .and_then(|files| files.remove(&number));
        if removed.is_none() {
            report.problem(
                path,
                offset,
                format!("edit deletes table {number} that is not in level {level}"),
            );
        }
    }
    for (level, meta) in &edit.new_files {
        match replay.levels.get_mut(*level as usize) {
            Some(files) => {
                files.insert(meta.number, meta.clone());
            }
            None => report.problem(
                path,
                offset,
                format!(
                    "edit adds table {} to level {level}, beyond the last level {}",
                    meta.number,
                    NUM_LEVELS - 1
                ),
            ),
        }
    }
}

/// Checks the version's invariants: no table in two levels, no overlap in
/// levels 1 and deeper, no table number at or above the next file number.
fn check_shape(dir: &Path, replay: &Replay, report: &mut CheckReport) {
    let mut seen = HashSet::new();
    for (level, files) in replay.levels.iter().enumerate() {
        for meta in files.values() {
            let path = dir.join(table_file_name(meta.number));
            if !seen.insert(meta.number) {
                report.problem(&path, 0, "table appears in two levels of the manifest");
            }
            if let Some(next) = replay.next_file_number {
                if meta.number >= next {
                    report.problem(
                        &path,
                        0,
                        format!("table number is not below the manifest's next file number {next}"),
                    );
                }
            }
        }
        if level == 0 {
            continue;
        }
        let mut sorted: Vec<&FileMeta> = files.values().collect();
        sorted.sort_by(|a, b| internal_key::compare(&a.smallest, &b.smallest));
        for w in sorted.windows(2) {
            if internal_key::user_key(&w[0].largest) >= internal_key::user_key(&w[1].smallest) {
                report.problem(
                    dir.join(table_file_name(w[1].number)),
                    0,
                    format!(
                        "key range overlaps {} in level {level}",
                        table_file_name(w[0].number)
                    ),
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
fn check_table(dir: &Path, fs: &FsRef, level: usize, meta: &FileMeta, report: &mut CheckReport) {
    let path = dir.join(table_file_name(meta.number));
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
    let scan = scan_table(&table, report);
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

/// Reads every data block of `table`, reporting each damaged block and
/// each key out of order, and carrying on with the next block.
fn scan_table(table: &Table, report: &mut CheckReport) -> Scan {
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

/// Checks every record of the WAL at `path`.
fn check_wal(fs: &FsRef, path: &Path, report: &mut CheckReport) {
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
    loop {
        let rec = match reader.next_record() {
            Ok(Some(rec)) => rec,
            Ok(None) => break,
            Err(e) => {
                report.error(path, e);
                break;
            }
        };
        report.wal_records_checked += 1;
        let batch = WriteBatch::from_bytes(rec);
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
    if let Some(at) = reader.torn_tail() {
        report.warnings.push(format!(
            "{}: torn tail at offset {at} (an interrupted write; recovery drops it)",
            path.display()
        ));
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
    use crate::format::log_record::FILE_HEADER_LEN;
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
        let replay = replay_manifest(&dir(), &fsr, number, &mut CheckReport::default()).unwrap();
        let level = if deep {
            (1..NUM_LEVELS)
                .find(|&l| !replay.levels[l].is_empty())
                .unwrap()
        } else {
            0
        };
        let meta = replay.levels[level].values().next().unwrap();
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

    #[test]
    fn flipped_byte_in_wal_record_names_wal_and_record() {
        let (fs, _db) = build_store();
        let wal = live_wal(&fs);
        let rec = FILE_HEADER_LEN as u64;
        fs.corrupt_byte(&wal, rec + RECORD_HEADER_LEN as u64 + 3, 0x20)
            .unwrap();
        let report = check(&fs);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].file, wal);
        assert_eq!(report.problems[0].offset, rec);
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
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.file == l0 && p.reason.contains("missing")),
            "{:?}",
            report.problems
        );
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.file == deep && p.reason.contains("bytes")),
            "{:?}",
            report.problems
        );
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

    #[test]
    fn escaping() {
        assert_eq!(escape_bytes(b"ab\\c\x00\xff "), "ab\\\\c\\x00\\xff ");
        let k = crate::format::internal_key::make_internal_key(b"k\n", 7, ValueKind::Value);
        assert_eq!(describe_key(&k), "k\\x0a @7 Value");
    }
}
