//! Bit commands on strings: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP and
//! BITFIELD (GET, SET, INCRBY, OVERFLOW). Bit 0 is the most significant
//! bit of the first byte, as in Redis; reads past the end of a string see
//! zeros, and writes past it grow the string with zeros.

use super::strings::{read, tri};
use super::{int_arg, syntax_error, Ctx};
use crate::resp::Reply;

/// `ERR bit offset is not an integer or out of range`.
fn bad_offset() -> Reply {
    Reply::err("bit offset is not an integer or out of range")
}

/// A SETBIT/GETBIT offset: at least 0 and within `proto-max-bulk-len`
/// bytes.
fn bit_offset(ctx: &Ctx<'_>, a: &[u8]) -> Result<u64, Reply> {
    let o = int_arg(a).map_err(|_| bad_offset())?;
    if o < 0 || (o as u64 >> 3) >= ctx.state.config.proto_max_bulk_len as u64 {
        return Err(bad_offset());
    }
    Ok(o as u64)
}

/// Bit `i` of `v` (0 past its end).
fn bit(v: &[u8], i: u64) -> u8 {
    v.get((i >> 3) as usize)
        .map_or(0, |b| (b >> (7 - (i & 7))) & 1)
}

/// Sets bit `i` of `v` (which holds it) to `on`.
fn set_bit(v: &mut [u8], i: u64, on: bool) {
    let mask = 1u8 << (7 - (i & 7));
    let b = &mut v[(i >> 3) as usize];
    if on {
        *b |= mask;
    } else {
        *b &= !mask;
    }
}

/// Grows `v` with zeros to hold bit `last`, refusing a string longer than
/// `proto-max-bulk-len`.
fn grow(ctx: &Ctx<'_>, v: &mut Vec<u8>, last: u64) -> Result<(), Reply> {
    let len = (last >> 3) + 1;
    if len > ctx.state.config.proto_max_bulk_len as u64 {
        return Err(Reply::err(
            "string exceeds maximum allowed size (proto-max-bulk-len)",
        ));
    }
    if (v.len() as u64) < len {
        v.resize(len as usize, 0);
    }
    Ok(())
}

/// SETBIT key offset value
pub fn setbit(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let off = tri!(bit_offset(ctx, &args[2]));
    let on = match int_arg(&args[3]) {
        Ok(0) => false,
        Ok(1) => true,
        _ => return Reply::err("bit is not an integer or out of range"),
    };
    let key = &args[1];
    let (mut v, exp) = match tri!(read(ctx, key)) {
        Some(e) => (Vec::from(e.value), e.expire_at),
        None => (Vec::new(), None),
    };
    tri!(grow(ctx, &mut v, off));
    let old = bit(&v, off);
    set_bit(&mut v, off, on);
    tri!(ctx.put(key, &v, exp));
    Reply::Int(i64::from(old))
}

/// GETBIT key offset
pub fn getbit(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let off = tri!(bit_offset(ctx, &args[2]));
    let v = tri!(read(ctx, &args[1]))
        .map(|e| e.value)
        .unwrap_or_default();
    Reply::Int(i64::from(bit(&v, off)))
}

/// A BITCOUNT/BITPOS range as Redis resolves it: inclusive bit positions
/// within the string, or `None` when it is empty.
fn bit_range(len: u64, start: i64, end: i64, in_bits: bool) -> Option<(u64, u64)> {
    let total = i64::try_from(if in_bits { len * 8 } else { len }).unwrap_or(i64::MAX);
    let mut start = if start < 0 {
        start.saturating_add(total)
    } else {
        start
    };
    let mut end = if end < 0 {
        end.saturating_add(total)
    } else {
        end
    };
    start = start.max(0);
    end = end.max(0);
    if end >= total {
        end = total - 1;
    }
    if start > end {
        return None;
    }
    let (s, e) = (start as u64, end as u64);
    Some(if in_bits { (s, e) } else { (s * 8, e * 8 + 7) })
}

/// Parses BYTE or BIT.
fn unit(a: &[u8]) -> Result<bool, Reply> {
    if a.eq_ignore_ascii_case(b"bit") {
        Ok(true)
    } else if a.eq_ignore_ascii_case(b"byte") {
        Ok(false)
    } else {
        Err(syntax_error())
    }
}

/// Set bits of `v` in the inclusive bit range `lo..=hi`.
fn count_ones(v: &[u8], lo: u64, hi: u64) -> u64 {
    let (first, last) = ((lo >> 3) as usize, (hi >> 3) as usize);
    let mut n: u64 = v[first..=last]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    // Take off the bits of the edge bytes outside the range.
    let head = v[first] & !(0xffu8 >> (lo & 7));
    let tail = v[last] & (0xffu8.checked_shr(((hi & 7) + 1) as u32).unwrap_or(0));
    n -= u64::from(head.count_ones()) + u64::from(tail.count_ones());
    n
}

/// BITCOUNT key [start end [BYTE|BIT]]
pub fn bitcount(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let Some(e) = tri!(read(ctx, &args[1])) else {
        return Reply::Int(0);
    };
    let v = e.value;
    let range = match args.len() {
        2 => bit_range(v.len() as u64, 0, -1, false),
        4 | 5 => {
            let start = tri!(int_arg(&args[2]));
            let end = tri!(int_arg(&args[3]));
            // Redis answers this before it looks at the unit.
            if start < 0 && end < 0 && start > end {
                return Reply::Int(0);
            }
            let in_bits = match args.get(4) {
                Some(u) => tri!(unit(u)),
                None => false,
            };
            bit_range(v.len() as u64, start, end, in_bits)
        }
        _ => return syntax_error(),
    };
    match range {
        Some((lo, hi)) => Reply::Int(count_ones(&v, lo, hi) as i64),
        None => Reply::Int(0),
    }
}

/// BITPOS key bit [start [end [BYTE|BIT]]]
pub fn bitpos(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let want = match tri!(int_arg(&args[2])) {
        0 => 0u8,
        1 => 1u8,
        _ => return Reply::err("The bit argument must be 1 or 0."),
    };
    let Some(e) = tri!(read(ctx, &args[1])) else {
        return Reply::Int(if want == 1 { -1 } else { 0 });
    };
    let v = e.value;
    let len = v.len() as u64;
    let (range, end_given) = match args.len() {
        3 => (bit_range(len, 0, -1, false), false),
        4..=6 => {
            let start = tri!(int_arg(&args[3]));
            let in_bits = match args.get(5) {
                Some(u) => tri!(unit(u)),
                None => false,
            };
            let (end, given) = match args.get(4) {
                Some(a) => (tri!(int_arg(a)), true),
                None => (-1, false),
            };
            (bit_range(len, start, end, in_bits), given)
        }
        _ => return syntax_error(),
    };
    let Some((lo, hi)) = range else {
        return Reply::Int(-1);
    };
    if let Some(p) = (lo..=hi).find(|&i| bit(&v, i) == want) {
        return Reply::Int(p as i64);
    }
    // Without an end, a string is taken as padded with zeros on the right.
    if want == 0 && !end_given {
        return Reply::Int((len * 8) as i64);
    }
    Reply::Int(-1)
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]
pub fn bitop(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let op = args[1].to_ascii_lowercase();
    if !matches!(op.as_slice(), b"and" | b"or" | b"xor" | b"not") {
        return syntax_error();
    }
    if op == b"not" && args.len() != 4 {
        return Reply::err("BITOP NOT must be called with a single source key.");
    }
    let mut srcs = Vec::with_capacity(args.len() - 3);
    for k in &args[3..] {
        srcs.push(tri!(read(ctx, k)).map(|e| e.value).unwrap_or_default());
    }
    let max = srcs.iter().map(|s| s.len()).max().unwrap_or(0);
    let dst = &args[2];
    if max == 0 {
        tri!(ctx.delete(dst));
        return Reply::Int(0);
    }
    let byte = |s: &bytes::Bytes, i: usize| s.get(i).copied().unwrap_or(0);
    let out: Vec<u8> = (0..max)
        .map(|i| {
            let mut it = srcs.iter().map(|s| byte(s, i));
            let first = it.next().unwrap_or(0);
            match op.as_slice() {
                b"and" => it.fold(first, |a, b| a & b),
                b"or" => it.fold(first, |a, b| a | b),
                b"xor" => it.fold(first, |a, b| a ^ b),
                _ => !first,
            }
        })
        .collect();
    tri!(ctx.put(dst, &out, None));
    Reply::Int(max as i64)
}

/// What BITFIELD does on overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

/// One BITFIELD operation.
#[derive(Debug, Clone, Copy)]
enum Op {
    Get,
    Set(i64),
    Incr(i64),
}

#[derive(Debug, Clone, Copy)]
struct Field {
    signed: bool,
    bits: u32,
    offset: u64,
    op: Op,
    overflow: Overflow,
}

/// Parses a field type: `i1`..`i64` or `u1`..`u63`.
fn field_type(a: &[u8]) -> Result<(bool, u32), Reply> {
    let bad = || {
        Reply::err(
            "Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
        )
    };
    let (signed, digits) = match a.split_first() {
        Some((b'i', d)) => (true, d),
        Some((b'u', d)) => (false, d),
        _ => return Err(bad()),
    };
    let bits = crate::resp::parser::parse_int(digits).ok_or_else(bad)?;
    let max = if signed { 64 } else { 63 };
    if !(1..=max).contains(&bits) {
        return Err(bad());
    }
    Ok((signed, bits as u32))
}

/// Parses a field offset: bits, or `#n` for n fields of `bits`; like
/// SETBIT's, within `proto-max-bulk-len` bytes.
fn field_offset(a: &[u8], bits: u32, max_bytes: u64) -> Result<u64, Reply> {
    let (n, scale) = match a.strip_prefix(b"#") {
        Some(rest) => (rest, i64::from(bits)),
        None => (a, 1),
    };
    let o = crate::resp::parser::parse_int(n).ok_or_else(bad_offset)?;
    let o = o.checked_mul(scale).ok_or_else(bad_offset)?;
    if o < 0 || (o as u64 >> 3) >= max_bytes {
        return Err(bad_offset());
    }
    Ok(o as u64)
}

/// The `bits`-wide unsigned integer at bit `offset` of `v`.
fn get_field(v: &[u8], offset: u64, bits: u32) -> u64 {
    (0..u64::from(bits)).fold(0u64, |acc, i| (acc << 1) | u64::from(bit(v, offset + i)))
}

/// Writes the low `bits` of `x` at bit `offset` of `v` (which holds them).
fn set_field(v: &mut [u8], offset: u64, bits: u32, x: u64) {
    for i in 0..u64::from(bits) {
        let on = (x >> (u64::from(bits) - 1 - i)) & 1 == 1;
        set_bit(v, offset + i, on);
    }
}

/// `x` read as a `bits`-wide two's-complement integer.
fn sign_extend(x: u64, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((x << shift) as i64) >> shift
}

/// Fits `x` into the field's range per its overflow rule: `None` when it
/// fails.
fn fit(x: i128, signed: bool, bits: u32, overflow: Overflow) -> Option<i128> {
    let (min, max) = if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    if (min..=max).contains(&x) {
        return Some(x);
    }
    match overflow {
        Overflow::Fail => None,
        Overflow::Sat => Some(if x > max { max } else { min }),
        Overflow::Wrap => {
            let m = x.rem_euclid(1i128 << bits);
            Some(if signed && m > max {
                m - (1i128 << bits)
            } else {
                m
            })
        }
    }
}

/// Parses BITFIELD's operations (`args[2..]`).
fn parse_fields(args: &[Vec<u8>], max_bytes: u64) -> Result<Vec<Field>, Reply> {
    let mut out = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let sub = args[j].to_ascii_lowercase();
        let takes = match sub.as_slice() {
            b"get" if left >= 2 => 2,
            b"set" | b"incrby" if left >= 3 => 3,
            b"overflow" if left >= 1 => {
                overflow = match args[j + 1].to_ascii_lowercase().as_slice() {
                    b"wrap" => Overflow::Wrap,
                    b"sat" => Overflow::Sat,
                    b"fail" => Overflow::Fail,
                    _ => return Err(Reply::err("Invalid OVERFLOW type specified")),
                };
                j += 2;
                continue;
            }
            _ => return Err(syntax_error()),
        };
        let (signed, bits) = field_type(&args[j + 1])?;
        let offset = field_offset(&args[j + 2], bits, max_bytes)?;
        let op = match sub.as_slice() {
            b"get" => Op::Get,
            b"set" => Op::Set(int_arg(&args[j + 3])?),
            _ => Op::Incr(int_arg(&args[j + 3])?),
        };
        out.push(Field {
            signed,
            bits,
            offset,
            op,
            overflow,
        });
        j += 1 + takes;
    }
    Ok(out)
}

fn bitfield_generic(ctx: &mut Ctx<'_>, args: &[Vec<u8>], read_only: bool) -> Reply {
    let fields = tri!(parse_fields(
        args,
        ctx.state.config.proto_max_bulk_len as u64
    ));
    let writes = fields.iter().any(|f| !matches!(f.op, Op::Get));
    if read_only && writes {
        return Reply::err("BITFIELD_RO only supports the GET subcommand");
    }
    let key = &args[1];
    let (mut v, exp) = match tri!(read(ctx, key)) {
        Some(e) => (Vec::from(e.value), e.expire_at),
        None => (Vec::new(), None),
    };
    if writes {
        let last = fields
            .iter()
            .filter(|f| !matches!(f.op, Op::Get))
            .map(|f| f.offset + u64::from(f.bits) - 1)
            .max()
            .unwrap_or(0);
        tri!(grow(ctx, &mut v, last));
    }
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let raw = get_field(&v, f.offset, f.bits);
        let cur = if f.signed {
            i128::from(sign_extend(raw, f.bits))
        } else {
            i128::from(raw)
        };
        let (new, reply) = match f.op {
            Op::Get => {
                out.push(Reply::Int(cur as i64));
                continue;
            }
            Op::Set(x) => {
                // An unsigned field takes the value's 64 bits as unsigned.
                let x = if f.signed {
                    i128::from(x)
                } else {
                    i128::from(x as u64)
                };
                let new = fit(x, f.signed, f.bits, f.overflow);
                (new, new.map(|_| cur))
            }
            Op::Incr(by) => {
                let new = fit(cur + i128::from(by), f.signed, f.bits, f.overflow);
                (new, new)
            }
        };
        match (new, reply) {
            (Some(n), Some(r)) => {
                set_field(&mut v, f.offset, f.bits, n as u64);
                out.push(Reply::Int(r as i64));
            }
            _ => out.push(Reply::Nil),
        }
    }
    if writes {
        tri!(ctx.put(key, &v, exp));
    }
    Reply::Array(out)
}

/// BITFIELD key [GET type offset] [SET type offset value] [INCRBY type
/// offset increment] [OVERFLOW WRAP|SAT|FAIL] ...
pub fn bitfield(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    bitfield_generic(ctx, args, false)
}

/// BITFIELD_RO key [GET type offset ...]
pub fn bitfield_ro(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    bitfield_generic(ctx, args, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_fit_by_their_overflow_rule() {
        assert_eq!(fit(128, true, 8, Overflow::Wrap), Some(-128));
        assert_eq!(fit(128, true, 8, Overflow::Sat), Some(127));
        assert_eq!(fit(128, true, 8, Overflow::Fail), None);
        assert_eq!(fit(-129, true, 8, Overflow::Wrap), Some(127));
        assert_eq!(fit(256, false, 8, Overflow::Wrap), Some(0));
        assert_eq!(fit(-1, false, 8, Overflow::Sat), Some(0));
        assert_eq!(
            fit(i128::from(u64::MAX), false, 8, Overflow::Wrap),
            Some(255)
        );
        assert_eq!(
            fit(i128::from(i64::MAX) + 1, true, 64, Overflow::Wrap),
            Some(i128::from(i64::MIN))
        );
    }

    #[test]
    fn fields_read_back_what_was_written() {
        let mut v = vec![0u8; 4];
        set_field(&mut v, 3, 12, 0xabc);
        assert_eq!(get_field(&v, 3, 12), 0xabc);
        assert_eq!(sign_extend(get_field(&v, 3, 12), 12), 0xabc - 4096);
        assert_eq!(count_ones(&[0xff, 0x0f], 4, 11), 4);
        assert_eq!(count_ones(&[0xff], 0, 7), 8);
        assert_eq!(count_ones(&[0b1010_0000], 1, 2), 1);
        assert_eq!(bit_range(3, 0, -1, false), Some((0, 23)));
        assert_eq!(bit_range(3, 5, 1, true), None);
    }
}
