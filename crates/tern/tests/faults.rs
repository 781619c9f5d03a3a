//! How the store reacts to failed I/O: errors reach the caller, a failed WAL
//! write or sync poisons the store for writes, and no acknowledged data is
//! lost when flushes, compactions or opens fail.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{fault_fs, key, scan, small_opts, value, DIR};
use tern::io::{FaultFs, FaultKind, FileSystem, MemFs};
use tern::{Db, Error, Options, ReadOptions, WriteBatch, WriteOptions};

fn put_synced(db: &Db, k: &[u8], v: &[u8]) -> tern::Result<()> {
    let mut b = WriteBatch::new();
    b.put(k, v);
    db.write(b, WriteOptions::synced())
}

fn assert_io(r: tern::Result<impl std::fmt::Debug>, what: &str) {
    match r {
        Err(Error::Io { .. }) => {}
        other => panic!("{what}: expected Error::Io, got {other:?}"),
    }
}

fn assert_poisoned(r: tern::Result<impl std::fmt::Debug>, what: &str) {
    match r {
        Err(Error::Poisoned(_)) => {}
        other => panic!("{what}: expected Error::Poisoned, got {other:?}"),
    }
}

/// Options that never compact on their own (the L0 triggers are far away),
/// so a test decides when compaction runs.
fn no_auto_compaction(fs: tern::io::FsRef) -> Options {
    small_opts(fs).tune(|s| {
        s.level0_file_num_compaction_trigger = 16;
        s.level0_slowdown_writes_trigger = 32;
        s.level0_stop_writes_trigger = 64;
    })
}

fn assert_contents(db: &Db, expected: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    for (k, v) in expected {
        assert_eq!(
            db.get(k).unwrap().as_ref(),
            Some(v),
            "{what}: get {}",
            String::from_utf8_lossy(k)
        );
    }
    let got: BTreeMap<_, _> = scan(db).into_iter().collect();
    assert!(
        got == *expected,
        "{what}: scan differs from what was written"
    );
}

// ---------------------------------------------------------------- WAL writes

/// Waits until the syncer thread has written the header of the WAL it
/// prepares for the next switch, so that a fault armed on WAL writes next
/// hits a writer, not the syncer. Some WAL must hold records.
fn wait_for_prepared_wal(mem: &MemFs) {
    let header = tern::internals::format::log_record::FILE_HEADER_LEN as u64;
    eventually("the next WAL prepared", || {
        let newest = common::files_ending(mem, DIR, ".log").into_iter().max();
        let newest_is_header_only = newest.is_some_and(|n| mem.file_size(&n).ok() == Some(header));
        newest_is_header_only && !common::wals_with_records(mem, DIR).is_empty()
    });
}

#[test]
fn wal_write_error_reaches_put_as_io_error() {
    let (mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault.clone())).unwrap();
    db.put(b"before", b"1").unwrap();
    wait_for_prepared_wal(&mem);
    fault.only_paths_containing(".log");
    fault.fail_once(FaultKind::Write);
    assert_io(db.put(b"k", b"v"), "put with a failing WAL write");
    assert_eq!(fault.injected(), 1);
}

#[test]
fn writes_are_refused_as_poisoned_after_a_wal_write_error() {
    let (mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault.clone())).unwrap();
    db.put(b"before", b"1").unwrap();
    wait_for_prepared_wal(&mem);
    fault.only_paths_containing(".log");
    fault.fail_once(FaultKind::Write);
    assert!(db.put(b"k", b"v").is_err());
    // The fault was one-shot: the file system works again, the store must not.
    assert_poisoned(db.put(b"k2", b"v"), "put");
    assert_poisoned(db.delete(b"k2"), "delete");
    let mut b = WriteBatch::new();
    b.put(b"k3", b"v");
    assert_poisoned(db.write(b, WriteOptions::synced()), "synced batch");
    assert_poisoned(db.flush(), "flush");
}

#[test]
fn reads_still_work_after_a_wal_write_error() {
    let (mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault.clone())).unwrap();
    for i in 0..100 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    wait_for_prepared_wal(&mem);
    fault.only_paths_containing(".log");
    fault.fail_once(FaultKind::Write);
    assert!(db.put(&key(1000), b"v").is_err());
    for i in 0..100 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    let rows = scan(&db);
    assert!(
        rows.len() == 100 || rows.len() == 101,
        "{} rows",
        rows.len()
    );
    assert_eq!(
        &rows[..100],
        &(0..100).map(|i| (key(i), value(i, 0))).collect::<Vec<_>>()[..]
    );
}

#[test]
fn reopening_after_a_wal_write_error_accepts_writes_again() {
    let (mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault.clone())).unwrap();
    put_synced(&db, b"a", b"1").unwrap();
    wait_for_prepared_wal(&mem);
    fault.only_paths_containing(".log");
    fault.fail_once(FaultKind::Write);
    assert!(db.put(b"b", b"2").is_err());
    drop(db);
    fault.clear();
    let db = Db::open(DIR, small_opts(fault.clone())).unwrap();
    assert_eq!(db.get(b"a").unwrap(), Some(b"1".to_vec()));
    db.put(b"c", b"3").unwrap();
    assert_eq!(db.get(b"c").unwrap(), Some(b"3".to_vec()));
}

// ----------------------------------------------------------------- WAL syncs

#[test]
fn wal_sync_error_on_a_synced_write_is_returned() {
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault.clone())).unwrap();
    put_synced(&db, b"a", b"1").unwrap();
    fault.only_paths_containing(".log");
    fault.fail_once(FaultKind::Sync);
    assert_io(
        put_synced(&db, b"b", b"2"),
        "synced put with a failing fsync",
    );
    assert_eq!(fault.injected(), 1);
    assert_poisoned(
        put_synced(&db, b"c", b"3"),
        "synced put after a failed fsync",
    );
}

#[test]
fn synced_writes_survive_a_crash_after_a_failed_sync() {
    let (mem, fault) = fault_fs();
    let db = Db::open(DIR, small_opts(fault.clone())).unwrap();
    // Enough to switch memtables (and WALs) and flush a few times.
    let n = 1500;
    for i in 0..n {
        put_synced(&db, &key(i), &value(i, 0)).unwrap();
    }
    assert!(db.stats().flushes > 0, "the WAL never rotated");
    fault.only_paths_containing(".log");
    fault.fail_once(FaultKind::Sync);
    assert!(put_synced(&db, &key(n), &value(n, 0)).is_err());

    let after_crash = mem.crashed_copy();
    drop(db);
    let db = Db::open(DIR, small_opts(after_crash)).unwrap();
    let rows = scan(&db);
    let mut expected: Vec<_> = (0..n).map(|i| (key(i), value(i, 0))).collect();
    if rows.len() == expected.len() + 1 {
        // The write whose fsync failed may or may not have reached the disk.
        expected.push((key(n), value(n, 0)));
    }
    assert_eq!(rows.len(), expected.len(), "number of keys after the crash");
    for (got, want) in rows.iter().zip(&expected) {
        assert_eq!(got, want, "key {}", String::from_utf8_lossy(&want.0));
    }
}

/// Options whose WAL goes to the background syncer every 4 KiB and whose
/// memtable does not switch within these tests.
fn background_wal_sync_opts(fs: tern::io::FsRef, per_sync: u64) -> Options {
    let mut opts = small_opts(fs);
    opts.settings.write_buffer_size = 8 << 20;
    opts.settings.wal_bytes_per_sync = per_sync;
    opts
}

/// Polls `f` every 10 ms for up to 10 s.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn the_wal_goes_to_the_background_syncer_as_it_grows() {
    for per_sync in [0, 4096] {
        let (_mem, fault) = fault_fs();
        let db = Db::open(DIR, background_wal_sync_opts(fault.clone(), per_sync)).unwrap();
        for i in 0..200 {
            db.put(&key(i), &value(i, 0)).unwrap();
        }
        if per_sync == 0 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert_eq!(db.stats().wal_background_syncs, 0, "syncing is off");
        } else {
            // About 24 KiB of WAL: several requests, coalesced while busy.
            eventually("a background WAL sync", || {
                db.stats().wal_background_syncs > 0
            });
        }
        assert_eq!(db.stats().wal_syncs, 0, "no write asked for a sync");
    }
}

/// A file system that records which threads synced a directory; once
/// `fail_syncer` is set, the WAL syncer thread's directory syncs fail after
/// 200 ms, and while `hold_background` is set the syncer thread's
/// directory syncs and the background threads' table creates wait.
struct DirSyncWatch {
    inner: tern::io::FsRef,
    callers: parking_lot::Mutex<Vec<(std::thread::ThreadId, Option<String>)>>,
    fail_syncer: std::sync::atomic::AtomicBool,
    hold_background: std::sync::atomic::AtomicBool,
}

impl DirSyncWatch {
    fn new() -> Arc<DirSyncWatch> {
        DirSyncWatch::over(MemFs::new())
    }

    fn over(inner: tern::io::FsRef) -> Arc<DirSyncWatch> {
        Arc::new(DirSyncWatch {
            inner,
            callers: Default::default(),
            fail_syncer: Default::default(),
            hold_background: Default::default(),
        })
    }

    fn syncs_by(&self, thread: std::thread::ThreadId) -> usize {
        self.callers
            .lock()
            .iter()
            .filter(|(t, _)| *t == thread)
            .count()
    }

    /// Waits while `hold_background` is set.
    fn held(&self) {
        while self
            .hold_background
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    fn syncs_by_name(&self, name: &str) -> usize {
        let callers = self.callers.lock();
        callers
            .iter()
            .filter(|(_, n)| n.as_deref() == Some(name))
            .count()
    }
}

impl FileSystem for DirSyncWatch {
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn tern::io::WritableFile>> {
        let background = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("tern-"));
        if background && path.extension().is_some_and(|e| e == "sst") {
            self.held();
        }
        self.inner.create(path)
    }
    fn open(&self, path: &Path) -> std::io::Result<Arc<dyn tern::io::RandomAccessFile>> {
        self.inner.open(path)
    }
    fn read_all(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        self.inner.read_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove_file(path)
    }
    fn list_dir(&self, path: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn file_size(&self, path: &Path) -> std::io::Result<u64> {
        self.inner.file_size(path)
    }
    fn sync_dir(&self, path: &Path) -> std::io::Result<()> {
        let me = std::thread::current();
        self.callers
            .lock()
            .push((me.id(), me.name().map(String::from)));
        if me.name() == Some("tern-wal-sync") {
            self.held();
        }
        if me.name() == Some("tern-wal-sync")
            && self.fail_syncer.load(std::sync::atomic::Ordering::SeqCst)
        {
            std::thread::sleep(std::time::Duration::from_millis(200));
            return Err(std::io::Error::other("injected: slow failing sync_dir"));
        }
        self.inner.sync_dir(path)
    }
    fn lock(&self, path: &Path) -> std::io::Result<Box<dyn tern::io::FileLock>> {
        self.inner.lock(path)
    }
}

/// Regression: every memtable switch created the next WAL and synced the
/// directory while all writers waited, on ext4 often longer than the old
/// WAL's own fsync (a journal commit behind the flush's fresh data). The
/// syncer thread now prepares the next WAL ahead of the switch.
#[test]
fn a_memtable_switch_does_not_sync_the_directory_on_the_writers_path() {
    let watch = DirSyncWatch::new();
    let mut opts = small_opts(watch.clone());
    opts.settings.disable_auto_compactions = true;
    let db = Db::open(DIR, opts).unwrap();
    let me = std::thread::current().id();
    let at_open = watch.syncs_by(me);
    let mut i = 0;
    for switch in 1..=3 {
        // The syncer's WAL is ready once it synced the directory after
        // the last switch; the grace covers handing it over.
        eventually("the next WAL prepared", || {
            watch.syncs_by_name("tern-wal-sync") >= switch
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        // 64 KiB memtables: a switch within about 32 puts.
        for _ in 0..1000 {
            if db.stats().wals_prepared >= switch as u64 {
                break;
            }
            db.put(&key(i), &[b'v'; 2000]).unwrap();
            i += 1;
        }
        assert_eq!(
            db.stats().wals_prepared,
            switch as u64,
            "switches to a prepared WAL"
        );
    }
    assert_eq!(
        watch.syncs_by(me),
        at_open,
        "a writer synced the directory at a switch"
    );
    for j in 0..i {
        assert_eq!(db.get(&key(j)).unwrap().unwrap(), vec![b'v'; 2000]);
    }
}

/// Regression: a memtable switch fsynced the old WAL on the writer's
/// path, holding up every writer for a whole memtable's worth of WAL. Now
/// the syncer thread syncs it: with every WAL sync failing, the write that
/// switches succeeds, and the store is poisoned by the background sync
/// (later writes are refused as `Poisoned`, never failed by a switch).
#[test]
fn a_memtable_switch_does_not_sync_the_old_wal_on_the_writers_path() {
    let (_mem, fault) = fault_fs();
    let mut opts = small_opts(fault.clone());
    opts.settings.wal_bytes_per_sync = 0;
    let db = Db::open(DIR, opts).unwrap();
    fault.only_paths_containing(".log");
    fault.inject(FaultKind::Sync, 0, true);
    // 64 KiB memtables: a switch within about 32 puts.
    let mut i = 0;
    while db.stats().background_error.is_none() {
        match db.put(&key(i), &[b'v'; 2000]) {
            Ok(()) => {}
            Err(Error::Poisoned(_)) => break,
            Err(e) => panic!("put {i} failed itself: {e}"),
        }
        i += 1;
        assert!(i < 10_000, "no switch, or its WAL never synced");
    }
    eventually("the background sync's failure", || {
        db.stats().background_error.is_some()
    });
    let cause = db.stats().background_error.unwrap();
    assert!(cause.contains(".log"), "names the WAL: {cause}");
    assert!(matches!(db.sync_wal(), Err(Error::Poisoned(_))));
}

/// A synced write (or `sync_wal`) right after a switch must make the old
/// WAL durable before its own: with the syncer held back and no table
/// written, only the synced bytes survive the crash, and every write made
/// before the synced one is still there.
#[test]
fn a_synced_write_after_a_switch_makes_the_retired_wal_durable_first() {
    for use_sync_wal in [false, true] {
        let mem = MemFs::new();
        let watch = DirSyncWatch::over(mem.clone());
        watch
            .hold_background
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let db = Db::open(DIR, small_opts(watch.clone())).unwrap();
        // The syncer waits in the directory sync of the WAL it prepares
        // at open: it cannot sync a retired WAL before the test does.
        eventually("the syncer held", || {
            watch.syncs_by_name("tern-wal-sync") >= 1
        });
        let mut i = 0;
        while db.stats().immutable_memtables == 0 {
            db.put(&key(i), &value(i, 0)).unwrap();
            i += 1;
            assert!(i < 10_000, "no switch");
        }
        db.put(&key(i), &value(i, 0)).unwrap();
        i += 1;
        if use_sync_wal {
            db.sync_wal().unwrap();
        } else {
            let mut b = WriteBatch::new();
            b.put(&key(i), &value(i, 0));
            db.write(
                b,
                WriteOptions {
                    sync: true,
                    ..WriteOptions::default()
                },
            )
            .unwrap();
            i += 1;
        }
        let crashed = mem.crashed_copy_with(tern::io::CrashMode::SyncedOnly, 0);
        let kept = mem.crashed_copy_with(tern::io::CrashMode::KeepAll, 0);
        watch
            .hold_background
            .store(false, std::sync::atomic::Ordering::SeqCst);
        drop(db);
        if !use_sync_wal {
            // The synced write's group starts with a sync mark naming the
            // retired WAL: damage there is corruption, not a crash.
            let wals = common::wals_with_records(&kept, DIR);
            assert_eq!(wals.len(), 2, "{wals:?}");
            kept.corrupt_byte(&wals[0], 40, 0x01).unwrap();
            match Db::open(DIR, small_opts(kept)) {
                Err(Error::Corruption { file, .. }) => assert_eq!(file, wals[0]),
                other => panic!("damage in a vouched-for WAL opened as {other:?}"),
            }
        }
        let db = Db::open(DIR, small_opts(crashed)).unwrap();
        for j in 0..i {
            assert_eq!(
                db.get(&key(j)).unwrap(),
                Some(value(j, 0)),
                "write {j} of {i} lost (sync_wal: {use_sync_wal})"
            );
        }
    }
}

/// Regression: `wait_for_background` returned while the syncer thread was
/// still preparing the next WAL, so a failed directory sync there poisoned
/// the store after the caller was told all background work had succeeded
/// (the model test then saw an operation fail with no fault injected).
#[test]
fn wait_for_background_waits_for_the_wal_being_prepared() {
    let watch = DirSyncWatch::new();
    let db = Db::open(DIR, small_opts(watch.clone())).unwrap();
    // The WAL prepared at open is done once the syncer is idle.
    db.wait_for_background().unwrap();
    watch
        .fail_syncer
        .store(true, std::sync::atomic::Ordering::SeqCst);
    db.put(b"k", b"v").unwrap();
    // Its flush switches the memtable, which asks for the next WAL.
    let res = db.wait_for_background();
    assert!(
        matches!(res, Err(Error::Poisoned(_))),
        "returned before the prepared WAL's directory sync failed: {res:?}"
    );
    assert!(db.stats().background_error.is_some());
}

#[test]
fn a_failed_background_wal_sync_poisons_the_store() {
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, background_wal_sync_opts(fault.clone(), 4096)).unwrap();
    fault.only_paths_containing(".log");
    fault.fail_after(FaultKind::Sync, 0);
    // Unsynced writes succeed until the syncer's failure poisons the store.
    let mut i = 0;
    eventually("a write refused after the failed sync", || {
        i += 1;
        db.put(&key(i), &value(i, 0)).is_err()
    });
    assert!(fault.injected() >= 1);
    assert_poisoned(
        db.put(b"after", b"x"),
        "write after a failed background sync",
    );
    // The failed writeback may have lost acknowledged bytes: a later sync
    // must not report them durable.
    fault.clear();
    assert_poisoned(db.sync_wal(), "sync_wal after a failed background sync");
    let cause = db.stats().background_error.unwrap_or_default();
    assert!(cause.contains(".log"), "the error names the WAL: {cause}");
}

/// Linux reports a writeback error once per open file description: of two
/// fsyncs overlapping on the WAL's sync handle, the one that lost the race
/// can return success for bytes the failed writeback dropped. Two
/// overlapping `sync_wal` calls (the server's once-a-second sync and a
/// caller's own) both covered the same acknowledged writes; the second
/// reported them durable while the first reported the failure.
#[test]
fn concurrent_wal_syncs_after_a_failed_one_are_not_reported_durable() {
    let (_mem, fault) = fault_fs();
    let db = Arc::new(Db::open(DIR, no_auto_compaction(fault.clone())).unwrap());
    for i in 0..20 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    fault.only_paths_containing(".log");
    // A slow disk that then fails the sync in progress, once: the next sync
    // through the same description would succeed, as Linux's does.
    fault.set_sync_delay(std::time::Duration::from_millis(300));
    fault.fail_once(FaultKind::Sync);
    let first = {
        let db = db.clone();
        std::thread::spawn(move || db.sync_wal())
    };
    eventually("the first sync under way", || fault.delayed_syncs() >= 1);
    let second = db.sync_wal();
    let first = first.join().unwrap();
    assert!(first.is_err(), "the injected fault failed the first sync");
    assert!(
        second.is_err(),
        "a sync overlapping a failed one reported the writes durable: {second:?}"
    );
    fault.set_sync_delay(std::time::Duration::ZERO);
    assert_poisoned(db.sync_wal(), "a later sync");
}

#[test]
fn sync_handles_fail_as_their_writers_sync_would() {
    let (_mem, fault) = fault_fs();
    fault.create_dir_all(std::path::Path::new("/d")).unwrap();
    let mut f = fault.create(std::path::Path::new("/d/x.log")).unwrap();
    f.append(b"data").unwrap();
    f.flush().unwrap();
    let handle = f.sync_handle().unwrap();
    fault.fail_once(FaultKind::Sync);
    assert!(handle.sync_data().is_err(), "injected sync fault");
    handle.sync_data().unwrap();
    fault.fail_once(FaultKind::Sync);
    assert!(handle.start_writeback().is_err(), "injected sync fault");
    handle.start_writeback().unwrap();
}

// --------------------------------------------------------------------- flush

#[test]
fn table_write_error_during_flush_surfaces_from_flush() {
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, no_auto_compaction(fault.clone())).unwrap();
    for i in 0..200 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    fault.only_paths_containing(".sst");
    fault.fail_after(FaultKind::Write, 0);
    let err = db.flush().expect_err("flush with failing table writes");
    assert!(
        matches!(err, Error::Io { .. } | Error::Poisoned(_)),
        "unexpected error kind: {err:?}"
    );
    assert!(
        err.to_string().contains("injected fault"),
        "the error does not carry its cause: {err}"
    );
}

#[test]
fn failed_flush_loses_no_data_after_reopen() {
    let (_mem, fault) = fault_fs();
    let db = Db::open(DIR, no_auto_compaction(fault.clone())).unwrap();
    let mut expected = BTreeMap::new();
    for i in 0..200 {
        db.put(&key(i), &value(i, 0)).unwrap();
        expected.insert(key(i), value(i, 0));
    }
    db.flush().unwrap();
    for i in 100..300 {
        db.put(&key(i), &value(i, 1)).unwrap();
        expected.insert(key(i), value(i, 1));
    }
    fault.only_paths_containing(".sst");
    fault.fail_after(FaultKind::Write, 0);
    assert!(db.flush().is_err());
    // Still readable from memory.
    assert_contents(&db, &expected, "after the failed flush");
    drop(db);
    fault.clear();
    let db = Db::open(DIR, no_auto_compaction(fault.clone())).unwrap();
    assert_contents(&db, &expected, "after reopen");
    db.flush().unwrap();
    assert_contents(&db, &expected, "after a successful flush");
}

// ---------------------------------------------------------------- compaction

/// Three overlapping L0 tables: rounds 0, 1 and 2 of keys 0..300.
fn three_overlapping_tables(fault: &Arc<FaultFs>) -> (Db, BTreeMap<Vec<u8>, Vec<u8>>) {
    let db = Db::open(DIR, no_auto_compaction(fault.clone())).unwrap();
    let mut expected = BTreeMap::new();
    for round in 0..3 {
        for i in (round * 10..300).step_by(1 + round as usize) {
            db.put(&key(i), &value(i, round)).unwrap();
            expected.insert(key(i), value(i, round));
        }
        db.flush().unwrap();
    }
    assert_eq!(db.stats().levels[0].files, 3);
    (db, expected)
}

#[test]
fn compaction_output_write_error_fails_the_compaction_and_keeps_data() {
    let (_mem, fault) = fault_fs();
    let (db, expected) = three_overlapping_tables(&fault);
    fault.only_paths_containing(".sst");
    fault.fail_after(FaultKind::Write, 0);
    let res = db.compact_range(None, None);
    assert!(
        res.is_err(),
        "compaction succeeded although no table could be written"
    );
    assert!(fault.injected() > 0);
    assert!(db.stats().compaction_failures >= 1);
    assert_contents(&db, &expected, "after the failed compaction (faults on)");
    fault.clear();
    assert_contents(&db, &expected, "after the failed compaction");
    drop(db);
    let db = Db::open(DIR, no_auto_compaction(fault.clone())).unwrap();
    assert_contents(&db, &expected, "after reopen");
}

#[test]
fn store_accepts_writes_and_compacts_again_after_a_failed_compaction() {
    let (_mem, fault) = fault_fs();
    let (db, mut expected) = three_overlapping_tables(&fault);
    fault.only_paths_containing(".sst");
    fault.fail_after(FaultKind::Write, 0);
    assert!(db.compact_range(None, None).is_err());
    fault.clear();
    db.put(b"after", b"compaction").unwrap();
    expected.insert(b"after".to_vec(), b"compaction".to_vec());
    db.compact_range(None, None).unwrap();
    assert_eq!(db.stats().levels[0].files, 0);
    assert_contents(&db, &expected, "after a successful retry");
}

// --------------------------------------------------------------------- reads

fn store_with_one_table(fault: &Arc<FaultFs>) -> Options {
    let opts = no_auto_compaction(fault.clone()).tune(|s| {
        s.block_cache_capacity = 0;
    });
    let db = Db::open(DIR, opts.clone()).unwrap();
    for i in 0..500 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    db.close().unwrap();
    opts
}

#[test]
fn read_error_on_an_open_table_surfaces_from_get_as_io() {
    let (_mem, fault) = fault_fs();
    let opts = store_with_one_table(&fault);
    let db = Db::open(DIR, opts).unwrap();
    // Opens the table; the data blocks are not cached.
    assert_eq!(db.get(&key(1)).unwrap(), Some(value(1, 0)));
    fault.only_paths_containing(".sst");
    fault.fail_after(FaultKind::Read, 0);
    assert_io(db.get(&key(400)), "get with failing table reads");
    fault.clear();
    assert_eq!(db.get(&key(400)).unwrap(), Some(value(400, 0)));
}

#[test]
fn read_error_opening_a_table_surfaces_from_get_as_io() {
    let (_mem, fault) = fault_fs();
    let opts = store_with_one_table(&fault);
    let db = Db::open(DIR, opts).unwrap();
    fault.only_paths_containing(".sst");
    fault.fail_after(FaultKind::Read, 0);
    assert_io(db.get(&key(7)), "get while the table cannot be opened");
    fault.clear();
    assert_eq!(db.get(&key(7)).unwrap(), Some(value(7, 0)));
}

#[test]
fn read_error_surfaces_from_iterator_status_as_io() {
    let (_mem, fault) = fault_fs();
    let opts = store_with_one_table(&fault);
    let db = Db::open(DIR, opts).unwrap();
    // Opens every table; the data blocks are not cached.
    assert_eq!(scan(&db).len(), 500);
    fault.only_paths_containing(".sst");
    fault.fail_after(FaultKind::Read, 0);
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        n += 1;
        it.next();
    }
    assert!(n < 500, "iterated over every key although reads fail");
    assert_io(it.status(), "iterator status");
}

// ---------------------------------------------------------------------- open

/// A crashed store holding flushed tables and synced WAL records (so open
/// has to replay a WAL), plus what it must contain.
fn crashed_store() -> (Arc<MemFs>, BTreeMap<Vec<u8>, Vec<u8>>) {
    let mem = MemFs::new();
    let db = Db::open(DIR, no_auto_compaction(mem.clone())).unwrap();
    let mut expected = BTreeMap::new();
    for i in 0..300 {
        db.put(&key(i), &value(i, 0)).unwrap();
        expected.insert(key(i), value(i, 0));
    }
    db.flush().unwrap();
    for i in 250..400 {
        put_synced(&db, &key(i), &value(i, 1)).unwrap();
        expected.insert(key(i), value(i, 1));
    }
    db.delete(&key(5)).unwrap();
    put_synced(&db, b"last", b"synced").unwrap();
    expected.remove(&key(5));
    expected.insert(b"last".to_vec(), b"synced".to_vec());
    let image = mem.crashed_copy();
    drop(db);
    (image, expected)
}

fn check_clean_open(fs: tern::io::FsRef, expected: &BTreeMap<Vec<u8>, Vec<u8>>, what: &str) {
    let db = Db::open(DIR, no_auto_compaction(fs))
        .unwrap_or_else(|e| panic!("{what}: open without faults failed: {e}"));
    assert_contents(&db, expected, what);
}

#[test]
fn open_fails_when_the_current_rename_fails_and_a_later_open_has_all_data() {
    let (image, expected) = crashed_store();
    let fault = FaultFs::new(image.clone());
    fault.fail_once(FaultKind::Rename);
    let res = Db::open(DIR, no_auto_compaction(fault.clone()));
    assert!(
        res.is_err(),
        "open succeeded although CURRENT could not be renamed"
    );
    assert_eq!(fault.injected(), 1);
    let after_crash = image.crashed_copy();
    fault.clear();
    check_clean_open(fault, &expected, "reopen");
    check_clean_open(after_crash, &expected, "reopen after a crash");
}

#[test]
fn open_fails_when_the_manifest_cannot_be_created_and_a_later_open_has_all_data() {
    let (image, expected) = crashed_store();
    let fault = FaultFs::new(image.clone());
    fault.only_paths_containing("MANIFEST");
    fault.fail_once(FaultKind::Create);
    let res = Db::open(DIR, no_auto_compaction(fault.clone()));
    assert!(
        res.is_err(),
        "open succeeded although the manifest could not be created"
    );
    assert_eq!(fault.injected(), 1);
    let after_crash = image.crashed_copy();
    fault.clear();
    check_clean_open(fault, &expected, "reopen");
    check_clean_open(after_crash, &expected, "reopen after a crash");
}

/// Fails the n-th operation of each kind during open, for every n until
/// open gets through without meeting the fault: whatever open answers, a
/// later open without faults (with or without a crash in between) must find
/// exactly the acknowledged data.
#[test]
fn any_single_failing_operation_during_open_loses_no_data() {
    let (image, expected) = crashed_store();
    let mut cases = 0;
    for kind in FaultKind::ALL {
        let mut n = 0;
        loop {
            let fs = image.crashed_copy();
            let fault = FaultFs::new(fs.clone());
            fault.fail_after(kind, n);
            let res = Db::open(DIR, no_auto_compaction(fault.clone()));
            let hit = fault.injected() > 0;
            let what = format!(
                "{kind} fault after {n} operations (open: {:?})",
                res.as_ref().err()
            );
            let after_crash = fs.crashed_copy();
            fault.clear();
            match res {
                Ok(db) => assert_contents(&db, &expected, &what),
                Err(_) => {
                    check_clean_open(fault, &expected, &format!("{what}, reopen"));
                }
            }
            check_clean_open(after_crash, &expected, &format!("{what}, crash, reopen"));
            if !hit {
                break;
            }
            cases += 1;
            n += 1;
            assert!(n < 500, "open never stops doing {kind} operations");
        }
    }
    println!("{cases} failing operations tried during open");
    assert!(cases > FaultKind::ALL.len());
}

// ------------------------------------------------------------- random faults

/// Random faults of every kind while synced writes, flushes and compactions
/// run; the first failing write stops the workload. After a crash, every
/// acknowledged write is there, the failed one may be, and nothing else is.
#[test]
fn random_faults_never_lose_acknowledged_synced_writes() {
    for seed in 0..24u64 {
        let (mem, fault) = fault_fs();
        let opts = small_opts(fault.clone()).tune(|s| {
            s.write_buffer_size = 16 << 10;
            s.level0_file_num_compaction_trigger = 2;
        });
        let db = Db::open(DIR, opts).unwrap();
        fault.set_random(seed, 0.0007, &[]);
        let mut acked = 0;
        let mut in_doubt = None;
        for i in 0..2000 {
            match put_synced(&db, &key(i), &value(i, 0)) {
                Ok(()) => acked = i + 1,
                Err(_) => {
                    in_doubt = Some(i);
                    break;
                }
            }
        }
        println!("seed {seed}: {acked} synced writes acknowledged");
        let after_crash = mem.crashed_copy();
        fault.clear();
        drop(db);
        let db = Db::open(DIR, small_opts(after_crash)).unwrap();
        let rows = scan(&db);
        let mut expected: Vec<_> = (0..acked).map(|i| (key(i), value(i, 0))).collect();
        if let Some(i) = in_doubt {
            if rows.len() == expected.len() + 1 {
                expected.push((key(i), value(i, 0)));
            }
        }
        assert_eq!(
            rows.len(),
            expected.len(),
            "seed {seed}: {acked} writes acknowledged, failed write: {in_doubt:?}"
        );
        for (got, want) in rows.iter().zip(&expected) {
            assert_eq!(got, want, "seed {seed}");
        }
    }
}

// ------------------------------------------------------- manifest and inputs

#[test]
fn manifest_sync_error_during_flush_loses_no_data() {
    let (mem, fault) = fault_fs();
    let db = Db::open(DIR, no_auto_compaction(fault.clone())).unwrap();
    let mut expected = BTreeMap::new();
    for i in 0..200 {
        put_synced(&db, &key(i), &value(i, 0)).unwrap();
        expected.insert(key(i), value(i, 0));
    }
    fault.only_paths_containing("MANIFEST");
    fault.fail_once(FaultKind::Sync);
    assert!(
        db.flush().is_err(),
        "flush succeeded although the manifest sync failed"
    );
    assert_eq!(fault.injected(), 1);
    assert_contents(&db, &expected, "after the failed flush");
    let after_crash = mem.crashed_copy();
    fault.clear();
    drop(db);
    let db = Db::open(DIR, no_auto_compaction(fault.clone())).unwrap();
    assert_contents(&db, &expected, "after reopen");
    drop(db);
    let db = Db::open(DIR, no_auto_compaction(after_crash)).unwrap();
    assert_contents(&db, &expected, "after a crash and reopen");
}

#[test]
fn manifest_write_error_during_compaction_loses_no_data() {
    let (_mem, fault) = fault_fs();
    let (db, expected) = three_overlapping_tables(&fault);
    fault.only_paths_containing("MANIFEST");
    fault.fail_after(FaultKind::Write, 0);
    assert!(db.compact_range(None, None).is_err());
    fault.clear();
    assert_contents(&db, &expected, "after the failed compaction");
    drop(db);
    let db = Db::open(DIR, no_auto_compaction(fault.clone())).unwrap();
    assert_contents(&db, &expected, "after reopen");
}

#[test]
fn read_error_on_compaction_input_fails_the_compaction_and_keeps_data() {
    let (_mem, fault) = fault_fs();
    let (db, expected) = three_overlapping_tables(&fault);
    fault.only_paths_containing(".sst");
    fault.fail_after(FaultKind::Read, 3);
    assert!(db.compact_range(None, None).is_err());
    assert!(fault.injected() > 0);
    fault.clear();
    assert_contents(&db, &expected, "after the failed compaction");
    db.compact_range(None, None).unwrap();
    assert_contents(&db, &expected, "after a successful retry");
}

/// Keys 0..150 written in three rounds, each flushed to its own L0 table,
/// with every value separated (so compaction leaves blob files unreachable
/// and GC has garbage to collect).
fn separated_rounds(fault: &Arc<FaultFs>, roll_manifest: bool) -> (Db, BTreeMap<Vec<u8>, Vec<u8>>) {
    let db = Db::open(DIR, separated_opts(fault, roll_manifest)).unwrap();
    let mut expected = BTreeMap::new();
    for round in 0..3 {
        // The last round overwrites half the keys, so the blob file of the
        // round before stays reachable with garbage in it.
        for i in 0..if round == 2 { 75 } else { 150 } {
            db.put(&key(i), &value(i, round)).unwrap();
            expected.insert(key(i), value(i, round));
        }
        db.flush().unwrap();
    }
    (db, expected)
}

fn separated_opts(fault: &Arc<FaultFs>, roll_manifest: bool) -> Options {
    no_auto_compaction(fault.clone()).tune(|s| {
        s.blob_threshold = Some(0);
        s.gc_garbage_ratio = 0.1;
        s.enable_gc = false;
        // A tiny manifest limit writes a new manifest (and renames CURRENT)
        // on every install.
        s.max_manifest_file_size = if roll_manifest { 1 } else { 1 << 20 };
    })
}

/// Fails the n-th operation of each kind (no path filter) while `op` runs,
/// for every n until `op` gets through. Whatever `op` answers, the store
/// must reopen with exactly `expected`, both as the process left the files
/// and after a power failure.
fn sweep_faults_during_install(
    op: &str,
    prepare: impl Fn(&Db, &mut BTreeMap<Vec<u8>, Vec<u8>>),
    run: impl Fn(&Db) -> tern::Result<()>,
) {
    let kinds = [
        FaultKind::Write,
        FaultKind::Sync,
        FaultKind::SyncDir,
        FaultKind::Create,
        FaultKind::Rename,
        FaultKind::Remove,
    ];
    for roll_manifest in [false, true] {
        for kind in kinds {
            for n in 0.. {
                let (mem, fault) = fault_fs();
                let (db, mut expected) = separated_rounds(&fault, roll_manifest);
                prepare(&db, &mut expected);
                fault.inject(kind, n, false);
                let res = run(&db);
                let fired = fault.injected() > 0;
                let what = format!("{op}, {kind} fault after {n} (roll {roll_manifest}): {res:?}");
                let after_crash = mem.crashed_copy();
                fault.clear();
                drop(db);
                let opts = separated_opts(&fault, roll_manifest);
                let db = Db::open(DIR, opts.clone())
                    .unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
                assert_contents(&db, &expected, &format!("{what}: after reopen"));
                drop(db);
                let crashed = Options {
                    fs: after_crash,
                    ..opts
                };
                let db = Db::open(DIR, crashed)
                    .unwrap_or_else(|e| panic!("{what}: open after a crash failed: {e}"));
                assert_contents(&db, &expected, &format!("{what}: after a crash"));
                if !fired {
                    break;
                }
            }
        }
    }
}

/// Regression: a compaction whose manifest write failed after part of its
/// install may already have been durable (the install was two records, the
/// second could fail; an fsync or a directory sync could fail after the
/// append) deleted its output tables, so the durable manifest named files
/// that were gone and the next open removed the inputs as orphans.
#[test]
fn failed_manifest_write_during_compaction_never_deletes_named_tables() {
    sweep_faults_during_install("compaction", |_, _| {}, |db| db.compact_range(None, None));
}

/// The same sweep over flush installs (they never deleted on failure; this
/// keeps it so).
#[test]
fn failed_manifest_write_during_flush_never_deletes_named_tables() {
    sweep_faults_during_install(
        "flush",
        |db, expected| {
            put_synced(db, b"extra", b"synced").unwrap();
            db.delete(&key(3)).unwrap();
            put_synced(db, b"extra2", b"synced").unwrap();
            expected.insert(b"extra".to_vec(), b"synced".to_vec());
            expected.insert(b"extra2".to_vec(), b"synced".to_vec());
            expected.remove(&key(3));
        },
        |db| db.flush(),
    );
}

/// The same sweep over GC installs, after a compaction left garbage.
#[test]
fn failed_manifest_write_during_gc_never_deletes_named_blob_files() {
    sweep_faults_during_install(
        "gc",
        |db, _| db.compact_range(None, None).unwrap(),
        |db| match db.collect_garbage()? {
            0 => panic!("the test expects GC to have work"),
            _ => Ok(()),
        },
    );
}

/// An executor whose compactions always fail, as a bad input block or an
/// unresolvable ref would make them.
struct FailingExecutor;

impl tern::compaction::Executor for FailingExecutor {
    fn execute(
        &self,
        _job: &tern::compaction::CompactionJob,
        _ctx: &tern::compaction::JobContext,
    ) -> tern::Result<tern::compaction::CompactionOutput> {
        Err(Error::corruption(
            "/db/000042.sst",
            4096,
            "injected: bad block",
        ))
    }
}

/// Regression: a compaction that failed on every retry was logged and
/// retried forever while L0 grew to the stop trigger, and writers waited
/// with no error. Now the failure surfaces: writes fail naming the cause,
/// `stats()` shows it, and reads keep working.
#[test]
fn persistent_compaction_failure_fails_writes_instead_of_hanging_them() {
    let (_mem, fault) = fault_fs();
    let opts = small_opts(fault.clone()).tune(|s| {
        s.level0_file_num_compaction_trigger = 2;
        s.level0_slowdown_writes_trigger = 3;
        s.level0_stop_writes_trigger = 4;
    });
    let db = Arc::new(Db::open_with_executor(DIR, opts, Some(Arc::new(FailingExecutor))).unwrap());
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || -> tern::Result<u32> {
            for round in 0.. {
                for i in 0..200 {
                    db.put(&key(i), &value(i, round))?;
                }
                db.flush()?;
            }
            unreachable!()
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !writer.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "writers hung behind a compaction that can never succeed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let err = writer.join().unwrap().unwrap_err();
    assert!(
        err.to_string().contains("injected: bad block"),
        "the write error should name the cause: {err}"
    );
    let stats = db.stats();
    let cause = stats.background_error.expect("stats report the error");
    assert!(cause.contains("injected: bad block"), "{cause}");
    // Reads keep working; maintenance says why it does nothing.
    assert!(db.get(&key(1)).unwrap().is_some());
    assert_eq!(scan(&db).len(), 200);
    assert!(
        matches!(db.collect_garbage(), Err(Error::Poisoned(_))),
        "GC on a poisoned store reported success"
    );
}

/// An executor whose blob GC jobs always fail (a damaged blob record, say);
/// compactions run.
struct FailingGcExecutor;

impl tern::compaction::Executor for FailingGcExecutor {
    fn execute_gc(
        &self,
        _job: &tern::gc::GcJob,
        _ctx: &tern::gc::GcContext,
    ) -> tern::Result<tern::gc::GcOutput> {
        Err(Error::corruption(
            "/db/000042.blob",
            16,
            "injected: bad record",
        ))
    }
}

/// Regression: background GC that failed five times in a row poisoned the
/// store, so one damaged blob record (which `get` reports for its own key)
/// made every write fail a few seconds after each open, though a failing
/// GC stalls no writer. It keeps retrying and counts the failures instead.
#[test]
fn persistent_gc_failure_never_fails_writes() {
    let (_mem, fault) = fault_fs();
    let opts = small_opts(fault.clone()).tune(|s| {
        s.blob_threshold = Some(0);
        s.gc_garbage_ratio = 0.1;
    });
    let db = Db::open_with_executor(DIR, opts, Some(Arc::new(FailingGcExecutor))).unwrap();
    // Overwriting half the keys leaves half of the first blob file dead:
    // over the GC ratio, but still reachable, so only GC can reclaim it.
    for round in 0..2 {
        for i in (0..200).filter(|i| round == 0 || i % 2 == 0) {
            db.put(&key(i), &value(i, round)).unwrap();
        }
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
    }
    let start = std::time::Instant::now();
    while db.stats().gc_failures < 6 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "background GC did not keep retrying: {:?}",
            db.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    db.put(b"after", b"gc keeps failing").unwrap();
    assert_eq!(db.stats().background_error, None);
    assert_eq!(db.get(&key(7)).unwrap(), Some(value(7, 0)));
    assert_eq!(db.get(&key(8)).unwrap(), Some(value(8, 1)));
}

/// Creating a store made its directory (and any missing parents) without
/// syncing their parents, so a power loss could take the whole new store,
/// synced writes and all.
#[test]
fn new_store_directory_survives_power_loss() {
    let fs = MemFs::new();
    let dir = "/data/stores/new";
    let db = Db::open(dir, small_opts(fs.clone())).unwrap();
    put_synced(&db, b"k", b"v").unwrap();
    let survivor = fs.crashed_copy();
    drop(db);
    let opts = small_opts(survivor).tune(|s| {
        s.create_if_missing = false;
    });
    let db = Db::open(dir, opts).expect("the store's directory survives");
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

/// A new manifest's directory entry was never synced before `CURRENT` was
/// renamed to name it. If the directory sync after the rename fails (or
/// power fails before it), a file system may keep the rename and lose the
/// new manifest's entry: `CURRENT` then names a missing file and the store
/// cannot open.
#[test]
fn new_manifest_entry_is_durable_before_current_names_it() {
    let mut broken = Vec::new();
    for skip in 0..8 {
        let (mem, fault) = fault_fs();
        let opts = no_auto_compaction(fault.clone()).tune(|s| {
            // Every manifest write rolls to a new manifest.
            s.max_manifest_file_size = 1;
        });
        let db = Db::open(DIR, opts.clone()).unwrap();
        put_synced(&db, b"a", b"1").unwrap();
        fault.inject(FaultKind::SyncDir, skip, true);
        let _ = db.put(b"b", b"2").and_then(|()| db.flush());
        fault.clear();
        for seed in 0..64 {
            let copy = mem.crashed_copy_with(tern::io::CrashMode::UnsyncedEntries, seed);
            match Db::open(DIR, small_opts(copy)) {
                Ok(db) => assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..])),
                Err(e) => broken.push(format!("sync_dir fault after {skip}, seed {seed}: {e}")),
            }
        }
        drop(db);
    }
    assert!(
        broken.is_empty(),
        "{} crash images do not open: {:?}",
        broken.len(),
        &broken[..broken.len().min(3)]
    );
}

/// A directory left by an earlier `mkdir` that was never synced (a crash
/// before the sync, or a user's `mkdir -p`) was used as it was: open only
/// synced the parents of directories it created itself, so a power loss
/// could still take the store.
#[test]
fn existing_unsynced_store_directory_is_made_durable_at_open() {
    let fs = MemFs::new();
    fs.create_dir_all(std::path::Path::new(DIR)).unwrap();
    let db = Db::open(DIR, small_opts(fs.clone())).unwrap();
    put_synced(&db, b"k", b"v").unwrap();
    let survivor = fs.crashed_copy();
    drop(db);
    let opts = small_opts(survivor).tune(|s| {
        s.create_if_missing = false;
    });
    let db = Db::open(DIR, opts).expect("the store's directory survives");
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

/// Crashes taken at many points of a stream of `sync = false` writes
/// across memtable switches, with the page cache losing each file's
/// unsynced bytes in every way `CrashMode` models: what recovers is always
/// a prefix of the stream. In the first round the syncer and flush
/// threads are held, so retired WALs pile up unsynced and crashes cut ones
/// that later WALs follow; in the second they work as in use.
#[test]
fn crashes_across_memtable_switches_recover_a_prefix_of_the_writes() {
    for hold in [true, false] {
        crash_points_recover_a_prefix(hold);
    }
}

fn crash_points_recover_a_prefix(hold: bool) {
    use std::sync::atomic::Ordering::SeqCst;
    use tern::io::CrashMode;
    let mem = MemFs::new();
    let watch = DirSyncWatch::over(mem.clone());
    watch.hold_background.store(hold, SeqCst);
    let mut opts = small_opts(watch.clone());
    opts.settings.disable_auto_compactions = true;
    // Room for every memtable of the stream while the flush is held.
    opts.settings.max_write_buffer_number = 100;
    let db = Db::open(DIR, opts.clone()).unwrap();
    let mut crashes = Vec::new();
    let writes = 3000u32;
    for i in 0..writes {
        db.put(&key(i), &value(i, 0)).unwrap();
        if i % 97 == 96 {
            for mode in CrashMode::ALL {
                let seed = u64::from(i) * 31 + mode as u64;
                crashes.push((i + 1, mode, seed, mem.crashed_copy_with(mode, seed)));
            }
        }
    }
    watch.hold_background.store(false, SeqCst);
    drop(db);
    let mut cut_short = 0;
    let mut later_wals_dropped = 0;
    for (written, mode, seed, fs) in crashes {
        let mut opts = opts.clone();
        opts.fs = fs;
        let db = Db::open(DIR, opts).unwrap_or_else(|e| {
            panic!("after {written} writes, {mode:?} seed {seed}: open failed: {e}")
        });
        let mut n = 0;
        while n < written && db.get(&key(n)).unwrap().is_some() {
            n += 1;
        }
        for j in n..written {
            assert_eq!(
                db.get(&key(j)).unwrap(),
                None,
                "after {written} writes, {mode:?} seed {seed}: write {j} survived but {n} was lost"
            );
        }
        cut_short += usize::from(n < written);
        // More dropped than one memtable's WAL holds: later WALs too.
        later_wals_dropped += usize::from(db.stats().wal_bytes_dropped_at_recovery > 128 << 10);
    }
    assert!(
        cut_short > 0,
        "no crash lost anything: the test tests nothing"
    );
    if hold {
        assert!(
            later_wals_dropped > 0,
            "no crash cut a retired WAL that a later one followed"
        );
    }
}
