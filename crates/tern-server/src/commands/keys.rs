//! Keyspace commands: DEL/UNLINK, EXISTS, the EXPIRE family, TTL/PTTL,
//! PERSIST, TYPE, SCAN, KEYS, DBSIZE, FLUSHDB/FLUSHALL, RANDOMKEY.
//!
//! Commands that walk the keyspace iterate the engine over the string
//! namespace, skipping expired values, so DBSIZE and KEYS cost time linear
//! in the number of keys.

use super::strings::{read_any, tri};
use super::{int_arg, store_error, syntax_error, Ctx};
use crate::expiry::now_ms;
use crate::glob::glob_match;
use crate::keyspace::{decode_header, generation_bounds, Header, Kind, NS_KEYS};
use crate::resp::Reply;

/// SCAN's default COUNT.
const DEFAULT_SCAN_COUNT: usize = 10;

/// DEL key [key ...] (also UNLINK)
pub fn del(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    // Every key is read before any is deleted, so an error leaves nothing
    // half done.
    let mut seen = std::collections::HashSet::new();
    let mut found = Vec::new();
    for k in &args[1..] {
        if seen.insert(k.as_slice()) && tri!(ctx.get(k).map_err(store_error)).is_some() {
            found.push(k);
        }
    }
    for k in &found {
        tri!(ctx.delete(k));
    }
    Reply::Int(found.len() as i64)
}

/// EXISTS key [key ...]
pub fn exists(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut n = 0;
    for k in &args[1..] {
        if tri!(ctx.get(k).map_err(store_error)).is_some() {
            n += 1;
        }
    }
    Reply::Int(n)
}

const EXPIRE_NX: u8 = 1;
const EXPIRE_XX: u8 = 2;
const EXPIRE_GT: u8 = 4;
const EXPIRE_LT: u8 = 8;

fn expire_generic(
    ctx: &mut Ctx<'_>,
    args: &[Vec<u8>],
    seconds: bool,
    relative: bool,
    cmd: &str,
) -> Reply {
    let mut flags = 0;
    for a in &args[3..] {
        flags |= match a.to_ascii_uppercase().as_slice() {
            b"NX" => EXPIRE_NX,
            b"XX" => EXPIRE_XX,
            b"GT" => EXPIRE_GT,
            b"LT" => EXPIRE_LT,
            _ => return Reply::err(format!("Unsupported option {}", String::from_utf8_lossy(a))),
        };
    }
    if flags & EXPIRE_NX != 0 && flags & (EXPIRE_XX | EXPIRE_GT | EXPIRE_LT) != 0 {
        return Reply::err("NX and XX, GT or LT options at the same time are not compatible");
    }
    if flags & EXPIRE_GT != 0 && flags & EXPIRE_LT != 0 {
        return Reply::err("GT and LT options at the same time are not compatible");
    }
    let mut when = tri!(int_arg(&args[2]));
    let invalid = || Reply::err(format!("invalid expire time in '{cmd}' command"));
    if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return invalid();
        }
        when *= 1000;
    }
    let now = now_ms() as i64;
    if relative {
        if when > i64::MAX - now {
            return invalid();
        }
        when += now;
    }
    let key = &args[1];
    let Some(e) = tri!(ctx.get(key).map_err(store_error)) else {
        return Reply::Int(0);
    };
    let cur = e.expire_at.map(|t| t as i64);
    let refused = (flags & EXPIRE_NX != 0 && cur.is_some())
        || (flags & EXPIRE_XX != 0 && cur.is_none())
        || (flags & EXPIRE_GT != 0 && cur.is_none_or(|c| when <= c))
        || (flags & EXPIRE_LT != 0 && cur.is_some_and(|c| when >= c));
    if refused {
        return Reply::Int(0);
    }
    if when <= now {
        tri!(ctx.delete(key));
    } else {
        tri!(ctx.put_kind(key, e.kind, &e.value, Some(when as u64)));
    }
    Reply::Int(1)
}

/// EXPIRE key seconds [NX|XX|GT|LT]
pub fn expire(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    expire_generic(ctx, args, true, true, "expire")
}

/// PEXPIRE key milliseconds [NX|XX|GT|LT]
pub fn pexpire(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    expire_generic(ctx, args, false, true, "pexpire")
}

/// EXPIREAT key unix-time-seconds [NX|XX|GT|LT]
pub fn expireat(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    expire_generic(ctx, args, true, false, "expireat")
}

/// PEXPIREAT key unix-time-milliseconds [NX|XX|GT|LT]
pub fn pexpireat(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    expire_generic(ctx, args, false, false, "pexpireat")
}

fn ttl_generic(ctx: &mut Ctx<'_>, key: &[u8], ms: bool, absolute: bool) -> Reply {
    let now = now_ms();
    let Some(e) = tri!(ctx.get_at(key, now).map_err(store_error)) else {
        return Reply::Int(-2);
    };
    let Some(t) = e.expire_at else {
        return Reply::Int(-1);
    };
    let v = if absolute { t } else { t.saturating_sub(now) } as i64;
    Reply::Int(if ms { v } else { (v + 500) / 1000 })
}

/// TTL key
pub fn ttl(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    ttl_generic(ctx, &args[1], false, false)
}

/// PTTL key
pub fn pttl(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    ttl_generic(ctx, &args[1], true, false)
}

/// EXPIRETIME key
pub fn expiretime(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    ttl_generic(ctx, &args[1], false, true)
}

/// PEXPIRETIME key
pub fn pexpiretime(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    ttl_generic(ctx, &args[1], true, true)
}

/// PERSIST key
pub fn persist(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    match tri!(ctx.get(key).map_err(store_error)) {
        Some(e) if e.expire_at.is_some() => {
            tri!(ctx.put_kind(key, e.kind, &e.value, None));
            Reply::Int(1)
        }
        _ => Reply::Int(0),
    }
}

/// TOUCH key [key ...]
///
/// Tern keeps no access times: TOUCH counts the keys that exist.
pub fn touch(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    exists(ctx, args)
}

/// TYPE key
pub fn type_(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let t = match tri!(read_any(ctx, &args[1])) {
        Some(e) => e.kind.name(),
        None => "none",
    };
    Reply::Simple(t.into())
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
///
/// Cursors are opaque integers naming a resume key remembered by the
/// connection; `0` starts and ends an iteration. A cursor the connection
/// does not know (from another connection, or long forgotten) ends the
/// iteration.
pub fn scan(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(cursor) = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Reply::err("invalid cursor");
    };
    let mut pattern: Option<&[u8]> = None;
    let mut count = DEFAULT_SCAN_COUNT;
    let mut only: Option<Kind> = None;
    let mut unknown_type = false;
    let mut i = 2;
    while i < args.len() {
        let opt = args[i].to_ascii_lowercase();
        let Some(val) = args.get(i + 1) else {
            return syntax_error();
        };
        match opt.as_slice() {
            b"count" => {
                let c = tri!(int_arg(val));
                if c < 1 {
                    return syntax_error();
                }
                count = c.min(1 << 20) as usize;
            }
            b"match" => pattern = Some(val),
            b"type" => {
                let t = val.to_ascii_lowercase();
                only = [Kind::String, Kind::Hash, Kind::Set, Kind::ZSet, Kind::List]
                    .into_iter()
                    .find(|k| k.name().as_bytes() == t.as_slice());
                // Redis 7.0 matches an unknown type name against nothing.
                unknown_type = only.is_none();
            }
            _ => return syntax_error(),
        }
        i += 2;
    }
    let from: Vec<u8> = if cursor == 0 {
        Vec::new()
    } else {
        match ctx.session.cursor(cursor) {
            Some(k) => k.to_vec(),
            None => return ctx.session.scan_reply(None, Vec::new()),
        }
    };
    let mut keys = Vec::new();
    let next = tri!(scan_keys(ctx, &from, count, |k, h| {
        let typed = !unknown_type && only.is_none_or(|t| t == h.kind);
        if typed && pattern.is_none_or(|p| glob_match(p, k)) {
            keys.push(Reply::Bulk(k.to_vec()));
        }
        true
    }));
    ctx.session.scan_reply(next, keys)
}

/// KEYS pattern
pub fn keys(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut out = Vec::new();
    let p = &args[1];
    let all = p.as_slice() == b"*";
    tri!(scan_keys(ctx, b"", usize::MAX, |k, _| {
        if all || glob_match(p, k) {
            out.push(Reply::Bulk(k.to_vec()));
        }
        true
    }));
    Reply::Array(out)
}

/// DBSIZE: the committed key count (inside EXEC, with the writes queued
/// before it), expired keys not yet removed included (as Redis counts
/// them); no walk of the store.
pub fn dbsize(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    let keys = match ctx.pending() {
        Ok(p) => p.keys(),
        Err(_) => ctx.store().meta().keys,
    };
    Reply::Int(keys as i64)
}

/// [`crate::store::Store::scan`], with the pending writes merged in when
/// the command runs on the committer (inside EXEC, after queued writes).
pub(crate) fn scan_keys(
    ctx: &mut Ctx<'_>,
    from: &[u8],
    limit: usize,
    mut f: impl FnMut(&[u8], Header) -> bool,
) -> Result<Option<Vec<u8>>, Reply> {
    let state = ctx.state;
    let store = &state.store;
    let layout = store.layout();
    let Ok(p) = ctx.pending() else {
        return store.scan(from, limit, f).map_err(store_error);
    };
    let gen = p.generation();
    let lo = layout.key(gen, from);
    let hi = generation_bounds(NS_KEYS, gen).1;
    let pend = p.range(&lo, &hi);
    if pend.is_empty() {
        return store.scan(from, limit, f).map_err(store_error);
    }
    // Enough stored keys that `limit` remain after the pending deletes.
    let mut merged = std::collections::BTreeMap::new();
    let resume = store
        .scan(from, limit.saturating_add(pend.len()), |k, h| {
            merged.insert(k.to_vec(), Some(h));
            true
        })
        .map_err(store_error)?;
    let now = now_ms();
    let plen = layout.prefix_len();
    for (k, v) in pend {
        let key = k[plen..].to_vec();
        if resume.as_ref().is_some_and(|r| key >= *r) {
            break;
        }
        let header = match v {
            Some(v) => decode_header(&v, false)
                .map_err(|e| store_error(e.into()))?
                .filter(|h| !h.expired(now)),
            None => None,
        };
        merged.insert(key, header);
    }
    let mut live = merged.into_iter().filter_map(|(k, h)| Some((k, h?)));
    for (seen, (k, h)) in live.by_ref().enumerate() {
        if seen >= limit || !f(&k, h) {
            return Ok(live.next().map(|(k, _)| k).or(resume));
        }
    }
    Ok(resume)
}

/// FLUSHDB [ASYNC|SYNC] (also FLUSHALL): starts a new generation, one
/// small write; compaction removes the old keys in the background.
pub fn flushdb(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() > 2
        || args
            .get(1)
            .is_some_and(|a| !a.eq_ignore_ascii_case(b"async") && !a.eq_ignore_ascii_case(b"sync"))
    {
        return syntax_error();
    }
    // A node moving slots in or out would lose (or half bring back) keys
    // the other side still needs.
    if let Some(c) = &ctx.state.cluster {
        if c.view().in_migration() {
            return Reply::err(
                "a slot migration to or from this node is under way; retry once `tern cluster status` shows none",
            );
        }
    }
    // The committer committed what was pending before this command ran,
    // and starts the next writes from the new generation.
    tri!(ctx.pending());
    let store = ctx.store();
    // A flush changes the watched keys that exist (expired or not).
    let mut flushed = Vec::new();
    for k in store.watches.keys() {
        let ek = store.layout().key(store.generation(), &k);
        if tri!(store.key_state(&ek).map_err(store_error)).exists {
            flushed.push(k);
        }
    }
    tri!(store.flush_all().map_err(store_error));
    store.watches.touch(flushed.iter().map(Vec::as_slice));
    Reply::Ok
}

/// A pseudo-random 64-bit number (not for security).
pub(crate) fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    xxhash_rust::xxh3::xxh3_64(&[t.to_le_bytes(), n.to_le_bytes()].concat())
}

/// RANDOMKEY
///
/// Seeks to a random point between the first and the last key and returns
/// the key found there: every key can be returned, though not with equal
/// probability.
pub fn randomkey(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    if ctx.pending().is_ok() {
        // Inside EXEC: the first live key, pending writes included.
        let mut first = None;
        tri!(scan_keys(ctx, b"", usize::MAX, |k, _| {
            first = Some(k.to_vec());
            false
        }));
        return first.map_or(Reply::Nil, Reply::Bulk);
    }
    let store = ctx.store();
    let Some(first) = tri!(store.first_key_from(b"").map_err(store_error)) else {
        return Reply::Nil;
    };
    let Some(last) = tri!(store.last_key().map_err(store_error)) else {
        return Reply::Bulk(first);
    };
    let cp = first.iter().zip(&last).take_while(|(a, b)| a == b).count();
    let mut target = last[..cp].to_vec();
    let lo = first.get(cp).copied().unwrap_or(0) as u64;
    let hi = last.get(cp).copied().unwrap_or(0) as u64;
    let r = random_u64();
    if hi > lo {
        target.push((lo + r % (hi - lo + 1)) as u8);
    }
    target.extend_from_slice(&random_u64().to_be_bytes());
    match tri!(store.first_key_from(&target).map_err(store_error)) {
        Some(k) => Reply::Bulk(k),
        None => Reply::Bulk(first),
    }
}
