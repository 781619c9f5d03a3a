//! Entry points for the fuzz harness and its seed corpus
//! (`tern_stress::fuzz::memtier`), reachable through `tern::internals`.

use std::sync::Arc;

use super::{memory, scan, table};
use crate::format::internal_key::SeqNo;

/// Restores a durable tier table from `bytes` as if the manifest named
/// them with their own checksum (so any content that parses gets past
/// it), then walks the table both ways and looks every key up. For the
/// fuzz harness: on any input it must return without panicking.
#[doc(hidden)]
pub fn exercise_restore(bytes: &[u8]) {
    use crate::format::version_edit::TierTableMeta;
    use crate::iter::InternalIterator;
    const MAX_INPUT: usize = 1 << 20;
    if bytes.len() > MAX_INPUT {
        return;
    }
    let Ok(s) = scan::scan(bytes, |_| {}) else {
        return;
    };
    let align = memory::EXTENT_ALIGN;
    let Ok(mem) = memory::TierMemory::anonymous((bytes.len() + 2 * align) as u64) else {
        return;
    };
    let Some(mut extent) = mem.allocate(bytes.len()) else {
        return;
    };
    extent.fill(bytes);
    let meta = TierTableMeta {
        id: 1,
        offset: extent.start() as u64,
        len: bytes.len() as u64,
        entries: s.entries,
        smallest_seq: s.seqs.0.min(s.seqs.1),
        largest_seq: s.seqs.1,
        checksum: s.checksum,
    };
    // Restore reserves the extent itself: give this one back first.
    extent.free_keeping_bytes();
    let Ok(table) = table::TierTable::restore(&mem, &meta, 10) else {
        return;
    };
    let table = Arc::new(table);
    let mut it = table.iter();
    let mut forward = Vec::new();
    it.seek_to_first();
    while it.valid() {
        forward.push(it.key().to_vec());
        it.next();
    }
    assert_eq!(
        forward.len() as u64,
        s.entries,
        "a restored table lost a node"
    );
    let mut backward = 0;
    it.seek_to_last();
    while it.valid() {
        backward += 1;
        it.prev();
    }

    assert_eq!(backward, forward.len(), "walks differ by direction");
    for ikey in &forward {
        let user = crate::format::internal_key::user_key(ikey);
        assert!(
            table
                .get(user, crate::format::internal_key::MAX_SEQ)
                .is_some(),
            "a restored key is not found"
        );
    }
}

/// The bytes a memtable holding `entries` (user key, sequence, kind,
/// value) is copied into the tier as: a seed for the fuzz harness.
#[doc(hidden)]
pub fn arena_image(entries: &[(Vec<u8>, SeqNo, crate::ValueKind, Vec<u8>)]) -> Vec<u8> {
    let m = crate::memtable::MemTable::new(1 << 20).without_version_chains();
    for (key, seq, kind, value) in entries {
        // A full arena just ends the image early.
        let _ = m.add(*seq, *kind, key, value);
    }
    match m.list() {
        // SAFETY: `m` is local and no insert runs any more.
        Some(list) => unsafe { list.raw_bytes(list.used()) }.to_vec(),
        None => Vec::new(),
    }
}
