//! Arithmetic overflows in the blob readers on offsets near `u64::MAX`, found
//! by the blob fuzz harnesses, and a roaring set the lineage decoder accepts
//! but cannot encode again. With overflow checks on (debug builds, the
//! fuzz profile) they panic; without, the sums wrap and only a later read
//! fails. Each must return a corruption error instead.
#![allow(clippy::unwrap_used)]

use tern::internals::blob::{BlobReader, ExpectedRecord};
use tern::internals::format::blob::{BlobFooter, BLOB_MAGIC};
use tern::internals::format::checksum;
use tern::io::{FsRef, MemFs};
use tern::{Db, Options};

/// A blob footer whose lineage offset is `u64::MAX - 1`, consistent with
/// its index offset and record count, with a valid checksum.
fn footer_with_lineage_near_u64_max() -> Vec<u8> {
    let index_offset = u64::MAX - 13; // one record: index ends at MAX - 1
    let mut b = Vec::new();
    b.extend_from_slice(&index_offset.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&(u64::MAX - 1).to_le_bytes());
    b.extend_from_slice(&(index_offset - 16).to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    let crc = checksum::crc(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b.extend_from_slice(&BLOB_MAGIC);
    b
}

#[test]

fn blob_footer_decode_overflows_on_lineage_offset_near_u64_max() {
    let f = footer_with_lineage_near_u64_max();
    assert!(BlobFooter::decode(&f, 1 << 20).is_err());
}

#[test]

fn blob_footer_decode_overflows_on_index_offset_near_u64_max() {
    // The footer libFuzzer found (blob_footer target), with its checksum.
    let mut b = Vec::new();
    b.extend_from_slice(&(u64::MAX - 1).to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    let crc = checksum::crc(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b.extend_from_slice(&BLOB_MAGIC);
    assert!(BlobFooter::decode(&b, 1 << 20).is_err());
}

#[test]

fn blob_lineage_with_empty_roaring_container_panics_when_encoded() {
    use tern::internals::format::blob::{decode_lineage, encode_lineage};
    // The lineage body libFuzzer found (blob_lineage target); its checksum
    // is appended, as a crafted manifest or blob file would carry it.
    let body = [
        0x02, 0x27, 0x00, 0x1e, 0x3b, 0x30, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2d, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x58, 0xc7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x2c, 0x13, 0x2f,
        0x00, 0x38, 0x00, 0x02, 0x27, 0x00, 0x1e, 0x3b, 0x30, 0x01, 0x00, 0x1e, 0x3b, 0x30, 0x01,
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x5b, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x1e, 0x39, 0x00, 0x00, 0x00, 0x01, 0xda,
    ];
    let mut buf = body.to_vec();
    buf.extend_from_slice(&checksum::crc(&body).to_le_bytes());
    // Either the decoder rejects the set, or what it accepts encodes.
    if let Ok(entries) = decode_lineage(&buf) {
        let mut again = Vec::new();
        encode_lineage(&mut again, &entries);
        assert_eq!(decode_lineage(&again).unwrap(), entries);
    }
}

/// A real blob file (every value separated) on a memory file system.
fn real_blob_file() -> (FsRef, std::path::PathBuf, u64) {
    let mem = MemFs::new();
    let fs: FsRef = mem.clone();
    let db = Db::open(
        "/db",
        Options {
            settings: tern::Settings {
                blob_threshold: Some(0),
                ..tern::Settings::default()
            },
            fs: fs.clone(),
            ..Options::default()
        },
    )
    .unwrap();
    for i in 0..10u32 {
        db.put(format!("k{i}").as_bytes(), &[b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let path = mem
        .file_names()
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "blob"))
        .unwrap();
    let number: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    (fs, path, number)
}

#[test]

fn blob_read_value_overflows_on_ref_offset_near_u64_max() {
    let (fs, path, number) = real_blob_file();
    let r = BlobReader::open(&fs, &path, number).unwrap();
    // What a blob reference with a damaged offset field resolves to.
    let want = ExpectedRecord {
        key: b"k1",
        seq: 1,
        size: 100,
    };
    assert!(r.read_value(u64::MAX - 4, want).is_err());
}

#[test]

fn blob_read_span_overflows_on_offset_near_u64_max() {
    let (fs, path, number) = real_blob_file();
    let r = BlobReader::open(&fs, &path, number).unwrap();
    assert!(r
        .read_span(u64::MAX - 4, 16 << 10, &mut Vec::new())
        .is_err());
}
