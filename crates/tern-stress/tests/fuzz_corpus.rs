//! Replays every fuzz target's corpus (`fuzz/corpus/<target>/`) and a set of
//! freshly generated real files, plus simple mutations of them, through the
//! decoder harnesses: none may panic. This is what CI runs; `fuzz/run.sh`
//! does the coverage-guided fuzzing.
//!
//! `cargo test -p tern-stress --test fuzz_corpus -- --ignored` regenerates
//! the committed seed corpus from a real store.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tern::internals::format::blob::{
    decode_index, decode_lineage, decode_record, BlobFooter, BlobRef, BLOB_FOOTER_LEN,
};
use tern::internals::format::block::BlockBuilder;
use tern::internals::format::bloom::BloomBuilder;
use tern::internals::format::internal_key::{make_internal_key, ValueKind};
use tern::internals::format::log_record::LogKind;
use tern::internals::format::table::{block_trailer, BlockHandle, Footer, FOOTER_LEN};
use tern::internals::format::version_edit::VersionEdit;
use tern::internals::wal::LogReader;
use tern::io::{FileSystem, MemFs};
use tern::{Compression, Db, Options, WriteBatch, WriteOptions};
use tern_stress::fuzz::{replay_dir, TARGETS};

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

fn block_bytes(entries: &[(Vec<u8>, Vec<u8>)], ctype: Compression, restart: usize) -> Vec<u8> {
    let mut b = BlockBuilder::new(restart);
    for (k, v) in entries {
        b.add(k, v);
    }
    let raw = b.finish().to_vec();
    let contents = match ctype {
        Compression::None => raw,
        _ => {
            let mut out = Vec::new();
            let mut c = tern::internals::format::table::BlockCompressor::new(ctype);
            let used = c.compress(&raw, &mut out);
            if used != ctype {
                return block_bytes(entries, Compression::None, restart);
            }
            out
        }
    };
    let mut v = contents.clone();
    v.extend_from_slice(&block_trailer(&contents, ctype));
    v
}

/// Real inputs for each target, named: files of a store that saw puts,
/// deletes, batches, flushes and compactions, and the pieces of a table.
fn seeds() -> BTreeMap<&'static str, Vec<(String, Vec<u8>)>> {
    let mut out: BTreeMap<&'static str, Vec<(String, Vec<u8>)>> = BTreeMap::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    for (round, comp) in [Compression::None, Compression::Lz4, Compression::Zstd]
        .into_iter()
        .enumerate()
    {
        let db = Db::open(
            &dir,
            Options {
                settings: tern::Settings {
                    write_buffer_size: 8 << 10,
                    block_size: 512,
                    compression_per_level: vec![comp],
                    ..tern::Settings::default()
                },
                ..Options::default()
            },
        )
        .unwrap();
        for i in 0..300u32 {
            let k = format!("k{:05}", (i * 7 + round as u32) % 200);
            if i % 11 == 0 {
                db.delete(k.as_bytes()).unwrap();
            } else {
                db.put(
                    k.as_bytes(),
                    &tern_stress::keys::value(i as usize, u64::from(i)),
                )
                .unwrap();
            }
        }
        let mut b = WriteBatch::new();
        b.put(b"g1.0", b"x").put(b"g1.1", b"x").delete(b"k00003");
        db.write(b, WriteOptions::synced()).unwrap();
        if round < 2 {
            db.flush().unwrap();
        }
        if round == 1 {
            db.compact_range(None, None).unwrap();
        }
        // Leave the last round's WAL unflushed: drop without close is not
        // possible, so copy the files while the store is open.
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        for n in names {
            // Background work may delete a file (a flushed WAL, an obsolete
            // table) between the listing and the read.
            let Ok(data) = std::fs::read(dir.join(&n)) else {
                continue;
            };
            let name = format!("r{round}-{n}");
            if n.ends_with(".log") && data.len() > 16 {
                out.entry("wal")
                    .or_default()
                    .push((name.clone(), data.clone()));
                let mut r = LogReader::new(data.clone(), dir.join(&n), LogKind::Wal).unwrap();
                let mut i = 0;
                while let Ok(Some(rec)) = r.next_record() {
                    if i < 3 {
                        out.entry("write_batch")
                            .or_default()
                            .push((format!("{name}-{i}"), rec.to_vec()));
                    }
                    i += 1;
                }
            } else if n.starts_with("MANIFEST") {
                out.entry("manifest")
                    .or_default()
                    .push((name.clone(), data.clone()));
                let mut r = LogReader::new(data.clone(), dir.join(&n), LogKind::Manifest).unwrap();
                let mut i = 0;
                while let Ok(Some(rec)) = r.next_record() {
                    if i < 4 {
                        out.entry("version_edit")
                            .or_default()
                            .push((format!("{name}-{i}"), rec.to_vec()));
                    }
                    i += 1;
                }
            } else if n.ends_with(".sst") && (FOOTER_LEN..48 << 10).contains(&data.len()) {
                // A table a background job is still writing has no footer
                // yet: skip it.
                let footer_bytes = &data[data.len() - FOOTER_LEN..];
                let Ok(f) = Footer::decode(footer_bytes) else {
                    continue;
                };
                out.entry("table")
                    .or_default()
                    .push((name.clone(), data.clone()));
                out.entry("footer")
                    .or_default()
                    .push((format!("{name}-footer"), footer_bytes.to_vec()));
                let piece = |h: BlockHandle| {
                    data[h.offset as usize..(h.offset + h.size) as usize + 5].to_vec()
                };
                out.entry("block")
                    .or_default()
                    .push((format!("{name}-index"), piece(f.index)));
                let props = piece(f.properties);
                out.entry("footer")
                    .or_default()
                    .push((format!("{name}-props"), props[..props.len() - 5].to_vec()));
                if let Some(fh) = f.filter {
                    let filt = piece(fh);
                    out.entry("bloom")
                        .or_default()
                        .push((format!("{name}-filter"), filt[..filt.len() - 5].to_vec()));
                }
            }
        }
        db.close().unwrap();
    }
    // Data blocks of each compression, small enough to mutate well.
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..40u64)
        .map(|i| {
            let kind = if i % 5 == 0 {
                ValueKind::Delete
            } else {
                ValueKind::Value
            };
            (
                make_internal_key(format!("key{i:04}").as_bytes(), 1000 - i, kind),
                format!("value-{i}").into_bytes(),
            )
        })
        .collect();
    for (n, c) in [
        ("none", Compression::None),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        for restart in [1, 16] {
            out.entry("block").or_default().push((
                format!("data-{n}-r{restart}"),
                block_bytes(&entries, c, restart),
            ));
        }
    }
    blob_seeds(&mut out);
    // A memtable's arena as the memory tier copies it, and a tier file
    // header.
    let tier_entries: Vec<_> = (0..30u64)
        .map(|i| {
            let kind = if i % 7 == 0 {
                ValueKind::Delete
            } else {
                ValueKind::Value
            };
            (
                format!("k{:03}", i % 20).into_bytes(),
                i + 1,
                kind,
                vec![b'v'; (i % 9) as usize],
            )
        })
        .collect();
    out.entry("memtier").or_default().push((
        "arena".to_string(),
        tern::internals::memtier::arena_image(&tier_entries),
    ));
    hash_seeds(&mut out);
    let mut bloom = BloomBuilder::new(10);
    for i in 0..50 {
        bloom.add_key(format!("k{i}").as_bytes());
    }
    out.entry("bloom")
        .or_default()
        .push(("bloom-50".into(), bloom.finish()));
    out
}

/// A real hash-log segment (with deletes, counters and in-place updates),
/// a record of each kind, and the checkpoint file naming the segment.
fn hash_seeds(out: &mut BTreeMap<&'static str, Vec<(String, Vec<u8>)>>) {
    use tern_hash::{HashOptions, HashStore};
    let fs = MemFs::new();
    let store = HashStore::open_with_fs(fs.clone(), "/h", HashOptions::small()).unwrap();
    let mut s = store.session();
    for i in 0..120u64 {
        let key = format!("k{}", i % 40).into_bytes();
        match i % 6 {
            0 => s.delete(&key).unwrap(),
            1 => {
                s.rmw(b"count", |old| {
                    let n: u64 = old.map_or(0, |v| String::from_utf8_lossy(v).parse().unwrap_or(0));
                    Some((n + 1).to_string().into_bytes())
                })
                .unwrap();
            }
            _ => s.upsert(&key, &vec![b'v'; (i % 50) as usize]).unwrap(),
        }
    }
    drop(s);
    store.checkpoint().unwrap();
    drop(store);
    let segment = fs.read_all(Path::new("/h/hlog.000000")).unwrap();
    assert!(segment.len() <= 1 << 16);
    out.entry("hash_log")
        .or_default()
        .push(("segment".into(), segment));
    out.entry("hash_checkpoint").or_default().push((
        "checkpoint".into(),
        fs.read_all(Path::new("/h/CHECKPOINT")).unwrap(),
    ));
    let records = out.entry("hash_record").or_default();
    records.push((
        "value".into(),
        tern_hash::record::encode(64, false, b"key", b"value"),
    ));
    records.push((
        "tombstone".into(),
        tern_hash::record::encode(0, true, b"gone", b""),
    ));
}

/// Real blob files and their pieces, from a store that separates every
/// value into small blob files and collects garbage (so GC outputs with
/// lineage exist), and version edits with the blob tags from its manifest.
fn blob_seeds(out: &mut BTreeMap<&'static str, Vec<(String, Vec<u8>)>>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("blobdb");
    let db = Db::open(
        &dir,
        Options {
            settings: tern::Settings {
                write_buffer_size: 8 << 10,
                blob_threshold: Some(0),
                blob_file_size: 4096,
                gc_garbage_ratio: 0.1,
                ..tern::Settings::default()
            },
            ..Options::default()
        },
    )
    .unwrap();
    for round in 0..4u32 {
        for i in 0..120u32 {
            let k = format!("k{:05}", (i * 13 + round) % 100);
            if i % 17 == 0 {
                db.delete(k.as_bytes()).unwrap();
            } else {
                let v = tern_stress::keys::value(i as usize, u64::from(round));
                db.put(k.as_bytes(), &v[..v.len().min(200)]).unwrap();
            }
        }
        db.flush().unwrap();
        db.compact_range(None, None).unwrap();
        db.collect_garbage().unwrap();
    }
    assert!(db.stats().gc_runs > 0, "the seed store ran no GC");
    db.close().unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut blob_files = 0;
    let mut with_lineage = 0;
    for n in names {
        let data = std::fs::read(dir.join(&n)).unwrap();
        if n.starts_with("MANIFEST") {
            let mut r = LogReader::new(data.clone(), dir.join(&n), LogKind::Manifest).unwrap();
            let mut i = 0;
            while let Ok(Some(rec)) = r.next_record() {
                let edit = VersionEdit::decode(rec).unwrap();
                let blobby = !edit.blob_files_added.is_empty()
                    || !edit.blob_files_deleted.is_empty()
                    || !edit.dead_ordinals.is_empty()
                    || !edit.relocations.is_empty()
                    || !edit.relocations_dropped.is_empty()
                    || edit.new_files.iter().any(|(_, f)| !f.blob_files.is_empty());
                if blobby && i < 16 {
                    out.entry("version_edit")
                        .or_default()
                        .push((format!("blob-{n}-{i}"), rec.to_vec()));
                    i += 1;
                }
            }
            out.entry("manifest").or_default().push((
                format!("blob-{n}"),
                data[..data.len().min(16 << 10)].to_vec(),
            ));
            continue;
        }
        let Some(num) = n.strip_suffix(".blob") else {
            continue;
        };
        let number: u64 = num.parse().unwrap();
        let size = data.len() as u64;
        let footer = &data[data.len() - BLOB_FOOTER_LEN..];
        let f = BlobFooter::decode(footer, size).unwrap();
        let index = &data[f.index_offset as usize..f.lineage_offset as usize];
        let lineage = &data[f.lineage_offset as usize..data.len() - BLOB_FOOTER_LEN];
        let offsets = decode_index(index, f.record_count).unwrap();
        let has_lineage = !decode_lineage(lineage).unwrap().is_empty();
        // A handful of files, GC outputs among them.
        if blob_files >= 4 && !(has_lineage && with_lineage < 3) {
            continue;
        }
        blob_files += 1;
        with_lineage += usize::from(has_lineage);
        let name = n.to_string();
        out.entry("blob_file")
            .or_default()
            .push((name.clone(), data.clone()));
        out.entry("blob_footer")
            .or_default()
            .push((format!("{name}-footer"), footer.to_vec()));
        out.entry("blob_footer").or_default().push((
            format!("{name}-size-footer"),
            [&size.to_le_bytes()[..], footer].concat(),
        ));
        out.entry("blob_index").or_default().push((
            format!("{name}-index"),
            [&f.record_count.to_le_bytes()[..], index].concat(),
        ));
        out.entry("blob_lineage")
            .or_default()
            .push((format!("{name}-lineage"), lineage.to_vec()));
        if has_lineage {
            out.entry("blob_lineage").or_default().push((
                format!("{name}-lineage-body"),
                lineage[..lineage.len() - 4].to_vec(),
            ));
        }
        for (o, &at) in offsets.iter().enumerate().take(3) {
            let end = offsets.get(o + 1).copied().unwrap_or(f.index_offset);
            let rec = &data[at as usize..end as usize];
            let v = decode_record(rec).unwrap().value;
            out.entry("blob_record")
                .or_default()
                .push((format!("{name}-rec{o}"), rec.to_vec()));
            let r = BlobRef {
                file: number,
                ordinal: o as u32,
                offset: at,
                size: v.len() as u32,
            };
            out.entry("blob_ref")
                .or_default()
                .push((format!("{name}-ref{o}"), r.encode()));
        }
    }
    assert!(with_lineage > 0, "no GC output among the blob files");
}

/// Cheap deterministic mutations: flips, truncations, extensions.
fn mutations(data: &[u8]) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    let n = data.len();
    for cut in [0, 1, n / 3, n / 2, n.saturating_sub(1)] {
        v.push(data[..cut.min(n)].to_vec());
    }
    let mut x: u64 = 0x1234_5678 ^ n as u64;
    for _ in 0..64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if n == 0 {
            break;
        }
        let mut d = data.to_vec();
        let pos = (x >> 33) as usize % n;
        match x % 4 {
            0 => d[pos] ^= 1 << ((x >> 8) % 8),
            1 => d[pos] = 0xff,
            2 => d.insert(pos, (x >> 16) as u8),
            _ => d[pos..].iter_mut().take(4).for_each(|b| *b = 0),
        }
        v.push(d);
    }
    let mut ext = data.to_vec();
    ext.extend_from_slice(&[0xff; 16]);
    v.push(ext);
    v
}

fn target(name: &str) -> fn(&[u8]) {
    TARGETS.iter().find(|(n, _)| *n == name).unwrap().1
}

#[test]
fn every_target_survives_its_corpus() {
    let root = corpus_root();
    let mut total = 0;
    for (name, f) in TARGETS {
        let n = replay_dir(&root.join(name), *f).unwrap();
        eprintln!("{name}: {n} corpus inputs");
        // A missing or empty corpus would pass while replaying nothing.
        assert!(
            n > 0,
            "no corpus inputs for {name} under {}",
            root.display()
        );
        total += n;
    }
    eprintln!("{total} corpus inputs replayed");
    tern_stress::ci_summary("fuzz_corpus_inputs", total);
}

#[test]
fn every_target_survives_real_files_and_mutations() {
    let seeds = seeds();
    for (name, _) in TARGETS {
        assert!(seeds.contains_key(name), "no seed for target {name}");
    }
    let mut runs = 0;
    for (name, inputs) in &seeds {
        let f = target(name);
        for (_, data) in inputs {
            f(data);
            for m in mutations(data) {
                f(&m);
                runs += 1;
            }
        }
    }
    // Arbitrary inputs too, including huge length fields.
    for (_, f) in TARGETS {
        for d in [
            &b""[..],
            &[0u8; 100],
            &[0xffu8; 100],
            b"TERNWAL\0\x01\0\0\0",
        ] {
            f(d);
        }
    }
    eprintln!("{runs} mutated inputs");
}

/// Writes the seed corpus into `fuzz/corpus/` (run by hand).
#[test]
#[ignore]
fn generate_corpus() {
    let root = corpus_root();
    for (name, inputs) in seeds() {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (file, data) in inputs {
            std::fs::write(d.join(file), data).unwrap();
        }
    }
}
