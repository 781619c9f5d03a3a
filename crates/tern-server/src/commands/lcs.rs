//! LCS: the longest common subsequence of two strings, with Redis's
//! dynamic-programming table, its tie-breaking and its match ranges, so
//! replies are Redis's byte for byte.

use super::strings::tri;
use super::{int_arg, store_error, syntax_error, Ctx};
use crate::keyspace::Kind;
use crate::resp::Reply;

/// The string at `key` for LCS (empty if absent).
fn operand(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    match ctx.get(key).map_err(store_error)? {
        None => Ok(Some(Vec::new())),
        Some(e) if e.kind == Kind::String => Ok(Some(Vec::from(e.value))),
        Some(_) => Ok(None),
    }
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]
pub fn lcs(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let a = tri!(operand(ctx, &args[1]));
    let b = tri!(operand(ctx, &args[2]));
    let (Some(a), Some(b)) = (a, b) else {
        return Reply::err("The specified keys must contain string values");
    };
    let (mut get_len, mut get_idx, mut with_len, mut min_len) = (false, false, false, 0u64);
    let mut j = 3;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        match opt.as_slice() {
            b"idx" => get_idx = true,
            b"len" => get_len = true,
            b"withmatchlen" => with_len = true,
            b"minmatchlen" if j + 1 < args.len() => {
                min_len = tri!(int_arg(&args[j + 1])).max(0) as u64;
                j += 1;
            }
            _ => return syntax_error(),
        }
        j += 1;
    }
    if get_idx && get_len {
        return Reply::err("If you want both the length and indexes, please just use IDX.");
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells.saturating_mul(4) > ctx.state.config.proto_max_bulk_len as u64 {
        return Reply::err(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    let w = blen + 1;
    let mut t = vec![0u32; cells as usize];
    for i in 1..=alen {
        for j in 1..=blen {
            t[i * w + j] = if a[i - 1] == b[j - 1] {
                t[(i - 1) * w + j - 1] + 1
            } else {
                t[(i - 1) * w + j].max(t[i * w + j - 1])
            };
        }
    }
    let total = t[alen * w + blen];
    if get_len {
        return Reply::Int(i64::from(total));
    }
    // Walk back from the end, collecting the subsequence and the ranges of
    // contiguous matches (from the last to the first).
    let mut result = vec![0u8; total as usize];
    let mut idx = total as usize;
    let mut matches = Vec::new();
    let unset = alen;
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (unset, 0, 0, 0);
    let (mut i, mut j) = (alen, blen);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == unset {
                (a_start, a_end, b_start, b_end) = (i - 1, i - 1, j - 1, j - 1);
            } else if a_start == i && b_start == j {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if t[(i - 1) * w + j] > t[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            if a_start != unset {
                emit = true;
            }
        }
        if emit {
            let len = (a_end as u64).wrapping_sub(a_start as u64).wrapping_add(1);
            if min_len == 0 || len >= min_len {
                let mut m = vec![
                    Reply::Array(vec![Reply::Int(a_start as i64), Reply::Int(a_end as i64)]),
                    Reply::Array(vec![Reply::Int(b_start as i64), Reply::Int(b_end as i64)]),
                ];
                if with_len {
                    m.push(Reply::Int(len as i64));
                }
                matches.push(Reply::Array(m));
            }
            a_start = unset;
        }
    }
    if get_idx {
        return Reply::Map(vec![
            (Reply::text("matches"), Reply::Array(matches)),
            (Reply::text("len"), Reply::Int(i64::from(total))),
        ]);
    }
    Reply::Bulk(result)
}
