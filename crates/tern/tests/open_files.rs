//! Bounded open files: `max_open_files` caps the table and blob readers
//! kept open, and `open_files_memory` the tables' resident indexes and
//! filters.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{key, scan, value, DIR};
use tern::io::MemFs;
use tern::{Db, Options, ReadOptions};

const KEYS: u32 = 3000;

/// Many small tables and blob files (no compaction merges them), so a read
/// of every key touches far more files than may stay open.
fn many_files_opts(fs: Arc<MemFs>, max_open_files: usize) -> Options {
    Options {
        settings: tern::Settings {
            write_buffer_size: 16 << 10,
            target_file_size: 8 << 10,
            block_size: 512,
            blob_threshold: Some(64),
            blob_file_size: 8 << 10,
            enable_gc: false,
            disable_auto_compactions: true,
            max_open_files,
            ..tern::Settings::default()
        },
        fs,
        ..Options::default()
    }
}

fn fill(db: &Db) {
    for i in 0..KEYS {
        db.put(&key(i), &value(i, 0)).unwrap();
        if i % 100 == 99 {
            db.flush().unwrap();
        }
    }
    db.flush().unwrap();
}

fn files_on_disk(fs: &MemFs) -> usize {
    fs.file_names()
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "sst" || e == "blob"))
        .count()
}

#[test]
fn unbounded_open_files_are_capped_by_max_open_files() {
    const MAX: usize = 16;
    let fs = MemFs::new();
    let db = Db::open(DIR, many_files_opts(fs.clone(), MAX)).unwrap();
    fill(&db);
    let files = files_on_disk(&fs);
    assert!(
        files > 4 * MAX,
        "only {files} files: the test needs many more than {MAX}"
    );

    for round in 0..2 {
        for i in (0..KEYS).rev() {
            assert_eq!(
                db.get(&key(i)).unwrap(),
                Some(value(i, 0)),
                "round {round} key {i}"
            );
            let open = fs.open_readers() as usize;
            assert!(
                open <= MAX,
                "{open} readers open after a get, max_open_files {MAX}"
            );
        }
    }
    let all = scan(&db);
    assert_eq!(all.len(), KEYS as usize);
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, (k, v))| *k == key(i as u32) && *v == value(i as u32, 0)));
    let open = fs.open_readers() as usize;
    assert!(
        open <= MAX,
        "{open} readers open after a scan, max_open_files {MAX}"
    );
    // A live iterator keeps the files it reads open; the cap holds again
    // once it is dropped.
    let mut it = db.iter(ReadOptions::default()).unwrap();
    it.seek_to_first();
    assert!(it.valid());
    drop(it);
    assert!(fs.open_readers() as usize <= MAX);
    let st = db.stats();
    assert!(st.open_files <= MAX, "stats: {} open files", st.open_files);
    db.close().unwrap();
}

/// Reads every key, then returns the stats.
fn read_all(db: &Db) -> tern::Stats {
    for i in 0..KEYS {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    db.stats()
}

#[test]
fn index_and_filter_memory_is_held_to_open_files_memory() {
    // With room for everything, every file stays open: how much the
    // tables' indexes and filters hold in all.
    let fs = MemFs::new();
    let roomy = many_files_opts(fs.clone(), 100_000);
    let db = Db::open(DIR, roomy.clone()).unwrap();
    fill(&db);
    let all = read_all(&db);
    assert_eq!(all.open_files, files_on_disk(&fs), "every file open");
    assert!(all.open_file_bytes > 0);
    db.close().unwrap();

    // A quarter of that: tables are closed to stay within it, blob files
    // (no resident index) are bounded by count alone, reads stay right.
    let budget = all.open_file_bytes / 4;
    let tight = roomy.tune(|s| {
        s.open_files_memory = budget as usize;
    });
    let db = Db::open(DIR, tight).unwrap();
    read_all(&db);
    let st = read_all(&db);
    assert!(
        st.open_files > 0 && st.open_files < all.open_files,
        "{st:?}"
    );
    assert!(
        st.open_file_bytes <= budget,
        "{} resident bytes, budget {budget}",
        st.open_file_bytes
    );
    assert!(
        st.file_opens > all.file_opens,
        "files were closed and reopened"
    );
}

/// Regression: point reads keep the readers they used per thread while
/// every file fits in `max_open_files`. A scan that then made the set close
/// readers for room did not stop that, so an idle point-reading thread
/// held readers the set had closed, past the bound.
#[test]
fn readers_kept_by_an_idle_thread_go_when_a_scan_fills_the_set() {
    const MAX: usize = 16;
    let fs = MemFs::new();
    let db = Arc::new(Db::open(DIR, many_files_opts(fs.clone(), MAX)).unwrap());
    fill(&db);
    // A few keys a table apart: fewer readers than the bound.
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let reader = {
        let db = db.clone();
        std::thread::spawn(move || {
            for i in (0..KEYS).step_by(500) {
                assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)));
            }
            read_tx.send(()).unwrap();
            let _ = done_rx.recv();
        })
    };
    read_rx.recv().unwrap();
    assert!(fs.open_readers() as usize <= MAX);
    assert_eq!(scan(&db).len(), KEYS as usize);
    let open = fs.open_readers() as usize;
    done_tx.send(()).unwrap();
    reader.join().unwrap();
    assert!(
        open <= MAX,
        "{open} readers open after a scan, max_open_files {MAX}"
    );
}
