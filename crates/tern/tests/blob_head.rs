//! Heads of separated values (`blob_head_size`): kept beside each blob
//! reference, served by head-only reads without a blob read, shown to
//! compaction filters, and kept when compaction rewrites a moved reference.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::{fault_fs, small_opts, DIR};
use tern::compaction::{CompactionFilter, FilterDecision, FilterValue};
use tern::io::{FaultKind, FsRef};
use tern::{Db, Options, ReadOptions};

const HEAD: usize = 10;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

/// Even keys get a separated value (200 bytes), odd keys an inline one.
fn value(i: u32) -> Vec<u8> {
    let mut v = format!("H{i:04}-{}", if i % 4 == 0 { "EXP" } else { "OK!" }).into_bytes();
    v.resize(if i % 2 == 0 { 200 } else { 20 }, b'a' + (i % 26) as u8);
    v
}

fn head_opts(fs: FsRef) -> Options {
    small_opts(fs).tune(|s| {
        s.blob_threshold = Some(100);
        s.blob_head_size = HEAD;
        s.enable_gc = false;
    })
}

const N: u32 = 200;

fn fill(db: &Db) {
    for i in 0..N {
        db.put(&key(i), &value(i)).unwrap();
    }
    db.flush().unwrap();
}

/// What an iterator in head mode should show for key `i`.
fn expected(i: u32) -> (Vec<u8>, bool) {
    let v = value(i);
    if v.len() >= 100 {
        (v[..HEAD].to_vec(), true)
    } else {
        (v, false)
    }
}

/// An iterator that serves separated values by their head.
fn heads_iter(db: &Db) -> tern::DbIterator {
    db.iter(ReadOptions {
        value_heads: true,
        ..Default::default()
    })
    .unwrap()
}

/// Every entry of a forward head-only walk: key, value, whether a head.
fn head_walk(db: &Db) -> Vec<(Vec<u8>, Vec<u8>, bool)> {
    let mut it = heads_iter(db);
    it.seek_to_first();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec(), it.value_is_head()));
        it.next();
    }
    it.status().unwrap();
    out
}

#[test]
fn heads_are_served_without_reading_a_blob_file() {
    let (_mem, fault) = fault_fs();
    let opts = head_opts(fault.clone());
    let db = Db::open(DIR, opts.clone()).unwrap();
    fill(&db);
    db.close().unwrap();
    drop(db);
    // Fresh caches, then every read of a blob file fails.
    let db = Db::open(DIR, opts).unwrap();
    fault.only_paths_containing(".blob");
    fault.inject(FaultKind::Read, 0, true);
    assert!(
        db.get(&key(0)).is_err(),
        "a whole separated value needs the blob file, which now fails"
    );

    let forward = head_walk(&db);
    assert_eq!(forward.len(), N as usize);
    for (i, (k, v, is_head)) in (0..N).zip(&forward) {
        let (want, want_head) = expected(i);
        assert_eq!((k, v, *is_head), (&key(i), &want, want_head), "key {i}");
    }
    // Backward too.
    let mut it = heads_iter(&db);
    it.seek_to_last();
    let mut i = N;
    while it.valid() {
        i -= 1;
        assert_eq!(it.key(), key(i));
        let (v, is_head) = expected(i);
        assert_eq!(
            (it.value(), it.value_is_head()),
            (&v[..], is_head),
            "key {i}"
        );
        it.prev();
    }
    it.status().unwrap();
    assert_eq!(i, 0);

    let h = db.get_head(&key(2)).unwrap().unwrap();
    assert_eq!((h.bytes.as_slice(), h.partial), (&value(2)[..HEAD], true));
    let h = db.get_head(&key(3)).unwrap().unwrap();
    assert_eq!((h.bytes, h.partial), (value(3), false));
    assert_eq!(db.get_head(b"missing").unwrap(), None);
    fault.clear();
    assert_eq!(db.get(&key(0)).unwrap(), Some(value(0)));
}

/// One filter call: key, the bytes it had, and the size of a separated value.
type Seen = (Vec<u8>, Vec<u8>, Option<u32>);

/// Replaces values whose head says `EXP` by a stub, and records what it saw.
#[derive(Default)]
struct StubExpired {
    seen: Mutex<Vec<Seen>>,
    remove: bool,
}

impl CompactionFilter for StubExpired {
    fn name(&self) -> &str {
        "stub-expired"
    }
    fn filter(&self, _level: usize, key: &[u8], value: FilterValue<'_>) -> FilterDecision {
        let size = match value {
            FilterValue::Separated { size, .. } => Some(size),
            FilterValue::Inline(_) => None,
        };
        self.seen
            .lock()
            .unwrap()
            .push((key.to_vec(), value.bytes().to_vec(), size));
        if value.bytes().get(6..9) != Some(b"EXP") {
            FilterDecision::Keep
        } else if self.remove {
            FilterDecision::Remove
        } else {
            FilterDecision::Replace(b"stub".to_vec())
        }
    }
}

fn filtered_store(remove: bool) -> (Db, Arc<StubExpired>) {
    let (mem, _) = fault_fs();
    let filter = Arc::new(StubExpired {
        remove,
        ..Default::default()
    });
    let opts = Options {
        compaction_filter: Some(filter.clone()),
        ..head_opts(mem)
    };
    let db = Db::open(DIR, opts).unwrap();
    fill(&db);
    (db, filter)
}

#[test]
fn a_filter_sees_separated_heads_and_replacing_them_frees_their_blob_bytes() {
    let (db, filter) = filtered_store(false);
    let before = db.stats().blob_live_bytes;
    assert!(before > 0);
    db.compact_range(None, None).unwrap();
    let seen = filter.seen.lock().unwrap().clone();
    // Each compaction the data passes through asks again; a stub left by
    // an earlier one comes back inline.
    let keys: std::collections::BTreeSet<&Vec<u8>> = seen.iter().map(|(k, _, _)| k).collect();
    assert_eq!(keys.len(), N as usize, "every key was shown to the filter");
    for (k, bytes, size) in &seen {
        let i: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
        if bytes == b"stub" {
            assert_eq!((i % 4, *size), (0, None));
            continue;
        }
        let (v, separated) = expected(i);
        assert_eq!(bytes, &v, "key {i}");
        assert_eq!(*size, separated.then_some(200), "key {i}");
    }
    // Every fourth key (half the separated values) was expired.
    let after = db.stats().blob_live_bytes;
    assert!(
        after * 100 <= before * 52 && after * 100 >= before * 48,
        "live blob bytes {before} -> {after}: half the separated values were dropped"
    );
    for i in 0..N {
        let want = if i % 4 == 0 {
            b"stub".to_vec()
        } else {
            value(i)
        };
        assert_eq!(db.get(&key(i)).unwrap(), Some(want), "key {i}");
    }
}

#[test]
fn a_filter_removing_separated_values_frees_their_blob_bytes() {
    let (db, _) = filtered_store(true);
    let before = db.stats().blob_live_bytes;
    db.compact_range(None, None).unwrap();
    let after = db.stats().blob_live_bytes;
    assert!(after * 100 <= before * 52, "{before} -> {after}");
    for i in 0..N {
        let want = (i % 4 != 0).then(|| value(i));
        assert_eq!(db.get(&key(i)).unwrap(), want, "key {i}");
    }
}

#[test]
fn heads_survive_compaction_rewriting_refs_to_moved_records() {
    let (mem, _) = fault_fs();
    let opts = head_opts(mem).tune(|s| {
        s.gc_garbage_ratio = 0.2;
        s.level0_file_num_compaction_trigger = 100;
        s.level0_slowdown_writes_trigger = 200;
        s.level0_stop_writes_trigger = 300;
    });
    let db = Db::open(DIR, opts).unwrap();
    fill(&db);
    db.compact_range(None, None).unwrap();
    // Overwrite most separated values so their old file is mostly garbage,
    // collect it (the survivors move), then compact so refs are rewritten.
    let mut latest: Vec<Vec<u8>> = (0..N).map(value).collect();
    for i in (0..N).step_by(2).filter(|i| i % 10 != 0) {
        let mut v = value(i);
        v[0] = b'N';
        db.put(&key(i), &v).unwrap();
        latest[i as usize] = v;
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    assert!(db.collect_garbage().unwrap() > 0, "GC should run");
    db.compact_range(None, None).unwrap();
    assert!(db.stats().blob_refs_rewritten > 0, "refs were rewritten");
    let walk = head_walk(&db);
    assert_eq!(walk.len(), N as usize);
    for (i, (_, got, _)) in walk.iter().enumerate() {
        let v = &latest[i];
        let want = if v.len() >= 100 { &v[..HEAD] } else { &v[..] };
        assert_eq!(got.as_slice(), want, "key {i}");
    }
    for i in 0..N {
        assert_eq!(db.get(&key(i)).unwrap().as_ref(), Some(&latest[i as usize]));
    }
}
