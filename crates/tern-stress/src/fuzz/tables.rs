//! Harnesses for tables: blocks, footers, whole tables and bloom filters.

use std::path::Path;
use std::sync::Arc;

use tern::internals::format::block::{Block, BlockIter};
use tern::internals::format::bloom::BloomFilter;
use tern::internals::format::internal_key::{self};
use tern::internals::format::table::{
    check_block, decompress, BlockHandle, Footer, TableProperties, FOOTER_LEN,
};
use tern::internals::iter::InternalIterator;
use tern::internals::sst::Table;

/// The largest block a harness decompresses (bounds its allocation).
pub(super) const MAX_BLOCK: usize = 4 << 20;

/// Walks a block's entries every way; for a block whose checksum verified
/// (`trusted`), also checks that keys strictly increase, that backward
/// iteration sees the same entries, that a seek finds each key, and that
/// the entries built into a new block read back the same.
fn walk_block(contents: Vec<u8>, trusted: bool) {
    let Ok(block) = Block::new(contents) else {
        return;
    };
    let limit = block.size() + 2;
    let block = Arc::new(block);
    let mut it = BlockIter::new(block.clone(), internal_key::compare);
    it.seek_to_first();
    let mut n = 0;
    let mut probe = Vec::new();
    let mut forward = Vec::new();
    while it.valid() {
        if n == 1 {
            probe = it.key().to_vec();
        }
        forward.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
        n += 1;
        assert!(n <= limit, "block iterator does not advance (forward)");
    }
    let forward_ok = it.status().is_ok();
    let mut it = BlockIter::new(block.clone(), internal_key::compare);
    it.seek_to_last();
    let mut n = 0;
    let mut backward = Vec::new();
    while it.valid() {
        backward.push((it.key().to_vec(), it.value().to_vec()));
        it.prev();
        n += 1;
        assert!(n <= limit, "block iterator does not advance (backward)");
    }
    if trusted && forward_ok && it.status().is_ok() {
        check_block_entries(&forward, &backward, &block);
    }
    for target in [&probe[..], b"", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff"] {
        let mut it = BlockIter::new(block.clone(), internal_key::compare);
        it.seek(target);
        if it.valid() {
            it.next();
        }
        let mut it = BlockIter::new(block.clone(), internal_key::compare);
        it.seek_for_prev(target);
        if it.valid() {
            it.prev();
        }
    }
    let _ = it.status();
}

/// A raw block with its trailer (checksum, compression type): verified,
/// decompressed and iterated; the bytes are also iterated as block contents
/// directly, since the checksum stops most mutations early.
pub fn block(data: &[u8]) {
    if let Ok((contents, ctype)) = check_block(data) {
        if let Ok(raw) = decompress(ctype, contents, MAX_BLOCK) {
            walk_block(raw, true);
        }
    }
    walk_block(data.to_vec(), false);
}

/// Keys in strictly increasing internal-key order.
fn assert_ordered<'a>(keys: impl Iterator<Item = &'a [u8]>, what: &str) {
    let mut prev: Option<&[u8]> = None;
    for k in keys {
        if let Some(p) = prev {
            assert!(
                internal_key::compare(p, k).is_lt(),
                "{what} keys out of order"
            );
        }
        prev = Some(k);
    }
}

/// Invariants of a verified block's entries (see [`walk_block`]).
fn check_block_entries(
    forward: &[(Vec<u8>, Vec<u8>)],
    backward: &[(Vec<u8>, Vec<u8>)],
    block: &Arc<Block>,
) {
    assert_ordered(forward.iter().map(|(k, _)| &k[..]), "block");
    let mut back = backward.to_vec();
    back.reverse();
    assert!(back == forward, "block: backward iteration differs");
    for (k, v) in forward {
        let mut it = BlockIter::new(block.clone(), internal_key::compare);
        it.seek(k);
        assert!(
            it.valid() && it.key() == &k[..] && it.value() == &v[..],
            "block: seek misses a key"
        );
    }
    let mut builder = tern::internals::format::block::BlockBuilder::new(3);
    for (k, v) in forward {
        builder.add(k, v);
    }
    let rebuilt = Arc::new(Block::new(builder.finish().to_vec()).expect("a built block decodes"));
    let mut it = BlockIter::new(rebuilt, internal_key::compare);
    it.seek_to_first();
    for (k, v) in forward {
        assert!(
            it.valid() && it.key() == &k[..] && it.value() == &v[..],
            "block: entries change through a rebuild"
        );
        it.next();
    }
    assert!(!it.valid(), "block: a rebuilt block has extra entries");
}

/// A table footer, block handles and the properties block.
pub fn footer(data: &[u8]) {
    // A footer is fixed-size with a checksum: what decodes encodes back to
    // the same bytes.
    if data.len() >= FOOTER_LEN {
        let tail = &data[data.len() - FOOTER_LEN..];
        if let Ok(f) = Footer::decode(tail) {
            assert_eq!(&f.encode()[..], tail, "a footer encodes differently");
        }
    }
    let _ = Footer::decode(data);
    if let Ok(h) = BlockHandle::decode(data) {
        let mut again = Vec::new();
        h.encode_to(&mut again);
        assert_eq!(
            BlockHandle::decode(&again).ok(),
            Some(h),
            "a handle changes"
        );
    }
    if let Ok(p) = TableProperties::decode(data) {
        let again = TableProperties::decode(&p.encode());
        assert_eq!(
            again.ok(),
            Some(p),
            "table properties change through encode and decode"
        );
    }
}

/// A whole table file: opened (footer, index, filter, properties), verified,
/// iterated and probed.
pub fn table(data: &[u8]) {
    let path = Path::new("/fuzz/000001.sst");
    let Some(fs) = super::file_in_memory(path, data) else {
        return;
    };
    let Ok(t) = Table::open(&fs, path, 1, None) else {
        return;
    };
    let verified = t.verify().is_ok();
    let mut it = t.iter();
    it.seek_to_first();
    let mut n = 0;
    let mut probe = Vec::new();
    let mut keys = Vec::new();
    while it.valid() {
        if n == 0 {
            probe = it.key().to_vec();
        }
        keys.push(it.key().to_vec());
        it.next();
        n += 1;
        assert!(n <= data.len(), "table iterator does not advance");
    }
    let forward_ok = it.status().is_ok();
    it.seek_to_last();
    let mut n = 0;
    let mut back = Vec::new();
    while it.valid() {
        back.push(it.key().to_vec());
        it.prev();
        n += 1;
        assert!(n <= data.len(), "table iterator does not advance backwards");
    }
    // A table whose every block verified: keys in order, the same both
    // ways, and each one found by a point lookup and its filter.
    if verified && forward_ok && it.status().is_ok() {
        assert_ordered(keys.iter().map(|k| &k[..]), "table");
        back.reverse();
        assert!(back == keys, "table iteration differs backwards");
        for k in keys.iter().take(64) {
            let user = internal_key::user_key(k);
            assert!(
                t.may_contain(user),
                "the filter misses a key the table holds"
            );
        }
    }
    if !probe.is_empty() {
        let _ = t.get(&probe);
        let _ = t.may_contain(internal_key::user_key(&probe));
    }
    let _ = t.get(&internal_key::seek_key(b"k", internal_key::MAX_SEQ));
}

/// A bloom filter block, probed with a few keys; and a filter built from
/// keys cut out of the input, which must contain every one of them (a
/// bloom filter has no false negatives).
pub fn bloom(data: &[u8]) {
    if let Ok(f) = BloomFilter::new(data) {
        for k in [&b""[..], b"a", b"k00000001", data] {
            std::hint::black_box(f.may_contain(k));
        }
    }
    let Some((&bits, rest)) = data.split_first() else {
        return;
    };
    let keys: Vec<&[u8]> = rest.split(|&b| b == b'\n').collect();
    let mut b = tern::internals::format::bloom::BloomBuilder::new(u32::from(bits % 24) + 1);
    for k in &keys {
        b.add_key(k);
    }
    let built = b.finish();
    let f = BloomFilter::new(&built).expect("a built filter decodes");
    for k in &keys {
        assert!(f.may_contain(k), "a built filter misses one of its keys");
    }
}
