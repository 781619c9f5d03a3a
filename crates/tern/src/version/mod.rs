//! The LSM shape: which table files make up each level.
//!
//! A [`Version`] is immutable; every flush or compaction installs a new one
//! through a [`VersionEdit`](crate::format::version_edit::VersionEdit) logged
//! in the manifest ([`VersionSet`]). Readers hold an `Arc<Version>` so the
//! files they read stay on disk until they let go.
//!
//! Invariants:
//! 1. L0 files are ordered newest first (by largest sequence number); their
//!    key ranges may overlap.
//! 2. Files of L1 and deeper are ordered by smallest key and their user-key
//!    ranges do not overlap.

mod blobs;
mod builder;
#[cfg(test)]
mod datadriven_tests;
mod level_targets;
mod manifest_reader;
mod replay;
#[cfg(test)]
pub(crate) mod script;
mod set;

use std::cmp::Ordering;
use std::sync::Arc;

pub use blobs::{resolve, BlobFileState, BlobFiles, Relocation, Relocations};
pub use level_targets::LevelTargets;
pub(crate) use manifest_reader::{read_current_manifest, ManifestReader};
pub use replay::{replay_manifest, OnProblem, Replayed};
pub use set::VersionSet;

use crate::format::internal_key::{self, user_key};
pub use crate::format::version_edit::{BlobMeta, FileMeta, TierTableMeta};
use crate::options::NUM_LEVELS;

/// A table file as part of a version.
pub type FileRef = Arc<FileMeta>;

/// One immutable LSM shape.
#[derive(Debug, Clone, Default)]
pub struct Version {
    /// Files per level, ordered as the module invariants say.
    pub levels: [Vec<FileRef>; NUM_LEVELS],
    /// Live blob files.
    pub blob_files: BlobFiles,
    /// Blob files retired by GC that tables may still refer to.
    pub relocations: Relocations,
    /// Tables of the durable memory tier, by id (ids follow age).
    pub tier: TierTables,
}

/// The durable memory tier's tables, by id.
pub type TierTables = std::collections::BTreeMap<u64, Arc<TierTableMeta>>;

impl Version {
    /// Total bytes of the files in `level`.
    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|f| f.file_size).sum()
    }

    /// Total bytes of all table files.
    pub fn total_bytes(&self) -> u64 {
        (0..NUM_LEVELS).map(|l| self.level_bytes(l)).sum()
    }

    /// Every live file number (tables and blob files).
    pub fn file_numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.levels
            .iter()
            .flatten()
            .map(|f| f.number)
            .chain(self.blob_files.keys().copied())
    }

    /// Files of `level` whose user-key range intersects `[lo, hi]` (None = unbounded).
    pub fn overlapping(&self, level: usize, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Vec<FileRef> {
        self.levels[level]
            .iter()
            .filter(|f| file_overlaps(f, lo, hi))
            .cloned()
            .collect()
    }

    /// Index of the first file in a sorted level (L1+) whose largest key is
    /// `>= ikey`.
    pub fn find_file(files: &[FileRef], ikey: &[u8]) -> usize {
        files.partition_point(|f| internal_key::compare(&f.largest, ikey) == Ordering::Less)
    }

    /// Files that may hold `ukey`, in the order they must be searched
    /// (newest data first): overlapping L0 files, then one file per level.
    pub fn files_for_key<'a>(
        &'a self,
        ukey: &'a [u8],
        lookup: &'a [u8],
    ) -> impl Iterator<Item = &'a FileRef> + 'a {
        let l0 = self.levels[0]
            .iter()
            .filter(move |f| user_key(&f.smallest) <= ukey && ukey <= user_key(&f.largest));
        let deeper = self.levels[1..].iter().filter_map(move |files| {
            let i = Self::find_file(files, lookup);
            files.get(i).filter(|f| user_key(&f.smallest) <= ukey)
        });
        l0.chain(deeper)
    }
}

/// True if `f`'s user-key range intersects `[lo, hi]`.
pub fn file_overlaps(f: &FileMeta, lo: Option<&[u8]>, hi: Option<&[u8]>) -> bool {
    let before = hi.is_some_and(|hi| user_key(&f.smallest) > hi);
    let after = lo.is_some_and(|lo| user_key(&f.largest) < lo);
    !(before || after)
}
