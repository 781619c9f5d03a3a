//! The manifest, edit by edit.

use std::fmt;
use std::io::Write;
use std::path::Path;

use super::{torn_tail, DumpError};
use crate::format::version_edit::VersionEdit;
use crate::io::FsRef;
use crate::tools::describe_key;
use crate::version::{read_current_manifest, ManifestReader};
use crate::wal::{blob_file_name, table_file_name};

/// Every edit of the manifest `CURRENT` names, with its offset.
pub fn manifest(fs: &FsRef, dir: &Path, out: &mut dyn Write) -> Result<(), DumpError> {
    let (_, path, data) = read_current_manifest(fs.as_ref(), dir)?;
    let mut manifest = ManifestReader::new(&path, data)?;
    writeln!(out, "manifest {}", path.display())?;
    while let Some(next) = manifest.next_edit() {
        let (offset, edit) = next?;
        write!(out, "edit at offset {offset}:\n{edit}")?;
    }
    torn_tail(manifest.torn_tail(), out)
}

/// One line per change, each indented by two spaces.
impl fmt::Display for VersionEdit {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        let edit = self;
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
            writeln!(out, "  compact pointer L{level} {}", describe_key(key))?;
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
                describe_key(&f.smallest),
                describe_key(&f.largest)
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
            if let Some((first, last)) = &b.run_keys {
                writeln!(
                    out,
                    "         sorted run {} .. {}",
                    crate::tools::escape_bytes(first),
                    crate::tools::escape_bytes(last)
                )?;
            }
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
        for t in &edit.tier_added {
            writeln!(
                out,
                "  add    tier table {} at {} ({} bytes), {} entries, seq {}..={}, checksum {:#010x}",
                t.id, t.offset, t.len, t.entries, t.smallest_seq, t.largest_seq, t.checksum
            )?;
        }
        for id in &edit.tier_removed {
            writeln!(out, "  remove tier table {id}")?;
        }
        Ok(())
    }
}
