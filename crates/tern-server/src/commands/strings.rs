//! String commands: GET, SET and its variants, MGET/MSET, the INCR family,
//! APPEND, STRLEN, GETRANGE, SETRANGE.
//!
//! Commands that write run on the committer, the one thread that runs
//! writes, so a command that reads a key and writes it back is atomic
//! without a lock (see [`crate::exec`]).

use super::{int_arg, store_error, syntax_error, Ctx};
use crate::expiry::now_ms;
use crate::keyspace::{Entry, Kind};
use crate::resp::Reply;

/// Unwraps a `Result<T, Reply>`, returning the reply on error.
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(r) => return r,
        }
    };
}
pub(crate) use tri;

/// Reads string `key`, counting a hit or a miss: `WRONGTYPE` if it holds
/// another kind.
pub(crate) fn read(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Entry>, Reply> {
    let e = read_any(ctx, key)?;
    match e {
        Some(e) if e.kind != Kind::String => Err(super::wrong_type()),
        e => Ok(e),
    }
}

/// Reads `key` whatever it holds, counting a hit or a miss.
pub(crate) fn read_any(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Entry>, Reply> {
    let e = ctx.get(key).map_err(store_error)?;
    if e.is_some() {
        ctx.hits += 1;
    } else {
        ctx.misses += 1;
    }
    Ok(e)
}

/// Writes `key`.
pub(crate) fn write(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    value: &[u8],
    expire_at: Option<u64>,
) -> Result<(), Reply> {
    ctx.put(key, value, expire_at)
}

/// `ERR string exceeds maximum allowed size (proto-max-bulk-len)` unless
/// `len` fits.
fn check_len(ctx: &Ctx<'_>, len: u64) -> Result<(), Reply> {
    if len > ctx.state.config.proto_max_bulk_len as u64 {
        return Err(Reply::err(
            "string exceeds maximum allowed size (proto-max-bulk-len)",
        ));
    }
    Ok(())
}

/// The reply for a value that may be absent.
fn value_reply(e: Option<Entry>) -> Reply {
    match e {
        Some(e) => Reply::Value(e.value),
        None => Reply::Nil,
    }
}

/// How a command asked for the expiry to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpiryChange {
    /// Remove any expiry (plain SET).
    Clear,
    /// Keep the current expiry (KEEPTTL, or GETEX without options).
    Keep,
    /// Expire at this unix-ms time.
    At(u64),
}

/// Converts a time argument to an absolute unix-ms time as Redis's
/// `getExpireMillisecondsOrReply` does; `cmd` names the command in the
/// error.
pub(crate) fn expire_time(
    arg: &[u8],
    seconds: bool,
    relative: bool,
    cmd: &str,
) -> Result<u64, Reply> {
    let v = int_arg(arg)?;
    let invalid = || Reply::err(format!("invalid expire time in '{cmd}' command"));
    if v <= 0 || (seconds && v > i64::MAX / 1000) {
        return Err(invalid());
    }
    let mut ms = if seconds { v * 1000 } else { v };
    if relative {
        ms = ms.checked_add(now_ms() as i64).ok_or_else(invalid)?;
    }
    if ms <= 0 {
        return Err(invalid());
    }
    Ok(ms as u64)
}

/// Options of SET and GETEX.
#[derive(Debug, Default)]
struct SetOptions {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    /// (unit is seconds, relative, argument)
    expire: Option<(bool, bool, Vec<u8>)>,
}

/// Parses SET (`is_set`) or GETEX options starting at `args[first]`, as
/// Redis's `parseExtendedStringArgumentsOrReply`.
fn parse_set_options(args: &[Vec<u8>], first: usize, is_set: bool) -> Result<SetOptions, Reply> {
    let mut o = SetOptions::default();
    let mut j = first;
    while j < args.len() {
        let opt = args[j].to_ascii_uppercase();
        let next = args.get(j + 1);
        let has_exp_kind = |o: &SetOptions, allowed: (bool, bool)| match &o.expire {
            None => false,
            Some((s, r, _)) => (*s, *r) != allowed,
        };
        match opt.as_slice() {
            b"NX" if !o.xx && is_set => o.nx = true,
            b"XX" if !o.nx && is_set => o.xx = true,
            b"GET" if is_set => o.get = true,
            b"KEEPTTL" if is_set && !o.persist && o.expire.is_none() => o.keepttl = true,
            b"PERSIST" if !is_set && !o.keepttl && o.expire.is_none() => o.persist = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT" if next.is_some() => {
                let kind = match opt.as_slice() {
                    b"EX" => (true, true),
                    b"PX" => (false, true),
                    b"EXAT" => (true, false),
                    _ => (false, false),
                };
                if o.keepttl || o.persist || has_exp_kind(&o, kind) {
                    return Err(syntax_error());
                }
                o.expire = Some((kind.0, kind.1, next.cloned().unwrap_or_default()));
                j += 1;
            }
            _ => return Err(syntax_error()),
        }
        j += 1;
    }
    Ok(o)
}

fn resolve_expire(o: &SetOptions, cmd: &str) -> Result<ExpiryChange, Reply> {
    Ok(match &o.expire {
        Some((secs, rel, arg)) => ExpiryChange::At(expire_time(arg, *secs, *rel, cmd)?),
        None if o.keepttl => ExpiryChange::Keep,
        None if o.persist => ExpiryChange::Clear,
        None => ExpiryChange::Clear,
    })
}

/// GET key
pub fn get(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    value_reply(tri!(read(ctx, &args[1])))
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL]
pub fn set(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let o = tri!(parse_set_options(args, 3, true));
    let change = tri!(resolve_expire(&o, "set"));
    let key = &args[1];
    let needs_read = o.nx || o.xx || o.get || change == ExpiryChange::Keep;
    // SET overwrites a key of any kind; only GET needs the old string.
    let old = if o.get {
        tri!(read(ctx, key))
    } else if needs_read {
        tri!(read_any(ctx, key))
    } else {
        None
    };
    let found = old.is_some();
    let old_reply = if o.get {
        value_reply(old.clone())
    } else {
        Reply::Nil
    };
    if (o.nx && found) || (o.xx && !found) {
        return old_reply;
    }
    let expire_at = match change {
        ExpiryChange::At(t) => Some(t),
        ExpiryChange::Keep => old.and_then(|e| e.expire_at),
        ExpiryChange::Clear => None,
    };
    tri!(write(ctx, key, &args[2], expire_at));
    if o.get {
        old_reply
    } else {
        Reply::Ok
    }
}

/// SETNX key value
pub fn setnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if tri!(read_any(ctx, &args[1])).is_some() {
        return Reply::Int(0);
    }
    tri!(write(ctx, &args[1], &args[2], None));
    Reply::Int(1)
}

fn set_with_expiry(ctx: &mut Ctx<'_>, args: &[Vec<u8>], seconds: bool, cmd: &str) -> Reply {
    let at = tri!(expire_time(&args[2], seconds, true, cmd));
    tri!(write(ctx, &args[1], &args[3], Some(at)));
    Reply::Ok
}

/// SETEX key seconds value
pub fn setex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    set_with_expiry(ctx, args, true, "setex")
}

/// PSETEX key milliseconds value
pub fn psetex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    set_with_expiry(ctx, args, false, "psetex")
}

/// GETSET key value
pub fn getset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let old = tri!(read(ctx, &args[1]));
    tri!(write(ctx, &args[1], &args[2], None));
    value_reply(old)
}

/// GETDEL key
pub fn getdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let old = tri!(read(ctx, &args[1]));
    if old.is_some() {
        tri!(ctx.delete(&args[1]));
    }
    value_reply(old)
}

/// GETEX key [EX s|PX ms|EXAT t|PXAT t|PERSIST]
pub fn getex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let o = tri!(parse_set_options(args, 2, false));
    let change = if o.expire.is_none() && !o.persist {
        ExpiryChange::Keep
    } else {
        tri!(resolve_expire(&o, "getex"))
    };
    let key = &args[1];
    let Some(e) = tri!(read(ctx, key)) else {
        return Reply::Nil;
    };
    match change {
        ExpiryChange::Keep => {}
        ExpiryChange::Clear if e.expire_at.is_none() => {}
        ExpiryChange::Clear => tri!(write(ctx, key, &e.value, None)),
        ExpiryChange::At(t) if t <= now_ms() => {
            tri!(ctx.delete(key))
        }
        ExpiryChange::At(t) => tri!(write(ctx, key, &e.value, Some(t))),
    }
    Reply::Value(e.value)
}

/// MGET key [key ...]
pub fn mget(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut out = Vec::with_capacity(args.len() - 1);
    for k in &args[1..] {
        // A key of another kind reads as nil here, not WRONGTYPE.
        let e = tri!(read_any(ctx, k)).filter(|e| e.kind == Kind::String);
        out.push(value_reply(e));
    }
    Reply::Array(out)
}

/// MSET key value [key value ...]
pub fn mset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() % 2 == 0 {
        return super::wrong_arity("mset");
    }
    for kv in args[1..].chunks(2) {
        tri!(ctx.put(&kv[0], &kv[1], None));
    }
    Reply::Ok
}

/// MSETNX key value [key value ...]
pub fn msetnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() % 2 == 0 {
        return super::wrong_arity("msetnx");
    }
    for k in args[1..].iter().step_by(2) {
        if tri!(read_any(ctx, k)).is_some() {
            return Reply::Int(0);
        }
    }
    for kv in args[1..].chunks(2) {
        tri!(ctx.put(&kv[0], &kv[1], None));
    }
    Reply::Int(1)
}

fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], by: i64) -> Reply {
    let old = tri!(read(ctx, key));
    let (cur, exp) = match &old {
        Some(e) => match crate::resp::parser::parse_int(&e.value) {
            Some(v) => (v, e.expire_at),
            None => return super::not_integer(),
        },
        None => (0, None),
    };
    let Some(new) = cur.checked_add(by) else {
        return Reply::err("increment or decrement would overflow");
    };
    tri!(write(ctx, key, new.to_string().as_bytes(), exp));
    Reply::Int(new)
}

/// INCR key
pub fn incr(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    incr_by(ctx, &args[1], 1)
}

/// DECR key
pub fn decr(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    incr_by(ctx, &args[1], -1)
}

/// INCRBY key increment
pub fn incrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let by = tri!(int_arg(&args[2]));
    incr_by(ctx, &args[1], by)
}

/// DECRBY key decrement
pub fn decrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let by = tri!(int_arg(&args[2]));
    if by == i64::MIN {
        return Reply::err("decrement would overflow");
    }
    incr_by(ctx, &args[1], -by)
}

/// Parses a float as Redis's `string2ld` (no spaces, no NaN).
pub(crate) fn parse_float(s: &[u8]) -> Option<f64> {
    if s.is_empty() || s.len() > 5000 || s[0].is_ascii_whitespace() {
        return None;
    }
    let v: f64 = std::str::from_utf8(s).ok()?.parse().ok()?;
    if v.is_nan() {
        return None;
    }
    Some(v)
}

/// Formats a float as Redis's human-readable form: fixed point, at most 17
/// decimals, no trailing zeros. Redis computes in `long double`; rounding
/// to 15 significant digits hides the extra noise of `f64` sums (0.1 + 0.2
/// prints as 0.3, as in Redis).
pub fn format_float(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let int_digits = v.abs().log10().floor() as i64 + 1;
    let decimals = (15 - int_digits.max(1)).clamp(0, 17) as usize;
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// INCRBYFLOAT key increment
pub fn incrbyfloat(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let not_float = || Reply::err("value is not a valid float");
    let Some(by) = parse_float(&args[2]) else {
        return not_float();
    };
    let key = &args[1];
    let old = tri!(read(ctx, key));
    let (cur, exp) = match &old {
        Some(e) => match parse_float(&e.value) {
            Some(v) => (v, e.expire_at),
            None => return not_float(),
        },
        None => (0.0, None),
    };
    let new = cur + by;
    if !new.is_finite() {
        return Reply::err("increment would produce NaN or Infinity");
    }
    let s = format_float(new);
    tri!(write(ctx, key, s.as_bytes(), exp));
    Reply::Bulk(s.into_bytes())
}

/// APPEND key value
pub fn append(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    let (mut v, exp) = match tri!(read(ctx, key)) {
        Some(e) => (Vec::from(e.value), e.expire_at),
        None => (Vec::new(), None),
    };
    tri!(check_len(ctx, (v.len() + args[2].len()) as u64));
    v.extend_from_slice(&args[2]);
    tri!(write(ctx, key, &v, exp));
    Reply::Int(v.len() as i64)
}

/// STRLEN key
pub fn strlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Int(tri!(read(ctx, &args[1])).map_or(0, |e| e.value.len() as i64))
}

/// GETRANGE key start end
pub fn getrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut start = tri!(int_arg(&args[2]));
    let mut end = tri!(int_arg(&args[3]));
    let v = tri!(read(ctx, &args[1]))
        .map(|e| e.value)
        .unwrap_or_default();
    let len = v.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Reply::Bulk(Vec::new());
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return Reply::Bulk(Vec::new());
    }
    Reply::Bulk(v[start as usize..=end as usize].to_vec())
}

/// SETRANGE key offset value
pub fn setrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let offset = tri!(int_arg(&args[2]));
    if offset < 0 {
        return Reply::err("offset is out of range");
    }
    let key = &args[1];
    let val = &args[3];
    let old = tri!(read(ctx, key));
    let Some(e) = old else {
        if val.is_empty() {
            return Reply::Int(0);
        }
        tri!(check_len(ctx, offset as u64 + val.len() as u64));
        let mut v = vec![0u8; offset as usize];
        v.extend_from_slice(val);
        tri!(write(ctx, key, &v, None));
        return Reply::Int(v.len() as i64);
    };
    if val.is_empty() {
        return Reply::Int(e.value.len() as i64);
    }
    tri!(check_len(ctx, offset as u64 + val.len() as u64));
    let mut v = Vec::from(e.value);
    let end = offset as usize + val.len();
    if v.len() < end {
        v.resize(end, 0);
    }
    v[offset as usize..end].copy_from_slice(val);
    tri!(write(ctx, key, &v, e.expire_at));
    Reply::Int(v.len() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_format_like_redis() {
        assert_eq!(format_float(10.6), "10.6");
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(-0.5), "-0.5");
        assert_eq!(format_float(1e21), "1000000000000000000000");
        assert_eq!(format_float(0.1 + 0.2), "0.3");
        assert_eq!(format_float(1e-20), "0");
        assert_eq!(format_float(123456.789), "123456.789");
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b"1.5"), Some(1.5));
    }

    #[test]
    fn set_options_conflicts_are_syntax_errors() {
        let a = |s: &str| -> Vec<Vec<u8>> { s.split(' ').map(|x| x.as_bytes().to_vec()).collect() };
        assert!(parse_set_options(&a("SET k v NX XX"), 3, true).is_err());
        assert!(parse_set_options(&a("SET k v EX 1 PX 1"), 3, true).is_err());
        assert!(parse_set_options(&a("SET k v KEEPTTL EX 1"), 3, true).is_err());
        assert!(parse_set_options(&a("SET k v EX"), 3, true).is_err());
        assert!(parse_set_options(&a("SET k v EX 1 EX 2 NX NX get"), 3, true).is_ok());
        assert!(parse_set_options(&a("GETEX k PERSIST EX 1"), 2, false).is_err());
        assert!(parse_set_options(&a("GETEX k NX"), 2, false).is_err());
    }
}
