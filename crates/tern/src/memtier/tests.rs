//! Copy-in, lookups and relinking merges against a model.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::memory::TierMemory;
use super::merge::{merge_all, merge_into};
use super::table::TierTable;
use super::*;
use crate::compaction::Retention;
use crate::format::internal_key::{self, SeqNo, ValueKind};
use crate::iter::InternalIterator;
use crate::memtable::MemTable;

/// `(user key, seq) → (kind, value)`, newest version of a key first.
type Model = BTreeMap<(Vec<u8>, std::cmp::Reverse<SeqNo>), (ValueKind, Vec<u8>)>;

fn memtable(entries: &[(&[u8], SeqNo, ValueKind, &[u8])]) -> Arc<MemTable> {
    let m = Arc::new(MemTable::new(1 << 20).without_version_chains());
    for &(k, s, kind, v) in entries {
        m.add(s, kind, k, v).unwrap();
    }
    m
}

/// Copies `m` into the tier (not durable), or `None` without room.
fn try_copy(mem: &Arc<TierMemory>, m: &MemTable, wal: u64) -> Option<TierTable> {
    TierTable::copy_in(mem, m, wal, None, 10)
        .unwrap()
        .map(|(t, _)| t)
}

/// Copies `m` into the tier (not durable).
fn copy(mem: &Arc<TierMemory>, m: &MemTable, wal: u64) -> TierTable {
    try_copy(mem, m, wal).expect("room in the tier")
}

/// Every entry as `(user key, seq, value)`, in order, walked forward or
/// backward.
fn walk(t: &Arc<TierTable>, forward: bool) -> Vec<(Vec<u8>, SeqNo, Vec<u8>)> {
    let mut it = t.iter();
    if forward {
        it.seek_to_first();
    } else {
        it.seek_to_last();
    }
    let mut out = vec![];
    while it.valid() {
        let k = it.key();
        out.push((
            internal_key::user_key(k).to_vec(),
            internal_key::trailer(k) >> 8,
            it.value().to_vec(),
        ));
        if forward {
            it.next();
        } else {
            it.prev();
        }
    }
    if !forward {
        out.reverse();
    }
    out
}

fn entries(t: &Arc<TierTable>) -> Vec<(Vec<u8>, SeqNo, Vec<u8>)> {
    walk(t, true)
}

fn backward(t: &Arc<TierTable>) -> Vec<(Vec<u8>, SeqNo, Vec<u8>)> {
    walk(t, false)
}

#[test]
fn a_copied_memtable_reads_like_the_memtable() {
    let mem = TierMemory::anonymous(4 << 20).unwrap();
    let m = memtable(&[
        (b"b", 3, ValueKind::Value, b"b3"),
        (b"a", 1, ValueKind::Value, b"a1"),
        (b"b", 2, ValueKind::Value, b"b2"),
        (b"c", 4, ValueKind::Delete, b""),
    ]);
    let t = Arc::new(copy(&mem, &m, 7));
    drop(m);
    assert_eq!(t.wals(), &[7]);
    assert_eq!(t.seqs(), (1, 4));
    assert_eq!(t.entries(), 4);
    assert_eq!(t.get(b"b", 10).map(|e| e.2.to_vec()), Some(b"b3".to_vec()));
    assert_eq!(t.get(b"b", 2).map(|e| e.2.to_vec()), Some(b"b2".to_vec()));
    assert!(t.get(b"b", 1).is_none());
    assert_eq!(t.get(b"c", 9).map(|e| e.1), Some(ValueKind::Delete));
    assert!(t.get(b"zz", 9).is_none());
    let want: Vec<(Vec<u8>, SeqNo, Vec<u8>)> = vec![
        (b"a".to_vec(), 1, b"a1".to_vec()),
        (b"b".to_vec(), 3, b"b3".to_vec()),
        (b"b".to_vec(), 2, b"b2".to_vec()),
        (b"c".to_vec(), 4, vec![]),
    ];
    assert_eq!(entries(&t), want);
    assert_eq!(backward(&t), want);
}

#[test]
fn copy_in_fails_cleanly_when_the_tier_is_full_and_memory_comes_back() {
    let mem = TierMemory::anonymous(256 << 10).unwrap();
    let m = Arc::new(MemTable::new(200 << 10).without_version_chains());
    for i in 0..1000u32 {
        m.add(
            u64::from(i) + 1,
            ValueKind::Value,
            &i.to_be_bytes(),
            &[7; 150],
        )
        .unwrap();
    }
    let t = copy(&mem, &m, 1);
    assert!(try_copy(&mem, &m, 2).is_none(), "no room twice");
    assert!(mem.used() > 0);
    drop(t);
    assert_eq!(mem.used(), 0);
    assert!(try_copy(&mem, &m, 2).is_some());
}

/// Builds `tables` memtables of random writes over a small key space, in
/// sequence order, and returns the model of every version.
fn random_tables(
    rng: &mut StdRng,
    mem: &Arc<TierMemory>,
    tables: usize,
    seq: &mut SeqNo,
    model: &mut Model,
) -> Vec<Arc<TierTable>> {
    (0..tables)
        .map(|i| {
            let m = Arc::new(MemTable::new(1 << 20).without_version_chains());
            for _ in 0..rng.gen_range(1..200) {
                *seq += 1;
                let key = format!("k{:03}", rng.gen_range(0..60)).into_bytes();
                let (kind, value) = if rng.gen_bool(0.15) {
                    (ValueKind::Delete, vec![])
                } else {
                    (ValueKind::Value, format!("v{seq}").into_bytes())
                };
                m.add(*seq, kind, &key, &value).unwrap();
                model.insert((key, std::cmp::Reverse(*seq)), (kind, value));
            }
            Arc::new(copy(mem, &m, i as u64))
        })
        .collect()
}

/// What a read at `seq` must see for `key` in `model`.
fn model_get(model: &Model, key: &[u8], seq: SeqNo) -> Option<(SeqNo, ValueKind, Vec<u8>)> {
    model
        .range((key.to_vec(), std::cmp::Reverse(seq))..)
        .next()
        .filter(|((k, _), _)| k == key)
        .map(|((_, s), (kind, v))| (s.0, *kind, v.clone()))
}

#[test]
fn merges_keep_every_version_a_snapshot_or_reader_can_see() {
    let mut unlinked_in_all = 0;
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mem = TierMemory::anonymous(64 << 20).unwrap();
        let mut model = Model::new();
        let mut seq = 0;
        let tables = random_tables(&mut rng, &mem, 4, &mut seq, &mut model);
        // Snapshots and a reader horizon somewhere in the history.
        let snaps: Vec<SeqNo> = (0..rng.gen_range(0..3))
            .map(|_| rng.gen_range(1..=seq))
            .collect();
        let horizon = rng.gen_range(seq / 2..=seq);
        let retention = Retention::new(snaps.clone());
        // Readers that started before the merge keep the unmerged tables.
        let before: Vec<Arc<TierTable>> = tables.iter().rev().cloned().collect();
        let (merged, report) = merge_all(&tables, &retention, horizon).unwrap();
        let linked: usize = tables[1..].iter().map(|t| t.entries()).sum();
        assert_eq!(report.linked, linked, "seed {seed}");
        let unlinked = report.unlinked;
        unlinked_in_all += unlinked;
        let merged = Arc::new(merged);
        assert_eq!(
            merged.wals(),
            &[0, 1, 2, 3],
            "seed {seed}: the WALs, oldest first"
        );
        let keys: Vec<Vec<u8>> = (0..60).map(|k| format!("k{k:03}").into_bytes()).collect();
        let mut reads: Vec<SeqNo> = snaps.clone();
        reads.extend([horizon, seq, horizon + (seq - horizon) / 2]);
        for key in &keys {
            for &at in &reads {
                let want = model_get(&model, key, at);
                let got = merged.get(key, at).map(|(s, k, v)| (s, k, v.to_vec()));
                if at >= horizon || snaps.contains(&at) {
                    assert_eq!(got, want, "seed {seed}: merged table, {key:?} at {at}");
                }
                // A reader holding the old tables, newest first, still
                // finds the right version (it may read at any sequence at
                // or above the horizon, or at a snapshot).
                if at >= horizon || snaps.contains(&at) {
                    let old = before
                        .iter()
                        .find_map(|t| t.get(key, at))
                        .map(|(s, k, v)| (s, k, v.to_vec()));
                    assert_eq!(old, want, "seed {seed}: old tables, {key:?} at {at}");
                }
            }
        }
        // Sorted, both ways, and only hidden versions are missing.
        let all = entries(&merged);
        assert_eq!(all, backward(&merged), "seed {seed}");
        let mut sorted = all.clone();
        sorted.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        assert_eq!(all, sorted, "seed {seed}");
        assert_eq!(all.len() + unlinked, model.len(), "seed {seed}");
        if horizon == seq && snaps.is_empty() {
            let distinct = keys
                .iter()
                .filter(|k| model_get(&model, k, seq).is_some())
                .count();
            assert_eq!(
                all.len(),
                distinct,
                "seed {seed}: with no reader behind, one version per key is left"
            );
        }
    }
    assert!(unlinked_in_all > 1000, "merges unlinked {unlinked_in_all}");
}

#[test]
fn a_snapshot_keeps_a_shadowed_version_linked() {
    let mem = TierMemory::anonymous(4 << 20).unwrap();
    let old = Arc::new(copy(
        &mem,
        &memtable(&[(b"k", 1, ValueKind::Value, b"one")]),
        1,
    ));
    let new = Arc::new(copy(
        &mem,
        &memtable(&[(b"k", 5, ValueKind::Value, b"five")]),
        2,
    ));
    // A snapshot at 3 sees "one": it stays.
    let (m, r) = merge_into(&old, &new, &Retention::new(vec![3]), 10);
    assert_eq!(r.unlinked, 0);
    assert_eq!(m.get(b"k", 3).map(|e| e.2.to_vec()), Some(b"one".to_vec()));
    let m = Arc::new(m);
    // Without it, a later merge of the same key unlinks both old versions.
    let newer = Arc::new(copy(
        &mem,
        &memtable(&[(b"k", 9, ValueKind::Value, b"nine")]),
        3,
    ));
    let (m2, r2) = merge_into(&m, &newer, &Retention::default(), 10);
    assert_eq!(r2.unlinked, 2);
    let m2 = Arc::new(m2);
    assert_eq!(entries(&m2), vec![(b"k".to_vec(), 9, b"nine".to_vec())]);
    // A version newer than the horizon never hides one below it: a reader
    // without a snapshot may read below it.
    let newest = Arc::new(copy(
        &mem,
        &memtable(&[(b"k", 12, ValueKind::Value, b"x")]),
        4,
    ));
    let (m3, r3) = merge_into(&m2, &newest, &Retention::default(), 10);
    assert_eq!(r3.unlinked, 0);
    assert_eq!(
        m3.get(b"k", 10).map(|e| e.2.to_vec()),
        Some(b"nine".to_vec())
    );
}

#[test]
fn levels_merge_when_full_and_keep_age_order() {
    let mem = TierMemory::anonymous(8 << 20).unwrap();
    let mut levels = TierLevels::new(2);
    let mut seq = 0;
    let mut make = |wal: u64| {
        seq += 1;
        Arc::new(copy(
            &mem,
            &memtable(&[(b"k", seq, ValueKind::Value, b"v")]),
            wal,
        ))
    };
    let (a, b, c) = (make(1), make(2), make(3));
    levels.add_newest(a.clone());
    levels.add_newest(b.clone());
    assert!(levels.pick_merge(3).is_none());
    levels.add_newest(c.clone());
    let (level, inputs) = levels.pick_merge(3).unwrap();
    assert_eq!(level, 0);
    assert!(Arc::ptr_eq(&inputs[0], &a) && Arc::ptr_eq(&inputs[2], &c));
    assert!(Arc::ptr_eq(levels.oldest().unwrap(), &a));
    let d = make(4);
    levels.add_newest(d.clone());
    let merged = Arc::new((*a).absorbing(&b, 12).absorbing(&c, 12));
    assert!(levels.replace_merged(level, &inputs, merged.clone()));
    assert_eq!(levels.shape(), vec![1, 1]);
    assert!(Arc::ptr_eq(levels.oldest().unwrap(), &merged));
    assert_eq!(levels.oldest_wal(), Some(1));
    assert!(
        !levels.replace_merged(level, &inputs, merged),
        "inputs are gone"
    );
    assert!(levels.remove(&d));
    assert_eq!(levels.shape(), vec![0, 1]);
}

#[test]
fn extents_whose_nodes_all_went_are_taken_out_and_freed_after_their_readers() {
    use ValueKind::Value;
    let mem = TierMemory::anonymous(4 << 20).unwrap();
    let base = Arc::new(copy(&mem, &memtable(&[(b"a", 1, Value, b"a1")]), 1));
    let old = Arc::new(copy(
        &mem,
        &memtable(&[(b"k", 2, Value, b"k2"), (b"m", 3, Value, b"m3")]),
        2,
    ));
    let new = Arc::new(copy(
        &mem,
        &memtable(&[(b"k", 4, Value, b"k4"), (b"m", 5, Value, b"m5")]),
        3,
    ));
    let used = mem.used();
    let (merged, r) = merge_all(
        &[base.clone(), old.clone(), new.clone()],
        &Retention::default(),
        10,
    )
    .unwrap();
    assert_eq!(r.unlinked, 2);
    let dead = merged.take_unlinked_extents();
    assert_eq!(dead.len(), 1, "the middle table's extent lost every node");
    assert!(
        merged.take_unlinked_extents().is_empty(),
        "taken out once; the head's extent stays though its node went too"
    );
    let merged = Arc::new(merged);
    // A reader of the old table still reaches the extent.
    assert_eq!(
        old.get(b"k", 10).map(|e| e.2.to_vec()),
        Some(b"k2".to_vec())
    );
    drop((old, new, base));
    assert_eq!(mem.used(), used, "retired, not yet freed");
    drop(dead);
    assert!(mem.used() < used, "freed with its last holder");
    assert_eq!(
        entries(&merged),
        vec![
            (b"a".to_vec(), 1, b"a1".to_vec()),
            (b"k".to_vec(), 4, b"k4".to_vec()),
            (b"m".to_vec(), 5, b"m5".to_vec()),
        ]
    );
}
