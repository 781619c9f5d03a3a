//! Damaged files are reported as `Error::Corruption` naming the file and the
//! offset of the damaged unit; they never yield wrong data.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{
    current_manifest, files_ending, key, log_record_offsets, scan, small_opts, value,
    wals_with_records, DIR,
};
use tern::io::{FileSystem, MemFs};
use tern::{Db, Error, Options, ReadOptions, WriteBatch, WriteOptions};

const KEYS: u32 = 300;

fn opts(fs: Arc<MemFs>) -> Options {
    small_opts(fs).tune(|s| {
        s.level0_file_num_compaction_trigger = 16;
        s.level0_slowdown_writes_trigger = 32;
        s.level0_stop_writes_trigger = 64;
    })
}

fn put_synced(db: &Db, k: &[u8], v: &[u8]) {
    let mut b = WriteBatch::new();
    b.put(k, v);
    db.write(b, WriteOptions::synced()).unwrap();
}

/// A closed store whose data is all in one table; returns the table's path.
fn store_in_one_table(fs: &Arc<MemFs>) -> PathBuf {
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    for i in 0..KEYS {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    db.close().unwrap();
    let tables = files_ending(fs, DIR, ".sst");
    assert_eq!(tables.len(), 1, "expected one table, found {tables:?}");
    tables.into_iter().next().unwrap()
}

fn file_len(fs: &MemFs, path: &Path) -> u64 {
    fs.file_size(path).unwrap()
}

/// Checks that `err` is a corruption of `file` at the start of a block that
/// contains byte `flipped`.
fn assert_block_corruption(err: &Error, file: &Path, len: u64, flipped: u64) {
    match err {
        Error::Corruption {
            file: f, offset, ..
        } => {
            assert_eq!(f, file, "corruption names the wrong file: {err}");
            assert!(
                *offset < len,
                "offset {offset} is past the end ({len}): {err}"
            );
            assert!(
                *offset <= flipped,
                "offset {offset} is after the damaged byte {flipped}: {err}"
            );
            assert!(
                flipped - *offset < 4 << 10,
                "offset {offset} is not the start of the block holding byte {flipped}: {err}"
            );
        }
        other => panic!("expected Error::Corruption, got {other:?}"),
    }
}

#[test]
fn get_from_a_damaged_table_block_reports_corruption_at_the_block() {
    let fs = MemFs::new();
    let table = store_in_one_table(&fs);
    let len = file_len(&fs, &table);
    let flipped = len / 2;
    fs.corrupt_byte(&table, flipped, 0x5a).unwrap();

    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    let mut corrupt = 0;
    for i in 0..KEYS {
        match db.get(&key(i)) {
            Ok(v) => assert_eq!(v, Some(value(i, 0)), "key {i} read back wrong"),
            Err(e) => {
                assert_block_corruption(&e, &table, len, flipped);
                corrupt += 1;
            }
        }
    }
    assert!(corrupt > 0, "no read noticed the damaged byte at {flipped}");
    assert!(
        corrupt < KEYS,
        "one damaged block made every key unreadable"
    );
}

#[test]
fn iterator_over_a_damaged_table_block_reports_corruption_in_status() {
    let fs = MemFs::new();
    let table = store_in_one_table(&fs);
    let len = file_len(&fs, &table);
    let flipped = len / 2;
    fs.corrupt_byte(&table, flipped, 0x5a).unwrap();

    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        assert_eq!(it.key(), key(n), "entry {n}");
        assert_eq!(it.value(), value(n, 0), "entry {n}");
        n += 1;
        it.next();
    }
    assert!(
        n < KEYS,
        "iterated over every key although a block is damaged"
    );
    let err = it.status().expect_err("iterator stopped without an error");
    assert_block_corruption(&err, &table, len, flipped);
}

#[test]
fn damaged_table_footer_reports_corruption_not_missing_keys() {
    let fs = MemFs::new();
    let table = store_in_one_table(&fs);
    let len = file_len(&fs, &table);
    fs.corrupt_byte(&table, len - 20, 0xff).unwrap();
    // Tables may be opened lazily; either open or the first read reports it.
    let db = match Db::open(DIR, opts(fs.clone())) {
        Ok(db) => db,
        Err(e) => {
            assert!(e.is_corruption(), "open failed with {e:?}");
            return;
        }
    };
    match db.get(&key(3)) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, table);
            assert!(offset < len);
        }
        other => panic!("expected Error::Corruption, got {other:?}"),
    }
}

/// A crashed store whose unflushed writes are one synced WAL record each;
/// returns the file system after the crash and its WAL's path.
fn crashed_with_wal(writes: u32) -> (Arc<MemFs>, PathBuf) {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    for i in 0..writes {
        put_synced(&db, &key(i), &value(i, 0));
    }
    let crashed = fs.crashed_copy();
    drop(db);
    let wals = wals_with_records(&crashed, DIR);
    assert_eq!(
        wals.len(),
        1,
        "expected one WAL with records, found {wals:?}"
    );
    let wal = wals.into_iter().next().unwrap();
    (crashed, wal)
}

/// Point-in-time recovery: damage in the middle of the newest WAL (which a
/// power loss can leave when a later page reached the disk and an earlier
/// one did not) ends the log there; the records before it are recovered and
/// the dropped bytes are counted. Damage in an older WAL is corruption
/// (`db::open`'s tests).
#[test]
fn damaged_middle_record_of_the_newest_wal_recovers_the_prefix_before_it() {
    let (fs, wal) = crashed_with_wal(10);
    let data = fs.read_all(&wal).unwrap();
    let records = log_record_offsets(&data);
    assert_eq!(records.len(), 10);
    let record = records[5];
    // A byte of the payload (past checksum, length and type).
    fs.corrupt_byte(&wal, record + 9 + 3, 0x20).unwrap();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    let want: Vec<_> = (0..5).map(|i| (key(i), value(i, 0))).collect();
    assert_eq!(scan(&db), want);
    assert_eq!(
        db.stats().wal_bytes_dropped_at_recovery,
        data.len() as u64 - record
    );
}

#[test]
fn torn_wal_tail_is_dropped_and_earlier_writes_recovered() {
    let (fs, wal) = crashed_with_wal(10);
    let len = file_len(&fs, &wal);
    fs.truncate(&wal, len - 3).unwrap();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    let want: Vec<_> = (0..9).map(|i| (key(i), value(i, 0))).collect();
    assert_eq!(scan(&db), want);
}

#[test]
fn writes_after_torn_tail_recovery_survive_the_next_crash() {
    let (fs, wal) = crashed_with_wal(10);
    let len = file_len(&fs, &wal);
    fs.truncate(&wal, len - 3).unwrap();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    for i in 100..110 {
        put_synced(&db, &key(i), &value(i, 1));
    }
    let crashed = fs.crashed_copy();
    drop(db);
    let db = Db::open(DIR, opts(crashed)).unwrap();
    let want: Vec<_> = (0..9)
        .map(|i| (key(i), value(i, 0)))
        .chain((100..110).map(|i| (key(i), value(i, 1))))
        .collect();
    assert_eq!(scan(&db), want);
}

#[test]
fn damaged_manifest_record_fails_open_with_corruption_naming_the_manifest() {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    for round in 0..3 {
        for i in 0..50 {
            db.put(&key(i), &value(i, round)).unwrap();
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
    drop(db);
    let manifest = current_manifest(&fs, DIR);
    let records = log_record_offsets(&fs.read_all(&manifest).unwrap());
    assert!(records.len() >= 2, "manifest has {} records", records.len());
    fs.corrupt_byte(&manifest, records[0] + 9 + 1, 0x01)
        .unwrap();
    match Db::open(DIR, opts(fs.clone())) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, manifest);
            assert_eq!(offset, records[0]);
        }
        other => panic!("expected Error::Corruption, got {other:?}"),
    }
}

#[test]
fn garbage_current_fails_open_with_corruption() {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    db.put(b"a", b"1").unwrap();
    db.close().unwrap();
    drop(db);
    let current = Path::new(DIR).join("CURRENT");
    let mut f = fs.create(&current).unwrap();
    f.append(b"\x00garbage\xff").unwrap();
    f.sync().unwrap();
    drop(f);
    match Db::open(DIR, opts(fs.clone())) {
        Err(Error::Corruption { file, .. }) => assert_eq!(file, current),
        other => panic!("expected Error::Corruption, got {other:?}"),
    }
}

/// Flips bytes all over a table: every read returns the right value or a
/// corruption of that table, never a wrong value and never "not found".
#[test]
fn no_damaged_table_byte_yields_wrong_data() {
    let base = MemFs::new();
    let table = store_in_one_table(&base);
    let len = file_len(&base, &table);
    let step = (len / 150).max(1) as usize;
    let mut noticed = 0;
    for pos in (0..len).step_by(step) {
        let fs = base.crashed_copy();
        fs.corrupt_byte(&table, pos, 0x80).unwrap();
        let db = match Db::open(DIR, opts(fs.clone())) {
            Ok(db) => db,
            Err(Error::Corruption { file, .. }) if file == table => continue,
            Err(e) => panic!("byte {pos}: open failed with {e:?}"),
        };
        let mut corrupt = false;
        for i in (0..KEYS).step_by(3) {
            match db.get(&key(i)) {
                Ok(v) => assert_eq!(v, Some(value(i, 0)), "byte {pos}: key {i}"),
                Err(Error::Corruption { file, .. }) if file == table => corrupt = true,
                Err(e) => panic!("byte {pos}: key {i}: {e:?}"),
            }
        }
        noticed += usize::from(corrupt);
    }
    println!("{noticed} damaged bytes noticed by reads");
    assert!(noticed > 0);
}

/// Flips every byte of the newest WAL in turn. A damaged file header is a
/// corruption at offset 0; damage anywhere in a record ends recovery at that
/// record (point-in-time recovery, `docs/format/wal.md`), so exactly the
/// writes before it come back. Values are never wrong.
#[test]
fn no_damaged_wal_byte_yields_wrong_data() {
    let writes = 8;
    let (base, wal) = crashed_with_wal(writes);
    let data = base.read_all(&wal).unwrap();
    let records = log_record_offsets(&data);
    assert_eq!(records.len(), writes as usize);
    let (mut corrupt, mut prefix) = (0, 0);
    for pos in 0..data.len() as u64 {
        let record = records.iter().rposition(|&r| r <= pos);
        let fs = base.crashed_copy();
        fs.corrupt_byte(&wal, pos, 0x10).unwrap();
        match Db::open(DIR, opts(fs.clone())) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, wal, "byte {pos}");
                assert_eq!((record, offset), (None, 0), "byte {pos}");
                corrupt += 1;
            }
            Err(e) => panic!("byte {pos}: open failed with {e:?}"),
            Ok(db) => {
                let rows = scan(&db);
                let damaged =
                    record.unwrap_or_else(|| panic!("byte {pos}: header damage not reported"));
                assert_eq!(
                    rows.len(),
                    damaged,
                    "byte {pos}: recovered up to the damaged record"
                );
                for (i, row) in rows.iter().enumerate() {
                    let i = i as u32;
                    assert_eq!(row, &(key(i), value(i, 0)), "byte {pos}");
                }
                prefix += 1;
            }
        }
    }
    println!("{corrupt} corruptions, {prefix} prefix recoveries");
    assert!(corrupt > 0 && prefix > 0);
}

/// A compaction that reads a damaged block must fail, not write tables
/// without the block's keys.
#[test]
fn compaction_over_a_damaged_table_fails_instead_of_dropping_keys() {
    let fs = MemFs::new();
    let table = store_in_one_table(&fs);
    let len = file_len(&fs, &table);
    let flipped = len / 2;
    {
        // A second, overlapping table so the compaction has to merge.
        let db = Db::open(DIR, opts(fs.clone())).unwrap();
        for i in (0..KEYS).step_by(10) {
            db.put(&key(i), &value(i, 1)).unwrap();
        }
        db.close().unwrap();
    }
    fs.corrupt_byte(&table, flipped, 0x5a).unwrap();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    let err = db
        .compact_range(None, None)
        .expect_err("compaction read a damaged block without noticing");
    assert_block_corruption(&err, &table, len, flipped);
    // Nothing was installed: the damaged keys still report corruption.
    let mut corrupt = 0;
    for i in 0..KEYS {
        let want = value(i, u32::from(i % 10 == 0));
        match db.get(&key(i)) {
            Ok(v) => assert_eq!(v, Some(want), "key {i}"),
            Err(e) => {
                assert_block_corruption(&e, &table, len, flipped);
                corrupt += 1;
            }
        }
    }
    assert!(corrupt > 0, "the damaged keys vanished or were replaced");
}

/// A store holding keys 0..50, each written synced, closed cleanly.
fn closed_store_of_50_synced_writes() -> Arc<MemFs> {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    for i in 0..50 {
        put_synced(&db, &key(i), &value(i, 0));
    }
    db.close().unwrap();
    fs
}

/// After a clean close the last manifest record (the flush that made the
/// WAL unnecessary) is complete and synced, so damage to it cannot be a torn
/// write: open must report it or still find the data, never come up empty.
#[test]
fn damaged_last_manifest_record_is_not_silently_dropped() {
    let fs = closed_store_of_50_synced_writes();
    let manifest = current_manifest(&fs, DIR);
    let records = log_record_offsets(&fs.read_all(&manifest).unwrap());
    let last = *records.last().unwrap();
    fs.corrupt_byte(&manifest, last + 9 + 1, 0x01).unwrap();
    match Db::open(DIR, opts(fs.clone())) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, manifest);
            assert_eq!(offset, last);
        }
        Err(e) => panic!("expected Error::Corruption, got {e:?}"),
        Ok(db) => {
            let rows = scan(&db);
            assert_eq!(rows.len(), 50, "open succeeded but lost the flushed data");
            let want: Vec<_> = (0..50).map(|i| (key(i), value(i, 0))).collect();
            assert_eq!(rows, want);
        }
    }
}

/// Regression (found by `tern stress --sim`, seed 1341): power loss during
/// a manifest append can persist a later page of the unsynced record while
/// an earlier one never reached the disk and reads as zeros. The record was
/// never synced, so nothing depends on it; open refused the store with
/// "log record checksum mismatch" instead of dropping it.
#[test]
fn manifest_record_torn_by_out_of_order_page_writeback_is_dropped_not_corruption() {
    let fs = closed_store_of_50_synced_writes();
    let manifest = current_manifest(&fs, DIR);
    let synced = fs.file_size(&manifest).unwrap() as usize;
    // An unsynced record spanning the next page boundary, whose first page
    // was lost and whose second survived.
    fs.rewrite(&manifest, |data| {
        tern::internals::format::log_record::encode_record(data, &[7u8; 6000]);
        let page_end = (synced / 4096 + 1) * 4096;
        data[synced..page_end].fill(0);
    })
    .unwrap();

    let report = tern::tools::check::check_store(Path::new(DIR), fs.clone()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("torn tail") && w.contains(&format!("offset {synced}"))),
        "{:?}",
        report.warnings
    );
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    let want: Vec<_> = (0..50).map(|i| (key(i), value(i, 0))).collect();
    assert_eq!(scan(&db), want);
}

/// Regression: a damaged length field in a manifest record made it run
/// past the end of the file, which counted as a torn tail: open silently
/// dropped every later (synced) edit and then deleted the tables they had
/// added as orphans. A record followed by a valid one was synced, so its
/// damage is corruption.
#[test]
fn damaged_length_of_a_middle_manifest_record_is_corruption_not_a_torn_tail() {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    for round in 0..4 {
        for i in 0..20 {
            db.put(&key(i + 20 * round), &value(i, round)).unwrap();
        }
        db.flush().unwrap();
    }
    drop(db);
    let manifest = current_manifest(&fs, DIR);
    let records = log_record_offsets(&fs.read_all(&manifest).unwrap());
    assert!(records.len() >= 4, "{records:?}");
    let victim = records[1];
    // The length field's high byte: the record now runs past the end.
    fs.corrupt_byte(&manifest, victim + 7, 0x40).unwrap();
    match Db::open(DIR, opts(fs.clone())) {
        Err(Error::Corruption { file, offset, .. }) => {
            assert_eq!((file, offset), (manifest, victim))
        }
        Err(e) => panic!("expected Error::Corruption, got {e:?}"),
        Ok(db) => panic!("opened with {} of 80 keys", scan(&db).len()),
    }
}

/// A blob reference that does not decode is a corruption of the table that
/// holds it (file and block), for point reads and for iterators, never one
/// of a placeholder path.
#[test]
fn malformed_blob_reference_names_its_table() {
    use tern::internals::format::internal_key::{self, ValueKind};
    use tern::internals::iter::InternalIterator;
    use tern::internals::sst::{Table, TableBuilder, TableOptions};

    let fs = MemFs::new();
    let opts = opts(fs.clone()).tune(|s| {
        s.blob_threshold = Some(32);
        s.compression_per_level = vec![tern::Compression::None];
    });
    let db = Db::open(DIR, opts.clone()).unwrap();
    db.put(b"big", &[7u8; 200]).unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    let tables = files_ending(&fs, DIR, ".sst");
    assert_eq!(tables.len(), 1);
    let path = tables[0].clone();

    // Rebuild the table with the reference's bytes replaced by bytes of the
    // same length that do not decode (an unterminated varint).
    let fsr: tern::io::FsRef = fs.clone();
    let table = Arc::new(Table::open(&fsr, &path, 0, None).unwrap());
    let mut entries = Vec::new();
    let mut it = table.iter();
    it.seek_to_first();
    while it.valid() {
        entries.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    drop(it);
    drop(table);
    let mut b = TableBuilder::new(
        fs.create(&path).unwrap(),
        path.clone(),
        TableOptions {
            compression: tern::Compression::None,
            ..TableOptions::default()
        },
    );
    let mut replaced = 0;
    for (k, v) in &entries {
        if internal_key::parse(k).unwrap().kind == ValueKind::BlobRef {
            b.add(k, &vec![0xff; v.len()]).unwrap();
            replaced += 1;
        } else {
            b.add(k, v).unwrap();
        }
    }
    assert_eq!(replaced, 1);
    b.finish().unwrap();

    let db = Db::open(DIR, opts).unwrap();
    let names_table = |e: Error| match e {
        Error::Corruption { file, reason, .. } => {
            assert_eq!(file, path, "{reason}");
            assert!(reason.contains("malformed blob reference"), "{reason}");
        }
        other => panic!("expected a corruption of {}, got {other}", path.display()),
    };
    names_table(db.get(b"big").unwrap_err());
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    assert!(!it.valid());
    names_table(it.status().unwrap_err());
}
