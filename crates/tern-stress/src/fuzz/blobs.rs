//! Harnesses for blob files and blob references.

use std::path::Path;

use tern::internals::blob::{BlobReader, ExpectedRecord};
use tern::internals::format::blob::{
    decode_header, decode_index, decode_lineage, decode_record, encode_index, encode_lineage,
    encode_record, BlobFooter, BlobRef, BLOB_FOOTER_LEN, BLOB_HEADER_LEN, BLOB_MAGIC,
    RECORD_HEADER_LEN,
};
use tern::internals::format::checksum;

/// One blob record (checksum, lengths, sequence, key, value); with its checksum
/// recomputed, a record whose lengths fit must decode and encode back to the
/// same bytes.
pub fn blob_record(data: &[u8]) {
    let _ = decode_record(data);
    if data.len() < RECORD_HEADER_LEN {
        return;
    }
    let mut fixed = data.to_vec();
    let crc = checksum::crc(&fixed[4..]);
    fixed[..4].copy_from_slice(&crc.to_le_bytes());
    let key_len = u64::from(u32::from_le_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]));
    let value_len = u64::from(u32::from_le_bytes([
        fixed[8], fixed[9], fixed[10], fixed[11],
    ]));
    let fits = RECORD_HEADER_LEN as u64 + key_len + value_len == fixed.len() as u64;
    match decode_record(&fixed) {
        Ok(rec) => {
            assert!(fits, "a record with wrong lengths decodes");
            let mut again = Vec::new();
            encode_record(&mut again, rec.key, rec.seq, rec.value);
            assert_eq!(again, fixed, "a decoded record encodes differently");
        }
        Err(_) => assert!(!fits, "a record with its checksum fixed does not decode"),
    }
}

/// Decodes `buf` as the footer of a file of `file_size` bytes; what decodes
/// must be consistent with that size and encode back to the same bytes.
fn check_footer(buf: &[u8], file_size: u64) {
    if let Ok(f) = BlobFooter::decode(buf, file_size) {
        assert!(f.index_offset >= BLOB_HEADER_LEN as u64);
        assert!(f
            .lineage_offset
            .checked_add(4 + BLOB_FOOTER_LEN as u64)
            .is_some_and(|end| end <= file_size));
        assert_eq!(&f.encode()[..], buf, "a decoded footer encodes differently");
    }
}

/// A blob file footer, read as the end of a file as long as the input, and
/// against a file size taken from the input; then again with magic and
/// checksum fixed.
pub fn blob_footer(data: &[u8]) {
    let _ = decode_header(data);
    if data.len() < BLOB_FOOTER_LEN {
        let _ = BlobFooter::decode(data, data.len() as u64);
        return;
    }
    let tail = &data[data.len() - BLOB_FOOTER_LEN..];
    check_footer(tail, data.len() as u64);
    let mut sizes = vec![data.len() as u64, BLOB_FOOTER_LEN as u64, u64::MAX];
    if data.len() >= BLOB_FOOTER_LEN + 8 {
        let mut n = [0u8; 8];
        n.copy_from_slice(&data[..8]);
        sizes.push(u64::from_le_bytes(n));
    }
    let mut fixed = tail.to_vec();
    fixed[40..].copy_from_slice(&BLOB_MAGIC);
    fixed[32..36].copy_from_slice(&1u32.to_le_bytes());
    let crc = checksum::crc(&fixed[..36]);
    fixed[36..40].copy_from_slice(&crc.to_le_bytes());
    for size in sizes {
        check_footer(tail, size);
        check_footer(&fixed, size);
    }
}

/// A blob ordinal index: the first 8 bytes give the record count, the rest
/// is the index; then the whole input as an index body with its checksum
/// appended. What decodes must be strictly increasing and encode back.
pub fn blob_index(data: &[u8]) {
    if data.len() >= 8 {
        let mut n = [0u8; 8];
        n.copy_from_slice(&data[..8]);
        let _ = decode_index(&data[8..], u64::from_le_bytes(n));
    }
    let count = (data.len() / 8) as u64;
    let mut fixed = data[..count as usize * 8].to_vec();
    let crc = checksum::crc(&fixed);
    fixed.extend_from_slice(&crc.to_le_bytes());
    let _ = decode_index(&fixed, count.wrapping_add(1));
    if let Ok(offsets) = decode_index(&fixed, count) {
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        let mut again = Vec::new();
        encode_index(&mut again, &offsets);
        assert_eq!(again, fixed, "a decoded index encodes differently");
    }
}

/// A blob file's lineage block (entries of old file, base ordinal and a
/// roaring set of dead ordinals); then the input as a block body with its
/// checksum appended. What decodes must encode and decode to the same
/// entries.
pub fn blob_lineage(data: &[u8]) {
    let _ = decode_lineage(data);
    let mut fixed = data.to_vec();
    let crc = checksum::crc(&fixed);
    fixed.extend_from_slice(&crc.to_le_bytes());
    if let Ok(entries) = decode_lineage(&fixed) {
        let mut again = Vec::new();
        encode_lineage(&mut again, &entries);
        let back = decode_lineage(&again);
        assert!(
            back.as_ref() == Ok(&entries),
            "lineage does not survive encoding"
        );
        for e in &entries {
            std::hint::black_box((e.dead.len(), e.dead.min(), e.dead.max()));
        }
    }
}

/// A blob reference (four varints, then the value's head).
pub fn blob_ref(data: &[u8]) {
    if let Ok((r, head)) = BlobRef::decode_with_head(data) {
        assert!(
            head.len() <= r.size as usize,
            "a head longer than its value"
        );
        assert_eq!(
            BlobRef::decode_with_head(&r.encode_with_head(head)),
            Ok((r, head)),
            "a ref does not round-trip"
        );
    }
}

/// Records a harness reads from one blob file, at most.
const MAX_BLOB_RECORDS: u32 = 4096;

/// A whole blob file on an in-memory file system: opened (header, footer,
/// index), verified, every record read by ordinal and again by offset as a
/// reference would, its lineage read, and record windows read as scans do.
pub fn blob_file(data: &[u8]) {
    let path = Path::new("/fuzz/000001.blob");
    let Some(fs) = super::file_in_memory(path, data) else {
        return;
    };
    // Reads through the open-file cache open without the index and read
    // index entries one by one.
    let lazy = BlobReader::open_lazy(&fs, path, 1);
    let Ok(r) = BlobReader::open(&fs, path, 1) else {
        if let Ok(l) = lazy {
            for o in 0..(l.record_count().min(u64::from(MAX_BLOB_RECORDS)) as u32) {
                let _ = l.offset_of(o);
                let _ = l.record_len(o);
                let _ = l.read_ordinal(o);
            }
            assert!(l.verify().is_err(), "verify passes where a full open fails");
        }
        return;
    };
    let Ok(lazy) = lazy else {
        panic!("a blob file opens with its index but not without");
    };
    let verified = r.verify();
    let count = r.record_count();
    assert!(
        count <= data.len() as u64 / 8,
        "more records than the index can hold"
    );
    let _ = r.lineage();
    let _ = r.offset_of(u32::MAX);
    let _ = r.read_ordinal(count.min(u64::from(u32::MAX)) as u32);
    let mut window: Option<(u64, Vec<u8>)> = None;
    for o in 0..(count.min(u64::from(MAX_BLOB_RECORDS)) as u32) {
        let Ok(offset) = r.offset_of(o) else {
            panic!("ordinal {o} of {count} has no offset");
        };
        assert_eq!(lazy.offset_of(o).ok(), Some(offset), "lazy index entry {o}");
        assert_eq!(
            lazy.record_len(o).ok(),
            r.record_len(o).ok(),
            "lazy length {o}"
        );
        let Ok(rec) = r.read_ordinal(o) else {
            assert!(verified.is_err(), "verify passed but record {o} is bad");
            continue;
        };
        let want = ExpectedRecord {
            key: &rec.key,
            seq: rec.seq,
            size: u32::try_from(rec.value.len()).unwrap_or(u32::MAX),
        };
        match r.read_value(offset, want) {
            Ok(got) => assert_eq!(
                got, rec.value,
                "read by offset differs from read by ordinal"
            ),
            Err(e) => panic!("record {o} reads by ordinal but not by offset: {e}"),
        }
        let other_key = ExpectedRecord {
            key: b"another key",
            ..want
        };
        assert!(
            other_key.key == want.key || r.read_value(offset, other_key).is_err(),
            "record {o} read for another key"
        );
        let other_version = ExpectedRecord {
            seq: rec.seq ^ 1,
            ..want
        };
        assert!(
            r.read_value(offset, other_version).is_err(),
            "record {o} read for another version"
        );
        let _ = r.read_value(offset + 1, want);
        if window
            .as_ref()
            .is_none_or(|(start, buf)| offset >= start + buf.len() as u64)
        {
            // As a scan batch reads: one span inside the records, or just
            // the record near their end.
            let mut buf = Vec::new();
            window = [16 << 10, want.record_len()]
                .into_iter()
                .find(|&len| r.read_span(offset, len, &mut buf).is_ok())
                .map(|_| (offset, buf));
        }
        if let Some((start, buf)) = &window {
            if let Some(got) = r.value_from_buffer(buf, *start, offset, want) {
                assert!(
                    got.as_ref().is_ok_and(|g| *g == rec.value),
                    "read from a window differs from read by ordinal"
                );
            }
        }
    }
}
