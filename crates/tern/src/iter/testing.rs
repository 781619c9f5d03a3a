//! An iterator over a vector, for tests.

use super::InternalIterator;
use crate::error::Result;
use crate::format::internal_key::compare;
use std::cmp::Ordering;

/// Iterates a vector of (internal key, value), sorting it first.
pub struct VecIter {
    items: Vec<(Vec<u8>, Vec<u8>)>,
    pos: Option<usize>,
}

impl VecIter {
    pub fn new(mut items: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        items.sort_by(|a, b| compare(&a.0, &b.0));
        VecIter { items, pos: None }
    }
}

impl InternalIterator for VecIter {
    fn valid(&self) -> bool {
        self.pos.is_some()
    }
    fn seek_to_first(&mut self) {
        self.pos = (!self.items.is_empty()).then_some(0);
    }
    fn seek_to_last(&mut self) {
        self.pos = self.items.len().checked_sub(1);
    }
    fn seek(&mut self, target: &[u8]) {
        let i = self
            .items
            .partition_point(|(k, _)| compare(k, target) == Ordering::Less);
        self.pos = (i < self.items.len()).then_some(i);
    }
    fn seek_for_prev(&mut self, target: &[u8]) {
        let i = self
            .items
            .partition_point(|(k, _)| compare(k, target) != Ordering::Greater);
        self.pos = i.checked_sub(1);
    }
    fn next(&mut self) {
        self.pos = self.pos.map(|p| p + 1).filter(|&p| p < self.items.len());
    }
    fn prev(&mut self) {
        self.pos = self.pos.and_then(|p| p.checked_sub(1));
    }
    fn key(&self) -> &[u8] {
        self.pos.map_or(&[], |p| &self.items[p].0)
    }
    fn value(&self) -> &[u8] {
        self.pos.map_or(&[], |p| &self.items[p].1)
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}
