//! Behaviour of the hash store: the log spilling to disk, concurrent
//! sessions against a model, checkpoints, crashes and damage.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tern::io::{FileSystem, MemFs};
use tern_hash::{Error, HashOptions, HashStore};

fn counter(old: Option<&[u8]>) -> Option<Vec<u8>> {
    let n: u64 = old
        .map(|v| {
            std::str::from_utf8(v)
                .expect("utf8")
                .parse()
                .expect("a number")
        })
        .unwrap_or(0);
    Some((n + 1).to_string().into_bytes())
}

/// A value naming its key and version, padded to `len`.
fn value_of(key: &[u8], version: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{}#{version}#", String::from_utf8_lossy(key)).into_bytes();
    v.resize(len.max(v.len()), b'.');
    v
}

fn version_in(key: &[u8], value: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(value);
    let mut parts = text.split('#');
    assert_eq!(
        parts.next().map(str::as_bytes),
        Some(key),
        "value {text} is not of key {}",
        String::from_utf8_lossy(key)
    );
    parts
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a version")
}

#[test]
fn the_log_spills_to_disk_and_every_version_reads_back() {
    let fs = MemFs::new();
    let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("open");
    let mut s = store.session();
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = SmallRng::seed_from_u64(7);
    for round in 0..4u64 {
        for i in 0..1500u64 {
            let key = format!("key{i}").into_bytes();
            match rng.gen_range(0..10) {
                0 => {
                    s.delete(&key).expect("delete");
                    model.remove(&key);
                }
                1 => {
                    let name = format!("count{}", i % 50).into_bytes();
                    let got = s.rmw(&name, counter).expect("rmw");
                    let want = counter(model.get(&name).map(|v| &v[..]));
                    assert_eq!(got, want);
                    model.insert(name, got.expect("written"));
                }
                _ => {
                    let v = value_of(&key, round, rng.gen_range(10..400));
                    s.upsert(&key, &v).expect("upsert");
                    model.insert(key, v);
                }
            }
        }
    }
    for (key, want) in &model {
        assert_eq!(
            s.get(key).expect("get").as_ref(),
            Some(want),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
    for i in 0..1500u64 {
        let key = format!("key{i}").into_bytes();
        assert_eq!(
            s.get(&key).expect("get"),
            model.get(&key).cloned(),
            "key{i}"
        );
    }
    drop(s);
    let stats = store.stats();
    assert!(stats.head > 64, "pages were evicted: {stats:?}");
    assert!(
        stats.disk_reads > 0 && stats.in_place_updates > 0,
        "{stats:?}"
    );
}

#[test]
fn a_checkpoint_survives_a_crash_and_what_came_after_it_does_not() {
    let fs = MemFs::new();
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    {
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        let mut s = store.session();
        for i in 0..2000u64 {
            let key = format!("k{}", i % 700).into_bytes();
            let v = value_of(&key, i, (i % 300) as usize);
            s.upsert(&key, &v).expect("upsert");
            model.insert(key, v);
        }
        for i in 0..100u64 {
            s.rmw(format!("n{}", i % 7).as_bytes(), counter)
                .expect("rmw");
        }
        for i in 0..7u64 {
            let n = if i < 2 { 15 } else { 14 };
            model.insert(format!("n{i}").into_bytes(), n.to_string().into_bytes());
        }
        s.delete(b"k5").expect("delete");
        model.remove(&b"k5"[..]);
        store.checkpoint().expect("checkpoint");
        for i in 0..500u64 {
            s.upsert(format!("k{i}").as_bytes(), b"after the checkpoint")
                .expect("upsert");
        }
        s.delete(b"k6").expect("delete");
        drop(s);
        fs.crash();
    }
    let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("reopen");
    assert!(store.stats().recovered_records > 0);
    let mut s = store.session();
    for i in 0..700u64 {
        let key = format!("k{i}").into_bytes();
        assert_eq!(s.get(&key).expect("get"), model.get(&key).cloned(), "k{i}");
    }
    for i in 0..7u64 {
        let key = format!("n{i}").into_bytes();
        assert_eq!(s.get(&key).expect("get"), model.get(&key).cloned(), "n{i}");
    }
    // The store goes on from the checkpoint, and a second recovery sees both.
    s.upsert(b"k1", b"new").expect("upsert");
    drop(s);
    store.checkpoint().expect("checkpoint");
    drop(store);
    fs.crash();
    let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("reopen");
    let mut s = store.session();
    assert_eq!(s.get(b"k1").expect("get").as_deref(), Some(&b"new"[..]));
    assert_eq!(s.get(b"k2").expect("get"), model.get(&b"k2"[..]).cloned());
}

#[test]
fn a_store_never_checkpointed_comes_back_empty() {
    let fs = MemFs::new();
    {
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        let mut s = store.session();
        for i in 0..3000u64 {
            s.upsert(format!("k{i}").as_bytes(), &[7u8; 100])
                .expect("upsert");
        }
    }
    let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("reopen");
    assert_eq!(store.session().get(b"k1").expect("get"), None);
}

/// One operation of a session's history: which key it wrote and when.
struct Done {
    key: usize,
    version: u64,
    deleted: bool,
    start: Instant,
    end: Instant,
}

/// Each key's state after `ops`: the version of its last write, or `None`.
fn state_after(ops: &[Done]) -> HashMap<usize, Option<u64>> {
    let mut last = HashMap::new();
    for d in ops {
        last.insert(d.key, (!d.deleted).then_some(d.version));
    }
    last
}

#[test]
fn concurrent_sessions_match_a_model_across_checkpoints_and_a_crash() {
    const THREADS: usize = 4;
    const KEYS: usize = 300;
    let seed = std::env::var("TERN_HASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11u64);
    eprintln!("seed {seed} (TERN_HASH_SEED reruns it)");
    let fs = MemFs::new();
    let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
    let checkpoint_at = std::sync::Mutex::new(None);
    let progress = std::sync::atomic::AtomicUsize::new(0);
    let counted = std::sync::atomic::AtomicU64::new(0);
    let histories: Vec<Vec<Done>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, progress, counted) = (&store, &progress, &counted);
                scope.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed * 100 + t as u64);
                    let mut s = store.session();
                    let mut history = Vec::new();
                    for version in 1..=4000u64 {
                        progress.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let key = rng.gen_range(0..KEYS);
                        let name = format!("t{t}k{key}").into_bytes();
                        let start = Instant::now();
                        let mut deleted = false;
                        match rng.gen_range(0..20) {
                            0 => {
                                s.delete(&name).expect("delete");
                                deleted = true;
                            }
                            1..=3 => {
                                // Read someone else's key: whatever it holds
                                // must be that key's.
                                let other = format!(
                                    "t{}k{}",
                                    rng.gen_range(0..THREADS),
                                    rng.gen_range(0..KEYS)
                                )
                                .into_bytes();
                                if let Some(v) = s.get(&other).expect("get") {
                                    version_in(&other, &v);
                                }
                                continue;
                            }
                            4 => {
                                s.rmw(b"shared", counter).expect("rmw");
                                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                continue;
                            }
                            _ => {
                                let len = rng.gen_range(0..300);
                                s.upsert(&name, &value_of(&name, version, len))
                                    .expect("upsert");
                            }
                        }
                        history.push(Done {
                            key,
                            version,
                            deleted,
                            start,
                            end: Instant::now(),
                        });
                    }
                    history
                })
            })
            .collect();
        let checkpointer = scope.spawn(|| {
            // Mid-way through the sessions' work.
            while progress.load(std::sync::atomic::Ordering::Relaxed) < THREADS * 2000 {
                std::thread::yield_now();
            }
            let start = Instant::now();
            let end = store.checkpoint().expect("checkpoint");
            *checkpoint_at.lock().expect("lock") = Some((start, Instant::now()));
            end
        });
        checkpointer.join().expect("checkpointer");
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect()
    });
    let shared_total = {
        let mut s = store.session();
        let v = s.get(b"shared").expect("get").expect("counted");
        String::from_utf8(v)
            .expect("utf8")
            .parse::<u64>()
            .expect("number")
    };
    // Everything is there before the crash.
    {
        let mut s = store.session();
        for (t, h) in histories.iter().enumerate() {
            let want = state_after(h);
            for key in 0..KEYS {
                let name = format!("t{t}k{key}").into_bytes();
                let got = s.get(&name).expect("get").map(|v| version_in(&name, &v));
                assert_eq!(
                    got,
                    want.get(&key).copied().flatten(),
                    "seed {seed}: t{t}k{key} before the crash"
                );
            }
        }
    }
    assert_eq!(
        shared_total,
        counted.into_inner(),
        "seed {seed}: every increment counted once"
    );
    drop(store);
    fs.crash();
    let (ck_start, ck_end) = checkpoint_at.lock().expect("lock").expect("taken");
    let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("reopen");
    let mut s = store.session();
    let mut musts = 0;
    for (t, h) in histories.iter().enumerate() {
        // The recovered keys of a session are a prefix of its history: the
        // longest op index any key shows, and everything before it.
        let mut recovered = HashMap::new();
        let mut prefix = 0usize;
        for key in 0..KEYS {
            let name = format!("t{t}k{key}").into_bytes();
            let got = s.get(&name).expect("get").map(|v| version_in(&name, &v));
            if let Some(v) = got {
                let at = h
                    .iter()
                    .position(|d| d.version == v)
                    .expect("a version that was written");
                prefix = prefix.max(at + 1);
            }
            recovered.insert(key, got);
        }
        // Ops that ended before the checkpoint began must be in; ops that
        // began after it returned must not.
        let must = h.iter().take_while(|d| d.end < ck_start).count();
        let may = h.iter().take_while(|d| d.start < ck_end).count();
        assert!(
            prefix <= may,
            "seed {seed}: t{t} kept op {prefix}, which began after the checkpoint (at most {may})"
        );
        // Deletes show no version, so some prefix length in [prefix, may]
        // must explain every key.
        musts += must;
        let explained = (prefix.max(must)..=may).any(|p| {
            let want = state_after(&h[..p]);
            (0..KEYS).all(|key| recovered[&key] == want.get(&key).copied().flatten())
        });
        assert!(explained, "seed {seed}: t{t}'s recovered keys are no prefix of its history ({prefix}..={may}, must {must})");
    }
    assert!(
        musts > 0,
        "seed {seed}: the checkpoint came after some operations"
    );
}

#[test]
fn a_damaged_record_is_reported_with_its_file_and_offset() {
    let fs = MemFs::new();
    {
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        let mut s = store.session();
        for i in 0..200u64 {
            s.upsert(format!("k{i}").as_bytes(), &[b'v'; 50])
                .expect("upsert");
        }
        store.checkpoint().expect("checkpoint");
    }
    let path = Path::new("/db").join(tern_hash::segment_file_name(0));
    let mut bytes = fs.read_all(&path).expect("segment");
    bytes[64 + 30] ^= 0x40;
    let mut f = fs.create(&path).expect("rewrite");
    f.append(&bytes).expect("append");
    f.sync().expect("sync");
    drop(f);
    match HashStore::open_with_fs(fs, "/db", HashOptions::small()) {
        Err(Error::Corruption {
            file,
            offset,
            reason,
        }) => {
            assert_eq!(file, path);
            assert_eq!(offset, 64, "{reason}");
        }
        Err(e) => panic!("expected a corruption error, got {e}"),
        Ok(_) => panic!("a damaged record was accepted"),
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let fs: Arc<dyn FileSystem> = MemFs::new();
    let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
    let mut s = store.session();
    match s.upsert(b"big", &vec![0u8; 5000]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("page_bits"), "{m}"),
        other => panic!("{other:?}"),
    }
    drop(s);
    store.checkpoint().expect("checkpoint");
    drop(store);
    let other = HashOptions {
        page_bits: 13,
        ..HashOptions::small()
    };
    assert!(matches!(
        HashStore::open_with_fs(fs, "/db", other),
        Err(Error::InvalidArgument(_))
    ));
    let bad = HashOptions {
        mutable_pages: 8,
        ..HashOptions::small()
    };
    assert!(matches!(bad.validate(), Err(Error::InvalidArgument(_))));
}

#[test]
fn a_zeroed_record_in_the_last_page_is_reported_at_open_not_after_the_next_checkpoint() {
    let fs = MemFs::new();
    let end = {
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        let mut s = store.session();
        for i in 0..10u64 {
            s.upsert(format!("k{i}").as_bytes(), &[b'v'; 40])
                .expect("upsert");
        }
        drop(s);
        store.checkpoint().expect("checkpoint")
    };
    assert_ne!(end % 4096, 0, "the log ends mid-page");
    // Zero the header of the third record (each takes 24 + 48 bytes).
    let path = Path::new("/db").join(tern_hash::segment_file_name(0));
    let mut bytes = fs.read_all(&path).expect("segment");
    let third = 64 + 2 * 72;
    bytes[third..third + 24].fill(0);
    let mut f = fs.create(&path).expect("rewrite");
    f.append(&bytes).expect("append");
    f.sync().expect("sync");
    drop(f);
    match HashStore::open_with_fs(fs, "/db", HashOptions::small()) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, third as u64),
        Err(e) => panic!("expected a corruption error, got {e}"),
        Ok(_) => panic!("a log with a hole opened"),
    }
}

#[test]
fn a_store_checkpointed_before_any_write_reopens_and_takes_writes() {
    let fs = MemFs::new();
    {
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        store.checkpoint().expect("checkpoint");
    }
    for round in 0..2 {
        let store =
            HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("reopen");
        let mut s = store.session();
        for i in 0..2000u64 {
            s.upsert(format!("k{i}").as_bytes(), &[b'v'; 60])
                .expect("upsert");
        }
        drop(s);
        store.checkpoint().expect("the log flushes after a reopen");
        assert_eq!(
            store.session().get(b"k1999").expect("get").map(|v| v.len()),
            Some(60),
            "round {round}"
        );
    }
}

#[test]
fn reopening_with_fewer_index_buckets_is_refused() {
    let fs = MemFs::new();
    {
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        let mut s = store.session();
        for i in 0..500u64 {
            s.upsert(format!("k{i}").as_bytes(), b"v").expect("upsert");
        }
        drop(s);
        store.checkpoint().expect("checkpoint");
    }
    let fewer = HashOptions {
        index_bits: 4,
        ..HashOptions::small()
    };
    assert!(matches!(
        HashStore::open_with_fs(fs.clone(), "/db", fewer),
        Err(Error::InvalidArgument(_))
    ));
    let more = HashOptions {
        index_bits: 12,
        ..HashOptions::small()
    };
    let store = HashStore::open_with_fs(fs, "/db", more).expect("more buckets are fine");
    let mut s = store.session();
    for i in 0..500u64 {
        assert_eq!(
            s.get(format!("k{i}").as_bytes()).expect("get").as_deref(),
            Some(&b"v"[..]),
            "k{i}"
        );
    }
}

#[test]
fn a_panicking_update_leaves_the_record_usable() {
    let store = HashStore::open_with_fs(MemFs::new(), "/db", HashOptions::small()).expect("open");
    let mut s = store.session();
    s.upsert(b"k", b"1").expect("upsert");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s.rmw(b"k", |_| panic!("the update fails"));
    }));
    assert!(r.is_err());
    let mut s = store.session();
    s.upsert(b"k", b"2")
        .expect("the record's lock was released");
    assert_eq!(s.get(b"k").expect("get").as_deref(), Some(&b"2"[..]));
    // The epoch moves on too: the log can still turn pages and checkpoint.
    for i in 0..3000u64 {
        s.upsert(format!("x{i}").as_bytes(), &[0u8; 50])
            .expect("upsert");
    }
    drop(s);
    store.checkpoint().expect("checkpoint");
}
