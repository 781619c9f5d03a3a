//! Bad input from callers is an error, never a panic or a silent success.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{scan, DIR};
use tern::io::MemFs;
use tern::{Db, Error, Options, ReadOptions, WriteBatch, WriteOptions};

fn mem_opts() -> Options {
    Options {
        settings: tern::Settings {
            write_buffer_size: 64 << 10,
            max_key_size: 100,
            max_value_size: 1000,
            ..tern::Settings::default()
        },
        fs: MemFs::new(),
        ..Options::default()
    }
}

fn open() -> Db {
    Db::open(DIR, mem_opts()).unwrap()
}

#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(r: tern::Result<T>) {
    match r {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("expected Error::InvalidArgument, got {other:?}"),
    }
}

#[track_caller]
fn assert_closed<T: std::fmt::Debug>(r: tern::Result<T>) {
    match r {
        Err(Error::Closed) => {}
        other => panic!("expected Error::Closed, got {other:?}"),
    }
}

fn batch_put(k: &[u8], v: &[u8]) -> WriteBatch {
    let mut b = WriteBatch::new();
    b.put(k, v);
    b
}

// ------------------------------------------------------------------ keys

#[test]
fn empty_key_is_rejected_by_put() {
    let db = open();
    assert_invalid(db.put(b"", b"v"));
    assert!(scan(&db).is_empty());
}

#[test]
fn empty_key_is_rejected_by_get() {
    assert_invalid(open().get(b""));
}

#[test]
fn empty_key_is_rejected_by_delete() {
    assert_invalid(open().delete(b""));
}

#[test]
fn empty_key_is_rejected_by_a_batch() {
    let db = open();
    assert_invalid(db.write(batch_put(b"", b"v"), WriteOptions::default()));
    let mut b = WriteBatch::new();
    b.delete(b"");
    assert_invalid(db.write(b, WriteOptions::synced()));
}

#[test]
fn batch_with_one_bad_key_applies_nothing() {
    let db = open();
    let mut b = WriteBatch::new();
    b.put(b"good", b"1").put(b"", b"2").put(b"also-good", b"3");
    assert_invalid(db.write(b, WriteOptions::default()));
    assert_eq!(db.get(b"good").unwrap(), None);
    assert_eq!(db.get(b"also-good").unwrap(), None);
}

#[test]
fn key_over_max_key_size_is_rejected() {
    let db = open();
    let big = vec![b'k'; 101];
    assert_invalid(db.put(&big, b"v"));
    assert_invalid(db.get(&big));
    assert_invalid(db.delete(&big));
    assert_invalid(db.write(batch_put(&big, b"v"), WriteOptions::default()));
    assert!(scan(&db).is_empty());
}

#[test]
fn key_of_exactly_max_key_size_works() {
    let db = open();
    let k = vec![b'k'; 100];
    db.put(&k, b"v").unwrap();
    assert_eq!(db.get(&k).unwrap(), Some(b"v".to_vec()));
    db.flush().unwrap();
    assert_eq!(db.get(&k).unwrap(), Some(b"v".to_vec()));
}

// ---------------------------------------------------------------- values

#[test]
fn value_over_max_value_size_is_rejected() {
    let db = open();
    assert_invalid(db.put(b"k", &[7u8; 1001]));
    assert_invalid(db.write(batch_put(b"k", &[7u8; 1001]), WriteOptions::synced()));
    assert_eq!(db.get(b"k").unwrap(), None);
}

#[test]
fn value_of_exactly_max_value_size_works_across_flush_and_reopen() {
    let opts = mem_opts();
    let v: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    {
        let db = Db::open(DIR, opts.clone()).unwrap();
        db.put(b"k", &v).unwrap();
        assert_eq!(db.get(b"k").unwrap(), Some(v.clone()));
        db.flush().unwrap();
        assert_eq!(db.get(b"k").unwrap(), Some(v.clone()));
        db.close().unwrap();
    }
    let db = Db::open(DIR, opts).unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(v));
}

#[test]
fn empty_value_is_stored_and_differs_from_absent() {
    let db = open();
    db.put(b"k", b"").unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(Vec::new()));
    db.flush().unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(Vec::new()));
}

// ---------------------------------------------------------- binary keys

#[test]
fn binary_keys_with_zero_and_ff_bytes_work() {
    let opts = mem_opts();
    let keys: Vec<Vec<u8>> = vec![
        vec![0x00],
        vec![0x00, 0x00],
        vec![0x00, 0xff, 0x00],
        vec![0x01],
        vec![0x7f, 0x00],
        vec![0xff],
        vec![0xff, 0x00],
        vec![0xff, 0xff],
        vec![0xff, 0xff, 0xff, 0xff],
    ];
    let expected: Vec<(Vec<u8>, Vec<u8>)> = keys
        .iter()
        .map(|k| (k.clone(), [b"v".as_slice(), k].concat()))
        .collect();
    {
        let db = Db::open(DIR, opts.clone()).unwrap();
        // Inserted in reverse so order comes from the engine, not the test.
        for (k, v) in expected.iter().rev() {
            db.put(k, v).unwrap();
        }
        assert_eq!(scan(&db), expected, "memtable");
        db.flush().unwrap();
        assert_eq!(scan(&db), expected, "table");
        for (k, v) in &expected {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "key {k:02x?}");
        }
        assert_eq!(db.get(&[0x00, 0x01]).unwrap(), None);
        db.close().unwrap();
    }
    let db = Db::open(DIR, opts).unwrap();
    assert_eq!(scan(&db), expected, "after reopen");
    let mut it = db
        .iter(ReadOptions {
            lower_bound: Some(vec![0x00, 0xff]),
            upper_bound: Some(vec![0xff, 0xff]),
            ..Default::default()
        })
        .unwrap();
    it.seek_to_first();
    let mut got = Vec::new();
    while it.valid() {
        got.push(it.key().to_vec());
        it.next();
    }
    it.status().unwrap();
    assert_eq!(got, keys[2..7].to_vec());
}

// ---------------------------------------------------------------- closed

#[test]
fn every_call_after_close_returns_closed() {
    let db = open();
    db.put(b"a", b"1").unwrap();
    db.close().unwrap();
    assert_closed(db.put(b"a", b"2"));
    assert_closed(db.get(b"a"));
    assert_closed(db.get_opt(b"a", &ReadOptions::default()));
    assert_closed(db.delete(b"a"));
    assert_closed(db.write(batch_put(b"b", b"1"), WriteOptions::synced()));
    assert_closed(db.snapshot());
    assert_closed(db.iter(ReadOptions::default()).map(|_| ()));
    assert_closed(db.flush());
    assert_closed(db.compact_range(None, None));
    assert_closed(db.wait_for_background());
}

#[test]
fn closing_twice_is_harmless() {
    let db = open();
    db.close().unwrap();
    db.close().unwrap();
    assert_closed(db.get(b"a"));
}

#[test]
fn snapshot_taken_before_close_does_not_keep_the_store_readable() {
    let db = open();
    db.put(b"a", b"1").unwrap();
    let snap = db.snapshot().unwrap();
    db.close().unwrap();
    let ro = ReadOptions {
        snapshot: Some(&snap),
        ..Default::default()
    };
    assert_closed(db.get_opt(b"a", &ro));
}

// ------------------------------------------------------------ open flags

#[test]
fn second_open_of_a_locked_store_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Busy(_)) => {}
        other => panic!("expected Error::Busy, got {other:?}"),
    }
    drop(db);
    Db::open(dir.path(), Options::default()).unwrap();
}

#[test]
fn second_open_of_a_locked_store_is_busy_on_memfs() {
    let opts = mem_opts();
    let db = Db::open(DIR, opts.clone()).unwrap();
    match Db::open(DIR, opts.clone()) {
        Err(Error::Busy(_)) => {}
        other => panic!("expected Error::Busy, got {other:?}"),
    }
    drop(db);
    Db::open(DIR, opts).unwrap();
}

#[test]
fn open_without_create_if_missing_fails_on_an_empty_dir() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        settings: tern::Settings {
            create_if_missing: false,
            ..tern::Settings::default()
        },
        ..Options::default()
    };
    let err = Db::open(dir.path(), opts.clone()).expect_err("opened an empty directory");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // Failing did not create a store either.
    assert!(!dir.path().join("CURRENT").exists());
    Db::open(dir.path(), opts).expect_err("the second try found a store");
}

#[test]
fn open_without_create_if_missing_fails_on_a_missing_dir() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope");
    let opts = Options {
        settings: tern::Settings {
            create_if_missing: false,
            ..tern::Settings::default()
        },
        ..Options::default()
    };
    let err = Db::open(&path, opts).expect_err("opened a missing directory");
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(!path.exists());
}

#[test]
fn open_with_error_if_exists_fails_on_an_existing_store() {
    let opts = mem_opts();
    let db = Db::open(DIR, opts.clone()).unwrap();
    db.put(b"a", b"1").unwrap();
    db.close().unwrap();
    drop(db);
    let strict = opts.clone().tune(|s| {
        s.error_if_exists = true;
    });
    Db::open(DIR, strict).expect_err("error_if_exists accepted an existing store");
    // The refused open left the store intact.
    let db = Db::open(DIR, opts).unwrap();
    assert_eq!(db.get(b"a").unwrap(), Some(b"1".to_vec()));
}

#[test]
fn open_with_error_if_exists_creates_a_new_store() {
    let opts = mem_opts().tune(|s| {
        s.error_if_exists = true;
    });
    let db = Db::open(DIR, opts).unwrap();
    db.put(b"a", b"1").unwrap();
}

// --------------------------------------------------------------- options

#[track_caller]
fn assert_rejected(opts: Options) {
    let fs = Arc::new(MemFs::default());
    assert_invalid(Db::open(DIR, Options { fs, ..opts }).map(|_| ()));
}

#[test]
fn tiny_write_buffer_is_rejected() {
    assert_rejected(Options {
        settings: tern::Settings {
            write_buffer_size: 100,
            ..tern::Settings::default()
        },
        ..Options::default()
    });
}

#[test]
fn level0_triggers_out_of_order_are_rejected() {
    assert_rejected(Options {
        settings: tern::Settings {
            level0_file_num_compaction_trigger: 10,
            level0_slowdown_writes_trigger: 5,
            level0_stop_writes_trigger: 20,
            ..tern::Settings::default()
        },
        ..Options::default()
    });
    assert_rejected(Options {
        settings: tern::Settings {
            level0_file_num_compaction_trigger: 4,
            level0_slowdown_writes_trigger: 20,
            level0_stop_writes_trigger: 10,
            ..tern::Settings::default()
        },
        ..Options::default()
    });
    assert_rejected(Options {
        settings: tern::Settings {
            level0_file_num_compaction_trigger: 0,
            ..tern::Settings::default()
        },
        ..Options::default()
    });
}

#[test]
fn single_write_buffer_is_rejected() {
    assert_rejected(Options {
        settings: tern::Settings {
            max_write_buffer_number: 1,
            ..tern::Settings::default()
        },
        ..Options::default()
    });
}

#[test]
fn zero_block_size_and_zero_max_key_size_are_rejected() {
    assert_rejected(Options {
        settings: tern::Settings {
            block_size: 0,
            ..tern::Settings::default()
        },
        ..Options::default()
    });
    assert_rejected(Options {
        settings: tern::Settings {
            max_key_size: 0,
            ..tern::Settings::default()
        },
        ..Options::default()
    });
}

#[test]
fn rejected_options_create_no_files() {
    let fs = MemFs::new();
    let bad = [
        Options {
            settings: tern::Settings {
                write_buffer_size: 1,
                ..tern::Settings::default()
            },
            ..Options::default()
        },
        Options {
            settings: tern::Settings {
                max_open_files: 0,
                ..tern::Settings::default()
            },
            ..Options::default()
        },
        Options {
            settings: tern::Settings {
                open_files_memory: 0,
                ..tern::Settings::default()
            },
            ..Options::default()
        },
    ];
    for opts in bad {
        let opts = Options {
            fs: fs.clone(),
            ..opts
        };
        assert_invalid(Db::open(DIR, opts).map(|_| ()));
        assert!(fs.file_names().is_empty(), "{:?}", fs.file_names());
    }
}

#[test]
fn default_max_open_files_is_half_the_descriptor_limit() {
    let n = Options::default().max_open_files;
    assert!((64..=1 << 20).contains(&n), "{n}");
    if let Some(limit) = tern::io::descriptor_limit() {
        assert!(n as u64 <= (limit / 2).max(64), "{n} of a limit of {limit}");
    }
}

// ------------------------------------------------------------- boundaries

#[test]
fn batch_larger_than_the_write_buffer_is_applied_whole() {
    let opts = mem_opts().tune(|s| {
        s.max_value_size = 1 << 20;
    });
    let v = vec![b'x'; 300];
    {
        let db = Db::open(DIR, opts.clone()).unwrap();
        let mut b = WriteBatch::new();
        for i in 0..1000u32 {
            b.put(format!("k{i:05}").as_bytes(), &v);
        }
        db.write(b, WriteOptions::synced()).unwrap();
        assert_eq!(scan(&db).len(), 1000);
        db.close().unwrap();
    }
    let db = Db::open(DIR, opts).unwrap();
    let rows = scan(&db);
    assert_eq!(rows.len(), 1000);
    assert!(rows.iter().all(|(_, got)| *got == v));
}

/// Regression: `WriteBatch::from_bytes` accepted the engine's internal
/// `BlobRef` kind, so a crafted batch stored raw reference bytes as a value
/// (returned by `get`) and later failed every compaction of its table.
#[test]
fn write_batch_with_an_internal_blob_ref_kind_is_rejected() {
    let db = open();
    let mut b = WriteBatch::new();
    b.put(b"k", b"not a blob reference");
    let mut bytes = b.as_bytes().to_vec();
    // Header (seq u64, count u32), then the first record's kind byte.
    assert_eq!(bytes[12], 1, "layout: the first record is an inline value");
    bytes[12] = 2; // ValueKind::BlobRef
    let crafted = WriteBatch::from_bytes(&bytes).unwrap();
    assert_invalid(db.write(crafted, WriteOptions::default()));
    assert_eq!(db.get(b"k").unwrap(), None);
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get(b"k").unwrap(), None);
}
