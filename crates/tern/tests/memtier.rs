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
    // Merges run on the tier's own thread, which may lag the writes on a
    // loaded machine.
    wait_for(|| db.stats().memtier_merges > 0 && db.stats().memtier_unlinked > 0);
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
    settle(&db);
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

/// Asserts two scans are equal, naming the first few keys that differ.
fn assert_same(got: &BTreeMap<Vec<u8>, Vec<u8>>, want: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    let show =
        |v: Option<&Vec<u8>>| v.map(|v| String::from_utf8_lossy(&v[..v.len().min(16)]).to_string());
    let diff: Vec<_> = want
        .keys()
        .chain(got.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| got.get(*k) != want.get(*k))
        .take(5)
        .map(|k| {
            (
                String::from_utf8_lossy(k).to_string(),
                show(got.get(k)),
                show(want.get(k)),
            )
        })
        .collect();
    assert!(diff.is_empty(), "{what}: (key, got, want) {diff:?}");
}

fn durable_opts(fs: FsRef) -> Options {
    tier_opts(fs).tune(|s| s.memtier_path = Some("MEMTIER".into()))
}

/// Polls `done` every 5 ms until it holds or 30 s have passed; the caller
/// asserts what it needs.
fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Waits until the flush thread has moved every immutable memtable on.
fn settle(db: &Db) {
    wait_for(|| db.stats().immutable_memtables == 0);
    assert_eq!(db.stats().immutable_memtables, 0, "memtables stay");
}

fn wal_count(fs: &MemFs) -> usize {
    common::wals_with_records(fs, DIR).len()
}

/// A durable tier keeps its tables in its file: their WALs go as soon as
/// the copy-in is logged, a power loss keeps every synced write, and the
/// reopened store finds the tables in the tier again.
#[test]
fn a_durable_tier_survives_power_loss_and_releases_its_wals() {
    let fs = MemFs::new();
    let db = Db::open(DIR, durable_opts(fs.clone())).unwrap();
    let mut model = BTreeMap::new();
    for round in 1..=3 {
        for i in 0..1500u32 {
            let i = (i * 7 + round * 13) % 2000;
            db.put(&key(i), &value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
    }
    settle(&db);
    let st = db.stats();
    assert!(st.memtier_copy_ins > 3 && st.memtier_tables > 0, "{st}");
    assert!(
        wal_count(&fs) <= 2,
        "WALs of tables in the tier are released: {:?}",
        fs.file_names()
    );
    db.sync_wal().unwrap();
    let crashed = fs.crashed_copy();
    drop(db);
    let db = Db::open(DIR, durable_opts(crashed.clone())).unwrap();
    let st = db.stats();
    assert!(st.memtier_tables > 0, "the tier's tables came back: {st}");
    assert_same(&scan(&db), &model, "every synced write came back");
    // New writes go on above the restored tables, and survive again.
    for i in 0..500u32 {
        db.put(&key(i), &value(i, 9)).unwrap();
        model.insert(key(i), value(i, 9));
    }
    settle(&db);
    db.sync_wal().unwrap();
    let again = crashed.crashed_copy();
    drop(db);
    let db = Db::open(DIR, durable_opts(again)).unwrap();
    assert_same(&scan(&db), &model, "after a second power loss");
    db.flush().unwrap();
    assert_eq!(db.stats().memtier_tables, 0, "a flush empties the tier");
    assert_same(&scan(&db), &model, "after copying the tier out");
}

/// Power loss in every simulated form while the tier copies in, merges and
/// copies out: each key reads a value written to it, no older than the
/// last one synced.
#[test]
fn every_crash_mode_keeps_synced_writes_with_a_durable_tier() {
    for (n, mode) in tern::io::CrashMode::ALL.into_iter().enumerate() {
        let fs = MemFs::new();
        let db = Db::open(DIR, durable_opts(fs.clone())).unwrap();
        let mut synced = BTreeMap::new();
        let mut crashes = Vec::new();
        for round in 1..=6u32 {
            for i in 0..700u32 {
                db.put(&key(i), &value(i, round)).unwrap();
            }
            db.sync_wal().unwrap();
            for i in 0..700u32 {
                synced.insert(key(i), round);
            }
            // While the background threads work on what was just written.
            crashes.push((
                fs.crashed_copy_with(mode, n as u64 * 100 + u64::from(round)),
                synced.clone(),
            ));
        }
        drop(db);
        for (round, (crashed, synced)) in crashes.into_iter().enumerate() {
            let db = Db::open(DIR, durable_opts(crashed))
                .unwrap_or_else(|e| panic!("{mode:?} crash {round}: {e}"));
            let all = scan(&db);
            for (k, &r) in &synced {
                let v = all
                    .get(k)
                    .unwrap_or_else(|| panic!("{mode:?}: a synced key is gone"));
                assert!(
                    round_of(v) >= r,
                    "{mode:?} crash {round}: went back before a synced write"
                );
            }
            for (k, v) in &all {
                let i: u32 = std::str::from_utf8(&v[9..])
                    .unwrap()
                    .split('-')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(k, &key(i), "{mode:?}: a value of its own key");
            }
        }
    }
}

/// The first byte of `needle` in the tier file.
fn find_in_tier(fs: &MemFs, needle: &[u8]) -> u64 {
    use tern::io::FileSystem;
    let data = fs
        .read_all(std::path::Path::new(&format!("{DIR}/MEMTIER")))
        .unwrap();
    data.windows(needle.len())
        .position(|w| w == needle)
        .expect("the value is in the tier file") as u64
}

/// A flipped byte in a durable tier table is corruption at the tier
/// file's extent, never wrong data; so is a missing tier file, or opening
/// without the tier the store was written with.
#[test]
fn a_damaged_or_missing_tier_file_is_reported_never_read_as_data() {
    use tern::io::FileSystem;
    let fs = MemFs::new();
    let db = Db::open(DIR, durable_opts(fs.clone())).unwrap();
    for i in 0..1500u32 {
        db.put(&key(i), &value(i, 4)).unwrap();
    }
    settle(&db);
    assert!(db.stats().memtier_tables > 0);
    drop(db);
    let tier = std::path::PathBuf::from(format!("{DIR}/MEMTIER"));

    let damaged = fs.crashed_copy_with(tern::io::CrashMode::KeepAll, 0);
    let at = find_in_tier(&damaged, &value(3, 4));
    damaged.corrupt_byte(&tier, at + 5, 0x01).unwrap();
    match Db::open(DIR, durable_opts(damaged)) {
        Err(tern::Error::Corruption { file, offset, .. }) => {
            assert_eq!(file, tier);
            assert!(offset <= at, "the damaged table's extent: {offset} vs {at}");
        }
        other => panic!("expected corruption, got {:?}", other.map(|_| ())),
    }

    let missing = fs.crashed_copy_with(tern::io::CrashMode::KeepAll, 0);
    missing.remove_file(&tier).unwrap();
    match Db::open(DIR, durable_opts(missing)) {
        Err(tern::Error::Corruption { file, .. }) => assert_eq!(file, tier),
        other => panic!("expected corruption, got {:?}", other.map(|_| ())),
    }

    let without = fs.crashed_copy_with(tern::io::CrashMode::KeepAll, 0);
    let err = Db::open(DIR, tier_opts(without)).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("memtier_path"), "{err}");
}

/// Rounds that overwrite every key: merges unlink whole copied memtables,
/// whose memory goes back before any copy-out (and, durable, whose tables
/// leave the manifest), and the store still holds every last write, also
/// after a power loss.
#[test]
fn merges_free_memtables_that_newer_writes_overwrote_entirely() {
    let fs = MemFs::new();
    let db = Db::open(DIR, durable_opts(fs.clone())).unwrap();
    let mut model = BTreeMap::new();
    for round in 1..=14 {
        for i in 0..150u32 {
            db.put(&key(i), &value(i, round)).unwrap();
            model.insert(key(i), value(i, round));
        }
        settle(&db);
    }
    // Merges run in the background after the copy-ins that `settle` waits
    // for: under load they lag (one run saw 9 tables and 1 merge here).
    wait_for(|| db.stats().memtier_extents_freed > 0);
    let st = db.stats();
    assert!(st.memtier_extents_freed > 0, "{st}");
    assert_same(&scan(&db), &model, "after the merges");
    db.sync_wal().unwrap();
    let crashed = fs.crashed_copy();
    drop(db);
    let db = Db::open(DIR, durable_opts(crashed)).unwrap();
    assert_same(&scan(&db), &model, "after a power loss");
}

/// Regression: `close` unlocked a durable tier's file while readers of the
/// closed handle still held its memory, so a new handle could map the file
/// and reuse that memory under them. A reader of a closed handle now keeps
/// the file locked: a second open is refused until it goes.
#[test]
fn a_reader_of_a_closed_handle_keeps_the_durable_tier_file_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let opts = || durable_opts(Arc::new(tern::io::PosixFs));
    let db = Db::open(&dir, opts()).unwrap();
    for i in 0..1500u32 {
        db.put(&key(i), &value(i, 1)).unwrap();
    }
    settle(&db);
    assert!(db.stats().memtier_tables > 0);
    let mut it = db.iter(tern::ReadOptions::default()).unwrap();
    it.seek_to_first();
    db.close().unwrap();
    match Db::open(&dir, opts()) {
        Err(tern::Error::Busy(why)) => assert!(why.contains("MEMTIER"), "{why}"),
        other => panic!(
            "expected the tier file to be busy, got {:?}",
            other.map(|_| ())
        ),
    }
    assert!(it.valid(), "the closed handle's reader reads on");
    drop(it);
    let db = Db::open(&dir, opts()).unwrap();
    assert_eq!(scan(&db).len(), 1500);
}
