//! Many threads on one store: writers, readers, iterators and snapshots
//! while flushes and compactions run underneath.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use common::{small_opts, DIR};
use tern::io::MemFs;
use tern::{Db, Options, ReadOptions, Snapshot, WriteBatch, WriteOptions};

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Db>();
    send_sync::<Snapshot>();
};

/// A tiny deterministic generator, one per thread.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u32) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % u64::from(n)) as u32
    }
}

fn wkey(writer: u32, i: u32) -> Vec<u8> {
    format!("w{writer}-{i:05}").into_bytes()
}

/// `<key>:<round>:` padded to 120 bytes.
fn wvalue(key: &[u8], round: u32) -> Vec<u8> {
    let mut v = [key, format!(":{round}:").as_bytes()].concat();
    v.resize(120, b'.');
    v
}

/// The round stored in a value, checking that it was written for `key`.
fn round_of(key: &[u8], value: &[u8]) -> u32 {
    let text = std::str::from_utf8(value).unwrap();
    let mut parts = text.split(':');
    assert_eq!(
        parts.next().unwrap().as_bytes(),
        key,
        "value {text:?} belongs to another key"
    );
    let round = parts.next().unwrap().parse().unwrap();
    assert_eq!(value, wvalue(key, round), "malformed value");
    round
}

fn mem_db() -> Db {
    let opts = small_opts(MemFs::new()).tune(|s| {
        s.level0_file_num_compaction_trigger = 2;
    });
    Db::open(DIR, opts).unwrap()
}

#[test]
fn db_is_send_and_sync() {
    // Checked at compile time above; this shares one handle for real.
    let db = Arc::new(mem_db());
    let other = db.clone();
    std::thread::spawn(move || other.put(b"from", b"thread").unwrap())
        .join()
        .unwrap();
    assert_eq!(db.get(b"from").unwrap(), Some(b"thread".to_vec()));
}

#[test]
fn concurrent_writers_and_readers_end_with_every_key_at_its_last_value() {
    const WRITERS: u32 = 4;
    const KEYS: u32 = 1200;
    const ROUNDS: u32 = 3;
    let db = mem_db();
    let done = AtomicBool::new(false);
    let reads = AtomicU32::new(0);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let db = &db;
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        for i in 0..KEYS {
                            let k = wkey(w, i);
                            db.put(&k, &wvalue(&k, round)).unwrap();
                        }
                    }
                })
            })
            .collect();
        for r in 0..2u32 {
            let (db, done, reads) = (&db, &done, &reads);
            s.spawn(move || {
                let mut rng = Rng(u64::from(r) + 1);
                // The newest round this thread saw per key: never goes back.
                let mut seen: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
                while !done.load(Ordering::Acquire) {
                    let k = wkey(rng.below(WRITERS), rng.below(KEYS));
                    if let Some(v) = db.get(&k).unwrap() {
                        let round = round_of(&k, &v);
                        let last = seen.entry(k.clone()).or_insert(round);
                        assert!(
                            round >= *last,
                            "{k:?} went back from round {last} to {round}"
                        );
                        *last = round;
                    }
                    let mut it = db.iter(ReadOptions::default()).unwrap();
                    it.seek(&k);
                    let mut prev: Option<Vec<u8>> = None;
                    for _ in 0..50 {
                        if !it.valid() {
                            break;
                        }
                        round_of(it.key(), it.value());
                        if let Some(p) = &prev {
                            assert!(p.as_slice() < it.key(), "iterator out of order");
                        }
                        prev = Some(it.key().to_vec());
                        it.next();
                    }
                    it.status().unwrap();
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
    });
    let stats = db.stats();
    println!(
        "{} reader loops, {} flushes, {} compactions",
        reads.load(Ordering::Relaxed),
        stats.flushes,
        stats.compactions
    );
    assert!(reads.load(Ordering::Relaxed) > 0);
    assert!(stats.flushes > 0, "no flush ran during the test");
    assert!(stats.compactions > 0, "no compaction ran during the test");
    let check = |db: &Db| {
        for w in 0..WRITERS {
            for i in 0..KEYS {
                let k = wkey(w, i);
                assert_eq!(db.get(&k).unwrap(), Some(wvalue(&k, ROUNDS - 1)), "{k:?}");
            }
        }
        assert_eq!(common::scan(db).len(), (WRITERS * KEYS) as usize);
    };
    check(&db);
    db.wait_for_background().unwrap();
    check(&db);
}

#[test]
fn group_commit_groups_concurrent_synced_writes() {
    const THREADS: u32 = 8;
    const PER_THREAD: u32 = 50;
    // A disk whose fsync takes 5 ms: while a leader syncs, the other
    // writers queue, so every later group holds several writes.
    let (_mem, fault) = common::fault_fs();
    fault.set_sync_delay(std::time::Duration::from_millis(5));
    let opts = Options {
        fs: fault.clone(),
        ..Options::default()
    };
    let db = Db::open(DIR, opts).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let db = &db;
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    let mut b = WriteBatch::new();
                    let k = wkey(t, i);
                    b.put(&k, &wvalue(&k, 0));
                    db.write(b, WriteOptions::synced()).unwrap();
                }
            });
        }
    });
    let stats = db.stats();
    let keys = u64::from(THREADS * PER_THREAD);
    println!(
        "{} writes in {} groups ({:.2} writes per group), {} WAL syncs",
        stats.keys_written,
        stats.write_groups,
        stats.keys_written as f64 / stats.write_groups.max(1) as f64,
        stats.wal_syncs
    );
    assert_eq!(stats.keys_written, keys);
    assert!(
        stats.write_groups * 2 <= keys,
        "{} groups for {keys} writes: concurrent synced writes were not grouped",
        stats.write_groups
    );
    assert!(
        stats.wal_syncs <= stats.write_groups,
        "{} fsyncs for {} groups: a group shares one",
        stats.wal_syncs,
        stats.write_groups
    );
    for t in 0..THREADS {
        for i in 0..PER_THREAD {
            let k = wkey(t, i);
            assert_eq!(db.get(&k).unwrap(), Some(wvalue(&k, 0)));
        }
    }
}

/// Reads every writer key through `snap`, by point lookups and by a scan.
fn read_snapshot(db: &Db, snap: &Snapshot, writers: u32, keys: u32) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let ro = ReadOptions {
        snapshot: Some(snap),
        ..Default::default()
    };
    let mut gets = BTreeMap::new();
    for w in 0..writers {
        for i in 0..keys {
            let k = wkey(w, i);
            if let Some(v) = db.get_opt(&k, &ro).unwrap() {
                gets.insert(k, v);
            }
        }
    }
    let mut it = db.iter(ro).unwrap();
    it.seek_to_first();
    let mut scanned = BTreeMap::new();
    while it.valid() {
        scanned.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().unwrap();
    assert!(gets == scanned, "snapshot gets and scan disagree");
    gets
}

#[test]
fn snapshot_taken_mid_run_gives_a_stable_view() {
    const WRITERS: u32 = 2;
    const KEYS: u32 = 800;
    const ROUNDS: u32 = 6;
    let db = mem_db();
    // Puts done by each writer.
    let progress: Vec<AtomicU32> = (0..WRITERS).map(|_| AtomicU32::new(0)).collect();
    let (snap, first, during) = std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (db, progress) = (&db, &progress);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    for i in 0..KEYS {
                        let k = wkey(w, i);
                        db.put(&k, &wvalue(&k, round)).unwrap();
                        progress[w as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let wait_for = |n: u32| {
            while progress.iter().any(|p| p.load(Ordering::Relaxed) < n) {
                std::thread::yield_now();
            }
        };
        // Every key written at least once, and a round in progress.
        wait_for(KEYS * 2 + 300);
        let snap = db.snapshot().unwrap();
        let first = read_snapshot(&db, &snap, WRITERS, KEYS);
        // Read again while the writers are still overwriting everything.
        wait_for(KEYS * 4);
        let during = read_snapshot(&db, &snap, WRITERS, KEYS);
        (snap, first, during)
    });
    assert!(
        first == during,
        "the snapshot's view changed while writes ran"
    );
    // Push everything through compaction; the snapshot must keep its versions.
    db.compact_range(None, None).unwrap();
    let after = read_snapshot(&db, &snap, WRITERS, KEYS);
    assert!(
        first == after,
        "the snapshot's view changed after compaction"
    );
    // A point in time: each writer's keys show round r up to some index and
    // round r-1 after it.
    for w in 0..WRITERS {
        let rounds: Vec<u32> = (0..KEYS)
            .filter_map(|i| {
                let k = wkey(w, i);
                first.get(&k).map(|v| round_of(&k, v))
            })
            .collect();
        assert_eq!(rounds.len(), KEYS as usize, "writer {w}: keys missing");
        assert!(
            rounds.windows(2).all(|p| p[0] == p[1] || p[0] == p[1] + 1),
            "writer {w}: not a point in time: {rounds:?}"
        );
    }
    // The latest state moved on.
    for w in 0..WRITERS {
        let k = wkey(w, 0);
        assert_eq!(db.get(&k).unwrap(), Some(wvalue(&k, ROUNDS - 1)));
    }
}

#[test]
fn readers_see_concurrent_batches_whole() {
    const PAIRS: u32 = 300;
    const ROUNDS: u32 = 20;
    let db = mem_db();
    let done = AtomicBool::new(false);
    let checks = AtomicU32::new(0);
    let pair = |i: u32, round: u32| {
        let a = format!("a{i:04}").into_bytes();
        let b = format!("b{i:04}").into_bytes();
        let mut batch = WriteBatch::new();
        batch
            .put(&a, &wvalue(&a, round))
            .put(&b, &wvalue(&b, round));
        batch
    };
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..2u32)
            .map(|w| {
                let db = &db;
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        for i in (w..PAIRS).step_by(2) {
                            db.write(pair(i, round), WriteOptions::default()).unwrap();
                        }
                    }
                })
            })
            .collect();
        for r in 0..2u64 {
            let (db, done, checks) = (&db, &done, &checks);
            s.spawn(move || {
                let mut rng = Rng(r + 7);
                while !done.load(Ordering::Acquire) {
                    let i = rng.below(PAIRS);
                    let a = format!("a{i:04}").into_bytes();
                    let b = format!("b{i:04}").into_bytes();
                    let snap = db.snapshot().unwrap();
                    let ro = ReadOptions {
                        snapshot: Some(&snap),
                        ..Default::default()
                    };
                    let va = db.get_opt(&a, &ro).unwrap().map(|v| round_of(&a, &v));
                    let vb = db.get_opt(&b, &ro).unwrap().map(|v| round_of(&b, &v));
                    assert_eq!(va, vb, "pair {i} seen half written through a snapshot");
                    // An iterator is a snapshot too.
                    let mut it = db.iter(ReadOptions::default()).unwrap();
                    it.seek(&a);
                    let ia = (it.valid() && it.key() == a).then(|| round_of(&a, it.value()));
                    it.seek(&b);
                    let ib = (it.valid() && it.key() == b).then(|| round_of(&b, it.value()));
                    it.status().unwrap();
                    assert_eq!(ia, ib, "pair {i} seen half written through an iterator");
                    checks.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
    });
    assert!(checks.load(Ordering::Relaxed) > 0);
    assert!(db.stats().flushes > 0, "no flush ran during the test");
}

/// A store with default options on a `FaultFs` over memory.
fn fault_db() -> (Arc<Db>, Arc<tern::io::FaultFs>) {
    let (_mem, fault) = common::fault_fs();
    let opts = Options {
        fs: fault.clone(),
        ..Options::default()
    };
    (Arc::new(Db::open(DIR, opts).unwrap()), fault)
}

#[test]
fn stats_and_reads_answer_while_a_synced_write_waits_on_fsync() {
    // A disk whose fsync takes 3 s. A server polls stats and serves reads
    // while writes are stuck; neither may wait for the WAL's fsync.
    let (db, fault) = fault_db();
    db.put(b"k", b"v").unwrap();
    fault.set_sync_delay(std::time::Duration::from_secs(3));
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            let mut b = WriteBatch::new();
            b.put(b"k2", b"v2");
            db.write(b, WriteOptions::synced()).unwrap();
        })
    };
    // Let the writer reach its fsync.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let db = db.clone();
        std::thread::spawn(move || {
            let s = db.stats();
            let v = db.get(b"k").unwrap();
            let _ = tx.send((s.wal_bytes, v));
        });
    }
    let (wal_bytes, v) = rx
        .recv_timeout(std::time::Duration::from_millis(1500))
        .expect("stats or a read waited for the WAL fsync");
    assert!(
        !writer.is_finished(),
        "the write did not wait for its fsync"
    );
    assert!(wal_bytes > 0);
    assert_eq!(v.as_deref(), Some(&b"v"[..]));
    writer.join().unwrap();
    fault.set_sync_delay(std::time::Duration::ZERO);
    assert_eq!(db.get(b"k2").unwrap().as_deref(), Some(&b"v2"[..]));
}

/// Regression: every write group took the state mutex, which an install
/// holds while it syncs the manifest, so each flush, compaction and GC
/// install held up all writes for a sync (the tail of an update-heavy
/// workload).
#[test]
fn writes_that_fit_the_memtable_do_not_wait_for_an_install_to_sync_the_manifest() {
    let (db, fault) = fault_db();
    for i in 0..100u32 {
        db.put(format!("a{i:03}").as_bytes(), b"v").unwrap();
    }
    db.flush().unwrap();
    // A disk whose syncs take 3 s: the compaction syncs its table, then
    // its install syncs the manifest under the state mutex.
    fault.set_sync_delay(std::time::Duration::from_secs(3));
    let compaction = {
        let db = db.clone();
        std::thread::spawn(move || db.compact_range(None, None).unwrap())
    };
    // Writes start once the compaction syncs its table: a write before
    // that would leave compact_range a memtable to flush, and the switch
    // syncs the old WAL while the writer waits, as it must.
    while fault.delayed_syncs() == 0 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let db = db.clone();
        std::thread::spawn(move || {
            // Writes all through the compaction: a fresh memtable has
            // room for every one, so none needs the state mutex.
            let mut i = 0u32;
            while !compaction.is_finished() {
                db.put(format!("b{i:05}").as_bytes(), b"v").unwrap();
                let _ = tx.send(i);
                i += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            compaction.join().unwrap();
        });
    }
    // The compaction takes at least 6 s; no write may stall for a sync.
    let mut writes = 0;
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(2000)) {
            Ok(_) => writes += 1,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("a write waited over 2 s while a compaction synced, after {writes} writes")
            }
        }
    }
    assert!(writes >= 40, "only {writes} writes in a compaction of 6 s");
    fault.set_sync_delay(std::time::Duration::ZERO);
    assert_eq!(db.get(b"a000").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(db.get(b"b00000").unwrap().as_deref(), Some(&b"v"[..]));
}

/// Reader threads cache the super version they last read with. One that
/// read once and then sat idle must not keep the tables an install made
/// obsolete (or their files) alive.
#[test]
fn an_idle_reader_thread_does_not_keep_obsolete_tables() {
    let fs = MemFs::new();
    let db = Arc::new(Db::open(DIR, small_opts(fs.clone())).unwrap());
    for i in 0..200 {
        db.put(&common::key(i), &common::value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let before = common::files_ending(&fs, DIR, ".sst");
    assert!(!before.is_empty());
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let reader = {
        let db = db.clone();
        std::thread::spawn(move || {
            assert!(db.get(&common::key(7)).unwrap().is_some());
            read_tx.send(()).unwrap();
            let _ = done_rx.recv();
            // Still reads the current data after the installs.
            assert_eq!(db.get(&common::key(7)).unwrap(), Some(common::value(7, 1)));
        })
    };
    read_rx.recv().unwrap();
    for i in 0..200 {
        db.put(&common::key(i), &common::value(i, 1)).unwrap();
    }
    db.compact_range(None, None).unwrap();
    let after = common::files_ending(&fs, DIR, ".sst");
    for f in &before {
        assert!(
            !after.contains(f),
            "{} outlived the compaction that replaced it",
            f.display()
        );
    }
    done_tx.send(()).unwrap();
    reader.join().unwrap();
}

/// Descriptors this process holds on files under `dir` that are deleted.
fn deleted_files_held_open(dir: &std::path::Path) -> Vec<String> {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let dir = dir.to_string_lossy().into_owned();
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|t| t.starts_with(&dir) && t.ends_with("(deleted)"))
        .collect()
}

/// Point reads keep the table and blob file readers they used with their
/// thread's cached super version. A thread that read once and then sat
/// idle must not hold the files an install made obsolete open after they
/// are deleted (their disk space would not come back).
#[test]
fn an_idle_reader_thread_does_not_hold_deleted_files_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let opts = Options {
        settings: tern::Settings {
            write_buffer_size: 256 << 10,
            target_file_size: 64 << 10,
            blob_threshold: Some(256),
            ..tern::Settings::default()
        },
        ..Options::default()
    };
    let db = Arc::new(Db::open(&dir, opts).unwrap());
    let value = |i: u32, round: u32| {
        let mut v = common::value(i, round);
        v.resize(1000, b'v');
        v
    };
    for i in 0..200 {
        db.put(&common::key(i), &value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let reader = {
        let db = db.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                assert_eq!(db.get(&common::key(i)).unwrap(), Some(value(i, 0)));
            }
            read_tx.send(()).unwrap();
            let _ = done_rx.recv();
            assert_eq!(db.get(&common::key(7)).unwrap(), Some(value(7, 1)));
        })
    };
    read_rx.recv().unwrap();
    for i in 0..200 {
        db.delete(&common::key(i)).unwrap();
    }
    db.compact_range(None, None).unwrap();
    db.collect_garbage().unwrap();
    let mut held = deleted_files_held_open(&dir);
    for _ in 0..100 {
        if held.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        held = deleted_files_held_open(&dir);
    }
    assert!(held.is_empty(), "deleted files still open: {held:?}");
    for i in 0..200 {
        db.put(&common::key(i), &value(i, 1)).unwrap();
    }
    done_tx.send(()).unwrap();
    reader.join().unwrap();
}

/// Batches large enough that the memtable links them later, on the linker
/// thread (or on a reader that needs the list first): through snapshots,
/// iterators and flushes every batch is seen whole, and never an older one
/// after a newer.
#[test]
fn large_batches_linked_later_are_seen_whole_and_in_order() {
    const KEYS: u32 = 200;
    const ROUNDS: u32 = 60;
    let db = mem_db();
    let done = AtomicBool::new(false);
    let checks = AtomicU32::new(0);
    let key = |i: u32| format!("k{i:04}").into_bytes();
    std::thread::scope(|s| {
        let writer = {
            let db = &db;
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let mut batch = WriteBatch::new();
                    for i in 0..KEYS {
                        batch.put(&key(i), &wvalue(&key(i), round));
                    }
                    db.write(batch, WriteOptions::default()).unwrap();
                }
            })
        };
        for r in 0..2u64 {
            let (db, done, checks) = (&db, &done, &checks);
            s.spawn(move || {
                let mut rng = Rng(r + 11);
                let mut last = None;
                while !done.load(Ordering::Acquire) {
                    let snap = db.snapshot().unwrap();
                    let ro = ReadOptions {
                        snapshot: Some(&snap),
                        ..Default::default()
                    };
                    let (i, j) = (rng.below(KEYS), rng.below(KEYS));
                    let vi = db
                        .get_opt(&key(i), &ro)
                        .unwrap()
                        .map(|v| round_of(&key(i), &v));
                    let vj = db
                        .get_opt(&key(j), &ro)
                        .unwrap()
                        .map(|v| round_of(&key(j), &v));
                    assert_eq!(vi, vj, "keys {i} and {j} from two batches in one snapshot");
                    assert!(vi >= last, "round went back from {last:?} to {vi:?}");
                    last = vi;
                    let ro = ReadOptions {
                        snapshot: Some(&snap),
                        ..Default::default()
                    };
                    let mut it = db.iter(ro).unwrap();
                    it.seek_to_first();
                    let mut rounds = Vec::new();
                    while it.valid() {
                        rounds.push(round_of(it.key(), it.value()));
                        it.next();
                    }
                    it.status().unwrap();
                    if let Some(r) = vi {
                        assert_eq!(rounds, vec![r; KEYS as usize], "iterator at one snapshot");
                    } else {
                        assert!(rounds.is_empty());
                    }
                    checks.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        writer.join().unwrap();
        done.store(true, Ordering::Release);
    });
    assert!(checks.load(Ordering::Relaxed) > 0);
    assert!(db.stats().flushes > 0, "no flush ran during the test");
    for i in 0..KEYS {
        assert_eq!(db.get(&key(i)).unwrap(), Some(wvalue(&key(i), ROUNDS - 1)));
    }
}

/// More writers than cores, with forced memtable switches (`flush`, which
/// leads a group of its own) among them: every write must land exactly
/// once, each writer's call must return only once its write is readable,
/// and nothing may wait for good on a wake-up lost between a leader
/// leaving the queue and a writer joining it.
#[test]
fn writers_and_forced_switches_interleave_without_losing_or_repeating_a_write() {
    const WRITERS: u32 = 8;
    const EACH: u32 = 3000;
    let fs = MemFs::new();
    let db = Arc::new(Db::open(DIR, small_opts(fs.clone())).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            let mut flushes = 0u32;
            while !done.load(Ordering::Acquire) {
                db.flush().unwrap();
                flushes += 1;
            }
            flushes
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let key = wkey(w, i);
                    db.put(&key, &wvalue(&key, 0)).unwrap();
                    // Acknowledged means visible to this thread at once.
                    assert!(
                        db.get(&key).unwrap().is_some(),
                        "{key:?} not visible after put"
                    );
                }
            })
        })
        .collect();
    for t in writers {
        t.join().unwrap();
    }
    done.store(true, Ordering::Release);
    assert!(flusher.join().unwrap() > 0, "no forced switch ran");
    assert_eq!(
        db.stats().keys_written,
        u64::from(WRITERS * EACH),
        "every write committed once"
    );
    let check = |db: &Db| {
        for w in 0..WRITERS {
            for i in 0..EACH {
                let key = wkey(w, i);
                let v = db
                    .get(&key)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{key:?} lost"));
                assert_eq!(round_of(&key, &v), 0);
            }
        }
        let mut it = db.iter(ReadOptions::default()).unwrap();
        it.seek_to_first();
        let mut n = 0u32;
        while it.valid() {
            n += 1;
            it.next();
        }
        it.status().unwrap();
        assert_eq!(n, WRITERS * EACH, "no key twice, none extra");
    };
    check(&db);
    Arc::try_unwrap(db).ok().unwrap().close().unwrap();
    check(&Db::open(DIR, small_opts(fs)).unwrap());
}
