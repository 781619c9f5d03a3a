//! Applies version edits to a version.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::{FileRef, Version};
use crate::error::{Error, Result};
use crate::format::internal_key;
use crate::format::version_edit::VersionEdit;
use crate::options::NUM_LEVELS;

/// Accumulates edits on top of a base version.
pub struct VersionBuilder {
    levels: Vec<BTreeMap<u64, FileRef>>,
}

impl VersionBuilder {
    /// Starts from `base`.
    pub fn new(base: &Version) -> Self {
        let levels = base
            .levels
            .iter()
            .map(|files| files.iter().map(|f| (f.number, f.clone())).collect())
            .collect();
        VersionBuilder { levels }
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
        Ok(v)
    }
}
