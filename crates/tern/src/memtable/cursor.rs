//! [`ListCursor`]: an [`InternalIterator`] over any skiplist of nodes, the
//! memtable's or a memory-tier table's.

use std::sync::Arc;

use super::skiplist::{NodeMemory, NodeRef, Nodes, Target};
use crate::error::Result;
use crate::iter::InternalIterator;

/// A list a [`ListCursor`] can walk.
pub(crate) trait NodeList: Send + Sync {
    /// The memory its nodes live in.
    type Mem: NodeMemory + ?Sized;
    /// Its nodes, for a search.
    fn nodes(&self) -> Nodes<'_, Self::Mem>;
}

/// An iterator over a list's entries, holding the list alive.
///
/// `key()` is the internal key (`user_key ‖ trailer`), `value()` the value.
/// Moving backwards searches for the predecessor (O(log n)), as in LevelDB.
pub(crate) struct ListCursor<L: NodeList> {
    list: Arc<L>,
    node: Option<NodeRef>,
}

impl<L: NodeList> ListCursor<L> {
    /// An unpositioned cursor over `list`.
    pub(crate) fn new(list: Arc<L>) -> Self {
        ListCursor { list, node: None }
    }
}

impl<L: NodeList> InternalIterator for ListCursor<L> {
    fn valid(&self) -> bool {
        self.node.is_some()
    }

    fn seek_to_first(&mut self) {
        self.node = self.list.nodes().first();
    }

    fn seek_to_last(&mut self) {
        self.node = self.list.nodes().last();
    }

    fn seek(&mut self, target: &[u8]) {
        self.node = self.list.nodes().seek_ge(&Target::from_ikey(target));
    }

    fn seek_for_prev(&mut self, target: &[u8]) {
        self.node = self.list.nodes().seek_le(&Target::from_ikey(target));
    }

    fn next(&mut self) {
        debug_assert!(self.valid());
        if let Some(n) = self.node {
            self.node = self.list.nodes().next_node(n);
        }
    }

    fn prev(&mut self) {
        debug_assert!(self.valid());
        if let Some(n) = self.node {
            let nodes = self.list.nodes();
            self.node = nodes.seek_lt(&Target::from_ikey(nodes.key(n)));
        }
    }

    fn key(&self) -> &[u8] {
        debug_assert!(self.valid());
        match self.node {
            Some(n) => self.list.nodes().key(n),
            None => &[],
        }
    }

    fn value(&self) -> &[u8] {
        debug_assert!(self.valid());
        match self.node {
            Some(n) => self.list.nodes().value(n),
            None => &[],
        }
    }

    fn status(&self) -> Result<()> {
        Ok(())
    }
}
