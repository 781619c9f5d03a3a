//! OBJECT: what Redis would say about a key's representation. Tern stores
//! every value one way (a string record, or a metadata record plus member
//! keys), so ENCODING names the encoding Redis 7.0 would pick for the same
//! value under the `*-max-listpack-*` and `*-max-intset-*` settings, for the
//! tools and tests that look at it.

use super::strings::tri;
use super::{store_error, wrong_arity, Ctx};
use crate::keyspace::{Entry, Kind};
use crate::resp::Reply;

/// Longest string Redis keeps as `embstr`.
const EMBSTR_MAX: usize = 44;

/// The encoding Redis would report for `e`, the value at `key` (`None`
/// if it is gone by the time its members are read).
fn encoding(ctx: &mut Ctx<'_>, key: &[u8], e: &Entry) -> Result<Option<&'static str>, Reply> {
    let lim = ctx.state.encoding_limits();
    // A composite value is read again the way every command reads one, so
    // its members come from the state its metadata does.
    let v = if e.kind.is_composite() {
        match ctx.composite(key, e.kind)? {
            Some(v) => Some(v),
            None => return Ok(None),
        }
    } else {
        None
    };
    Ok(Some(match (e.kind, v) {
        (Kind::String, _) => {
            if e.value.len() <= 20 && crate::resp::parser::parse_int(&e.value).is_some() {
                "int"
            } else if e.value.len() <= EMBSTR_MAX {
                "embstr"
            } else {
                "raw"
            }
        }
        (Kind::List, _) => "quicklist",
        (Kind::Hash, Some(v)) => {
            let small = v.meta.size <= lim.hash_entries
                && ctx.all_members(key, Kind::Hash, &v)?.iter().all(|(f, x)| {
                    f.len() as u64 <= lim.hash_value && x.len() as u64 <= lim.hash_value
                });
            if small {
                "listpack"
            } else {
                "hashtable"
            }
        }
        (Kind::Set, Some(v)) => {
            let ints = v.meta.size <= lim.set_intset_entries
                && ctx
                    .all_members(key, Kind::Set, &v)?
                    .iter()
                    .all(|(m, _)| crate::resp::parser::parse_int(m).is_some());
            if ints {
                "intset"
            } else {
                "hashtable"
            }
        }
        (Kind::ZSet, Some(v)) => {
            // Score records are `'m' ‖ member`; their count is the size.
            let small = v.meta.size <= lim.zset_entries
                && ctx
                    .all_members(key, Kind::ZSet, &v)?
                    .iter()
                    .filter(|(m, _)| m.first() == Some(&b'm'))
                    .all(|(m, _)| (m.len() - 1) as u64 <= lim.zset_value);
            if small {
                "listpack"
            } else {
                "skiplist"
            }
        }
        // A composite kind always came with its value above.
        (_, None) => return Ok(None),
    }))
}

/// OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ|HELP [key]
pub fn object(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    if sub == b"help" {
        if args.len() != 2 {
            return wrong_arity("object|help");
        }
        return super::server::help(&[
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation Redis would use for the value",
            "    stored at <key> (Tern stores every value one way).",
            "FREQ <key>",
            "    Not tracked: Tern has no LFU eviction.",
            "IDLETIME <key>",
            "    Not tracked: always 0.",
            "REFCOUNT <key>",
            "    Always 1.",
            "HELP",
            "    Print this help.",
        ]);
    }
    if !matches!(
        sub.as_slice(),
        b"encoding" | b"refcount" | b"idletime" | b"freq"
    ) {
        return super::server::unknown_subcommand(&args[1], "OBJECT");
    }
    if args.len() != 3 {
        return wrong_arity(&format!("object|{}", String::from_utf8_lossy(&sub)));
    }
    let key = &args[2];
    let Some(e) = tri!(ctx.get(key).map_err(store_error)) else {
        return Reply::Nil;
    };
    match sub.as_slice() {
        b"encoding" => tri!(encoding(ctx, key, &e)).map_or(Reply::Nil, Reply::text),
        b"refcount" => Reply::Int(1),
        b"idletime" => Reply::Int(0),
        _ => Reply::err(
            "An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
        ),
    }
}
