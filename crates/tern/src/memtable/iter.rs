//! [`MemTableIter`]: the list merged with a snapshot of the backlog's runs,
//! each listed node preceded by the versions chained to it.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use super::backlog::Run;
use super::skiplist::{NodeRef, Target};
use super::MemTable;
use crate::error::Result;
use crate::format::internal_key;
use crate::iter::InternalIterator;

/// An iterator over a [`MemTable`]'s entries, holding the table alive.
///
/// `key()` is the internal key (`user_key ‖ trailer`), `value()` the value.
/// It walks the list and, when the table had nodes waiting to be linked,
/// the sorted runs it took of them (`backlog.rs`), yielding the smallest
/// (or, backwards, largest) entry of all. A node both linked and in a run
/// is yielded once. Moving backwards in the list searches for the
/// predecessor (O(log n)), as in LevelDB.
///
/// Each node found that way is a listed node: the versions chained to it
/// (all newer, so all before it in internal-key order) are yielded first,
/// newest first, then the node itself (`MemTable`'s version chains).
pub struct MemTableIter {
    mem: Arc<MemTable>,
    /// The list's position.
    node: Option<NodeRef>,
    /// Each run and its position in it.
    runs: Vec<(Arc<Run>, Option<usize>)>,
    /// The entry the iterator is at: the node offset of the smallest (or
    /// largest) source.
    cur: Option<u32>,
    /// Whether every source is positioned at or after `cur` (forward) or at
    /// or before it (backward).
    forward: bool,
    /// The versions chained to `cur`, newest first, as far as read: going
    /// forward each is read as the iterator reaches it (a flush that skips
    /// a key's older versions never reads them); going backward, or
    /// seeking for the previous entry, all at once. Usually none.
    chain: Vec<u32>,
    /// Whether `chain` holds every version chained to `cur`.
    chain_read: bool,
    /// The entry the iterator is at: `chain[at]`, or `cur` itself when
    /// `at == chain.len()`.
    at: usize,
}

impl fmt::Debug for MemTableIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemTableIter")
            .field("valid", &self.valid())
            .field("runs", &self.runs.len())
            .finish()
    }
}

impl MemTableIter {
    /// An unpositioned iterator over `mem`'s list and `runs` (sorted).
    pub(crate) fn new(mem: Arc<MemTable>, runs: Vec<Arc<Run>>) -> Self {
        debug_assert!(runs.iter().all(|r| r.sorted));
        MemTableIter {
            mem,
            node: None,
            runs: runs.into_iter().map(|r| (r, None)).collect(),
            cur: None,
            forward: true,
            chain: Vec::new(),
            chain_read: true,
            at: 0,
        }
    }

    /// Stands at the newest version of `cur` (`first`) or at `cur` itself.
    fn expand(&mut self, first: bool) {
        self.chain.clear();
        self.chain_read = self.cur.is_none();
        if first {
            self.read_one_more();
            self.at = 0;
        } else {
            self.read_chain();
            self.at = self.chain.len();
        }
    }

    /// Reads the rest of `cur`'s chain.
    fn read_chain(&mut self) {
        while self.read_one_more() {}
    }

    /// Reads the next version of `cur`'s chain (the newest, while none is
    /// read); `false` if there is none.
    fn read_one_more(&mut self) -> bool {
        let from = self.chain.last().copied().or(self.cur);
        let older = match from {
            Some(n) if !self.chain_read => super::newer_versions(&self.mem.list.nodes(), n),
            _ => 0,
        };
        if older == 0 {
            self.chain_read = true;
            return false;
        }
        self.chain.push(older);
        true
    }

    /// Moves on from a chained version: to the next one, or to `cur`.
    fn next_in_chain(&mut self) {
        debug_assert!(self.at < self.chain.len());
        if self.at + 1 == self.chain.len() {
            self.read_one_more();
        }
        self.at += 1;
    }

    /// The entry at `i` of those `cur` stands for (`i == chain.len()`:
    /// `cur` itself, once the chain is read to its end).
    fn version(&self, i: usize) -> Option<u32> {
        match self.chain.get(i) {
            Some(&v) => Some(v),
            None if i == self.chain.len() => {
                debug_assert!(self.chain_read);
                self.cur
            }
            None => None,
        }
    }

    /// The entry the iterator is at.
    fn entry(&self) -> Option<u32> {
        self.version(self.at)
    }

    /// How many backlog runs it merges with the list.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    fn list_node(&self) -> Option<u32> {
        self.node.map(NodeRef::offset)
    }

    fn run_node(run: &Run, pos: Option<usize>) -> Option<u32> {
        pos.and_then(|p| run.nodes.get(p).copied())
    }

    /// Sets `cur` to the smallest (`forward`) or largest source.
    fn pick(&mut self) {
        let mut best = self.list_node();
        if self.runs.is_empty() {
            self.cur = best;
            return;
        }
        let nodes = self.mem.list.nodes();
        let want = if self.forward {
            Ordering::Less
        } else {
            Ordering::Greater
        };
        for (run, pos) in &self.runs {
            if let Some(n) = Self::run_node(run, *pos) {
                best = match best {
                    Some(b) if internal_key::compare(nodes.key_at(n), nodes.key_at(b)) != want => {
                        Some(b)
                    }
                    _ => Some(n),
                };
            }
        }
        self.cur = best;
    }

    /// Positions every source at its first entry `> key` (`after`) or
    /// `>= key`, going forward.
    fn position_forward(&mut self, key: &[u8], after: bool) {
        let nodes = self.mem.list.nodes();
        let target = Target::from_ikey(key);
        self.node = nodes.seek_ge(&target);
        if after {
            if let Some(n) = self.node.filter(|n| nodes.key(*n) == key) {
                self.node = nodes.next_node(n);
            }
        }
        for (run, pos) in &mut self.runs {
            let p = if after {
                run.upper_bound(&nodes, key)
            } else {
                run.lower_bound(&nodes, key)
            };
            *pos = (p < run.nodes.len()).then_some(p);
        }
        self.forward = true;
        self.pick();
    }

    /// Positions every source at its last entry `< key` (`before`) or
    /// `<= key`, going backward.
    fn position_backward(&mut self, key: &[u8], before: bool) {
        let nodes = self.mem.list.nodes();
        let target = Target::from_ikey(key);
        self.node = if before {
            nodes.seek_lt(&target)
        } else {
            nodes.seek_le(&target)
        };
        for (run, pos) in &mut self.runs {
            let end = if before {
                run.lower_bound(&nodes, key)
            } else {
                run.upper_bound(&nodes, key)
            };
            *pos = end.checked_sub(1);
        }
        self.forward = false;
        self.pick();
    }
}

impl InternalIterator for MemTableIter {
    fn valid(&self) -> bool {
        self.cur.is_some()
    }

    fn seek_to_first(&mut self) {
        self.node = self.mem.list.nodes().first();
        for (run, pos) in &mut self.runs {
            *pos = (!run.nodes.is_empty()).then_some(0);
        }
        self.forward = true;
        self.pick();
        self.expand(true);
    }

    fn seek_to_last(&mut self) {
        self.node = self.mem.list.nodes().last();
        for (run, pos) in &mut self.runs {
            *pos = run.nodes.len().checked_sub(1);
        }
        self.forward = false;
        self.pick();
        self.expand(false);
    }

    fn seek(&mut self, target: &[u8]) {
        // The first listed node at or after `target` is at or after it with
        // all its versions too, but the newest of them may sort before it.
        self.position_forward(target, false);
        self.expand(true);
        let mem = self.mem.clone();
        let nodes = mem.list.nodes();
        while self.at < self.chain.len()
            && internal_key::compare(nodes.key_at(self.chain[self.at]), target) == Ordering::Less
        {
            self.next_in_chain();
        }
    }

    fn seek_for_prev(&mut self, target: &[u8]) {
        // The last entry at or before `target` may be a version chained to
        // the first listed node after it; if none is, it is the last listed
        // node at or before it (whose versions all sort before it).
        self.position_forward(target, false);
        self.expand(true);
        self.read_chain();
        let mem = self.mem.clone();
        let nodes = mem.list.nodes();
        let at_or_before =
            |v: u32| internal_key::compare(nodes.key_at(v), target) != Ordering::Greater;
        let before = (0..=self.chain.len())
            .take_while(|&i| self.version(i).is_some_and(at_or_before))
            .count();
        if before > 0 {
            self.at = before - 1;
            return;
        }
        self.position_backward(target, false);
        self.expand(false);
    }

    fn next(&mut self) {
        debug_assert!(self.valid());
        if self.at < self.chain.len() {
            self.next_in_chain();
            return;
        }
        self.next_listed();
        self.expand(true);
    }

    fn prev(&mut self) {
        debug_assert!(self.valid());
        if self.at > 0 {
            self.at -= 1;
            return;
        }
        self.prev_listed();
        self.expand(false);
    }

    fn key(&self) -> &[u8] {
        debug_assert!(self.valid());
        match self.entry() {
            Some(n) => self.mem.list.nodes().key_at(n),
            None => &[],
        }
    }

    fn value(&self) -> &[u8] {
        debug_assert!(self.valid());
        match self.entry() {
            Some(n) => self.mem.list.nodes().value_at(n),
            None => &[],
        }
    }

    fn status(&self) -> Result<()> {
        Ok(())
    }

    fn next_user_key(&mut self) {
        debug_assert!(self.valid());
        let Some(cur) = self.cur else { return };
        // `cur`'s older versions listed after it are passed one by one;
        // chained ones are never read. (Offsets stay valid: `mem` keeps
        // the arena.)
        loop {
            self.next_listed();
            self.expand(true);
            let nodes = self.mem.list.nodes();
            let same = |n: u32| {
                internal_key::user_key(nodes.key_at(n)) == internal_key::user_key(nodes.key_at(cur))
            };
            if !self.cur.is_some_and(same) {
                return;
            }
        }
    }
}

impl MemTableIter {
    /// Moves the sources on to the listed node after `cur`.
    fn next_listed(&mut self) {
        let Some(cur) = self.cur else { return };
        if self.runs.is_empty() {
            // The list alone, as a plain cursor.
            self.node = self.node.and_then(|n| self.mem.list.nodes().next_node(n));
            self.cur = self.list_node();
            return;
        }
        if !self.forward {
            // The key lives in the arena, which `mem` keeps alive.
            let mem = self.mem.clone();
            self.position_forward(mem.list.nodes().key_at(cur), true);
            return;
        }
        // Every source at `cur` moves on: the same node may be both linked
        // and in a run.
        if self.list_node() == Some(cur) {
            self.node = self.node.and_then(|n| self.mem.list.nodes().next_node(n));
        }
        for (run, pos) in &mut self.runs {
            if Self::run_node(run, *pos) == Some(cur) {
                *pos = pos.map(|p| p + 1).filter(|&p| p < run.nodes.len());
            }
        }
        self.pick();
    }

    /// Moves the sources back to the listed node before `cur`.
    fn prev_listed(&mut self) {
        let Some(cur) = self.cur else { return };
        if self.runs.is_empty() {
            let nodes = self.mem.list.nodes();
            self.node = nodes.seek_lt(&Target::from_ikey(nodes.key_at(cur)));
            self.cur = self.list_node();
            return;
        }
        let mem = self.mem.clone();
        let key = mem.list.nodes().key_at(cur);
        if self.forward {
            self.position_backward(key, true);
            return;
        }
        if self.list_node() == Some(cur) {
            self.node = mem.list.nodes().seek_lt(&Target::from_ikey(key));
        }
        for (run, pos) in &mut self.runs {
            if Self::run_node(run, *pos) == Some(cur) {
                *pos = pos.and_then(|p| p.checked_sub(1));
            }
        }
        self.pick();
    }
}
