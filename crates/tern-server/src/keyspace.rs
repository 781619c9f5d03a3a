//! How Redis keys and values are laid out in the engine (format version 1;
//! specified in `docs/format/server.md`).
//!
//! Engine key: a one-byte namespace tag, then the Redis key bytes. Strings
//! of database 0 use [`NS_STRINGS`]; [`NS_META`] holds the server's own
//! records. Engine value: a version byte, a flags byte, an optional 8-byte
//! big-endian expiry (unix milliseconds) when [`FLAG_EXPIRES`] is set, then
//! the payload.

/// Namespace tag of Redis string keys (database 0).
pub const NS_STRINGS: u8 = b's';
/// Namespace tag reserved for the server's own records.
pub const NS_META: u8 = b'm';
/// Value format version written by this server.
pub const VALUE_VERSION: u8 = 1;
/// Flags bit: an expiry follows the flags byte.
pub const FLAG_EXPIRES: u8 = 0x01;
/// Value header length without and with expiry.
pub const HEADER_LEN: usize = 2;

/// The engine key of Redis key `key`.
pub fn engine_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(NS_STRINGS);
    k.extend_from_slice(key);
    k
}

/// Iteration bounds covering every Redis key: `[NS_STRINGS, NS_STRINGS + 1)`.
pub fn namespace_bounds() -> (Vec<u8>, Vec<u8>) {
    (vec![NS_STRINGS], vec![NS_STRINGS + 1])
}

/// A stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The string value.
    pub value: Vec<u8>,
    /// When it expires, unix milliseconds; `None`: never.
    pub expire_at: Option<u64>,
}

impl Entry {
    /// Whether the entry has expired at `now` (unix milliseconds).
    pub fn expired(&self, now: u64) -> bool {
        self.expire_at.is_some_and(|t| t <= now)
    }
}

/// A stored value that this version cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

/// Encodes a value with its optional expiry.
pub fn encode_value(value: &[u8], expire_at: Option<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + HEADER_LEN + 8);
    out.push(VALUE_VERSION);
    match expire_at {
        Some(t) => {
            out.push(FLAG_EXPIRES);
            out.extend_from_slice(&t.to_be_bytes());
        }
        None => out.push(0),
    }
    out.extend_from_slice(value);
    out
}

/// Reads only the expiry of an encoded value (cheap; used by compaction).
pub fn decode_expiry(raw: &[u8]) -> Result<Option<u64>, DecodeError> {
    match raw {
        [VALUE_VERSION, flags, rest @ ..] if flags & FLAG_EXPIRES != 0 => {
            let b: [u8; 8] = rest
                .get(..8)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| DecodeError("value too short for its expiry".into()))?;
            Ok(Some(u64::from_be_bytes(b)))
        }
        [VALUE_VERSION, _, ..] => Ok(None),
        [v, ..] => Err(DecodeError(format!("unknown value format version {v}"))),
        [] => Err(DecodeError("empty value".into())),
    }
}

/// The entry a stored value holds, or `None` if it has expired at `now`
/// (unix milliseconds).
pub fn live_entry(raw: Vec<u8>, now: u64) -> Result<Option<Entry>, DecodeError> {
    Ok(Some(decode_value(raw)?).filter(|e| !e.expired(now)))
}

/// Decodes a stored value.
pub fn decode_value(mut raw: Vec<u8>) -> Result<Entry, DecodeError> {
    let expire_at = decode_expiry(&raw)?;
    let skip = HEADER_LEN + if expire_at.is_some() { 8 } else { 0 };
    raw.drain(..skip);
    Ok(Entry {
        value: raw,
        expire_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for exp in [None, Some(0), Some(1_700_000_000_123)] {
            for v in [&b""[..], b"hello"] {
                let e = decode_value(encode_value(v, exp)).unwrap();
                assert_eq!(e.value, v);
                assert_eq!(e.expire_at, exp);
            }
        }
        assert!(decode_value(vec![]).is_err());
        assert!(decode_value(vec![9, 0]).is_err());
        assert!(decode_value(vec![1, 1, 0]).is_err());
        assert_eq!(engine_key(b""), vec![NS_STRINGS]);
    }
}
