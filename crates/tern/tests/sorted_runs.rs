//! Sorted value runs (`sorted_value_runs`): compactions into the last level
//! move separated values into blob files written in key order, merge runs
//! once too many overlap, and every read sees the same data before and
//! after, across a reopen and at a snapshot.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::{scan, small_opts, DIR};
use tern::compaction::{CompactionFilter, FilterDecision, FilterValue};
use tern::internals::blob::BlobReader;
use tern::internals::wal::blob_file_name;
use tern::io::{FsRef, MemFs};
use tern::{BytesOrMemory, Db, Options, ReadOptions};

const N: u32 = 2000;

/// What the store must hold.
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// 300 bytes, separated (the threshold is 100), naming key and round.
fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("value-{i}-round-{round}-").into_bytes();
    v.resize(300, b'a' + (i % 26) as u8);
    v
}

/// Keys in a scattered order, so each flush holds keys from all over.
fn scattered(n: u32) -> impl Iterator<Item = u32> {
    (0..n).map(move |i| (u64::from(i) * 7919 % u64::from(n)) as u32)
}

fn opts(fs: FsRef, runs: usize) -> Options {
    small_opts(fs).tune(|s| {
        s.blob_threshold = Some(100);
        s.sorted_value_runs = Some(runs);
        // These stores are far smaller than memory.
        s.sorted_value_runs_above = BytesOrMemory::Bytes(0);
        // Compactions only where the test asks for them; GC would move
        // records on its own.
        s.disable_auto_compactions = true;
        s.enable_gc = false;
    })
}

/// Writes every key once in scattered order, flushing every `per_flush`
/// keys; returns what the store holds.
fn fill(db: &Db, per_flush: usize) -> Model {
    let mut model = BTreeMap::new();
    for (n, i) in scattered(N).enumerate() {
        db.put(&key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
        if n % per_flush == per_flush - 1 {
            db.flush().unwrap();
        }
    }
    db.flush().unwrap();
    model
}

/// A store of every key, written by flushes of `per_flush` keys and
/// compacted whole, so its values are in runs of at most `runs`.
fn compacted(runs: usize, per_flush: usize) -> (FsRef, Db, Model) {
    let fs: FsRef = MemFs::new();
    let db = Db::open(DIR, opts(fs.clone(), runs)).unwrap();
    let model = fill(&db, per_flush);
    db.compact_range(None, None).unwrap();
    (fs, db, model)
}

fn check(db: &Db, model: &Model) {
    for (k, v) in model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "get {k:?}");
    }
    let seen: BTreeMap<_, _> = scan(db).into_iter().collect();
    assert_eq!(&seen, model, "a full scan");
}

/// Writes round `round`'s value of every key `picked` chooses, flushes,
/// compacts everything and checks the store against `model`; returns how
/// many values the compaction moved.
fn compact_round(db: &Db, model: &mut Model, picked: impl Fn(u32) -> bool, round: u32) -> u64 {
    let before = db.stats().values_moved;
    for i in scattered(N).filter(|&i| picked(i)) {
        db.put(&key(i), &value(i, round)).unwrap();
        model.insert(key(i), value(i, round));
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    check(db, model);
    db.stats().values_moved - before
}

/// Each live sorted run's first and last key; panics unless its records
/// are in key order (versions a snapshot keeps share a key).
fn runs(db: &Db, fs: &FsRef) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for b in db.stats().blob_files.iter().filter(|b| b.sorted_run) {
        let path = Path::new(DIR).join(blob_file_name(b.number));
        let r = BlobReader::open(fs, &path, b.number).unwrap();
        let keys: Vec<Vec<u8>> = (0..r.record_count() as u32)
            .map(|o| r.read_ordinal(o).unwrap().key)
            .collect();
        assert!(
            keys.windows(2).all(|w| w[0] <= w[1]),
            "run {} is in key order",
            b.number
        );
        out.push((keys[0].clone(), keys[keys.len() - 1].clone()));
    }
    out
}

/// The most runs that share a key.
fn depth(runs: &[(Vec<u8>, Vec<u8>)]) -> usize {
    runs.iter()
        .map(|(k, _)| runs.iter().filter(|(a, b)| a <= k && k <= b).count())
        .max()
        .unwrap_or(0)
}

#[test]
fn values_reach_the_last_level_in_key_order() {
    let mem = MemFs::new();
    let fs: FsRef = mem.clone();
    let db = Db::open(DIR, opts(fs.clone(), 1)).unwrap();
    let mut model = fill(&db, 300);
    assert!(
        db.stats().blob_files.len() > 3,
        "several flushes' blob files"
    );
    db.compact_range(None, None).unwrap();
    let first = db.stats();
    assert_eq!(first.values_moved, u64::from(N));
    assert!(first.blob_files.iter().all(|b| b.sorted_run));
    check(&db, &model);

    // Overwrites, deletes and a snapshot of the state before them.
    let snap = db.snapshot().unwrap();
    let before = model.clone();
    for i in scattered(N).filter(|i| i % 3 == 0) {
        if i % 2 == 0 {
            db.delete(&key(i)).unwrap();
            model.remove(&key(i));
        } else {
            db.put(&key(i), &value(i, 1)).unwrap();
            model.insert(key(i), value(i, 1));
        }
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    check(&db, &model);
    let at_snapshot = |k: &[u8]| {
        db.get_opt(
            k,
            &ReadOptions {
                snapshot: Some(&snap),
                ..Default::default()
            },
        )
        .unwrap()
    };
    for (k, v) in &before {
        assert_eq!(at_snapshot(k).as_ref(), Some(v), "at the snapshot: {k:?}");
    }
    drop(snap);
    // One run allowed: the second compaction merged the first run with
    // the new values, and no other blob file is left.
    let all = runs(&db, &fs);
    assert!(!all.is_empty());
    assert!(db.stats().blob_files.iter().all(|b| b.sorted_run));
    assert_eq!(depth(&all), 1, "runs do not overlap: {all:?}");
    drop(db);

    let report = tern::tools::check::check_store(Path::new(DIR), fs.clone()).unwrap();
    assert!(report.is_ok(), "tern check: {report:?}");
    let db = Db::open(DIR, opts(fs.clone(), 1)).unwrap();
    check(&db, &model);
    assert_eq!(runs(&db, &fs), all, "the runs survive a reopen");
}

#[test]
fn values_in_runs_stay_until_too_many_runs_overlap() {
    let mem = MemFs::new();
    let fs: FsRef = mem.clone();
    let db = Db::open(DIR, opts(fs.clone(), 3)).unwrap();
    let mut model = BTreeMap::new();
    // Rounds of keys from all over the key range, each a quarter the size
    // of the one before: each run overlaps every earlier one and is denser
    // than every later one.
    let rounds: [fn(u32) -> bool; 4] = [
        |i| i % 2 == 0,
        |i| i % 8 == 1,
        |i| i % 32 == 3,
        |i| i % 128 == 5,
    ];
    for (round, picked) in rounds.into_iter().enumerate() {
        let now_moved = compact_round(&db, &mut model, picked, round as u32);
        let st = db.stats();
        let runs = runs(&db, &fs);
        let new = (0..N).filter(|&i| picked(i)).count() as u64;
        if round < 3 {
            // Within the limit: only the new round's values move.
            assert_eq!(now_moved, new, "round {round}");
            assert_eq!(depth(&runs), round + 1, "round {round}");
        } else {
            // Three runs overlap: the sparsest, the last round's, merges
            // with the new values; the two denser ones stay.
            let sparsest = (0..N).filter(|&i| rounds[2](i)).count() as u64;
            assert_eq!(now_moved, new + sparsest, "round {round}");
            assert_eq!(depth(&runs), 3, "round {round}");
        }
        assert!(st.blob_files.iter().all(|b| b.sorted_run), "round {round}");
    }
}

#[test]
fn no_values_move_when_the_setting_is_off_or_values_are_inline() {
    for (runs, threshold) in [(None, Some(100)), (Some(1), None)] {
        let mem = MemFs::new();
        let fs: FsRef = mem.clone();
        let o = opts(fs.clone(), 1).tune(|s| {
            s.sorted_value_runs = runs;
            s.blob_threshold = threshold;
        });
        let db = Db::open(DIR, o).unwrap();
        let model = fill(&db, 500);
        db.compact_range(None, None).unwrap();
        check(&db, &model);
        let st = db.stats();
        assert_eq!(st.values_moved, 0, "{runs:?} {threshold:?}");
        assert!(st.blob_files.iter().all(|b| !b.sorted_run));
    }
}

#[test]
fn values_move_only_once_the_store_holds_more_than_sorted_value_runs_above() {
    // About 660 KB of records per fill of N keys (330 bytes each).
    let o =
        opts(MemFs::new(), 2).tune(|s| s.sorted_value_runs_above = BytesOrMemory::Bytes(1 << 20));
    let db = Db::open(DIR, o).unwrap();
    let mut model = fill(&db, 500);
    db.compact_range(None, None).unwrap();
    check(&db, &model);
    assert_eq!(db.stats().values_moved, 0, "below the threshold");
    assert!(db.stats().blob_files.iter().all(|b| !b.sorted_run));
    // As many new keys again: past the threshold, the next compaction
    // moves every value under its keys, old ones included.
    for i in N..2 * N {
        db.put(&key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    check(&db, &model);
    assert_eq!(db.stats().values_moved, u64::from(2 * N), "above it");
    assert!(db.stats().blob_files.iter().all(|b| b.sorted_run));
    db.close().unwrap();
    // The default threshold is the memory the process may use: a store
    // this small never moves a value.
    let o = opts(MemFs::new(), 2).tune(|s| s.sorted_value_runs_above = BytesOrMemory::Memory);
    let db = Db::open(DIR, o).unwrap();
    let model = fill(&db, 500);
    db.compact_range(None, None).unwrap();
    check(&db, &model);
    assert_eq!(db.stats().values_moved, 0, "a store smaller than memory");
}

#[test]
fn runs_written_above_the_threshold_stay_readable_below_it() {
    let (fs, db, mut model) = compacted(2, 500);
    assert_eq!(db.stats().values_moved, u64::from(N), "every value moved");
    db.close().unwrap();
    // Reopened with a threshold the store is below: new values stay where
    // flushes write them, beside the run, and every read sees both.
    let high =
        opts(fs.clone(), 2).tune(|s| s.sorted_value_runs_above = BytesOrMemory::Bytes(u64::MAX));
    let db = Db::open(DIR, high).unwrap();
    for round in 1..3 {
        assert_eq!(compact_round(&db, &mut model, |i| i % 3 == round, round), 0);
    }
    assert!(db.stats().blob_files.iter().any(|b| b.sorted_run));
    assert!(db.stats().blob_files.iter().any(|b| !b.sorted_run));
    db.close().unwrap();
    // Back above it: the next compaction moves what stayed out, keeping
    // the limit of two runs over any key.
    let db = Db::open(DIR, opts(fs.clone(), 2)).unwrap();
    check(&db, &model);
    assert!(compact_round(&db, &mut model, |i| i % 7 == 0, 3) > 0);
    assert!(db.stats().blob_files.iter().all(|b| b.sorted_run));
    let all = runs(&db, &fs);
    assert!(depth(&all) <= 2, "at most two runs overlap: {all:?}");
}

#[test]
fn sorted_value_runs_of_zero_is_refused() {
    let fs: FsRef = MemFs::new();
    let err = Db::open(DIR, opts(fs, 0)).unwrap_err();
    assert!(err.to_string().contains("sorted_value_runs"), "{err}");
}

/// A store with GC on whose first run (every key) was partly overwritten
/// by a second, the keys `overwrite` picks, and then collected by GC at
/// `gc_garbage_ratio`; the first run's file numbers.
fn overwritten_and_collected(
    runs: usize,
    overwrite: fn(u32) -> bool,
    gc_garbage_ratio: f64,
) -> (FsRef, Db, Model, Vec<u64>) {
    let fs: FsRef = MemFs::new();
    let o = opts(fs.clone(), runs).tune(|s| {
        s.enable_gc = true;
        s.gc_garbage_ratio = gc_garbage_ratio;
    });
    let db = Db::open(DIR, o).unwrap();
    let mut model = fill(&db, 300);
    db.compact_range(None, None).unwrap();
    let first_runs: Vec<u64> = db.stats().blob_files.iter().map(|b| b.number).collect();
    for i in scattered(N).filter(|&i| overwrite(i)) {
        db.put(&key(i), &value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    // GC may have started on its own; this runs what is left.
    db.collect_garbage().unwrap();
    assert!(
        db.stats().gc_records_relocated > 0,
        "GC collected the first run"
    );
    (fs, db, model, first_runs)
}

#[test]
fn gc_of_a_sorted_run_keeps_it_a_sorted_run() {
    let (fs, db, model, first_runs) = overwritten_and_collected(3, |i| i % 5 == 0, 0.15);
    let st = db.stats();
    assert!(
        st.blob_files
            .iter()
            .all(|b| !first_runs.contains(&b.number)),
        "the first run's files are gone"
    );
    // Every live file, GC's output included, is a sorted run in key order.
    assert!(
        st.blob_files.iter().all(|b| b.sorted_run),
        "{:?}",
        st.blob_files
    );
    assert_eq!(depth(&runs(&db, &fs)), 2);
    check(&db, &model);
    drop(db);
    let db = Db::open(DIR, opts(fs.clone(), 3)).unwrap();
    check(&db, &model);
    assert!(db.stats().blob_files.iter().all(|b| b.sorted_run));
}

#[test]
fn a_run_gc_retired_still_counts_towards_the_limit() {
    // A fifth of the first run overwritten: GC's output of it holds the
    // other four fifths, four times as dense as the second run.
    let (fs, db, mut model, _) = overwritten_and_collected(2, |i| i % 5 == 0, 0.15);
    assert_eq!(depth(&runs(&db, &fs)), 2);
    // A few more values: the tables still name the first run's old file,
    // whose records now live in GC's output. Two runs overlap already, so
    // the first compaction into the last level merges the sparser one,
    // the second run, with the new values. Counting the GC output as no
    // run, it would move that output's values instead, as values new to
    // the last level.
    let third = |i: u32| i % 50 == 1;
    let now_moved = compact_round(&db, &mut model, third, 2);
    let all = runs(&db, &fs);
    assert!(depth(&all) <= 2, "at most two runs overlap: {all:?}");
    // The new values and the second run's (but for a few past the first
    // job's keys: `compact_range` may move the new values in two jobs);
    // the GC output's 1,600 stay.
    let new = (0..N).filter(|&i| third(i)).count() as u64;
    let second = (0..N).filter(|i| i % 5 == 0).count() as u64;
    assert!(
        (new + second * 9 / 10..=new + second).contains(&now_moved),
        "{now_moved} moved"
    );
}

#[test]
fn a_full_run_stays_while_sparse_runs_merge() {
    let (fs, db, mut model) = compacted(2, 300);
    let full: Vec<u64> = db.stats().blob_files.iter().map(|b| b.number).collect();
    assert_eq!(full.len(), 1, "one run of every key");
    for (round, rest) in [3, 6, 9, 2].into_iter().enumerate() {
        // A tenth of the keys, from all over the key range.
        let picked = |i: u32| i % 10 == rest;
        let now_moved = compact_round(&db, &mut model, picked, rest);
        let st = db.stats();
        let tenth = (0..N).filter(|&i| picked(i)).count() as u64;
        let full_stays = st.blob_files.iter().any(|b| b.number == full[0]);
        let depth = depth(&runs(&db, &fs));
        // The first round adds a second run; each later one merges the
        // sparse run (a tenth, two, then three) with the new values and
        // leaves the full run, six tenths or more, where it is.
        assert_eq!(now_moved, tenth * (round as u64 + 1), "round {round}");
        assert!(full_stays, "round {round}: the full run stays");
        assert_eq!(depth, 2, "round {round}");
    }
    drop(db);
    let report = tern::tools::check::check_store(Path::new(DIR), fs.clone()).unwrap();
    assert!(report.is_ok(), "tern check: {report:?}");
}

#[test]
fn a_damaged_value_stays_unmoved_and_compaction_goes_on() {
    let mem = MemFs::new();
    let fs: FsRef = mem.clone();
    let db = Db::open(DIR, opts(fs.clone(), 1)).unwrap();
    let model = fill(&db, 300);
    // Damage the first record of the first flush's blob file: its key is
    // the smallest the flush held.
    let first = db.stats().blob_files[0].number;
    let path = Path::new(DIR).join(blob_file_name(first));
    let damaged = BlobReader::open(&fs, &path, first)
        .unwrap()
        .read_ordinal(0)
        .unwrap()
        .key;
    let header = tern::internals::format::blob::BLOB_HEADER_LEN as u64;
    mem.corrupt_byte(&path, header + 30, 0xff).unwrap();
    db.compact_range(None, None).unwrap();
    let st = db.stats();
    assert!(
        st.values_moved >= u64::from(N) - 1,
        "every other value moved"
    );
    assert!(
        st.blob_files
            .iter()
            .any(|b| b.number == first && !b.sorted_run),
        "the damaged value's file stays"
    );
    db.put(b"after", b"the store is not poisoned").unwrap();
    let err = db.get(&damaged).unwrap_err();
    assert!(
        matches!(err, tern::Error::Corruption { .. }) && err.to_string().contains(".blob"),
        "{err}"
    );
    for (k, v) in model.iter().filter(|(k, _)| **k != damaged) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
}

/// [`opts`] with automatic compactions, L0 compacted at 4 files, moves
/// stopping at 12, writes slowing at 20; flushes only where a test makes
/// them.
fn auto_opts(fs: FsRef) -> Options {
    opts(fs, 1).tune(|s| {
        s.disable_auto_compactions = false;
        s.write_buffer_size = 1 << 20;
        s.level0_file_num_compaction_trigger = 4;
        s.level0_slowdown_writes_trigger = 20;
        s.level0_stop_writes_trigger = 100;
    })
}

/// A compaction filter that keeps everything and holds the compaction
/// thread at given calls until the test lets it go (or 30 s pass, so that
/// a failed test does not leave the thread waiting for ever).
struct Hold {
    calls: AtomicUsize,
    at: [usize; 2],
    reached: Mutex<mpsc::Sender<()>>,
    released: Mutex<mpsc::Receiver<()>>,
}

/// The test's ends of a [`Hold`]'s handshake.
struct HoldEnds {
    reached: mpsc::Receiver<()>,
    release: mpsc::Sender<()>,
}

impl Hold {
    fn new(at: [usize; 2]) -> (Arc<Hold>, HoldEnds) {
        let (reached_tx, reached) = mpsc::channel();
        let (release, released_rx) = mpsc::channel();
        let hold = Hold {
            calls: AtomicUsize::new(0),
            at,
            reached: Mutex::new(reached_tx),
            released: Mutex::new(released_rx),
        };
        (Arc::new(hold), HoldEnds { reached, release })
    }
}

impl HoldEnds {
    /// Waits until the compaction thread is held.
    fn wait(&self) {
        self.reached
            .recv_timeout(Duration::from_secs(30))
            .expect("the compaction reached the hold");
    }

    fn release(&self) {
        self.release.send(()).unwrap();
    }
}

impl CompactionFilter for Hold {
    fn name(&self) -> &str {
        "hold"
    }

    fn filter(&self, _level: usize, _key: &[u8], _value: FilterValue<'_>) -> FilterDecision {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.at.contains(&n) {
            let _ = self.reached.lock().unwrap().send(());
            let _ = self
                .released
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(30));
        }
        FilterDecision::Keep
    }
}

#[test]
fn a_compaction_stops_moving_values_when_l0_fills() {
    let mem = MemFs::new();
    let fs: FsRef = mem.clone();
    // The first compaction reads the four L0 files `fill` leaves, N
    // entries, one filter call each: held at its 200th, and again at the
    // next job's first.
    let (hold, ends) = Hold::new([200, N as usize + 1]);
    // Four L0 files, written with automatic compactions off: the first
    // compaction starts at the reopen, with the hold in place, and reads
    // exactly these.
    let o = auto_opts(fs.clone()).tune(|s| s.disable_auto_compactions = true);
    let db = Db::open(DIR, o).unwrap();
    let mut model = fill(&db, N as usize / 4);
    drop(db);
    let mut o = auto_opts(fs.clone());
    o.compaction_filter = Some(hold);
    let db = Db::open(DIR, o).unwrap();

    // Held: fill L0 past the point where moves stop, halfway from the
    // compaction trigger (4) to the slowdown trigger (20).
    ends.wait();
    for round in 1..=10 {
        for i in (0..N).filter(|i| i % 40 == round) {
            db.put(&key(i), &value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        db.flush().unwrap();
    }
    assert_eq!(db.stats().values_moved, 0, "nothing installed yet");
    ends.release();

    // Held again at the next job: the first one has installed.
    ends.wait();
    let st = db.stats();
    assert_eq!(st.value_moves_stopped, 1);
    assert_eq!(
        st.values_moved, 199,
        "the values before the hold moved, none after it"
    );
    ends.release();

    db.wait_for_background().unwrap();
    check(&db, &model);
    db.compact_range(None, None).unwrap();
    check(&db, &model);
    // Every value reaches a run in the end, the ones left behind included.
    assert!(db.stats().blob_files.iter().all(|b| b.sorted_run));
    runs(&db, &fs);
    drop(db);
    let report = tern::tools::check::check_store(Path::new(DIR), fs.clone()).unwrap();
    assert!(report.is_ok(), "tern check: {report:?}");
}
