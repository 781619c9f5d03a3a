//! Write batches: the unit of atomicity, and the payload of one WAL record.
//!
//! Layout (little-endian): `seq u64 ‖ count u32 ‖ record*`, where a record is
//! `kind u8 ‖ key (varint len ‖ bytes) [‖ value (varint len ‖ bytes)]` and the
//! value is present for every kind but `Delete`. Record `i` gets sequence
//! number `seq + i`. A group commit concatenates the records of several
//! batches under one header. See `docs/format/wal.md`.

use crate::error::DecodeError;
use crate::format::coding::{fixed32_at, fixed64_at, put_length_prefixed, Reader};
use crate::format::internal_key::{SeqNo, ValueKind, MAX_SEQ};

/// Bytes before the first record.
pub const HEADER_LEN: usize = 12;

/// An ordered set of writes applied atomically.
#[derive(Clone, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for WriteBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBatch")
            .field("count", &self.len())
            .field("bytes", &self.rep.len())
            .finish()
    }
}

/// One decoded write of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchEntry<'a> {
    /// What the write does.
    pub kind: ValueKind,
    /// The user key.
    pub key: &'a [u8],
    /// The value (empty for deletes).
    pub value: &'a [u8],
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        WriteBatch {
            rep: vec![0; HEADER_LEN],
        }
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.push(ValueKind::Value, key, value)
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.push(ValueKind::Delete, key, &[])
    }

    pub(crate) fn push(&mut self, kind: ValueKind, key: &[u8], value: &[u8]) -> &mut Self {
        self.rep.push(kind as u8);
        put_length_prefixed(&mut self.rep, key);
        if kind != ValueKind::Delete {
            put_length_prefixed(&mut self.rep, value);
        }
        let n = self.len() as u32 + 1;
        self.rep[8..12].copy_from_slice(&n.to_le_bytes());
        self
    }

    /// Removes every write.
    pub fn clear(&mut self) {
        self.rep.clear();
        self.rep.resize(HEADER_LEN, 0);
    }

    /// Number of writes.
    pub fn len(&self) -> usize {
        fixed32_at(&self.rep, 8) as usize
    }

    /// True when the batch holds no write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Encoded size in bytes.
    pub fn approximate_size(&self) -> usize {
        self.rep.len()
    }

    /// Sequence number of the first write (set at commit).
    pub fn seq(&self) -> SeqNo {
        fixed64_at(&self.rep, 0)
    }

    pub(crate) fn set_seq(&mut self, seq: SeqNo) {
        self.rep[0..8].copy_from_slice(&seq.to_le_bytes());
    }

    /// Appends the records of `other` (group commit).
    pub(crate) fn append(&mut self, other: &WriteBatch) {
        let n = (self.len() + other.len()) as u32;
        self.rep.extend_from_slice(&other.rep[HEADER_LEN..]);
        self.rep[8..12].copy_from_slice(&n.to_le_bytes());
    }

    /// The encoded form, as stored in the WAL.
    pub fn as_bytes(&self) -> &[u8] {
        &self.rep
    }

    /// Decodes and fully validates an encoded batch.
    pub fn from_bytes(buf: &[u8]) -> Result<WriteBatch, DecodeError> {
        let batch = WriteBatch { rep: buf.to_vec() };
        if buf.len() < HEADER_LEN {
            return Err(DecodeError::new(0, "write batch shorter than its header"));
        }
        let mut n = 0usize;
        for e in batch.iter() {
            e?;
            n += 1;
        }
        if n != batch.len() {
            return Err(DecodeError::new(
                8,
                "write batch count does not match its records",
            ));
        }
        Ok(batch)
    }

    /// Decodes a batch read back from the WAL, which writers fill only with
    /// puts and deletes numbered within the sequence space: an entry of an
    /// engine-internal kind (a blob reference), or sequence numbers past
    /// [`MAX_SEQ`], is damage, like a malformed entry.
    pub fn from_wal_bytes(buf: &[u8]) -> Result<WriteBatch, DecodeError> {
        let batch = Self::from_bytes(buf)?;
        let last = batch
            .seq()
            .checked_add(batch.len().saturating_sub(1) as u64);
        if last.is_none_or(|s| s > MAX_SEQ) {
            return Err(DecodeError::new(
                0,
                format!("write batch sequence {} is out of range", batch.seq()),
            ));
        }
        if batch.iter().flatten().any(|e| e.kind == ValueKind::BlobRef) {
            return Err(DecodeError::new(
                0,
                "write-ahead log record holds an internal blob-reference entry",
            ));
        }
        Ok(batch)
    }

    /// Iterates over the writes. Yields an error for a malformed record.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            r: Reader::new(self.rep.get(HEADER_LEN..).unwrap_or(&[])),
            failed: false,
        }
    }
}

/// Iterator over a batch's writes.
pub struct BatchIter<'a> {
    r: Reader<'a>,
    failed: bool,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = Result<BatchEntry<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.r.is_empty() {
            return None;
        }
        let res = (|| {
            let at = self.r.pos() + HEADER_LEN;
            let kind = ValueKind::from_u8(self.r.u8()?)
                .ok_or_else(|| DecodeError::new(at, "unknown write kind in batch"))?;
            let key = self.r.length_prefixed()?;
            let value = if kind == ValueKind::Delete {
                &[][..]
            } else {
                self.r.length_prefixed()?
            };
            Ok(BatchEntry { kind, key, value })
        })();
        self.failed = res.is_err();
        Some(res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_append_and_garbage() {
        let mut a = WriteBatch::new();
        a.put(b"k1", b"v1").delete(b"k2");
        let mut b = WriteBatch::new();
        b.put(b"", b"");
        a.append(&b);
        a.set_seq(42);
        let d = WriteBatch::from_bytes(a.as_bytes()).unwrap();
        assert_eq!(d.seq(), 42);
        let entries: Vec<_> = d.iter().map(|e| e.unwrap()).collect();
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[1].kind, ValueKind::Delete);
        assert_eq!(entries[0].value, b"v1");
        for cut in 0..a.as_bytes().len() {
            assert!(WriteBatch::from_bytes(&a.as_bytes()[..cut]).is_err());
        }
        let mut bad = a.as_bytes().to_vec();
        bad[HEADER_LEN] = 7;
        assert!(WriteBatch::from_bytes(&bad).is_err());
    }
}
