//! Data block benchmarks: building ~4 KiB blocks, seeking in them and
//! iterating them forward and backward; and probing the bloom filter of a
//! table of 2M keys (2.5 MB, larger than the cache) for keys it holds and
//! keys it does not.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tern::internals::format::block::{Block, BlockBuilder, BlockIter};
use tern::internals::format::bloom::{BloomBuilder, BloomFilter};
use tern::internals::format::internal_key::{
    compare, make_internal_key, seek_key, ValueKind, MAX_SEQ,
};

/// Entries of about 16-byte user keys and 100-byte values filling ~4 KiB.
fn entries() -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut size = 0;
    let mut i = 0u64;
    while size < 4096 {
        let k = make_internal_key(
            format!("user{:012}", i * 7).as_bytes(),
            1000 - i,
            ValueKind::Value,
        );
        let v = vec![(i % 251) as u8; 100];
        size += k.len() + v.len();
        out.push((k, v));
        i += 1;
    }
    out
}

fn build(entries: &[(Vec<u8>, Vec<u8>)]) -> Arc<Block> {
    let mut b = BlockBuilder::new(16);
    for (k, v) in entries {
        b.add(k, v);
    }
    Arc::new(Block::new(b.finish().to_vec()).unwrap())
}

fn benches(c: &mut Criterion) {
    let es = entries();
    let n = es.len() as u64;

    let mut g = c.benchmark_group("block");
    g.measurement_time(Duration::from_secs(2));
    g.warm_up_time(Duration::from_millis(500));

    g.throughput(Throughput::Elements(n));
    g.bench_function("build_4k", |b| {
        let mut builder = BlockBuilder::new(16);
        b.iter(|| {
            builder.reset();
            for (k, v) in &es {
                builder.add(k, v);
            }
            black_box(builder.finish().len())
        })
    });

    let block = build(&es);
    g.bench_function("iterate_forward_4k", |b| {
        let mut it = BlockIter::new(Arc::clone(&block), compare);
        b.iter(|| {
            let mut sum = 0usize;
            it.seek_to_first();
            while it.valid() {
                sum += it.key().len() + it.value().len();
                it.next();
            }
            black_box(sum)
        })
    });
    g.bench_function("iterate_backward_4k", |b| {
        let mut it = BlockIter::new(Arc::clone(&block), compare);
        b.iter(|| {
            let mut sum = 0usize;
            it.seek_to_last();
            while it.valid() {
                sum += it.key().len() + it.value().len();
                it.prev();
            }
            black_box(sum)
        })
    });

    let targets: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            seek_key(
                format!("user{:012}", i * 7 + (i % 2) * 3).as_bytes(),
                MAX_SEQ,
            )
        })
        .collect();
    g.throughput(Throughput::Elements(targets.len() as u64));
    g.bench_function("seek_4k", |b| {
        let mut it = BlockIter::new(Arc::clone(&block), compare);
        b.iter(|| {
            let mut found = 0usize;
            for t in &targets {
                it.seek(t);
                found += usize::from(it.valid());
            }
            black_box(found)
        })
    });
    g.finish();
}

fn bloom_probes(c: &mut Criterion) {
    let key = |i: u64| format!("user{:019}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut b = BloomBuilder::new(10);
    for i in 0..2_000_000 {
        b.add_key(key(i).as_bytes());
    }
    let data = b.finish();
    let f = BloomFilter::new(&data).unwrap();
    let probes: u64 = 100_000;
    let present: Vec<String> = (0..probes).map(|i| key(i * 19)).collect();
    let absent: Vec<String> = (0..probes).map(|i| key(3_000_000 + i)).collect();
    let mut g = c.benchmark_group("bloom_2m_keys");
    g.throughput(Throughput::Elements(probes));
    for (name, keys) in [("present", &present), ("absent", &absent)] {
        g.bench_function(name, |b| {
            b.iter(|| keys.iter().filter(|k| f.may_contain(k.as_bytes())).count())
        });
    }
    g.finish();
}

criterion_group!(block_benches, benches, bloom_probes);
criterion_main!(block_benches);
