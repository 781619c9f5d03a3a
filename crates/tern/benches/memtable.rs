//! Memtable benchmarks: insert (sequential and random keys, one by one in
//! a fresh arena or one reused from a dropped memtable,
//! and in commit-sized groups, linked at once or deferred), point lookups
//! (hit and miss) and a full scan, over 100k entries with 16-byte keys and
//! 100-byte values; and the linker's cost per node by how many deferred
//! groups it links at once, into a memtable of a million entries; and an
//! overwrite load (ten versions of each key) with and without version
//! chains.

#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use tern::internals::format::internal_key::ValueKind;
use tern::internals::iter::InternalIterator;
use tern::internals::memtable::{ArenaPool, MemTable};

const N: usize = 100_000;
const VALUE_LEN: usize = 100;
const ARENA: usize = 32 << 20;

fn key(i: usize) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(format!("key{i:013}").as_bytes());
    k
}

fn keys_sequential() -> Vec<[u8; 16]> {
    (0..N).map(key).collect()
}

fn keys_random() -> Vec<[u8; 16]> {
    let mut keys = keys_sequential();
    keys.shuffle(&mut SmallRng::seed_from_u64(42));
    keys
}

fn fill(keys: &[[u8; 16]]) -> MemTable {
    fill_in(keys, MemTable::new(ARENA))
}

/// [`fill`] into `m`.
fn fill_in(keys: &[[u8; 16]], m: MemTable) -> MemTable {
    let value = [0xabu8; VALUE_LEN];
    for (i, k) in keys.iter().enumerate() {
        if m.add(i as u64 + 1, ValueKind::Value, k, &value).is_err() {
            panic!("arena too small for the benchmark");
        }
    }
    m
}

/// How [`fill_groups`] puts a group in.
#[derive(Clone, Copy)]
enum Groups {
    /// `add_all`: sorted and linked by the inserting thread.
    Linked,
    /// `add_all_deferred` only: the commit leader's share when the linker
    /// thread links the nodes.
    Deferred,
    /// `add_all_deferred`, then `link_deferred` once at the end: the
    /// leader's and the linker's work together on one thread.
    DeferredThenLinked,
    /// The first half linked, the second deferred and left waiting as the
    /// linker leaves them when no reader needs the order (sorted and
    /// merged runs), as a scan finds the active memtable under pipelined
    /// writes.
    HalfDeferred,
}

/// The same keys as [`fill`], inserted in groups of `group`, the way a
/// commit group lands.
fn fill_groups(keys: &[[u8; 16]], group: usize, how: Groups) -> MemTable {
    let m = MemTable::new(ARENA);
    let value = [0xabu8; VALUE_LEN];
    let mut entries = Vec::with_capacity(group);
    for (g, chunk) in keys.chunks(group).enumerate() {
        entries.clear();
        let first = (g * group) as u64 + 1;
        entries.extend(
            chunk
                .iter()
                .zip(first..)
                .map(|(k, seq)| (&k[..], seq, ValueKind::Value, &value[..])),
        );
        let added = match how {
            Groups::Linked => m.add_all(&mut entries),
            Groups::HalfDeferred if g * group < keys.len() / 2 => m.add_all(&mut entries),
            Groups::Deferred | Groups::DeferredThenLinked | Groups::HalfDeferred => {
                m.add_all_deferred(&entries)
            }
        };
        if added.is_err() {
            panic!("arena too small for the benchmark");
        }
        if let Groups::HalfDeferred = how {
            m.link_deferred_lazily();
        }
    }
    if let Groups::DeferredThenLinked = how {
        m.link_deferred();
    }
    m
}

fn insert(c: &mut Criterion) {
    let mut g = c.benchmark_group("memtable_insert_100k");
    g.throughput(Throughput::Elements(N as u64));
    for (name, keys) in [("sequential", keys_sequential()), ("random", keys_random())] {
        g.bench_function(name, |b| {
            b.iter_batched(|| (), |()| fill(black_box(&keys)), BatchSize::PerIteration)
        });
    }
    // In the allocation of the memtable dropped before (a store's
    // memtables after the first): no page faults, no zeroing.
    let pool = Arc::new(ArenaPool::default());
    let keys = keys_random();
    g.bench_function("random_reused_arena", |b| {
        b.iter_batched(
            || (),
            |()| fill_in(black_box(&keys), MemTable::pooled(ARENA, &pool)),
            BatchSize::PerIteration,
        )
    });
    let keys = keys_random();
    let cases = [
        (16, Groups::Linked, ""),
        (1000, Groups::Linked, ""),
        (1000, Groups::Deferred, "_deferred"),
        (1000, Groups::DeferredThenLinked, "_deferred_then_linked"),
    ];
    for (group, how, suffix) in cases {
        g.bench_function(format!("random_groups_of_{group}{suffix}"), |b| {
            b.iter_batched(
                || (),
                |()| fill_groups(black_box(&keys), group, how),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// Entries already in the memtable before [`link`] measures.
const BIG: usize = 1_000_000;
/// Entries [`link`] adds (in commit groups of [`LINK_GROUP`]).
const ADDED: usize = 100_000;
const LINK_GROUP: usize = 1000;

/// A memtable holding [`BIG`] random keys, and [`ADDED`] more random keys
/// not in it.
fn big_memtable() -> (MemTable, Vec<Vec<u8>>) {
    let mut keys: Vec<Vec<u8>> = (0..BIG + ADDED)
        .map(|i| format!("key{i:013}").into_bytes())
        .collect();
    keys.shuffle(&mut SmallRng::seed_from_u64(7));
    let added = keys.split_off(BIG);
    let m = MemTable::new(256 << 20);
    let value = [0xabu8; 16];
    let mut entries = Vec::with_capacity(LINK_GROUP);
    for (g, chunk) in keys.chunks(LINK_GROUP).enumerate() {
        entries.clear();
        let first = (g * LINK_GROUP) as u64 + 1;
        entries.extend(
            chunk
                .iter()
                .zip(first..)
                .map(|(k, seq)| (&k[..], seq, ValueKind::Value, &value[..])),
        );
        if m.add_all(&mut entries).is_err() {
            panic!("arena too small for the benchmark");
        }
    }
    (m, added)
}

/// The linker's cost per node as a function of how many commit groups it
/// links at once: groups of 1000 deferred into a memtable of a million
/// entries, linked after every `every` groups.
fn link(c: &mut Criterion) {
    let mut g = c.benchmark_group("memtable_link_100k_into_1m");
    g.throughput(Throughput::Elements(ADDED as u64));
    let value = [0xabu8; 16];
    for every in [1usize, 8, 64] {
        g.bench_function(format!("every_{every}_groups"), |b| {
            b.iter_batched(
                big_memtable,
                |(m, added)| {
                    let mut entries = Vec::with_capacity(LINK_GROUP);
                    for (g, chunk) in added.chunks(LINK_GROUP).enumerate() {
                        entries.clear();
                        let first = (BIG + g * LINK_GROUP) as u64 + 1;
                        entries.extend(
                            chunk
                                .iter()
                                .zip(first..)
                                .map(|(k, seq)| (&k[..], seq, ValueKind::Value, &value[..])),
                        );
                        if m.add_all_deferred(&entries).is_err() {
                            panic!("arena too small for the benchmark");
                        }
                        if (g + 1) % every == 0 {
                            m.link_deferred();
                        }
                    }
                    m.link_deferred();
                    m
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

/// Versions of each key an overwrite load writes in [`overwrite`].
const VERSIONS: usize = 10;

/// An overwrite load as a pipelined server takes it: ten versions of each
/// of 100k random keys, in deferred groups of 1,000, then linked and
/// scanned as a flush without snapshots does (each key's newest version,
/// `next_user_key`); in a table with version chains (only
/// each key's first version is ordered into the list) and in one listing
/// every version.
fn overwrite(c: &mut Criterion) {
    let keys = keys_random();
    let mut g = c.benchmark_group("memtable_overwrite_10x100k");
    g.throughput(Throughput::Elements((VERSIONS * N) as u64));
    let value = [0xabu8; 16];
    for (name, chains) in [("chained", true), ("listed", false)] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let m = MemTable::new(128 << 20);
                    if chains {
                        m
                    } else {
                        m.without_version_chains()
                    }
                },
                |m| {
                    let mut entries = Vec::with_capacity(LINK_GROUP);
                    let mut seq = 0u64;
                    for _ in 0..VERSIONS {
                        for chunk in keys.chunks(LINK_GROUP) {
                            entries.clear();
                            entries.extend(chunk.iter().map(|k| {
                                seq += 1;
                                (&k[..], seq, ValueKind::Value, &value[..])
                            }));
                            if m.add_all_deferred(&entries).is_err() {
                                panic!("arena too small for the benchmark");
                            }
                        }
                    }
                    m.link_deferred();
                    let m = Arc::new(m);
                    let mut it = m.iter();
                    it.seek_to_first();
                    let mut n = 0usize;
                    while it.valid() {
                        n += it.value().len();
                        it.next_user_key();
                    }
                    black_box(n);
                    m
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

fn get(c: &mut Criterion) {
    let keys = keys_random();
    let m = fill(&keys);
    // Same random order as the hits, but absent: the last byte is not a digit.
    let misses: Vec<[u8; 16]> = keys
        .iter()
        .map(|k| {
            let mut k = *k;
            k[15] = b'x';
            k
        })
        .collect();
    let mut g = c.benchmark_group("memtable_get_100k");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("hit", |b| {
        b.iter(|| {
            for k in &keys {
                black_box(m.get(k, u64::MAX));
            }
        })
    });
    g.bench_function("miss", |b| {
        b.iter(|| {
            for k in &misses {
                black_box(m.get(k, u64::MAX));
            }
        })
    });
    g.finish();
}

/// Walks every entry of `m` (`_starts` unused).
fn full_scan(m: &Arc<MemTable>, _starts: &[Vec<u8>]) {
    let mut it = m.iter();
    it.seek_to_first();
    let mut n = 0usize;
    while it.valid() {
        black_box((it.key(), it.value()));
        n += 1;
        it.next();
    }
    assert_eq!(n, N);
}

/// A short scan (a seek and ten entries) from each of `starts`, as a SCAN
/// command or a range read makes.
fn short_scans(m: &Arc<MemTable>, starts: &[Vec<u8>]) {
    let mut it = m.iter();
    for start in starts {
        it.seek(start);
        for _ in 0..10 {
            if !it.valid() {
                break;
            }
            black_box((it.key(), it.value()));
            it.next();
        }
    }
}

fn scan(c: &mut Criterion) {
    let m = Arc::new(fill(&keys_random()));
    let mut g = c.benchmark_group("memtable_scan_100k");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("forward", |b| b.iter(|| full_scan(&m, &[])));
    g.finish();
}

/// A full scan of a memtable whose last 50k entries wait unlinked: merged
/// with the list as runs, against linked first (what a reader did before
/// readers merged runs).
fn scan_backlog(c: &mut Criterion) {
    let keys = keys_random();
    let mut g = c.benchmark_group("memtable_scan_100k_half_deferred");
    g.throughput(Throughput::Elements(N as u64));
    // A hundred short scans, from keys spread over the table.
    let starts: Vec<Vec<u8>> = keys
        .iter()
        .step_by(N / 100)
        .map(|k| tern::internals::format::internal_key::seek_key(k, u64::MAX >> 8))
        .collect();
    type Scan = fn(&Arc<MemTable>, &[Vec<u8>]);
    let cases: [(&str, bool, Scan); 4] = [
        ("short_scans_merge_runs", false, short_scans),
        ("short_scans_link_first", true, short_scans),
        ("merge_runs", false, full_scan),
        ("link_then_scan", true, full_scan),
    ];
    for (name, link_first, scan) in cases {
        g.bench_function(name, |b| {
            b.iter_batched(
                || Arc::new(fill_groups(&keys, LINK_GROUP, Groups::HalfDeferred)),
                |m| {
                    if link_first {
                        m.link_deferred();
                    }
                    scan(&m, &starts)
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = insert, link, overwrite, get, scan, scan_backlog
}
criterion_main!(benches);
