//! A small text language for versions and version edits, for the
//! data-driven tests under `testdata/` (see `docs/architecture.md`).
//!
//! Tables: `NUM[LO..HI]` with optional `seq=A-B` and `size=N` (defaults:
//! sequence numbers `NUM*10` and `NUM*10+1`, size 1000). Edit lines:
//!
//! ```text
//! add L1 12 b..d seq=1-5 size=100
//! delete L1 12
//! blob add 30 records=10 bytes=1000
//! blob dead 30 1,2,3 bytes=300
//! blob retire 30 -> 31 base=0 dead=1,2
//! blob delete 30
//! blob drop 30
//! ```

use std::fmt::Write as _;
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::{BlobMeta, FileMeta, FileRef, Version};
use crate::format::blob::LineageEntry;
use crate::format::internal_key::{make_internal_key, user_key, ValueKind};
use crate::format::version_edit::{DeadOrdinals, VersionEdit};

/// A parse failure, with the line at fault.
pub(crate) type ParseResult<T> = std::result::Result<T, String>;

fn num<T: std::str::FromStr>(s: &str, what: &str) -> ParseResult<T> {
    s.parse().map_err(|_| format!("bad {what}: {s:?}"))
}

fn level(s: &str) -> ParseResult<u32> {
    let n = s
        .strip_prefix('L')
        .ok_or_else(|| format!("expected a level like L1, got {s:?}"))?;
    num(n, "level")
}

/// `key=value` arguments after the positional ones.
fn kv<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    words
        .iter()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

fn ordinals(s: &str) -> ParseResult<RoaringBitmap> {
    let mut set = RoaringBitmap::new();
    for o in s.split(',').filter(|o| !o.is_empty()) {
        set.insert(num(o, "ordinal")?);
    }
    Ok(set)
}

/// A table from `NUM LO..HI [seq=A-B] [size=N]` (`range` may also be
/// written `NUM[LO..HI]`).
pub(crate) fn table(number: &str, range: &str, rest: &[&str]) -> ParseResult<FileMeta> {
    let number: u64 = num(number, "file number")?;
    let (lo, hi) = range
        .split_once("..")
        .ok_or_else(|| format!("expected a key range like a..c, got {range:?}"))?;
    let (s0, s1) = match kv(rest, "seq") {
        Some(s) => {
            let (a, b) = s
                .split_once('-')
                .ok_or_else(|| format!("expected seq=A-B, got {s:?}"))?;
            (num(a, "sequence")?, num(b, "sequence")?)
        }
        None => (number * 10, number * 10 + 1),
    };
    Ok(FileMeta {
        number,
        file_size: kv(rest, "size").map_or(Ok(1000), |s| num(s, "size"))?,
        smallest: make_internal_key(lo.as_bytes(), s0, ValueKind::Value),
        largest: make_internal_key(hi.as_bytes(), s1, ValueKind::Value),
        smallest_seq: s0,
        largest_seq: s1,
        ..Default::default()
    })
}

/// Parses edit lines into one edit.
pub(crate) fn edit(input: &str) -> ParseResult<VersionEdit> {
    let mut e = VersionEdit::default();
    for line in input.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("cannot parse {line:?}");
        match w.as_slice() {
            ["add", l, n, range, rest @ ..] => {
                e.new_files.push((level(l)?, table(n, range, rest)?))
            }
            ["delete", l, n] => e.deleted_files.push((level(l)?, num(n, "file number")?)),
            ["blob", "add", n, rest @ ..] => e.blob_files_added.push(BlobMeta {
                number: num(n, "file number")?,
                file_size: kv(rest, "bytes").map_or(Ok(1000), |s| num(s, "bytes"))?,
                record_count: kv(rest, "records").map_or(Ok(10), |s| num(s, "records"))?,
                data_bytes: kv(rest, "bytes").map_or(Ok(1000), |s| num(s, "bytes"))?,
                run_keys: None,
            }),
            ["blob", "dead", n, ords, rest @ ..] => e.dead_ordinals.push(DeadOrdinals {
                file: num(n, "file number")?,
                ordinals: ordinals(ords)?,
                bytes: kv(rest, "bytes").map_or(Ok(0), |s| num(s, "bytes"))?,
            }),
            ["blob", "retire", old, "->", new, rest @ ..] => e.relocations.push((
                num(new, "file number")?,
                LineageEntry {
                    old_file: num(old, "file number")?,
                    base: kv(rest, "base").map_or(Ok(0), |s| num(s, "base"))?,
                    dead: ordinals(kv(rest, "dead").unwrap_or(""))?,
                },
            )),
            ["blob", "delete", n] => e.blob_files_deleted.push(num(n, "file number")?),
            ["blob", "drop", n] => e.relocations_dropped.push(num(n, "file number")?),
            _ => return Err(bad()),
        }
    }
    Ok(e)
}

/// A version from lines `Ln: NUM[LO..HI] NUM[LO..HI size=N] ...`.
pub(crate) fn version(input: &str) -> ParseResult<Version> {
    let mut v = Version::default();
    for line in input.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (l, files) = line
            .split_once(':')
            .ok_or_else(|| format!("expected `Ln: files`, got {line:?}"))?;
        let l = level(l.trim())? as usize;
        let slot = v.levels.get_mut(l).ok_or_else(|| format!("no level {l}"))?;
        // `12[a..c size=5]` -> number, range and options.
        for spec in files.split(']').map(str::trim).filter(|s| !s.is_empty()) {
            let (n, inner) = spec
                .split_once('[')
                .ok_or_else(|| format!("expected NUM[LO..HI], got {spec:?}"))?;
            let w: Vec<&str> = inner.split_whitespace().collect();
            let (range, rest) = w
                .split_first()
                .ok_or_else(|| format!("empty table spec {spec:?}"))?;
            slot.push(Arc::new(table(n.trim(), range, rest)?));
        }
    }
    Ok(v)
}

fn key(k: &[u8]) -> String {
    String::from_utf8_lossy(user_key(k)).into_owned()
}

/// Table numbers with their key ranges.
pub(crate) fn tables(files: &[FileRef]) -> String {
    files
        .iter()
        .map(|f| format!("{}[{}..{}]", f.number, key(&f.smallest), key(&f.largest)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The LSM shape: each non-empty level, live blob files with their dead
/// records, and lineage.
pub(crate) fn shape(v: &Version) -> String {
    let mut out = String::new();
    for (l, files) in v.levels.iter().enumerate() {
        if !files.is_empty() {
            let _ = writeln!(out, "L{l}: {}", tables(files));
        }
    }
    for b in v.blob_files.values() {
        let _ = writeln!(
            out,
            "blob {}: records={} dead={:?} dead_bytes={}",
            b.meta.number,
            b.meta.record_count,
            b.dead.iter().collect::<Vec<_>>(),
            b.dead_bytes
        );
    }
    for (old, r) in &v.relocations {
        let _ = writeln!(out, "lineage {old} -> {} base={}", r.new_file, r.entry.base);
    }
    if out.is_empty() {
        out.push_str("empty\n");
    }
    out
}
