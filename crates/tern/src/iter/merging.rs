//! Merges several sorted internal iterators into one.
//!
//! A linear scan picks the smallest (or largest) child: the engine merges a
//! handful of sources (memtables, L0 files, one iterator per level), where a
//! heap would cost more than it saves.

use std::cmp::Ordering;
use std::path::Path;

use super::{BoxedIter, InternalIterator};
use crate::error::Result;
use crate::format::internal_key::compare;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Backward,
}

/// The merge of its children, in internal key order.
pub struct MergingIterator {
    children: Vec<BoxedIter>,
    current: Option<usize>,
    direction: Direction,
}

impl MergingIterator {
    /// Merges `children`.
    pub fn new(children: Vec<BoxedIter>) -> Self {
        MergingIterator {
            children,
            current: None,
            direction: Direction::Forward,
        }
    }

    fn find_smallest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            best = match best {
                Some(b) if compare(self.children[b].key(), c.key()) != Ordering::Greater => Some(b),
                _ => Some(i),
            };
        }
        self.current = best;
    }

    fn find_largest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate().rev() {
            if !c.valid() {
                continue;
            }
            best = match best {
                Some(b) if compare(self.children[b].key(), c.key()) != Ordering::Less => Some(b),
                _ => Some(i),
            };
        }
        self.current = best;
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn seek_to_first(&mut self) {
        for c in &mut self.children {
            c.seek_to_first();
        }
        self.direction = Direction::Forward;
        self.find_smallest();
    }

    fn seek_to_last(&mut self) {
        for c in &mut self.children {
            c.seek_to_last();
        }
        self.direction = Direction::Backward;
        self.find_largest();
    }

    fn seek(&mut self, target: &[u8]) {
        for c in &mut self.children {
            c.seek(target);
        }
        self.direction = Direction::Forward;
        self.find_smallest();
    }

    fn seek_for_prev(&mut self, target: &[u8]) {
        for c in &mut self.children {
            c.seek_for_prev(target);
        }
        self.direction = Direction::Backward;
        self.find_largest();
    }

    fn next(&mut self) {
        let Some(cur) = self.current else { return };
        if self.direction != Direction::Forward {
            // Put every other child just after the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&key);
                if c.valid() && compare(c.key(), &key) == Ordering::Equal {
                    c.next();
                }
            }
            self.direction = Direction::Forward;
        }
        self.children[cur].next();
        self.find_smallest();
    }

    fn prev(&mut self) {
        let Some(cur) = self.current else { return };
        if self.direction != Direction::Backward {
            // Put every other child just before the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek_for_prev(&key);
                if c.valid() && compare(c.key(), &key) == Ordering::Equal {
                    c.prev();
                }
            }
            self.direction = Direction::Backward;
        }
        self.children[cur].prev();
        self.find_largest();
    }

    fn key(&self) -> &[u8] {
        match self.current {
            Some(i) => self.children[i].key(),
            None => &[],
        }
    }

    fn value(&self) -> &[u8] {
        match self.current {
            Some(i) => self.children[i].value(),
            None => &[],
        }
    }

    fn status(&self) -> Result<()> {
        for c in &self.children {
            c.status()?;
        }
        Ok(())
    }

    fn source(&self) -> Option<(&Path, u64)> {
        self.current.and_then(|i| self.children[i].source())
    }
}
