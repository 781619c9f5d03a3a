//! Nodes written into a memtable but not linked into its list yet, kept as
//! runs a reader can search without linking them.
//!
//! A deferred group (`MemTable::add_all_deferred`) lands here as one run,
//! in no order. The linker thread sorts new runs and merges runs of
//! similar size, so the backlog stays a handful of sorted runs however
//! many groups it holds, and it links the whole backlog into the list in
//! one sorted pass once that pass is worth it. A reader that needs the
//! list's order meanwhile (an iterator, a read at an older snapshot) takes
//! a snapshot of the runs and merges them with the list as it goes,
//! instead of linking what may be tens of thousands of nodes first.
//!
//! Runs are only removed after their nodes are linked, so every node
//! deferred before a snapshot is in the snapshot or in the list, and may
//! be in both: readers skip the second sighting of a node (equal offsets).

use std::cmp::Ordering;
use std::sync::Arc;

use super::arena::Arena;
use super::skiplist::Nodes;
use crate::format::block::common_prefix_len;
use crate::format::coding::prefix_u64;
use crate::format::internal_key::{self, SeqNo, ValueKind, MAX_SEQ};

/// Node offsets of deferred entries; sorted by internal key if `sorted`.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) nodes: Box<[u32]>,
    pub(crate) sorted: bool,
}

impl Run {
    /// A run as a group wrote it, in no order.
    pub(crate) fn unsorted(nodes: Vec<u32>) -> Arc<Run> {
        Arc::new(Run {
            nodes: nodes.into_boxed_slice(),
            sorted: false,
        })
    }

    /// This run sorted (itself if it already is).
    pub(crate) fn sorted(self: &Arc<Run>, list: &Nodes<'_, Arena>) -> Arc<Run> {
        if self.sorted {
            return self.clone();
        }
        let mut nodes = self.nodes.to_vec();
        sort_nodes(&mut nodes, list);
        Arc::new(Run {
            nodes: nodes.into_boxed_slice(),
            sorted: true,
        })
    }

    /// The first position whose key is `>= target` (a sorted run).
    pub(crate) fn lower_bound(&self, list: &Nodes<'_, Arena>, target: &[u8]) -> usize {
        debug_assert!(self.sorted);
        self.nodes
            .partition_point(|&n| internal_key::compare(list.key_at(n), target) == Ordering::Less)
    }

    /// The first position whose key is `> target` (a sorted run).
    pub(crate) fn upper_bound(&self, list: &Nodes<'_, Arena>, target: &[u8]) -> usize {
        debug_assert!(self.sorted);
        self.nodes.partition_point(|&n| {
            internal_key::compare(list.key_at(n), target) != Ordering::Greater
        })
    }

    /// The newest entry of `user_key` at or below `seq` in this run, as
    /// `(seq, kind, node)`: a binary search if sorted, else a scan.
    pub(crate) fn newest(
        &self,
        list: &Nodes<'_, Arena>,
        user_key: &[u8],
        seq: SeqNo,
    ) -> Option<(SeqNo, ValueKind, u32)> {
        let seq = seq.min(MAX_SEQ);
        let version = |node: u32| {
            let ikey = list.key_at(node);
            let trailer = internal_key::trailer(ikey);
            (internal_key::user_key(ikey) == user_key && trailer >> 8 <= seq).then_some((
                trailer >> 8,
                trailer as u8,
                node,
            ))
        };
        let (s, kind, node) = if self.sorted {
            let target = internal_key::seek_key(user_key, seq);
            version(*self.nodes.get(self.lower_bound(list, &target))?)?
        } else {
            self.nodes
                .iter()
                .filter_map(|&n| version(n))
                .max_by_key(|v| v.0)?
        };
        Some((s, ValueKind::from_u8(kind)?, node))
    }
}

/// Sorts node offsets by their internal keys. Stable, so runs laid end to
/// end are merged rather than sorted again.
///
/// Comparing whole keys reads two nodes scattered over the arena per
/// comparison: the linker's sort of a large backlog was a fifth of a
/// pipelined `SET` load's server profile. Each node's user key is read once
/// instead, for the 8 bytes after the prefix every key in `nodes` shares,
/// and the sort compares those numbers, reading keys only to break ties.
/// The numbers order like the keys, so the order is the same.
pub(crate) fn sort_nodes(nodes: &mut [u32], list: &Nodes<'_, Arena>) {
    let Some(&first) = nodes.first() else {
        return;
    };
    let user_key = |n: u32| internal_key::user_key(list.key_at(n));
    let first = user_key(first);
    let shared = nodes.iter().fold(first.len(), |shared, &n| {
        let k = user_key(n);
        shared.min(common_prefix_len(k, first))
    });
    let mut keyed: Vec<(u64, u32)> = nodes
        .iter()
        .map(|&n| (prefix_u64(&user_key(n)[shared..]), n))
        .collect();
    // Stable, so the runs a backlog is made of are found and merged.
    keyed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| internal_key::compare(list.key_at(a.1), list.key_at(b.1)))
    });
    for (slot, (_, n)) in nodes.iter_mut().zip(keyed) {
        *slot = n;
    }
}

/// `runs` for a reader: the sorted ones as they are, and every unsorted
/// one (groups the linker has not sorted yet) joined and sorted once.
pub(crate) fn for_reader(runs: &[Arc<Run>], list: &Nodes<'_, Arena>) -> Vec<Arc<Run>> {
    let mut out: Vec<Arc<Run>> = runs.iter().filter(|r| r.sorted).cloned().collect();
    let mut loose: Vec<u32> = runs
        .iter()
        .filter(|r| !r.sorted)
        .flat_map(|r| r.nodes.iter().copied())
        .collect();
    if !loose.is_empty() {
        sort_nodes(&mut loose, list);
        out.push(Arc::new(Run {
            nodes: loose.into_boxed_slice(),
            sorted: true,
        }));
    }
    out
}

/// `runs` with every run sorted and, if `merge`, runs of similar size
/// merged: a run is merged into the one before it while that one is at
/// most twice its size, so sizes fall geometrically and a backlog of `n`
/// nodes is at most about `log2(n)` runs (each node is merged `O(log n)`
/// times).
pub(crate) fn compact_runs(
    runs: &[Arc<Run>],
    list: &Nodes<'_, Arena>,
    merge: bool,
) -> Vec<Arc<Run>> {
    let mut out: Vec<Arc<Run>> = Vec::with_capacity(runs.len());
    for run in runs {
        let mut run = run.sorted(list);
        while merge
            && out
                .last()
                .is_some_and(|prev| prev.nodes.len() <= 2 * run.nodes.len())
        {
            let Some(prev) = out.pop() else { break };
            let mut nodes = Vec::with_capacity(prev.nodes.len() + run.nodes.len());
            nodes.extend_from_slice(&prev.nodes);
            nodes.extend_from_slice(&run.nodes);
            sort_nodes(&mut nodes, list);
            run = Arc::new(Run {
                nodes: nodes.into_boxed_slice(),
                sorted: true,
            });
        }
        out.push(run);
    }
    out
}
