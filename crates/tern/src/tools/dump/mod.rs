//! What a store's files hold, for people: the LSM shape, one table, blob
//! file, WAL or the manifest edit by edit. Reads only; a damaged file
//! stops the dump with an error naming it and the offset.

mod files;
mod manifest;

use crate::compaction::picker::user_range;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use files::{blob_file, table, wal};
pub use manifest::manifest;

use crate::error::{Error, Result};
use crate::io::FsRef;
use crate::tools::show;
use crate::version::{Version, VersionSet};
use crate::wal::{
    blob_file_name, manifest_file_name, parse_file_name, table_file_name, wal_file_name, FileType,
};

/// Why a dump stopped.
#[derive(Debug)]
pub enum DumpError {
    /// A file could not be read, or is damaged.
    Read(Error),
    /// Writing the output failed.
    Write(std::io::Error),
}

impl From<Error> for DumpError {
    fn from(e: Error) -> Self {
        DumpError::Read(e)
    }
}

impl From<std::io::Error> for DumpError {
    fn from(e: std::io::Error) -> Self {
        DumpError::Write(e)
    }
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DumpError::Read(e) => e.fmt(f),
            DumpError::Write(e) => write!(f, "cannot write the output: {e}"),
        }
    }
}

impl std::error::Error for DumpError {}

/// The line for a log's torn tail (an incomplete last record), if any.
fn torn_tail(at: Option<u64>, out: &mut dyn Write) -> Result<(), DumpError> {
    if let Some(at) = at {
        writeln!(
            out,
            "torn tail at offset {at} (an interrupted write; recovery drops it)"
        )?;
    }
    Ok(())
}

/// The kinds of file a store holds that can be dumped one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A sorted table (`NNNNNN.sst`).
    Table,
    /// A blob file (`NNNNNN.blob`).
    Blob,
    /// A write-ahead log (`NNNNNN.log`).
    Wal,
}

impl FileKind {
    /// The canonical name of file `number` of this kind.
    pub fn file_name(self, number: u64) -> String {
        match self {
            FileKind::Table => table_file_name(number),
            FileKind::Blob => blob_file_name(number),
            FileKind::Wal => wal_file_name(number),
        }
    }

    fn file_type(self) -> FileType {
        match self {
            FileKind::Table => FileType::Table,
            FileKind::Blob => FileType::Blob,
            FileKind::Wal => FileType::Wal,
        }
    }
}

/// Resolves `spec`, a file number (looked up in `dir`) or a path, to a
/// path and the file number it has (0 when its name is not a canonical one
/// of this kind).
pub fn locate(dir: &Path, spec: &str, kind: FileKind) -> Result<(PathBuf, u64)> {
    if !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = spec
            .parse()
            .map_err(|_| Error::InvalidArgument(format!("file number {spec} is too large")))?;
        return Ok((dir.join(kind.file_name(n)), n));
    }
    let path = PathBuf::from(spec);
    let number = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_file_name)
        .filter(|&(t, _)| t == kind.file_type())
        .map_or(0, |(_, n)| n);
    Ok((path, number))
}

/// The store in `dir`: its manifest, the LSM shape level by level, blob
/// files with their garbage, lineage, and the WALs recovery would replay.
/// Replays the manifest with the code open uses, so a manifest this
/// prints is one open accepts (open also replays the WALs).
pub fn summary(fs: &FsRef, dir: &Path, out: &mut dyn Write) -> Result<(), DumpError> {
    let (set, state) = VersionSet::recover(fs.clone(), dir, u64::MAX)?;
    let version = set.current();
    writeln!(out, "store          {}", dir.display())?;
    writeln!(
        out,
        "manifest       {} ({} edits)",
        manifest_file_name(state.manifest_number),
        state.edits
    )?;
    writeln!(out, "log number     {}", set.log_number)?;
    writeln!(
        out,
        "next file      {}",
        set.file_number_counter()
            .load(std::sync::atomic::Ordering::SeqCst)
    )?;
    writeln!(out, "last sequence  {}", set.last_sequence)?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<5} {:>6} {:>12} {:>10}  key range",
        "level", "files", "bytes", "entries"
    )?;
    for (level, files) in version.levels.iter().enumerate() {
        if files.is_empty() {
            continue;
        }
        let entries: u64 = files.iter().map(|f| f.num_entries).sum();
        let (lo, hi) = user_range(files);
        writeln!(
            out,
            "L{level:<4} {:>6} {:>12} {entries:>10}  {} .. {}",
            files.len(),
            show::bytes(version.level_bytes(level)),
            show::key(&lo.unwrap_or_default()),
            show::key(&hi.unwrap_or_default()),
        )?;
    }
    writeln!(
        out,
        "total {:>6} {:>12}",
        version.levels.iter().map(Vec::len).sum::<usize>(),
        show::bytes(version.total_bytes())
    )?;
    blob_summary(&version, out)?;
    tier_summary(&version, out)?;
    let mut wals: Vec<(u64, String)> = fs
        .list_dir(dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|name| match parse_file_name(&name) {
            Some((FileType::Wal, n)) if n >= set.log_number => Some((n, name)),
            _ => None,
        })
        .collect();
    wals.sort();
    for (_, name) in wals {
        let size = fs.file_size(&dir.join(&name)).unwrap_or(0);
        writeln!(out, "wal   {name} {}", show::bytes(size))?;
    }
    Ok(())
}

/// The durable memory tier's tables, oldest first.
fn tier_summary(version: &Version, out: &mut dyn Write) -> std::io::Result<()> {
    if version.tier.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<12} {:>12} {:>12} {:>10}  sequences",
        "tier table", "offset", "bytes", "entries"
    )?;
    for t in version.tier.values() {
        writeln!(
            out,
            "{:<12} {:>12} {:>12} {:>10}  {}..={}",
            t.id,
            t.offset,
            show::bytes(t.len),
            t.entries,
            t.smallest_seq,
            t.largest_seq
        )?;
    }
    writeln!(
        out,
        "{:<12} {:>12} {:>12} {:>10}",
        format!("total {}", version.tier.len()),
        "",
        show::bytes(version.tier.values().map(|t| t.len).sum()),
        version.tier.values().map(|t| t.entries).sum::<u64>()
    )
}

/// Live blob files with their garbage, then the lineage of retired ones.
fn blob_summary(version: &Version, out: &mut dyn Write) -> std::io::Result<()> {
    if version.blob_files.is_empty() && version.relocations.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<12} {:>12} {:>9} {:>9} {:>12} {:>7}",
        "blob file", "bytes", "records", "dead", "garbage", "ratio"
    )?;
    for b in version.blob_files.values() {
        writeln!(
            out,
            "{:<12} {:>12} {:>9} {:>9} {:>12} {:>6.1}%{}",
            blob_file_name(b.meta.number),
            show::bytes(b.meta.file_size),
            b.meta.record_count,
            b.dead.len(),
            show::bytes(b.dead_bytes),
            b.garbage_ratio() * 100.0,
            if b.meta.run_keys.is_some() {
                "  sorted run"
            } else {
                ""
            }
        )?;
    }
    let dead_bytes: u64 = version.blob_files.values().map(|b| b.dead_bytes).sum();
    writeln!(
        out,
        "{:<12} {:>12} {:>9} {:>9} {:>12}",
        format!("total {}", version.blob_files.len()),
        show::bytes(version.blob_bytes()),
        version
            .blob_files
            .values()
            .map(|b| b.meta.record_count)
            .sum::<u64>(),
        version
            .blob_files
            .values()
            .map(|b| b.dead.len())
            .sum::<u64>(),
        show::bytes(dead_bytes)
    )?;
    if !version.relocations.is_empty() {
        writeln!(out)?;
        writeln!(out, "lineage (blob files retired by GC)")?;
        for r in version.relocations.values() {
            writeln!(
                out,
                "  {} -> {}  base ordinal {}, {} dead dropped",
                blob_file_name(r.entry.old_file),
                blob_file_name(r.new_file),
                r.entry.base,
                r.entry.dead.len()
            )?;
        }
    }
    Ok(())
}
