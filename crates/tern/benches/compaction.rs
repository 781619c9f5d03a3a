//! One full compaction on the real file system: eight L0 tables of
//! interleaved keys (as hashed inserts spread keys over flushes), their
//! 1 KB values separated into the flushes' blob files, compacted into the
//! last level. Plain, the job rewrites keys and references only; with
//! `sorted_value_runs` it also copies every value into a sorted run, the
//! price a store pays at compaction for scans that read neighbours side
//! by side. Each run starts from a fresh store (setup not timed).

#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use tern::{Db, Options};

const KEYS: u32 = 32_000;
const FLUSHES: u32 = 8;
const VALUE: usize = 1000;

fn key(i: u32) -> Vec<u8> {
    format!("user{:010}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes()
}

/// A store holding `FLUSHES` L0 tables and nothing compacted yet.
fn fresh_store(dir: &std::path::Path, runs: Option<usize>) -> Db {
    let _ = std::fs::remove_dir_all(dir);
    let opts = Options::default().tune(|s| {
        s.write_buffer_size = 64 << 20;
        s.enable_gc = false;
        s.disable_auto_compactions = true;
        s.level0_slowdown_writes_trigger = 64;
        s.level0_stop_writes_trigger = 64;
        s.sorted_value_runs = runs;
        s.sorted_value_runs_above = tern::BytesOrMemory::Bytes(0);
    });
    let db = Db::open(dir, opts).unwrap_or_else(|e| panic!("open {}: {e}", dir.display()));
    let value = vec![0x5au8; VALUE];
    for f in 0..FLUSHES {
        for i in (f..KEYS).step_by(FLUSHES as usize) {
            db.put(&key(i), &value)
                .unwrap_or_else(|e| panic!("put: {e}"));
        }
        db.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    }
    db
}

fn full_compaction(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("tern-bench-compaction-{}", std::process::id()));
    let mut g = c.benchmark_group("compaction");
    g.throughput(Throughput::Bytes(u64::from(KEYS) * VALUE as u64));
    g.sample_size(10);
    for (name, runs) in [
        ("eight_l0_tables_1k_values", None),
        ("eight_l0_tables_1k_values_into_sorted_run", Some(1)),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || fresh_store(&dir, runs),
                |db| {
                    db.compact_range(None, None)
                        .unwrap_or_else(|e| panic!("compact: {e}"));
                    let moved = db.stats().values_moved;
                    assert_eq!(moved > 0, runs.is_some(), "values moved: {moved}");
                    db
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, full_compaction);
criterion_main!(benches);
