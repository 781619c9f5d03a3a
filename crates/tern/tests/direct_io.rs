//! A store on the local disk with direct I/O for reads and for flush,
//! compaction and GC: every write reads back the same through the
//! memtables, tables, blob files, GC's relocations and a reopen.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;

use tern::io::FileSystem;
use tern::{Db, Options, ReadOptions, Settings};

fn direct_settings() -> Settings {
    Settings {
        use_direct_reads: true,
        use_direct_io_for_flush_and_compaction: true,
        // Separated values of several sizes, inline ones below 100 bytes.
        blob_threshold: Some(100),
        write_buffer_size: 256 << 10,
        target_file_size: 64 << 10,
        blob_file_size: 64 << 10,
        block_size: 1024,
        gc_garbage_ratio: 0.2,
        ..Settings::default()
    }
}

/// A store directory on the build's disk (`/tmp` may be tmpfs, which has
/// no direct I/O); `None` where that disk has none either.
fn store_dir() -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let probe = dir.path().join("probe");
    std::fs::write(&probe, b"x").unwrap();
    let supported = tern::io::PosixFs.open_direct(&probe).is_ok();
    std::fs::remove_file(&probe).unwrap();
    if !supported {
        eprintln!("skipped: {} has no direct I/O", dir.path().display());
        return None;
    }
    Some(dir)
}

fn value(i: u32, round: u32) -> Vec<u8> {
    // 40 bytes (inline) to 3 KiB, never a multiple of the 4 KiB blocks.
    let len = 40 + (i as usize * 97 + round as usize * 13) % 3000;
    let mut v = format!("{i}/{round}/").into_bytes();
    v.resize(len, b'a' + (i % 26) as u8);
    v
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, when: &str) {
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{when}: get {k:?}");
    }
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut seen = model.iter();
    while it.valid() {
        let (k, v) = seen.next().unwrap_or_else(|| panic!("{when}: extra key"));
        assert_eq!(it.key(), &k[..], "{when}: scan key");
        assert_eq!(it.value(), &v[..], "{when}: scan value of {k:?}");
        it.next();
    }
    assert!(seen.next().is_none(), "{when}: scan ended early");
}

fn open(dir: &Path) -> Db {
    Db::open(dir, Options::new(direct_settings())).unwrap()
}

#[test]
fn a_store_with_direct_io_reads_back_every_write_through_gc_and_reopen() {
    let Some(dir) = store_dir() else {
        return;
    };
    let mut model = BTreeMap::new();
    {
        let db = open(dir.path());
        for round in 0..4u32 {
            // Each round overwrites most keys and deletes a few: garbage
            // for GC, tombstones for compaction.
            for i in 0..3000u32 {
                let k = format!("key{:06}", (i * 7919) % 3000).into_bytes();
                if round > 0 && i % 11 == 0 {
                    db.delete(&k).unwrap();
                    model.remove(&k);
                } else if round == 0 || i % 4 != 0 {
                    let v = value(i, round);
                    db.put(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            db.flush().unwrap();
        }
        check(&db, &model, "after writing");
        // Nothing below the engine caches direct reads: a second point read
        // of a separated value finds the record the first left in the block
        // cache.
        let before = db.stats().blob_record_cache_hits;
        for (k, v) in model.iter().filter(|(_, v)| v.len() >= 100).take(50) {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
        let hits = db.stats().blob_record_cache_hits - before;
        assert_eq!(hits, 50, "second reads that found their record");
        db.compact_range(None, None).unwrap();
        db.wait_for_background().unwrap();
        db.collect_garbage().unwrap();
        db.wait_for_background().unwrap();
        let stats = db.stats();
        assert!(
            stats.flush_bytes_written > 0 && stats.compaction_bytes_written > 0,
            "{stats:?}"
        );
        assert!(
            stats.gc_records_relocated > 0,
            "GC relocated nothing: {stats:?}"
        );
        check(&db, &model, "after compaction and GC");
        db.close().unwrap();
    }
    let db = open(dir.path());
    check(&db, &model, "after reopening");
}

/// With direct reads the block cache is the only memory that holds
/// values, so by default values move into sorted runs once they outgrow
/// it, not the machine's RAM.
#[test]
fn with_direct_reads_values_move_into_runs_once_they_outgrow_the_block_cache() {
    let Some(dir) = store_dir() else { return };
    let settings = Settings {
        block_cache_capacity: 256 << 10,
        disable_auto_compactions: true,
        enable_gc: false,
        ..direct_settings()
    };
    let db = Db::open(dir.path(), Options::new(settings)).unwrap();
    let mut model = BTreeMap::new();
    // 400 values of 1 KiB or more: over 400 KiB, past the cache.
    for i in 0..400u32 {
        let mut v = value(i, 0);
        v.resize(v.len().max(1024), b'v');
        db.put(format!("k{i:05}").as_bytes(), &v).unwrap();
        model.insert(format!("k{i:05}").into_bytes(), v);
        if i % 100 == 99 {
            db.flush().unwrap();
        }
    }
    db.compact_range(None, None).unwrap();
    check(&db, &model, "after the compaction");
    assert_eq!(db.stats().values_moved, 400);
}
