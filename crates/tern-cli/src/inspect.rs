//! `tern inspect DIR`: show what a store holds, reading only.

use std::cmp::Ordering;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use tern::format::internal_key::{self, ValueKind};
use tern::format::log_record::RECORD_HEADER_LEN;
use tern::format::version_edit::{FileMeta, VersionEdit};
use tern::io::{FsRef, PosixFs};
use tern::iter::InternalIterator;
use tern::sst::Table;
use tern::version::VersionSet;
use tern::wal::{
    manifest_file_name, parse_file_name, read_current, table_file_name, wal_file_name, FileType,
    LogKind, LogReader,
};
use tern::WriteBatch;

use crate::{show, Failure};

/// Bytes of a value shown by `--sst`.
const PREVIEW_BYTES: usize = 24;

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tern inspect /var/lib/tern/db                       # manifest summary and LSM shape\n  \
    tern inspect /var/lib/tern/db --sst 12 --limit 20   # properties and first 20 entries of 000012.sst\n  \
    tern inspect /var/lib/tern/db --sst ./copy/000012.sst\n  \
    tern inspect /var/lib/tern/db --wal 15              # the write batches in 000015.log\n  \
    tern inspect /var/lib/tern/db --manifest            # every version edit of the live manifest\n\n\
    Keys and values are printed with non-printable bytes escaped as \\xNN.")]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// Show one table: its properties and entries. A file number (looked up
    /// in DIR) or a path to a `.sst` file.
    #[arg(long, value_name = "NUMBER|PATH", conflicts_with_all = ["wal", "manifest"])]
    sst: Option<String>,
    /// Show one write-ahead log: its records and the keys they write. A file
    /// number (looked up in DIR) or a path to a `.log` file.
    #[arg(long, value_name = "NUMBER|PATH", conflicts_with = "manifest")]
    wal: Option<String>,
    /// Show every version edit of the live manifest.
    #[arg(long)]
    manifest: bool,
    /// With --sst or --wal: stop after this many entries or records.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
}

/// Prints what `args` asks for.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let fs: FsRef = Arc::new(PosixFs);
    let mut out = std::io::stdout().lock();
    let limit = args.limit.unwrap_or(u64::MAX);
    if let Some(spec) = &args.sst {
        let (path, number) = locate(&args.dir, spec, FileType::Table, table_file_name)?;
        sst(&fs, &path, number, limit, &mut out)?;
    } else if let Some(spec) = &args.wal {
        let (path, _) = locate(&args.dir, spec, FileType::Wal, wal_file_name)?;
        wal(&fs, &path, limit, &mut out)?;
    } else if args.manifest {
        manifest(&fs, &args.dir, &mut out)?;
    } else {
        summary(&fs, &args.dir, &mut out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Resolves `NUMBER|PATH` to a path and the file number it has (0 when the
/// name is not a canonical one).
fn locate(
    dir: &Path,
    spec: &str,
    ty: FileType,
    name: fn(u64) -> String,
) -> Result<(PathBuf, u64), Failure> {
    if !spec.is_empty() && spec.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = spec
            .parse()
            .map_err(|_| Failure::new(format!("file number {spec} is too large")))?;
        return Ok((dir.join(name(n)), n));
    }
    let path = PathBuf::from(spec);
    let number = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_file_name)
        .filter(|&(t, _)| t == ty)
        .map_or(0, |(_, n)| n);
    Ok((path, number))
}

fn unreadable(what: &str, path: &Path, e: tern::Error) -> Failure {
    let f = Failure::new(format!("cannot read {what} {}: {e}", path.display()));
    if e.is_corruption() {
        f.hint(format!(
            "the file is damaged; `tern check {}` lists every problem",
            path.parent()
                .map_or_else(|| ".".into(), |p| p.display().to_string())
        ))
    } else {
        f.hint("check the path and that you may read it")
    }
}

/// Manifest summary and LSM shape.
fn summary(fs: &FsRef, dir: &Path, out: &mut dyn Write) -> Result<(), Failure> {
    let (set, state) = VersionSet::recover(fs.clone(), dir, u64::MAX).map_err(|e| {
        let f = Failure::new(format!("cannot read the store in {}: {e}", dir.display()));
        if e.is_corruption() {
            f.hint(format!(
                "run `tern check {}` for a full report",
                dir.display()
            ))
        } else {
            f.hint("pass the directory of a Tern store (the one holding CURRENT)")
        }
    })?;
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
        let (lo, hi) = key_range(files.iter().map(|f| &**f));
        writeln!(
            out,
            "L{level:<4} {:>6} {:>12} {entries:>10}  {} .. {}",
            files.len(),
            show::bytes(version.level_bytes(level)),
            show::key(internal_key::user_key(lo)),
            show::key(internal_key::user_key(hi)),
        )?;
    }
    writeln!(
        out,
        "total {:>6} {:>12}",
        version.file_numbers().count(),
        show::bytes(version.total_bytes())
    )?;
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

/// Smallest and largest internal keys over `files`.
fn key_range<'a>(files: impl Iterator<Item = &'a FileMeta>) -> (&'a [u8], &'a [u8]) {
    let mut lo: Option<&[u8]> = None;
    let mut hi: Option<&[u8]> = None;
    for f in files {
        if lo.is_none_or(|k| internal_key::compare(&f.smallest, k) == Ordering::Less) {
            lo = Some(&f.smallest);
        }
        if hi.is_none_or(|k| internal_key::compare(&f.largest, k) == Ordering::Greater) {
            hi = Some(&f.largest);
        }
    }
    (lo.unwrap_or_default(), hi.unwrap_or_default())
}

/// One table's properties and entries.
fn sst(
    fs: &FsRef,
    path: &Path,
    number: u64,
    limit: u64,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let table = Table::open(fs, path, number, None).map_err(|e| unreadable("table", path, e))?;
    let p = table.properties();
    writeln!(out, "table          {}", path.display())?;
    writeln!(out, "file size      {}", table.file_size())?;
    writeln!(out, "format version {}", p.format_version)?;
    writeln!(
        out,
        "entries        {} ({} deletions, {} blob refs)",
        p.num_entries, p.num_deletions, p.num_blob_refs
    )?;
    writeln!(
        out,
        "raw sizes      keys {}, values {}",
        p.raw_key_size, p.raw_value_size
    )?;
    writeln!(
        out,
        "blocks         {} data ({} bytes), index {} bytes, filter {} bytes",
        p.num_data_blocks, p.data_size, p.index_size, p.filter_size
    )?;
    writeln!(out, "compression    {:?}", p.compression)?;
    writeln!(out, "bloom bits/key {}", p.bloom_bits_per_key)?;
    writeln!(out, "sequence range {}..={}", p.smallest_seq, p.largest_seq)?;
    writeln!(
        out,
        "key range      {} .. {}",
        tern::check::describe_key(&p.smallest_key),
        tern::check::describe_key(&p.largest_key)
    )?;
    if !p.blob_files.is_empty() {
        writeln!(out, "blob files     {:?}", p.blob_files)?;
    }
    writeln!(out)?;
    let mut it = table.iter();
    it.seek_to_first();
    let mut shown = 0u64;
    while it.valid() && shown < limit {
        let key = it.key();
        let value = it.value();
        match internal_key::parse(key) {
            Ok(k) => writeln!(
                out,
                "{} @{} {:<7} len={} {}",
                show::key(k.user_key),
                k.seq,
                kind_name(k.kind),
                value.len(),
                show::preview(value, PREVIEW_BYTES)
            )?,
            Err(_) => writeln!(out, "(malformed key) {}", show::key(key))?,
        }
        shown += 1;
        it.next();
    }
    it.status().map_err(|e| unreadable("table", path, e))?;
    if it.valid() {
        writeln!(out, "... more entries (raise --limit to see them)")?;
    }
    Ok(())
}

fn kind_name(kind: ValueKind) -> &'static str {
    match kind {
        ValueKind::Value => "put",
        ValueKind::Delete => "delete",
        ValueKind::BlobRef => "blobref",
    }
}

/// One WAL's records.
fn wal(fs: &FsRef, path: &Path, limit: u64, out: &mut dyn Write) -> Result<(), Failure> {
    let data = fs
        .read_all(path)
        .map_err(|e| unreadable("WAL", path, tern::Error::io(path, e)))?;
    let mut reader = LogReader::new(data, path.to_path_buf(), LogKind::Wal)
        .map_err(|e| unreadable("WAL", path, e))?;
    writeln!(out, "wal {}", path.display())?;
    let mut shown = 0u64;
    loop {
        if shown >= limit {
            writeln!(out, "... more records (raise --limit to see them)")?;
            return Ok(());
        }
        let Some(rec) = reader
            .next_record()
            .map_err(|e| unreadable("WAL", path, e))?
        else {
            break;
        };
        // The payload borrows the reader; copy it to ask for the offset.
        let rec = rec.to_vec();
        let offset = reader.last_record_offset();
        let batch = WriteBatch::from_bytes(&rec).map_err(|e| {
            unreadable(
                "WAL",
                path,
                e.in_file(path, offset + RECORD_HEADER_LEN as u64),
            )
        })?;
        writeln!(
            out,
            "offset {offset}: seq {} count {} ({} bytes)",
            batch.seq(),
            batch.len(),
            rec.len()
        )?;
        for (i, e) in batch.iter().enumerate() {
            let e = e.map_err(|e| unreadable("WAL", path, e.in_file(path, offset)))?;
            let seq = batch.seq() + i as u64;
            if e.kind == ValueKind::Delete {
                writeln!(out, "  @{seq} delete  {}", show::key(e.key))?;
            } else {
                writeln!(
                    out,
                    "  @{seq} {:<7} {} len={}",
                    kind_name(e.kind),
                    show::key(e.key),
                    e.value.len()
                )?;
            }
        }
        shown += 1;
    }
    if let Some(at) = reader.torn_tail() {
        writeln!(
            out,
            "torn tail at offset {at} (an interrupted write; recovery drops it)"
        )?;
    }
    Ok(())
}

/// Every edit of the live manifest.
fn manifest(fs: &FsRef, dir: &Path, out: &mut dyn Write) -> Result<(), Failure> {
    let number = read_current(fs.as_ref(), dir)
        .map_err(|e| unreadable("CURRENT in", dir, e))?
        .ok_or_else(|| {
            Failure::new(format!(
                "{} holds no Tern store (no CURRENT)",
                dir.display()
            ))
            .hint("pass the directory of a Tern store (the one holding CURRENT)")
        })?;
    let path = dir.join(manifest_file_name(number));
    let data = fs
        .read_all(&path)
        .map_err(|e| unreadable("manifest", &path, tern::Error::io(&path, e)))?;
    let mut reader = LogReader::new(data, path.clone(), LogKind::Manifest)
        .map_err(|e| unreadable("manifest", &path, e))?;
    writeln!(out, "manifest {}", path.display())?;
    while let Some(rec) = reader
        .next_record()
        .map_err(|e| unreadable("manifest", &path, e))?
    {
        let rec = rec.to_vec();
        let offset = reader.last_record_offset();
        let edit = VersionEdit::decode(&rec).map_err(|e| {
            unreadable(
                "manifest",
                &path,
                e.in_file(&path, offset + RECORD_HEADER_LEN as u64),
            )
        })?;
        print_edit(offset, &edit, out)?;
    }
    if let Some(at) = reader.torn_tail() {
        writeln!(
            out,
            "torn tail at offset {at} (an interrupted write; recovery drops it)"
        )?;
    }
    Ok(())
}

fn print_edit(offset: u64, edit: &VersionEdit, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "edit at offset {offset}:")?;
    if let Some(n) = edit.log_number {
        writeln!(out, "  log number      {n}")?;
    }
    if let Some(n) = edit.next_file_number {
        writeln!(out, "  next file       {n}")?;
    }
    if let Some(n) = edit.last_sequence {
        writeln!(out, "  last sequence   {n}")?;
    }
    for (level, key) in &edit.compact_pointers {
        writeln!(
            out,
            "  compact pointer L{level} {}",
            tern::check::describe_key(key)
        )?;
    }
    for (level, number) in &edit.deleted_files {
        writeln!(out, "  delete L{level} {}", table_file_name(*number))?;
    }
    for (level, f) in &edit.new_files {
        writeln!(
            out,
            "  add    L{level} {} {} bytes, {} entries ({} deletions), seq {}..={}, {} .. {}",
            table_file_name(f.number),
            f.file_size,
            f.num_entries,
            f.num_deletions,
            f.smallest_seq,
            f.largest_seq,
            tern::check::describe_key(&f.smallest),
            tern::check::describe_key(&f.largest)
        )?;
    }
    Ok(())
}
