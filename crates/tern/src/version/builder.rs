//! Applies version edits to a version.
//!
//! Recovery, `tern check` and every install go through [`VersionBuilder`]:
//! an edit that does not apply, or a version that breaks the invariants of
//! [`Version`], is reported the same way wherever it is found.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::{BlobFileState, BlobFiles, FileRef, Relocation, Relocations, TierTables, Version};
use crate::format::internal_key;
use crate::format::version_edit::{TierTableMeta, VersionEdit};
use crate::options::NUM_LEVELS;
use crate::wal::{blob_file_name, table_file_name};

/// Why one version edit does not apply to the version before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EditError {
    /// Deletes a table that is not in the level.
    TableNotInLevel { level: u32, number: u64 },
    /// Adds a table to a level past the last.
    LevelOutOfRange { level: u32, number: u64 },
    /// Adds a blob file that is already live.
    BlobFileAlreadyLive(u64),
    /// Retires a blob file that already has lineage.
    RetiredTwice(u64),
    /// Marks ordinals dead in a blob file that is not live.
    DeadInFileNotLive(u64),
    /// Marks an ordinal dead past the file's records.
    DeadBeyondRecords {
        file: u64,
        ordinal: u32,
        records: u64,
    },
    /// Deletes a blob file that is not live.
    BlobFileNotLive(u64),
    /// Drops lineage a blob file does not have.
    NoLineage(u64),
    /// Adds a memory tier table that is already live.
    TierTableAlreadyLive(u64),
    /// Removes a memory tier table that is not live.
    TierTableNotLive(u64),
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EditError::TableNotInLevel { level, number } => {
                write!(
                    f,
                    "edit deletes table {number} that is not in level {level}"
                )
            }
            EditError::LevelOutOfRange { level, number } => write!(
                f,
                "edit adds table {number} to level {level}, beyond the last level {}",
                NUM_LEVELS - 1
            ),
            EditError::BlobFileAlreadyLive(n) => {
                write!(f, "edit adds blob file {n} that is already live")
            }
            EditError::RetiredTwice(n) => write!(f, "edit retires blob file {n} a second time"),
            EditError::DeadInFileNotLive(n) => {
                write!(
                    f,
                    "edit marks ordinals dead in blob file {n}, which is not live"
                )
            }
            EditError::DeadBeyondRecords {
                file,
                ordinal,
                records,
            } => write!(
                f,
                "edit marks ordinal {ordinal} of blob file {file} dead, which has {records} records"
            ),
            EditError::BlobFileNotLive(n) => {
                write!(f, "edit deletes blob file {n}, which is not live")
            }
            EditError::NoLineage(n) => {
                write!(f, "edit drops the lineage of blob file {n}, which has none")
            }
            EditError::TierTableAlreadyLive(n) => {
                write!(f, "edit adds memory tier table {n} that is already live")
            }
            EditError::TierTableNotLive(n) => {
                write!(f, "edit removes memory tier table {n}, which is not live")
            }
        }
    }
}

/// A broken invariant of a built version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShapeError {
    /// A table is listed in two levels.
    TableInTwoLevels(u64),
    /// Two tables of a sorted level overlap (`second` starts before `first` ends).
    Overlap {
        level: usize,
        first: u64,
        second: u64,
    },
    /// A file number is at or above the next file number.
    NumberNotBelowNext { blob: bool, number: u64, next: u64 },
    /// A blob file has a table's number.
    BlobNumberIsTable(u64),
    /// A lineage chain from blob file `old` does not end in a live file.
    Lineage {
        old: u64,
        new_file: u64,
        why: String,
    },
    /// A memory tier table's id is not below the next file number, or it
    /// shares its id with a file.
    TierId(u64),
    /// Two memory tier tables overlap in the tier file.
    TierOverlap { first: u64, second: u64 },
}

impl ShapeError {
    /// The blob file whose lineage is broken, if that is the problem.
    pub(crate) fn lineage_of(&self) -> Option<u64> {
        match self {
            ShapeError::Lineage { old, .. } => Some(*old),
            _ => None,
        }
    }
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeError::TableInTwoLevels(n) => {
                write!(f, "table {} appears in two levels", table_file_name(*n))
            }
            ShapeError::Overlap {
                level,
                first,
                second,
            } => write!(
                f,
                "tables {} and {} overlap in level {level}",
                table_file_name(*first),
                table_file_name(*second)
            ),
            ShapeError::NumberNotBelowNext { blob, number, next } => {
                let name = if *blob {
                    blob_file_name(*number)
                } else {
                    table_file_name(*number)
                };
                write!(f, "{name} is not below the next file number {next}")
            }
            ShapeError::BlobNumberIsTable(n) => {
                write!(f, "blob file {} has a table's number", blob_file_name(*n))
            }
            ShapeError::Lineage { old, new_file, why } => {
                write!(f, "lineage of blob file {old} (moved to {new_file}) {why}")
            }
            ShapeError::TierId(id) => write!(
                f,
                "memory tier table {id} has a file's number or one not below the next file number"
            ),
            ShapeError::TierOverlap { first, second } => write!(
                f,
                "memory tier tables {first} and {second} overlap in the tier file"
            ),
        }
    }
}

/// Accumulates edits on top of a base version.
pub(crate) struct VersionBuilder {
    levels: Vec<BTreeMap<u64, FileRef>>,
    blob_files: BlobFiles,
    relocations: Relocations,
    tier: TierTables,
}

impl VersionBuilder {
    /// Starts from `base`.
    pub(crate) fn new(base: &Version) -> Self {
        let levels = base
            .levels
            .iter()
            .map(|files| files.iter().map(|f| (f.number, f.clone())).collect())
            .collect();
        VersionBuilder {
            levels,
            blob_files: base.blob_files.clone(),
            relocations: base.relocations.clone(),
            tier: base.tier.clone(),
        }
    }

    /// Applies one edit as far as it applies: table deletions, table
    /// additions, then the blob fields (files added, files retired by GC,
    /// dead ordinals, files deleted, lineage dropped). Every part that does
    /// not apply is skipped and returned.
    pub(crate) fn apply(&mut self, edit: &VersionEdit) -> Vec<EditError> {
        let mut errors = Vec::new();
        for &(level, number) in &edit.deleted_files {
            let removed = self
                .levels
                .get_mut(level as usize)
                .and_then(|files| files.remove(&number));
            if removed.is_none() {
                errors.push(EditError::TableNotInLevel { level, number });
            }
        }
        for (level, meta) in &edit.new_files {
            match self.levels.get_mut(*level as usize) {
                Some(files) => {
                    files.insert(meta.number, Arc::new(meta.clone()));
                }
                None => errors.push(EditError::LevelOutOfRange {
                    level: *level,
                    number: meta.number,
                }),
            }
        }
        self.apply_blobs(edit, &mut errors);
        for id in &edit.tier_removed {
            if self.tier.remove(id).is_none() {
                errors.push(EditError::TierTableNotLive(*id));
            }
        }
        for t in &edit.tier_added {
            if self.tier.insert(t.id, Arc::new(t.clone())).is_some() {
                errors.push(EditError::TierTableAlreadyLive(t.id));
            }
        }
        errors
    }

    fn apply_blobs(&mut self, edit: &VersionEdit, errors: &mut Vec<EditError>) {
        for b in &edit.blob_files_added {
            let state = BlobFileState {
                meta: b.clone(),
                dead: RoaringBitmap::new(),
                dead_bytes: 0,
            };
            if self.blob_files.insert(b.number, Arc::new(state)).is_some() {
                errors.push(EditError::BlobFileAlreadyLive(b.number));
            }
        }
        for (new_file, entry) in &edit.relocations {
            // The old file is live when GC retires it; a manifest snapshot
            // lists lineage of files that are long gone.
            self.blob_files.remove(&entry.old_file);
            let r = Relocation {
                new_file: *new_file,
                entry: entry.clone(),
            };
            if self
                .relocations
                .insert(entry.old_file, Arc::new(r))
                .is_some()
            {
                errors.push(EditError::RetiredTwice(entry.old_file));
            }
        }
        for d in &edit.dead_ordinals {
            let Some(state) = self.blob_files.get_mut(&d.file) else {
                errors.push(EditError::DeadInFileNotLive(d.file));
                continue;
            };
            let state = Arc::make_mut(state);
            state.dead |= &d.ordinals;
            // Saturating: a damaged manifest must not overflow it.
            state.dead_bytes = state.dead_bytes.saturating_add(d.bytes);
            if let Some(max) = d.ordinals.max() {
                if u64::from(max) >= state.meta.record_count {
                    errors.push(EditError::DeadBeyondRecords {
                        file: d.file,
                        ordinal: max,
                        records: state.meta.record_count,
                    });
                }
            }
        }
        for n in &edit.blob_files_deleted {
            if self.blob_files.remove(n).is_none() {
                errors.push(EditError::BlobFileNotLive(*n));
            }
        }
        for n in &edit.relocations_dropped {
            if self.relocations.remove(n).is_none() {
                errors.push(EditError::NoLineage(*n));
            }
        }
    }

    /// Produces the version without checking its invariants (see
    /// [`Version::check_invariants`]).
    pub(crate) fn build(self) -> Version {
        let mut v = Version::default();
        for (level, files) in self.levels.into_iter().enumerate() {
            let mut list: Vec<FileRef> = files.into_values().collect();
            if level == 0 {
                list.sort_by(|a, b| {
                    b.largest_seq
                        .cmp(&a.largest_seq)
                        .then(b.number.cmp(&a.number))
                });
            } else {
                list.sort_by(|a, b| internal_key::compare(&a.smallest, &b.smallest));
            }
            v.levels[level] = list;
        }
        v.blob_files = self.blob_files;
        v.relocations = self.relocations;
        v.tier = self.tier;
        v
    }
}

impl Version {
    /// Every broken invariant: a table in two levels, overlapping tables in
    /// levels 1 and deeper, a blob file with a table's number, a lineage
    /// chain that does not end in a live blob file, and (given the
    /// manifest's next file number) a file numbered at or above it.
    pub(crate) fn check_invariants(&self, next_file_number: Option<u64>) -> Vec<ShapeError> {
        let mut errors = Vec::new();
        let below_next = |blob: bool, number: u64, errors: &mut Vec<ShapeError>| {
            if let Some(next) = next_file_number.filter(|&next| number >= next) {
                errors.push(ShapeError::NumberNotBelowNext { blob, number, next });
            }
        };
        let mut tables = HashSet::new();
        for (level, files) in self.levels.iter().enumerate() {
            for f in files {
                if !tables.insert(f.number) {
                    errors.push(ShapeError::TableInTwoLevels(f.number));
                }
                below_next(false, f.number, &mut errors);
            }
            if level == 0 {
                continue;
            }
            for w in files.windows(2) {
                if internal_key::user_key(&w[0].largest) >= internal_key::user_key(&w[1].smallest) {
                    errors.push(ShapeError::Overlap {
                        level,
                        first: w[0].number,
                        second: w[1].number,
                    });
                }
            }
        }
        for &number in self.blob_files.keys() {
            if tables.contains(&number) {
                errors.push(ShapeError::BlobNumberIsTable(number));
            }
            below_next(true, number, &mut errors);
        }
        let mut prev: Option<&TierTableMeta> = None;
        let mut by_offset: Vec<&TierTableMeta> = self.tier.values().map(|t| &**t).collect();
        by_offset.sort_by_key(|t| t.offset);
        for t in by_offset {
            let numbered = tables.contains(&t.id) || self.blob_files.contains_key(&t.id);
            if numbered || next_file_number.is_some_and(|next| t.id >= next) {
                errors.push(ShapeError::TierId(t.id));
            }
            if let Some(p) = prev.filter(|p| p.offset.saturating_add(p.len) > t.offset) {
                errors.push(ShapeError::TierOverlap {
                    first: p.id,
                    second: t.id,
                });
            }
            prev = Some(t);
        }
        // Retired files whose chain is known to end in a live file, so
        // each hop is walked once however many chains share it (this runs
        // at every install, under the state lock).
        let mut ends = HashSet::new();
        for (&old, r) in &self.relocations {
            match self.lineage_break(r.new_file, &ends) {
                Ok(passed) => {
                    ends.insert(old);
                    ends.extend(passed);
                }
                Err(why) => errors.push(ShapeError::Lineage {
                    old,
                    new_file: r.new_file,
                    why,
                }),
            }
        }
        errors
    }

    /// Follows the lineage chain starting at `file` to a live blob file or
    /// to a retired one in `ends`; returns the retired files it passed, or
    /// why the chain does not end. Chains have no length limit (GC adds a
    /// hop per round for references compaction has not rewritten); a chain
    /// longer than the lineage itself has a cycle.
    fn lineage_break(
        &self,
        mut file: u64,
        ends: &HashSet<u64>,
    ) -> std::result::Result<Vec<u64>, String> {
        let mut passed = Vec::new();
        while passed.len() <= self.relocations.len() {
            if self.blob_files.contains_key(&file) || ends.contains(&file) {
                return Ok(passed);
            }
            let Some(next) = self.relocations.get(&file) else {
                return Err(format!(
                    "leads to blob file {file}, which is neither live nor retired"
                ));
            };
            passed.push(file);
            file = next.new_file;
        }
        Err("comes back to a file it passed (a cycle)".to_string())
    }
}
