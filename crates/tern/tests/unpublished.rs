//! Writes made now and published later (`Db::write_unpublished`): no reader
//! sees one before its WAL is synced and it is published, publication keeps
//! the order of writing, the writer's own reads see them, and a failed or
//! abandoned one is never published.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{fault_fs, scan, small_opts, DIR};
use tern::io::FaultKind;
use tern::{Db, Error, Options, WriteBatch};

fn batch(pairs: &[(&[u8], &[u8])]) -> WriteBatch {
    let mut b = WriteBatch::new();
    for (k, v) in pairs {
        b.put(k, v);
    }
    b
}

fn get(db: &Db, k: &[u8]) -> Option<Vec<u8>> {
    db.get(k).unwrap()
}

/// Long enough for a thread that is not blocked to have finished.
const SETTLE: Duration = Duration::from_millis(100);

#[test]
fn unpublished_writes_are_invisible_until_published() {
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault)).unwrap();
    db.put(b"a", b"1").unwrap();
    let w = db
        .write_unpublished(batch(&[(b"a", b"2"), (b"b", b"1")]))
        .unwrap();
    let before = vec![(b"a".to_vec(), b"1".to_vec())];
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(get(&db, b"b"), None);
    assert_eq!(scan(&db), before);
    assert_eq!(common::scan_at(&db, Some(&db.snapshot().unwrap())), before);
    {
        let _own = db.read_own_writes();
        assert_eq!(get(&db, b"a").as_deref(), Some(&b"2"[..]));
        assert_eq!(get(&db, b"b").as_deref(), Some(&b"1"[..]));
        assert_eq!(scan(&db).len(), 2);
        let ra = db.read_ahead();
        assert_eq!(
            db.get_in(&ra, b"b").unwrap().as_deref(),
            Some(&b"1"[..]),
            "a read-ahead made inside sees them too"
        );
        // Only this thread's reads.
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(get(&db, b"b"), None, "another thread's read");
                assert_eq!(scan(&db), before);
            });
        });
    }
    assert_eq!(get(&db, b"b"), None, "the guard dropped");
    w.publish().unwrap();
    assert_eq!(get(&db, b"a").as_deref(), Some(&b"2"[..]));
    assert_eq!(get(&db, b"b").as_deref(), Some(&b"1"[..]));
}

#[test]
fn publication_follows_the_order_of_writing() {
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault)).unwrap();
    let first = db.write_unpublished(batch(&[(b"x", b"1")])).unwrap();
    let second = db.write_unpublished(batch(&[(b"y", b"1")])).unwrap();
    assert!(second.last_seq() > first.last_seq());
    std::thread::scope(|s| {
        // The later write and a plain write after both wait for the first.
        let later = s.spawn(|| second.publish());
        let plain = s.spawn(|| db.put(b"z", b"1"));
        std::thread::sleep(SETTLE);
        assert!(!later.is_finished() && !plain.is_finished());
        assert_eq!(scan(&db), vec![], "nothing before the first is published");
        first.publish().unwrap();
        later.join().unwrap().unwrap();
        plain.join().unwrap().unwrap();
    });
    assert_eq!(scan(&db).len(), 3);
}

#[test]
fn a_failed_sync_leaves_the_write_unpublished_and_poisons_the_store() {
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault.clone())).unwrap();
    db.put(b"k", b"old").unwrap();
    let w = db.write_unpublished(batch(&[(b"k", b"new")])).unwrap();
    let after = db.write_unpublished(batch(&[(b"l", b"1")])).unwrap();
    fault.only_paths_containing(".log");
    fault.fail_once(FaultKind::Sync);
    assert!(matches!(w.publish(), Err(Error::Io { .. })));
    // The write after it may have read it: it is refused, not published.
    assert!(matches!(after.publish(), Err(Error::Poisoned(_))));
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"old"[..]));
    assert_eq!(get(&db, b"l"), None);
    assert!(matches!(db.put(b"m", b"1"), Err(Error::Poisoned(_))));
}

#[test]
fn a_dropped_unpublished_write_poisons_the_store() {
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault)).unwrap();
    drop(db.write_unpublished(batch(&[(b"k", b"1")])).unwrap());
    assert_eq!(get(&db, b"k"), None);
    // A write behind it would wait for good; it is refused instead.
    assert!(matches!(db.put(b"m", b"1"), Err(Error::Poisoned(_))));
    // An empty one holds nothing up.
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault)).unwrap();
    drop(db.write_unpublished(WriteBatch::new()).unwrap());
    db.put(b"m", b"1").unwrap();
}

#[test]
fn a_memtable_switch_waits_for_unpublished_writes() {
    let (mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault)).unwrap();
    let w = db.write_unpublished(batch(&[(b"k", b"1")])).unwrap();
    std::thread::scope(|s| {
        let flush = s.spawn(|| db.flush());
        std::thread::sleep(SETTLE);
        assert!(!flush.is_finished(), "the flush went ahead of the write");
        w.publish().unwrap();
        flush.join().unwrap().unwrap();
    });
    assert!(db.stats().flushes > 0);
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"1"[..]));
    // Published means synced: it survives a crash.
    let crashed = mem.crashed_copy();
    drop(db);
    let db = Db::open(DIR, small_opts(crashed)).unwrap();
    assert_eq!(get(&db, b"k").as_deref(), Some(&b"1"[..]));
}

#[test]
fn one_sync_of_the_last_write_publishes_all_before_it_durably() {
    let (mem, fault) = fault_fs();
    // Room for them all: a memtable switch would wait for them.
    let opts = small_opts(fault).tune(|s| s.write_buffer_size = 1 << 20);
    let db = Db::open(DIR, opts.clone()).unwrap();
    let keys: Vec<_> = (0..200u32)
        .map(|i| format!("k{i:04}").into_bytes())
        .collect();
    let written: Vec<_> = keys
        .iter()
        .map(|k| db.write_unpublished(batch(&[(k, b"v")])).unwrap())
        .collect();
    let syncs = db.stats().wal_syncs;
    written.last().unwrap().sync().unwrap();
    for w in written {
        w.publish().unwrap();
    }
    assert_eq!(db.stats().wal_syncs, syncs + 1, "one sync for all");
    // Written after the crash point's sync and never published.
    let lost = db.write_unpublished(batch(&[(b"z", b"v")])).unwrap();
    let crashed = mem.crashed_copy();
    // Dropped unpublished: the store is poisoned, and closes without it.
    drop(lost);
    drop(db);
    let db = Db::open(
        DIR,
        Options {
            fs: crashed,
            ..opts
        },
    )
    .unwrap();
    for k in &keys {
        assert!(get(&db, k).is_some(), "{} lost", String::from_utf8_lossy(k));
    }
}
