//! Blob files: separated values, in key order, addressed by ordinal.
//!
//! Layout (all integers little-endian; see `docs/format/blob.md`):
//!
//! ```text
//! header   magic "TERNBLOB" (8) ‖ version u32 ‖ masked crc of the 12 bytes before (4)
//! record*  masked crc (4) ‖ key_len u32 ‖ value_len u32 ‖ seq u64 ‖ key ‖ value
//! index    offset u64 per record (ordinal → offset) ‖ masked crc (4)
//! lineage  varint count ‖ (old file varint ‖ base ordinal varint ‖ dead set len varint ‖ roaring bytes)* ‖ masked crc (4)
//! footer   index offset u64 ‖ record count u64 ‖ lineage offset u64 ‖ data bytes u64 ‖
//!          version u32 ‖ masked crc of the footer before it (4) ‖ magic u64   (48 bytes)
//! ```
//!
//! The record crc covers everything after it. A record's ordinal is its
//! position in the file; a `BlobRef` names file, ordinal, offset and value
//! size. Key and sequence number name the version the record holds: a read
//! checks both against the table entry that led to it, so a ref that
//! reaches the wrong record (another key, or another version of the same
//! key) is reported as corruption instead of returning that record's value.

use roaring::RoaringBitmap;

use crate::error::DecodeError;
use crate::format::checksum;
use crate::format::coding::{
    fixed32_at, fixed64_at, put_fixed32, put_fixed64, put_varint64, Reader,
};

/// Magic at both ends of a blob file. Do not change.
pub const BLOB_MAGIC: [u8; 8] = *b"TERNBLOB";
/// Format version written by this code.
pub const BLOB_FORMAT_VERSION: u32 = 2;
/// Bytes of the file header.
pub const BLOB_HEADER_LEN: usize = 16;
/// Bytes of a record header (crc, key length, value length, sequence number).
pub const RECORD_HEADER_LEN: usize = 20;
/// Bytes of the footer.
pub const BLOB_FOOTER_LEN: usize = 48;

/// The file header.
pub fn encode_header() -> [u8; BLOB_HEADER_LEN] {
    let mut h = [0u8; BLOB_HEADER_LEN];
    h[..8].copy_from_slice(&BLOB_MAGIC);
    h[8..12].copy_from_slice(&BLOB_FORMAT_VERSION.to_le_bytes());
    let crc = checksum::crc(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a file header.
pub fn decode_header(h: &[u8]) -> Result<(), DecodeError> {
    if h.len() < BLOB_HEADER_LEN || h[..8] != BLOB_MAGIC {
        return Err(DecodeError::new(0, "not a blob file (bad magic)"));
    }
    if checksum::crc(&h[..12]) != fixed32_at(h, 12) {
        return Err(DecodeError::new(0, "blob file header checksum mismatch"));
    }
    let version = fixed32_at(h, 8);
    if version != BLOB_FORMAT_VERSION {
        return Err(DecodeError::new(
            8,
            format!("unsupported blob format version {version}"),
        ));
    }
    Ok(())
}

/// Total bytes of a record holding `key_len` and `value_len` bytes.
pub fn record_len(key_len: usize, value_len: usize) -> u64 {
    (RECORD_HEADER_LEN + key_len + value_len) as u64
}

/// One decoded record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobRecord<'a> {
    /// The user key the value was written under.
    pub key: &'a [u8],
    /// Sequence number of the write (never rewritten by compaction or GC).
    pub seq: u64,
    /// The value.
    pub value: &'a [u8],
}

/// Appends one record: the value written under `key` at sequence `seq`.
pub fn encode_record(dst: &mut Vec<u8>, key: &[u8], seq: u64, value: &[u8]) {
    let start = dst.len();
    dst.extend_from_slice(&[0; 4]);
    put_fixed32(dst, key.len() as u32);
    put_fixed32(dst, value.len() as u32);
    put_fixed64(dst, seq);
    dst.extend_from_slice(key);
    dst.extend_from_slice(value);
    let crc = checksum::crc(&dst[start + 4..]);
    dst[start..start + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes and checks a whole record.
pub fn decode_record(rec: &[u8]) -> Result<BlobRecord<'_>, DecodeError> {
    if rec.len() < RECORD_HEADER_LEN {
        return Err(DecodeError::new(0, "blob record shorter than its header"));
    }
    let key_len = fixed32_at(rec, 4) as usize;
    let value_len = fixed32_at(rec, 8) as usize;
    if RECORD_HEADER_LEN as u64 + key_len as u64 + value_len as u64 != rec.len() as u64 {
        return Err(DecodeError::new(
            4,
            "blob record lengths do not match its size",
        ));
    }
    if checksum::crc(&rec[4..]) != fixed32_at(rec, 0) {
        return Err(DecodeError::new(0, "blob record checksum mismatch"));
    }
    Ok(BlobRecord {
        key: &rec[RECORD_HEADER_LEN..RECORD_HEADER_LEN + key_len],
        seq: fixed64_at(rec, 12),
        value: &rec[RECORD_HEADER_LEN + key_len..],
    })
}

/// Encodes the ordinal index.
pub fn encode_index(dst: &mut Vec<u8>, offsets: &[u64]) {
    let start = dst.len();
    for &o in offsets {
        put_fixed64(dst, o);
    }
    let crc = checksum::crc(&dst[start..]);
    put_fixed32(dst, crc);
}

/// Decodes an index of `count` offsets (with its crc) from `buf`.
pub fn decode_index(buf: &[u8], count: u64) -> Result<Vec<u64>, DecodeError> {
    let want = count
        .checked_mul(8)
        .and_then(|n| n.checked_add(4))
        .filter(|&n| n == buf.len() as u64)
        .ok_or_else(|| DecodeError::new(0, "blob index size does not match the record count"))?;
    let body = &buf[..want as usize - 4];
    if checksum::crc(body) != fixed32_at(buf, body.len()) {
        return Err(DecodeError::new(0, "blob index checksum mismatch"));
    }
    let offsets: Vec<u64> = body.chunks_exact(8).map(|c| fixed64_at(c, 0)).collect();
    if offsets.windows(2).any(|w| w[0] >= w[1])
        || offsets.first().is_some_and(|&o| o < BLOB_HEADER_LEN as u64)
    {
        return Err(DecodeError::new(0, "blob index offsets are not increasing"));
    }
    Ok(offsets)
}

/// Where one input file's live records went in a GC output.
#[derive(Debug, Clone, PartialEq)]
pub struct LineageEntry {
    /// The input (now retired) blob file.
    pub old_file: u64,
    /// Ordinal in the output of the input's first live record.
    pub base: u32,
    /// The input's dead ordinals the GC job used (those records were dropped).
    pub dead: RoaringBitmap,
}

impl LineageEntry {
    /// New ordinal of live ordinal `o` of the old file.
    pub fn translate(&self, o: u32) -> u32 {
        // rank(o) counts dead ordinals <= o; o itself is live.
        self.base + o - self.dead.rank(o) as u32
    }
}

/// Appends a bitmap as `varint len ‖ roaring portable bytes`, in canonical
/// form (rebuilt from its members, so the same set always has the same
/// bytes; [`read_bitmap`] accepts nothing else).
pub fn put_bitmap(dst: &mut Vec<u8>, b: &RoaringBitmap) {
    let canonical: RoaringBitmap = b.iter().collect();
    put_varint64(dst, canonical.serialized_size() as u64);
    // Writing to a Vec cannot fail.
    let _ = canonical.serialize_into(&mut *dst);
}

/// Reads a bitmap written by [`put_bitmap`].
pub fn read_bitmap(r: &mut Reader<'_>) -> Result<RoaringBitmap, DecodeError> {
    let at = r.pos();
    let bytes = r.length_prefixed()?;
    let set = RoaringBitmap::deserialize_from(bytes)
        .map_err(|e| DecodeError::new(at, format!("bad ordinal set: {e}")))?;
    // The portable format can describe sets the library would never write
    // (an empty container, say), which it then cannot serialize again.
    // Accept only the canonical encoding, rebuilt from the members (never
    // serialize `set` itself: that is what fails on such input).
    let canonical: RoaringBitmap = set.iter().collect();
    let mut again = Vec::with_capacity(bytes.len());
    let _ = canonical.serialize_into(&mut again);
    if again != bytes {
        return Err(DecodeError::new(at, "ordinal set is not in canonical form"));
    }
    Ok(canonical)
}

/// Encodes the lineage block.
pub fn encode_lineage(dst: &mut Vec<u8>, entries: &[LineageEntry]) {
    let start = dst.len();
    put_varint64(dst, entries.len() as u64);
    for e in entries {
        put_varint64(dst, e.old_file);
        put_varint64(dst, u64::from(e.base));
        put_bitmap(dst, &e.dead);
    }
    let crc = checksum::crc(&dst[start..]);
    put_fixed32(dst, crc);
}

/// Decodes a lineage block (with its crc).
pub fn decode_lineage(buf: &[u8]) -> Result<Vec<LineageEntry>, DecodeError> {
    if buf.len() < 4 {
        return Err(DecodeError::new(0, "blob lineage block too short"));
    }
    let body = &buf[..buf.len() - 4];
    if checksum::crc(body) != fixed32_at(buf, body.len()) {
        return Err(DecodeError::new(0, "blob lineage checksum mismatch"));
    }
    let mut r = Reader::new(body);
    let n = r.varint64()?;
    let mut out = Vec::new();
    for _ in 0..n {
        let old_file = r.varint64()?;
        let at = r.pos();
        let base = u32::try_from(r.varint64()?)
            .map_err(|_| DecodeError::new(at, "lineage base ordinal overflow"))?;
        let dead = read_bitmap(&mut r)?;
        out.push(LineageEntry {
            old_file,
            base,
            dead,
        });
    }
    if !r.is_empty() {
        return Err(DecodeError::new(
            r.pos(),
            "trailing bytes in blob lineage block",
        ));
    }
    Ok(out)
}

/// The fixed-size end of a blob file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobFooter {
    /// Offset of the ordinal index.
    pub index_offset: u64,
    /// Records in the file.
    pub record_count: u64,
    /// Offset of the lineage block (it ends where the footer starts).
    pub lineage_offset: u64,
    /// Bytes of all records.
    pub data_bytes: u64,
}

impl BlobFooter {
    /// Encodes the footer.
    pub fn encode(&self) -> [u8; BLOB_FOOTER_LEN] {
        let mut b = Vec::with_capacity(BLOB_FOOTER_LEN);
        put_fixed64(&mut b, self.index_offset);
        put_fixed64(&mut b, self.record_count);
        put_fixed64(&mut b, self.lineage_offset);
        put_fixed64(&mut b, self.data_bytes);
        put_fixed32(&mut b, BLOB_FORMAT_VERSION);
        let crc = checksum::crc(&b);
        put_fixed32(&mut b, crc);
        b.extend_from_slice(&BLOB_MAGIC);
        let mut out = [0u8; BLOB_FOOTER_LEN];
        out.copy_from_slice(&b);
        out
    }

    /// Decodes and checks a footer for a file of `file_size` bytes.
    pub fn decode(buf: &[u8], file_size: u64) -> Result<BlobFooter, DecodeError> {
        if buf.len() != BLOB_FOOTER_LEN || buf[40..] != BLOB_MAGIC {
            return Err(DecodeError::new(
                0,
                "blob footer has a bad magic (truncated file?)",
            ));
        }
        if checksum::crc(&buf[..36]) != fixed32_at(buf, 36) {
            return Err(DecodeError::new(0, "blob footer checksum mismatch"));
        }
        let version = fixed32_at(buf, 32);
        if version != BLOB_FORMAT_VERSION {
            return Err(DecodeError::new(
                32,
                format!("unsupported blob format version {version}"),
            ));
        }
        let f = BlobFooter {
            index_offset: fixed64_at(buf, 0),
            record_count: fixed64_at(buf, 8),
            lineage_offset: fixed64_at(buf, 16),
            data_bytes: fixed64_at(buf, 24),
        };
        let footer_at = file_size.saturating_sub(BLOB_FOOTER_LEN as u64);
        // Checked arithmetic: a crafted footer may hold offsets near u64::MAX.
        let index_end = f
            .record_count
            .checked_mul(8)
            .and_then(|n| n.checked_add(4))
            .and_then(|n| n.checked_add(f.index_offset));
        let lineage_end = f.lineage_offset.checked_add(4);
        let sane = f.index_offset >= BLOB_HEADER_LEN as u64
            && index_end == Some(f.lineage_offset)
            && lineage_end.is_some_and(|end| end <= footer_at)
            && f.data_bytes == f.index_offset - BLOB_HEADER_LEN as u64;
        if !sane {
            return Err(DecodeError::new(
                0,
                "blob footer offsets are inconsistent with the file size",
            ));
        }
        Ok(f)
    }
}

/// A reference from an SST entry to a value in a blob file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlobRef {
    /// Blob file number.
    pub file: u64,
    /// Record number within the file.
    pub ordinal: u32,
    /// Byte offset of the record.
    pub offset: u64,
    /// Value length in bytes.
    pub size: u32,
}

impl BlobRef {
    /// Encodes as four varints: file, ordinal, offset, size.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with_head(&[])
    }

    /// Encodes as four varints (file, ordinal, offset, size) followed by
    /// `head`, the value's first bytes kept beside the reference
    /// (`blob_head_size`). `head` must be a prefix of the value.
    pub fn encode_with_head(&self, head: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(20 + head.len());
        put_varint64(&mut v, self.file);
        put_varint64(&mut v, u64::from(self.ordinal));
        put_varint64(&mut v, self.offset);
        put_varint64(&mut v, u64::from(self.size));
        v.extend_from_slice(head);
        v
    }

    /// Decodes an encoded ref, ignoring its head.
    pub fn decode(buf: &[u8]) -> Result<BlobRef, DecodeError> {
        Self::decode_with_head(buf).map(|(r, _)| r)
    }

    /// Decodes an encoded ref and returns the head that follows it (empty
    /// when none was kept); the head is never longer than the value.
    pub fn decode_with_head(buf: &[u8]) -> Result<(BlobRef, &[u8]), DecodeError> {
        let mut r = Reader::new(buf);
        let file = r.varint64()?;
        let ordinal = r.varint32()?;
        let offset = r.varint64()?;
        let size = r.varint32()?;
        let head = &buf[r.pos()..];
        if head.len() > size as usize {
            return Err(DecodeError::new(
                r.pos(),
                "blob reference head is longer than its value",
            ));
        }
        Ok((
            BlobRef {
                file,
                ordinal,
                offset,
                size,
            },
            head,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_ref_footer_lineage_roundtrip_and_damage() {
        let mut buf = Vec::new();
        encode_record(&mut buf, b"key", 42, b"value");
        assert_eq!(
            decode_record(&buf).unwrap(),
            BlobRecord {
                key: b"key",
                seq: 42,
                value: b"value"
            }
        );
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 1;
            assert!(decode_record(&bad).is_err(), "flip at {i}");
        }
        let r = BlobRef {
            file: 7,
            ordinal: 3,
            offset: 1234,
            size: 99,
        };
        assert_eq!(BlobRef::decode(&r.encode()).unwrap(), r);
        assert!(BlobRef::decode(&r.encode()[..3]).is_err());
        let with_head = r.encode_with_head(b"head");
        assert_eq!(
            BlobRef::decode_with_head(&with_head).unwrap(),
            (r, &b"head"[..])
        );
        assert_eq!(BlobRef::decode_with_head(&r.encode()).unwrap().1, b"");
        // A head longer than the value it starts is damage.
        let long = BlobRef { size: 3, ..r }.encode_with_head(b"head");
        assert!(BlobRef::decode(&long).is_err());
        decode_header(&encode_header()).unwrap();
        let f = BlobFooter {
            index_offset: 100,
            record_count: 2,
            lineage_offset: 120,
            data_bytes: 84,
        };
        assert_eq!(BlobFooter::decode(&f.encode(), 120 + 5 + 48).unwrap(), f);
        assert!(BlobFooter::decode(&f.encode(), 50).is_err());
        let mut dead = RoaringBitmap::new();
        dead.insert(1);
        dead.insert(4);
        let l = vec![LineageEntry {
            old_file: 3,
            base: 10,
            dead,
        }];
        let mut b = Vec::new();
        encode_lineage(&mut b, &l);
        assert_eq!(decode_lineage(&b).unwrap(), l);
        // Ordinals 0,2,3,5 live → 10,11,12,13.
        assert_eq!([0, 2, 3, 5].map(|o| l[0].translate(o)), [10, 11, 12, 13]);
        let mut idx = Vec::new();
        encode_index(&mut idx, &[16, 40]);
        assert_eq!(decode_index(&idx, 2).unwrap(), vec![16, 40]);
        assert!(decode_index(&idx, 3).is_err());
    }
}

#[cfg(test)]
mod bitmap_tests {
    use super::*;

    #[test]
    fn sets_built_by_unions_round_trip_through_the_canonical_check() {
        // Dense and sparse parts, built the way dead sets grow: by unions.
        let mut a = RoaringBitmap::new();
        for round in 0..20u32 {
            let mut delta = RoaringBitmap::new();
            for i in 0..3000u32 {
                delta.insert(round * 1000 + i * 7 % 5000);
            }
            a |= &delta;
        }
        a.insert_range(100_000..110_000);
        let mut buf = Vec::new();
        put_bitmap(&mut buf, &a);
        let got = read_bitmap(&mut Reader::new(&buf)).unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), a.iter().collect::<Vec<_>>());
    }
}
