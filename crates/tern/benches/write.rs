//! Small writes from several threads at once through the commit queue:
//! what joining a group, waiting for its leader and being told the outcome
//! cost, with more writers than cores, the way a loaded client or server
//! calls the engine. Values are 100 bytes, kept inline; no write syncs.

#![allow(missing_docs)]

mod common;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use common::spread_key as key;
use tern::{Db, Options};

const WRITES: u32 = 100_000;

/// Writes `WRITES` keys, split over `threads` threads.
fn write_all(db: &Db, threads: u32) {
    let value = [7u8; 100];
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut i = t;
                while i < WRITES {
                    db.put(&key(i), &value)
                        .unwrap_or_else(|e| panic!("put: {e}"));
                    i += threads;
                }
            });
        }
    });
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("concurrent_puts_100k");
    g.sample_size(10);
    g.throughput(Throughput::Elements(u64::from(WRITES)));
    let dir = std::env::temp_dir().join(format!("tern-bench-write-{}", std::process::id()));
    for threads in [1, 4, 16] {
        g.bench_function(format!("{threads}_threads"), |b| {
            b.iter_batched(
                // A fresh store per round, with a memtable that holds all
                // of it: the commit queue is measured, not flushes.
                || {
                    let _ = std::fs::remove_dir_all(&dir);
                    let opts = Options::default().tune(|s| s.write_buffer_size = 64 << 20);
                    Db::open(&dir, opts).unwrap_or_else(|e| panic!("open {}: {e}", dir.display()))
                },
                |db| {
                    write_all(&db, threads);
                    db
                },
                BatchSize::PerIteration,
            );
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
