//! Zero-copy merges: a newer tier table's nodes are linked into an older
//! table's list, and versions no reader can need any more are unlinked.
//! No key or value byte moves; only link words change.
//!
//! Readers run during a merge, on both tables:
//! - The older table's readers see a list that only ever gains nodes in
//!   key order (each node is linked bottom-up, its own links set before
//!   it is published), or loses a node by one link skipping it; the
//!   unlinked node keeps its links, so a reader standing on it walks on.
//! - The newer table's readers must still find every node of it. The
//!   merge links its nodes **last first**: when a node moves, every newer-
//!   table node after it has already moved into the older list, so the
//!   walk from it still reaches them all. Such a reader may also meet the
//!   older table's nodes, all in key order; those are older versions than
//!   any of the newer table's (the tier keeps tables in sequence order),
//!   so a lookup still finds the newest version first, and an iterator
//!   over both tables sees a few entries twice, which a merging iterator
//!   passes over like any duplicate version.
//!
//! A version is unlinked only when a newer version of its key, at or below
//! `horizon`, hides it from every snapshot ([`Retention`]). `horizon` is a
//! sequence number at or below every sequence a reader without a snapshot
//! may read the tables at (`db/memtier.rs` keeps it), so no running read
//! can miss a version it needs.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::table::TierTable;
use crate::compaction::Retention;
use crate::format::internal_key::{self, SeqNo};
use crate::memtable::skiplist::{Nodes, Target};
use crate::memtable::NodeList;
use crate::memtier::memory::TierMemory;

/// What a merge did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MergeReport {
    /// Nodes linked into the older table.
    pub(crate) linked: usize,
    /// Versions unlinked as hidden from every reader.
    pub(crate) unlinked: usize,
}

/// Links `newer`'s nodes into `older`'s list (see the module comment) and
/// returns the merged table with what was done. Only one merge or copy-out
/// may run on a table at a time; reads may run throughout.
pub(crate) fn merge_into(
    older: &TierTable,
    newer: &TierTable,
    retention: &Retention,
    horizon: SeqNo,
) -> (TierTable, MergeReport) {
    debug_assert!(
        older.seqs().1 < newer.seqs().0,
        "the newer table holds newer writes"
    );
    let src = newer.nodes();
    let mut moving = Vec::with_capacity(newer.entries());
    let mut x = src.next(src.head(), 0);
    while x != 0 {
        moving.push(x);
        x = src.next(x, 0);
    }
    let mem: &TierMemory = older.memory();
    let mut top = older.nodes_top().max(newer.nodes_top());
    let mut report = MergeReport::default();
    let mut extents = older.extents();
    extents.extend(newer.extents());
    extents.sort_by_key(|e| e.start());
    let count_unlinked = |node: u32| {
        let at = node as usize;
        let i = extents.partition_point(|e| e.start() <= at);
        if let Some(e) = i
            .checked_sub(1)
            .map(|i| &extents[i])
            .filter(|e| e.contains(at))
        {
            e.unlinked_one();
        }
    };
    for &node in moving.iter().rev() {
        let dst = Nodes::new(mem, older.head(), top);
        let height = dst.height(node);
        top = top.max(height);
        let key = dst.key_at(node);
        let splice = dst.splice(&Target::from_ikey(key), height);
        for level in 0..height {
            // Its own link first, then the predecessor's: a reader reaching
            // it already finds its successor.
            dst.link(node, level)
                .store(splice.next[level], Ordering::Release);
            dst.link(splice.prev[level], level)
                .store(node, Ordering::Release);
        }
        report.linked += 1;
        report.unlinked += unlink_hidden(&dst, node, retention, horizon, &count_unlinked);
    }
    (older.absorbing(newer, top), report)
}

/// Merges `tables` (oldest first, at least two) into the oldest one,
/// one [`merge_into`] per newer table. `None` for fewer than two.
pub(crate) fn merge_all(
    tables: &[Arc<TierTable>],
    retention: &Retention,
    horizon: SeqNo,
) -> Option<(TierTable, MergeReport)> {
    let (oldest, newer) = tables.split_first()?;
    let mut merged: Option<TierTable> = None;
    let mut total = MergeReport::default();
    for t in newer {
        let (m, report) = merge_into(merged.as_ref().unwrap_or(oldest), t, retention, horizon);
        total.linked += report.linked;
        total.unlinked += report.unlinked;
        merged = Some(m);
    }
    merged.map(|m| (m, total))
}

/// Unlinks the versions after `newest` (the newest version of its key in
/// the list) that a newer version at or below `horizon` hides from every
/// snapshot, telling `on_unlink` each one. Returns how many it unlinked.
fn unlink_hidden(
    nodes: &Nodes<'_, TierMemory>,
    newest: u32,
    retention: &Retention,
    horizon: SeqNo,
    on_unlink: &impl Fn(u32),
) -> usize {
    let user_key = internal_key::user_key(nodes.key_at(newest));
    let seq_of = |n: u32| internal_key::trailer(nodes.key_at(n)) >> 8;
    let mut kept = newest;
    let mut unlinked = 0;
    loop {
        let v = nodes.next(kept, 0);
        if v == 0 || internal_key::user_key(nodes.key_at(v)) != user_key {
            return unlinked;
        }
        let kept_seq = seq_of(kept);
        if kept_seq <= horizon && retention.stripe(seq_of(v)) == retention.stripe(kept_seq) {
            unlink(nodes, v);
            on_unlink(v);
            unlinked += 1;
        } else {
            kept = v;
        }
    }
}

/// Takes `node` out of the list at every level, top down; its own links
/// stay, so a reader standing on it walks on.
fn unlink(nodes: &Nodes<'_, TierMemory>, node: u32) {
    let height = nodes.height(node);
    let splice = nodes.splice(&Target::from_ikey(nodes.key_at(node)), height);
    for level in (0..height).rev() {
        debug_assert_eq!(splice.next[level], node, "a linked node is found");
        if splice.next[level] == node {
            let after = nodes.next(node, level);
            nodes
                .link(splice.prev[level], level)
                .store(after, Ordering::Release);
        }
    }
}
