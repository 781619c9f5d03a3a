//! Range scans over separated values, which read values ahead in batches:
//! every mix of directions, bounds, snapshots and batch boundaries returns
//! what a sorted map returns, and a damaged record stops the scan exactly
//! where it is met.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::{fault_fs, files_ending, small_opts, DIR};
use rand::{Rng, SeedableRng};
use tern::io::{FsRef, MemFs};
use tern::{Db, Error, Options, ReadOptions};

fn opts(fs: FsRef) -> Options {
    small_opts(fs).tune(|s| {
        s.blob_threshold = Some(64);
        s.enable_gc = false;
    })
}

fn k(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// Separated (≥ 64 bytes) or inline, depending on `i` and `round`.
fn v(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{i}-{round}-").into_bytes();
    v.resize(
        if (i + round) % 5 == 0 {
            20
        } else {
            80 + (i % 7) as usize * 40
        },
        b'.',
    );
    v
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A store whose neighbouring keys sit in different blob files (each round
/// flushes a random subset), with deletes, plus the model of it.
fn build(seed: u64) -> (Db, Model) {
    build_on(seed, MemFs::new())
}

/// [`build`] on `fs`.
fn build_on(seed: u64, fs: FsRef) -> (Db, Model) {
    let db = Db::open(DIR, opts(fs)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    for round in 0..6 {
        for _ in 0..300 {
            let i = rng.gen_range(0..600);
            if rng.gen_bool(0.1) {
                db.delete(&k(i)).unwrap();
                model.remove(&k(i));
            } else {
                db.put(&k(i), &v(i, round)).unwrap();
                model.insert(k(i), v(i, round));
            }
        }
        db.flush().unwrap();
    }
    (db, model)
}

#[test]
fn batched_forward_scans_and_direction_changes_match_a_sorted_map() {
    for seed in 0..8u64 {
        // From seed 4 on, reads act as if the store were out of memory:
        // batches then announce their reads before making them.
        let (_, fault) = fault_fs();
        fault.set_uncached(seed >= 4);
        let (db, model) = build_on(seed, fault.clone());
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xabc);
        for _ in 0..40 {
            let lower = rng.gen_bool(0.5).then(|| k(rng.gen_range(0..600)));
            let upper = rng.gen_bool(0.5).then(|| k(rng.gen_range(0..600)));
            let in_bounds = |key: &Vec<u8>| {
                lower.as_ref().is_none_or(|l| key >= l) && upper.as_ref().is_none_or(|u| key < u)
            };
            let want: Vec<(&Vec<u8>, &Vec<u8>)> =
                model.iter().filter(|(k, _)| in_bounds(k)).collect();
            let mut it = db
                .iter(ReadOptions {
                    lower_bound: lower.clone(),
                    upper_bound: upper.clone(),
                    // Any hint, right or wrong, changes only the batching.
                    scan_len_hint: rng.gen_bool(0.5).then(|| rng.gen_range(0..400)),
                    ..ReadOptions::default()
                })
                .unwrap();
            let start = k(rng.gen_range(0..600));
            it.seek(&start);
            let mut at = want.partition_point(|(key, _)| key.as_slice() < start.as_slice());
            // A random walk: mostly forward (through several batches), with
            // turns back and re-seeks.
            for step in 0..400 {
                match want.get(at) {
                    Some((key, value)) => {
                        assert!(it.valid(), "seed {seed} step {step}: ended early");
                        assert_eq!(it.key(), key.as_slice(), "seed {seed} step {step}");
                        assert_eq!(it.value(), value.as_slice(), "seed {seed} step {step}");
                    }
                    None => {
                        assert!(!it.valid(), "seed {seed} step {step}: past the end");
                        it.status().unwrap();
                        break;
                    }
                }
                let r = rng.gen_range(0..100);
                if r < 85 {
                    it.next();
                    at += 1;
                } else if r < 97 {
                    if at == 0 {
                        it.prev();
                        assert!(!it.valid());
                        break;
                    }
                    it.prev();
                    at -= 1;
                } else {
                    let target = k(rng.gen_range(0..600));
                    it.seek(&target);
                    at =
                        want.partition_point(|(key, _)| key.as_slice() < target.as_slice())
                            .max(want.partition_point(|(key, _)| {
                                lower.as_ref().is_some_and(|l| *key < l)
                            }));
                }
            }
        }
        if seed >= 4 {
            assert!(fault.prefetches() > 0, "seed {seed}: no read was announced");
        }
    }
}

#[test]
fn batched_scan_through_a_snapshot_sees_the_old_values() {
    let (db, model) = build(7);
    let snap = db.snapshot().unwrap();
    for i in 0..600 {
        db.put(&k(i), &v(i, 99)).unwrap();
    }
    db.flush().unwrap();
    let mut it = db
        .iter(ReadOptions {
            snapshot: Some(&snap),
            ..ReadOptions::default()
        })
        .unwrap();
    it.seek_to_first();
    let mut got = Model::new();
    while it.valid() {
        got.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().unwrap();
    assert_eq!(got, model);
}

/// A damaged blob record in the middle of a batch: the entries before it
/// are returned intact, the scan stops on it, and the error names the blob
/// file; nothing after it is returned as if the scan had ended cleanly.
#[test]
fn damaged_record_inside_a_read_ahead_batch_stops_the_scan_there() {
    let fs = MemFs::new();
    let db = Db::open(DIR, opts(fs.clone())).unwrap();
    for i in 0..100 {
        db.put(&k(i), &v(i, 1)).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let blobs = files_ending(&fs, DIR, ".blob");
    assert_eq!(blobs.len(), 1);
    // Flip a byte in the value of key 40 (values are unique strings).
    let needle = v(40, 1);
    fs.rewrite(&blobs[0], |data| {
        let at = data
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
            .unwrap();
        data[at + 5] ^= 0x55;
    })
    .unwrap();
    let db = Db::open(DIR, opts(fs)).unwrap();
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut seen = 0;
    while it.valid() {
        assert_eq!(it.key(), k(seen).as_slice());
        assert_eq!(it.value(), v(seen, 1).as_slice());
        seen += 1;
        it.next();
    }
    assert_eq!(seen, 40, "the scan must stop at the damaged record");
    match it.status().unwrap_err() {
        Error::Corruption { file, .. } => assert_eq!(file, blobs[0]),
        other => panic!("expected a corruption of the blob file, got {other}"),
    }
}

#[test]
fn get_if_cached_answers_from_memory_and_says_when_it_would_wait() {
    let (_mem, fault) = common::fault_fs();
    let mut opts = common::small_opts(fault.clone());
    opts.settings.blob_threshold = Some(64);
    let db = Db::open(common::DIR, opts.clone()).unwrap();
    let big = vec![7u8; 300];
    db.put(b"small", b"v").unwrap();
    db.put(b"big", &big).unwrap();
    // In the memtable: answered.
    assert_eq!(
        db.get_if_cached(b"small").unwrap(),
        Some(Some(b"v".to_vec()))
    );
    assert_eq!(db.get_if_cached(b"absent").unwrap(), Some(None));
    db.flush().unwrap();
    db.close().unwrap();
    drop(db);

    let db = Db::open(common::DIR, opts).unwrap();
    fault.set_uncached(true);
    // Nothing in memory: the table is not open, no block is cached, and the
    // page cache holds nothing.
    assert_eq!(db.get_if_cached(b"small").unwrap(), None);
    assert_eq!(db.get(b"small").unwrap(), Some(b"v".to_vec()));
    // The table is open and its block cached now.
    assert_eq!(
        db.get_if_cached(b"small").unwrap(),
        Some(Some(b"v".to_vec()))
    );
    // The blob record is not in the page cache: the read would wait.
    assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
    assert_eq!(db.get_if_cached(b"big").unwrap(), None);
    fault.set_uncached(false);
    assert_eq!(db.get_if_cached(b"big").unwrap(), Some(Some(big)));
    // A key no filter admits needs no read at all.
    assert_eq!(db.get_if_cached(b"absent").unwrap(), Some(None));
}

#[test]
fn get_if_cached_follows_gc_lineage_to_a_moved_record() {
    let (_mem, fault) = common::fault_fs();
    let mut opts = common::small_opts(fault.clone());
    opts.settings.blob_threshold = Some(64);
    opts.settings.disable_auto_compactions = true;
    opts.settings.enable_gc = false;
    let value = |i: u32| format!("{i:0>300}").into_bytes();
    let db = Db::open(common::DIR, opts.clone()).unwrap();
    for i in 0..10 {
        db.put(&common::key(i), &value(i)).unwrap();
    }
    db.flush().unwrap();
    for i in 0..5 {
        db.delete(&common::key(i)).unwrap();
    }
    db.compact_range(None, None).unwrap();
    // The live records move to a new file; the tables still hold refs to
    // the old one, reached through lineage.
    assert_eq!(db.collect_garbage().unwrap(), 1);
    db.close().unwrap();
    drop(db);

    let db = Db::open(common::DIR, opts).unwrap();
    for i in 5..10 {
        assert_eq!(db.get(&common::key(i)).unwrap(), Some(value(i)));
    }
    fault.set_uncached(true);
    assert_eq!(db.get_if_cached(&common::key(7)).unwrap(), None);
    fault.set_uncached(false);
    for i in 5..10 {
        assert_eq!(
            db.get_if_cached(&common::key(i)).unwrap(),
            Some(Some(value(i))),
            "key {i}"
        );
    }
}
