//! Sorted-set commands. A sorted set is a metadata record plus, per member,
//! two engine keys ([`crate::members`]): `'m' ‖ member` → its score, for
//! ZSCORE and updates, and `'s' ‖ score ‖ member` → empty, the score index
//! that ranges walk in order. Scores are stored as order-preserving
//! big-endian integers ([`score_key`]), so the index sorts by score, then
//! member, as Redis orders a sorted set.

use super::composite::{check_member_len, clamp, Span, Value};
use super::hashes::{scan_cursor, scan_options};
use super::sets::positive_count;
use super::strings::{parse_float, tri};
use super::{int_arg, store_error, syntax_error, Ctx};
use crate::glob::glob_match;
use crate::keyspace::{DecodeError, Kind};
use crate::resp::Reply;

/// Tag of a member's score record.
const TAG_MEMBER: u8 = b'm';
/// Tag of a score index entry.
const TAG_SCORE: u8 = b's';

/// A score as a big-endian integer that sorts as the score does: the sign
/// bit flipped for positive scores, every bit for negative ones (`-0` is
/// stored as `0`, which it equals).
pub fn score_bits(score: f64) -> u64 {
    let score = if score == 0.0 { 0.0 } else { score };
    let b = score.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

/// The score [`score_bits`] encoded.
pub fn score_from_bits(b: u64) -> f64 {
    if b >> 63 == 1 {
        f64::from_bits(b & !(1 << 63))
    } else {
        f64::from_bits(!b)
    }
}

/// The member of `member`'s score record.
fn member_sub(member: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(member.len() + 1);
    m.push(TAG_MEMBER);
    m.extend_from_slice(member);
    m
}

/// The member of the index entry of `member` at score bits `bits`.
fn score_key(bits: u64, member: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(member.len() + 9);
    m.push(TAG_SCORE);
    m.extend_from_slice(&bits.to_be_bytes());
    m.extend_from_slice(member);
    m
}

/// Bytes a member adds to its longest engine key (tag and score).
const INDEX_OVERHEAD: usize = 9;

fn damaged(what: String) -> Reply {
    store_error(DecodeError(what).into())
}

/// Takes an index entry apart: its score and member.
fn parse_index(sub: &[u8]) -> Result<(f64, &[u8]), Reply> {
    match sub {
        [TAG_SCORE, rest @ ..] if rest.len() >= 8 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&rest[..8]);
            Ok((score_from_bits(u64::from_be_bytes(b)), &rest[8..]))
        }
        _ => Err(damaged(format!(
            "sorted-set index entry of {} bytes",
            sub.len()
        ))),
    }
}

/// The sorted set at `key`, if any.
fn zset(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, Reply> {
    ctx.composite(key, Kind::ZSet)
}

/// The score of `member` in `key`'s sorted set `v`.
fn score(ctx: &mut Ctx<'_>, key: &[u8], v: &Value, member: &[u8]) -> Result<Option<f64>, Reply> {
    match ctx.member(key, v, &member_sub(member))? {
        None => Ok(None),
        Some(b) => {
            let raw: [u8; 8] = b
                .as_slice()
                .try_into()
                .map_err(|_| damaged(format!("sorted-set score of {} bytes", b.len())))?;
            Ok(Some(f64::from_bits(u64::from_be_bytes(raw))))
        }
    }
}

/// Sets `member`'s score to `new` (its old score `old`, if any); the
/// caller updates the size.
fn put(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &Value,
    member: &[u8],
    old: Option<f64>,
    new: f64,
) -> Result<(), Reply> {
    let new = if new == 0.0 { 0.0 } else { new };
    if let Some(o) = old {
        if score_bits(o) == score_bits(new) {
            return Ok(());
        }
        ctx.delete_member(key, v, &score_key(score_bits(o), member))?;
    }
    ctx.put_member(key, v, &member_sub(member), &new.to_bits().to_be_bytes())?;
    ctx.put_member(key, v, &score_key(score_bits(new), member), b"")
}

/// Writes `member` at `score` into a value being restored (no old score);
/// the caller sets the size.
pub(crate) fn restore_member(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &Value,
    member: &[u8],
    score: f64,
) -> Result<(), Reply> {
    put(ctx, key, v, member, None, score)
}

/// Removes `member` (at score `old`); the caller updates the size.
fn remove(ctx: &mut Ctx<'_>, key: &[u8], v: &Value, member: &[u8], old: f64) -> Result<(), Reply> {
    ctx.delete_member(key, v, &member_sub(member))?;
    ctx.delete_member(key, v, &score_key(score_bits(old), member))
}

/// A score argument (`ERR value is not a valid float` otherwise).
fn score_arg(a: &[u8]) -> Result<f64, Reply> {
    parse_score(a).ok_or_else(|| Reply::err("value is not a valid float"))
}

/// Parses a score as Redis does (`strtod`, refusing NaN and what is out of
/// a double's range: `1e400` is not infinity, `1e-400` not zero).
fn parse_score(a: &[u8]) -> Option<f64> {
    let s = parse_float(a)?;
    let text = std::str::from_utf8(a).ok()?.to_ascii_lowercase();
    let mantissa = text.split('e').next().unwrap_or("");
    if s.is_infinite() && !text.contains("inf") {
        return None;
    }
    if s == 0.0 && mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        return None;
    }
    Some(s)
}

/// The ZADD flags.
#[derive(Default, Clone, Copy)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// What one ZADD pair did.
enum Added {
    /// A new member.
    New(f64),
    /// A member whose score changed.
    Updated(f64),
    /// Nothing (NX on an existing member, XX on a new one, GT/LT refused,
    /// or the same score).
    Same(Option<f64>),
}

/// Adds or updates one member as ZADD does with `f`.
fn add_one(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &mut Value,
    member: &[u8],
    s: f64,
    f: AddFlags,
) -> Result<Added, Reply> {
    let nan = || Reply::err("resulting score is not a number (NaN)");
    match score(ctx, key, v, member)? {
        Some(cur) => {
            if f.nx {
                return Ok(Added::Same(None));
            }
            let new = if f.incr { cur + s } else { s };
            if new.is_nan() {
                return Err(nan());
            }
            if (f.lt && new >= cur) || (f.gt && new <= cur) {
                return Ok(Added::Same(None));
            }
            if new == cur {
                return Ok(Added::Same(Some(new)));
            }
            put(ctx, key, v, member, Some(cur), new)?;
            Ok(Added::Updated(new))
        }
        None if f.xx => Ok(Added::Same(None)),
        None => {
            put(ctx, key, v, member, None, s)?;
            v.meta.size += 1;
            Ok(Added::New(s))
        }
    }
}

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]
pub fn zadd(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut f = AddFlags::default();
    let mut i = 2;
    while i < args.len() {
        match args[i].to_ascii_lowercase().as_slice() {
            b"nx" => f.nx = true,
            b"xx" => f.xx = true,
            b"gt" => f.gt = true,
            b"lt" => f.lt = true,
            b"ch" => f.ch = true,
            b"incr" => f.incr = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &args[i..];
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return syntax_error();
    }
    if f.nx && f.xx {
        return Reply::err("XX and NX options at the same time are not compatible");
    }
    if (f.gt || f.lt) && (f.nx || (f.gt && f.lt)) {
        return Reply::err("GT, LT, and/or NX options at the same time are not compatible");
    }
    if f.incr && pairs.len() > 2 {
        return Reply::err("INCR option supports a single increment-element pair");
    }
    let mut scores = Vec::with_capacity(pairs.len() / 2);
    for p in pairs.chunks(2) {
        scores.push(tri!(score_arg(&p[0])));
        tri!(check_member_len(ctx, &args[1], p[1].len() + INDEX_OVERHEAD));
    }
    add_pairs(ctx, &args[1], pairs, &scores, f)
}

fn add_pairs(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    pairs: &[Vec<u8>],
    scores: &[f64],
    f: AddFlags,
) -> Reply {
    let mut v = match tri!(zset(ctx, key)) {
        Some(v) => v,
        None if f.xx => {
            return if f.incr { Reply::Nil } else { Reply::Int(0) };
        }
        None => tri!(ctx.new_composite_of(Kind::ZSet)),
    };
    let (mut added, mut updated, mut last) = (0, 0, None);
    let mut failed = None;
    for (p, &s) in pairs.chunks(2).zip(scores) {
        match add_one(ctx, key, &mut v, &p[1], s, f) {
            Ok(Added::New(n)) => {
                added += 1;
                last = Some(n);
            }
            Ok(Added::Updated(n)) => {
                updated += 1;
                last = Some(n);
            }
            Ok(Added::Same(n)) => last = n,
            Err(e) => {
                // As in Redis, the pairs before the failing one stay added.
                failed = Some(e);
                break;
            }
        }
    }
    if added > 0 || updated > 0 {
        tri!(ctx.put_composite(key, Kind::ZSet, &v));
    }
    if let Some(e) = failed {
        return e;
    }
    if f.incr {
        last.map_or(Reply::Nil, Reply::Double)
    } else {
        Reply::Int(if f.ch { added + updated } else { added })
    }
}

/// ZINCRBY key increment member
pub fn zincrby(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let by = tri!(score_arg(&args[2]));
    tri!(check_member_len(
        ctx,
        &args[1],
        args[3].len() + INDEX_OVERHEAD
    ));
    let f = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    add_pairs(ctx, &args[1], &args[2..4], &[by], f)
}

/// ZREM key member [member ...]
pub fn zrem(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let key = &args[1];
    let Some(mut v) = tri!(zset(ctx, key)) else {
        return Reply::Int(0);
    };
    let mut removed = 0;
    for m in &args[2..] {
        if let Some(s) = tri!(score(ctx, key, &v, m)) {
            tri!(remove(ctx, key, &v, m, s));
            v.meta.size = v.meta.size.saturating_sub(1);
            removed += 1;
        }
    }
    if removed > 0 {
        tri!(ctx.put_composite(key, Kind::ZSet, &v));
    }
    Reply::Int(removed)
}

/// ZSCORE key member
pub fn zscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(v) = tri!(zset(ctx, &args[1])) else {
        return Reply::Nil;
    };
    tri!(score(ctx, &args[1], &v, &args[2])).map_or(Reply::Nil, Reply::Double)
}

/// ZMSCORE key member [member ...]
pub fn zmscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(v) = tri!(zset(ctx, &args[1])) else {
        return Reply::Array(vec![Reply::Nil; args.len() - 2]);
    };
    let mut out = Vec::with_capacity(args.len() - 2);
    for m in &args[2..] {
        out.push(tri!(score(ctx, &args[1], &v, m)).map_or(Reply::Nil, Reply::Double));
    }
    Reply::Array(out)
}

/// ZCARD key
pub fn zcard(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let n = tri!(zset(ctx, &args[1])).map_or(0, |v| v.meta.size);
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// A score range: each end's score and whether it is excluded.
#[derive(Debug, Clone, Copy)]
struct ScoreRange {
    min: f64,
    min_ex: bool,
    max: f64,
    max_ex: bool,
}

fn score_item(a: &[u8]) -> Option<(f64, bool)> {
    let (body, ex) = match a.strip_prefix(b"(") {
        Some(rest) => (rest, true),
        None => (a, false),
    };
    parse_float(body).map(|s| (s, ex))
}

/// Parses a score range (`ERR min or max is not a float`).
fn score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
    let bad = || Reply::err("min or max is not a float");
    let (min, min_ex) = score_item(min).ok_or_else(bad)?;
    let (max, max_ex) = score_item(max).ok_or_else(bad)?;
    Ok(ScoreRange {
        min,
        min_ex,
        max,
        max_ex,
    })
}

impl ScoreRange {
    /// The index span holding exactly the scores in range; `None` if
    /// none can be.
    fn span(&self) -> Option<([u8; 9], [u8; 9])> {
        if self.min > self.max || (self.min == self.max && (self.min_ex || self.max_ex)) {
            return None;
        }
        let lo = score_bits(self.min).checked_add(u64::from(self.min_ex))?;
        let hi = score_bits(self.max).checked_add(u64::from(!self.max_ex))?;
        let mut a = [TAG_SCORE; 9];
        a[1..].copy_from_slice(&lo.to_be_bytes());
        let mut b = [TAG_SCORE; 9];
        b[1..].copy_from_slice(&hi.to_be_bytes());
        Some((a, b))
    }
}

/// A lexicographic range end.
#[derive(Debug, Clone)]
enum LexItem {
    /// `-`: below every member.
    Min,
    /// `+`: above every member.
    Max,
    /// `[m` (inclusive) or `(m` (exclusive).
    At(Vec<u8>, bool),
}

fn lex_item(a: &[u8]) -> Option<LexItem> {
    match a {
        b"-" => Some(LexItem::Min),
        b"+" => Some(LexItem::Max),
        [b'(', rest @ ..] => Some(LexItem::At(rest.to_vec(), true)),
        [b'[', rest @ ..] => Some(LexItem::At(rest.to_vec(), false)),
        _ => None,
    }
}

/// A lexicographic range.
#[derive(Debug, Clone)]
struct LexRange {
    min: LexItem,
    max: LexItem,
}

fn lex_range(min: &[u8], max: &[u8]) -> Result<LexRange, Reply> {
    let bad = || Reply::err("min or max not valid string range item");
    Ok(LexRange {
        min: lex_item(min).ok_or_else(bad)?,
        max: lex_item(max).ok_or_else(bad)?,
    })
}

impl LexRange {
    fn above_min(&self, m: &[u8]) -> bool {
        match &self.min {
            LexItem::Min => true,
            LexItem::Max => false,
            LexItem::At(v, ex) => {
                if *ex {
                    m > v.as_slice()
                } else {
                    m >= v.as_slice()
                }
            }
        }
    }

    fn below_max(&self, m: &[u8]) -> bool {
        match &self.max {
            LexItem::Min => false,
            LexItem::Max => true,
            LexItem::At(v, ex) => {
                if *ex {
                    m < v.as_slice()
                } else {
                    m <= v.as_slice()
                }
            }
        }
    }
}

/// What a range selects.
#[derive(Debug, Clone)]
enum Range {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

/// A parsed ZRANGE-family request.
struct RangeQuery {
    range: Range,
    rev: bool,
    /// LIMIT offset and count (count < 0: all).
    limit: Option<(i64, i64)>,
    with_scores: bool,
}

/// Members (with scores) of `key`'s sorted set `v` that `q` selects, in
/// the order it asks for.
fn select(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &Value,
    q: &RangeQuery,
) -> Result<Vec<(Vec<u8>, f64)>, Reply> {
    let all_index = Span {
        lo: &[TAG_SCORE],
        hi: Some(&[TAG_SCORE + 1]),
    };
    let (offset, count) = match q.limit {
        _ if matches!(q.range, Range::Rank(..)) => (0, usize::MAX),
        Some((o, _)) if o < 0 => return Ok(Vec::new()),
        Some((o, c)) => (o as usize, if c < 0 { usize::MAX } else { c as usize }),
        None => (0, usize::MAX),
    };
    let walked = match &q.range {
        Range::Rank(start, stop) => {
            let Some((a, b)) = clamp(*start, *stop, v.meta.size) else {
                return Ok(Vec::new());
            };
            let (page, _) = ctx.walk(key, Kind::ZSet, v, all_index, (b + 1) as usize, q.rev)?;
            page.into_iter().skip(a as usize).collect::<Vec<_>>()
        }
        Range::Score(r) => {
            let Some((lo, hi)) = r.span() else {
                return Ok(Vec::new());
            };
            let span = Span {
                lo: &lo,
                hi: Some(&hi),
            };
            let want = offset.saturating_add(count);
            let (page, _) = ctx.walk(key, Kind::ZSet, v, span, want, q.rev)?;
            page.into_iter().skip(offset).collect()
        }
        Range::Lex(r) => {
            // Walked in index order, keeping only the members in range and
            // stopping at the first past it or once LIMIT is met.
            let mut out = Vec::new();
            let mut started = false;
            let mut skipped = 0;
            let mut bad = None;
            ctx.walk_each(
                key,
                Kind::ZSet,
                v,
                all_index,
                q.rev,
                count,
                &mut |sub, val| {
                    let m = match parse_index(sub) {
                        Ok((_, m)) => m,
                        Err(e) => {
                            bad = Some(e);
                            return false;
                        }
                    };
                    let (inside_start, inside_end) = if q.rev {
                        (r.below_max(m), r.above_min(m))
                    } else {
                        (r.above_min(m), r.below_max(m))
                    };
                    if !started {
                        if !inside_start {
                            return true;
                        }
                        started = true;
                    }
                    if !inside_end || out.len() >= count {
                        return false;
                    }
                    if skipped < offset {
                        skipped += 1;
                        return true;
                    }
                    out.push((sub.to_vec(), val));
                    true
                },
            )?;
            if let Some(e) = bad {
                return Err(e);
            }
            out
        }
    };
    walked
        .into_iter()
        .map(|(sub, _)| parse_index(&sub).map(|(s, m)| (m.to_vec(), s)))
        .collect()
}

/// The reply for `members`: members, or members and scores (flat in
/// RESP2, pairs in RESP3).
fn range_reply(ctx: &Ctx<'_>, members: Vec<(Vec<u8>, f64)>, with_scores: bool) -> Reply {
    if !with_scores {
        return Reply::Array(members.into_iter().map(|(m, _)| Reply::Bulk(m)).collect());
    }
    if ctx.session.resp3 {
        return Reply::Array(
            members
                .into_iter()
                .map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)]))
                .collect(),
        );
    }
    let mut out = Vec::with_capacity(members.len() * 2);
    for (m, s) in members {
        out.push(Reply::Bulk(m));
        out.push(Reply::Double(s));
    }
    Reply::Array(out)
}

/// What a ZRANGE-family command ranges over, as far as its name fixes it
/// (ZRANGE leaves it to BYSCORE or BYLEX).
#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeBy {
    /// ZRANGE: rank unless BYSCORE or BYLEX; REV allowed.
    Auto,
    Rank,
    Score,
    Lex,
}

/// Parses and runs a ZRANGE-family command: `args[2..4]` is the range,
/// the options follow; `rev` is fixed by the command unless it is ZRANGE.
fn zrange_generic(ctx: &mut Ctx<'_>, args: &[Vec<u8>], by: RangeBy, rev: bool) -> Reply {
    let mut rangetype = by;
    let mut rev_set = rev;
    let mut direction_fixed = by != RangeBy::Auto;
    let mut limit = None;
    let mut with_scores = false;
    let mut j = 4;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = args[j].to_ascii_lowercase();
        if a == b"withscores" {
            with_scores = true;
        } else if a == b"limit" && left >= 2 {
            let o = tri!(int_arg(&args[j + 1]));
            let c = tri!(int_arg(&args[j + 2]));
            limit = Some((o, c));
            j += 2;
        } else if !direction_fixed && a == b"rev" {
            rev_set = true;
            direction_fixed = true;
        } else if rangetype == RangeBy::Auto && a == b"bylex" {
            rangetype = RangeBy::Lex;
        } else if rangetype == RangeBy::Auto && a == b"byscore" {
            rangetype = RangeBy::Score;
        } else {
            return syntax_error();
        }
        j += 1;
    }
    if rangetype == RangeBy::Auto {
        rangetype = RangeBy::Rank;
    }
    // Redis takes a count of -1 for "no LIMIT given".
    if limit.is_some_and(|(_, c)| c != -1) && rangetype == RangeBy::Rank {
        return Reply::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if with_scores && rangetype == RangeBy::Lex {
        return Reply::err("syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    // Reversed score and lex ranges are given as max, min.
    let (lo, hi) = if rev_set && rangetype != RangeBy::Rank {
        (&args[3], &args[2])
    } else {
        (&args[2], &args[3])
    };
    let range = match rangetype {
        RangeBy::Score => Range::Score(tri!(score_range(lo, hi))),
        RangeBy::Lex => Range::Lex(tri!(lex_range(lo, hi))),
        _ => Range::Rank(tri!(int_arg(lo)), tri!(int_arg(hi))),
    };
    let key = &args[1];
    let Some(v) = tri!(zset(ctx, key)) else {
        return Reply::Array(Vec::new());
    };
    let q = RangeQuery {
        range,
        rev: rev_set,
        limit,
        with_scores,
    };
    let members = tri!(select(ctx, key, &v, &q));
    range_reply(ctx, members, q.with_scores)
}

/// ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]
pub fn zrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    zrange_generic(ctx, args, RangeBy::Auto, false)
}

/// ZREVRANGE key start stop [WITHSCORES]
pub fn zrevrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    zrange_generic(ctx, args, RangeBy::Rank, true)
}

/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
pub fn zrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    zrange_generic(ctx, args, RangeBy::Score, false)
}

/// ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]
pub fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    zrange_generic(ctx, args, RangeBy::Score, true)
}

/// ZRANGEBYLEX key min max [LIMIT offset count]
pub fn zrangebylex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    zrange_generic(ctx, args, RangeBy::Lex, false)
}

/// ZREVRANGEBYLEX key max min [LIMIT offset count]
pub fn zrevrangebylex(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    zrange_generic(ctx, args, RangeBy::Lex, true)
}

/// ZCOUNT key min max
pub fn zcount(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let r = tri!(score_range(&args[2], &args[3]));
    let key = &args[1];
    let Some(v) = tri!(zset(ctx, key)) else {
        return Reply::Int(0);
    };
    let Some((lo, hi)) = r.span() else {
        return Reply::Int(0);
    };
    let span = Span {
        lo: &lo,
        hi: Some(&hi),
    };
    let n = tri!(ctx.count_members(key, Kind::ZSet, &v, span));
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The rank of `member` from the lowest score (or the highest, `rev`).
fn rank(ctx: &mut Ctx<'_>, args: &[Vec<u8>], rev: bool) -> Reply {
    let key = &args[1];
    let Some(v) = tri!(zset(ctx, key)) else {
        return Reply::Nil;
    };
    let Some(s) = tri!(score(ctx, key, &v, &args[2])) else {
        return Reply::Nil;
    };
    // Counts the index entries before the member's own (after it, for
    // the reverse rank).
    let own = score_key(score_bits(s), &args[2]);
    let mut after = own.clone();
    after.push(0);
    let end = [TAG_SCORE + 1];
    let span = if rev {
        Span {
            lo: &after,
            hi: Some(&end),
        }
    } else {
        Span {
            lo: &[TAG_SCORE],
            hi: Some(&own),
        }
    };
    let n = tri!(ctx.count_members(key, Kind::ZSet, &v, span));
    Reply::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// ZRANK key member
pub fn zrank(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    rank(ctx, args, false)
}

/// ZREVRANK key member
pub fn zrevrank(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    rank(ctx, args, true)
}

/// Removes `members` (with their scores) from `key`'s sorted set `v`.
fn remove_all(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    v: &mut Value,
    members: &[(Vec<u8>, f64)],
) -> Result<(), Reply> {
    for (m, s) in members {
        remove(ctx, key, v, m, *s)?;
    }
    v.meta.size = v.meta.size.saturating_sub(members.len() as u64);
    ctx.put_composite(key, Kind::ZSet, v)
}

fn zpop(ctx: &mut Ctx<'_>, args: &[Vec<u8>], max: bool) -> Reply {
    if args.len() > 3 {
        return syntax_error();
    }
    let count = tri!(positive_count(args.get(2)));
    let key = &args[1];
    let Some(mut v) = tri!(zset(ctx, key)) else {
        return Reply::Array(Vec::new());
    };
    if count == Some(0) {
        return Reply::Array(Vec::new());
    }
    let n = i64::try_from(count.unwrap_or(1)).unwrap_or(i64::MAX);
    let q = RangeQuery {
        range: Range::Rank(0, n - 1),
        rev: max,
        limit: None,
        with_scores: true,
    };
    let popped = tri!(select(ctx, key, &v, &q));
    tri!(remove_all(ctx, key, &mut v, &popped));
    if count.is_none() || !ctx.session.resp3 {
        let mut out = Vec::with_capacity(popped.len() * 2);
        for (m, s) in popped {
            out.push(Reply::Bulk(m));
            out.push(Reply::Double(s));
        }
        return Reply::Array(out);
    }
    range_reply(ctx, popped, true)
}

/// ZPOPMIN key [count]
pub fn zpopmin(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    zpop(ctx, args, false)
}

/// ZPOPMAX key [count]
pub fn zpopmax(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    zpop(ctx, args, true)
}

fn zremrange(ctx: &mut Ctx<'_>, args: &[Vec<u8>], range: Range) -> Reply {
    let key = &args[1];
    let Some(mut v) = tri!(zset(ctx, key)) else {
        return Reply::Int(0);
    };
    let q = RangeQuery {
        range,
        rev: false,
        limit: None,
        with_scores: true,
    };
    let gone = tri!(select(ctx, key, &v, &q));
    if gone.is_empty() {
        return Reply::Int(0);
    }
    tri!(remove_all(ctx, key, &mut v, &gone));
    Reply::Int(gone.len() as i64)
}

/// ZREMRANGEBYSCORE key min max
pub fn zremrangebyscore(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let r = tri!(score_range(&args[2], &args[3]));
    zremrange(ctx, args, Range::Score(r))
}

/// ZREMRANGEBYRANK key start stop
pub fn zremrangebyrank(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let start = tri!(int_arg(&args[2]));
    let stop = tri!(int_arg(&args[3]));
    zremrange(ctx, args, Range::Rank(start, stop))
}

/// ZSCAN key cursor [MATCH pattern] [COUNT count]
pub fn zscan(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let o = tri!(scan_options(&args[3..]));
    let Some(from) = tri!(scan_cursor(ctx, &args[2])) else {
        return ctx.session.scan_reply(None, Vec::new());
    };
    let key = &args[1];
    let Some(v) = tri!(zset(ctx, key)) else {
        return ctx.session.scan_reply(None, Vec::new());
    };
    // Walks the score records (`'m' ‖ member`), in member order.
    let lo = if from.is_empty() {
        vec![TAG_MEMBER]
    } else {
        from
    };
    let span = Span {
        lo: &lo,
        hi: Some(&[TAG_MEMBER + 1]),
    };
    let (page, next) = tri!(ctx.walk(key, Kind::ZSet, &v, span, o.count, false));
    let mut out = Vec::with_capacity(page.len() * 2);
    for (sub, raw) in page {
        let m = &sub[1..];
        if o.pattern.is_some_and(|p| !glob_match(p, m)) {
            continue;
        }
        let Ok(b) = <[u8; 8]>::try_from(raw.as_slice()) else {
            return damaged(format!("sorted-set score of {} bytes", raw.len()));
        };
        out.push(Reply::Bulk(m.to_vec()));
        out.push(Reply::Bulk(
            crate::resp::reply::format_double(f64::from_bits(u64::from_be_bytes(b))).into_bytes(),
        ));
    }
    ctx.session.scan_reply(next, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_bits_sort_as_scores_and_round_trip() {
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -1.0,
            -f64::MIN_POSITIVE,
            0.0,
            f64::MIN_POSITIVE,
            0.5,
            1.0,
            3.0,
            1e300,
            f64::INFINITY,
        ];
        for w in scores.windows(2) {
            assert!(score_bits(w[0]) < score_bits(w[1]), "{} < {}", w[0], w[1]);
        }
        for s in scores {
            assert_eq!(score_from_bits(score_bits(s)), s);
        }
        assert_eq!(score_bits(-0.0), score_bits(0.0));
    }

    #[test]
    fn score_ranges_map_to_index_spans() {
        let r = score_range(b"(1", b"2").unwrap();
        let (lo, hi) = r.span().unwrap();
        assert!(lo[1..] > score_bits(1.0).to_be_bytes()[..]);
        assert!(hi[1..] > score_bits(2.0).to_be_bytes()[..]);
        assert!(score_range(b"2", b"(2").unwrap().span().is_none());
        assert!(score_range(b"3", b"2").unwrap().span().is_none());
        assert!(score_range(b"-inf", b"+inf").unwrap().span().is_some());
        assert!(score_range(b"x", b"1").is_err());
        assert!(score_range(b"nan", b"1").is_err());
        assert!(lex_range(b"a", b"+").is_err());
        assert!(lex_range(b"[a", b"(b").is_ok());
    }
}
