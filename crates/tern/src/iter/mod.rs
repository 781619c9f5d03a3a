//! Iteration over internal entries.
//!
//! Every source (memtable, table, level, merge of many) implements
//! [`InternalIterator`]; the user-facing [`DbIterator`](crate::DbIterator)
//! adds MVCC visibility and bounds on top of a merge of them.

use crate::error::Result;

use std::path::Path;

/// A cursor over internal entries (`user_key ‖ trailer` → value) in internal
/// key order. Positioning methods never fail: an I/O or corruption error makes
/// the iterator invalid and is reported by [`InternalIterator::status`].
pub trait InternalIterator: Send {
    /// True when positioned at an entry.
    fn valid(&self) -> bool;
    /// Positions at the first entry.
    fn seek_to_first(&mut self);
    /// Positions at the last entry.
    fn seek_to_last(&mut self);
    /// Positions at the first entry whose internal key is `>= target`.
    fn seek(&mut self, target: &[u8]);
    /// Positions at the last entry whose internal key is `<= target`.
    fn seek_for_prev(&mut self, target: &[u8]);
    /// Moves to the next entry. Requires `valid()`.
    fn next(&mut self);
    /// Moves to the previous entry. Requires `valid()`.
    fn prev(&mut self);
    /// The internal key at the cursor. Requires `valid()`.
    fn key(&self) -> &[u8];
    /// The value at the cursor. Requires `valid()`.
    fn value(&self) -> &[u8];
    /// The first error met, if any.
    fn status(&self) -> Result<()>;
    /// The file the entry at the cursor comes from and the offset of its
    /// block, to name them when the entry turns out damaged; `None` for
    /// entries in memory. Requires `valid()`.
    fn source(&self) -> Option<(&Path, u64)> {
        None
    }
    /// Moves past every remaining (older) version of the current user key,
    /// to the first entry of the next one. Requires `valid()`. Sources
    /// that can skip versions without reading them (a memtable's version
    /// chains) override it.
    fn next_user_key(&mut self) {
        let user_key = crate::format::internal_key::user_key(self.key()).to_vec();
        self.next();
        while self.valid() && crate::format::internal_key::user_key(self.key()) == user_key {
            self.next();
        }
    }
}

/// Boxed iterator, as merged by the engine.
pub type BoxedIter = Box<dyn InternalIterator>;

pub mod db_iter;
mod level;
mod merging;
mod read_ahead;
#[cfg(test)]
pub(crate) mod testing;

pub use db_iter::DbIterator;
pub use level::LevelIterator;
pub use merging::MergingIterator;
