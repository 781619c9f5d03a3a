//! The memory tier (after MioDB): an optional layer between the immutable
//! memtables and L0 that takes full memtables in one copy and holds them as
//! skiplist tables in one memory mapping.
//!
//! - **One-piece flush**: a full memtable's arena is copied into a free
//!   extent of the tier in one `memcpy`, and its links are rebased by one
//!   pass per level (`table.rs`). Nothing is re-encoded.
//! - **Zero-copy merges**: when a tier level holds `memtier_level_tables`
//!   tables, they are merged into one by linking the newer tables' nodes
//!   into the oldest one's list, unlinking versions no reader needs
//!   (`merge.rs`); the result moves one level down. The last level merges
//!   whatever reaches it into one table.
//! - **Lazy copy**: when the tier fills, its oldest table is written out as
//!   one L0 table (with key-value separation), the one copy of the data
//!   that happens, and its extents are freed once no reader holds them.
//!
//! Tables are kept in sequence order: every table of a level is newer than
//! every table of the level below, and within a level newer tables come
//! first. Reads look at them newest first, after the memtables and before
//! L0. The engine's side (when to copy in, merge and copy out, and the
//! WALs the tier's data still needs) is in `db/memtier.rs`.

pub(crate) mod fuzzing;
pub(crate) mod memory;
pub(crate) mod merge;
pub mod scan;
pub(crate) mod table;

use std::sync::Arc;

use table::TierTable;

use crate::format::internal_key::SeqNo;

pub use memory::MAX_TIER_SIZE;

/// The durable tier's file name the documentation suggests
/// (`memtier_path = "MEMTIER"`, in the store's directory), where
/// `tern check` looks for it unless told otherwise.
pub const DEFAULT_MEMTIER_FILE: &str = "MEMTIER";

/// The tier's tables as one read sees them, newest first.
///
/// `floor` is the visible sequence number when the view was made: a read
/// holding the view reads at a registered snapshot or at `floor` or above,
/// so merges may unlink versions hidden at the lowest floor of the views
/// still alive (`Shared::tier_horizon`).
#[derive(Debug, Default)]
pub struct TierView {
    /// Newest first.
    pub(crate) tables: Vec<Arc<TierTable>>,
    floor: SeqNo,
}

impl TierView {
    /// A view of `tables` (newest first) made when `floor` was visible.
    pub(crate) fn new(tables: Vec<Arc<TierTable>>, floor: SeqNo) -> Self {
        TierView { tables, floor }
    }

    /// The visible sequence number when it was made.
    pub(crate) fn floor(&self) -> SeqNo {
        self.floor
    }
}

/// Extents taken out of a table because merges unlinked all their nodes,
/// with the views alive then: freed (dropped) once none of those is.
pub(crate) struct Retired {
    views: Vec<std::sync::Weak<TierView>>,
    extents: Vec<Arc<memory::Extent>>,
}

impl Retired {
    /// `extents`, to be freed once every view in `views` is gone.
    pub(crate) fn new(
        views: Vec<std::sync::Weak<TierView>>,
        extents: Vec<Arc<memory::Extent>>,
    ) -> Self {
        Retired { views, extents }
    }

    /// Whether a reader may still reach its extents.
    pub(crate) fn in_use(&self) -> bool {
        self.views.iter().any(|v| v.strong_count() > 0)
    }
}

impl std::fmt::Debug for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retired")
            .field("extents", &self.extents.len())
            .finish()
    }
}

/// The tier's tables by level.
#[derive(Debug, Default, Clone)]
pub(crate) struct TierLevels {
    /// Level 0 first; within a level, newest first.
    levels: Vec<Vec<Arc<TierTable>>>,
}

impl TierLevels {
    /// An empty tier of `levels` levels (at least one).
    pub(crate) fn new(levels: usize) -> Self {
        TierLevels {
            levels: vec![Vec::new(); levels.max(1)],
        }
    }

    /// Every table, newest first.
    pub(crate) fn tables(&self) -> impl Iterator<Item = &Arc<TierTable>> {
        self.levels.iter().flatten()
    }

    /// Whether it holds no table.
    pub(crate) fn is_empty(&self) -> bool {
        self.levels.iter().all(Vec::is_empty)
    }

    /// Tables per level, level 0 first.
    #[cfg(test)]
    pub(crate) fn shape(&self) -> Vec<usize> {
        self.levels.iter().map(Vec::len).collect()
    }

    /// Adds a table copied in from a memtable: the newest of all.
    pub(crate) fn add_newest(&mut self, table: Arc<TierTable>) {
        self.levels[0].insert(0, table);
    }

    /// The oldest table: the last of the deepest level holding any.
    pub(crate) fn oldest(&self) -> Option<&Arc<TierTable>> {
        self.levels.iter().rev().find_map(|l| l.last())
    }

    /// Puts back a table taken out as the oldest (a failed copy-out).
    pub(crate) fn add_oldest(&mut self, table: Arc<TierTable>) {
        let last = self.levels.len() - 1;
        self.levels[last].push(table);
    }

    /// Removes `table`; false if it is not here.
    pub(crate) fn remove(&mut self, table: &Arc<TierTable>) -> bool {
        for level in &mut self.levels {
            if let Some(i) = level.iter().position(|t| Arc::ptr_eq(t, table)) {
                level.remove(i);
                return true;
            }
        }
        false
    }

    /// The next merge due, as its level and its tables oldest first: a
    /// level above the last holding `level_tables` tables or more, or the
    /// last level holding two or more.
    pub(crate) fn pick_merge(&self, level_tables: usize) -> Option<(usize, Vec<Arc<TierTable>>)> {
        let last = self.levels.len() - 1;
        self.levels.iter().enumerate().find_map(|(i, l)| {
            let due = if i < last {
                l.len() >= level_tables.max(2)
            } else {
                l.len() >= 2
            };
            due.then(|| (i, l.iter().rev().cloned().collect()))
        })
    }

    /// Replaces `inputs` (what [`TierLevels::pick_merge`] gave for `level`)
    /// with `merged`: the newest table of the next level, or the one table
    /// of the last level. False, changing nothing, if an input is gone.
    pub(crate) fn replace_merged(
        &mut self,
        level: usize,
        inputs: &[Arc<TierTable>],
        merged: Arc<TierTable>,
    ) -> bool {
        let here = &self.levels[level];
        if !inputs
            .iter()
            .all(|t| here.iter().any(|h| Arc::ptr_eq(h, t)))
        {
            return false;
        }
        self.levels[level].retain(|t| !inputs.iter().any(|i| Arc::ptr_eq(i, t)));
        let to = (level + 1).min(self.levels.len() - 1);
        if to == level {
            // The last level: older tables than the inputs cannot be
            // there (they would have been inputs too), newer ones go first.
            self.levels[to].push(merged);
        } else {
            self.levels[to].insert(0, merged);
        }
        true
    }

    /// The oldest WAL a table still needs, if any.
    pub(crate) fn oldest_wal(&self) -> Option<u64> {
        self.tables()
            .filter_map(|t| t.wals().first().copied())
            .min()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
