//! Set commands. A set is a metadata record plus one engine key per member
//! (with an empty value; [`crate::members`]), so SADD, SREM and SISMEMBER
//! of one member cost one small write or one point lookup whatever the
//! set's size.

use std::collections::BTreeSet;

use super::composite::{check_member, distinct_picks, rng, Value};
use super::hashes::{scan_cursor, scan_options};
use super::strings::tri;
use super::{int_arg, syntax_error, Ctx};
use crate::glob::glob_match;
use crate::keyspace::Kind;
use crate::resp::Reply;

/// The set at `key`, if any.
fn set(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, Reply> {
    ctx.composite(key, Kind::Set)
}

/// Whether `member` is in `key`'s set `v`.
fn has(ctx: &mut Ctx<'_>, key: &[u8], v: &Value, member: &[u8]) -> Result<bool, Reply> {
    Ok(ctx.member(key, v, member)?.is_some())
}

/// Every member of the set at `key` (empty if absent).
fn all(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<Vec<u8>>, Reply> {
    match set(ctx, key)? {
        Some(v) => Ok(ctx
            .all_members(key, Kind::Set, &v)?
            .into_iter()
            .map(|(m, _)| m)
            .collect()),
        None => Ok(Vec::new()),
    }
}

/// Adds `members` to the set at `key` (created if absent); returns how
/// many were new.
fn add(ctx: &mut Ctx<'_>, key: &[u8], members: &[Vec<u8>]) -> Result<i64, Reply> {
    for m in members {
        check_member(ctx, key, m)?;
    }
    let mut v = match set(ctx, key)? {
        Some(v) => v,
        None => ctx.new_composite_of(Kind::Set)?,
    };
    let mut added = 0;
    for m in members {
        if !has(ctx, key, &v, m)? {
            ctx.put_member(key, &v, m, b"")?;
            v.meta.size += 1;
            added += 1;
        }
    }
    if added > 0 {
        ctx.put_composite(key, Kind::Set, &v)?;
    }
    Ok(added)
}

/// Removes `members` from `key`'s set `v`; returns how many were there.
/// The set is deleted once empty.
fn remove(ctx: &mut Ctx<'_>, key: &[u8], v: &mut Value, members: &[Vec<u8>]) -> Result<i64, Reply> {
    let mut removed = 0;
    for m in members {
        if has(ctx, key, v, m)? {
            ctx.delete_member(key, v, m)?;
            v.meta.size = v.meta.size.saturating_sub(1);
            removed += 1;
        }
    }
    if removed > 0 {
        ctx.put_composite(key, Kind::Set, v)?;
    }
    Ok(removed)
}

/// Replaces whatever `key` holds with a set of `members` (deleted if
/// there are none); returns its size.
fn store(ctx: &mut Ctx<'_>, key: &[u8], members: &BTreeSet<Vec<u8>>) -> Result<i64, Reply> {
    for m in members {
        check_member(ctx, key, m)?;
    }
    if members.is_empty() {
        ctx.delete(key)?;
        return Ok(0);
    }
    let mut v = ctx.new_composite_of(Kind::Set)?;
    for m in members {
        ctx.put_member(key, &v, m, b"")?;
    }
    v.meta.size = members.len() as u64;
    ctx.put_composite(key, Kind::Set, &v)?;
    Ok(members.len() as i64)
}

fn bulks(members: impl IntoIterator<Item = Vec<u8>>) -> Vec<Reply> {
    members.into_iter().map(Reply::Bulk).collect()
}

/// SADD key member [member ...]
pub fn sadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Int(tri!(add(ctx, &args[1], &args[2..])))
}

/// SREM key member [member ...]
pub fn srem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(mut v) = tri!(set(ctx, &args[1])) else {
        return Reply::Int(0);
    };
    Reply::Int(tri!(remove(ctx, &args[1], &mut v, &args[2..])))
}

/// SISMEMBER key member
pub fn sismember(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(v) = tri!(set(ctx, &args[1])) else {
        return Reply::Int(0);
    };
    Reply::Int(i64::from(tri!(has(ctx, &args[1], &v, &args[2]))))
}

/// SMISMEMBER key member [member ...]
pub fn smismember(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(v) = tri!(set(ctx, &args[1])) else {
        return Reply::Array(vec![Reply::Int(0); args.len() - 2]);
    };
    let mut out = Vec::with_capacity(args.len() - 2);
    for m in &args[2..] {
        out.push(Reply::Int(i64::from(tri!(has(ctx, &args[1], &v, m)))));
    }
    Reply::Array(out)
}

/// SCARD key
pub fn scard(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let n = tri!(set(ctx, &args[1])).map_or(0, |v| v.meta.size);
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// SMEMBERS key
pub fn smembers(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Set(bulks(tri!(all(ctx, &args[1]))))
}

/// SPOP key [count]
///
/// Picks from a walk of the whole set: linear in the set's size.
pub fn spop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() > 3 {
        return syntax_error();
    }
    let count = tri!(positive_count(args.get(2)));
    let key = &args[1];
    let Some(mut v) = tri!(set(ctx, key)) else {
        return match count {
            None => Reply::Nil,
            Some(_) => Reply::Set(Vec::new()),
        };
    };
    if count == Some(0) {
        return Reply::Set(Vec::new());
    }
    let members: Vec<Vec<u8>> = tri!(ctx.all_members(key, Kind::Set, &v))
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    let n = count.unwrap_or(1).min(members.len() as u64) as usize;
    let picked: Vec<Vec<u8>> = distinct_picks(members.len(), n)
        .into_iter()
        .map(|i| members[i].clone())
        .collect();
    tri!(remove(ctx, key, &mut v, &picked));
    match count {
        None => picked.into_iter().next().map_or(Reply::Nil, Reply::Bulk),
        Some(_) => Reply::Set(bulks(picked)),
    }
}

/// SRANDMEMBER key [count]
pub fn srandmember(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() > 3 {
        return syntax_error();
    }
    let count = match args.get(2) {
        None => None,
        Some(c) => {
            let c = tri!(int_arg(c));
            if c == i64::MIN {
                return Reply::err("value is out of range");
            }
            Some(c)
        }
    };
    let key = &args[1];
    let Some(v) = tri!(set(ctx, key)) else {
        return match count {
            None => Reply::Nil,
            Some(_) => Reply::Array(Vec::new()),
        };
    };
    if let Some(c) = count {
        tri!(super::composite::check_random_count(c));
    }
    let members: Vec<Vec<u8>> = tri!(ctx.all_members(key, Kind::Set, &v))
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    if members.is_empty() {
        return Reply::Nil;
    }
    let mut next = rng();
    match count {
        None => Reply::Bulk(members[(next() % members.len() as u64) as usize].clone()),
        Some(c) if c >= 0 => Reply::Array(
            distinct_picks(members.len(), c as usize)
                .into_iter()
                .map(|i| Reply::Bulk(members[i].clone()))
                .collect(),
        ),
        Some(c) => Reply::Array(
            (0..c.unsigned_abs())
                .map(|_| Reply::Bulk(members[(next() % members.len() as u64) as usize].clone()))
                .collect(),
        ),
    }
}

/// SMOVE source destination member
pub fn smove(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let (src, dst, member) = (&args[1], &args[2], &args[3]);
    let Some(mut sv) = tri!(set(ctx, src)) else {
        return Reply::Int(0);
    };
    // A destination of another type is refused before anything moves.
    tri!(set(ctx, dst));
    if src == dst {
        return Reply::Int(i64::from(tri!(has(ctx, src, &sv, member))));
    }
    tri!(check_member(ctx, dst, member));
    if tri!(remove(ctx, src, &mut sv, std::slice::from_ref(member))) == 0 {
        return Reply::Int(0);
    }
    tri!(add(ctx, dst, std::slice::from_ref(member)));
    Reply::Int(1)
}

/// What SINTER, SUNION and SDIFF compute.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The sets at `keys` (`None` for a missing key), each checked to be a set
/// before any is read, as Redis checks them.
fn operands(ctx: &mut Ctx<'_>, keys: &[Vec<u8>]) -> Result<Vec<Option<Value>>, Reply> {
    keys.iter().map(|k| set(ctx, k)).collect()
}

/// The result of `op` over the sets at `keys`.
fn combine(ctx: &mut Ctx<'_>, op: Op, keys: &[Vec<u8>]) -> Result<BTreeSet<Vec<u8>>, Reply> {
    let sets = operands(ctx, keys)?;
    let mut out = BTreeSet::new();
    match op {
        Op::Inter => {
            if sets.iter().any(Option::is_none) {
                return Ok(out);
            }
            // Walk the smallest set; look its members up in the others.
            let Some((first, v)) = keys
                .iter()
                .zip(&sets)
                .filter_map(|(k, s)| s.map(|v| (k, v)))
                .min_by_key(|(_, v)| v.meta.size)
            else {
                return Ok(out);
            };
            'members: for (m, _) in ctx.all_members(first, Kind::Set, &v)? {
                for (k, s) in keys.iter().zip(&sets) {
                    let Some(s) = s else { continue };
                    if k != first && !has(ctx, k, s, &m)? {
                        continue 'members;
                    }
                }
                out.insert(m);
            }
        }
        Op::Union => {
            for (k, s) in keys.iter().zip(&sets) {
                if let Some(s) = s {
                    out.extend(
                        ctx.all_members(k, Kind::Set, s)?
                            .into_iter()
                            .map(|(m, _)| m),
                    );
                }
            }
        }
        Op::Diff => {
            let Some(v) = sets[0] else {
                return Ok(out);
            };
            'diff: for (m, _) in ctx.all_members(&keys[0], Kind::Set, &v)? {
                for (k, s) in keys.iter().zip(&sets).skip(1) {
                    if let Some(s) = s {
                        if has(ctx, k, s, &m)? {
                            continue 'diff;
                        }
                    }
                }
                out.insert(m);
            }
        }
    }
    Ok(out)
}

/// SINTER key [key ...]
pub fn sinter(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Set(bulks(tri!(combine(ctx, Op::Inter, &args[1..]))))
}

/// SUNION key [key ...]
pub fn sunion(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Set(bulks(tri!(combine(ctx, Op::Union, &args[1..]))))
}

/// SDIFF key [key ...]
pub fn sdiff(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Set(bulks(tri!(combine(ctx, Op::Diff, &args[1..]))))
}

fn store_op(ctx: &mut Ctx<'_>, op: Op, args: &[Vec<u8>]) -> Reply {
    let members = tri!(combine(ctx, op, &args[2..]));
    Reply::Int(tri!(store(ctx, &args[1], &members)))
}

/// SINTERSTORE destination key [key ...]
pub fn sinterstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    store_op(ctx, Op::Inter, args)
}

/// SUNIONSTORE destination key [key ...]
pub fn sunionstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    store_op(ctx, Op::Union, args)
}

/// SDIFFSTORE destination key [key ...]
pub fn sdiffstore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    store_op(ctx, Op::Diff, args)
}

/// Arguments split in two: the keys and what follows them.
type KeysAndRest<'a> = (&'a [Vec<u8>], &'a [Vec<u8>]);

/// Parses `numkeys key [key ...]` at `args[1..]`: the keys and what follows
/// them.
pub(crate) fn numkeys(args: &[Vec<u8>]) -> Result<KeysAndRest<'_>, Reply> {
    let n = int_arg(&args[1]).map_err(|_| Reply::err("numkeys should be greater than 0"))?;
    if n <= 0 {
        return Err(Reply::err("numkeys should be greater than 0"));
    }
    let n = n as usize;
    if n > args.len() - 2 {
        return Err(Reply::err(
            "Number of keys can't be greater than number of args",
        ));
    }
    Ok((&args[2..2 + n], &args[2 + n..]))
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]
pub fn sintercard(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let (keys, rest) = tri!(numkeys(args));
    let mut limit = 0usize;
    let mut i = 0;
    while i < rest.len() {
        match (rest[i].to_ascii_lowercase().as_slice(), rest.get(i + 1)) {
            (b"limit", Some(l)) => {
                let l = tri!(int_arg(l).map_err(|_| Reply::err("LIMIT can't be negative")));
                if l < 0 {
                    return Reply::err("LIMIT can't be negative");
                }
                limit = l as usize;
                i += 2;
            }
            _ => return syntax_error(),
        }
    }
    let n = tri!(combine(ctx, Op::Inter, keys)).len();
    Reply::Int(if limit > 0 { n.min(limit) } else { n } as i64)
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]
pub fn sscan(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let o = tri!(scan_options(&args[3..]));
    let Some(from) = tri!(scan_cursor(ctx, &args[2])) else {
        return ctx.session.scan_reply(None, Vec::new());
    };
    let key = &args[1];
    let Some(v) = tri!(set(ctx, key)) else {
        return ctx.session.scan_reply(None, Vec::new());
    };
    let (page, next) = tri!(ctx.members(key, Kind::Set, &v, &from, o.count));
    let out = page
        .into_iter()
        .filter(|(m, _)| o.pattern.is_none_or(|p| glob_match(p, m)))
        .map(|(m, _)| Reply::Bulk(m))
        .collect();
    ctx.session.scan_reply(next, out)
}

/// `ERR value is out of range, must be positive`.
fn out_of_range_positive() -> Reply {
    Reply::err("value is out of range, must be positive")
}

/// An optional count that must not be negative (SPOP, LPOP, ZPOPMIN, …).
pub(crate) fn positive_count(arg: Option<&Vec<u8>>) -> Result<Option<u64>, Reply> {
    let Some(c) = arg else {
        return Ok(None);
    };
    match int_arg(c) {
        Ok(c) if c >= 0 => Ok(Some(c as u64)),
        _ => Err(out_of_range_positive()),
    }
}
