//! Data block benchmarks: building ~4 KiB blocks, seeking in them and
//! iterating them forward and backward; seeking in blocks far larger than
//! the CPU's caches together (each seek's block read from memory, as a
//! point read of a large table meets it); and probing the bloom filter of
//! a table of 2M keys (2.5 MB, larger than the cache) for keys it holds
//! and keys it does not.
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

/// Seeks for random keys of random blocks among 16,384 blocks (64 MiB),
/// each block shaped as a table of separated values holds them: about 100
/// keys of 24 bytes with a 16-byte blob reference each. The blocks' bytes
/// are not in the CPU's caches, so the seek pays for every cache line it
/// touches, as a point read in a large table does.
fn seek_cold(c: &mut Criterion) {
    const BLOCKS: u64 = 16 << 10;
    let key = |b: u64, i: u64| format!("user{:020}", (b * 1000 + i * 7) * 1_000_003);
    // Each block with the number of keys it took.
    let blocks: Vec<(Arc<Block>, u64)> = (0..BLOCKS)
        .map(|b| {
            let mut builder = BlockBuilder::new(16);
            let mut i = 0;
            while builder.estimated_size() < 4000 {
                let k = make_internal_key(key(b, i).as_bytes(), 1000 + i, ValueKind::Value);
                builder.add(&k, &(b * 1000 + i).to_le_bytes().repeat(2));
                i += 1;
            }
            (Arc::new(Block::new(builder.finish().to_vec()).unwrap()), i)
        })
        .collect();
    // A fixed pseudo-random sequence of (block, key) pairs.
    let seeks: Vec<(usize, Vec<u8>)> = (0..4096u64)
        .map(|n| {
            let h = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let b = (h >> 20) % BLOCKS;
            let i = (h >> 4) % blocks[b as usize].1;
            (b as usize, seek_key(key(b, i).as_bytes(), MAX_SEQ))
        })
        .collect();
    let mut g = c.benchmark_group("block_cold");
    g.measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(seeks.len() as u64));
    g.bench_function("seek_64m", |bench| {
        let mut key_buf = Vec::new();
        bench.iter(|| {
            let mut found = 0usize;
            for (b, t) in &seeks {
                let mut it = BlockIter::with_key_buffer(
                    &*blocks[*b].0,
                    compare,
                    std::mem::take(&mut key_buf),
                );
                it.seek(t);
                // The entry found is the sought user key's (the seek key
                // differs from it only in its 8-byte trailer).
                let user = &t[..t.len() - 8];
                found += usize::from(it.valid() && it.key().starts_with(user));
                key_buf = it.into_key_buffer();
            }
            assert_eq!(found, seeks.len(), "every seek finds its key");
            black_box(found)
        })
    });
    g.finish();
}

criterion_group!(block_benches, benches, seek_cold, bloom_probes);
criterion_main!(block_benches);
