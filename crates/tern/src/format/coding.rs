//! Little-endian fixed-width and LEB128 varint coding.
//!
//! Hand-written because every block entry uses it on the hot path and the
//! readers need bounds-checked decoding that reports the failing offset.

use crate::error::DecodeError;

/// Appends `v` as a LEB128 varint.
#[inline]
pub fn put_varint64(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push((v as u8) | 0x80);
        v >>= 7;
    }
    dst.push(v as u8);
}

/// Appends `v` as a LEB128 varint.
#[inline]
pub fn put_varint32(dst: &mut Vec<u8>, v: u32) {
    put_varint64(dst, u64::from(v))
}

/// Appends `v` little-endian.
#[inline]
pub fn put_fixed32(dst: &mut Vec<u8>, v: u32) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` little-endian.
#[inline]
pub fn put_fixed64(dst: &mut Vec<u8>, v: u64) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Appends a varint length followed by the bytes.
#[inline]
pub fn put_length_prefixed(dst: &mut Vec<u8>, data: &[u8]) {
    put_varint64(dst, data.len() as u64);
    dst.extend_from_slice(data);
}

/// The first 8 bytes of `bytes` as a big-endian number, zero-padded: a
/// number that orders like the bytes it comes from (`a <= b` implies
/// `prefix_u64(a) <= prefix_u64(b)`), for comparing keys without reading
/// them again.
#[inline]
pub fn prefix_u64(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = bytes.len().min(8);
    w[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(w)
}

/// Reads a u32 at `pos` (little-endian). Caller guarantees bounds.
#[inline]
pub fn fixed32_at(buf: &[u8], pos: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[pos..pos + 4]);
    u32::from_le_bytes(b)
}

/// Reads a u64 at `pos` (little-endian). Caller guarantees bounds.
#[inline]
pub fn fixed64_at(buf: &[u8], pos: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[pos..pos + 8]);
    u64::from_le_bytes(b)
}

/// A bounds-checked cursor over a byte slice, for decoders.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Current offset.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when all bytes were consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn err(&self, what: &str) -> DecodeError {
        DecodeError::new(self.pos, format!("truncated or malformed {what}"))
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let b = *self.buf.get(self.pos).ok_or_else(|| self.err("byte"))?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads a little-endian u32.
    pub fn fixed32(&mut self) -> Result<u32, DecodeError> {
        let s = self.bytes(4).map_err(|_| self.err("fixed32"))?;
        Ok(fixed32_at(s, 0))
    }

    /// Reads a little-endian u64.
    pub fn fixed64(&mut self) -> Result<u64, DecodeError> {
        let s = self.bytes(8).map_err(|_| self.err("fixed64"))?;
        Ok(fixed64_at(s, 0))
    }

    /// Reads a LEB128 varint of at most 10 bytes.
    pub fn varint64(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8().map_err(|_| self.err("varint"))?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("varint (too long)"))
    }

    /// Reads a varint that must fit in u32.
    pub fn varint32(&mut self) -> Result<u32, DecodeError> {
        let start = self.pos;
        let v = self.varint64()?;
        u32::try_from(v).map_err(|_| DecodeError::new(start, "varint32 overflow"))
    }

    /// Reads `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(self.err("byte string"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Reads a varint length and that many bytes.
    pub fn length_prefixed(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.varint64()?;
        let n = usize::try_from(n).map_err(|_| self.err("length"))?;
        self.bytes(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_roundtrip_and_truncation() {
        let vals = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        let mut buf = Vec::new();
        for v in vals {
            put_varint64(&mut buf, v);
        }
        let mut r = Reader::new(&buf);
        for v in vals {
            assert_eq!(r.varint64().unwrap(), v);
        }
        assert!(r.is_empty());
        assert!(Reader::new(&buf[..buf.len() - 1]).varint64().is_ok());
        let mut r = Reader::new(&[0xff, 0xff]);
        assert!(r.varint64().is_err());
        let long = [0xffu8; 11];
        assert!(Reader::new(&long).varint64().is_err());
    }

    #[test]
    fn length_prefixed_rejects_overlong() {
        let mut buf = Vec::new();
        put_varint64(&mut buf, 10);
        buf.extend_from_slice(b"abc");
        assert!(Reader::new(&buf).length_prefixed().is_err());
    }
}
