//! Composite values (hashes, sets, sorted sets, lists): one metadata record
//! under the key's ordinary engine key, and one engine key per member
//! (specified in `docs/format/server.md`).
//!
//! - The metadata record is a value of kind [`Kind::Hash`] (…) whose
//!   payload is a [`Composite`]: the value's version and member count. Its
//!   header holds the expiry, which so covers the whole value.
//! - A member key is `'f' ‖ generation ‖ [slot] ‖ key length (u32 BE) ‖
//!   key ‖ version (u64 BE) ‖ member`. The length keeps one key's members
//!   apart from those of a key it is a prefix of; the version keeps a
//!   value's members apart from those of an earlier value of the same key.
//!
//! Deleting or overwriting a composite value only deletes (or replaces) its
//! metadata record: its members become garbage at once, and compaction
//! drops them ([`crate::expiry::ExpiryFilter`]), since no live metadata
//! record names their version. Versions come from a counter in the
//! keyspace record and are never handed out twice.

use crate::keyspace::{DecodeError, Kind, Layout, KEY_PREFIX_LEN, NS_KEYS, SLOT_LEN};

/// Namespace tag of member keys.
pub const NS_MEMBERS: u8 = b'f';

/// Bytes a member key adds to the Redis key and the member: tag,
/// generation, slot, key length and version.
pub const MEMBER_OVERHEAD: usize = KEY_PREFIX_LEN + SLOT_LEN + 4 + 8;

/// The metadata of a composite value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Composite {
    /// The version its member keys carry.
    pub version: u64,
    /// How many members it has (never 0: an empty value is deleted).
    pub size: u64,
    /// A list's first position (its members are positions
    /// `head..head + size`); `None` for the other kinds.
    pub head: Option<u64>,
}

/// Encoded length of [`Composite`] without a head.
pub const COMPOSITE_LEN: usize = 16;
/// Encoded length of a list's [`Composite`] (with its head).
pub const LIST_COMPOSITE_LEN: usize = 24;

/// Where a new list's first element goes: the middle of the position
/// space, so pushes either way have room.
pub const LIST_START: u64 = 1 << 63;

/// The big-endian u64 in the first 8 bytes of `b` (the caller checked
/// its length).
pub(crate) fn be_u64(b: &[u8]) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[..8]);
    u64::from_be_bytes(raw)
}

impl Composite {
    /// Encodes as `version ‖ size [‖ head]`, big-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LIST_COMPOSITE_LEN);
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        if let Some(h) = self.head {
            out.extend_from_slice(&h.to_be_bytes());
        }
        out
    }

    /// Decodes the payload of a metadata record of `kind`.
    pub fn decode(kind: Kind, payload: &[u8]) -> Result<Composite, DecodeError> {
        let want = if kind == Kind::List {
            LIST_COMPOSITE_LEN
        } else {
            COMPOSITE_LEN
        };
        if payload.len() != want {
            return Err(DecodeError(format!(
                "{} metadata of {} bytes, expected {want}",
                kind.name(),
                payload.len()
            )));
        }
        Ok(Composite {
            version: be_u64(&payload[..8]),
            size: be_u64(&payload[8..16]),
            head: (kind == Kind::List).then(|| be_u64(&payload[16..])),
        })
    }
}

/// The prefix every member key of `key`'s value of `version` starts with.
pub fn member_prefix(layout: Layout, gen: u32, key: &[u8], version: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + MEMBER_OVERHEAD + 16);
    k.push(NS_MEMBERS);
    k.extend_from_slice(&gen.to_be_bytes());
    if layout == Layout::Slotted {
        k.extend_from_slice(&crate::cluster::slot::key_slot(key).to_be_bytes());
    }
    // A Redis key is far shorter than 4 GiB (the engine's key limit).
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&version.to_be_bytes());
    k
}

/// The member key of `member` in `key`'s value of `version`.
pub fn member_key(layout: Layout, gen: u32, key: &[u8], version: u64, member: &[u8]) -> Vec<u8> {
    let mut k = member_prefix(layout, gen, key, version);
    k.extend_from_slice(member);
    k
}

/// The first key past every key starting with `prefix` (`prefix` is never
/// all `0xff`: it starts with a namespace tag).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![NS_MEMBERS + 1]
}

/// A member key taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberKey<'a> {
    /// Its generation.
    pub generation: u32,
    /// The Redis key it belongs to.
    pub key: &'a [u8],
    /// The version of the value it belongs to.
    pub version: u64,
    /// The member.
    pub member: &'a [u8],
}

/// Takes member key `k` of a store of `layout` apart; `None` if it is not
/// one.
pub fn parse_member_key(layout: Layout, k: &[u8]) -> Option<MemberKey<'_>> {
    if k.first() != Some(&NS_MEMBERS) {
        return None;
    }
    let generation = u32::from_be_bytes(k.get(1..KEY_PREFIX_LEN)?.try_into().ok()?);
    let at = match layout {
        Layout::Plain => KEY_PREFIX_LEN,
        Layout::Slotted => KEY_PREFIX_LEN + SLOT_LEN,
    };
    let len = u32::from_be_bytes(k.get(at..at + 4)?.try_into().ok()?) as usize;
    let key = k.get(at + 4..at + 4 + len)?;
    let vat = at + 4 + len;
    let version = u64::from_be_bytes(k.get(vat..vat + 8)?.try_into().ok()?);
    Some(MemberKey {
        generation,
        key,
        version,
        member: &k[vat + 8..],
    })
}

/// The engine key of the metadata record a parsed member key belongs to.
pub fn metadata_key(layout: Layout, m: &MemberKey<'_>) -> Vec<u8> {
    debug_assert_eq!(NS_KEYS, b'k');
    layout.key(m.generation, m.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_keys_parse_back_and_never_mix_keys_or_versions() {
        for layout in [Layout::Plain, Layout::Slotted] {
            let k = member_key(layout, 3, b"user:1", 9, b"name");
            let m = parse_member_key(layout, &k).unwrap();
            assert_eq!(
                (m.generation, m.key, m.version, m.member),
                (3, &b"user:1"[..], 9, &b"name"[..])
            );
            assert_eq!(metadata_key(layout, &m), layout.key(3, b"user:1"));
            // Key "a"'s members never fall inside key "ab"'s prefix range,
            // nor version 1's inside version 2's.
            let p = member_prefix(layout, 0, b"ab", 1);
            let other = member_key(layout, 0, b"a", 1, b"b\0\0\0\0\0\0\0\x01x");
            assert!(!(other >= p && other < prefix_end(&p)));
            let v2 = member_prefix(layout, 0, b"ab", 2);
            assert!(member_key(layout, 0, b"ab", 1, b"\xff\xff") < v2);
        }
        assert_eq!(parse_member_key(Layout::Plain, b"k\0\0\0\0abc"), None);
        assert_eq!(
            parse_member_key(Layout::Plain, b"f\0\0\0\0\0\0\0\x09ab"),
            None
        );
        assert_eq!(prefix_end(b"f\x01\xff"), b"f\x02".to_vec());
    }

    #[test]
    fn composites_round_trip_and_refuse_damage() {
        let c = Composite {
            version: 7,
            size: 1_000_000,
            head: None,
        };
        assert_eq!(Composite::decode(Kind::Hash, &c.encode()).unwrap(), c);
        assert!(Composite::decode(Kind::Hash, &c.encode()[..15]).is_err());
        assert!(Composite::decode(Kind::Set, b"").is_err());
        assert!(Composite::decode(Kind::List, &c.encode()).is_err());
        let l = Composite {
            head: Some(LIST_START - 3),
            ..c
        };
        assert_eq!(Composite::decode(Kind::List, &l.encode()).unwrap(), l);
        assert!(Composite::decode(Kind::ZSet, &l.encode()).is_err());
    }
}
