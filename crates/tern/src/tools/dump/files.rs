//! One table, blob file or WAL, record by record.

use std::io::Write;
use std::path::Path;

use super::{torn_tail, DumpError};
use crate::blob::BlobReader;
use crate::error::{Error, IoContext, Result};
use crate::format::blob::LineageEntry;
use crate::format::internal_key::{self, ValueKind};
use crate::format::log_record::RECORD_HEADER_LEN;
use crate::format::write_batch::WriteBatch;
use crate::io::FsRef;
use crate::iter::InternalIterator;
use crate::sst::Table;
use crate::tools::{describe_key, show};
use crate::wal::{blob_file_name, LogKind, LogReader};

/// Bytes of a value shown per entry.
const PREVIEW_BYTES: usize = 24;

/// The table at `path` (file number `number`, 0 if unknown): its
/// properties, then up to `limit` entries.
pub fn table(
    fs: &FsRef,
    path: &Path,
    number: u64,
    limit: u64,
    out: &mut dyn Write,
) -> Result<(), DumpError> {
    let table = Table::open(fs, path, number, None)?;
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
    // What is configured applies to the blocks that hold inline values.
    let raw_refs = if p.compression == crate::options::Compression::None {
        ""
    } else {
        " (blocks without inline values are stored raw)"
    };
    writeln!(out, "compression    {:?}{raw_refs}", p.compression)?;
    writeln!(out, "bloom bits/key {}", p.bloom_bits_per_key)?;
    writeln!(out, "sequence range {}..={}", p.smallest_seq, p.largest_seq)?;
    writeln!(
        out,
        "key range      {} .. {}",
        describe_key(&p.smallest_key),
        describe_key(&p.largest_key)
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
    it.status()?;
    if it.valid() {
        writeln!(out, "... more entries past the limit")?;
    }
    Ok(())
}

/// The blob file at `path`: its footer and lineage, then up to `limit`
/// records.
pub fn blob_file(
    fs: &FsRef,
    path: &Path,
    number: u64,
    limit: u64,
    out: &mut dyn Write,
) -> Result<(), DumpError> {
    let reader = BlobReader::open(fs, path, number)?;
    let footer = reader.footer();
    let lineage = reader.lineage()?;
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
            writeln!(out, "... more records past the limit")?;
            break;
        }
        let ordinal = u32::try_from(ordinal)
            .map_err(|_| Error::corruption(path, 0, "more records than a blob file can hold"))?;
        let offset = reader.offset_of(ordinal)?;
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

/// Up to `limit` records of the WAL at `path`, each with the keys it writes.
pub fn wal(fs: &FsRef, path: &Path, limit: u64, out: &mut dyn Write) -> Result<(), DumpError> {
    let data = fs.read_all(path).ctx(path)?;
    let mut reader = LogReader::new(data, path.to_path_buf(), LogKind::Wal)?;
    writeln!(out, "wal {}", path.display())?;
    let mut shown = 0u64;
    loop {
        if shown >= limit {
            writeln!(out, "... more records past the limit")?;
            return Ok(());
        }
        let Some(rec) = reader.next_record()? else {
            break;
        };
        // The payload borrows the reader; copy it to ask for the offset.
        let rec = rec.to_vec();
        let offset = reader.last_record_offset();
        let batch = WriteBatch::from_bytes(&rec)
            .map_err(|e| e.in_file(path, offset + RECORD_HEADER_LEN as u64))?;
        writeln!(
            out,
            "offset {offset}: seq {} count {} ({} bytes)",
            batch.seq(),
            batch.len(),
            rec.len()
        )?;
        for (i, e) in batch.iter().enumerate() {
            let e = e.map_err(|e| e.in_file(path, offset))?;
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
    torn_tail(reader.torn_tail(), out)
}
