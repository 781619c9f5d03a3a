//! Log compaction: dead records go, live ones move to the tail, and the
//! store reads the same before and after, across a crash, with sessions
//! running during it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tern::io::{FileSystem, MemFs};
use tern_hash::{HashOptions, HashStore};

fn check(store: &Arc<HashStore>, model: &HashMap<Vec<u8>, Vec<u8>>, keys: u64, what: &str) {
    let mut s = store.session();
    for i in 0..keys {
        let key = format!("k{i}").into_bytes();
        assert_eq!(
            s.get(&key).expect("get"),
            model.get(&key).cloned(),
            "{what}: k{i}"
        );
    }
}

#[test]
fn compaction_keeps_live_records_and_deletes_old_segments() {
    let fs = MemFs::new();
    let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
    let mut model = HashMap::new();
    {
        let mut s = store.session();
        let mut rng = SmallRng::seed_from_u64(3);
        for round in 0..6u64 {
            for i in 0..800u64 {
                let key = format!("k{i}").into_bytes();
                if rng.gen_range(0..8) == 0 {
                    s.delete(&key).expect("delete");
                    model.remove(&key);
                } else if round < 2 || i % 3 == 0 {
                    let v =
                        format!("{round}-{i}-{}", "x".repeat(rng.gen_range(0..200))).into_bytes();
                    s.upsert(&key, &v).expect("upsert");
                    model.insert(key, v);
                }
            }
        }
    }
    let before = store.stats();
    let names = |fs: &MemFs| {
        fs.list_dir("/db".as_ref())
            .expect("list")
            .into_iter()
            .filter(|n| n.starts_with("hlog."))
            .count()
    };
    let files_before = names(&fs);
    let done = store.compact(before.head).expect("compact");
    assert!(done.segments_removed > 0, "{done:?}");
    assert!(done.copied > 0 && done.copied < done.scanned, "{done:?}");
    assert!(names(&fs) < files_before);
    assert_eq!(store.stats().begin, done.begin);
    check(&store, &model, 800, "after compaction");
    drop(store);
    fs.crash();
    let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("reopen");
    check(&store, &model, 800, "after compaction and a crash");
    assert_eq!(store.stats().begin, done.begin);
}

#[test]
fn compaction_runs_under_concurrent_sessions_without_losing_a_write() {
    const THREADS: u64 = 3;
    const KEYS: u64 = 200;
    let fs = MemFs::new();
    let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
    let stop = AtomicBool::new(false);
    let models: Vec<HashMap<Vec<u8>, Vec<u8>>> = std::thread::scope(|scope| {
        let compactor = scope.spawn(|| {
            let mut rounds = 0;
            while !stop.load(Ordering::Relaxed) {
                let head = store.stats().head;
                let done = store.compact(head).expect("compact");
                rounds += u64::from(done.segments_removed > 0);
                std::thread::yield_now();
            }
            rounds
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let store = &store;
                scope.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let mut s = store.session();
                    let mut model = HashMap::new();
                    for n in 0..6000u64 {
                        let key = format!("t{t}-{}", rng.gen_range(0..KEYS)).into_bytes();
                        match rng.gen_range(0..10) {
                            0 => {
                                s.delete(&key).expect("delete");
                                model.remove(&key);
                            }
                            1..=3 => {
                                assert_eq!(s.get(&key).expect("get"), model.get(&key).cloned())
                            }
                            4 => {
                                let got = s
                                    .rmw(&key, |old| {
                                        let mut v = old.map(<[u8]>::to_vec).unwrap_or_default();
                                        v.push(b'+');
                                        v.truncate(300);
                                        Some(v)
                                    })
                                    .expect("rmw")
                                    .expect("written");
                                let mut want = model.get(&key).cloned().unwrap_or_default();
                                want.push(b'+');
                                want.truncate(300);
                                assert_eq!(got, want);
                                model.insert(key, got);
                            }
                            _ => {
                                let v = format!("{n}:{}", "v".repeat(rng.gen_range(0..150)))
                                    .into_bytes();
                                s.upsert(&key, &v).expect("upsert");
                                model.insert(key, v);
                            }
                        }
                    }
                    model
                })
            })
            .collect();
        let models = workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect();
        stop.store(true, Ordering::Relaxed);
        let rounds = compactor.join().expect("compactor");
        assert!(
            rounds > 0,
            "some compaction removed a segment while sessions ran"
        );
        models
    });
    let all: HashMap<Vec<u8>, Vec<u8>> = models.into_iter().flatten().collect();
    let verify = |store: &Arc<HashStore>, what: &str| {
        let mut s = store.session();
        for t in 0..THREADS {
            for k in 0..KEYS {
                let key = format!("t{t}-{k}").into_bytes();
                assert_eq!(
                    s.get(&key).expect("get"),
                    all.get(&key).cloned(),
                    "{what}: t{t}-{k}"
                );
            }
        }
    };
    verify(&store, "after the run");
    store.checkpoint().expect("checkpoint");
    drop(store);
    fs.crash();
    let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("reopen");
    verify(&store, "after a crash");
}

#[test]
fn a_checkpoint_racing_a_compaction_never_names_a_begin_past_its_copies() {
    // Compaction moves the begin after copying; a checkpoint that read its
    // end before the copies and the begin after them would, after a crash,
    // have neither the originals nor the copies.
    for round in 0..20u64 {
        let fs = MemFs::new();
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        let mut model = HashMap::new();
        {
            let mut s = store.session();
            for i in 0..1500u64 {
                let key = format!("k{}", i % 300).into_bytes();
                let v = format!("{round}-{i}").into_bytes();
                s.upsert(&key, &v).expect("upsert");
                model.insert(key, v);
            }
        }
        std::thread::scope(|scope| {
            let c = scope.spawn(|| {
                for _ in 0..5 {
                    store.checkpoint().expect("checkpoint");
                }
            });
            store.compact(store.stats().head).expect("compact");
            c.join().expect("checkpointer");
        });
        // Crash right after whatever checkpoint came last.
        store.checkpoint().expect("checkpoint");
        let last = tern_hash::CheckpointMeta::decode(
            &fs.read_all("/db/CHECKPOINT".as_ref()).expect("read"),
        )
        .expect("valid");
        drop(store);
        fs.crash();
        let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("reopen");
        assert_eq!(store.stats().begin, last.begin);
        check(&store, &model, 300, &format!("round {round}"));
    }
}
