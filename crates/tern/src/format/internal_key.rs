//! Internal keys: `user_key ‖ trailer`, where the 8-byte little-endian trailer
//! is `(seq << 8) | kind`.
//!
//! Order: user key ascending (bytewise), then sequence number descending, then
//! kind descending, so the newest version of a key comes first. A lookup key
//! for "the newest version visible at `seq`" is `user_key ‖ (seq << 8 | 0xff)`.

use std::cmp::Ordering;

use crate::error::DecodeError;

/// A sequence number. Only the low 56 bits are used.
pub type SeqNo = u64;

/// Largest valid sequence number.
pub const MAX_SEQ: SeqNo = (1 << 56) - 1;

/// Length of the trailer appended to every user key.
pub const TRAILER_LEN: usize = 8;

/// What an internal entry holds. Do not change the values: they are part of
/// the persistent format (WAL, memtable, SST).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ValueKind {
    /// A tombstone.
    Delete = 0,
    /// An inline value.
    Value = 1,
    /// A reference to a value in a blob file (key-value separation).
    BlobRef = 2,
}

/// Kind byte used in seek keys: sorts before every real kind of the same seq.
pub const KIND_FOR_SEEK: u8 = 0xff;

impl ValueKind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Value),
            2 => Some(ValueKind::BlobRef),
            _ => None,
        }
    }
}

/// Packs sequence and kind into a trailer.
#[inline]
pub fn pack_trailer(seq: SeqNo, kind: u8) -> u64 {
    (seq << 8) | u64::from(kind)
}

/// Appends `user_key ‖ trailer` to `dst`.
#[inline]
pub fn append_internal_key(dst: &mut Vec<u8>, user_key: &[u8], seq: SeqNo, kind: u8) {
    dst.extend_from_slice(user_key);
    dst.extend_from_slice(&pack_trailer(seq, kind).to_le_bytes());
}

/// Builds an owned internal key.
pub fn make_internal_key(user_key: &[u8], seq: SeqNo, kind: ValueKind) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_internal_key(&mut v, user_key, seq, kind as u8);
    v
}

/// Builds the key that seeks to the newest version of `user_key` visible at `seq`.
pub fn seek_key(user_key: &[u8], seq: SeqNo) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    append_internal_key(&mut v, user_key, seq, KIND_FOR_SEEK);
    v
}

/// A borrowed, parsed internal key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user's key.
    pub user_key: &'a [u8],
    /// Sequence number of the write.
    pub seq: SeqNo,
    /// What the entry holds.
    pub kind: ValueKind,
}

/// Splits an internal key, validating the kind byte.
pub fn parse(ikey: &[u8]) -> Result<ParsedKey<'_>, DecodeError> {
    if ikey.len() < TRAILER_LEN {
        return Err(DecodeError::new(0, "internal key shorter than its trailer"));
    }
    let (user_key, t) = ikey.split_at(ikey.len() - TRAILER_LEN);
    let trailer = crate::format::coding::fixed64_at(t, 0);
    let kind = ValueKind::from_u8(trailer as u8)
        .ok_or_else(|| DecodeError::new(ikey.len() - TRAILER_LEN, "unknown value kind"))?;
    Ok(ParsedKey {
        user_key,
        seq: trailer >> 8,
        kind,
    })
}

/// The user-key part of an internal key (empty if it is too short to hold
/// a trailer).
#[inline]
pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len().saturating_sub(TRAILER_LEN)]
}

/// The trailer of an internal key (0 if it is too short).
#[inline]
pub fn trailer(ikey: &[u8]) -> u64 {
    if ikey.len() < TRAILER_LEN {
        return 0;
    }
    crate::format::coding::fixed64_at(ikey, ikey.len() - TRAILER_LEN)
}

/// Compares byte strings as `a.cmp(b)` does, eight bytes at a time
/// without a call: keys are short and often share long prefixes, and the
/// library `memcmp` call dominated memtable searches.
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        let mut wx = [0u8; 8];
        let mut wy = [0u8; 8];
        wx.copy_from_slice(x);
        wy.copy_from_slice(y);
        if wx != wy {
            return u64::from_be_bytes(wx).cmp(&u64::from_be_bytes(wy));
        }
    }
    let done = 8 * (a.len().min(b.len()) / 8);
    a[done..].cmp(&b[done..])
}

/// Compares two internal keys: user key ascending, trailer descending.
#[inline]
pub fn compare(a: &[u8], b: &[u8]) -> Ordering {
    match compare_bytes(user_key(a), user_key(b)) {
        Ordering::Equal => trailer(b).cmp(&trailer(a)),
        o => o,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_bytes_agrees_with_slice_order() {
        let words: [&[u8]; 12] = [
            b"",
            b"a",
            b"ab",
            b"abcdefgh",
            b"abcdefgi",
            b"abcdefgh\0",
            b"abcdefghabcdefgh",
            b"abcdefghabcdefgz",
            b"abcdefghabcdefg",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            b"\x00\x00\x00\x00\x00\x00\x00\x00",
            b"key:000000012345",
        ];
        for a in words {
            for b in words {
                assert_eq!(compare_bytes(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
        // Short random strings over a tiny alphabet (0 included), so that
        // prefixes, shared words and zero bytes all occur.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let strings: Vec<Vec<u8>> = (0..400)
            .map(|_| {
                let len = (next() % 20) as usize;
                (0..len).map(|_| (next() % 3) as u8).collect()
            })
            .collect();
        for a in &strings {
            for b in &strings {
                assert_eq!(compare_bytes(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn newest_first_then_user_key() {
        let a1 = make_internal_key(b"a", 1, ValueKind::Value);
        let a2 = make_internal_key(b"a", 2, ValueKind::Value);
        let b1 = make_internal_key(b"b", 1, ValueKind::Delete);
        assert_eq!(compare(&a2, &a1), Ordering::Less);
        assert_eq!(compare(&a1, &b1), Ordering::Less);
        assert_eq!(compare(&seek_key(b"a", 2), &a2), Ordering::Less);
        assert_eq!(compare(&seek_key(b"a", 1), &a2), Ordering::Greater);
        let p = parse(&a2).unwrap();
        assert_eq!(
            (p.user_key, p.seq, p.kind),
            (&b"a"[..], 2, ValueKind::Value)
        );
        assert!(parse(b"short").is_err());
        let mut bad = a1.clone();
        let n = bad.len();
        bad[n - 8] = 9;
        assert!(parse(&bad).is_err());
    }
}
