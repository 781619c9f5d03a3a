//! How Redis keys and values are laid out in the engine (format version 2;
//! specified in `docs/format/server.md`).
//!
//! - `'k' ‖ generation ‖ key` → the value: a version byte, a flags byte, an
//!   optional 8-byte big-endian expiry (unix ms) when [`FLAG_EXPIRES`] is
//!   set, then the payload. The engine keeps the first [`HEAD_LEN`] bytes
//!   of a separated value beside its reference, so the header (and with it
//!   the expiry) is readable without a blob read.
//! - `'x' ‖ generation ‖ expiry ‖ key` → empty: the expiry index, one entry
//!   per key with an expiry, which active expiry walks in time order.
//! - `'m' ‖ "keyspace"` → [`Meta`]: the current generation and exact counts.
//! - `'m' ‖ "cluster"` → [`ClusterRecord`], in a cluster node's store only:
//!   its node id; its Redis keys carry their slot ([`Layout::Slotted`]:
//!   `'k' ‖ generation ‖ slot ‖ key`), so a slot range is one contiguous
//!   key range that can be counted, exported and dropped as a whole.
//!
//! FLUSHDB starts a new generation; keys of older generations are invisible
//! and compaction drops them.

use bytes::{Buf, Bytes};

/// Namespace tag of Redis keys.
pub const NS_KEYS: u8 = b'k';
/// Namespace tag of the expiry index.
pub const NS_EXPIRES: u8 = b'x';
/// Namespace tag of the server's own records.
pub const NS_META: u8 = b'm';
/// Namespace tag of import markers: keys a cluster node importing a slot
/// has settled (imported, or written by a client), which the bulk copy
/// must not overwrite.
pub const NS_IMPORTED: u8 = b'i';
/// Namespace tag of format version 1 strings (migrated at open).
pub const NS_V1_STRINGS: u8 = b's';
/// Engine key of the [`Meta`] record.
pub const META_KEY: &[u8] = b"mkeyspace";
/// Keyspace format version written by this server.
pub const FORMAT_VERSION: u8 = 3;
/// The keyspace format before composite types (read, then rewritten as
/// [`FORMAT_VERSION`] by the next write that changes the counts).
pub const FORMAT_VERSION_2: u8 = 2;
/// Value format version written by this server.
pub const VALUE_VERSION: u8 = 1;
/// Flags bit: an expiry follows the flags byte.
pub const FLAG_EXPIRES: u8 = 0x01;
/// Flags bit: compaction dropped the payload of this expired value.
pub const FLAG_DROPPED: u8 = 0x02;
/// Flags bits holding the value's [`Kind`].
pub const KIND_SHIFT: u8 = 4;

/// What a Redis key holds: bits 4–7 of a value's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Kind {
    /// A string: the payload is the value.
    #[default]
    String = 0,
    /// A hash: the payload is a [`crate::members::Composite`], each field
    /// one member key.
    Hash = 1,
    /// A set (members as member keys).
    Set = 2,
    /// A sorted set (members as member keys, plus a score index).
    ZSet = 3,
    /// A list (elements as member keys by position).
    List = 4,
}

impl Kind {
    /// The kind stored in flags bits 4–7, if known.
    pub fn from_flags(flags: u8) -> Option<Kind> {
        Some(match flags >> KIND_SHIFT {
            0 => Kind::String,
            1 => Kind::Hash,
            2 => Kind::Set,
            3 => Kind::ZSet,
            4 => Kind::List,
            _ => return None,
        })
    }

    /// The name TYPE replies with.
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::List => "list",
        }
    }

    /// Whether the value is a metadata record with member keys.
    pub fn is_composite(self) -> bool {
        self != Kind::String
    }
}

/// Value header length without expiry.
pub const HEADER_LEN: usize = 2;
/// Value header length with expiry: what the engine must keep beside a
/// separated value's reference (`blob_head_size`).
pub const HEAD_LEN: usize = HEADER_LEN + 8;
/// Length of the tag and generation before a Redis key.
pub const KEY_PREFIX_LEN: usize = 5;
/// Bytes the longest engine key adds to a Redis key (an expiry index
/// entry: tag, generation, expiry).
pub const KEY_OVERHEAD: usize = KEY_PREFIX_LEN + 8;

/// Prefix of ingest intents (`'m' "ingest" ‖ id`, u64 big-endian →
/// first slot ‖ last slot, u16 big-endian each): a cluster node's bulk
/// copy counted keys of files it had not yet ingested
/// (`crate::cluster::ingest`).
pub const INGEST_INTENT_PREFIX: &[u8] = b"mingest";

/// Prefix of bulk copy resume points (`'m' "copyat" ‖ migration id`, u64
/// big-endian → slot range index (u32 BE) ‖ phase (0 strings, 1 the other
/// kinds) ‖ cursor): where a target's copy of a migration goes on after a
/// restart (`crate::cluster::mover`).
pub const COPY_RESUME_PREFIX: &[u8] = b"mcopyat";

/// The engine key of the resume point of migration `id`'s bulk copy.
pub fn copy_resume_key(id: u64) -> Vec<u8> {
    let mut k = COPY_RESUME_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The engine key of ingest intent `id`.
pub fn ingest_intent_key(id: u64) -> Vec<u8> {
    let mut k = INGEST_INTENT_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// The value of an ingest intent for slots `first..=last`.
pub fn encode_ingest_intent(first: u16, last: u16) -> Vec<u8> {
    let mut v = first.to_be_bytes().to_vec();
    v.extend_from_slice(&last.to_be_bytes());
    v
}

/// The slots of an ingest intent's value.
pub fn decode_ingest_intent(v: &[u8]) -> Result<(u16, u16), DecodeError> {
    match v {
        [a, b, c, d] => Ok((u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))),
        _ => Err(DecodeError(format!(
            "an ingest intent of {} bytes (4 expected)",
            v.len()
        ))),
    }
}

/// Engine key of the [`ClusterRecord`].
pub const CLUSTER_KEY: &[u8] = b"mcluster";
/// Bytes of the slot in a [`Layout::Slotted`] key.
pub const SLOT_LEN: usize = 2;

/// How Redis keys map to engine keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// `'k' ‖ generation ‖ key` (a standalone server).
    #[default]
    Plain,
    /// `'k' ‖ generation ‖ slot ‖ key`, the slot big-endian (a cluster
    /// node).
    Slotted,
}

impl Layout {
    /// The engine key of Redis key `key` in generation `gen`.
    pub fn key(self, gen: u32, key: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(key.len() + KEY_PREFIX_LEN + SLOT_LEN);
        self.key_into(gen, key, &mut k);
        k
    }

    /// [`Layout::key`] into `out` (cleared first), reusing its memory.
    pub fn key_into(self, gen: u32, key: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.push(NS_KEYS);
        out.extend_from_slice(&gen.to_be_bytes());
        if self == Layout::Slotted {
            out.extend_from_slice(&crate::cluster::slot::key_slot(key).to_be_bytes());
        }
        out.extend_from_slice(key);
    }

    /// Bytes before the Redis key in an engine key.
    pub fn prefix_len(self) -> usize {
        match self {
            Layout::Plain => KEY_PREFIX_LEN,
            Layout::Slotted => KEY_PREFIX_LEN + SLOT_LEN,
        }
    }

    /// Bounds of slot `slot`'s keys in generation `gen` (slotted only).
    pub fn slot_bounds(gen: u32, slot: u16) -> (Vec<u8>, Vec<u8>) {
        let mut lo = vec![NS_KEYS];
        lo.extend_from_slice(&gen.to_be_bytes());
        let mut hi = lo.clone();
        lo.extend_from_slice(&slot.to_be_bytes());
        match slot.checked_add(1) {
            Some(next) => hi.extend_from_slice(&next.to_be_bytes()),
            None => return (lo, generation_bounds(NS_KEYS, gen).1),
        }
        (lo, hi)
    }
}

/// The import marker of Redis key `key`: `'i' ‖ slot ‖ key`.
pub fn marker_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1 + SLOT_LEN);
    k.push(NS_IMPORTED);
    k.extend_from_slice(&crate::cluster::slot::key_slot(key).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// Bounds of slot `slot`'s import markers.
pub fn marker_bounds(slot: u16) -> (Vec<u8>, Vec<u8>) {
    let mut lo = vec![NS_IMPORTED];
    lo.extend_from_slice(&slot.to_be_bytes());
    let hi = match slot.checked_add(1) {
        Some(next) => {
            let mut hi = vec![NS_IMPORTED];
            hi.extend_from_slice(&next.to_be_bytes());
            hi
        }
        None => vec![NS_IMPORTED + 1],
    };
    (lo, hi)
}

/// What a cluster node's store says about the node: its id, fixed when
/// the store is first opened in cluster mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRecord {
    /// The node id (40 hex digits).
    pub node_id: String,
}

/// Format version of [`ClusterRecord`].
const CLUSTER_RECORD_VERSION: u8 = 1;

impl ClusterRecord {
    /// Encodes as `version ‖ node id`.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![CLUSTER_RECORD_VERSION];
        v.extend_from_slice(self.node_id.as_bytes());
        v
    }

    /// Decodes a record written by [`ClusterRecord::encode`].
    pub fn decode(v: &[u8]) -> Result<ClusterRecord, DecodeError> {
        match v {
            [CLUSTER_RECORD_VERSION, id @ ..] => {
                let id = std::str::from_utf8(id)
                    .ok()
                    .filter(|id| crate::cluster::topology::valid_node_id(id))
                    .ok_or_else(|| {
                        DecodeError("cluster record holds a malformed node id".into())
                    })?;
                Ok(ClusterRecord {
                    node_id: id.to_string(),
                })
            }
            _ => Err(DecodeError(format!(
                "cluster record of format {:?}; this server reads format {CLUSTER_RECORD_VERSION}",
                v.first()
            ))),
        }
    }
}

/// The engine key of Redis key `key` in generation `gen` ([`Layout::Plain`]).
pub fn engine_key(gen: u32, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + KEY_PREFIX_LEN);
    k.push(NS_KEYS);
    k.extend_from_slice(&gen.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The expiry index entry of `key` expiring at `at` in generation `gen`.
pub fn expiry_key(gen: u32, at: u64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + KEY_OVERHEAD);
    k.push(NS_EXPIRES);
    k.extend_from_slice(&gen.to_be_bytes());
    k.extend_from_slice(&at.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The expiry time and Redis key of an expiry index entry.
pub fn parse_expiry_key(k: &[u8]) -> Option<(u64, &[u8])> {
    let rest = k.get(KEY_PREFIX_LEN..)?;
    let at = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    Some((at, &rest[8..]))
}

/// The generation of an engine key of namespace `'k'` or `'x'`.
pub fn generation_of(k: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(
        k.get(1..KEY_PREFIX_LEN)?.try_into().ok()?,
    ))
}

/// Bounds covering namespace `tag` of generation `gen`.
pub fn generation_bounds(tag: u8, gen: u32) -> (Vec<u8>, Vec<u8>) {
    let mut lo = vec![tag];
    lo.extend_from_slice(&gen.to_be_bytes());
    let hi = match gen.checked_add(1) {
        Some(next) => {
            let mut hi = vec![tag];
            hi.extend_from_slice(&next.to_be_bytes());
            hi
        }
        None => vec![tag + 1],
    };
    (lo, hi)
}

/// A stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What the key holds.
    pub kind: Kind,
    /// The payload: the string, or a composite's metadata
    /// ([`crate::members::Composite`]). It shares the stored value's
    /// buffer, past the header, so a large value is not moved to drop it.
    pub value: Bytes,
    /// When it expires, unix milliseconds; `None`: never.
    pub expire_at: Option<u64>,
}

/// `N` bytes of `v` from `at`; the caller has checked the length.
fn array<const N: usize>(v: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&v[at..at + N]);
    a
}

/// A stored value that this version cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

/// Encodes a string value with its optional expiry.
pub fn encode_value(value: &[u8], expire_at: Option<u64>) -> Vec<u8> {
    encode_typed(Kind::String, value, expire_at)
}

/// Encodes a value of `kind` (its payload) with its optional expiry.
pub fn encode_typed(kind: Kind, payload: &[u8], expire_at: Option<u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + HEAD_LEN);
    out.push(VALUE_VERSION);
    let kind_bits = (kind as u8) << KIND_SHIFT;
    match expire_at {
        Some(t) => {
            out.push(FLAG_EXPIRES | kind_bits);
            out.extend_from_slice(&t.to_be_bytes());
        }
        None => out.push(kind_bits),
    }
    out.extend_from_slice(payload);
    out
}

/// What a value's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the key holds.
    pub kind: Kind,
    /// When the key expires, unix ms.
    pub expire_at: Option<u64>,
    /// Compaction dropped the payload (the value had expired).
    pub dropped: bool,
}

impl Header {
    /// Whether the key is absent at `now`: expired, or its payload gone.
    pub fn expired(&self, now: u64) -> bool {
        self.dropped || self.expire_at.is_some_and(|t| t <= now)
    }
}

/// Reads a value's header from its first bytes (the whole value or the
/// head the engine kept); `Ok(None)` if `raw` is a head too short to hold
/// the header (written while `blob_head_size` was smaller).
pub fn decode_header(raw: &[u8], partial: bool) -> Result<Option<Header>, DecodeError> {
    match raw {
        [VALUE_VERSION, flags, rest @ ..] => {
            let kind = Kind::from_flags(*flags);
            let low = flags & ((1 << KIND_SHIFT) - 1);
            let Some(kind) = kind.filter(|_| low & !(FLAG_EXPIRES | FLAG_DROPPED) == 0) else {
                return Err(DecodeError(format!("unknown value flags {flags:#04x}")));
            };
            let expire_at = if flags & FLAG_EXPIRES == 0 {
                None
            } else if rest.len() >= 8 {
                Some(u64::from_be_bytes(array(rest, 0)))
            } else if partial {
                return Ok(None);
            } else {
                return Err(DecodeError("value too short for its expiry".into()));
            };
            Ok(Some(Header {
                kind,
                expire_at,
                dropped: flags & FLAG_DROPPED != 0,
            }))
        }
        [v, ..] if *v != VALUE_VERSION => {
            Err(DecodeError(format!("unknown value format version {v}")))
        }
        _ if partial => Ok(None),
        _ => Err(DecodeError("value too short for its header".into())),
    }
}

/// The stand-in compaction leaves for an expired value of `kind`: its
/// header with [`FLAG_DROPPED`] and no payload.
pub fn dropped_value(kind: Kind, expire_at: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD_LEN);
    out.push(VALUE_VERSION);
    out.push(FLAG_EXPIRES | FLAG_DROPPED | ((kind as u8) << KIND_SHIFT));
    out.extend_from_slice(&expire_at.to_be_bytes());
    out
}

/// The entry a stored value holds, or `None` if it has expired at `now`
/// (unix milliseconds).
pub fn live_entry(raw: Vec<u8>, now: u64) -> Result<Option<Entry>, DecodeError> {
    let h = whole_header(&raw)?;
    Ok((!h.expired(now)).then(|| entry(raw, h)))
}

/// Decodes a stored value.
pub fn decode_value(raw: Vec<u8>) -> Result<Entry, DecodeError> {
    let h = whole_header(&raw)?;
    Ok(entry(raw, h))
}

/// The header of a whole stored value.
fn whole_header(raw: &[u8]) -> Result<Header, DecodeError> {
    decode_header(raw, false)?.ok_or_else(|| DecodeError("value too short for its header".into()))
}

/// The entry of stored value `raw`, whose header is `h`.
fn entry(raw: Vec<u8>, h: Header) -> Entry {
    let mut value = Bytes::from(raw);
    value.advance(HEADER_LEN + if h.expire_at.is_some() { 8 } else { 0 });
    Entry {
        kind: h.kind,
        value,
        expire_at: h.expire_at,
    }
}

/// The counts and generation the committer keeps exact; stored in the same
/// engine batch as the writes that change them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// Current generation (FLUSHDB starts the next).
    pub generation: u32,
    /// Keys stored, counting expired ones not yet removed (as Redis does).
    pub keys: u64,
    /// Of those, keys with an expiry.
    pub expires: u64,
    /// Sum of their expiry times, unix ms (for INFO's `avg_ttl`).
    pub expire_sum: u128,
    /// The version the next composite value created gets: its member keys
    /// carry it, so members of a deleted or overwritten value never mix
    /// with a new one's and compaction can tell them apart.
    pub next_version: u64,
}

/// Encoded length of [`Meta`].
const META_LEN: usize = 1 + 4 + 8 + 8 + 16 + 8;
/// Encoded length of a format 2 [`Meta`] (no `next_version`).
const META_LEN_2: usize = META_LEN - 8;

impl Meta {
    /// Encodes as `version ‖ generation ‖ keys ‖ expires ‖ expire_sum`,
    /// big-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(META_LEN);
        v.push(FORMAT_VERSION);
        v.extend_from_slice(&self.generation.to_be_bytes());
        v.extend_from_slice(&self.keys.to_be_bytes());
        v.extend_from_slice(&self.expires.to_be_bytes());
        v.extend_from_slice(&self.expire_sum.to_be_bytes());
        v.extend_from_slice(&self.next_version.to_be_bytes());
        v
    }

    /// Decodes a record written by [`Meta::encode`].
    /// A format 2 record (before composite types) reads with
    /// `next_version` 1.
    pub fn decode(v: &[u8]) -> Result<Meta, DecodeError> {
        let expect = match v.first() {
            Some(&FORMAT_VERSION) => META_LEN,
            Some(&FORMAT_VERSION_2) => META_LEN_2,
            other => {
                return Err(DecodeError(format!(
                "keyspace record of format {other:?}; this server reads formats {FORMAT_VERSION_2} and {FORMAT_VERSION}"
            )))
            }
        };
        if v.len() != expect {
            return Err(DecodeError(format!(
                "keyspace record of {} bytes, expected {expect}",
                v.len()
            )));
        }
        Ok(Meta {
            generation: u32::from_be_bytes(array(v, 1)),
            keys: u64::from_be_bytes(array(v, 5)),
            expires: u64::from_be_bytes(array(v, 13)),
            expire_sum: u128::from_be_bytes(array(v, 21)),
            next_version: if expect == META_LEN {
                u64::from_be_bytes(array(v, 37))
            } else {
                1
            },
        })
    }

    /// Average remaining time to live of the keys with an expiry at `now`,
    /// ms (0 when none), as INFO's `avg_ttl`.
    pub fn avg_ttl(&self, now: u64) -> u64 {
        if self.expires == 0 {
            return 0;
        }
        let avg = self.expire_sum / u128::from(self.expires);
        u64::try_from(avg.saturating_sub(u128::from(now))).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_damage_is_an_error() {
        for exp in [None, Some(0), Some(1_700_000_000_123)] {
            for v in [&b""[..], b"hello"] {
                let raw = encode_value(v, exp);
                let e = decode_value(raw.clone()).unwrap();
                assert_eq!((&e.value[..], e.expire_at), (v, exp));
                let h = decode_header(&raw[..HEAD_LEN.min(raw.len())], true)
                    .unwrap()
                    .unwrap();
                assert_eq!((h.expire_at, h.dropped), (exp, false));
            }
        }
        assert!(decode_value(vec![]).is_err());
        assert!(decode_value(vec![9, 0]).is_err());
        assert!(decode_value(vec![1, 1, 0]).is_err());
        assert!(decode_value(vec![1, 0x80]).is_err(), "unknown kind");
        assert!(decode_value(vec![1, 0x04]).is_err(), "unknown flag");
        for kind in [Kind::String, Kind::Hash, Kind::Set, Kind::ZSet, Kind::List] {
            let e = decode_value(encode_typed(kind, b"p", Some(5))).unwrap();
            assert_eq!(
                (e.kind, &e.value[..], e.expire_at),
                (kind, &b"p"[..], Some(5))
            );
            let d = decode_header(&dropped_value(kind, 5), false)
                .unwrap()
                .unwrap();
            assert_eq!((d.kind, d.dropped), (kind, true));
        }
        // A head cut short by an older blob_head_size: unknown, not damage.
        assert_eq!(decode_header(&[1, 1, 0], true).unwrap(), None);
        assert_eq!(decode_header(&[], true).unwrap(), None);
        let d = decode_header(&dropped_value(Kind::String, 7), false)
            .unwrap()
            .unwrap();
        assert!(d.dropped && d.expired(0));
        assert_eq!(
            live_entry(dropped_value(Kind::Hash, u64::MAX), 0).unwrap(),
            None
        );
    }

    #[test]
    fn keys_sort_by_generation_then_key_and_index_entries_by_time() {
        assert!(engine_key(1, b"zz") < engine_key(2, b""));
        let (lo, hi) = generation_bounds(NS_KEYS, 1);
        assert!(lo <= engine_key(1, b"") && engine_key(1, b"\xff\xff") < hi);
        assert_eq!(generation_bounds(NS_KEYS, u32::MAX).1, vec![NS_KEYS + 1]);
        assert!(expiry_key(0, 5, b"b") < expiry_key(0, 6, b"a"));
        assert_eq!(
            parse_expiry_key(&expiry_key(3, 99, b"key")),
            Some((99, &b"key"[..]))
        );
        assert_eq!(generation_of(&expiry_key(3, 99, b"key")), Some(3));
    }

    #[test]
    fn slotted_keys_sort_by_slot_and_stay_inside_their_slot_bounds() {
        let l = Layout::Slotted;
        let slot = |k: &[u8]| crate::cluster::slot::key_slot(k);
        assert!(slot(b"bar") < slot(b"foo"));
        assert!(
            l.key(1, b"foo") > l.key(1, b"bar"),
            "slot order, not key order"
        );
        for k in [&b"foo"[..], b"bar", b"", b"{x}y"] {
            let (lo, hi) = Layout::slot_bounds(1, slot(k));
            let ek = l.key(1, k);
            assert!(lo <= ek && ek < hi);
            assert_eq!(&ek[l.prefix_len()..], k);
        }
        let (lo, hi) = Layout::slot_bounds(1, 16383);
        assert!(lo < hi && hi <= generation_bounds(NS_KEYS, 1).1);
        assert_eq!(Layout::Plain.key(3, b"a"), engine_key(3, b"a"));
    }

    #[test]
    fn cluster_records_round_trip_and_refuse_damage() {
        let r = ClusterRecord {
            node_id: format!("{:040x}", 7),
        };
        assert_eq!(ClusterRecord::decode(&r.encode()).unwrap(), r);
        assert!(ClusterRecord::decode(&r.encode()[..20]).is_err());
        assert!(ClusterRecord::decode(b"").is_err());
        let mut other = r.encode();
        other[0] = 9;
        assert!(ClusterRecord::decode(&other).is_err());
    }

    #[test]
    fn meta_round_trips_and_refuses_other_formats() {
        let m = Meta {
            generation: 3,
            keys: 10,
            expires: 2,
            expire_sum: 3000,
            next_version: 42,
        };
        assert_eq!(Meta::decode(&m.encode()).unwrap(), m);
        // A format 2 record (no next_version) still reads.
        let mut v2 = m.encode();
        v2.truncate(v2.len() - 8);
        v2[0] = FORMAT_VERSION_2;
        let old = Meta::decode(&v2).unwrap();
        assert_eq!((old.keys, old.next_version), (10, 1));
        assert_eq!(m.avg_ttl(1000), 500);
        assert!(Meta::decode(&m.encode()[..10]).is_err());
        let mut other = m.encode();
        other[0] = 1;
        assert!(Meta::decode(&other).is_err());
        other[0] = FORMAT_VERSION_2;
        assert!(
            Meta::decode(&other).is_err(),
            "format 2 of format 3's length"
        );
    }
}
