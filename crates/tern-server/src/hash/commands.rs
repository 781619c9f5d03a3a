//! The commands that touch the hash engine: strings, expiry and the
//! keyspace. Each runs on an engine thread with that thread's session;
//! single-key commands are atomic through the engine's read-modify-write,
//! multi-key ones (`MSET`, `DEL` of several keys) are atomic per key only.

use std::sync::Arc;

use tern_hash::{HashStore, Session, Update};

use super::value::{self, Value};
use crate::expiry::now_ms;
use crate::glob::glob_match;
use crate::resp::parser::parse_int;
use crate::resp::Reply;

/// What a command runs with.
pub struct Cx<'a> {
    /// The engine thread's session.
    pub session: &'a mut Session,
    /// The store (checkpoints).
    pub store: &'a Arc<HashStore>,
    /// Set when the command wrote.
    pub wrote: bool,
}

const NOT_INT: &str = "value is not an integer or out of range";
const SYNTAX: &str = "syntax error";
/// Largest string `SETRANGE` and `APPEND` may make, as in Redis; the hash
/// engine's page size may allow less ([`max_string`]).
const MAX_STRING: usize = 512 << 20;
const TOO_LONG: &str =
    "string exceeds maximum allowed size (the hash engine's page_bits or proto-max-bulk-len)";

/// The longest string `key` may hold: Redis's limit, or what fits in a log
/// page with the value's header.
fn max_string(cx: &Cx<'_>, key: &[u8]) -> usize {
    MAX_STRING.min(cx.store.max_value_len(key.len()).saturating_sub(9))
}

fn int(arg: &[u8]) -> Option<i64> {
    parse_int(arg)
}

fn engine_err(e: tern_hash::Error) -> Reply {
    Reply::err(format!("the hash engine failed: {e}"))
}

fn upper(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_uppercase()
}

/// Whether `name` is one of the commands here.
pub fn is_engine_command(name: &str) -> bool {
    ENGINE_COMMANDS.iter().any(|(n, _)| *n == name)
}

/// Engine commands and their arity (Redis's: negative means "at least").
pub const ENGINE_COMMANDS: &[(&str, i32)] = &[
    ("PING", -1),
    ("ECHO", 2),
    ("TIME", 1),
    ("GET", 2),
    ("SET", -3),
    ("SETNX", 3),
    ("SETEX", 4),
    ("PSETEX", 4),
    ("GETSET", 3),
    ("GETDEL", 2),
    ("GETEX", -2),
    ("MGET", -2),
    ("MSET", -3),
    ("DEL", -2),
    ("UNLINK", -2),
    ("EXISTS", -2),
    ("INCR", 2),
    ("DECR", 2),
    ("INCRBY", 3),
    ("DECRBY", 3),
    ("INCRBYFLOAT", 3),
    ("APPEND", 3),
    ("STRLEN", 2),
    ("GETRANGE", 4),
    ("SUBSTR", 4),
    ("SETRANGE", 4),
    ("EXPIRE", -3),
    ("PEXPIRE", -3),
    ("EXPIREAT", -3),
    ("PEXPIREAT", -3),
    ("TTL", 2),
    ("PTTL", 2),
    ("EXPIRETIME", 2),
    ("PEXPIRETIME", 2),
    ("PERSIST", 2),
    ("TYPE", 2),
    ("SCAN", -2),
    ("KEYS", 2),
    ("DBSIZE", 1),
    ("FLUSHDB", -1),
    ("FLUSHALL", -1),
    ("SAVE", 1),
    ("BGSAVE", -1),
];

/// Runs one engine command (its name upper-cased in `name`, arity checked).
pub fn run(cx: &mut Cx<'_>, name: &str, args: &[Vec<u8>]) -> Reply {
    let now = now_ms();
    let r = match name {
        "PING" => match args.len() {
            1 => Ok(Reply::Simple("PONG".into())),
            2 => Ok(Reply::Bulk(args[1].clone())),
            _ => Ok(Reply::err("wrong number of arguments for 'ping' command")),
        },
        "ECHO" => Ok(Reply::Bulk(args[1].clone())),
        "TIME" => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Ok(Reply::Array(vec![
                Reply::Bulk(t.as_secs().to_string().into_bytes()),
                Reply::Bulk(t.subsec_micros().to_string().into_bytes()),
            ]))
        }
        "GET" => get(cx, &args[1], now).map(|v| v.map_or(Reply::Nil, |v| Reply::Bulk(v.data))),
        "SET" => set(cx, args, now),
        "SETNX" => set_with(cx, &args[1], &args[2], None, Cond::Nx, false, now)
            .map(|(done, _)| Reply::Int(i64::from(done))),
        "SETEX" | "PSETEX" => {
            let unit = if name == "SETEX" { 1000 } else { 1 };
            match int(&args[2]) {
                None => Ok(Reply::err(NOT_INT)),
                Some(n) => match Some(n)
                    .filter(|&n| n > 0)
                    .and_then(|n| n.checked_mul(unit))
                    .and_then(|ms| ms.checked_add(now as i64))
                {
                    None => Ok(Reply::err(format!(
                        "invalid expire time in '{}' command",
                        name.to_ascii_lowercase()
                    ))),
                    Some(at) => set_with(
                        cx,
                        &args[1],
                        &args[3],
                        Some(at as u64),
                        Cond::Any,
                        false,
                        now,
                    )
                    .map(|_| Reply::Ok),
                },
            }
        }
        "GETSET" => set_with(cx, &args[1], &args[2], None, Cond::Any, false, now)
            .map(|(_, old)| old.map_or(Reply::Nil, Reply::Bulk)),
        "GETDEL" => {
            delete(cx, &args[1], now).map(|old| old.map_or(Reply::Nil, |v| Reply::Bulk(v.data)))
        }
        "GETEX" => getex(cx, args, now),
        "MGET" => args[1..]
            .iter()
            .map(|k| get(cx, k, now).map(|v| v.map_or(Reply::Nil, |v| Reply::Bulk(v.data))))
            .collect::<Result<Vec<_>, _>>()
            .map(Reply::Array),
        "MSET" => {
            if args.len() % 2 != 1 {
                return Reply::err("wrong number of arguments for 'mset' command");
            }
            let mut r = Ok(Reply::Ok);
            for pair in args[1..].chunks(2) {
                cx.wrote = true;
                if let Err(e) = cx.session.upsert(&pair[0], &value::encode(None, &pair[1])) {
                    r = Err(e);
                    break;
                }
            }
            r
        }
        "DEL" | "UNLINK" => {
            let mut n = 0;
            let mut r = Ok(());
            for k in &args[1..] {
                match delete(cx, k, now) {
                    Ok(old) => n += i64::from(old.is_some()),
                    Err(e) => {
                        r = Err(e);
                        break;
                    }
                }
            }
            r.map(|()| Reply::Int(n))
        }
        "EXISTS" => {
            let mut n = 0;
            let mut r = Ok(());
            for k in &args[1..] {
                match get(cx, k, now) {
                    Ok(v) => n += i64::from(v.is_some()),
                    Err(e) => {
                        r = Err(e);
                        break;
                    }
                }
            }
            r.map(|()| Reply::Int(n))
        }
        "INCR" => incr(cx, &args[1], 1, now),
        "DECR" => incr(cx, &args[1], -1, now),
        "INCRBY" | "DECRBY" => match int(&args[2]) {
            None => Ok(Reply::err(NOT_INT)),
            Some(by) if name == "DECRBY" => match by.checked_neg() {
                Some(by) => incr(cx, &args[1], by, now),
                None => Ok(Reply::err("decrement would overflow")),
            },
            Some(by) => incr(cx, &args[1], by, now),
        },
        "INCRBYFLOAT" => incr_float(cx, &args[1], &args[2], now),
        "APPEND" => append(cx, &args[1], &args[2], now),
        "STRLEN" => {
            get(cx, &args[1], now).map(|v| Reply::Int(v.map_or(0, |v| v.data.len() as i64)))
        }
        "GETRANGE" | "SUBSTR" => match (int(&args[2]), int(&args[3])) {
            (Some(a), Some(b)) => get(cx, &args[1], now)
                .map(|v| Reply::Bulk(range(&v.map(|v| v.data).unwrap_or_default(), a, b))),
            _ => Ok(Reply::err(NOT_INT)),
        },
        "SETRANGE" => setrange(cx, args, now),
        "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => expire(cx, name, args, now),
        "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME" => get(cx, &args[1], now).map(|v| {
            Reply::Int(match v {
                None => -2,
                Some(Value { expires: None, .. }) => -1,
                Some(Value {
                    expires: Some(at), ..
                }) => match name {
                    "TTL" => ((at - now) as i64 + 500) / 1000,
                    "PTTL" => (at - now) as i64,
                    "EXPIRETIME" => at as i64 / 1000,
                    _ => at as i64,
                },
            })
        }),
        "PERSIST" => persist(cx, &args[1], now),
        "TYPE" => get(cx, &args[1], now)
            .map(|v| Reply::Simple(if v.is_some() { "string" } else { "none" }.into())),
        "SCAN" => scan(cx, args, now),
        "KEYS" => {
            let mut keys = Vec::new();
            walk_keys(cx, now, |k| {
                if glob_match(&args[1], &k) {
                    keys.push(Reply::Bulk(k));
                }
            })
            .map(|()| Reply::Array(keys))
        }
        "DBSIZE" => {
            let mut n = 0;
            walk_keys(cx, now, |_| n += 1).map(|()| Reply::Int(n))
        }
        "FLUSHDB" | "FLUSHALL" => match args.get(1).map(|a| upper(a)).as_deref() {
            None | Some("ASYNC" | "SYNC") if args.len() <= 2 => flush(cx, now),
            _ => Ok(Reply::err(SYNTAX)),
        },
        "SAVE" | "BGSAVE" => cx.store.wait_durable(cx.store.sync_point()).map(|()| {
            if name == "SAVE" {
                Reply::Ok
            } else {
                Reply::Simple("Background saving started".into())
            }
        }),
        other => return Reply::err(format!("unknown command '{other}'")),
    };
    r.unwrap_or_else(engine_err)
}

type R<T> = Result<T, tern_hash::Error>;

/// The live value of `key`; an expired one is deleted on the way.
fn get(cx: &mut Cx<'_>, key: &[u8], now: u64) -> R<Option<Value>> {
    let Some(bytes) = cx.session.get(key)? else {
        return Ok(None);
    };
    match value::live(Some(&bytes), now) {
        Some(v) => Ok(Some(v)),
        None => {
            // Expired: deleted if it still is (a write may have replaced it).
            cx.session.update(key, |old| {
                if old.is_some() && value::live(old, now).is_none() {
                    Update::Delete
                } else {
                    Update::Keep
                }
            })?;
            Ok(None)
        }
    }
}

/// Deletes `key`, returning the live value it had.
fn delete(cx: &mut Cx<'_>, key: &[u8], now: u64) -> R<Option<Value>> {
    let mut old = None;
    cx.session.update(key, |bytes| {
        old = value::live(bytes, now);
        if bytes.is_some() {
            Update::Delete
        } else {
            Update::Keep
        }
    })?;
    cx.wrote |= old.is_some();
    Ok(old)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cond {
    Any,
    Nx,
    Xx,
}

/// Sets `key` if `cond` holds; returns whether it did and the old live
/// string.
fn set_with(
    cx: &mut Cx<'_>,
    key: &[u8],
    data: &[u8],
    expires: Option<u64>,
    cond: Cond,
    keep_ttl: bool,
    now: u64,
) -> R<(bool, Option<Vec<u8>>)> {
    let mut old = None;
    let done = cx.session.update(key, |bytes| {
        old = value::live(bytes, now);
        let ok = match cond {
            Cond::Any => true,
            Cond::Nx => old.is_none(),
            Cond::Xx => old.is_some(),
        };
        if !ok {
            return Update::Keep;
        }
        let expires = if keep_ttl {
            old.as_ref().and_then(|v| v.expires)
        } else {
            expires
        };
        Update::Write(value::encode(expires, data))
    })?;
    let done = matches!(done, Update::Write(_));
    cx.wrote |= done;
    Ok((done, old.map(|v| v.data)))
}

fn set(cx: &mut Cx<'_>, args: &[Vec<u8>], now: u64) -> R<Reply> {
    let (mut cond, mut get_old, mut keep_ttl) = (Cond::Any, false, false);
    // As Redis: an option may repeat but not meet its opposite, and the last
    // expiry given counts.
    let (mut unit, mut time): (Option<String>, Option<i64>) = (None, None);
    let mut i = 3;
    while i < args.len() {
        let opt = upper(&args[i]);
        match opt.as_str() {
            "NX" if cond != Cond::Xx => cond = Cond::Nx,
            "XX" if cond != Cond::Nx => cond = Cond::Xx,
            "GET" => get_old = true,
            "KEEPTTL" if unit.is_none() => keep_ttl = true,
            "EX" | "PX" | "EXAT" | "PXAT"
                if !keep_ttl && unit.as_deref().is_none_or(|u| u == opt) && i + 1 < args.len() =>
            {
                let Some(n) = int(&args[i + 1]) else {
                    return Ok(Reply::err(NOT_INT));
                };
                unit = Some(opt);
                time = Some(n);
                i += 1;
            }
            _ => return Ok(Reply::err(SYNTAX)),
        }
        i += 1;
    }
    let expires = match (unit.as_deref(), time) {
        (Some(unit), Some(n)) => match expiry_at(unit, n, now) {
            Some(at) => Some(at),
            None => return Ok(Reply::err("invalid expire time in 'set' command")),
        },
        _ => None,
    };
    if cond == Cond::Any && !get_old && !keep_ttl {
        cx.wrote = true;
        cx.session
            .upsert(&args[1], &value::encode(expires, &args[2]))?;
        return Ok(Reply::Ok);
    }
    let (done, old) = set_with(cx, &args[1], &args[2], expires, cond, keep_ttl, now)?;
    Ok(match (get_old, done) {
        (true, _) => old.map_or(Reply::Nil, Reply::Bulk),
        (false, true) => Reply::Ok,
        (false, false) => Reply::Nil,
    })
}

/// When an expiry of `n` in `unit` (EX, PX, EXAT or PXAT) from `now` falls,
/// Unix ms; `None` if it is not positive or overflows, as Redis refuses.
fn expiry_at(unit: &str, n: i64, now: u64) -> Option<u64> {
    if n <= 0 {
        return None;
    }
    let at = match unit {
        "EX" => n.checked_mul(1000)?.checked_add(now as i64)?,
        "PX" => n.checked_add(now as i64)?,
        "EXAT" => n.checked_mul(1000)?,
        _ => n,
    };
    Some(at as u64)
}

fn getex(cx: &mut Cx<'_>, args: &[Vec<u8>], now: u64) -> R<Reply> {
    let opt = args.get(2).map(|a| upper(a));
    let change: Option<Option<u64>> = match (args.len(), opt.as_deref()) {
        (2, _) => None,
        (3, Some("PERSIST")) => Some(None),
        (4, Some(unit @ ("EX" | "PX" | "EXAT" | "PXAT"))) => {
            let Some(n) = int(&args[3]) else {
                return Ok(Reply::err(NOT_INT));
            };
            match expiry_at(unit, n, now) {
                Some(at) => Some(Some(at)),
                None => return Ok(Reply::err("invalid expire time in 'getex' command")),
            }
        }
        _ => return Ok(Reply::err(SYNTAX)),
    };
    let Some(change) = change else {
        return get(cx, &args[1], now).map(|v| v.map_or(Reply::Nil, |v| Reply::Bulk(v.data)));
    };
    let mut got = None;
    cx.session.update(&args[1], |bytes| {
        got = value::live(bytes, now);
        match &got {
            None => Update::Keep,
            Some(v) => Update::Write(value::encode(change, &v.data)),
        }
    })?;
    cx.wrote |= got.is_some();
    Ok(got.map_or(Reply::Nil, |v| Reply::Bulk(v.data)))
}

/// Applies `f` to the live string of `key` (empty when absent), keeping
/// its expiry; `f` returns the new string or an error reply.
fn modify(
    cx: &mut Cx<'_>,
    key: &[u8],
    now: u64,
    mut f: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>, Reply>,
) -> R<Result<Vec<u8>, Reply>> {
    let mut out = Err(Reply::err("no result"));
    cx.session.update(key, |bytes| {
        let old = value::live(bytes, now);
        out = f(old.as_ref().map(|v| &v.data[..]));
        match &out {
            Ok(new) => Update::Write(value::encode(old.and_then(|v| v.expires), new)),
            Err(_) => Update::Keep,
        }
    })?;
    cx.wrote |= out.is_ok();
    Ok(out)
}

fn incr(cx: &mut Cx<'_>, key: &[u8], by: i64, now: u64) -> R<Reply> {
    let r = modify(cx, key, now, |old| {
        let n = old.map_or(Some(0), int);
        let n = n.ok_or_else(|| Reply::err(NOT_INT))?;
        let n = n
            .checked_add(by)
            .ok_or_else(|| Reply::err("increment or decrement would overflow"))?;
        Ok(n.to_string().into_bytes())
    })?;
    Ok(match r {
        Ok(v) => Reply::Int(int(&v).unwrap_or_default()),
        Err(e) => e,
    })
}

fn incr_float(cx: &mut Cx<'_>, key: &[u8], by: &[u8], now: u64) -> R<Reply> {
    let float = |b: &[u8]| {
        std::str::from_utf8(b)
            .ok()
            .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|f| f.is_finite())
    };
    let Some(by) = float(by) else {
        return Ok(Reply::err("value is not a valid float"));
    };
    let r = modify(cx, key, now, |old| {
        let n = old.map_or(Some(0.0), float);
        let n = n.ok_or_else(|| Reply::err("value is not a valid float"))? + by;
        if !n.is_finite() {
            return Err(Reply::err("increment would produce NaN or Infinity"));
        }
        Ok(crate::resp::reply::format_double(n).into_bytes())
    })?;
    Ok(match r {
        Ok(v) => Reply::Bulk(v),
        Err(e) => e,
    })
}

fn append(cx: &mut Cx<'_>, key: &[u8], tail: &[u8], now: u64) -> R<Reply> {
    let max = max_string(cx, key);
    let r = modify(cx, key, now, |old| {
        let old = old.unwrap_or_default();
        if old.len() + tail.len() > max {
            return Err(Reply::err(TOO_LONG));
        }
        let mut v = Vec::with_capacity(old.len() + tail.len());
        v.extend_from_slice(old);
        v.extend_from_slice(tail);
        Ok(v)
    })?;
    Ok(match r {
        Ok(v) => Reply::Int(v.len() as i64),
        Err(e) => e,
    })
}

fn setrange(cx: &mut Cx<'_>, args: &[Vec<u8>], now: u64) -> R<Reply> {
    let Some(offset) = int(&args[2]) else {
        return Ok(Reply::err(NOT_INT));
    };
    if offset < 0 {
        return Ok(Reply::err("offset is out of range"));
    }
    let (offset, patch) = (offset as usize, &args[3]);
    if patch.is_empty() {
        return get(cx, &args[1], now).map(|v| Reply::Int(v.map_or(0, |v| v.data.len() as i64)));
    }
    if offset.saturating_add(patch.len()) > max_string(cx, &args[1]) {
        return Ok(Reply::err(TOO_LONG));
    }
    let r = modify(cx, &args[1], now, |old| {
        let mut v = old.unwrap_or_default().to_vec();
        if v.len() < offset + patch.len() {
            v.resize(offset + patch.len(), 0);
        }
        v[offset..offset + patch.len()].copy_from_slice(patch);
        Ok(v)
    })?;
    Ok(match r {
        Ok(v) => Reply::Int(v.len() as i64),
        Err(e) => e,
    })
}

/// `GETRANGE`'s slice, with Redis's negative and out-of-range indexes.
fn range(s: &[u8], start: i64, end: i64) -> Vec<u8> {
    let len = s.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        return Vec::new();
    }
    let fix = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (fix(start), fix(end).min(len - 1));
    if start > end {
        return Vec::new();
    }
    s[start as usize..=end as usize].to_vec()
}

fn expire(cx: &mut Cx<'_>, name: &str, args: &[Vec<u8>], now: u64) -> R<Reply> {
    // Options first, then the time, as Redis checks them.
    let mut flags = (false, false, false, false);
    for a in &args[3..] {
        match upper(a).as_str() {
            "NX" => flags.0 = true,
            "XX" => flags.1 = true,
            "GT" => flags.2 = true,
            "LT" => flags.3 = true,
            other => return Ok(Reply::err(format!("Unsupported option {other}"))),
        }
    }
    let (nx, xx, gt, lt) = flags;
    if nx && (xx || gt || lt) {
        return Ok(Reply::err(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if gt && lt {
        return Ok(Reply::err(
            "GT and LT options at the same time are not compatible",
        ));
    }
    let Some(n) = int(&args[2]) else {
        return Ok(Reply::err(NOT_INT));
    };
    let at = match name {
        "EXPIRE" => n
            .checked_mul(1000)
            .and_then(|ms| ms.checked_add(now as i64)),
        "PEXPIRE" => n.checked_add(now as i64),
        "EXPIREAT" => n.checked_mul(1000),
        _ => Some(n),
    };
    let Some(at) = at else {
        return Ok(Reply::err(format!(
            "invalid expire time in '{}' command",
            name.to_ascii_lowercase()
        )));
    };
    let mut changed = false;
    cx.session.update(&args[1], |bytes| {
        changed = false;
        let Some(v) = value::live(bytes, now) else {
            return Update::Keep;
        };
        let ok = match v.expires {
            None => !xx && !gt,
            Some(cur) => !nx && (!gt || at > cur as i64) && (!lt || at < cur as i64),
        };
        if !ok {
            return Update::Keep;
        }
        changed = true;
        if at <= now as i64 {
            Update::Delete
        } else {
            Update::Write(value::encode(Some(at as u64), &v.data))
        }
    })?;
    cx.wrote |= changed;
    Ok(Reply::Int(i64::from(changed)))
}

fn persist(cx: &mut Cx<'_>, key: &[u8], now: u64) -> R<Reply> {
    let mut changed = false;
    cx.session
        .update(key, |bytes| match value::live(bytes, now) {
            Some(v) if v.expires.is_some() => {
                changed = true;
                Update::Write(value::encode(None, &v.data))
            }
            _ => {
                changed = false;
                Update::Keep
            }
        })?;
    cx.wrote |= changed;
    Ok(Reply::Int(i64::from(changed)))
}

/// Bytes of a stored value that say whether it is live: the header and
/// the expiry.
const VALUE_HEADER: usize = 9;

/// Calls `f` with every live key (a walk of the whole index), a page at a
/// time.
fn walk_keys(cx: &mut Cx<'_>, now: u64, mut f: impl FnMut(Vec<u8>)) -> R<()> {
    let mut cursor = 0;
    loop {
        let mut page = Vec::new();
        cursor = cx.session.scan(cursor, 4096, VALUE_HEADER, &mut page)?;
        for (k, v) in page {
            if value::live_header(&v, now) {
                f(k);
            }
        }
        if cursor == 0 {
            return Ok(());
        }
    }
}

fn scan(cx: &mut Cx<'_>, args: &[Vec<u8>], now: u64) -> R<Reply> {
    let Some(cursor) = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Ok(Reply::err("invalid cursor"));
    };
    let (mut pattern, mut count, mut kind) = (None, 10usize, None);
    let mut i = 2;
    while i < args.len() {
        let Some(arg) = args.get(i + 1) else {
            return Ok(Reply::err(SYNTAX));
        };
        match upper(&args[i]).as_str() {
            "MATCH" => pattern = Some(arg.clone()),
            "COUNT" => match int(arg) {
                // Bounded: a page is built in memory.
                Some(n) if n > 0 => count = (n as usize).min(1 << 16),
                Some(_) => return Ok(Reply::err(SYNTAX)),
                None => return Ok(Reply::err(NOT_INT)),
            },
            "TYPE" => kind = Some(upper(arg)),
            _ => return Ok(Reply::err(SYNTAX)),
        }
        i += 2;
    }
    let mut page = Vec::new();
    let next = cx.session.scan(cursor, count, VALUE_HEADER, &mut page)?;
    let keys = page
        .into_iter()
        .filter(|(_, v)| value::live_header(v, now))
        .map(|(k, _)| k)
        .filter(|k| pattern.as_ref().is_none_or(|p| glob_match(p, k)))
        .filter(|_| kind.as_deref().is_none_or(|t| t == "STRING"))
        .map(Reply::Bulk)
        .collect();
    Ok(Reply::Array(vec![
        Reply::Bulk(next.to_string().into_bytes()),
        Reply::Array(keys),
    ]))
}

fn flush(cx: &mut Cx<'_>, now: u64) -> R<Reply> {
    let mut cursor = 0;
    loop {
        let mut page = Vec::new();
        cursor = cx.session.scan(cursor, 4096, 0, &mut page)?;
        for (k, _) in page {
            delete(cx, &k, now)?;
        }
        if cursor == 0 {
            return Ok(Reply::Ok);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_redis() {
        assert_eq!(range(b"Hello World", 0, 4), b"Hello");
        assert_eq!(range(b"Hello World", -5, -1), b"World");
        assert_eq!(range(b"Hello World", 5, 2), b"");
        assert_eq!(range(b"Hello World", 0, 100), b"Hello World");
        assert_eq!(range(b"", 0, 1), b"");
        assert_eq!(range(b"1", -1, -2), b"");
    }
}
