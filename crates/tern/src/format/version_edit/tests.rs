use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::*;

fn rand_u64(rng: &mut SmallRng) -> u64 {
    // Mix small and large values so every varint width is exercised.
    match rng.gen_range(0..4) {
        0 => rng.gen_range(0..128),
        1 => rng.gen_range(0..1 << 20),
        2 => rng.gen(),
        _ => u64::MAX,
    }
}

fn rand_seq(rng: &mut SmallRng) -> u64 {
    if rng.gen_bool(0.1) {
        MAX_SEQ
    } else {
        rng.gen_range(0..=MAX_SEQ)
    }
}

fn rand_key(rng: &mut SmallRng) -> Vec<u8> {
    let n = rng.gen_range(0..40);
    (0..n).map(|_| rng.gen()).collect()
}

fn rand_edit(rng: &mut SmallRng) -> VersionEdit {
    let mut e = VersionEdit::default();
    if rng.gen_bool(0.7) {
        e.log_number = Some(rand_u64(rng));
    }
    if rng.gen_bool(0.7) {
        e.next_file_number = Some(rand_u64(rng));
    }
    if rng.gen_bool(0.7) {
        e.last_sequence = Some(rand_seq(rng));
    }
    for _ in 0..rng.gen_range(0..4) {
        e.compact_pointers
            .push((rng.gen_range(0..MAX_LEVELS), rand_key(rng)));
    }
    for _ in 0..rng.gen_range(0..6) {
        e.deleted_files
            .push((rng.gen_range(0..MAX_LEVELS), rand_u64(rng)));
    }
    for _ in 0..rng.gen_range(0..6) {
        let meta = FileMeta {
            number: rand_u64(rng),
            file_size: rand_u64(rng),
            smallest: rand_key(rng),
            largest: rand_key(rng),
            smallest_seq: rand_seq(rng),
            largest_seq: rand_seq(rng),
            num_entries: rand_u64(rng),
            num_deletions: rand_u64(rng),
            blob_files: (0..rng.gen_range(0..3)).map(|_| rand_u64(rng)).collect(),
        };
        e.new_files.push((rng.gen_range(0..MAX_LEVELS), meta));
    }
    for _ in 0..rng.gen_range(0..3) {
        e.blob_files_added.push(BlobMeta {
            number: rand_u64(rng),
            file_size: rand_u64(rng),
            record_count: rand_u64(rng),
            data_bytes: rand_u64(rng),
            run_keys: rng.gen_bool(0.5).then(|| {
                let a = rand_key(rng);
                let b = rand_key(rng);
                (a.clone().min(b.clone()), a.max(b))
            }),
        });
    }
    for _ in 0..rng.gen_range(0..3) {
        let mut dead = RoaringBitmap::new();
        for _ in 0..rng.gen_range(0..50) {
            dead.insert(rng.gen_range(0..100_000));
        }
        e.relocations.push((
            rand_u64(rng),
            LineageEntry {
                old_file: rand_u64(rng),
                base: rng.gen(),
                dead: dead.clone(),
            },
        ));
        e.dead_ordinals.push(DeadOrdinals {
            file: rand_u64(rng),
            ordinals: dead,
            bytes: rand_u64(rng),
        });
    }
    e.blob_files_deleted = (0..rng.gen_range(0..3)).map(|_| rand_u64(rng)).collect();
    e.relocations_dropped = (0..rng.gen_range(0..3)).map(|_| rand_u64(rng)).collect();
    for _ in 0..rng.gen_range(0..3) {
        let (a, b) = (rand_seq(rng), rand_seq(rng));
        e.tier_added.push(TierTableMeta {
            id: rand_u64(rng),
            offset: rand_u64(rng) >> 1,
            len: rand_u64(rng) >> 1,
            entries: rand_u64(rng),
            smallest_seq: a.min(b),
            largest_seq: a.max(b),
            checksum: rng.gen(),
        });
    }
    e.tier_removed = (0..rng.gen_range(0..3)).map(|_| rand_u64(rng)).collect();
    e
}

fn full_edit() -> VersionEdit {
    VersionEdit {
        log_number: Some(12),
        next_file_number: Some(40),
        last_sequence: Some(MAX_SEQ),
        compact_pointers: vec![(1, b"key\x01\0\0\0\0\0\0\0".to_vec()), (63, vec![])],
        deleted_files: vec![(0, 7), (2, u64::MAX)],
        new_files: vec![(
            3,
            FileMeta {
                number: 39,
                file_size: 1 << 26,
                smallest: b"a\x01\0\0\0\0\0\0\0".to_vec(),
                largest: b"z\x01\x05\0\0\0\0\0\0".to_vec(),
                smallest_seq: 1,
                largest_seq: 5,
                num_entries: 1000,
                num_deletions: 10,
                blob_files: vec![41, 42],
            },
        )],
        tier_added: vec![TierTableMeta {
            id: 43,
            offset: 64,
            len: 1 << 20,
            entries: 900,
            smallest_seq: 6,
            largest_seq: 905,
            checksum: 0xdead_beef,
        }],
        tier_removed: vec![38],
        ..Default::default()
    }
}

#[test]
fn empty_edit() {
    let e = VersionEdit::default();
    assert!(e.is_empty());
    assert!(e.encode().is_empty());
    assert_eq!(VersionEdit::decode(&[]).unwrap(), e);
    assert!(!full_edit().is_empty());
}

#[test]
fn full_roundtrip() {
    let e = full_edit();
    assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
}

#[test]
fn documented_example() {
    let t = [1u8, 0, 0, 0, 0, 0, 0, 0];
    let key = |k: u8| [&[k][..], &t[..]].concat();
    let e = VersionEdit {
        log_number: Some(5),
        next_file_number: Some(7),
        new_files: vec![(
            0,
            FileMeta {
                number: 6,
                file_size: 300,
                smallest: key(b'a'),
                largest: key(b'b'),
                smallest_seq: 1,
                largest_seq: 2,
                num_entries: 2,
                num_deletions: 0,
                blob_files: Vec::new(),
            },
        )],
        ..Default::default()
    };
    let mut want = vec![1, 5, 2, 7, 6, 0, 6, 0xac, 2, 9];
    want.extend_from_slice(&key(b'a'));
    want.push(9);
    want.extend_from_slice(&key(b'b'));
    want.extend_from_slice(&[1, 2, 2, 0]);
    assert_eq!(e.encode(), want);
}

#[test]
fn random_roundtrip() {
    let mut rng = SmallRng::seed_from_u64(0x7e54_ed17);
    for _ in 0..2000 {
        let e = rand_edit(&mut rng);
        let enc = e.encode();
        assert_eq!(VersionEdit::decode(&enc).unwrap(), e);
    }
}

#[test]
fn every_proper_prefix_is_handled() {
    let mut rng = SmallRng::seed_from_u64(11);
    let mut edits = vec![full_edit()];
    edits.extend((0..50).map(|_| rand_edit(&mut rng)));
    for e in edits {
        let enc = e.encode();
        for cut in 0..enc.len() {
            // A prefix may end at a field boundary and decode to a
            // smaller edit; it must never decode to the full edit.
            if let Ok(d) = VersionEdit::decode(&enc[..cut]) {
                assert_ne!(d, e, "prefix {cut} of {}", enc.len());
            }
        }
    }
    // A prefix cut inside a field is always an error.
    let enc = full_edit().encode();
    assert!(VersionEdit::decode(&enc[..enc.len() - 1]).is_err());
    assert!(VersionEdit::decode(&enc[..1]).is_err());
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = SmallRng::seed_from_u64(42);
    for _ in 0..20_000 {
        let n = rng.gen_range(0..64);
        let mut buf: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
        if n > 0 && rng.gen_bool(0.5) {
            buf[0] = rng.gen_range(1..=6); // start with a known tag
        }
        let _ = VersionEdit::decode(&buf);
    }
    // Flipped bytes in valid encodings.
    for _ in 0..2000 {
        let mut enc = rand_edit(&mut rng).encode();
        if enc.is_empty() {
            continue;
        }
        let i = rng.gen_range(0..enc.len());
        enc[i] ^= 1 << rng.gen_range(0..8);
        let _ = VersionEdit::decode(&enc);
    }
}

#[test]
fn rejects_bad_fields() {
    let mut bad_level = Vec::new();
    put_varint64(&mut bad_level, tag::DELETED_FILE);
    put_varint32(&mut bad_level, 64);
    put_varint64(&mut bad_level, 1);
    let e = VersionEdit::decode(&bad_level).unwrap_err();
    assert_eq!(e.offset, 1);

    let mut huge_level = Vec::new();
    put_varint64(&mut huge_level, tag::COMPACT_POINTER);
    put_varint64(&mut huge_level, u64::MAX);
    put_length_prefixed(&mut huge_level, b"k");
    assert!(VersionEdit::decode(&huge_level).is_err());

    for t in [0u64, 7, 14, 15, 99] {
        let mut buf = full_edit().encode();
        let at = buf.len();
        put_varint64(&mut buf, t);
        put_varint64(&mut buf, 1);
        let e = VersionEdit::decode(&buf).unwrap_err();
        assert_eq!(e.offset, at as u64, "tag {t}");
    }

    let mut dup = Vec::new();
    for _ in 0..2 {
        put_varint64(&mut dup, tag::LOG_NUMBER);
        put_varint64(&mut dup, 5);
    }
    assert_eq!(VersionEdit::decode(&dup).unwrap_err().offset, 2);

    // A tier table whose sequence range is backwards, or whose extent
    // ends past 2^64.
    for (offset, len, lo, hi) in [(0, 1, 5, 4), (u64::MAX, 2, 1, 1)] {
        let mut tier = Vec::new();
        put_varint64(&mut tier, tag::TIER_TABLE_ADD);
        for v in [1, offset, len, 1, lo, hi] {
            put_varint64(&mut tier, v);
        }
        tier.extend_from_slice(&[0; 4]);
        assert_eq!(VersionEdit::decode(&tier).unwrap_err().offset, 0);
    }

    let mut seq = Vec::new();
    put_varint64(&mut seq, tag::LAST_SEQUENCE);
    put_varint64(&mut seq, MAX_SEQ + 1);
    assert!(VersionEdit::decode(&seq).is_err());

    // A key length larger than the buffer.
    let mut long = Vec::new();
    put_varint64(&mut long, tag::COMPACT_POINTER);
    put_varint32(&mut long, 1);
    put_varint64(&mut long, u64::MAX);
    assert!(VersionEdit::decode(&long).is_err());
}

#[test]
fn a_sorted_run_mark_must_follow_its_blob_file_and_keep_its_keys_in_order() {
    let blob_add = |dst: &mut Vec<u8>, number: u64| {
        put_varint64(dst, tag::BLOB_FILE_ADD);
        for v in [number, 100, 1, 50] {
            put_varint64(dst, v);
        }
    };
    let mark = |dst: &mut Vec<u8>, number: u64, first: &[u8], last: &[u8]| {
        put_varint64(dst, tag::SORTED_RUN);
        put_varint64(dst, number);
        put_length_prefixed(dst, first);
        put_length_prefixed(dst, last);
    };
    let mut good = Vec::new();
    blob_add(&mut good, 9);
    mark(&mut good, 9, b"a", b"m");
    let e = VersionEdit::decode(&good).unwrap();
    assert_eq!(
        e.blob_files_added[0].run_keys,
        Some((b"a".to_vec(), b"m".to_vec()))
    );

    // Alone, after another file, twice, or with its keys backwards.
    let mut alone = Vec::new();
    mark(&mut alone, 9, b"a", b"m");
    let mut other = Vec::new();
    blob_add(&mut other, 8);
    let at = other.len() as u64;
    mark(&mut other, 9, b"a", b"m");
    let mut twice = good.clone();
    let twice_at = twice.len() as u64;
    mark(&mut twice, 9, b"a", b"m");
    let mut backwards = Vec::new();
    blob_add(&mut backwards, 9);
    let backwards_at = backwards.len() as u64;
    mark(&mut backwards, 9, b"m", b"a");
    assert_eq!(VersionEdit::decode(&alone).unwrap_err().offset, 0);
    assert_eq!(VersionEdit::decode(&other).unwrap_err().offset, at);
    assert_eq!(VersionEdit::decode(&twice).unwrap_err().offset, twice_at);
    assert_eq!(
        VersionEdit::decode(&backwards).unwrap_err().offset,
        backwards_at
    );
}
