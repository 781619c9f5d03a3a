//! `tern inspect DIR`: show what a store holds, reading only.

use std::cmp::Ordering;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use tern::blob::BlobReader;
use tern::format::blob::{BlobFooter, LineageEntry, BLOB_FOOTER_LEN};
use tern::format::internal_key::{self, ValueKind};
use tern::format::log_record::RECORD_HEADER_LEN;
use tern::format::version_edit::{FileMeta, VersionEdit};
use tern::io::{FsRef, PosixFs};
use tern::iter::InternalIterator;
use tern::sst::Table;
use tern::version::VersionSet;
use tern::wal::{
    blob_file_name, manifest_file_name, parse_file_name, read_current, table_file_name,
    wal_file_name, FileType, LogKind, LogReader,
};
use tern::WriteBatch;

use crate::{show, Failure};

/// Bytes of a value shown by `--sst` and `--blob`.
const PREVIEW_BYTES: usize = 24;

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tern inspect /var/lib/tern/db                       # manifest summary and LSM shape\n  \
    tern inspect /var/lib/tern/db --sst 12 --limit 20   # properties and first 20 entries of 000012.sst\n  \
    tern inspect /var/lib/tern/db --sst ./copy/000012.sst\n  \
    tern inspect /var/lib/tern/db --wal 15              # the write batches in 000015.log\n  \
    tern inspect /var/lib/tern/db --blob 9 --limit 20   # footer, lineage and first 20 records of 000009.blob\n  \
    tern inspect /var/lib/tern/db --manifest            # every version edit of the live manifest\n\n\
    Keys and values are printed with non-printable bytes escaped as \\xNN.")]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// Show one table: its properties and entries. A file number (looked up
    /// in DIR) or a path to a `.sst` file.
    #[arg(long, value_name = "NUMBER|PATH", conflicts_with_all = ["wal", "manifest", "blob"])]
    sst: Option<String>,
    /// Show one write-ahead log: its records and the keys they write. A file
    /// number (looked up in DIR) or a path to a `.log` file.
    #[arg(long, value_name = "NUMBER|PATH", conflicts_with_all = ["manifest", "blob"])]
    wal: Option<String>,
    /// Show one blob file: its footer, lineage and records. A file number
    /// (looked up in DIR) or a path to a `.blob` file.
    #[arg(long, value_name = "NUMBER|PATH", conflicts_with = "manifest")]
    blob: Option<String>,
    /// Show every version edit of the live manifest.
    #[arg(long)]
    manifest: bool,
    /// With --sst, --wal or --blob: stop after this many entries or records.
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
    } else if let Some(spec) = &args.blob {
        let (path, number) = locate(&args.dir, spec, FileType::Blob, blob_file_name)?;
        blob(&fs, &path, number, limit, &mut out)?;
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
        version.levels.iter().map(Vec::len).sum::<usize>(),
        show::bytes(version.total_bytes())
    )?;
    blob_summary(&version, out)?;
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

/// Live blob files with their garbage, then the lineage of retired ones.
fn blob_summary(version: &tern::version::Version, out: &mut dyn Write) -> std::io::Result<()> {
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
            "{:<12} {:>12} {:>9} {:>9} {:>12} {:>6.1}%",
            blob_file_name(b.meta.number),
            show::bytes(b.meta.file_size),
            b.meta.record_count,
            b.dead.len(),
            show::bytes(b.dead_bytes),
            b.garbage_ratio() * 100.0
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
        tern::tools::describe_key(&p.smallest_key),
        tern::tools::describe_key(&p.largest_key)
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

/// One blob file's footer, lineage and records.
fn blob(
    fs: &FsRef,
    path: &Path,
    number: u64,
    limit: u64,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let reader =
        BlobReader::open(fs, path, number).map_err(|e| unreadable("blob file", path, e))?;
    let footer = read_blob_footer(fs, path)?;
    let lineage = reader
        .lineage()
        .map_err(|e| unreadable("blob file", path, e))?;
    writeln!(out, "blob file      {}", path.display())?;
    writeln!(
        out,
        "file size      {}",
        fs.file_size(path).unwrap_or_default()
    )?;
    writeln!(out, "records        {}", footer.record_count)?;
    writeln!(out, "data bytes     {}", footer.data_bytes)?;
    writeln!(out, "index offset   {}", footer.index_offset)?;
    writeln!(out, "lineage offset {}", footer.lineage_offset)?;
    print_lineage(&lineage, out)?;
    writeln!(out)?;
    for ordinal in 0..reader.record_count() {
        if ordinal >= limit {
            writeln!(out, "... more records (raise --limit to see them)")?;
            break;
        }
        let ordinal = u32::try_from(ordinal)
            .map_err(|_| Failure::new(format!("{}: too many records", path.display())))?;
        let offset = reader
            .offset_of(ordinal)
            .map_err(|e| unreadable("blob file", path, e))?;
        match reader.read_ordinal(ordinal) {
            Ok(rec) => writeln!(
                out,
                "#{ordinal} offset {offset}: {} seq={} len={} {}",
                show::key(&rec.key),
                rec.seq,
                rec.value.len(),
                show::preview(&rec.value, PREVIEW_BYTES)
            )?,
            Err(e) => writeln!(out, "#{ordinal} offset {offset}: damaged: {e}")?,
        }
    }
    Ok(())
}

/// Reads and decodes the footer of the blob file at `path`.
fn read_blob_footer(fs: &FsRef, path: &Path) -> Result<BlobFooter, Failure> {
    let io = |e: std::io::Error| unreadable("blob file", path, tern::Error::io(path, e));
    let file = fs.open(path).map_err(io)?;
    let size = file.len();
    let at = size.saturating_sub(BLOB_FOOTER_LEN as u64);
    let mut buf = [0u8; BLOB_FOOTER_LEN];
    file.read_exact_at(at, &mut buf).map_err(io)?;
    BlobFooter::decode(&buf, size).map_err(|e| unreadable("blob file", path, e.in_file(path, at)))
}

fn print_lineage(lineage: &[LineageEntry], out: &mut dyn Write) -> std::io::Result<()> {
    if lineage.is_empty() {
        return writeln!(out, "lineage        none (written at flush)");
    }
    writeln!(out, "lineage        {} retired files", lineage.len())?;
    for e in lineage {
        writeln!(
            out,
            "  from {}  base ordinal {}, {} dead dropped",
            blob_file_name(e.old_file),
            e.base,
            e.dead.len()
        )?;
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
            tern::tools::describe_key(key)
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
            tern::tools::describe_key(&f.smallest),
            tern::tools::describe_key(&f.largest)
        )?;
        if !f.blob_files.is_empty() {
            writeln!(out, "         blob files {:?}", f.blob_files)?;
        }
    }
    for b in &edit.blob_files_added {
        writeln!(
            out,
            "  add    blob {} {} bytes, {} records ({} record bytes)",
            blob_file_name(b.number),
            b.file_size,
            b.record_count,
            b.data_bytes
        )?;
    }
    for (new_file, e) in &edit.relocations {
        writeln!(
            out,
            "  retire blob {} -> {} base ordinal {}, {} dead dropped",
            blob_file_name(e.old_file),
            blob_file_name(*new_file),
            e.base,
            e.dead.len()
        )?;
    }
    for d in &edit.dead_ordinals {
        writeln!(
            out,
            "  dead   blob {} {} records ({} bytes)",
            blob_file_name(d.file),
            d.ordinals.len(),
            d.bytes
        )?;
    }
    for n in &edit.blob_files_deleted {
        writeln!(out, "  delete blob {}", blob_file_name(*n))?;
    }
    for n in &edit.relocations_dropped {
        writeln!(out, "  drop   lineage of {}", blob_file_name(*n))?;
    }
    Ok(())
}
