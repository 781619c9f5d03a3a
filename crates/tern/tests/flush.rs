//! Flush writes what readers can still see, and nothing more.
#![allow(clippy::unwrap_used)]

mod common;

use common::{key, small_opts, value, DIR};
use tern::io::MemFs;
use tern::{Db, ReadOptions};

fn big(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("value-{i}-round-{round}-").into_bytes();
    v.resize(1000, b'v');
    v
}

/// Regression: flush wrote every version in the memtable, so a key updated
/// ten times before a flush left nine dead blob records for compaction to
/// mark and GC to rewrite.
#[test]
fn flush_drops_versions_no_snapshot_needs() {
    let fs = MemFs::new();
    let db = Db::open(
        DIR,
        small_opts(fs.clone()).tune(|s| s.write_buffer_size = 1 << 20),
    )
    .unwrap();
    for round in 0..10 {
        for i in 0..20 {
            db.put(&key(i), &big(i, round)).unwrap();
        }
    }
    db.flush().unwrap();
    let st = db.stats();
    assert_eq!(st.flush_versions_dropped, 180, "{st:?}");
    assert!(
        st.blob_bytes_written < 2 * 20 * 1100,
        "flush separated shadowed values: {} bytes",
        st.blob_bytes_written
    );
    for i in 0..20 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(big(i, 9)));
    }
    db.close().unwrap();
    let db = Db::open(DIR, small_opts(fs)).unwrap();
    for i in 0..20 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(big(i, 9)));
    }
}

/// A snapshot taken between two updates keeps the version it sees through
/// the flush; the versions between snapshots that nobody sees are dropped.
#[test]
fn flush_keeps_the_newest_version_each_snapshot_sees() {
    let fs = MemFs::new();
    let db = Db::open(DIR, small_opts(fs).tune(|s| s.write_buffer_size = 1 << 20)).unwrap();
    db.put(&key(1), &big(1, 0)).unwrap();
    db.put(&key(1), &big(1, 1)).unwrap();
    let first = db.snapshot().unwrap();
    db.put(&key(1), &big(1, 2)).unwrap();
    db.delete(&key(1)).unwrap();
    db.put(&key(2), b"small").unwrap();
    let second = db.snapshot().unwrap();
    db.put(&key(1), &big(1, 3)).unwrap();
    db.put(&key(1), &big(1, 4)).unwrap();
    db.flush().unwrap();
    // Round 0 (hidden by round 1 for `first`), round 2 (hidden by the
    // delete for `second`) and round 3 (hidden by round 4) go.
    assert_eq!(db.stats().flush_versions_dropped, 3);
    let at = |s| ReadOptions {
        snapshot: Some(s),
        ..ReadOptions::default()
    };
    assert_eq!(db.get_opt(&key(1), &at(&first)).unwrap(), Some(big(1, 1)));
    assert_eq!(db.get_opt(&key(1), &at(&second)).unwrap(), None);
    assert_eq!(
        db.get_opt(&key(2), &at(&second)).unwrap(),
        Some(b"small".to_vec())
    );
    assert_eq!(db.get(&key(1)).unwrap(), Some(big(1, 4)));
    let mut it = db.iter(at(&first)).unwrap();
    it.seek_to_first();
    assert!(it.valid());
    assert_eq!(it.key(), &key(1)[..]);
    assert_eq!(it.value(), &big(1, 1)[..]);
}

/// Memtables follow one another in the allocation of the one flushed
/// before (its pages stay mapped); every write still reads back, through
/// memtables that reused old bytes and through the tables flushed from them.
#[test]
fn flushed_memtables_lend_their_arena_to_the_next_and_nothing_leaks_between_them() {
    let db = Db::open(DIR, small_opts(MemFs::new())).unwrap();
    let mut want = std::collections::BTreeMap::new();
    let mut spare_seen = false;
    for round in 0..20u32 {
        // Each round overwrites half the keys of the round before.
        for i in 0..400u32 {
            let k = key((round * 200 + i) % 5000);
            let v = value(i, round);
            db.put(&k, &v).unwrap();
            want.insert(k, v);
        }
        db.flush().unwrap();
        spare_seen |= db.stats().spare_memtable_bytes > 0;
        // Half a memtable left unflushed, read from a reused arena.
        for i in 0..100u32 {
            let k = key(round * 37 + i);
            let v = value(i, round + 100);
            db.put(&k, &v).unwrap();
            want.insert(k, v);
        }
        for (k, v) in &want {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "round {round}");
        }
    }
    assert!(spare_seen, "no memtable arena was kept for reuse");
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut got = std::collections::BTreeMap::new();
    while it.valid() {
        got.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().unwrap();
    assert_eq!(got, want);
}

/// Many versions of a few keys (in the memtable, all but each key's first
/// are chained to it, `docs/engine.md` "Version chains"), with snapshots
/// taken between them: every snapshot reads its version of every key,
/// point reads and scans both ways, before the flush, after it (which must
/// keep each snapshot's version and drop the rest) and after a reopen.
#[test]
fn snapshots_between_many_overwrites_read_their_versions_through_a_flush() {
    let fs = MemFs::new();
    let db = Db::open(
        DIR,
        small_opts(fs.clone()).tune(|s| s.write_buffer_size = 4 << 20),
    )
    .unwrap();
    const KEYS: u32 = 8;
    const ROUNDS: u32 = 60;
    let v = |i: u32, round: u32| format!("k{i}-r{round}").into_bytes();
    let mut snaps = Vec::new();
    for round in 0..ROUNDS {
        for i in 0..KEYS {
            db.put(&key(i), &v(i, round)).unwrap();
        }
        if round % 15 == 7 {
            snaps.push((round, db.snapshot().unwrap()));
        }
    }
    let check = |what: &str| {
        for (round, snap) in &snaps {
            let opts = ReadOptions {
                snapshot: Some(snap),
                ..ReadOptions::default()
            };
            for i in 0..KEYS {
                assert_eq!(
                    db.get_opt(&key(i), &opts).unwrap(),
                    Some(v(i, *round)),
                    "{what}: key {i} at round {round}"
                );
            }
            let mut it = db.iter(opts.clone()).unwrap();
            it.seek_to_last();
            let mut back = Vec::new();
            while it.valid() {
                back.push(it.value().to_vec());
                it.prev();
            }
            it.status().unwrap();
            back.reverse();
            let want: Vec<Vec<u8>> = (0..KEYS).map(|i| v(i, *round)).collect();
            assert_eq!(back, want, "{what}: backward scan at round {round}");
            it.seek(&key(KEYS / 2));
            assert_eq!(
                it.value(),
                &v(KEYS / 2, *round)[..],
                "{what}: seek at round {round}"
            );
        }
        for i in 0..KEYS {
            assert_eq!(
                db.get(&key(i)).unwrap(),
                Some(v(i, ROUNDS - 1)),
                "{what}: key {i}"
            );
        }
    };
    check("in the memtable");
    db.flush().unwrap();
    // Each key keeps the newest version and one per snapshot.
    let kept = u64::from(KEYS) * (snaps.len() as u64 + 1);
    assert_eq!(
        db.stats().flush_versions_dropped,
        u64::from(KEYS * ROUNDS) - kept
    );
    check("after the flush");
    let latest: Vec<_> = (0..KEYS).map(|i| db.get(&key(i)).unwrap()).collect();
    drop(snaps);
    db.close().unwrap();
    let db = Db::open(DIR, small_opts(fs)).unwrap();
    let reopened: Vec<_> = (0..KEYS).map(|i| db.get(&key(i)).unwrap()).collect();
    assert_eq!(reopened, latest);
}
