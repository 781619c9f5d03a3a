//! The iterator against a sorted map of random histories.

use super::*;
use crate::iter::testing::VecIter;
use crate::iter::MergingIterator;
use std::collections::BTreeMap;

fn ikey(k: &str, seq: u64, kind: ValueKind) -> Vec<u8> {
    internal_key::make_internal_key(k.as_bytes(), seq, kind)
}

fn collect_fwd(it: &mut DbIterator) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = vec![];
    it.seek_to_first();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    out
}

fn collect_bwd(it: &mut DbIterator) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = vec![];
    it.seek_to_last();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.prev();
    }
    out.reverse();
    out
}

#[test]
fn versions_tombstones_snapshots_bounds_random() {
    use rand::{Rng, SeedableRng};
    for seed in 0..40u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // Random history of writes split over three sources.
        let mut sources: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![vec![], vec![], vec![]];
        let mut history: Vec<(String, u64, Option<String>)> = vec![];
        for seq in 1..=60u64 {
            let k = format!("k{:02}", rng.gen_range(0..15));
            let v = if rng.gen_bool(0.3) {
                None
            } else {
                Some(format!("v{seq}"))
            };
            let kind = if v.is_some() {
                ValueKind::Value
            } else {
                ValueKind::Delete
            };
            sources[rng.gen_range(0..3)].push((
                ikey(&k, seq, kind),
                v.clone().unwrap_or_default().into_bytes(),
            ));
            history.push((k, seq, v));
        }
        let snap = rng.gen_range(0..=60u64);
        let lower = rng
            .gen_bool(0.3)
            .then(|| format!("k{:02}", rng.gen_range(0..15)).into_bytes());
        let upper = rng
            .gen_bool(0.3)
            .then(|| format!("k{:02}", rng.gen_range(0..15)).into_bytes());
        let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for (k, seq, v) in &history {
            if *seq <= snap {
                model.insert(k.clone().into_bytes(), v.clone().map(String::into_bytes));
            }
        }
        let expect: Vec<_> = model
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .filter(|(k, _)| {
                lower.as_ref().is_none_or(|l| k >= l) && upper.as_ref().is_none_or(|u| k < u)
            })
            .collect();
        let make = || {
            let children = sources
                .iter()
                .map(|s| Box::new(VecIter::new(s.clone())) as BoxedIter)
                .collect();
            DbIterator::new(
                Box::new(MergingIterator::new(children)),
                snap,
                lower.clone(),
                upper.clone(),
                vec![],
            )
        };
        assert_eq!(collect_fwd(&mut make()), expect, "seed {seed} forward");
        assert_eq!(collect_bwd(&mut make()), expect, "seed {seed} backward");
        // Zig-zag: next then prev returns to the same key.
        let mut it = make();
        it.seek_to_first();
        for (i, (k, _)) in expect.iter().enumerate() {
            assert_eq!(it.key(), k.as_slice());
            it.next();
            if i + 1 < expect.len() {
                it.prev();
                assert_eq!(it.key(), k.as_slice(), "seed {seed} zigzag");
                it.next();
            }
        }
        assert!(!it.valid());
        // seek / seek_for_prev against the model.
        for probe in 0..16 {
            let p = format!("k{probe:02}").into_bytes();
            it.seek(&p);
            let want = expect.iter().find(|(k, _)| *k >= p);
            assert_eq!(
                it.valid().then(|| it.key().to_vec()),
                want.map(|w| w.0.clone()),
                "seed {seed} seek"
            );
            it.seek_for_prev(&p);
            let want = expect.iter().rev().find(|(k, _)| *k <= p);
            assert_eq!(
                it.valid().then(|| it.key().to_vec()),
                want.map(|w| w.0.clone()),
                "seed {seed} seek_for_prev"
            );
        }
    }
}
