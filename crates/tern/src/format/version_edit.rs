//! Version edits: the records of the manifest.
//!
//! An edit is a sequence of tagged fields, each a varint tag followed by the
//! field's body. Tags and bodies are specified byte by byte in
//! `docs/format/manifest.md`. Decoding is strict: an unknown tag, a repeated
//! single-valued field, a level of 64 or more, a sequence number above
//! [`MAX_SEQ`] or trailing garbage is a [`DecodeError`], never a panic.

use crate::error::DecodeError;
use crate::format::coding::{put_length_prefixed, put_varint32, put_varint64, Reader};
use roaring::RoaringBitmap;

use crate::format::blob::{put_bitmap, read_bitmap, LineageEntry};
use crate::format::internal_key::MAX_SEQ;

/// Metadata of a blob file, as recorded in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlobMeta {
    /// File number (`NNNNNN.blob`).
    pub number: u64,
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Records in the file.
    pub record_count: u64,
    /// Bytes of all records (headers, keys, values).
    pub data_bytes: u64,
    /// For a sorted run (a file a compaction into the last level wrote,
    /// its records in key order): its first and last user key. `None` for
    /// every other blob file.
    pub run_keys: Option<(Vec<u8>, Vec<u8>)>,
}

/// Levels are numbered `0..MAX_LEVELS`; an edit naming a higher level does
/// not decode.
pub const MAX_LEVELS: u32 = 64;

/// Field tags. Values are part of the persistent format: never reuse one.
mod tag {
    /// `log_number`: varint.
    pub const LOG_NUMBER: u64 = 1;
    /// `next_file_number`: varint.
    pub const NEXT_FILE_NUMBER: u64 = 2;
    /// `last_sequence`: varint.
    pub const LAST_SEQUENCE: u64 = 3;
    /// One compact pointer: varint level, length-prefixed internal key.
    pub const COMPACT_POINTER: u64 = 4;
    /// One deleted table: varint level, varint file number.
    pub const DELETED_FILE: u64 = 5;
    /// One new table: varint level, then the [`super::FileMeta`] fields.
    pub const NEW_FILE: u64 = 6;
    /// A new blob file: varint number, file size, record count, data bytes.
    pub const BLOB_FILE_ADD: u64 = 8;
    /// A blob file removed outright (nothing refers to it): varint number.
    pub const BLOB_FILE_DELETE: u64 = 9;
    /// Ordinals of a blob file found dead: varint file, varint bytes,
    /// ordinal set (varint length ‖ portable roaring bitmap).
    pub const DEAD_ORDINALS: u64 = 10;
    /// A blob file retired by GC: varint new file, varint old file, varint
    /// base ordinal, the dead set the job used (as in `DEAD_ORDINALS`).
    pub const RELOCATION: u64 = 11;
    /// Blob files a new table refers to: varint table number, varint count,
    /// count × varint blob file number. Follows that table's `NEW_FILE`.
    pub const TABLE_BLOB_FILES: u64 = 12;
    /// A lineage entry dropped (no table refers to the old file): varint old file.
    pub const RELOCATION_DROP: u64 = 13;
    /// A table of the durable memory tier: varint id, offset, length,
    /// entries, smallest and largest sequence, then a fixed 4-byte
    /// checksum (`docs/format/memtier.md`).
    pub const TIER_TABLE_ADD: u64 = 16;
    /// A memory tier table copied out to L0 or dropped: varint id.
    pub const TIER_TABLE_REMOVE: u64 = 17;
    /// A blob file is a sorted run: varint number, length-prefixed first
    /// and last user key. Follows that file's `BLOB_FILE_ADD`.
    pub const SORTED_RUN: u64 = 18;
    // Reserved: 7 (another core counter), 14..=15 (separation features).
}

/// Metadata of one sorted table, as recorded in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileMeta {
    /// File number (`NNNNNN.sst`).
    pub number: u64,
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Smallest internal key in the table.
    pub smallest: Vec<u8>,
    /// Largest internal key in the table.
    pub largest: Vec<u8>,
    /// Smallest sequence number of an entry in the table.
    pub smallest_seq: u64,
    /// Largest sequence number of an entry in the table.
    pub largest_seq: u64,
    /// Number of entries (all kinds).
    pub num_entries: u64,
    /// Number of tombstones among the entries.
    pub num_deletions: u64,
    /// Blob files the table holds references to.
    pub blob_files: Vec<u64>,
}

/// A table of the durable memory tier, as recorded in the manifest: one
/// memtable's arena copied into the tier file (`docs/format/memtier.md`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TierTableMeta {
    /// Its id, drawn from the file numbers (never reused).
    pub id: u64,
    /// Where its extent starts in the tier file.
    pub offset: u64,
    /// Bytes of its arena copy (the head region and its nodes).
    pub len: u64,
    /// Entries it holds.
    pub entries: u64,
    /// Smallest sequence number it holds.
    pub smallest_seq: u64,
    /// Largest sequence number it holds.
    pub largest_seq: u64,
    /// Masked CRC32C of its nodes' headers, keys and values (link words
    /// excluded: merges rewrite them).
    pub checksum: u32,
}

/// Ordinals of one blob file newly found dead.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeadOrdinals {
    /// The blob file.
    pub file: u64,
    /// The ordinals.
    pub ordinals: RoaringBitmap,
    /// Bytes of those records.
    pub bytes: u64,
}

/// A change to the set of live files and counters. The manifest is a log of
/// these; replaying them in order rebuilds the current version.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VersionEdit {
    /// WALs numbered below this are fully flushed and need no replay.
    pub log_number: Option<u64>,
    /// The next unused file number.
    pub next_file_number: Option<u64>,
    /// The largest sequence number used so far.
    pub last_sequence: Option<u64>,
    /// Where the next compaction of a level starts: (level, internal key).
    pub compact_pointers: Vec<(u32, Vec<u8>)>,
    /// Tables removed: (level, file number).
    pub deleted_files: Vec<(u32, u64)>,
    /// Tables added: (level, metadata).
    pub new_files: Vec<(u32, FileMeta)>,
    /// Blob files added.
    pub blob_files_added: Vec<BlobMeta>,
    /// Blob files removed outright.
    pub blob_files_deleted: Vec<u64>,
    /// Dead ordinals found, per blob file.
    pub dead_ordinals: Vec<DeadOrdinals>,
    /// Blob files retired by GC: (new file, lineage of the old one).
    pub relocations: Vec<(u64, LineageEntry)>,
    /// Lineage entries dropped (old file numbers).
    pub relocations_dropped: Vec<u64>,
    /// Durable memory tier tables added.
    pub tier_added: Vec<TierTableMeta>,
    /// Durable memory tier tables removed (ids).
    pub tier_removed: Vec<u64>,
}

impl VersionEdit {
    /// True when the edit changes nothing.
    pub fn is_empty(&self) -> bool {
        self.log_number.is_none()
            && self.next_file_number.is_none()
            && self.last_sequence.is_none()
            && self.compact_pointers.is_empty()
            && self.deleted_files.is_empty()
            && self.new_files.is_empty()
            && self.blob_files_added.is_empty()
            && self.blob_files_deleted.is_empty()
            && self.dead_ordinals.is_empty()
            && self.relocations.is_empty()
            && self.relocations_dropped.is_empty()
            && self.tier_added.is_empty()
            && self.tier_removed.is_empty()
    }

    /// Encodes the edit. Fields are written in a fixed order (counters, then
    /// compact pointers, deleted files and new files, each in vector order),
    /// so decoding gives back an equal edit.
    ///
    /// Every level must be below [`MAX_LEVELS`] and every sequence number at
    /// most [`MAX_SEQ`]; otherwise the encoding would not decode.
    pub fn encode(&self) -> Vec<u8> {
        let mut dst = Vec::with_capacity(32 + self.new_files.len() * 64);
        if let Some(n) = self.log_number {
            put_varint64(&mut dst, tag::LOG_NUMBER);
            put_varint64(&mut dst, n);
        }
        if let Some(n) = self.next_file_number {
            put_varint64(&mut dst, tag::NEXT_FILE_NUMBER);
            put_varint64(&mut dst, n);
        }
        if let Some(s) = self.last_sequence {
            debug_assert!(s <= MAX_SEQ);
            put_varint64(&mut dst, tag::LAST_SEQUENCE);
            put_varint64(&mut dst, s);
        }
        for (level, key) in &self.compact_pointers {
            debug_assert!(*level < MAX_LEVELS);
            put_varint64(&mut dst, tag::COMPACT_POINTER);
            put_varint32(&mut dst, *level);
            put_length_prefixed(&mut dst, key);
        }
        for (level, number) in &self.deleted_files {
            debug_assert!(*level < MAX_LEVELS);
            put_varint64(&mut dst, tag::DELETED_FILE);
            put_varint32(&mut dst, *level);
            put_varint64(&mut dst, *number);
        }
        for (level, f) in &self.new_files {
            debug_assert!(*level < MAX_LEVELS);
            debug_assert!(f.smallest_seq <= MAX_SEQ && f.largest_seq <= MAX_SEQ);
            put_varint64(&mut dst, tag::NEW_FILE);
            put_varint32(&mut dst, *level);
            put_varint64(&mut dst, f.number);
            put_varint64(&mut dst, f.file_size);
            put_length_prefixed(&mut dst, &f.smallest);
            put_length_prefixed(&mut dst, &f.largest);
            put_varint64(&mut dst, f.smallest_seq);
            put_varint64(&mut dst, f.largest_seq);
            put_varint64(&mut dst, f.num_entries);
            put_varint64(&mut dst, f.num_deletions);
            if !f.blob_files.is_empty() {
                put_varint64(&mut dst, tag::TABLE_BLOB_FILES);
                put_varint64(&mut dst, f.number);
                put_varint64(&mut dst, f.blob_files.len() as u64);
                for &b in &f.blob_files {
                    put_varint64(&mut dst, b);
                }
            }
        }
        for b in &self.blob_files_added {
            put_varint64(&mut dst, tag::BLOB_FILE_ADD);
            put_varint64(&mut dst, b.number);
            put_varint64(&mut dst, b.file_size);
            put_varint64(&mut dst, b.record_count);
            put_varint64(&mut dst, b.data_bytes);
            if let Some((first, last)) = &b.run_keys {
                put_varint64(&mut dst, tag::SORTED_RUN);
                put_varint64(&mut dst, b.number);
                put_length_prefixed(&mut dst, first);
                put_length_prefixed(&mut dst, last);
            }
        }
        for (new_file, e) in &self.relocations {
            put_varint64(&mut dst, tag::RELOCATION);
            put_varint64(&mut dst, *new_file);
            put_varint64(&mut dst, e.old_file);
            put_varint64(&mut dst, u64::from(e.base));
            put_bitmap(&mut dst, &e.dead);
        }
        for d in &self.dead_ordinals {
            put_varint64(&mut dst, tag::DEAD_ORDINALS);
            put_varint64(&mut dst, d.file);
            put_varint64(&mut dst, d.bytes);
            put_bitmap(&mut dst, &d.ordinals);
        }
        for &n in &self.blob_files_deleted {
            put_varint64(&mut dst, tag::BLOB_FILE_DELETE);
            put_varint64(&mut dst, n);
        }
        for &n in &self.relocations_dropped {
            put_varint64(&mut dst, tag::RELOCATION_DROP);
            put_varint64(&mut dst, n);
        }
        for t in &self.tier_added {
            debug_assert!(t.smallest_seq <= MAX_SEQ && t.largest_seq <= MAX_SEQ);
            put_varint64(&mut dst, tag::TIER_TABLE_ADD);
            for v in [
                t.id,
                t.offset,
                t.len,
                t.entries,
                t.smallest_seq,
                t.largest_seq,
            ] {
                put_varint64(&mut dst, v);
            }
            dst.extend_from_slice(&t.checksum.to_le_bytes());
        }
        for &id in &self.tier_removed {
            put_varint64(&mut dst, tag::TIER_TABLE_REMOVE);
            put_varint64(&mut dst, id);
        }
        dst
    }

    /// Decodes an edit encoded by [`VersionEdit::encode`]. The whole buffer
    /// must be consumed.
    pub fn decode(buf: &[u8]) -> Result<VersionEdit, DecodeError> {
        let mut r = Reader::new(buf);
        let mut edit = VersionEdit::default();
        while !r.is_empty() {
            let start = r.pos();
            let t = r.varint64()?;
            match t {
                tag::LOG_NUMBER => {
                    let v = r.varint64()?;
                    set_once(&mut edit.log_number, v, start, "log_number")?;
                }
                tag::NEXT_FILE_NUMBER => {
                    let v = r.varint64()?;
                    set_once(&mut edit.next_file_number, v, start, "next_file_number")?;
                }
                tag::LAST_SEQUENCE => {
                    let v = seq(&mut r)?;
                    set_once(&mut edit.last_sequence, v, start, "last_sequence")?;
                }
                tag::COMPACT_POINTER => {
                    let level = level(&mut r)?;
                    let key = r.length_prefixed()?.to_vec();
                    edit.compact_pointers.push((level, key));
                }
                tag::DELETED_FILE => {
                    let level = level(&mut r)?;
                    let number = r.varint64()?;
                    edit.deleted_files.push((level, number));
                }
                tag::NEW_FILE => {
                    let level = level(&mut r)?;
                    let meta = FileMeta {
                        number: r.varint64()?,
                        file_size: r.varint64()?,
                        smallest: r.length_prefixed()?.to_vec(),
                        largest: r.length_prefixed()?.to_vec(),
                        smallest_seq: seq(&mut r)?,
                        largest_seq: seq(&mut r)?,
                        num_entries: r.varint64()?,
                        num_deletions: r.varint64()?,
                        blob_files: Vec::new(),
                    };
                    edit.new_files.push((level, meta));
                }
                tag::TABLE_BLOB_FILES => {
                    let number = r.varint64()?;
                    let count = r.varint64()?;
                    if count > r.remaining() as u64 {
                        return Err(DecodeError::new(
                            start,
                            "table blob file count exceeds the edit",
                        ));
                    }
                    let mut files = Vec::with_capacity(count as usize);
                    for _ in 0..count {
                        files.push(r.varint64()?);
                    }
                    // It must directly follow its table's NEW_FILE.
                    let table = edit
                        .new_files
                        .last_mut()
                        .filter(|(_, f)| f.number == number && f.blob_files.is_empty())
                        .ok_or_else(|| {
                            DecodeError::new(start, "blob file list does not follow its table")
                        })?;
                    table.1.blob_files = files;
                }
                tag::BLOB_FILE_ADD => edit.blob_files_added.push(BlobMeta {
                    number: r.varint64()?,
                    file_size: r.varint64()?,
                    record_count: r.varint64()?,
                    data_bytes: r.varint64()?,
                    run_keys: None,
                }),
                tag::SORTED_RUN => {
                    let number = r.varint64()?;
                    let first = r.length_prefixed()?.to_vec();
                    let last = r.length_prefixed()?.to_vec();
                    if first > last {
                        return Err(DecodeError::new(start, "sorted run keys are backwards"));
                    }
                    // It must directly follow its file's BLOB_FILE_ADD.
                    let blob = edit
                        .blob_files_added
                        .last_mut()
                        .filter(|b| b.number == number && b.run_keys.is_none())
                        .ok_or_else(|| {
                            DecodeError::new(start, "sorted run mark does not follow its blob file")
                        })?;
                    blob.run_keys = Some((first, last));
                }
                tag::RELOCATION => {
                    let new_file = r.varint64()?;
                    let old_file = r.varint64()?;
                    let at = r.pos();
                    let base = u32::try_from(r.varint64()?)
                        .map_err(|_| DecodeError::new(at, "relocation base ordinal overflow"))?;
                    let dead = read_bitmap(&mut r)?;
                    edit.relocations.push((
                        new_file,
                        LineageEntry {
                            old_file,
                            base,
                            dead,
                        },
                    ));
                }
                tag::DEAD_ORDINALS => {
                    let file = r.varint64()?;
                    let bytes = r.varint64()?;
                    let ordinals = read_bitmap(&mut r)?;
                    edit.dead_ordinals.push(DeadOrdinals {
                        file,
                        ordinals,
                        bytes,
                    });
                }
                tag::BLOB_FILE_DELETE => edit.blob_files_deleted.push(r.varint64()?),
                tag::RELOCATION_DROP => edit.relocations_dropped.push(r.varint64()?),
                tag::TIER_TABLE_ADD => {
                    let meta = TierTableMeta {
                        id: r.varint64()?,
                        offset: r.varint64()?,
                        len: r.varint64()?,
                        entries: r.varint64()?,
                        smallest_seq: seq(&mut r)?,
                        largest_seq: seq(&mut r)?,
                        checksum: r.fixed32()?,
                    };
                    let end = meta.offset.checked_add(meta.len);
                    if end.is_none() || meta.smallest_seq > meta.largest_seq {
                        return Err(DecodeError::new(start, "memory tier table out of range"));
                    }
                    edit.tier_added.push(meta);
                }
                tag::TIER_TABLE_REMOVE => edit.tier_removed.push(r.varint64()?),
                other => {
                    return Err(DecodeError::new(
                        start,
                        format!("unknown version edit tag {other}"),
                    ))
                }
            }
        }
        Ok(edit)
    }
}

fn set_once(slot: &mut Option<u64>, v: u64, at: usize, what: &str) -> Result<(), DecodeError> {
    if slot.is_some() {
        return Err(DecodeError::new(at, format!("version edit repeats {what}")));
    }
    *slot = Some(v);
    Ok(())
}

fn level(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    let at = r.pos();
    let level = r.varint32()?;
    if level >= MAX_LEVELS {
        return Err(DecodeError::new(at, format!("level {level} out of range")));
    }
    Ok(level)
}

fn seq(r: &mut Reader<'_>) -> Result<u64, DecodeError> {
    let at = r.pos();
    let s = r.varint64()?;
    if s > MAX_SEQ {
        return Err(DecodeError::new(
            at,
            format!("sequence number {s} out of range"),
        ));
    }
    Ok(s)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
