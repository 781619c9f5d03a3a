//! Table tests against a sorted-vector model.

use std::cmp::Ordering;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::cache::BlockCache;
use crate::error::Error;
use crate::format::internal_key::{
    compare, make_internal_key, seek_key, user_key, ValueKind, MAX_SEQ,
};
use crate::format::table::{BlockHandle, BLOCK_TRAILER_LEN, FOOTER_LEN};
use crate::io::{FsRef, PosixFs};
use crate::iter::InternalIterator;
use crate::options::Compression;

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

fn random_entries(rng: &mut StdRng, n: usize, max_value: usize) -> Entries {
    let mut set = std::collections::BTreeSet::new();
    while set.len() < n {
        let uk_len = rng.gen_range(1..12);
        // A small alphabet so user keys share prefixes and repeat.
        let uk: Vec<u8> = (0..uk_len).map(|_| b'a' + rng.gen_range(0..4u8)).collect();
        let seq = rng.gen_range(1..1000u64);
        set.insert((uk, seq));
    }
    let mut v: Entries = set
        .into_iter()
        .map(|(uk, seq)| {
            let kind = match rng.gen_range(0..10) {
                0 => ValueKind::Delete,
                1 => ValueKind::BlobRef,
                _ => ValueKind::Value,
            };
            let vlen = if kind == ValueKind::Delete {
                0
            } else {
                rng.gen_range(0..=max_value)
            };
            let val: Vec<u8> = (0..vlen)
                .map(|i| (i % 23) as u8 + rng.gen_range(0..2u8))
                .collect();
            (make_internal_key(&uk, seq, kind), val)
        })
        .collect();
    v.sort_by(|a, b| compare(&a.0, &b.0));
    v
}

fn build(fs: &FsRef, path: &Path, opts: TableOptions, entries: &Entries) -> TableSummary {
    build_version(fs, path, opts, entries, false)
}

/// [`build`], writing format version 1 (a classic filter) with `v1`.
fn build_version(
    fs: &FsRef,
    path: &Path,
    opts: TableOptions,
    entries: &Entries,
    v1: bool,
) -> TableSummary {
    let file = fs.create(path).unwrap();
    let mut b = TableBuilder::new(file, path.to_path_buf(), opts);
    if v1 {
        b = b.write_format_v1();
    }
    for (k, v) in entries {
        b.add(k, v).unwrap();
    }
    assert_eq!(b.num_entries(), entries.len() as u64);
    let est = b.estimated_size();
    let s = b.finish().unwrap();
    // The open block is counted uncompressed, the finished file adds metadata.
    assert!(entries.is_empty() || est > 0);
    s
}

fn setup() -> (tempfile::TempDir, FsRef) {
    (tempfile::tempdir().unwrap(), PosixFs::shared())
}

/// First model index with key >= target.
fn lower_bound(entries: &Entries, target: &[u8]) -> usize {
    entries.partition_point(|(k, _)| compare(k, target) == Ordering::Less)
}

fn check_against_model(table: &Arc<Table>, entries: &Entries, rng: &mut StdRng) {
    // Forward.
    let mut it = table.iter();
    it.seek_to_first();
    for (k, v) in entries {
        assert!(it.valid());
        assert_eq!((it.key(), it.value()), (&k[..], &v[..]));
        it.next();
    }
    assert!(!it.valid());
    it.status().unwrap();
    // Backward.
    it.seek_to_last();
    for (k, v) in entries.iter().rev() {
        assert!(it.valid());
        assert_eq!((it.key(), it.value()), (&k[..], &v[..]));
        it.prev();
    }
    assert!(!it.valid());
    it.status().unwrap();

    // Point lookups of every entry, and of the newest version.
    for (i, (k, v)) in entries.iter().enumerate() {
        let got = table.get(k).unwrap().unwrap();
        assert_eq!((&got.0, &got.1), (k, v));
        let uk = user_key(k);
        if i == 0 || user_key(&entries[i - 1].0) != uk {
            let got = table.get(&seek_key(uk, MAX_SEQ)).unwrap().unwrap();
            assert_eq!(&got.0, k);
        }
    }
    // Random seeks, seek_for_prev, lookups of absent keys, mixed directions.
    for _ in 0..300 {
        let uk: Vec<u8> = (0..rng.gen_range(0..13))
            .map(|_| b'a' + rng.gen_range(0..5u8))
            .collect();
        let target = seek_key(&uk, rng.gen_range(0..1100));
        let pos = lower_bound(entries, &target);

        it.seek(&target);
        if pos < entries.len() {
            assert_eq!(it.key(), &entries[pos].0[..]);
            // A few steps in both directions.
            let mut p = pos;
            for _ in 0..rng.gen_range(0..20) {
                if rng.gen_bool(0.5) {
                    it.next();
                    p += 1;
                } else {
                    it.prev();
                    if p == 0 {
                        assert!(!it.valid());
                        break;
                    }
                    p -= 1;
                }
                if p >= entries.len() {
                    assert!(!it.valid());
                    break;
                }
                assert_eq!(it.key(), &entries[p].0[..]);
            }
        } else {
            assert!(!it.valid());
        }

        it.seek_for_prev(&target);
        let prev_pos = entries.partition_point(|(k, _)| compare(k, &target) != Ordering::Greater);
        if prev_pos == 0 {
            assert!(!it.valid());
        } else {
            assert_eq!(it.key(), &entries[prev_pos - 1].0[..]);
        }

        let expect = entries
            .get(pos)
            .filter(|(k, _)| user_key(k) == &uk[..])
            .cloned();
        assert_eq!(table.get(&target).unwrap(), expect);
        it.status().unwrap();
    }
    assert_eq!(table.verify().unwrap(), entries.len() as u64);
}

#[test]
fn build_open_get_iterate_vs_model() {
    let (dir, fs) = setup();
    let mut rng = StdRng::seed_from_u64(42);
    let mut n = 0;
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
        for (block_size, restart_interval, bloom, count, max_value) in [
            (4096, 16, 10, 3000, 100),
            (256, 1, 0, 800, 40),
            (64, 3, 5, 500, 300),
            (1 << 16, 16, 10, 2000, 20),
        ] {
            let entries = random_entries(&mut rng, count, max_value);
            let path = dir.path().join(format!("{n:06}.sst"));
            let opts = TableOptions {
                block_size,
                restart_interval,
                bloom_bits_per_key: bloom,
                compression,
            };
            let s = build(&fs, &path, opts, &entries);
            assert_eq!(s.num_entries, entries.len() as u64);
            assert_eq!(s.smallest, entries[0].0);
            assert_eq!(&s.largest, &entries.last().unwrap().0);
            let dels = entries
                .iter()
                .filter(|(k, _)| {
                    crate::format::internal_key::parse(k).unwrap().kind == ValueKind::Delete
                })
                .count();
            assert_eq!(s.num_deletions, dels as u64);
            assert_eq!(s.file_size, fs.file_size(&path).unwrap());

            let cache = (n % 2 == 0).then(|| BlockCache::new(1 << 20));
            let table = Table::open(&fs, &path, n, cache).unwrap();
            let p = table.properties();
            assert_eq!(p.num_entries, entries.len() as u64);
            assert_eq!(p.compression, compression);
            assert_eq!(p.format_version, crate::format::table::FORMAT_VERSION);
            assert_eq!(
                (p.smallest_seq, p.largest_seq),
                (s.smallest_seq, s.largest_seq)
            );
            assert!(p.num_data_blocks >= 1);
            assert_eq!(table.file_size(), s.file_size);
            assert_eq!(table.file_number(), n);
            assert_eq!(table.path(), path);
            if compression != Compression::None && block_size >= 4096 {
                assert!(
                    p.data_size < p.raw_key_size + p.raw_value_size,
                    "{compression:?}"
                );
            }
            check_against_model(&table, &entries, &mut rng);
            n += 1;
        }
    }
}

#[test]
fn empty_table() {
    let (dir, fs) = setup();
    let path = dir.path().join("empty.sst");
    let s = build(&fs, &path, TableOptions::default(), &Vec::new());
    assert_eq!(s.num_entries, 0);
    let t = Table::open(&fs, &path, 1, None).unwrap();
    let mut it = t.iter();
    it.seek_to_first();
    assert!(!it.valid());
    it.seek_to_last();
    assert!(!it.valid());
    it.seek(b"a\0\0\0\0\0\0\0\0");
    assert!(!it.valid());
    it.status().unwrap();
    assert_eq!(t.get(&seek_key(b"a", 5)).unwrap(), None);
    assert_eq!(t.verify().unwrap(), 0);
}

#[test]
fn large_values_and_blob_files() {
    let (dir, fs) = setup();
    let path = dir.path().join("big.sst");
    let file = fs.create(&path).unwrap();
    let mut b = TableBuilder::new(
        file,
        path.clone(),
        TableOptions {
            compression: Compression::Lz4,
            ..TableOptions::default()
        },
    );
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let k1 = make_internal_key(b"a", 1, ValueKind::Value);
    let k2 = make_internal_key(b"b", 2, ValueKind::BlobRef);
    b.add(&k1, &big).unwrap();
    b.add(&k2, b"ref").unwrap();
    b.add_blob_file(9);
    b.add_blob_file(4);
    b.add_blob_file(9);
    // Out of order and malformed keys are refused.
    assert!(matches!(b.add(&k1, b"x"), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        b.add(b"short", b"x"),
        Err(Error::InvalidArgument(_))
    ));
    b.finish().unwrap();
    let t = Table::open(&fs, &path, 1, None).unwrap();
    assert_eq!(t.get(&k1).unwrap().unwrap().1, big);
    assert_eq!(t.properties().blob_files, vec![4, 9]);
    assert_eq!(t.properties().num_blob_refs, 1);
    assert_eq!(t.verify().unwrap(), 2);
}

/// Blocks that hold only keys, blob references and tombstones are stored
/// as is even where the level compresses: compressing them saves little
/// and costs every compaction and every block-cache miss. A block with an
/// inline value is compressed as configured.
#[test]
fn blocks_of_blob_references_are_stored_uncompressed() {
    let (dir, fs) = setup();
    // The compression type of every data block of a table of 400 entries
    // of highly compressible bytes, the `kind` of entry `i` given.
    let types = |name: &str, kind: &dyn Fn(u32) -> ValueKind| -> Vec<Compression> {
        let path = dir.path().join(name);
        let entries: Entries = (0..400u32)
            .map(|i| {
                let k = kind(i);
                let value = match k {
                    ValueKind::Delete => Vec::new(),
                    _ => vec![b'v'; 24],
                };
                let key = format!("key{i:06}");
                (make_internal_key(key.as_bytes(), 1, k), value)
            })
            .collect();
        let opts = TableOptions {
            block_size: 1024,
            compression: Compression::Lz4,
            ..TableOptions::default()
        };
        build(&fs, &path, opts, &entries);
        let t = Table::open(&fs, &path, 1, None).unwrap();
        assert_eq!(t.verify().unwrap(), entries.len() as u64);
        for (k, v) in &entries {
            let got = t.get(k).unwrap().map(|(_, v)| v);
            assert_eq!(got.as_deref(), Some(v.as_slice()), "{name}");
        }
        let data = std::fs::read(&path).unwrap();
        data_blocks(&t)
            .iter()
            .map(|h| Compression::from_u8(data[(h.offset + h.size) as usize]).unwrap())
            .collect()
    };
    let refs = types("refs.sst", &|_| ValueKind::BlobRef);
    assert!(refs.len() > 3);
    assert!(refs.iter().all(|&c| c == Compression::None), "{refs:?}");
    // Blob references with one in `n` entries of kind `k`.
    let one_in = |n: u32, k: ValueKind| {
        move |i: u32| {
            if i % n == 0 {
                k
            } else {
                ValueKind::BlobRef
            }
        }
    };
    let dels = types("dels.sst", &one_in(2, ValueKind::Delete));
    assert!(dels.iter().all(|&c| c == Compression::None), "{dels:?}");
    let values = types("values.sst", &|_| ValueKind::Value);
    assert!(values.iter().all(|&c| c == Compression::Lz4), "{values:?}");
    // An inline value in every block of references (every third entry,
    // the last one included): each block compressed.
    let mixed = types("mixed.sst", &one_in(3, ValueKind::Value));
    assert!(mixed.iter().all(|&c| c == Compression::Lz4), "{mixed:?}");
    // Values, then references only: the choice is made per block, so the
    // blocks after the last value are raw again.
    let then_refs = types("then_refs.sst", &|i| {
        if i < 100 {
            ValueKind::Value
        } else {
            ValueKind::BlobRef
        }
    });
    assert_eq!(then_refs[0], Compression::Lz4, "{then_refs:?}");
    assert_eq!(then_refs.last(), Some(&Compression::None), "{then_refs:?}");
}

/// Handles of all data blocks, in order.
fn data_blocks(t: &Table) -> Vec<BlockHandle> {
    let mut idx = t.index_iter();
    idx.seek_to_first();
    let mut v = Vec::new();
    while idx.valid() {
        v.push(BlockHandle::decode(idx.value()).unwrap());
        idx.next();
    }
    v
}

fn flip_byte(path: &Path, pos: u64) {
    let mut data = std::fs::read(path).unwrap();
    data[pos as usize] ^= 0x40;
    std::fs::write(path, data).unwrap();
}

fn assert_corruption_at(e: Error, path: &Path, offset: u64) {
    match e {
        Error::Corruption {
            file, offset: o, ..
        } => {
            assert_eq!((file.as_path(), o), (path, offset));
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn flipped_byte_in_data_block_is_corruption() {
    for compression in [Compression::None, Compression::Zstd] {
        let (dir, fs) = setup();
        let mut rng = StdRng::seed_from_u64(3);
        let entries = random_entries(&mut rng, 2000, 50);
        let path: PathBuf = dir.path().join("c.sst");
        let opts = TableOptions {
            compression,
            ..TableOptions::default()
        };
        build(&fs, &path, opts, &entries);
        let blocks = data_blocks(&Table::open(&fs, &path, 1, None).unwrap());
        assert!(blocks.len() > 3);
        let victim = blocks[2];
        flip_byte(&path, victim.offset + victim.size / 2);

        let t = Table::open(&fs, &path, 1, Some(BlockCache::new(1 << 20))).unwrap();
        // Find an entry stored in the damaged block: the first key after
        // the previous block's last key.
        let mut it = t.iter();
        it.seek_to_first();
        while it.valid() {
            it.next();
        }
        let e = it.status().unwrap_err();
        assert_corruption_at(e, &path, victim.offset);

        // Point lookups into that block fail the same way.
        let mut hit = false;
        for (k, _) in &entries {
            match t.get(k) {
                Ok(_) => {}
                Err(e) => {
                    assert_corruption_at(e, &path, victim.offset);
                    hit = true;
                }
            }
        }
        assert!(hit);
        // Backward iteration also reports it.
        let mut it = t.iter();
        it.seek_to_last();
        while it.valid() {
            it.prev();
        }
        assert_corruption_at(it.status().unwrap_err(), &path, victim.offset);
        assert_corruption_at(t.verify().unwrap_err(), &path, victim.offset);
    }
}

#[test]
fn truncated_or_foreign_file_fails_open() {
    let (dir, fs) = setup();
    let mut rng = StdRng::seed_from_u64(4);
    let entries = random_entries(&mut rng, 300, 20);
    let path = dir.path().join("t.sst");
    build(&fs, &path, TableOptions::default(), &entries);
    let good = std::fs::read(&path).unwrap();

    // Truncated: the footer is gone.
    for cut in [1usize, 10, FOOTER_LEN, good.len() - 10] {
        std::fs::write(&path, &good[..good.len() - cut]).unwrap();
        let e = Table::open(&fs, &path, 1, None).unwrap_err();
        assert!(e.is_corruption(), "cut {cut}: {e:?}");
    }
    // Bad magic.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    std::fs::write(&path, &bad).unwrap();
    let e = Table::open(&fs, &path, 1, None).unwrap_err();
    assert_corruption_at(e, &path, (n - FOOTER_LEN) as u64);
    // Damaged index block (just before the footer).
    let mut bad = good.clone();
    bad[n - FOOTER_LEN - BLOCK_TRAILER_LEN - 2] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    assert!(Table::open(&fs, &path, 1, None)
        .unwrap_err()
        .is_corruption());
    // Not a table at all.
    std::fs::write(&path, vec![7u8; 1000]).unwrap();
    assert!(Table::open(&fs, &path, 1, None)
        .unwrap_err()
        .is_corruption());
    std::fs::write(&path, b"tiny").unwrap();
    assert!(Table::open(&fs, &path, 1, None)
        .unwrap_err()
        .is_corruption());
}

#[test]
fn every_single_byte_flip_is_detected_or_harmless() {
    let (dir, fs) = setup();
    let mut rng = StdRng::seed_from_u64(5);
    let entries = random_entries(&mut rng, 60, 10);
    let path = dir.path().join("f.sst");
    let opts = TableOptions {
        block_size: 128,
        ..TableOptions::default()
    };
    build(&fs, &path, opts, &entries);
    let good = std::fs::read(&path).unwrap();
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x01;
        std::fs::write(&path, &bad).unwrap();
        match Table::open(&fs, &path, 1, None) {
            Err(e) => assert!(e.is_corruption(), "byte {i}: {e:?}"),
            Ok(t) => {
                // Data damage must be reported, never returned as data.
                assert!(t.verify().is_err(), "byte {i} undetected");
            }
        }
    }
}

#[test]
fn block_cache_hits_counted() {
    let (dir, fs) = setup();
    let mut rng = StdRng::seed_from_u64(6);
    let entries = random_entries(&mut rng, 1000, 30);
    let path = dir.path().join("h.sst");
    build(&fs, &path, TableOptions::default(), &entries);
    let cache = BlockCache::new(8 << 20);
    let t = Table::open(&fs, &path, 7, Some(Arc::clone(&cache))).unwrap();
    let (k, _) = &entries[500];
    t.get(k).unwrap().unwrap();
    assert_eq!((cache.hits(), cache.misses()), (0, 1));
    t.get(k).unwrap().unwrap();
    assert_eq!((cache.hits(), cache.misses()), (1, 1));
    // A full scan reads each block once more through the cache.
    let blocks = data_blocks(&t).len() as u64;
    let mut it = t.iter();
    it.seek_to_first();
    while it.valid() {
        it.next();
    }
    assert_eq!(cache.hits() + cache.misses(), 2 + blocks);
    assert_eq!(cache.misses(), blocks);
    assert_eq!(cache.len() as u64, blocks);
    // verify() bypasses the cache.
    t.verify().unwrap();
    assert_eq!(cache.hits() + cache.misses(), 2 + blocks);
}

#[test]
fn thread_safety() {
    fn send<T: Send>() {}
    fn sync<T: Sync>() {}
    send::<TableBuilder>();
    send::<Arc<Table>>();
    sync::<Table>();
    send::<TableIter>();
    sync::<BlockCache>();
}

#[test]
fn oversized_entry_refused() {
    let (dir, fs) = setup();
    let path = dir.path().join("o.sst");
    let mut b = TableBuilder::new(fs.create(&path).unwrap(), path, TableOptions::default());
    let k = make_internal_key(b"k", 1, ValueKind::Value);
    let huge = vec![0u8; builder::MAX_ENTRY_SIZE];
    assert!(matches!(b.add(&k, &huge), Err(Error::InvalidArgument(_))));
    b.add(&k, b"small").unwrap();
    assert_eq!(b.finish().unwrap().num_entries, 1);
}

#[test]
fn a_lookup_made_while_handling_another_lookups_entry_finds_its_own_entry() {
    // `find` lends its key buffers to the next lookup on the thread; a
    // lookup started from inside another's `found` must not see or disturb
    // the outer one's keys.
    let (dir, fs) = setup();
    let mut rng = StdRng::seed_from_u64(7);
    let mut tables = Vec::new();
    let mut all = Vec::new();
    for n in 0..2u64 {
        let entries = random_entries(&mut rng, 2000, 50);
        let path = dir.path().join(format!("{n:06}.sst"));
        let opts = TableOptions {
            block_size: 256,
            ..TableOptions::default()
        };
        build(&fs, &path, opts, &entries);
        tables.push(Table::open(&fs, &path, n, Some(BlockCache::new(1 << 20))).unwrap());
        all.push(entries);
    }
    for i in (0..2000).step_by(7) {
        let (outer_key, outer_value) = &all[0][i];
        let (inner_key, inner_value) = &all[1][(i * 13) % 2000];
        let (outer_seen, inner_seen) = tables[0]
            .find(outer_key, false, |k, v| {
                let inner = tables[1]
                    .find(inner_key, false, |k, v| Ok((k.to_vec(), v.to_vec())))
                    .unwrap()
                    .unwrap()
                    .unwrap();
                Ok(((k.to_vec(), v.to_vec()), inner))
            })
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(&outer_seen, &(outer_key.clone(), outer_value.clone()));
        assert_eq!(&inner_seen, &(inner_key.clone(), inner_value.clone()));
        // And a plain lookup after them still finds its entry.
        let got = tables[1].get(inner_key).unwrap().unwrap();
        assert_eq!(&got, &(inner_key.clone(), inner_value.clone()));
    }
}

#[test]
fn tables_of_format_version_1_with_classic_filters_still_open_and_read() {
    let (dir, fs) = setup();
    let mut rng = StdRng::seed_from_u64(3);
    let entries = random_entries(&mut rng, 3000, 100);
    for (n, v1) in [(1u64, true), (2, false)] {
        let path = dir.path().join(format!("{n:06}.sst"));
        build_version(&fs, &path, TableOptions::default(), &entries, v1);
        let table = Table::open(&fs, &path, n, None).unwrap();
        let want_version = if v1 {
            1
        } else {
            crate::format::table::FORMAT_VERSION
        };
        assert_eq!(table.properties().format_version, want_version);
        let filter = table.filter_bytes().unwrap();
        let blocked = crate::format::bloom::BloomFilter::new(filter)
            .unwrap()
            .is_blocked();
        assert_eq!(blocked, !v1, "version {want_version} filter layout");
        assert_eq!(table.verify().unwrap(), entries.len() as u64);
        check_against_model(&table, &entries, &mut rng);
    }
}

#[test]
fn a_filter_of_the_other_layout_than_the_version_says_is_corruption() {
    // A version 1 table whose footer is rewritten to say version 2 (with
    // its checksum fixed): its classic filter does not belong there.
    let (dir, fs) = setup();
    let mut rng = StdRng::seed_from_u64(4);
    let entries = random_entries(&mut rng, 500, 20);
    let path = dir.path().join("000001.sst");
    build_version(&fs, &path, TableOptions::default(), &entries, true);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - crate::format::table::FOOTER_LEN;
    let footer = &mut bytes[at..];
    footer[48..52].copy_from_slice(&2u32.to_le_bytes());
    let crc = crate::format::checksum::crc2(&footer[..52], &footer[56..]);
    footer[52..56].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    match Table::open(&fs, &path, 1, None) {
        Err(Error::Corruption { reason, .. }) => {
            assert!(reason.contains("classic filter"), "{reason}")
        }
        other => panic!("expected a corruption, got {other:?}"),
    }
}
