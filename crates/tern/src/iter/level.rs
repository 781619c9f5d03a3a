//! Iterates one sorted level (L1+) as a single sequence, opening each table
//! only when the cursor reaches it.

use std::cmp::Ordering;
use std::path::Path;
use std::sync::Arc;

use super::InternalIterator;
use crate::db::table_cache::TableCache;
use crate::error::{Error, Result};
use crate::format::internal_key::compare;
use crate::sst::TableIter;
use crate::version::{FileRef, Version};

/// A concatenation of the non-overlapping tables of one level.
pub struct LevelIterator {
    files: Vec<FileRef>,
    tables: Arc<TableCache>,
    index: usize,
    current: Option<TableIter>,
    error: Option<Error>,
}

impl LevelIterator {
    /// Iterates `files`, which must be sorted and non-overlapping.
    pub fn new(files: Vec<FileRef>, tables: Arc<TableCache>) -> Self {
        LevelIterator {
            files,
            tables,
            index: 0,
            current: None,
            error: None,
        }
    }

    fn open(&mut self, index: usize) -> bool {
        self.index = index;
        self.current = None;
        let Some(f) = self.files.get(index) else {
            return false;
        };
        match self.tables.get(f.number) {
            Ok(t) => {
                self.current = Some(t.iter());
                true
            }
            Err(e) => {
                self.error = Some(e);
                false
            }
        }
    }

    fn skip_forward(&mut self) {
        while self
            .current
            .as_ref()
            .is_some_and(|c| !c.valid() && c.status().is_ok())
        {
            if !self.open(self.index + 1) {
                return;
            }
            if let Some(c) = self.current.as_mut() {
                c.seek_to_first();
            }
        }
    }

    fn skip_backward(&mut self) {
        while self
            .current
            .as_ref()
            .is_some_and(|c| !c.valid() && c.status().is_ok())
        {
            if self.index == 0 || !self.open(self.index - 1) {
                self.current = None;
                return;
            }
            if let Some(c) = self.current.as_mut() {
                c.seek_to_last();
            }
        }
    }
}

impl InternalIterator for LevelIterator {
    fn valid(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.valid())
    }

    fn seek_to_first(&mut self) {
        if self.open(0) {
            if let Some(c) = self.current.as_mut() {
                c.seek_to_first();
            }
        }
        self.skip_forward();
    }

    fn seek_to_last(&mut self) {
        if !self.files.is_empty() && self.open(self.files.len() - 1) {
            if let Some(c) = self.current.as_mut() {
                c.seek_to_last();
            }
        }
        self.skip_backward();
    }

    fn seek(&mut self, target: &[u8]) {
        let i = Version::find_file(&self.files, target);
        if self.open(i) {
            if let Some(c) = self.current.as_mut() {
                c.seek(target);
            }
        }
        self.skip_forward();
    }

    fn seek_for_prev(&mut self, target: &[u8]) {
        // Last file whose smallest key is <= target.
        let i = self
            .files
            .partition_point(|f| compare(&f.smallest, target) != Ordering::Greater);
        if i == 0 {
            self.current = None;
            return;
        }
        if self.open(i - 1) {
            if let Some(c) = self.current.as_mut() {
                c.seek_for_prev(target);
            }
        }
        self.skip_backward();
    }

    fn next(&mut self) {
        if let Some(c) = self.current.as_mut() {
            c.next();
        }
        self.skip_forward();
    }

    fn prev(&mut self) {
        if let Some(c) = self.current.as_mut() {
            c.prev();
        }
        self.skip_backward();
    }

    fn key(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.key())
    }

    fn value(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |c| c.value())
    }

    fn status(&self) -> Result<()> {
        if let Some(e) = &self.error {
            return Err(e.duplicate());
        }
        self.current.as_ref().map_or(Ok(()), |c| c.status())
    }

    fn source(&self) -> Option<(&Path, u64)> {
        self.current.as_ref().and_then(|c| c.source())
    }
}
