//! The commands of the file-based bulk copy (`crate::cluster::ingest`):
//!
//! - `TERN.EXPORT first last cursor generation number count max_bytes` (on
//!   the source, read pool): one part of slots `first..=last`'s string
//!   values, from `cursor` (empty: the start), as table and blob files of
//!   the target's `generation` under file numbers `number..number+count`
//!   the target reserved. Replies `[next cursor or nil, records,
//!   [name, bytes, ...]]`.
//! - `TERN.EXPORTCOMPOSITES first last generation number count version
//!   versions max_bytes` (on the source, read pool): the hashes, sets,
//!   sorted sets and lists of whole slots from `first` as files, each value
//!   under a version of `version..version+versions`. Replies `[next slot
//!   or nil, values, [name, bytes, ...]]`.
//! - `TERN.RESERVEVERSIONS n` (on the target, committer): reserves `n`
//!   composite value versions for such a part; replies the first.
//! - `TERN.INGESTBEGIN id` (on the target, committer): holds the part's
//!   slots, counts its new keys, writes tombstones of keys deleted here
//!   again, and writes the intent.
//! - `TERN.INGESTEND id ok|abort|release` (on the target, committer):
//!   after the ingest (`ok`: index entries written; `abort`: the counts
//!   taken back; `release`: `TERN.INGESTBEGIN` failed and wrote nothing),
//!   deletes the intent and releases the slots.
//!
//! None of these is routed: they name slots this node may not own.

use std::path::Path;

use super::strings::tri;
use super::{int_arg, store_error, Ctx};
use crate::keyspace::{encode_ingest_intent, expiry_key, ingest_intent_key};
use crate::resp::Reply;

fn node(ctx: &Ctx<'_>) -> Result<std::sync::Arc<crate::cluster::ClusterNode>, Reply> {
    ctx.state
        .cluster
        .clone()
        .ok_or_else(|| Reply::err("This instance has cluster support disabled"))
}

fn slot_arg(a: &[u8]) -> Result<u16, Reply> {
    match int_arg(a) {
        Ok(s) if (0..16384).contains(&s) => Ok(s as u16),
        _ => Err(Reply::err("Invalid slot")),
    }
}

fn u64_arg(a: &[u8], what: &str) -> Result<u64, Reply> {
    match int_arg(a) {
        Ok(n) if n >= 0 => Ok(n as u64),
        _ => Err(Reply::err(format!("{what} must be 0 or more"))),
    }
}

/// What both exports are asked for: the slot range, the target's
/// generation and the file numbers it reserved.
type ExportTarget = ((u16, u16), u32, std::ops::Range<u64>);

/// The arguments both exports share: the slot range (at 1 and 2), the
/// target's generation (at `gen_at`) and its reserved file numbers (first
/// and count, right after it).
fn export_target(args: &[Vec<u8>], gen_at: usize) -> Result<ExportTarget, Reply> {
    let first = slot_arg(&args[1])?;
    let last = slot_arg(&args[2])?;
    if first > last {
        return Err(Reply::err("Invalid slot range"));
    }
    let gen = match int_arg(&args[gen_at]) {
        Ok(g) if (0..=i64::from(u32::MAX)).contains(&g) => g as u32,
        _ => return Err(Reply::err("bad generation")),
    };
    let number = u64_arg(&args[gen_at + 1], "number")?;
    let count = u64_arg(&args[gen_at + 2], "count")?.min(4096);
    let end = number
        .checked_add(count)
        .ok_or_else(|| Reply::err("file numbers out of range"))?;
    Ok(((first, last), gen, number..end))
}

/// The `max_bytes` argument, bounded.
fn max_bytes_arg(a: &[u8]) -> Result<u64, Reply> {
    Ok(u64_arg(a, "max_bytes")?.clamp(1, 64 << 20))
}

/// TERN.EXPORT first last cursor generation number count max_bytes
pub fn export(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(node(ctx));
    let (slots, gen, numbers) = tri!(export_target(args, 4));
    let max_bytes = tri!(max_bytes_arg(&args[7]));
    let (fs, dir) = tri!(export_dir());
    let store = ctx.store();
    let mut w =
        tern::ingest::ExportWriter::new(fs.clone(), dir, numbers, store.db.export_options());
    let (next, records) = tri!(store
        .export_strings(slots, &args[3], gen, &mut w, max_bytes)
        .map_err(store_error));
    let files = tri!(w.finish().map_err(|e| store_error(e.into())));
    export_reply(
        &fs,
        dir,
        files,
        next.map_or(Reply::Nil, Reply::Bulk),
        records,
    )
}

/// TERN.EXPORTCOMPOSITES first last generation number count version versions max_bytes
pub fn export_composites(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(node(ctx));
    let (slots, gen, numbers) = tri!(export_target(args, 3));
    let version = tri!(u64_arg(&args[6], "version"));
    let versions = tri!(u64_arg(&args[7], "versions"));
    let max_bytes = tri!(max_bytes_arg(&args[8]));
    let Some(vend) = version.checked_add(versions) else {
        return Reply::err("versions out of range");
    };
    let (fs, dir) = tri!(export_dir());
    let store = ctx.store();
    let mut w =
        tern::ingest::ExportWriter::new(fs.clone(), dir, numbers, store.db.export_options());
    let (next, records) = tri!(store
        .export_composites(slots, gen, version..vend, &mut w, max_bytes)
        .map_err(store_error));
    let files = tri!(w.finish().map_err(|e| store_error(e.into())));
    let next = next.map_or(Reply::Nil, |s| Reply::Int(i64::from(s)));
    export_reply(&fs, dir, files, next, records)
}

/// A fresh in-memory directory to export into: the files only pass
/// through on their way out.
fn export_dir() -> Result<(tern::io::FsRef, &'static Path), Reply> {
    let fs: tern::io::FsRef = tern::io::MemFs::new();
    let dir = Path::new("/export");
    fs.create_dir_all(dir)
        .map_err(|e| Reply::err(format!("export: {e}")))?;
    Ok((fs, dir))
}

/// `[next, records, [name, bytes, ...]]` for exported `files`.
fn export_reply(
    fs: &tern::io::FsRef,
    dir: &Path,
    files: Vec<tern::ingest::ExportedFile>,
    next: Reply,
    records: u64,
) -> Reply {
    let mut flat = Vec::with_capacity(files.len() * 2);
    for f in files {
        let name = f.file_name();
        match fs.read_all(&dir.join(&name)) {
            Ok(bytes) => {
                flat.push(Reply::Bulk(name.into_bytes()));
                flat.push(Reply::Bulk(bytes));
            }
            Err(e) => return Reply::err(format!("export: reading {name}: {e}")),
        }
    }
    Reply::Array(vec![next, Reply::Int(records as i64), Reply::Array(flat)])
}

/// TERN.RESERVEVERSIONS n: the first of `n` composite value versions
/// reserved for a bulk copy's files (committed like any write).
pub fn reserve_versions(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(node(ctx));
    let n = tri!(u64_arg(&args[1], "n")).min(1 << 32);
    let pending = tri!(ctx.pending());
    Reply::Int(pending.reserve_versions(n).min(i64::MAX as u64) as i64)
}

/// TERN.INGESTBEGIN id
pub fn begin(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let node = tri!(node(ctx));
    let id = tri!(u64_arg(&args[1], "id"));
    let Some((slots, records, rewrite)) = node.ingests.with_part(id, |p| {
        (
            p.slots,
            std::mem::take(&mut p.records),
            std::mem::take(&mut p.rewrite),
        )
    }) else {
        return Reply::err(format!("no ingest {id} is waiting here"));
    };
    // A part of a migration that moved on (rolled back, or the slots went
    // elsewhere) must not land: its keys would be counted in slots this
    // node does not import.
    let importing = node.view().importing();
    if !importing.is_some_and(|s| (slots.0..=slots.1).all(|slot| s.contains(slot))) {
        return Reply::err("the part's slots are no longer being imported here");
    }
    // The committer runs this: from here to TERN.INGESTEND, no write to
    // these slots runs (they answer TRYAGAIN), so the counts stay exact.
    node.ingests.hold(id, slots);
    let store = &ctx.state.store;
    let gen = store.generation();
    let layout = store.layout();
    // Decided whole before anything is written: a failed read writes
    // nothing.
    let mut counted = Vec::new();
    let mut deleted_here = Vec::new();
    let mut rewrites = Vec::new();
    {
        let pending = tri!(ctx.pending());
        let hidden: std::collections::HashMap<Vec<u8>, Vec<u8>> = rewrite.into_iter().collect();
        // One scan for the markers; the few marked keys are looked up. An
        // unmarked key holds nothing here but what the staging check saw
        // (`hidden`): only a write adds to a key, and writes leave markers.
        let marks = tri!(pending
            .marked_in(store, slots.0, slots.1)
            .map_err(store_error));
        for (key, exp) in records {
            let marked = marks.contains(&key);
            let here = match marked || hidden.contains_key(&key) {
                true => tri!(pending.key_state(store, &key).map_err(store_error)).exists,
                false => false,
            };
            match (marked, here) {
                // Written here since the slot moved: shadows the file.
                (true, true) => {}
                // Deleted here: the tombstone compaction may have dropped
                // is written again, so the file's version stays hidden
                // (the range's tombstones are protected until the ingest).
                (true, false) => deleted_here.push(key),
                // Never touched since the slot moved, but something of an
                // earlier time here (a tombstone of the cleanup, a
                // leftover, a copy ingested before) would hide the file's
                // version: written on top at TERN.INGESTEND, once a
                // composite's members are in too.
                (false, true) => {
                    if let Some(raw) = hidden.get(&key) {
                        rewrites.push((key, raw.clone()));
                    }
                }
                (false, false) => match hidden.get(&key) {
                    Some(raw) => rewrites.push((key, raw.clone())),
                    None => counted.push((key, exp)),
                },
            }
        }
        for (_, raw) in &rewrites {
            tri!(crate::keyspace::decode_value(raw.clone()).map_err(|e| store_error(e.into())));
        }
        for key in &deleted_here {
            pending.delete_raw(&layout.key(gen, key));
        }
        for (key, exp) in &counted {
            pending.count_ingested(key, *exp, true);
        }
        pending.put_raw(
            &ingest_intent_key(id),
            &encode_ingest_intent(slots.0, slots.1),
        );
    }
    let n = counted.len();
    node.ingests.with_part(id, |p| {
        p.counted = counted;
        p.rewrites = rewrites;
    });
    Reply::Int(n as i64)
}

/// TERN.INGESTEND id ok|abort|release. The part stays registered (the
/// caller forgets it once this committed), so a failed commit can be
/// retried with the same effect.
pub fn end(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let node = tri!(node(ctx));
    let id = tri!(u64_arg(&args[1], "id"));
    let how = args[2].to_ascii_lowercase();
    if !matches!(how.as_slice(), b"ok" | b"abort" | b"release") {
        return Reply::err("TERN.INGESTEND takes ok, abort or release");
    }
    let Some(part) = node.ingests.with_part(id, |p| p.clone()) else {
        return Reply::err(format!("no ingest {id} is waiting here"));
    };
    let store = &ctx.state.store;
    let gen = store.generation();
    let ended = (|| {
        let pending = ctx.pending()?;
        match how.as_slice() {
            b"ok" => {
                // A key written here since (a retried end, after its hold
                // was let go) keeps that write.
                let marks = pending
                    .marked_in(store, part.slots.0, part.slots.1)
                    .map_err(store_error)?;
                for (key, raw) in part.rewrites.iter().filter(|(k, _)| !marks.contains(k)) {
                    let exp = crate::keyspace::decode_value(raw.clone())
                        .map_err(|e| store_error(e.into()))?
                        .expire_at;
                    pending
                        .put_stored_unmarked(store, key, raw, exp)
                        .map_err(store_error)?;
                }
                for (key, exp) in &part.counted {
                    if let Some(t) = exp {
                        store.note_expiry(*t);
                        pending.put_raw(&expiry_key(gen, *t, key), b"");
                    }
                }
            }
            b"abort" => {
                for (key, exp) in &part.counted {
                    pending.count_ingested(key, *exp, false);
                }
            }
            _ => {}
        }
        if how != b"release" {
            pending.delete_raw(&ingest_intent_key(id));
        }
        Ok(Reply::Simple("OK".into()))
    })();
    node.ingests.release(id);
    match ended {
        Ok(r) => r,
        Err(e) => e,
    }
}
