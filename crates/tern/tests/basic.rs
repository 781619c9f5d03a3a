//! Everyday behaviour: writes, reads, iteration, snapshots, reopen.
#![allow(clippy::unwrap_used)]

use tern::{Db, Options, ReadOptions, WriteBatch, WriteOptions};

fn small_opts() -> Options {
    Options {
        settings: tern::Settings {
            write_buffer_size: 64 << 10,
            target_file_size: 32 << 10,
            max_bytes_for_level_base: 256 << 10,
            ..tern::Settings::default()
        },
        ..Options::default()
    }
}

#[test]
fn put_get_delete_across_flush_compaction_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    for i in 0..5000u32 {
        db.put(
            format!("key{i:06}").as_bytes(),
            format!("value{i}").repeat(5).as_bytes(),
        )
        .unwrap();
    }
    for i in (0..5000u32).step_by(3) {
        db.delete(format!("key{i:06}").as_bytes()).unwrap();
    }
    let check = |db: &Db| {
        for i in 0..5000u32 {
            let got = db.get(format!("key{i:06}").as_bytes()).unwrap();
            if i % 3 == 0 {
                assert_eq!(got, None, "key {i}");
            } else {
                assert_eq!(
                    got,
                    Some(format!("value{i}").repeat(5).into_bytes()),
                    "key {i}"
                );
            }
        }
    };
    check(&db);
    db.flush().unwrap();
    check(&db);
    db.compact_range(None, None).unwrap();
    check(&db);
    let stats = db.stats();
    assert!(stats.flushes > 0);
    assert!(stats.compactions > 0);
    db.close().unwrap();
    assert!(matches!(db.get(b"key000001"), Err(tern::Error::Closed)));
    drop(db);
    let db = Db::open(dir.path(), small_opts()).unwrap();
    check(&db);
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next();
    }
    it.status().unwrap();
    assert_eq!(n, 5000 - 1667);
}

#[test]
fn snapshot_sees_old_state() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    let snap = db.snapshot().unwrap();
    db.put(b"a", b"2").unwrap();
    let mut b = WriteBatch::new();
    b.delete(b"a").put(b"b", b"3");
    db.write(b, WriteOptions::synced()).unwrap();
    db.compact_range(None, None).unwrap();
    let ro = ReadOptions {
        snapshot: Some(&snap),
        ..Default::default()
    };
    assert_eq!(db.get_opt(b"a", &ro).unwrap(), Some(b"1".to_vec()));
    assert_eq!(db.get_opt(b"b", &ro).unwrap(), None);
    assert_eq!(db.get(b"a").unwrap(), None);
    assert_eq!(db.get(b"b").unwrap(), Some(b"3".to_vec()));
}

struct DropExpired;

impl tern::compaction::CompactionFilter for DropExpired {
    fn name(&self) -> &str {
        "drop-expired"
    }
    fn filter(
        &self,
        _level: usize,
        _key: &[u8],
        value: tern::compaction::FilterValue<'_>,
    ) -> tern::compaction::FilterDecision {
        if value.bytes().starts_with(b"expired") {
            tern::compaction::FilterDecision::Remove
        } else {
            tern::compaction::FilterDecision::Keep
        }
    }
}

#[test]
fn compaction_filter_removes_values_without_resurrecting_older_versions() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compaction_filter: Some(std::sync::Arc::new(DropExpired)),
        ..small_opts().tune(|s| {
            // Static levels: L0 compacts into L1 while the old version sits in L6.
            s.dynamic_level_bytes = false;
        })
    };
    let db = Db::open(dir.path(), opts).unwrap();
    db.put(b"a", b"old").unwrap();
    db.put(b"b", b"keep").unwrap();
    db.compact_range(None, None).unwrap();
    db.put(b"a", b"expired-new").unwrap();
    db.flush().unwrap();
    // L0 → base level: "a" is filtered while "old" still sits below.
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get(b"a").unwrap(), None);
    assert_eq!(db.get(b"b").unwrap(), Some(b"keep".to_vec()));
}

#[test]
fn sync_wal_makes_unsynced_writes_survive_a_power_loss() {
    let fs = tern::io::MemFs::new();
    let opts = Options {
        fs: fs.clone(),
        ..small_opts()
    };
    let db = Db::open("/db", opts.clone()).unwrap();
    db.put(b"unsynced", b"1").unwrap();
    db.sync_wal().unwrap();
    db.put(b"after", b"2").unwrap();
    let survivor = fs.crashed_copy();
    drop(db);
    let db = Db::open(
        "/db",
        Options {
            fs: survivor,
            ..opts
        },
    )
    .unwrap();
    assert_eq!(db.get(b"unsynced").unwrap(), Some(b"1".to_vec()));
}

#[test]
fn close_releases_the_directory_lock_before_the_handle_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let first = Db::open(dir.path(), small_opts()).unwrap();
    first.put(b"k", b"v").unwrap();
    assert!(matches!(
        Db::open(dir.path(), small_opts()),
        Err(tern::Error::Busy(_))
    ));
    first.close().unwrap();
    let second = Db::open(dir.path(), small_opts()).unwrap();
    assert_eq!(second.get(b"k").unwrap(), Some(b"v".to_vec()));
    drop(first);
    assert_eq!(second.get(b"k").unwrap(), Some(b"v".to_vec()));
}

/// Read-ahead is a hint: naming keys (present, deleted, absent, in the
/// memtable or in tables, more than it takes) changes no read.
#[test]
fn read_ahead_changes_no_result() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    let key = |i: u32| format!("key{i:05}").into_bytes();
    for i in 0..400 {
        db.put(&key(i), format!("old-{i}").as_bytes()).unwrap();
    }
    db.flush().unwrap();
    // Three writes each: a chain of versions in the memtable, whose newest
    // the third pass of read-ahead names.
    for round in 0..3 {
        for i in (0..400).step_by(2) {
            let v = if round == 2 {
                format!("new-{i}")
            } else {
                format!("mid-{round}-{i}")
            };
            db.put(&key(i), v.as_bytes()).unwrap();
        }
    }
    for i in (0..400).step_by(5) {
        db.delete(&key(i)).unwrap();
    }
    let expect = |i: u32| {
        if i >= 400 || i % 5 == 0 {
            None
        } else if i % 2 == 0 {
            Some(format!("new-{i}").into_bytes())
        } else {
            Some(format!("old-{i}").into_bytes())
        }
    };
    for start in [0u32, 7, 390] {
        let keys: Vec<Vec<u8>> = (start..start + 2 * tern::READ_AHEAD_KEYS as u32)
            .map(key)
            .collect();
        {
            let mut ahead = db.read_ahead();
            for k in &keys {
                ahead.key(k);
            }
            assert_eq!(ahead.len(), tern::READ_AHEAD_KEYS);
        }
        for (i, k) in (start..).zip(&keys) {
            assert_eq!(db.get(k).unwrap(), expect(i), "key {i}");
        }
        // Reads through the read-ahead's view find the same.
        let mut ahead = db.read_ahead();
        for k in &keys {
            ahead.key(k);
        }
        ahead.prefetch();
        for (i, k) in (start..).zip(&keys) {
            let got = db.get_if_cached_in(&ahead, k, false).unwrap();
            assert_eq!(got, Some(expect(i)), "key {i} through the view");
        }
    }
    // Nothing named: nothing to do.
    assert!(db.read_ahead().is_empty());
}

/// Reads through a read-ahead's view see the store as of when it was
/// made: neither a later write nor a later flush (a new memtable, a new
/// table) changes what they find.
#[test]
fn reads_through_a_read_ahead_see_the_store_as_of_its_making() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_opts()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.put(b"gone", b"x").unwrap();
    let mut ahead = db.read_ahead();
    ahead.key(b"a");
    ahead.prefetch();
    db.put(b"a", b"2").unwrap();
    db.delete(b"gone").unwrap();
    db.put(b"new", b"n").unwrap();
    db.flush().unwrap();
    db.put(b"newer", b"m").unwrap();
    let read = |k: &[u8]| db.get_if_cached_in(&ahead, k, false).unwrap();
    assert_eq!(read(b"a"), Some(Some(b"1".to_vec())));
    assert_eq!(read(b"gone"), Some(Some(b"x".to_vec())));
    assert_eq!(read(b"new"), Some(None));
    assert_eq!(read(b"newer"), Some(None));
    // Reads that may wait see the same.
    let read = |k: &[u8]| db.get_in(&ahead, k).unwrap();
    assert_eq!(read(b"a"), Some(b"1".to_vec()));
    assert_eq!(read(b"gone"), Some(b"x".to_vec()));
    assert_eq!(read(b"new"), None);
    assert_eq!(read(b"newer"), None);
    drop(ahead);
    // A new view sees everything (once the new table's blocks are cached:
    // these reads never wait on the device).
    for k in [&b"a"[..], b"gone", b"new", b"newer"] {
        db.get(k).unwrap();
    }
    let ahead = db.read_ahead();
    let read = |k: &[u8]| db.get_if_cached_in(&ahead, k, false).unwrap();
    assert_eq!(read(b"a"), Some(Some(b"2".to_vec())));
    assert_eq!(read(b"gone"), Some(None));
    assert_eq!(read(b"new"), Some(Some(b"n".to_vec())));
    assert_eq!(read(b"newer"), Some(Some(b"m".to_vec())));
    let read = |k: &[u8]| db.get_in(&ahead, k).unwrap();
    assert_eq!(read(b"a"), Some(b"2".to_vec()));
    assert_eq!(read(b"gone"), None);
}

/// With `bytes_per_sync`, flush, compaction and GC output start their
/// writeback as they grow; what they write reads back the same, after a
/// reopen too.
#[test]
fn output_written_back_as_it_grows_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = small_opts();
    opts.settings.bytes_per_sync = 4096;
    opts.settings.blob_threshold = Some(256);
    let value = |i: u32, round: u32| format!("{round}-{i:0>600}").into_bytes();
    let key = |i: u32| format!("key{i:05}").into_bytes();
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for round in 0..3 {
            for i in 0..500 {
                db.put(&key(i), &value(i, round)).unwrap();
            }
            db.flush().unwrap();
        }
        db.compact_range(None, None).unwrap();
        db.collect_garbage().unwrap();
        db.wait_for_background().unwrap();
        for i in 0..500 {
            assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 2)), "key {i}");
        }
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..500 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 2)), "key {i}");
    }
}

/// A read-ahead reads only the store that made it: another store's file
/// numbers mean other files.
#[test]
fn a_read_ahead_of_another_store_is_refused() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = Db::open(a.path(), small_opts()).unwrap();
    let second = Db::open(b.path(), small_opts()).unwrap();
    first.put(b"k", b"first").unwrap();
    second.put(b"k", b"second").unwrap();
    let view = first.read_ahead();
    assert!(matches!(
        second.get_in(&view, b"k"),
        Err(tern::Error::InvalidArgument(_))
    ));
    assert!(matches!(
        second.get_if_cached_in(&view, b"k", false),
        Err(tern::Error::InvalidArgument(_))
    ));
    assert_eq!(first.get_in(&view, b"k").unwrap(), Some(b"first".to_vec()));
}
