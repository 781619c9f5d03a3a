//! RENAME, RENAMENX and COPY. A string moves as one write; a composite
//! value's members are keyed by the Redis key, so renaming or copying one
//! writes a copy of every member under the new key (linear in its size,
//! where Redis is constant) and leaves the old members to compaction.

use super::strings::tri;
use super::{int_arg, store_error, syntax_error, Ctx};
use crate::resp::Reply;

fn rename_generic(ctx: &mut Ctx<'_>, args: &[Vec<u8>], nx: bool) -> Reply {
    let (src, dst) = (&args[1], &args[2]);
    let Some(e) = tri!(ctx.get(src).map_err(store_error)) else {
        return Reply::err("no such key");
    };
    if src == dst {
        return if nx { Reply::Int(0) } else { Reply::Ok };
    }
    if nx && tri!(ctx.get(dst).map_err(store_error)).is_some() {
        return Reply::Int(0);
    }
    tri!(ctx.copy_value(src, dst, &e));
    tri!(ctx.delete(src));
    if nx {
        Reply::Int(1)
    } else {
        Reply::Ok
    }
}

/// RENAME key newkey
pub fn rename(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    rename_generic(ctx, args, false)
}

/// RENAMENX key newkey
pub fn renamenx(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    rename_generic(ctx, args, true)
}

/// COPY source destination [DB destination-db] [REPLACE]
pub fn copy(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut replace = false;
    let mut j = 3;
    while j < args.len() {
        let opt = args[j].to_ascii_lowercase();
        if opt == b"replace" {
            replace = true;
        } else if opt == b"db" && j + 1 < args.len() {
            let db = tri!(int_arg(&args[j + 1]));
            if i32::try_from(db).is_err() {
                return super::not_integer();
            }
            // Tern serves database 0 only.
            if db != 0 {
                return Reply::err("DB index is out of range");
            }
            j += 1;
        } else {
            return syntax_error();
        }
        j += 1;
    }
    let (src, dst) = (&args[1], &args[2]);
    if src == dst {
        return Reply::err("source and destination objects are the same");
    }
    let Some(e) = tri!(ctx.get(src).map_err(store_error)) else {
        return Reply::Int(0);
    };
    if !replace && tri!(ctx.get(dst).map_err(store_error)).is_some() {
        return Reply::Int(0);
    }
    tri!(ctx.copy_value(src, dst, &e));
    Reply::Int(1)
}
