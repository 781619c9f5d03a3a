//! Blob files as part of a version: live files with their dead ordinals,
//! and the lineage of files retired by GC.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::{BlobMeta, Version};

use crate::format::blob::LineageEntry;

/// A live blob file and the records compaction has found dead in it.
#[derive(Debug, Clone, PartialEq)]
pub struct BlobFileState {
    /// What the file holds.
    pub meta: BlobMeta,
    /// Ordinals no live SST entry refers to.
    pub dead: RoaringBitmap,
    /// Bytes of those records.
    pub dead_bytes: u64,
}

impl BlobFileState {
    /// Fraction of the record bytes that are garbage.
    pub fn garbage_ratio(&self) -> f64 {
        self.dead_bytes as f64 / self.meta.data_bytes.max(1) as f64
    }

    /// True when every record is dead.
    pub fn all_dead(&self) -> bool {
        self.dead.len() >= self.meta.record_count
    }
}

/// A blob file retired by GC: where its live records went.
#[derive(Debug, Clone, PartialEq)]
pub struct Relocation {
    /// The GC output holding the records now.
    pub new_file: u64,
    /// Base ordinal and the dead set the GC job used.
    pub entry: LineageEntry,
}

impl Version {
    /// Follows lineage from `(file, ordinal)` to the live file holding the
    /// record. Returns the live file, the ordinal there, and whether it moved.
    pub fn resolve_blob(
        &self,
        file: u64,
        ordinal: u32,
    ) -> std::result::Result<(u64, u32, bool), String> {
        resolve(&self.blob_files, &self.relocations, file, ordinal)
    }

    /// The live file holding the records of blob file `file` now: `file`
    /// itself, or where GC's lineage leads from it.
    pub fn live_blob_file(&self, mut file: u64) -> u64 {
        // Chains are acyclic (installs and recovery check it); the bound
        // only guards the loop.
        for _ in 0..=self.relocations.len() {
            match self.relocations.get(&file) {
                Some(r) => file = r.new_file,
                None => break,
            }
        }
        file
    }

    /// Blob files reachable from the tables: those the tables list, plus
    /// every file their lineage leads to.
    pub fn referenced_blob_files(&self) -> BTreeSet<u64> {
        let mut out = BTreeSet::new();
        let mut todo: Vec<u64> = self
            .levels
            .iter()
            .flatten()
            .flat_map(|f| f.blob_files.iter().copied())
            .collect();
        while let Some(n) = todo.pop() {
            if out.insert(n) {
                if let Some(r) = self.relocations.get(&n) {
                    todo.push(r.new_file);
                }
            }
        }
        out
    }

    /// Blob record bytes over `limit` times the live ones, where `hidden`
    /// bytes of the records not marked dead are dead all the same (shadowed
    /// from L0): what GC must free to bring the blob files back under the
    /// limit. Counts record bytes (`data_bytes`), not file framing.
    pub fn blob_space_excess(&self, limit: f64, hidden: u64) -> u64 {
        let (total, dead) = self.blob_files.values().fold((0u64, 0u64), |(t, d), b| {
            (
                t + b.meta.data_bytes,
                d + b.dead_bytes.min(b.meta.data_bytes),
            )
        });
        let live = total.saturating_sub(dead).saturating_sub(hidden) as f64;
        (total as f64 - live * limit).max(0.0) as u64
    }

    /// Bytes of all live blob files.
    pub fn blob_bytes(&self) -> u64 {
        self.blob_files.values().map(|b| b.meta.file_size).sum()
    }

    /// Bytes of records in live blob files not known to be dead.
    pub fn blob_live_bytes(&self) -> u64 {
        self.blob_files
            .values()
            .map(|b| b.meta.data_bytes.saturating_sub(b.dead_bytes))
            .sum()
    }
}

/// Something that says whether a blob file is live.
pub trait LiveBlobs {
    /// True if `file` is a live blob file.
    fn is_live(&self, file: u64) -> bool;
}

impl LiveBlobs for BlobFiles {
    fn is_live(&self, file: u64) -> bool {
        self.contains_key(&file)
    }
}

impl LiveBlobs for BTreeSet<u64> {
    fn is_live(&self, file: u64) -> bool {
        self.contains(&file)
    }
}

/// Follows lineage from `(file, ordinal)` to the live file holding the
/// record: the live file, the ordinal there, and whether it moved. The
/// error says why the reference leads nowhere; the caller names the file
/// that holds it.
pub fn resolve(
    live: &impl LiveBlobs,
    lineage: &Relocations,
    mut file: u64,
    mut ordinal: u32,
) -> std::result::Result<(u64, u32, bool), String> {
    let mut moved = false;
    // Chains are usually short (compaction rewrites refs); a chain longer
    // than the lineage has a cycle, which recovery and installs reject.
    for _ in 0..=lineage.len() {
        if live.is_live(file) {
            return Ok((file, ordinal, moved));
        }
        let r = lineage
            .get(&file)
            .ok_or_else(|| format!("blob reference to unknown blob file {file}"))?;
        if r.entry.dead.contains(ordinal) {
            return Err(format!(
                "blob reference to record {ordinal} of file {file}, which GC dropped as dead"
            ));
        }
        ordinal = r.entry.translate(ordinal);
        file = r.new_file;
        moved = true;
    }
    Err(format!("blob lineage of file {file} has a cycle"))
}

/// Per-file blob state carried by a version.
pub type BlobFiles = BTreeMap<u64, Arc<BlobFileState>>;
/// Lineage of retired blob files.
pub type Relocations = BTreeMap<u64, Arc<Relocation>>;
