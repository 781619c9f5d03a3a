//! List commands. A list is a metadata record holding its first position
//! and length, plus one engine key per element whose member is the
//! element's position (a big-endian u64; [`crate::members`]). Pushes and
//! pops at either end, LINDEX, LSET and LRANGE cost one write or a read of
//! just the elements they touch; LINSERT and LREM rewrite the elements on
//! one side of the change, as Redis's own lists move memory.

use super::composite::{check_member_len, clamp, Span, Value};
use super::sets::positive_count;
use super::strings::tri;
use super::{int_arg, store_error, syntax_error, wrong_arity, Ctx};
use crate::keyspace::Kind;
use crate::resp::Reply;

/// Up to this many elements are read with point reads rather than a walk.
const POINT_READS: u64 = 4;

/// Which end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Left,
    Right,
}

/// Parses `LEFT` or `RIGHT`.
fn end_arg(a: &[u8]) -> Result<End, Reply> {
    if a.eq_ignore_ascii_case(b"left") {
        Ok(End::Left)
    } else if a.eq_ignore_ascii_case(b"right") {
        Ok(End::Right)
    } else {
        Err(syntax_error())
    }
}

/// The list at `key`, if any.
fn list(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, Reply> {
    ctx.composite(key, Kind::List)
}

/// A new, empty list at `key`, refused if the engine could not store its
/// elements' keys (a position adds 8 bytes to the key).
fn new_list(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Value, Reply> {
    check_member_len(ctx, key, 8)?;
    ctx.new_composite_of(Kind::List)
}

/// The first position of list `v`.
fn head(v: &Value) -> Result<u64, Reply> {
    v.meta.head.ok_or_else(|| {
        store_error(crate::keyspace::DecodeError("a list without a head".into()).into())
    })
}

/// The member (position) of element `i` of list `v`.
fn position(v: &Value, i: u64) -> Result<[u8; 8], Reply> {
    let p = head(v)?
        .checked_add(i)
        .ok_or_else(|| Reply::err("list position out of range"))?;
    Ok(p.to_be_bytes())
}

/// Elements `start..=stop` of list `v` at `key` (both within the list).
fn elements(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &Value,
    start: u64,
    stop: u64,
) -> Result<Vec<Vec<u8>>, Reply> {
    if stop - start < POINT_READS {
        // A few elements (a pop): point reads, no iterator.
        let mut out = Vec::with_capacity((stop - start + 1) as usize);
        for i in start..=stop {
            let p = position(v, i)?;
            match ctx.member(key, v, &p)? {
                Some(e) => out.push(e),
                None => {
                    return Err(store_error(
                        crate::keyspace::DecodeError(format!("list element {i} is missing")).into(),
                    ))
                }
            }
        }
        return Ok(out);
    }
    let lo = position(v, start)?;
    let hi = position(v, stop).map(|p| u64::from_be_bytes(p).checked_add(1))?;
    let hi = hi.map(u64::to_be_bytes);
    let span = Span {
        lo: &lo,
        hi: hi.as_ref().map(|h| &h[..]),
    };
    let n = (stop - start + 1) as usize;
    let (page, _) = ctx.walk(key, Kind::List, v, span, n, false)?;
    if page.len() != n {
        return Err(store_error(
            crate::keyspace::DecodeError(format!(
                "list holds {} of elements {start}..={stop}",
                page.len()
            ))
            .into(),
        ));
    }
    Ok(page.into_iter().map(|(_, e)| e).collect())
}

/// Every element of list `v` at `key`.
fn all(ctx: &mut Ctx<'_>, key: &[u8], v: &Value) -> Result<Vec<Vec<u8>>, Reply> {
    if v.meta.size == 0 {
        return Ok(Vec::new());
    }
    elements(ctx, key, v, 0, v.meta.size - 1)
}

/// Pushes `elems` one by one onto `end` of `key`'s list `v`.
fn push(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &mut Value,
    end: End,
    elems: &[Vec<u8>],
) -> Result<(), Reply> {
    for e in elems {
        match end {
            End::Left => {
                let h = head(v)?
                    .checked_sub(1)
                    .ok_or_else(|| Reply::err("the list has no room left at its head"))?;
                v.meta.head = Some(h);
                ctx.put_member(key, v, &h.to_be_bytes(), e)?;
            }
            End::Right => {
                let p = position(v, v.meta.size)?;
                ctx.put_member(key, v, &p, e)?;
            }
        }
        v.meta.size += 1;
    }
    ctx.put_composite(key, Kind::List, v)
}

/// Removes up to `n` elements from `end` of `key`'s list `v` and returns
/// them in pop order (the list is deleted once empty).
fn pop(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &mut Value,
    end: End,
    n: u64,
) -> Result<Vec<Vec<u8>>, Reply> {
    let n = n.min(v.meta.size);
    if n == 0 {
        return Ok(Vec::new());
    }
    let size = v.meta.size;
    let (start, mut out) = match end {
        End::Left => (0, elements(ctx, key, v, 0, n - 1)?),
        End::Right => (size - n, elements(ctx, key, v, size - n, size - 1)?),
    };
    for i in start..start + n {
        let p = position(v, i)?;
        ctx.delete_member(key, v, &p)?;
    }
    if end == End::Left {
        v.meta.head = Some(head(v)? + n);
    } else {
        out.reverse();
    }
    v.meta.size -= n;
    ctx.put_composite(key, Kind::List, v)?;
    Ok(out)
}

fn push_command(ctx: &mut Ctx<'_>, args: &[Vec<u8>], end: End, only_existing: bool) -> Reply {
    let key = &args[1];
    let mut v = match tri!(list(ctx, key)) {
        Some(v) => v,
        None if only_existing => return Reply::Int(0),
        None => tri!(new_list(ctx, key)),
    };
    tri!(push(ctx, key, &mut v, end, &args[2..]));
    Reply::Int(v.meta.size as i64)
}

/// LPUSH key element [element ...]
pub fn lpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    push_command(ctx, args, End::Left, false)
}

/// RPUSH key element [element ...]
pub fn rpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    push_command(ctx, args, End::Right, false)
}

/// LPUSHX key element [element ...]
pub fn lpushx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    push_command(ctx, args, End::Left, true)
}

/// RPUSHX key element [element ...]
pub fn rpushx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    push_command(ctx, args, End::Right, true)
}

fn pop_command(ctx: &mut Ctx<'_>, args: &[Vec<u8>], end: End, name: &str) -> Reply {
    if args.len() > 3 {
        return wrong_arity(name);
    }
    let count = tri!(positive_count(args.get(2)));
    let key = &args[1];
    let Some(mut v) = tri!(list(ctx, key)) else {
        return match count {
            None => Reply::Nil,
            Some(_) => Reply::NilArray,
        };
    };
    let popped = tri!(pop(ctx, key, &mut v, end, count.unwrap_or(1)));
    match count {
        None => popped.into_iter().next().map_or(Reply::Nil, Reply::Bulk),
        Some(_) => Reply::Array(popped.into_iter().map(Reply::Bulk).collect()),
    }
}

/// LPOP key [count]
pub fn lpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    pop_command(ctx, args, End::Left, "lpop")
}

/// RPOP key [count]
pub fn rpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    pop_command(ctx, args, End::Right, "rpop")
}

/// LLEN key
pub fn llen(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let n = tri!(list(ctx, &args[1])).map_or(0, |v| v.meta.size);
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// A list index (negative: from the end) as an offset, if within `len`.
fn index(i: i64, len: u64) -> Option<u64> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let i = if i < 0 { i.checked_add(len)? } else { i };
    (0..len).contains(&i).then_some(i as u64)
}

/// LRANGE key start stop
pub fn lrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let start = tri!(int_arg(&args[2]));
    let stop = tri!(int_arg(&args[3]));
    let key = &args[1];
    let Some(v) = tri!(list(ctx, key)) else {
        return Reply::Array(Vec::new());
    };
    let Some((a, b)) = clamp(start, stop, v.meta.size) else {
        return Reply::Array(Vec::new());
    };
    let out = tri!(elements(ctx, key, &v, a, b));
    Reply::Array(out.into_iter().map(Reply::Bulk).collect())
}

/// LINDEX key index
pub fn lindex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    let Some(v) = tri!(list(ctx, key)) else {
        return Reply::Nil;
    };
    let i = tri!(int_arg(&args[2]));
    let Some(i) = index(i, v.meta.size) else {
        return Reply::Nil;
    };
    let p = tri!(position(&v, i));
    match tri!(ctx.member(key, &v, &p)) {
        Some(e) => Reply::Bulk(e),
        None => {
            store_error(crate::keyspace::DecodeError(format!("list element {i} is missing")).into())
        }
    }
}

/// LSET key index element
pub fn lset(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    let Some(v) = tri!(list(ctx, key)) else {
        return Reply::err("no such key");
    };
    let i = tri!(int_arg(&args[2]));
    let Some(i) = index(i, v.meta.size) else {
        return Reply::err("index out of range");
    };
    let p = tri!(position(&v, i));
    tri!(ctx.put_member(key, &v, &p, &args[3]));
    // The metadata record is rewritten too, so WATCH sees the change.
    tri!(ctx.put_composite(key, Kind::List, &v));
    Reply::Ok
}

/// LTRIM key start stop
pub fn ltrim(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let start = tri!(int_arg(&args[2]));
    let stop = tri!(int_arg(&args[3]));
    let key = &args[1];
    let Some(mut v) = tri!(list(ctx, key)) else {
        return Reply::Ok;
    };
    let size = v.meta.size;
    let (keep_from, keep_to) = match clamp(start, stop, size) {
        Some((a, b)) => (a, b + 1),
        None => (size, size),
    };
    for i in (0..keep_from).chain(keep_to..size) {
        let p = tri!(position(&v, i));
        tri!(ctx.delete_member(key, &v, &p));
    }
    v.meta.head = Some(tri!(head(&v)) + keep_from);
    v.meta.size = keep_to - keep_from;
    tri!(ctx.put_composite(key, Kind::List, &v));
    Reply::Ok
}

/// Replaces the elements of `key`'s list `v` from offset `from` on with
/// `rest` (shorter or longer), then writes the metadata.
fn rewrite_tail(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &mut Value,
    from: u64,
    rest: &[Vec<u8>],
) -> Result<(), Reply> {
    let old_size = v.meta.size;
    for (k, e) in rest.iter().enumerate() {
        let p = position(v, from + k as u64)?;
        ctx.put_member(key, v, &p, e)?;
    }
    let new_size = from + rest.len() as u64;
    for i in new_size..old_size {
        let p = position(v, i)?;
        ctx.delete_member(key, v, &p)?;
    }
    v.meta.size = new_size;
    ctx.put_composite(key, Kind::List, v)
}

/// LREM key count element
pub fn lrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let count = tri!(int_arg(&args[2]));
    let key = &args[1];
    let Some(mut v) = tri!(list(ctx, key)) else {
        return Reply::Int(0);
    };
    let elems = tri!(all(ctx, key, &v));
    let limit = if count == 0 {
        u64::MAX
    } else {
        count.unsigned_abs()
    };
    let mut remove = vec![false; elems.len()];
    let mut removed = 0u64;
    let order: Box<dyn Iterator<Item = usize>> = if count < 0 {
        Box::new((0..elems.len()).rev())
    } else {
        Box::new(0..elems.len())
    };
    for i in order {
        if removed == limit {
            break;
        }
        if elems[i] == args[3] {
            remove[i] = true;
            removed += 1;
        }
    }
    let Some(first) = remove.iter().position(|&r| r) else {
        return Reply::Int(0);
    };
    let rest: Vec<Vec<u8>> = elems
        .into_iter()
        .zip(remove)
        .skip(first)
        .filter(|(_, r)| !r)
        .map(|(e, _)| e)
        .collect();
    tri!(rewrite_tail(ctx, key, &mut v, first as u64, &rest));
    Reply::Int(removed as i64)
}

/// LINSERT key BEFORE|AFTER pivot element
pub fn linsert(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let after = if args[2].eq_ignore_ascii_case(b"after") {
        true
    } else if args[2].eq_ignore_ascii_case(b"before") {
        false
    } else {
        return syntax_error();
    };
    let key = &args[1];
    let Some(mut v) = tri!(list(ctx, key)) else {
        return Reply::Int(0);
    };
    let elems = tri!(all(ctx, key, &v));
    let Some(pivot) = elems.iter().position(|e| *e == args[3]) else {
        return Reply::Int(-1);
    };
    let at = pivot + usize::from(after);
    if at <= elems.len() / 2 {
        // Shift the elements before it one place left.
        let h = tri!(tri!(head(&v))
            .checked_sub(1)
            .ok_or_else(|| Reply::err("the list has no room left at its head")));
        v.meta.head = Some(h);
        for (k, e) in elems[..at].iter().enumerate() {
            let p = tri!(position(&v, k as u64));
            tri!(ctx.put_member(key, &v, &p, e));
        }
        let p = tri!(position(&v, at as u64));
        tri!(ctx.put_member(key, &v, &p, &args[4]));
        v.meta.size += 1;
        tri!(ctx.put_composite(key, Kind::List, &v));
    } else {
        let mut rest = Vec::with_capacity(elems.len() - at + 1);
        rest.push(args[4].clone());
        rest.extend_from_slice(&elems[at..]);
        tri!(rewrite_tail(ctx, key, &mut v, at as u64, &rest));
    }
    Reply::Int(v.meta.size as i64)
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]
pub fn lpos(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let (mut rank, mut count, mut maxlen) = (1i64, None::<u64>, 0u64);
    let mut i = 3;
    while i < args.len() {
        let Some(val) = args.get(i + 1) else {
            return syntax_error();
        };
        match args[i].to_ascii_lowercase().as_slice() {
            b"rank" => {
                rank = tri!(int_arg(val));
                if rank == i64::MIN {
                    return Reply::err(
                        "value is out of range, must be between -9223372036854775807 and 9223372036854775807",
                    );
                }
                if rank == 0 {
                    return Reply::err(
                        "RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                    );
                }
            }
            b"count" => {
                let c = tri!(int_arg(val).map_err(|_| Reply::err("COUNT can't be negative")));
                if c < 0 {
                    return Reply::err("COUNT can't be negative");
                }
                count = Some(c as u64);
            }
            b"maxlen" => {
                let m = tri!(int_arg(val).map_err(|_| Reply::err("MAXLEN can't be negative")));
                if m < 0 {
                    return Reply::err("MAXLEN can't be negative");
                }
                maxlen = m as u64;
            }
            _ => return syntax_error(),
        }
        i += 2;
    }
    let key = &args[1];
    let Some(v) = tri!(list(ctx, key)) else {
        return match count {
            Some(_) => Reply::Array(Vec::new()),
            None => Reply::Nil,
        };
    };
    let elems = tri!(all(ctx, key, &v));
    let len = elems.len();
    let from_tail = rank < 0;
    let rank = rank.unsigned_abs();
    let mut matches = 0u64;
    let mut out = Vec::new();
    for step in 0..len {
        if maxlen != 0 && step as u64 >= maxlen {
            break;
        }
        let idx = if from_tail { len - 1 - step } else { step };
        if elems[idx] != args[2] {
            continue;
        }
        matches += 1;
        if matches < rank {
            continue;
        }
        match count {
            None => return Reply::Int(idx as i64),
            Some(c) => {
                out.push(Reply::Int(idx as i64));
                if c != 0 && matches - rank + 1 >= c {
                    break;
                }
            }
        }
    }
    match count {
        None => Reply::Nil,
        Some(_) => Reply::Array(out),
    }
}

/// Pops from `from` of `src` and pushes onto `to` of `dst`.
fn move_one(ctx: &mut Ctx<'_>, src: &[u8], dst: &[u8], from: End, to: End) -> Reply {
    let Some(mut sv) = tri!(list(ctx, src)) else {
        return Reply::Nil;
    };
    // A destination of another type is refused before anything moves.
    tri!(list(ctx, dst));
    if src == dst && sv.meta.size == 1 {
        // The one element comes back where it was: the list (and its
        // expiry) stays as it is, though it counts as written for WATCH.
        let e = tri!(elements(ctx, src, &sv, 0, 0)).pop();
        tri!(ctx.put_composite(src, Kind::List, &sv));
        return e.map_or(Reply::Nil, Reply::Bulk);
    }
    let popped = tri!(pop(ctx, src, &mut sv, from, 1));
    let Some(e) = popped.into_iter().next() else {
        return Reply::Nil;
    };
    let mut dv = match tri!(list(ctx, dst)) {
        Some(v) => v,
        None => tri!(new_list(ctx, dst)),
    };
    tri!(push(ctx, dst, &mut dv, to, std::slice::from_ref(&e)));
    Reply::Bulk(e)
}

/// LMOVE source destination LEFT|RIGHT LEFT|RIGHT
pub fn lmove(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let from = tri!(end_arg(&args[3]));
    let to = tri!(end_arg(&args[4]));
    move_one(ctx, &args[1], &args[2], from, to)
}

/// RPOPLPUSH source destination
pub fn rpoplpush(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    move_one(ctx, &args[1], &args[2], End::Right, End::Left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_clamp_as_redis_does() {
        assert_eq!(clamp(0, -1, 5), Some((0, 4)));
        assert_eq!(clamp(-100, 100, 5), Some((0, 4)));
        assert_eq!(clamp(3, 1, 5), None);
        assert_eq!(clamp(5, 10, 5), None);
        assert_eq!(clamp(-2, -1, 5), Some((3, 4)));
        assert_eq!(clamp(0, -6, 5), None);
        assert_eq!(clamp(i64::MIN, i64::MAX, 3), Some((0, 2)));
        assert_eq!(index(-1, 3), Some(2));
        assert_eq!(index(3, 3), None);
        assert_eq!(index(-4, 3), None);
        assert_eq!(index(i64::MIN, 3), None);
    }
}
