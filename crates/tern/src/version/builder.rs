//! Applies version edits to a version.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use roaring::RoaringBitmap;

use super::{BlobFileState, BlobFiles, FileRef, Relocation, Relocations, Version};
use crate::error::{Error, Result};
use crate::format::internal_key;
use crate::format::version_edit::VersionEdit;
use crate::options::NUM_LEVELS;

/// Accumulates edits on top of a base version.
pub struct VersionBuilder {
    levels: Vec<BTreeMap<u64, FileRef>>,
    blob_files: BlobFiles,
    relocations: Relocations,
}

impl VersionBuilder {
    /// Starts from `base`.
    pub fn new(base: &Version) -> Self {
        let levels = base
            .levels
            .iter()
            .map(|files| files.iter().map(|f| (f.number, f.clone())).collect())
            .collect();
        VersionBuilder {
            levels,
            blob_files: base.blob_files.clone(),
            relocations: base.relocations.clone(),
        }
    }

    /// Applies one edit: deletions first, then additions.
    pub fn apply(&mut self, edit: &VersionEdit) -> Result<()> {
        for &(level, number) in &edit.deleted_files {
            let files = self.level_mut(level)?;
            if files.remove(&number).is_none() {
                return Err(Error::InvalidArgument(format!(
                    "version edit deletes file {number} that is not in level {level}"
                )));
            }
        }
        for (level, meta) in &edit.new_files {
            let files = self.level_mut(*level)?;
            files.insert(meta.number, Arc::new(meta.clone()));
        }
        self.apply_blobs(edit)
    }

    fn apply_blobs(&mut self, edit: &VersionEdit) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        for b in &edit.blob_files_added {
            let state = BlobFileState {
                meta: b.clone(),
                dead: RoaringBitmap::new(),
                dead_bytes: 0,
            };
            if self.blob_files.insert(b.number, Arc::new(state)).is_some() {
                return bad(format!("blob file {} added twice", b.number));
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
                return bad(format!("blob file {} retired twice", entry.old_file));
            }
        }
        for d in &edit.dead_ordinals {
            let Some(state) = self.blob_files.get_mut(&d.file) else {
                return bad(format!(
                    "dead ordinals for blob file {} that is not live",
                    d.file
                ));
            };
            let state = Arc::make_mut(state);
            state.dead |= &d.ordinals;
            state.dead_bytes += d.bytes;
            if state
                .dead
                .max()
                .is_some_and(|m| u64::from(m) >= state.meta.record_count)
            {
                return bad(format!(
                    "dead ordinal beyond the records of blob file {}",
                    d.file
                ));
            }
        }
        for n in &edit.blob_files_deleted {
            if self.blob_files.remove(n).is_none() {
                return bad(format!("deletes blob file {n} that is not live"));
            }
        }
        for n in &edit.relocations_dropped {
            if self.relocations.remove(n).is_none() {
                return bad(format!("drops lineage of blob file {n} that has none"));
            }
        }
        Ok(())
    }

    fn level_mut(&mut self, level: u32) -> Result<&mut BTreeMap<u64, FileRef>> {
        self.levels
            .get_mut(level as usize)
            .ok_or_else(|| Error::InvalidArgument(format!("level {level} out of range")))
    }

    /// Produces the version, checking the level invariants.
    pub fn build(self) -> Result<Version> {
        let mut v = Version::default();
        let mut seen = HashSet::new();
        for (level, files) in self.levels.into_iter().enumerate() {
            let mut list: Vec<FileRef> = files.into_values().collect();
            for f in &list {
                if !seen.insert(f.number) {
                    return Err(Error::InvalidArgument(format!(
                        "file {} appears in two levels",
                        f.number
                    )));
                }
            }
            if level == 0 {
                list.sort_by(|a, b| {
                    b.largest_seq
                        .cmp(&a.largest_seq)
                        .then(b.number.cmp(&a.number))
                });
            } else {
                list.sort_by(|a, b| internal_key::compare(&a.smallest, &b.smallest));
                for w in list.windows(2) {
                    if internal_key::user_key(&w[0].largest)
                        >= internal_key::user_key(&w[1].smallest)
                    {
                        return Err(Error::InvalidArgument(format!(
                            "files {} and {} overlap in level {level}",
                            w[0].number, w[1].number
                        )));
                    }
                }
            }
            v.levels[level] = list;
        }
        debug_assert_eq!(v.levels.len(), NUM_LEVELS);
        for (old, r) in &self.relocations {
            if !self.blob_files.contains_key(&r.new_file)
                && !self.relocations.contains_key(&r.new_file)
            {
                return Err(Error::InvalidArgument(format!(
                    "lineage of blob file {old} leads to unknown file {}",
                    r.new_file
                )));
            }
        }
        v.blob_files = self.blob_files;
        v.relocations = self.relocations;
        Ok(v)
    }
}
