//! How the server keeps a string in the hash engine: the Redis key is the
//! engine key, and the value is a one-byte header, the expiry when there is
//! one, then the string (`docs/format/hash.md`, "Server values").
//!
//! ```text
//! 0x00 string                 no expiry
//! 0x01 u64 LE expiry (ms)     string
//! ```

/// A decoded value: its expiry (Unix ms) and the string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// When the key expires, Unix milliseconds.
    pub expires: Option<u64>,
    /// The string.
    pub data: Vec<u8>,
}

impl Value {
    /// A value without expiry.
    pub fn plain(data: Vec<u8>) -> Value {
        Value {
            expires: None,
            data,
        }
    }

    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        encode(self.expires, &self.data)
    }
}

/// The stored bytes of `data` expiring at `expires`.
pub fn encode(expires: Option<u64>, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 9);
    match expires {
        None => out.push(0),
        Some(at) => {
            out.push(1);
            out.extend_from_slice(&at.to_le_bytes());
        }
    }
    out.extend_from_slice(data);
    out
}

/// Decodes stored bytes; `None` for bytes the server did not write.
pub fn decode(bytes: &[u8]) -> Option<Value> {
    match bytes.split_first()? {
        (0, data) => Some(Value::plain(data.to_vec())),
        (1, rest) if rest.len() >= 8 => {
            let (at, data) = rest.split_at(8);
            Some(Value {
                expires: Some(u64::from_le_bytes(at.try_into().ok()?)),
                data: data.to_vec(),
            })
        }
        _ => None,
    }
}

/// The live value of stored bytes at time `now` (ms): `None` if absent or
/// expired.
pub fn live(bytes: Option<&[u8]>, now: u64) -> Option<Value> {
    decode(bytes?).filter(|v| v.expires.is_none_or(|at| at > now))
}

/// Whether a value whose first bytes (at least the header and expiry, or
/// all of it) are `head` is live at `now`.
pub fn live_header(head: &[u8], now: u64) -> bool {
    match head.split_first() {
        Some((0, _)) => true,
        Some((1, rest)) => rest
            .get(..8)
            .and_then(|at| at.try_into().ok())
            .is_some_and(|at: [u8; 8]| u64::from_le_bytes(at) > now),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_expire() {
        let v = Value {
            expires: Some(1000),
            data: b"hello".to_vec(),
        };
        assert_eq!(decode(&v.encode()), Some(v.clone()));
        assert_eq!(live(Some(&v.encode()), 999), Some(v.clone()));
        assert_eq!(live(Some(&v.encode()), 1000), None);
        assert_eq!(decode(&encode(None, b"")), Some(Value::plain(Vec::new())));
        assert_eq!(decode(&[1, 2, 3]), None);
        assert_eq!(decode(&[]), None);
        assert!(live_header(&v.encode()[..9], 999) && !live_header(&v.encode()[..9], 1000));
        assert!(live_header(&[0], 5) && !live_header(&[], 5));
    }
}
