//! Range scans over separated values, the path YCSB-E exercises: a store on
//! the real file system whose 1 KB values sit in blob files written by
//! several flushes of interleaved keys (so neighbouring keys live in
//! different files), then scans of 50 entries from random keys (with and
//! without telling the iterator their length), point reads of the same
//! values for comparison, and hinted scans after the store's pages were
//! dropped from the page cache (what a store larger than memory sees). The
//! in-memory ones run twice: reading values through the blob files'
//! mappings (the default) and with `pread` (`mmap_blob_reads` off, the
//! `_pread` names). Last, the uncached hinted scan again after a
//! compaction moved every value into one sorted run (`sorted_value_runs`).

#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use tern::{Db, Options, ReadOptions};

const KEYS: u32 = 100_000;
const FLUSHES: u32 = 8;
const SCAN: usize = 50;

fn key(i: u32) -> Vec<u8> {
    format!("user{i:010}").into_bytes()
}

fn options(mapped: bool) -> Options {
    Options::default().tune(|s| {
        s.write_buffer_size = 64 << 20;
        s.enable_gc = false;
        s.mmap_blob_reads = mapped;
    })
}

fn open_store() -> (Db, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tern-bench-scan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db =
        Db::open(&dir, options(true)).unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
    let value = vec![0x5au8; 1000];
    // Each flush holds every FLUSHES-th key, as hashed inserts spread keys
    // over flushes.
    for f in 0..FLUSHES {
        for i in (f..KEYS).step_by(FLUSHES as usize) {
            db.put(&key(i), &value)
                .unwrap_or_else(|e| panic!("put: {e}"));
        }
        db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    }
    db.wait_for_background()
        .unwrap_or_else(|e| panic!("background: {e}"));
    (db, dir)
}

/// Drops the cached pages of every file in `dir` (they are clean: the
/// store was flushed), so the next reads go to the device.
fn drop_page_cache(dir: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read_dir: {e}"));
    for entry in entries.flatten() {
        if let Ok(f) = std::fs::File::open(entry.path()) {
            // SAFETY: a valid descriptor; posix_fadvise reads only integers.
            unsafe {
                libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

/// Reads `SCAN` values from `start` (with `serial_reads` as given);
/// returns their bytes.
fn scan(db: &Db, start: &[u8], hint: Option<usize>, serial_reads: bool) -> usize {
    let mut it = db
        .iter(ReadOptions {
            scan_len_hint: hint,
            serial_reads,
            ..ReadOptions::default()
        })
        .unwrap_or_else(|e| panic!("iter: {e}"));
    it.seek(start);
    let mut bytes = 0;
    for _ in 0..SCAN {
        if !it.valid() {
            break;
        }
        bytes += black_box(it.value()).len();
        it.next();
    }
    bytes
}

/// Scans and point reads of values in memory; `suffix` ends the names.
fn in_memory(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    db: &Db,
    suffix: &str,
) {
    let mut rng = SmallRng::seed_from_u64(7);
    for (name, hint) in [("scan_50", None), ("scan_50_hinted", Some(SCAN))] {
        g.bench_function(format!("{name}{suffix}"), |b| {
            b.iter(|| {
                let start = key(rng.gen_range(0..KEYS - SCAN as u32));
                scan(db, &start, hint, false)
            })
        });
    }
    g.bench_function(format!("get_50{suffix}"), |b| {
        b.iter(|| {
            let start = rng.gen_range(0..KEYS - SCAN as u32);
            let mut bytes = 0;
            for i in start..start + SCAN as u32 {
                let v = db.get(&key(i)).unwrap_or_else(|e| panic!("get: {e}"));
                bytes += black_box(v).map_or(0, |v| v.len());
            }
            bytes
        })
    });
}

/// Hinted scans from random keys, each after the store's pages were
/// dropped from the page cache.
fn uncached(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    db: &Db,
    dir: &std::path::Path,
    rng: &mut SmallRng,
    serial: bool,
) {
    g.bench_function(name, |b| {
        b.iter_batched(
            || {
                drop_page_cache(dir);
                key(rng.gen_range(0..KEYS - SCAN as u32))
            },
            |start| scan(db, &start, Some(SCAN), serial),
            BatchSize::PerIteration,
        )
    });
}

fn scans(c: &mut Criterion) {
    let (db, dir) = open_store();
    let mut g = c.benchmark_group("separated_1k_values");
    g.throughput(Throughput::Elements(SCAN as u64));
    in_memory(&mut g, &db, "");
    drop(db);
    // The rest reads with `pread`: dropping cached pages leaves those a
    // process has mapped, so the uncached runs would find them in memory.
    let db = Db::open(&dir, options(false)).unwrap_or_else(|e| panic!("reopen: {e}"));
    in_memory(&mut g, &db, "_pread");
    let mut rng = SmallRng::seed_from_u64(8);
    // Out of memory, with the batch's reads announced first (the default)
    // and one after another, alternating so both see the same device.
    for (name, serial) in [
        ("scan_50_hinted_uncached", false),
        ("scan_50_hinted_uncached_serial", true),
    ] {
        uncached(&mut g, name, &db, &dir, &mut rng, serial);
    }
    drop(db);
    // The same store with its values moved into one sorted run
    // (`sorted_value_runs`): a scan's values lie side by side.
    let sorted = options(false).tune(|s| {
        s.sorted_value_runs = Some(1);
        s.sorted_value_runs_above = tern::BytesOrMemory::Bytes(0);
    });
    let db = Db::open(&dir, sorted).unwrap_or_else(|e| panic!("reopen: {e}"));
    db.compact_range(None, None)
        .unwrap_or_else(|e| panic!("compact: {e}"));
    let name = "scan_50_hinted_uncached_sorted_run";
    uncached(&mut g, name, &db, &dir, &mut rng, false);
    g.finish();
    drop(db);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    targets = scans
}
criterion_main!(benches);
