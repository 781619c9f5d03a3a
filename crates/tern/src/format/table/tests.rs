use super::*;
use rand::{Rng, SeedableRng};

#[test]
fn handle_roundtrip() {
    let h = BlockHandle::new(1 << 40, 12345);
    let mut buf = Vec::new();
    h.encode_to(&mut buf);
    assert!(buf.len() <= MAX_HANDLE_LEN);
    assert_eq!(BlockHandle::decode(&buf).unwrap(), h);
    buf.push(0);
    assert!(BlockHandle::decode(&buf).is_err());
    assert!(BlockHandle::decode(&[0x80]).is_err());
    assert_eq!(BlockHandle::new(u64::MAX, 1).end(), None);
}

#[test]
fn trailer_detects_flips() {
    let contents = b"some block contents".to_vec();
    let mut raw = contents.clone();
    raw.extend_from_slice(&block_trailer(&contents, Compression::Lz4));
    let (c, t) = check_block(&raw).unwrap();
    assert_eq!((c, t), (&contents[..], Compression::Lz4));
    for i in 0..raw.len() {
        let mut bad = raw.clone();
        bad[i] ^= 0x10;
        assert!(check_block(&bad).is_err(), "flip at {i}");
    }
    assert!(check_block(&raw[..4]).is_err());
}

#[test]
fn compression_roundtrip_and_threshold() {
    let compressible: Vec<u8> = (0..4096).map(|i| (i % 7) as u8).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let random: Vec<u8> = (0..4096).map(|_| rng.gen()).collect();
    for kind in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let mut c = BlockCompressor::new(kind);
        let mut out = Vec::new();
        let t = c.compress(&compressible, &mut out);
        assert_eq!(t, kind);
        if t != Compression::None {
            assert_eq!(decompress(t, &out, MAX_BLOCK_SIZE).unwrap(), compressible);
            assert!(decompress(t, &out, 100).is_err());
        }
        assert_eq!(c.compress(&random, &mut out), Compression::None);
        assert_eq!(c.compress(&[], &mut out), Compression::None);
    }
}

#[test]
fn decompress_garbage_never_panics() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let src: Vec<u8> = (0..2000).map(|i| (i % 13) as u8).collect();
    let mut lz = Vec::new();
    BlockCompressor::new(Compression::Lz4).compress(&src, &mut lz);
    let mut zs = Vec::new();
    BlockCompressor::new(Compression::Zstd).compress(&src, &mut zs);
    for round in 0..2000 {
        for (kind, good) in [(Compression::Lz4, &lz), (Compression::Zstd, &zs)] {
            let data: Vec<u8> = if round % 2 == 0 {
                let mut d = good.clone();
                let i = rng.gen_range(0..d.len());
                d[i] = rng.gen();
                d
            } else {
                (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect()
            };
            if let Ok(out) = decompress(kind, &data, MAX_BLOCK_SIZE) {
                assert!(out.len() <= data.len() * 40_000);
            }
        }
    }
    // A huge claimed size is refused before allocating.
    let mut d = vec![0xff, 0xff, 0xff, 0x7f];
    d.extend_from_slice(&[0; 8]);
    assert!(decompress(Compression::Lz4, &d, MAX_BLOCK_SIZE).is_err());
}

#[test]
fn footer_roundtrip_and_checks() {
    let f = Footer {
        index: BlockHandle::new(100, 20),
        filter: Some(BlockHandle::new(50, 9)),
        properties: BlockHandle::new(64, 30),
        format_version: FORMAT_VERSION,
    };
    let buf = f.encode();
    assert_eq!(Footer::decode(&buf).unwrap(), f);
    let nf = Footer { filter: None, ..f };
    assert_eq!(Footer::decode(&nf.encode()).unwrap(), nf);
    for i in 0..FOOTER_LEN {
        let mut bad = buf;
        bad[i] ^= 1;
        assert!(Footer::decode(&bad).is_err(), "flip at {i}");
    }
    let mut bad = buf;
    bad[56] = b'X';
    assert!(Footer::decode(&bad).unwrap_err().reason.contains("magic"));
    assert!(Footer::decode(&buf[1..]).is_err());
    // Versions 1 and 2 are read; others are refused by name.
    for (version, ok) in [(0, false), (1, true), (2, true), (3, false)] {
        let f = Footer {
            format_version: version,
            ..f
        };
        match Footer::decode(&f.encode()) {
            Ok(d) => assert!(ok && d == f, "version {version}"),
            Err(e) => assert!(
                !ok && e.reason.contains("unsupported table format version"),
                "version {version}: {}",
                e.reason
            ),
        }
    }
}

#[test]
fn properties_roundtrip() {
    let p = TableProperties {
        num_entries: 10,
        num_deletions: 2,
        num_blob_refs: 3,
        raw_key_size: 100,
        raw_value_size: 1000,
        data_size: 4000,
        index_size: 40,
        filter_size: 20,
        num_data_blocks: 1,
        smallest_seq: 5,
        largest_seq: 99,
        compression: Compression::Zstd,
        format_version: FORMAT_VERSION,
        bloom_bits_per_key: 10,
        smallest_key: b"a\0\0\0\0\0\0\0\0".to_vec(),
        largest_key: b"z\0\0\0\0\0\0\0\0".to_vec(),
        blob_files: vec![3, 7, 1 << 33],
    };
    let buf = p.encode();
    assert_eq!(TableProperties::decode(&buf).unwrap(), p);
    // Unknown tags are skipped.
    let mut ext = buf.clone();
    field(&mut ext, 999, b"future");
    assert_eq!(TableProperties::decode(&ext).unwrap(), p);
    // Truncations never panic and are mostly errors.
    for n in 0..buf.len() {
        let _ = TableProperties::decode(&buf[..n]);
    }
    assert!(TableProperties::decode(&[]).is_err());
    let mut bad = Vec::new();
    field(&mut bad, tag::BLOB_FILES, &[0xff, 0xff, 0xff, 0x0f]);
    assert!(TableProperties::decode(&bad).is_err());
}
