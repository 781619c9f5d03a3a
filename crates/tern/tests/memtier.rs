//! The memory tier: memtables copied in, merged by relinking while readers
//! run, copied out to L0, and the WAL kept for whatever is still in it.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{key, small_opts, DIR};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::io::{FsRef, MemFs};
use tern::{Db, Options};

fn tier_opts(fs: FsRef) -> Options {
    small_opts(fs).tune(|s| {
        s.memtier_size = Some(2 << 20);
        s.memtier_levels = 2;
        s.memtier_level_tables = 2;
        s.max_write_buffer_number = 4;
    })
}

/// `round ‖ key ‖ padding`: a reader can tell which write it sees.
fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("{round:08}-{i}-").into_bytes();
    v.resize(300, b'v');
    v
}

fn round_of(v: &[u8]) -> u32 {
    std::str::from_utf8(&v[..8]).unwrap().parse().unwrap()
}

fn scan(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    common::scan(db).into_iter().collect()
}

/// Skewed overwrites through a small tier, with readers, iterators and a
/// snapshot running all along: every read sees a write that happened and
/// never an older one than before, the snapshot never changes, merges
/// unlink hidden versions, and the store holds every write at the end and
/// after a reopen.
#[test]
fn readers_see_every_write_while_the_tier_merges_and_copies_out() {
    let seed: u64 = std::env::var("TERN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("seed {seed} (TERN_SEED={seed})");
    let fs = MemFs::new();
    let db = Arc::new(Db::open(DIR, tier_opts(fs.clone())).unwrap());
    const KEYS: u32 = 400;
    for i in 0..KEYS {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    let snap = db.snapshot().unwrap();
    let frozen = scan(&db);
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (db, done) = (db.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed ^ r);
                let mut seen = vec![0u32; KEYS as usize];
                let mut reads = 0u64;
                while !done.load(Ordering::Relaxed) {
                    if rng.gen_bool(0.9) {
                        let i = rng.gen_range(0..KEYS);
                        let v = db.get(&key(i)).unwrap().expect("every key was written");
                        let round = round_of(&v);
                        assert_eq!(v, value(i, round), "a value of its own key");
                        assert!(round >= seen[i as usize], "went back in time: key {i}");
                        seen[i as usize] = round;
                    } else {
                        let all = scan(&db);
                        assert_eq!(all.len(), KEYS as usize, "every key, once");
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = frozen.clone();
    for round in 1..=60u32 {
        for _ in 0..200 {
            // Skewed: most writes go to a tenth of the keys.
            let i = if rng.gen_bool(0.8) {
                rng.gen_range(0..KEYS / 10)
            } else {
                rng.gen_range(0..KEYS)
            };
            db.put(&key(i), &value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        if round % 20 == 0 {
            // The snapshot still sees the first state.
            let at_snap: BTreeMap<_, _> = common::scan_at(&db, Some(&snap)).into_iter().collect();
            assert_eq!(at_snap, frozen, "seed {seed}: the snapshot moved");
        }
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert_eq!(scan(&db), model, "seed {seed}");
    let st = db.stats();
    assert!(st.memtier_copy_ins > 0, "{st}");
    assert!(st.memtier_merges > 0, "{st}");
    assert!(st.memtier_unlinked > 0, "{st}");
    drop(snap);
    db.flush().unwrap();
    let st = db.stats();
    assert!(st.memtier_copy_outs > 0, "{st}");
    assert_eq!(st.memtier_tables, 0, "flush empties the tier: {st}");
    assert_eq!(st.memtier_bytes, 0, "{st}");
    assert_eq!(scan(&db), model, "seed {seed}");
    Arc::into_inner(db).unwrap().close().unwrap();
    let db = Db::open(DIR, tier_opts(fs)).unwrap();
    assert_eq!(scan(&db), model, "seed {seed}: after reopening");
}

/// The tier is memory only: writes in it survive a crash through their
/// WALs, which stay until the tier copies them out.
#[test]
fn writes_in_the_tier_survive_a_crash_through_their_wals() {
    let fs = MemFs::new();
    let db = Db::open(DIR, tier_opts(fs.clone())).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..3000u32 {
        db.put(&key(i), &value(i, 1)).unwrap();
        model.insert(key(i), value(i, 1));
    }
    // Let the tier take the memtables, without a flush to L0.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while db.stats().immutable_memtables > 0 {
        assert!(std::time::Instant::now() < deadline, "memtables stay");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let st = db.stats();
    assert!(st.memtier_copy_ins > 0 && st.memtier_tables > 0, "{st}");
    assert!(
        st.levels[0].files == 0 || st.memtier_copy_outs > 0,
        "only a copy-out writes L0: {st}"
    );
    db.sync_wal().unwrap();
    let crashed = fs.crashed_copy();
    drop(db);
    let db = Db::open(DIR, tier_opts(crashed)).unwrap();
    assert_eq!(scan(&db), model, "every synced write came back");
}
