//! One blob GC job on the real file system: a 16 MiB blob file of 1 KB
//! values with a third of its records dead (every third ordinal, the
//! scattered garbage overwrites leave), collected into a new file. The job
//! reads the live records and writes them out; the output is removed after
//! each run.

#![allow(missing_docs)]

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use roaring::RoaringBitmap;

use tern::gc::{GcContext, GcInput, GcJob};
use tern::internals::blob::BlobWriter;
use tern::io::{FsRef, PosixFs};

const RECORDS: u32 = 16 * 1024;
const VALUE: usize = 1000;

fn input_file(dir: &Path, fs: &FsRef) -> PathBuf {
    let path = dir.join("000001.blob");
    let file = fs.create(&path).unwrap_or_else(|e| panic!("create: {e}"));
    let mut w = BlobWriter::new(file, path.clone(), 1).unwrap_or_else(|e| panic!("writer: {e}"));
    let value = vec![0x5au8; VALUE];
    for i in 0..RECORDS {
        w.add(format!("user{i:010}").as_bytes(), u64::from(i), &value)
            .unwrap_or_else(|e| panic!("add: {e}"));
    }
    w.finish(&[]).unwrap_or_else(|e| panic!("finish: {e}"));
    path
}

fn gc_job(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("tern-bench-gc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let fs = PosixFs::shared();
    input_file(&dir, &fs);
    let dead: RoaringBitmap = (0..RECORDS).filter(|o| o % 3 == 0).collect();
    let live = u64::from(RECORDS) - dead.len();
    let job = GcJob {
        dir: dir.clone(),
        inputs: vec![GcInput {
            number: 1,
            record_count: u64::from(RECORDS),
            dead,
        }],
        output_numbers: vec![2],
        output_file_size: u64::MAX,
    };
    let ctx = GcContext {
        fs: fs.clone(),
        rate_limiter: None,
    };
    let mut g = c.benchmark_group("gc");
    g.throughput(Throughput::Bytes(live * VALUE as u64));
    g.sample_size(20);
    g.bench_function("one_third_dead_1k_values", |b| {
        b.iter(|| {
            let out = job.run(&ctx).unwrap_or_else(|e| panic!("gc: {e}"));
            assert_eq!(out.records_relocated, live);
            let _ = std::fs::remove_file(dir.join("000002.blob"));
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, gc_job);
criterion_main!(benches);
