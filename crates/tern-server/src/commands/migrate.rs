//! The commands nodes send each other while slots move (Shadowfax-style:
//! ownership first, data after; see `crate::cluster::migrate` for the
//! client side and the on-demand pull):
//!
//! - `TERN.FETCH key ...` (on the source): the keys' values and expiries,
//!   for a target that was asked for keys it does not have yet;
//!   values travel as dumps ([`super::dump`]), a hash, set, sorted set or
//!   list with all its members;
//! - `TERN.SLOTSCAN slot cursor count` (on the source): one page of a
//!   slot's keys and values, for the target's background copy;
//! - `TERN.IMPORT key value pexpireat ...` (on the target, run by the
//!   committer): stores each record unless the key was settled here
//!   already (imported before, or written by a client since the slot
//!   moved, as its import marker says), so migrated data never overwrites
//!   a newer write; `pexpireat` -1 records that the source has no such key;
//! - `TERN.DROPSLOT slot count` (on the source, once the target has
//!   everything): deletes keys of a slot this node no longer owns;
//! - `TERN.CLEARMARKS slot count`: deletes import markers of a slot no
//!   longer being imported.
//!
//! None of these is routed: they name slots this node may not own.

use super::dump::{decode_arg, dump, restore};
use super::strings::tri;
use super::{int_arg, store_error, Ctx};
use crate::cluster::migrate::PAGE_BYTES;
use crate::cluster::slot::key_slot;
use crate::expiry::now_ms;
use crate::resp::Reply;

fn cluster_only(ctx: &Ctx<'_>) -> Result<(), Reply> {
    match ctx.state.cluster {
        Some(_) => Ok(()),
        None => Err(Reply::err("This instance has cluster support disabled")),
    }
}

fn expiry_arg(e: Option<u64>) -> Reply {
    Reply::Int(e.map_or(0, |t| t.min(i64::MAX as u64) as i64))
}

/// TERN.FETCH key [key ...]
pub fn fetch(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let now = now_ms();
    let mut out = Vec::with_capacity(args.len() - 1);
    for k in &args[1..] {
        let found = match tri!(ctx.store().get_at(k, now).map_err(store_error)) {
            None => None,
            Some(e) => {
                let exp = expiry_arg(e.expire_at);
                tri!(dump(ctx, k, e)).map(|d| (d, exp))
            }
        };
        match found {
            None => out.push(Reply::NilArray),
            Some((d, exp)) => out.push(Reply::Array(vec![Reply::Bulk(d), exp])),
        }
    }
    Reply::Array(out)
}

/// TERN.SLOTSCAN slot cursor count
pub fn slotscan(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let slot = match int_arg(&args[1]) {
        Ok(s) if (0..16384).contains(&s) => s as u16,
        _ => return Reply::err("Invalid slot"),
    };
    let count = match int_arg(&args[3]) {
        Ok(c) if c > 0 => (c as usize).min(4096),
        _ => return Reply::err("count must be positive"),
    };
    let (page, next) = tri!(ctx
        .store()
        .slot_page(slot, &args[2], count, PAGE_BYTES)
        .map_err(store_error));
    let mut flat = Vec::with_capacity(page.len() * 3);
    for (k, e) in page {
        let exp = expiry_arg(e.expire_at);
        if let Some(d) = tri!(dump(ctx, &k, e)) {
            flat.push(Reply::Bulk(k));
            flat.push(exp);
            flat.push(Reply::Bulk(d));
        }
    }
    let next = match next {
        Some(k) => Reply::Bulk(k),
        None => Reply::Nil,
    };
    Reply::Array(vec![next, Reply::Array(flat)])
}

/// TERN.HOTKEYS count start end [start end ...]: up to `count` of the
/// hottest sampled keys in those slot ranges, as records (key, pexpireat,
/// value), hottest first; keys gone since they were sampled are left out.
pub fn hotkeys(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    if args.len() % 2 != 0 {
        return Reply::err("TERN.HOTKEYS takes a count and slot ranges");
    }
    let count = match int_arg(&args[1]) {
        Ok(c) if c >= 0 => (c as usize).min(65536),
        _ => return Reply::err("count must be 0 or more"),
    };
    let mut ranges = Vec::with_capacity(args.len() / 2 - 1);
    for r in args[2..].chunks_exact(2) {
        match (int_arg(&r[0]), int_arg(&r[1])) {
            (Ok(a), Ok(b)) if 0 <= a && a <= b && b < 16384 => ranges.push((a as u16, b as u16)),
            _ => return Reply::err("Invalid slot range"),
        }
    }
    let Some(node) = ctx.state.cluster.clone() else {
        return Reply::err("This instance has cluster support disabled");
    };
    let keys = node
        .hot
        .hottest(count, |s| ranges.iter().any(|&(a, b)| (a..=b).contains(&s)));
    let now = now_ms();
    let mut flat = Vec::with_capacity(keys.len() * 3);
    for k in keys {
        if let Some(e) = tri!(ctx.store().get_at(&k, now).map_err(store_error)) {
            let exp = expiry_arg(e.expire_at);
            if let Some(d) = tri!(dump(ctx, &k, e)) {
                flat.push(Reply::Bulk(k));
                flat.push(exp);
                flat.push(Reply::Bulk(d));
            }
        }
    }
    node.counters
        .hot_records_sent
        .fetch_add(flat.len() as u64 / 3, std::sync::atomic::Ordering::Relaxed);
    Reply::Array(flat)
}

/// TERN.IMPORT key pexpireat value [key pexpireat value ...]
pub fn import(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    if (args.len() - 1) % 3 != 0 {
        return Reply::err("TERN.IMPORT takes key, pexpireat, value triples");
    }
    let view = ctx.state.cluster.as_ref().map(|c| c.view());
    let importing = view.as_ref().and_then(|v| v.importing());
    // Checked whole before anything is written: a refused import changes
    // nothing.
    let mut records = Vec::with_capacity((args.len() - 1) / 3);
    for t in args[1..].chunks_exact(3) {
        let (key, exp, value) = (&t[0], &t[1], &t[2]);
        if !importing
            .as_ref()
            .is_some_and(|s| s.contains(key_slot(key)))
        {
            return Reply::err(format!("slot {} is not being imported here", key_slot(key)));
        }
        // Its slot takes in files from the previous owner: the counts of
        // that ingest must not change under it.
        if ctx
            .state
            .cluster
            .as_ref()
            .is_some_and(|c| c.ingests.holds(key_slot(key)))
        {
            return crate::cluster::ingest::held_reply();
        }
        let expire_at = match tri!(int_arg(exp)) {
            -1 => None,
            0 => Some(None),
            t if t > 0 => Some(Some(t as u64)),
            _ => return Reply::err("bad pexpireat"),
        };
        let value = match expire_at {
            Some(_) => Some(tri!(decode_arg(value))),
            None => None,
        };
        records.push((key, expire_at, value));
    }
    let store = &ctx.state.store;
    let now = now_ms();
    let mut applied = 0;
    for (key, expire_at, value) in records {
        let pending = tri!(ctx.pending());
        if tri!(pending.marked(store, key).map_err(store_error)) {
            continue;
        }
        // Settled from now on, whatever the source said.
        pending.mark(key);
        // `None`: the source has no such key.
        let (Some(expire_at), Some(value)) = (expire_at, value) else {
            continue;
        };
        if ctx.get(key).map_err(store_error).map(|e| e.is_some()) == Ok(true) {
            continue;
        }
        if expire_at.is_some_and(|t| t <= now) {
            continue;
        }
        tri!(restore(ctx, key, value, expire_at));
        applied += 1;
    }
    Reply::Int(applied)
}

fn slot_and_count(args: &[Vec<u8>]) -> Result<(u16, usize), Reply> {
    let slot = match int_arg(&args[1]) {
        Ok(s) if (0..16384).contains(&s) => s as u16,
        _ => return Err(Reply::err("Invalid slot")),
    };
    let count = match int_arg(&args[2]) {
        Ok(c) if c > 0 => (c as usize).min(4096),
        _ => return Err(Reply::err("count must be positive")),
    };
    Ok((slot, count))
}

/// TERN.DROPSLOT slot count
pub fn dropslot(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let (slot, count) = tri!(slot_and_count(args));
    // Never the keys of a slot served here, nor of one a target still
    // pulls from here (decided with the view current now: the committer
    // runs this between other writes).
    let keep = ctx.state.cluster.as_ref().is_some_and(|c| {
        let v = c.view();
        let handing_over = v
            .topology
            .as_ref()
            .and_then(|t| t.migration_of(slot))
            .is_some_and(|m| {
                m.from == c.info.id && m.state != crate::cluster::topology::MigrationState::Dropping
            });
        v.serves(slot) || handing_over
    });
    if keep {
        return Reply::err(format!(
            "slot {slot} is served here or still being handed over; refusing to drop it"
        ));
    }
    let keys = tri!(ctx.store().slot_keys_all(slot, count).map_err(store_error));
    let mut n = 0;
    for k in keys {
        tri!(ctx.delete(&k));
        n += 1;
    }
    Reply::Int(n)
}

/// TERN.RESETSLOT slot count: on a target in handoff (serving nothing of
/// the slot yet), deletes up to `count` keys and import markers of the
/// slot left from an earlier time this node held it, so the import starts
/// from nothing. The keys are deleted without markers.
pub fn resetslot(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let (slot, count) = tri!(slot_and_count(args));
    let in_handoff = ctx.state.cluster.as_ref().is_some_and(|c| {
        let v = c.view();
        v.topology
            .as_ref()
            .and_then(|t| t.migration_of(slot))
            .is_some_and(|m| {
                m.to == c.info.id && m.state == crate::cluster::topology::MigrationState::Handoff
            })
    });
    if !in_handoff {
        return Reply::err(format!("slot {slot} is not in handoff to this node"));
    }
    let keys = tri!(ctx.store().slot_keys_all(slot, count).map_err(store_error));
    let marks = tri!(ctx.store().markers(slot, count).map_err(store_error));
    let n = keys.len() + marks.len();
    let pending = tri!(ctx.pending());
    let importing = pending.importing();
    pending.set_importing(None);
    let mut result = Ok(());
    for k in &keys {
        if let Err(e) = ctx.delete(k) {
            result = Err(e);
            break;
        }
    }
    let pending = tri!(ctx.pending());
    pending.set_importing(importing);
    tri!(result);
    for m in &marks {
        pending.delete_raw(m);
    }
    Reply::Int(n as i64)
}

/// TERN.CLEARMARKS slot count
pub fn clearmarks(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let (slot, count) = tri!(slot_and_count(args));
    let importing = ctx
        .state
        .cluster
        .as_ref()
        .and_then(|c| c.view().importing());
    if importing.is_some_and(|s| s.contains(slot)) {
        return Reply::Int(0);
    }
    let marks = tri!(ctx.store().markers(slot, count).map_err(store_error));
    let pending = tri!(ctx.pending());
    for m in &marks {
        pending.delete_raw(m);
    }
    Reply::Int(marks.len() as i64)
}
