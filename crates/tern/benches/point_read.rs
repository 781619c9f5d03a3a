//! Point reads of small values from one and from several threads at once:
//! what each read pays besides finding its key (taking the current super
//! version, the read counters), measured on values in the memtable (where
//! little else costs), on keys overwritten ten times in the memtable
//! (whose newest version hangs on a chain, a cache line away from the
//! key's first) and in tables (block cache hits); batches of 16
//! reads with and without naming their keys for read-ahead first; and
//! reads from one table of a million keys, whose index (about 9,000
//! entries) costs more to search than a small table's; and reads of 1 KiB
//! values separated into blob files, 256 MiB of them, so that the table's
//! blocks and the values a read touches are mostly not in the CPU's
//! caches; and the million keys again through a 4 MiB block cache, so
//! that most reads miss it and insert, from four threads on however many
//! cores there are (what the block cache's shard locks cost when the
//! scheduler preempts a thread holding one).

#![allow(missing_docs)]

mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use common::spread_key as key;
use tern::{Db, Options};

const KEYS: u32 = 100_000;

/// Keys in the table of the `get_1m_one_table` group.
const BIG_KEYS: u32 = 1_000_000;

/// The value most stores hold: small enough to stay in the tables.
const SMALL_VALUE: &[u8] = b"value-of-sixteen";

fn open_store(name: &str, flushed: bool, writes: u32) -> (Db, std::path::PathBuf) {
    open_store_of(name, KEYS, flushed, writes, SMALL_VALUE)
}

/// A store of `keys` keys, each written `writes` times with `value`
/// (round after round, so a key's versions lie far apart in the memtable).
fn open_store_of(
    name: &str,
    keys: u32,
    flushed: bool,
    writes: u32,
    value: &[u8],
) -> (Db, std::path::PathBuf) {
    open_store_cached(name, keys, flushed, writes, value, 64 << 20)
}

/// [`open_store_of`] with a block cache of `cache` bytes.
fn open_store_cached(
    name: &str,
    keys: u32,
    flushed: bool,
    writes: u32,
    value: &[u8],
    cache: usize,
) -> (Db, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tern-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = Options::default().tune(|s| {
        s.write_buffer_size = 256 << 20;
        s.block_cache_capacity = cache;
    });
    let db = Db::open(&dir, opts).unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
    for _ in 0..writes {
        for i in 0..keys {
            db.put(&key(i), value)
                .unwrap_or_else(|e| panic!("put: {e}"));
        }
    }
    if flushed {
        db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
        db.wait_for_background()
            .unwrap_or_else(|e| panic!("background: {e}"));
    }
    (db, dir)
}

/// Reads every key once, split over `threads` threads.
fn read_all(db: &Db, keys: &[Vec<u8>], threads: usize) {
    std::thread::scope(|s| {
        for part in keys.chunks(keys.len().div_ceil(threads)) {
            s.spawn(move || {
                for k in part {
                    black_box(db.get(k).unwrap_or_else(|e| panic!("get: {e}")));
                }
            });
        }
    });
}

/// How a batch of reads is made.
#[derive(Clone, Copy)]
enum Batch {
    /// `get` per key.
    Plain,
    /// Keys named for read-ahead, then `get` per key.
    ReadAhead,
    /// Keys named for read-ahead, then `get_if_cached` per key (each read
    /// pins its own view), as a server answers from memory.
    CachedReadAhead,
    /// As `CachedReadAhead`, the reads sharing the read-ahead's view.
    SharedView,
}

/// Reads every key once on this thread in batches of 16, as `how` says.
fn read_batches(db: &Db, keys: &[Vec<u8>], how: Batch) {
    for batch in keys.chunks(16) {
        if let Batch::Plain = how {
            for k in batch {
                black_box(db.get(k).unwrap_or_else(|e| panic!("get: {e}")));
            }
            continue;
        }
        let mut a = db.read_ahead();
        for k in batch {
            a.key(k);
        }
        if let Batch::SharedView = how {
            a.prefetch();
            for k in batch {
                let got = db.get_if_cached_in(&a, k, false);
                black_box(got.unwrap_or_else(|e| panic!("get: {e}")));
            }
            continue;
        }
        // Dropping it runs the later passes and gives the view back.
        drop(a);
        for k in batch {
            let got = match how {
                Batch::CachedReadAhead => db.get_if_cached(k).map(|v| v.flatten()),
                _ => db.get(k),
            };
            black_box(got.unwrap_or_else(|e| panic!("get: {e}")));
        }
    }
}

fn point_reads(c: &mut Criterion) {
    let keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
    let scattered: Vec<Vec<u8>> = (0..KEYS)
        .map(|i| key(i.wrapping_mul(7919) % KEYS))
        .collect();
    for (name, flushed, writes) in [
        ("memtable", false, 1),
        ("memtable_overwritten", false, 10),
        ("tables", true, 1),
    ] {
        let (db, dir) = open_store(name, flushed, writes);
        // Overwritten keys are read in a scattered order: in write order,
        // their newest versions would lie next to each other.
        let keys = if writes > 1 { &scattered } else { &keys };
        read_all(&db, keys, 1);
        let mut g = c.benchmark_group(format!("get_100k_{name}"));
        g.throughput(Throughput::Elements(u64::from(KEYS)));
        for threads in [1, 2, 4] {
            g.bench_function(format!("{threads}_threads"), |b| {
                b.iter(|| read_all(&db, keys, threads))
            });
        }
        for (label, how) in [
            ("batches_of_16", Batch::Plain),
            ("batches_of_16_read_ahead", Batch::ReadAhead),
            ("batches_of_16_cached_read_ahead", Batch::CachedReadAhead),
            ("batches_of_16_cached_shared_view", Batch::SharedView),
        ] {
            g.bench_function(label, |b| b.iter(|| read_batches(&db, keys, how)));
        }
        g.finish();
        drop(db);
        let _ = std::fs::remove_dir_all(dir);
    }
    // One flush of a million keys: one table with a large index.
    let big = open_store_of("big", BIG_KEYS, true, 1, SMALL_VALUE);
    scattered_reads(c, "get_1m_one_table", big, BIG_KEYS);
    let small_cache = open_store_cached("small-cache", BIG_KEYS, true, 1, SMALL_VALUE, 4 << 20);
    scattered_reads(c, "get_1m_small_cache", small_cache, BIG_KEYS);
    // 1 KiB values, separated into blob files.
    let separated = open_store_of("separated", SEPARATED_KEYS, true, 1, &[b'v'; 1024]);
    scattered_reads(c, "get_256k_separated", separated, SEPARATED_KEYS);
}

/// Keys of the `get_256k_separated` group, each with a 1 KiB value.
const SEPARATED_KEYS: u32 = 256 << 10;

/// Benchmarks group `name`: 100k reads of keys scattered over the `keys`
/// keys of `store`, from one thread and from four; then removes the store.
fn scattered_reads(c: &mut Criterion, name: &str, store: (Db, std::path::PathBuf), keys: u32) {
    let (db, dir) = store;
    let sample: Vec<Vec<u8>> = (0..KEYS)
        .map(|i| key(i.wrapping_mul(7919) % keys))
        .collect();
    read_all(&db, &sample, 1);
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(u64::from(KEYS)));
    for threads in [1, 4] {
        g.bench_function(format!("{threads}_threads"), |b| {
            b.iter(|| read_all(&db, &sample, threads))
        });
    }
    g.finish();
    drop(db);
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = point_reads
}
criterion_main!(benches);
