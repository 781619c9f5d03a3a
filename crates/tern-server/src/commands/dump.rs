//! A whole Redis value as one byte string, for moving it between cluster
//! nodes (`TERN.FETCH`, `TERN.SLOTSCAN`, `TERN.HOTKEYS` on the source,
//! `TERN.IMPORT` on the target; specified in `docs/format/cluster.md`).
//! Versions are each store's own, so a composite value is carried as its
//! members and gets a new version where it is restored.
//!
//! ```text
//! string:    1 ‖ 0 ‖ the string
//! composite: 1 ‖ kind ‖ head (u64 BE, lists; else 0) ‖ count (u64 BE)
//!            ‖ count × (member length u32 BE ‖ member ‖ value length u32 BE ‖ value)
//! ```
//!
//! A hash's members are its fields and values, a set's its members (empty
//! values), a list's its positions (8 bytes each, from `head` on, in
//! order) and elements, a sorted set's its members and scores (f64 bits,
//! u64 BE); a sorted set's score index is rebuilt from them.

use super::composite::{check_member_len, Value};
use super::{store_error, Ctx};
use crate::keyspace::{DecodeError, Entry, Kind};
use crate::members::be_u64;
use crate::resp::Reply;

/// Format version of a dump.
const DUMP_VERSION: u8 = 1;

/// A value taken apart from its dump.
#[derive(Debug, Clone, PartialEq)]
pub enum Dump {
    /// A string.
    String(Vec<u8>),
    /// A composite value of `kind`: its members and their bytes in member
    /// order, and a list's first position.
    Composite {
        /// Hash, set, sorted set or list.
        kind: Kind,
        /// A list's first position (0 for the other kinds).
        head: u64,
        /// Members and their stored bytes.
        members: Vec<(Vec<u8>, Vec<u8>)>,
    },
}

impl Dump {
    /// Encodes as the format above.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Dump::String(v) => {
                let mut out = Vec::with_capacity(v.len() + 2);
                out.extend_from_slice(&[DUMP_VERSION, Kind::String as u8]);
                out.extend_from_slice(v);
                out
            }
            Dump::Composite {
                kind,
                head,
                members,
            } => {
                let size: usize = members.iter().map(|(m, v)| m.len() + v.len() + 8).sum();
                let mut out = Vec::with_capacity(18 + size);
                out.extend_from_slice(&[DUMP_VERSION, *kind as u8]);
                out.extend_from_slice(&head.to_be_bytes());
                out.extend_from_slice(&(members.len() as u64).to_be_bytes());
                for (m, v) in members {
                    // Members and values are far below 4 GiB (the engine's
                    // key and value limits).
                    out.extend_from_slice(&(m.len() as u32).to_be_bytes());
                    out.extend_from_slice(m);
                    out.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    out.extend_from_slice(v);
                }
                out
            }
        }
    }

    /// Decodes and checks a dump: lengths, the kind, and what each kind's
    /// members must be (a list's consecutive positions, a sorted set's
    /// 8-byte scores that are numbers, members in order and distinct).
    pub fn decode(b: &[u8]) -> Result<Dump, DecodeError> {
        let bad = |what: &str| Err(DecodeError(format!("dump: {what}")));
        let [version, kind, rest @ ..] = b else {
            return bad("shorter than its header");
        };
        if *kind > 0x0f {
            return bad(&format!("unknown kind {kind}"));
        }
        if *version != DUMP_VERSION {
            return bad(&format!(
                "format version {version}, expected {DUMP_VERSION}"
            ));
        }
        let Some(kind) = Kind::from_flags(kind << crate::keyspace::KIND_SHIFT) else {
            return bad(&format!("unknown kind {kind}"));
        };
        if kind == Kind::String {
            return Ok(Dump::String(rest.to_vec()));
        }
        if rest.len() < 16 {
            return bad("composite header cut short");
        }
        let head = be_u64(&rest[..8]);
        let count = be_u64(&rest[8..16]);
        let mut at = &rest[16..];
        // Each member takes at least 8 bytes: a count beyond that is a lie.
        if count > (at.len() / 8) as u64 {
            return bad(&format!("{count} members in {} bytes", at.len()));
        }
        let mut members = Vec::with_capacity(count as usize);
        let take = |at: &mut &[u8]| -> Result<Vec<u8>, DecodeError> {
            if at.len() < 4 {
                return Err(DecodeError("dump: member cut short".into()));
            }
            let n = u32::from_be_bytes([at[0], at[1], at[2], at[3]]) as usize;
            if at.len() < 4 + n {
                return Err(DecodeError("dump: member cut short".into()));
            }
            let v = at[4..4 + n].to_vec();
            *at = &at[4 + n..];
            Ok(v)
        };
        for i in 0..count {
            let m = take(&mut at)?;
            let v = take(&mut at)?;
            if members
                .last()
                .is_some_and(|(p, _): &(Vec<u8>, Vec<u8>)| *p >= m)
            {
                return bad("members out of order");
            }
            match kind {
                Kind::List => {
                    let want = head.checked_add(i).map(u64::to_be_bytes);
                    if want.is_none_or(|w| m != w) {
                        return bad("list positions not consecutive from the head");
                    }
                }
                Kind::ZSet => {
                    let Ok(s) = <[u8; 8]>::try_from(v.as_slice()) else {
                        return bad("a score is not 8 bytes");
                    };
                    if f64::from_bits(u64::from_be_bytes(s)).is_nan() {
                        return bad("a score is not a number");
                    }
                }
                Kind::Set if !v.is_empty() => return bad("a set member with a value"),
                _ => {}
            }
            members.push((m, v));
        }
        if !at.is_empty() {
            return bad(&format!("{} bytes after the last member", at.len()));
        }
        if members.is_empty() {
            return bad("a composite value without members");
        }
        Ok(Dump::Composite {
            kind,
            head,
            members,
        })
    }
}

/// The dump of `e`, the value of `key`: a composite value's members are
/// read (on the read pool, from the snapshot its metadata is read from).
pub fn dump(ctx: &mut Ctx<'_>, key: &[u8], e: Entry) -> Result<Option<Vec<u8>>, Reply> {
    if !e.kind.is_composite() {
        return Ok(Some(Dump::String(Vec::from(e.value)).encode()));
    }
    // Read again: the members must belong to the metadata read.
    let Some(v) = ctx.composite(key, e.kind)? else {
        return Ok(None);
    };
    let mut members = ctx.all_members(key, e.kind, &v)?;
    if e.kind == Kind::ZSet {
        // Score records only (`'m' ‖ member`): the index is rebuilt.
        members.retain(|(m, _)| m.first() == Some(&b'm'));
        for (m, _) in &mut members {
            m.remove(0);
        }
    }
    Ok(Some(
        Dump::Composite {
            kind: e.kind,
            head: v.meta.head.unwrap_or(0),
            members,
        }
        .encode(),
    ))
}

/// Stores `d` at `key` with `expire_at`, replacing what `key` held; a
/// composite value gets a new version here.
pub fn restore(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    d: Dump,
    expire_at: Option<u64>,
) -> Result<(), Reply> {
    let (kind, head, members) = match d {
        Dump::String(v) => return ctx.put(key, &v, expire_at),
        Dump::Composite {
            kind,
            head,
            members,
        } => (kind, head, members),
    };
    let mut v: Value = ctx.new_composite_of(kind)?;
    v.expire_at = expire_at;
    if kind == Kind::List {
        v.meta.head = Some(head);
    }
    for (m, bytes) in &members {
        if kind == Kind::ZSet {
            check_member_len(ctx, key, m.len() + 9)?;
            let score = f64::from_bits(u64::from_be_bytes(
                <[u8; 8]>::try_from(bytes.as_slice()).map_err(|_| Reply::err("bad score"))?,
            ));
            super::zsets::restore_member(ctx, key, &v, m, score)?;
        } else {
            check_member_len(ctx, key, m.len())?;
            ctx.put_member(key, &v, m, bytes)?;
        }
    }
    v.meta.size = members.len() as u64;
    ctx.put_composite(key, kind, &v)
}

/// Decodes a dump argument, or the reply refusing it.
pub fn decode_arg(b: &[u8]) -> Result<Dump, Reply> {
    Dump::decode(b).map_err(|e| store_error(e.into()))
}

/// Used by the fuzz target: decodes arbitrary bytes, and re-encodes what
/// decodes (it must read back the same).
pub fn fuzz(data: &[u8]) {
    if let Ok(d) = Dump::decode(data) {
        let again = Dump::decode(&d.encode());
        assert_eq!(again.as_ref().ok(), Some(&d), "a dump reads back");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumps_round_trip_and_refuse_damage() {
        let s = Dump::String(b"hello".to_vec());
        assert_eq!(Dump::decode(&s.encode()).unwrap(), s);
        let h = Dump::Composite {
            kind: Kind::Hash,
            head: 0,
            members: vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), vec![])],
        };
        let enc = h.encode();
        assert_eq!(Dump::decode(&enc).unwrap(), h);
        for cut in 0..enc.len() {
            assert!(Dump::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(Dump::decode(&extra).is_err());
        let start = crate::members::LIST_START;
        let l = Dump::Composite {
            kind: Kind::List,
            head: start,
            members: vec![
                (start.to_be_bytes().to_vec(), b"x".to_vec()),
                ((start + 1).to_be_bytes().to_vec(), b"y".to_vec()),
            ],
        };
        assert_eq!(Dump::decode(&l.encode()).unwrap(), l);
        let gap = Dump::Composite {
            kind: Kind::List,
            head: start,
            members: vec![((start + 1).to_be_bytes().to_vec(), b"y".to_vec())],
        };
        assert!(Dump::decode(&gap.encode()).is_err());
        let nan = Dump::Composite {
            kind: Kind::ZSet,
            head: 0,
            members: vec![(b"m".to_vec(), f64::NAN.to_bits().to_be_bytes().to_vec())],
        };
        assert!(Dump::decode(&nan.encode()).is_err());
        let unordered = Dump::Composite {
            kind: Kind::Set,
            head: 0,
            members: vec![(b"b".to_vec(), vec![]), (b"a".to_vec(), vec![])],
        };
        assert!(Dump::decode(&unordered.encode()).is_err());
        assert!(Dump::decode(&[9, 0]).is_err());
        assert!(Dump::decode(&[1, 9]).is_err());
        // A count far beyond the bytes is refused before any allocation.
        let mut lie = vec![1, 1];
        lie.extend_from_slice(&0u64.to_be_bytes());
        lie.extend_from_slice(&u64::MAX.to_be_bytes());
        assert!(Dump::decode(&lie).is_err());
    }
}
