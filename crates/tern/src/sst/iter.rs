//! Two-level iteration over a table: the index block picks data blocks, a
//! block iterator walks entries inside one.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use super::Table;
use crate::error::{Error, Result};
use crate::format::block::BlockIter;
use crate::format::internal_key;
use crate::iter::InternalIterator;

/// An [`InternalIterator`] over all entries of a [`Table`], forward and
/// backward. Errors (I/O, corruption) make it invalid and are reported by
/// [`InternalIterator::status`]; the first error sticks.
pub struct TableIter {
    table: Arc<Table>,
    index: BlockIter,
    data: Option<BlockIter>,
    /// Offset of the block `data` iterates.
    data_offset: u64,
    err: Option<Error>,
}

impl std::fmt::Debug for TableIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableIter")
            .field("table", &self.table.path())
            .field("data_offset", &self.data_offset)
            .field("valid", &self.valid())
            .finish()
    }
}

impl TableIter {
    pub(crate) fn new(table: Arc<Table>) -> Self {
        let index = table.index_iter();
        TableIter {
            table,
            index,
            data: None,
            data_offset: u64::MAX,
            err: None,
        }
    }

    /// The table iterated.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    fn set_err(&mut self, e: Error) {
        if self.err.is_none() {
            self.err = Some(e);
        }
        self.data = None;
    }

    /// Points `data` at the block the index is positioned on.
    fn init_data_block(&mut self) {
        if !self.index.valid() {
            if let Err(e) = self.index.status() {
                let e = self.table.index_err(e);
                self.set_err(e);
            }
            self.data = None;
            return;
        }
        let handle = match self.table.decode_handle(self.index.value()) {
            Ok(h) => h,
            Err(e) => return self.set_err(e),
        };
        if self.data.is_some() && self.data_offset == handle.offset {
            return;
        }
        match self.table.read_block(handle, true) {
            Ok(block) => {
                self.data = Some(BlockIter::new(block, internal_key::compare));
                self.data_offset = handle.offset;
            }
            Err(e) => self.set_err(e),
        }
    }

    /// Records the data iterator's error, if any. Returns true if there was one.
    fn check_data(&mut self) -> bool {
        if let Some(d) = &self.data {
            if let Err(e) = d.status() {
                let e = Error::corruption(
                    self.table.path(),
                    self.data_offset,
                    format!(
                        "data block: {} (at byte {} of the block)",
                        e.reason, e.offset
                    ),
                );
                self.set_err(e);
                return true;
            }
        }
        false
    }

    fn data_valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn skip_empty_forward(&mut self) {
        while !self.data_valid() {
            if self.err.is_some() || self.check_data() {
                return;
            }
            if !self.index.valid() {
                self.data = None;
                return;
            }
            self.index.next();
            self.init_data_block();
            if let Some(d) = &mut self.data {
                d.seek_to_first();
            }
        }
    }

    fn skip_empty_backward(&mut self) {
        while !self.data_valid() {
            if self.err.is_some() || self.check_data() {
                return;
            }
            if !self.index.valid() {
                self.data = None;
                return;
            }
            self.index.prev();
            self.init_data_block();
            if let Some(d) = &mut self.data {
                d.seek_to_last();
            }
        }
    }
}

impl InternalIterator for TableIter {
    fn valid(&self) -> bool {
        self.err.is_none() && self.data_valid()
    }

    fn seek_to_first(&mut self) {
        if self.err.is_some() {
            return;
        }
        self.index.seek_to_first();
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek_to_first();
        }
        self.skip_empty_forward();
    }

    fn seek_to_last(&mut self) {
        if self.err.is_some() {
            return;
        }
        self.index.seek_to_last();
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek_to_last();
        }
        self.skip_empty_backward();
    }

    fn seek(&mut self, target: &[u8]) {
        if self.err.is_some() {
            return;
        }
        self.table.seek_index(&mut self.index, target);
        self.init_data_block();
        if let Some(d) = &mut self.data {
            d.seek(target);
        }
        self.skip_empty_forward();
    }

    fn seek_for_prev(&mut self, target: &[u8]) {
        if self.err.is_some() {
            return;
        }
        self.seek(target);
        if self.err.is_some() {
            return;
        }
        if !self.valid() {
            self.seek_to_last();
            return;
        }
        while self.valid() && internal_key::compare(self.key(), target) == Ordering::Greater {
            self.prev();
        }
    }

    fn next(&mut self) {
        if !self.valid() {
            return;
        }
        if let Some(d) = &mut self.data {
            d.next();
        }
        self.skip_empty_forward();
    }

    fn prev(&mut self) {
        if !self.valid() {
            return;
        }
        if let Some(d) = &mut self.data {
            d.prev();
        }
        self.skip_empty_backward();
    }

    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.key())
    }

    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.value())
    }

    fn status(&self) -> Result<()> {
        match &self.err {
            None => Ok(()),
            Some(e) => Err(e.duplicate()),
        }
    }

    fn source(&self) -> Option<(&Path, u64)> {
        Some((self.table.path(), self.data_offset))
    }
}
