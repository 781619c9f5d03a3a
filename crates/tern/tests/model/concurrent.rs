//! Several writers at once on one store, each drawing operations from the
//! shared generator on its own keys, with power failures in the middle.

use std::sync::atomic::{AtomicUsize, Ordering};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::io::{CrashMode, MemFs};
use tern::{Db, ReadOptions, Snapshot, WriteBatch, WriteOptions};
use tern_ops::{ci_summary, random_settings, Generator, Op, Profile, Scale, Target, Weights};

use crate::executor::{options_from, DIR};
use crate::reads::{key_for, scan_with, value_for};
use crate::{env_num, Model};

/// Each writer's key numbers.
const WRITER_KEYS: u32 = 120;

/// One writer's view: its own keys (prefix `w<n>/`, which no one else
/// writes) and the states they passed through since the last point known
/// durable for it.
struct Writer {
    prefix: Vec<u8>,
    model: Model,
    /// `history[i]` is the writer's state after its i-th recorded write.
    history: Vec<Model>,
}

impl Writer {
    fn key(&self, n: u32) -> Vec<u8> {
        let mut k = self.prefix.clone();
        k.extend_from_slice(&key_for(n % WRITER_KEYS));
        k
    }

    /// The writer's keys as the store holds them.
    fn own(&self, db: &Db, snap: Option<&Snapshot>) -> Model {
        let mut upper = self.prefix.clone();
        *upper.last_mut().unwrap() += 1;
        scan_with(
            db,
            ReadOptions {
                snapshot: snap,
                lower_bound: Some(self.prefix.clone()),
                upper_bound: Some(upper),
                ..ReadOptions::default()
            },
        )
    }
}

/// Writes a random batch of `w`'s keys and records the new state once it
/// is acknowledged (under `gate`, with the durable mark when synced).
fn writer_write(
    db: &Db,
    w: &mut Writer,
    gate: &parking_lot::RwLock<()>,
    mark: &AtomicUsize,
    entries: &[(u32, bool)],
    sync: bool,
    step: usize,
) {
    let mut b = WriteBatch::new();
    let mut after = w.model.clone();
    for (i, &(n, put)) in entries.iter().enumerate() {
        let k = w.key(n);
        if put {
            let v = value_for(step, i as u64);
            b.put(&k, &v);
            after.insert(k, v);
        } else {
            b.delete(&k);
            after.remove(&k);
        }
    }
    db.write(
        b,
        WriteOptions {
            sync,
            disable_wal: false,
        },
    )
    .unwrap();
    let _g = gate.read();
    w.model = after;
    w.history.push(w.model.clone());
    if sync {
        mark.store(w.history.len() - 1, Ordering::SeqCst);
    }
    WRITES_RECORDED.fetch_add(1, Ordering::SeqCst);
}

/// Writes recorded by all writers; compared before and after a crash image
/// to count images taken while writers were still running.
static WRITES_RECORDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static IMAGES_MID_WRITE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs one writer thread's operations. Every read of its own keys must
/// show exactly its own latest writes (no one else touches them), snapshot
/// reads the state when the snapshot was taken. Writes are recorded under
/// `gate` after they are acknowledged, so a crash image taken while the
/// gate is held for writing holds every write made durable before `mark`.
fn writer_ops(
    db: &Db,
    w: &mut Writer,
    gate: &parking_lot::RwLock<()>,
    mark: &AtomicUsize,
    seed: u64,
    ops: usize,
) -> u64 {
    let mut checks = 0;
    for (step, op) in Generator::new(writer_profile(), seed)
        .take(ops)
        .iter()
        .enumerate()
    {
        match op {
            Op::Write { entries, sync } => {
                let entries: Vec<(u32, bool)> = entries
                    .iter()
                    .filter_map(|e| match e.target {
                        Target::Key(n) => Some((n, e.put)),
                        Target::Group(_) => None,
                    })
                    .collect();
                writer_write(db, w, gate, mark, &entries, *sync, step);
            }
            Op::Get { key } => {
                let k = w.key(*key);
                assert_eq!(db.get(&k).unwrap().as_ref(), w.model.get(&k), "own get");
                checks += 1;
            }
            Op::Scan { .. } => {
                assert!(w.own(db, None) == w.model, "own keys through an iterator");
                checks += 1;
            }
            Op::SnapshotRead { key, .. } => {
                let snap = db.snapshot().unwrap();
                let at = w.model.clone();
                writer_write(db, w, gate, mark, &[(*key, true)], false, step);
                assert!(w.own(db, Some(&snap)) == at, "snapshot of own keys");
                checks += 1;
            }
            Op::Flush => {
                db.flush().unwrap();
                let _g = gate.read();
                mark.store(w.history.len() - 1, Ordering::SeqCst);
            }
            Op::Compact { .. } => db.compact_range(None, None).unwrap(),
            Op::Gc => {
                db.collect_garbage().unwrap();
            }
            other => panic!("the concurrent writers draw no {other}"),
        }
    }
    checks
}

/// What each concurrent writer draws: writes half the time, own reads, a
/// snapshot across a write, and flushes, compactions and GC.
fn writer_profile() -> Profile {
    let mut p = Profile::stress(WRITER_KEYS, 0);
    p.weights = Weights {
        put: 20,
        delete: 5,
        batch: 25,
        get: 25,
        scan: 15,
        snapshot_read: 5,
        flush: 2,
        compact: 2,
        gc: 1,
        ..Weights::default()
    };
    p.batch_len = (1, 3);
    p.batch_delete = 0.25;
    p.sync = 0.2;
    p
}

static CONCURRENT_CHECKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn run_concurrent(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut fs = MemFs::new();
    let settings: Vec<(String, String)> = random_settings(&mut rng, Scale::Tiny)
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect();
    let mut opts = options_from(&settings, fs.clone());
    let threads = rng.gen_range(2..5);
    let mut writers: Vec<Writer> = (0..threads)
        .map(|t| Writer {
            prefix: format!("w{t}/").into_bytes(),
            model: Model::new(),
            history: vec![Model::new()],
        })
        .collect();
    for epoch in 0..4 {
        let db = Db::open(DIR, opts.clone()).unwrap();
        let gate = parking_lot::RwLock::new(());
        let crash = rng.gen_bool(0.6).then(|| {
            let mode = CrashMode::ALL[rng.gen_range(0..CrashMode::ALL.len())];
            (mode, rng.gen::<u64>(), rng.gen_range(0..40u64))
        });
        let seeds: Vec<u64> = (0..threads).map(|_| rng.gen()).collect();
        // Index into each writer's history of its last durable state.
        let marks: Vec<AtomicUsize> = (0..threads).map(|_| AtomicUsize::new(0)).collect();
        // Those marks when the crash image was taken.
        let mut at_crash: Vec<usize> = Vec::new();
        let mut image = None;
        let mut recorded_at_image = 0;
        std::thread::scope(|s| {
            let handles: Vec<_> = writers
                .iter_mut()
                .zip(&seeds)
                .zip(&marks)
                .map(|((w, &seed), mark)| {
                    let (db, gate) = (&db, &gate);
                    s.spawn(move || writer_ops(db, w, gate, mark, seed, 150))
                })
                .collect();
            if let Some((mode, seed, delay)) = crash {
                // Power fails while the writers (and background work) run.
                std::thread::sleep(std::time::Duration::from_millis(delay));
                let _g = gate.write();
                image = Some((mode, fs.crashed_copy_with(mode, seed)));
                at_crash = marks.iter().map(|m| m.load(Ordering::SeqCst)).collect();
                recorded_at_image = WRITES_RECORDED.load(Ordering::SeqCst);
            }
            for h in handles {
                CONCURRENT_CHECKS
                    .fetch_add(h.join().unwrap(), std::sync::atomic::Ordering::Relaxed);
            }
        });
        if image.is_some() && WRITES_RECORDED.load(Ordering::SeqCst) > recorded_at_image {
            IMAGES_MID_WRITE.fetch_add(1, Ordering::Relaxed);
        }
        match image {
            None => {
                db.close().unwrap();
                let db = Db::open(DIR, opts.clone()).unwrap();
                for w in &mut writers {
                    assert!(
                        w.own(&db, None) == w.model,
                        "seed {seed} epoch {epoch}: reopen"
                    );
                    w.history = vec![w.model.clone()];
                }
                db.close().unwrap();
            }
            Some((mode, copy)) => {
                drop(db);
                fs = copy;
                opts.fs = fs.clone();
                let db = Db::open(DIR, opts.clone()).unwrap();
                for (t, w) in writers.iter_mut().enumerate() {
                    let got = w.own(&db, None);
                    // Only states recorded before the image count as
                    // durable; any later one may have made it too.
                    let allowed = &w.history[at_crash[t]..];
                    let Some(i) = allowed.iter().rposition(|m| *m == got) else {
                        panic!(
                            "seed {seed} epoch {epoch}: writer {t} after a {mode:?} crash holds \
                             none of its {} states since its last durable write",
                            allowed.len()
                        );
                    };
                    w.model = allowed[i].clone();
                    w.history = vec![w.model.clone()];
                }
                db.close().unwrap();
            }
        }
    }
}

/// Several writers at once, each on its own keys, with flushes, compactions
/// and GC from the writers themselves and power failures in the middle of
/// it all. Each writer's reads must be linearizable with its own writes;
/// after a crash each writer's keys must hold a prefix of its history that
/// includes its last durable write.
#[test]
fn concurrent_writers_see_their_own_writes() {
    let seeds: u64 = env_num::<u64>("TERN_MODEL_SEEDS").map_or(8, |n| (n / 10).max(4));
    for seed in 0..seeds {
        let res = std::panic::catch_unwind(|| run_concurrent(seed));
        if let Err(e) = res {
            eprintln!("concurrent model test failed at seed {seed}");
            std::panic::resume_unwind(e);
        }
    }
    let checks = CONCURRENT_CHECKS.load(std::sync::atomic::Ordering::Relaxed);
    let mid = IMAGES_MID_WRITE.load(Ordering::Relaxed);
    eprintln!(
        "{seeds} concurrent seeds, {checks} own-read checks, {mid} power failures while writers ran"
    );
    ci_summary("model_concurrent_seeds", seeds);
    ci_summary("model_concurrent_checks", checks);
    ci_summary("model_concurrent_mid_write_crashes", mid);
    assert!(
        checks > 0 && mid > 0,
        "own reads were checked and crashes hit running writers"
    );
}
