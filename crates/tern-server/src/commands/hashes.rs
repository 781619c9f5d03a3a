//! Hash commands. A hash is a metadata record plus one engine key per field
//! ([`crate::members`]), so reading or writing one field of a hash of any
//! size costs a point lookup or one small write.

use super::composite::{check_member, check_random_count, distinct_picks, rng, Members, Value};
use super::strings::{format_float, parse_float, tri};
use super::{int_arg, syntax_error, wrong_arity, Ctx};
use crate::glob::glob_match;
use crate::keyspace::Kind;
use crate::resp::Reply;

/// HSCAN's default COUNT.
const DEFAULT_SCAN_COUNT: usize = 10;

/// The hash at `key`, if any.
fn hash(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, Reply> {
    ctx.composite(key, Kind::Hash)
}

/// The hash at `key`, or a new one to write to.
fn hash_or_new(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Value, Reply> {
    match hash(ctx, key)? {
        Some(v) => Ok(v),
        None => ctx.new_composite(),
    }
}

/// Sets the field/value pairs in `pairs` on `key`; returns how many fields
/// are new.
fn set_fields(ctx: &mut Ctx<'_>, key: &[u8], pairs: &[Vec<u8>]) -> Result<i64, Reply> {
    for fv in pairs.chunks(2) {
        check_member(ctx, key, &fv[0])?;
    }
    let mut v = hash_or_new(ctx, key)?;
    let mut added = 0;
    for fv in pairs.chunks(2) {
        if ctx.member(key, &v, &fv[0])?.is_none() {
            added += 1;
            v.meta.size += 1;
        }
        ctx.put_member(key, &v, &fv[0], &fv[1])?;
    }
    if added > 0 {
        ctx.put_composite(key, Kind::Hash, &v)?;
    }
    Ok(added)
}

/// HSET key field value [field value ...]
pub fn hset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() % 2 != 0 {
        return wrong_arity("hset");
    }
    Reply::Int(tri!(set_fields(ctx, &args[1], &args[2..])))
}

/// HMSET key field value [field value ...]
pub fn hmset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() % 2 != 0 {
        return wrong_arity("hmset");
    }
    tri!(set_fields(ctx, &args[1], &args[2..]));
    Reply::Ok
}

/// HSETNX key field value
pub fn hsetnx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    tri!(check_member(ctx, key, &args[2]));
    let mut v = tri!(hash_or_new(ctx, key));
    if tri!(ctx.member(key, &v, &args[2])).is_some() {
        return Reply::Int(0);
    }
    v.meta.size += 1;
    tri!(ctx.put_member(key, &v, &args[2], &args[3]));
    tri!(ctx.put_composite(key, Kind::Hash, &v));
    Reply::Int(1)
}

/// HGET key field
pub fn hget(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(v) = tri!(hash(ctx, &args[1])) else {
        return Reply::Nil;
    };
    match tri!(ctx.member(&args[1], &v, &args[2])) {
        Some(b) => Reply::Bulk(b),
        None => Reply::Nil,
    }
}

/// HMGET key field [field ...]
pub fn hmget(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(v) = tri!(hash(ctx, &args[1])) else {
        return Reply::Array(vec![Reply::Nil; args.len() - 2]);
    };
    let mut out = Vec::with_capacity(args.len() - 2);
    for f in &args[2..] {
        out.push(match tri!(ctx.member(&args[1], &v, f)) {
            Some(b) => Reply::Bulk(b),
            None => Reply::Nil,
        });
    }
    Reply::Array(out)
}

/// HDEL key field [field ...]
pub fn hdel(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    let Some(mut v) = tri!(hash(ctx, key)) else {
        return Reply::Int(0);
    };
    let mut removed = 0;
    for f in &args[2..] {
        if tri!(ctx.member(key, &v, f)).is_some() {
            tri!(ctx.delete_member(key, &v, f));
            v.meta.size = v.meta.size.saturating_sub(1);
            removed += 1;
        }
    }
    if removed > 0 {
        tri!(ctx.put_composite(key, Kind::Hash, &v));
    }
    Reply::Int(removed)
}

/// HLEN key
pub fn hlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let n = tri!(hash(ctx, &args[1])).map_or(0, |v| v.meta.size);
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// HEXISTS key field
pub fn hexists(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(v) = tri!(hash(ctx, &args[1])) else {
        return Reply::Int(0);
    };
    Reply::Int(i64::from(
        tri!(ctx.member(&args[1], &v, &args[2])).is_some(),
    ))
}

/// HSTRLEN key field
pub fn hstrlen(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(v) = tri!(hash(ctx, &args[1])) else {
        return Reply::Int(0);
    };
    let n = tri!(ctx.member(&args[1], &v, &args[2])).map_or(0, |b| b.len());
    Reply::Int(n as i64)
}

/// Every field and value of `key` (empty if absent).
fn fields(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Members, Reply> {
    match hash(ctx, key)? {
        Some(v) => ctx.all_members(key, Kind::Hash, &v),
        None => Ok(Vec::new()),
    }
}

/// HGETALL key
pub fn hgetall(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let all = tri!(fields(ctx, &args[1]));
    Reply::Map(
        all.into_iter()
            .map(|(f, v)| (Reply::Bulk(f), Reply::Bulk(v)))
            .collect(),
    )
}

/// HKEYS key
pub fn hkeys(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let all = tri!(fields(ctx, &args[1]));
    Reply::Array(all.into_iter().map(|(f, _)| Reply::Bulk(f)).collect())
}

/// HVALS key
pub fn hvals(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let all = tri!(fields(ctx, &args[1]));
    Reply::Array(all.into_iter().map(|(_, v)| Reply::Bulk(v)).collect())
}

/// HINCRBY key field increment
pub fn hincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let by = tri!(int_arg(&args[3]));
    let key = &args[1];
    tri!(check_member(ctx, key, &args[2]));
    let mut v = tri!(hash_or_new(ctx, key));
    let old = tri!(ctx.member(key, &v, &args[2]));
    let cur = match &old {
        Some(b) => match crate::resp::parser::parse_int(b) {
            Some(n) => n,
            None => return Reply::err("hash value is not an integer"),
        },
        None => 0,
    };
    let Some(new) = cur.checked_add(by) else {
        return Reply::err("increment or decrement would overflow");
    };
    if old.is_none() {
        v.meta.size += 1;
    }
    tri!(ctx.put_member(key, &v, &args[2], new.to_string().as_bytes()));
    if old.is_none() {
        tri!(ctx.put_composite(key, Kind::Hash, &v));
    }
    Reply::Int(new)
}

/// HINCRBYFLOAT key field increment
pub fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(by) = parse_float(&args[3]) else {
        return Reply::err("value is not a valid float");
    };
    let key = &args[1];
    tri!(check_member(ctx, key, &args[2]));
    let mut v = tri!(hash_or_new(ctx, key));
    let old = tri!(ctx.member(key, &v, &args[2]));
    let cur = match &old {
        Some(b) => match parse_float(b) {
            Some(n) => n,
            None => return Reply::err("hash value is not a float"),
        },
        None => 0.0,
    };
    let new = cur + by;
    if !new.is_finite() {
        return Reply::err("increment would produce NaN or Infinity");
    }
    let s = format_float(new);
    if old.is_none() {
        v.meta.size += 1;
    }
    tri!(ctx.put_member(key, &v, &args[2], s.as_bytes()));
    if old.is_none() {
        tri!(ctx.put_composite(key, Kind::Hash, &v));
    }
    Reply::Bulk(s.into_bytes())
}

/// Options of the SCAN family after the cursor: `MATCH` and `COUNT`.
pub(crate) struct ScanOptions<'a> {
    /// Only members matching this pattern.
    pub pattern: Option<&'a [u8]>,
    /// Members to examine per call.
    pub count: usize,
}

/// Parses `[MATCH pattern] [COUNT count]` from `args`.
pub(crate) fn scan_options(args: &[Vec<u8>]) -> Result<ScanOptions<'_>, Reply> {
    let mut o = ScanOptions {
        pattern: None,
        count: DEFAULT_SCAN_COUNT,
    };
    let mut i = 0;
    while i < args.len() {
        let Some(val) = args.get(i + 1) else {
            return Err(syntax_error());
        };
        match args[i].to_ascii_lowercase().as_slice() {
            b"count" => {
                let c = int_arg(val)?;
                if c < 1 {
                    return Err(syntax_error());
                }
                o.count = c.min(1 << 20) as usize;
            }
            b"match" => o.pattern = Some(val),
            _ => return Err(syntax_error()),
        }
        i += 2;
    }
    Ok(o)
}

/// Parses a SCAN-family cursor and finds where it resumes: `Ok(None)` for a
/// cursor this connection does not know (the iteration is over).
pub(crate) fn scan_cursor(ctx: &Ctx<'_>, arg: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    let Some(cursor) = std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Err(Reply::err("invalid cursor"));
    };
    if cursor == 0 {
        return Ok(Some(Vec::new()));
    }
    Ok(ctx.session.cursor(cursor).map(<[u8]>::to_vec))
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]
pub fn hscan(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let o = tri!(scan_options(&args[3..]));
    let Some(from) = tri!(scan_cursor(ctx, &args[2])) else {
        return ctx.session.scan_reply(None, Vec::new());
    };
    let key = &args[1];
    let Some(v) = tri!(hash(ctx, key)) else {
        return ctx.session.scan_reply(None, Vec::new());
    };
    let (page, next) = tri!(ctx.members(key, Kind::Hash, &v, &from, o.count));
    let mut out = Vec::with_capacity(page.len() * 2);
    for (f, val) in page {
        if o.pattern.is_none_or(|p| glob_match(p, &f)) {
            out.push(Reply::Bulk(f));
            out.push(Reply::Bulk(val));
        }
    }
    ctx.session.scan_reply(next, out)
}

/// HRANDFIELD key [count [WITHVALUES]]
///
/// Picks from a walk of the whole hash: fine for the hashes applications
/// sample, linear in the hash's size.
pub fn hrandfield(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let count = match args.get(2) {
        None => None,
        Some(c) => Some(tri!(int_arg(c))),
    };
    let with_values = match args.get(3) {
        None => false,
        Some(a) if a.eq_ignore_ascii_case(b"withvalues") && args.len() == 4 => true,
        Some(_) => return syntax_error(),
    };
    if let Some(c) = count {
        // Redis refuses counts whose doubling (for WITHVALUES) overflows.
        if c.checked_abs().is_none_or(|a| a > i64::MAX / 2) {
            return not_integer_range();
        }
    }
    let key = &args[1];
    let Some(v) = tri!(hash(ctx, key)) else {
        return match count {
            None => Reply::Nil,
            Some(_) => Reply::Array(Vec::new()),
        };
    };
    if let Some(c) = count {
        tri!(check_random_count(c));
    }
    let all = tri!(ctx.all_members(key, Kind::Hash, &v));
    if all.is_empty() {
        return Reply::Nil;
    }
    let mut next = rng();
    let Some(c) = count else {
        let i = (next() % all.len() as u64) as usize;
        return Reply::Bulk(all[i].0.clone());
    };
    let picks: Vec<usize> = if c >= 0 {
        distinct_picks(all.len(), c as usize)
    } else {
        (0..c.unsigned_abs())
            .map(|_| (next() % all.len() as u64) as usize)
            .collect()
    };
    let mut out = Vec::with_capacity(picks.len() * if with_values { 2 } else { 1 });
    let resp3 = ctx.session.resp3;
    for i in picks {
        let field = Reply::Bulk(all[i].0.clone());
        match (with_values, resp3) {
            (false, _) => out.push(field),
            // RESP3 pairs each field with its value.
            (true, true) => out.push(Reply::Array(vec![field, Reply::Bulk(all[i].1.clone())])),
            (true, false) => out.extend([field, Reply::Bulk(all[i].1.clone())]),
        }
    }
    Reply::Array(out)
}

/// `ERR value is out of range`.
fn not_integer_range() -> Reply {
    Reply::err("value is out of range")
}
