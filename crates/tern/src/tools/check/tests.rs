//! Tests of `tern check` on stores built and damaged in memory.

#![allow(clippy::unwrap_used)]
use std::sync::Arc;

use super::*;
use std::path::{Path, PathBuf};

use crate::blob::BlobReader;
use crate::format::internal_key::ValueKind;
use crate::format::log_record::RECORD_HEADER_LEN;
use crate::format::write_batch::WriteBatch;
use crate::io::FsRef;
use crate::sst::Table;
use crate::tools::{describe_key, escape_bytes};
use crate::version::Version;
use crate::wal::{
    blob_file_name, manifest_file_name, table_file_name, LogKind, LogReader, CURRENT_FILE_NAME,
};

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

/// Opens a store on `fs` with `settings` and L0 triggers high enough that
/// only the test's flushes and compactions shape the tree.
fn open_quiet_l0(fs: &Arc<MemFs>, settings: crate::Settings) -> Db {
    let settings = crate::Settings {
        level0_file_num_compaction_trigger: 20,
        level0_slowdown_writes_trigger: 30,
        level0_stop_writes_trigger: 40,
        ..settings
    };
    Db::open(dir(), Options::new(settings).with_fs(fs.clone())).unwrap()
}

/// A store with tables in L0 and a deeper level, plus a WAL holding
/// synced records that were never flushed. The Db stays open (and
/// idle) so the WAL keeps its records.
fn build_store() -> (Arc<MemFs>, Db) {
    let fs = MemFs::new();
    let db = open_quiet_l0(
        &fs,
        crate::Settings {
            write_buffer_size: 32 << 10,
            target_file_size: 16 << 10,
            max_bytes_for_level_base: 64 << 10,
            ..crate::Settings::default()
        },
    );
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

/// The live manifest's path and the version it holds, by the replay
/// recovery uses (no full check of the store).
fn live_version(fs: &Arc<MemFs>) -> (PathBuf, Version) {
    let (_, path, data) = crate::version::read_current_manifest(fs.as_ref(), &dir()).unwrap();
    let replayed =
        crate::version::replay_manifest(&path, data, crate::version::OnProblem::Fail).unwrap();
    (path, replayed.version)
}

fn first_table(fs: &Arc<MemFs>, deep: bool) -> (PathBuf, u64) {
    let (_, version) = live_version(fs);
    let level = if deep {
        (1..crate::options::NUM_LEVELS)
            .find(|&l| !version.levels[l].is_empty())
            .unwrap()
    } else {
        0
    };
    let meta = &version.levels[level][0];
    (dir().join(table_file_name(meta.number)), meta.number)
}

/// The newest WAL holding records (a newer one may be the empty WAL
/// prepared for the next switch).
fn live_wal(fs: &Arc<MemFs>) -> PathBuf {
    let mut wals: Vec<PathBuf> = fs
        .file_names()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter(|p| fs.file_size(p).unwrap() > FILE_HEADER_LEN as u64)
        .collect();
    wals.sort();
    wals.pop().unwrap()
}

/// Rewrites the live manifest with `extra` appended as one more record;
/// returns the manifest's path and the new record's offset.
fn append_manifest_edit(fs: &Arc<MemFs>, extra: &VersionEdit) -> (PathBuf, u64) {
    let (path, _) = live_version(fs);
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
        let (_, v) = live_version(fs);
        let level = (1..crate::options::NUM_LEVELS)
            .find(|&l| !v.levels[l].is_empty())
            .unwrap();
        (level as u32, (*v.levels[level][0]).clone())
    };
    // Each bad edit in the language of `version::script`, given a table of
    // a deeper level: its level, number and key range.
    type MakeEdit = fn(u32, u64, &str) -> String;
    let cases: [(&str, MakeEdit, bool); 5] = [
        (
            "edit deletes table 999999 that is not in level 1",
            |_, _, _| "delete L1 999999".into(),
            true,
        ),
        (
            "beyond the last level",
            |_, _, range| format!("add L9 999998 {range}"),
            true,
        ),
        (
            "which is not live",
            |_, _, _| "blob delete 424242".into(),
            true,
        ),
        (
            "appears in two levels",
            |_, n, range| format!("add L0 {n} {range}"),
            false,
        ),
        (
            "overlap in level",
            |level, _, range| format!("add L{level} 999997 {range}"),
            false,
        ),
    ];
    for (needle, make, at_record) in cases {
        let (fs, db) = build_store();
        db.close().unwrap();
        let (level, meta) = table_in_l1(&fs);
        let key = |k: &[u8]| {
            String::from_utf8(crate::format::internal_key::user_key(k).to_vec()).unwrap()
        };
        let range = format!("{}..{}", key(&meta.smallest), key(&meta.largest));
        let edit = crate::version::script::edit(&make(level, meta.number, &range)).unwrap();
        let (path, offset) = append_manifest_edit(&fs, &edit);
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
    let db = open_quiet_l0(
        &fs,
        crate::Settings {
            blob_threshold: Some(0),
            enable_gc: false,
            write_buffer_size: 1 << 20,
            target_file_size: 16 << 10,
            ..crate::Settings::default()
        },
    );
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
    live_version(fs).1
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
        settings: crate::Settings {
            blob_threshold: Some(0),
            enable_gc: false,
            ..crate::Settings::default()
        },
        fs: fs.clone(),
        ..Options::default()
    };
    let db = Db::open(dir(), opts).unwrap();
    db.put(b"k", b"one").unwrap();
    // The snapshot keeps both versions through the flush.
    let snap = db.snapshot().unwrap();
    db.put(b"k", b"two").unwrap();
    db.flush().unwrap();
    drop(snap);
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
            settings: crate::Settings {
                blob_threshold: Some(if round % 2 == 0 { 0 } else { 30 }),
                write_buffer_size: 16 << 10,
                target_file_size: 8 << 10,
                max_bytes_for_level_base: 32 << 10,
                blob_file_size: 8 << 10,
                gc_garbage_ratio: 0.2,
                ..crate::Settings::default()
            },
            fs: fs.clone(),
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

#[test]
fn a_sorted_run_out_of_order_or_range_is_caught() {
    use super::blobs::RunOrder;
    let keys = (b"b".to_vec(), b"m".to_vec());
    let walk = |seq: &[&[u8]]| {
        let mut run = RunOrder::new(&keys);
        seq.iter().map(|k| run.admits(k)).collect::<Vec<_>>()
    };
    assert_eq!(walk(&[b"b", b"c", b"c", b"m"]), [true; 4]);
    assert_eq!(walk(&[b"c", b"b"]), [true, false], "backwards");
    assert_eq!(walk(&[b"a"]), [false], "before the first key");
    assert_eq!(walk(&[b"n"]), [false], "past the last key");
}
