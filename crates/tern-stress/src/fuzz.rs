//! Decoder harnesses shared by the fuzz targets (`fuzz/`) and the corpus
//! replay test: each feeds arbitrary bytes to one decoder and walks whatever
//! it accepts. On any input they must return (an error is fine) without
//! panicking, looping or allocating without bound; a harness panics itself
//! when a cursor stops making progress, so a hang shows up as a crash.
//!
//! They also check what decoding promises: logs read back the same records
//! when written again, edits and batches survive encode and decode, a
//! verified block or table has its keys in order, iterates the same both
//! ways and finds each key by seek, and a built bloom filter contains every
//! key put into it.
//!
//! The blob harnesses also run each input a second time with its checksum
//! recomputed, so mutations reach the decoding behind the checksum. The RESP
//! parser gets a target in the server crate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern::internals::blob::{BlobReader, ExpectedRecord};
use tern::internals::format::blob::{
    decode_header, decode_index, decode_lineage, decode_record, encode_index, encode_lineage,
    encode_record, BlobFooter, BlobRef, BLOB_FOOTER_LEN, BLOB_HEADER_LEN, BLOB_MAGIC,
    RECORD_HEADER_LEN,
};
use tern::internals::format::block::{Block, BlockIter};
use tern::internals::format::bloom::BloomFilter;
use tern::internals::format::checksum;
use tern::internals::format::internal_key::{self, ValueKind};
use tern::internals::format::log_record::LogKind;
use tern::internals::format::table::{
    check_block, decompress, BlockHandle, Footer, TableProperties, FOOTER_LEN,
};
use tern::internals::format::version_edit::VersionEdit;
use tern::internals::format::write_batch::WriteBatch;
use tern::internals::iter::InternalIterator;
use tern::internals::sst::Table;
use tern::internals::wal::LogReader;
use tern::io::{FileSystem, FsRef, MemFs};

/// A decoder harness: runs one input.
pub type Harness = fn(&[u8]);

/// The fuzz targets: name and harness. The corpus of target `name` lives in
/// `fuzz/corpus/<name>/`.
pub const TARGETS: &[(&str, Harness)] = &[
    ("wal", wal),
    ("manifest", manifest),
    ("write_batch", write_batch),
    ("version_edit", version_edit),
    ("block", block),
    ("footer", footer),
    ("table", table),
    ("bloom", bloom),
    ("blob_record", blob_record),
    ("blob_footer", blob_footer),
    ("blob_index", blob_index),
    ("blob_lineage", blob_lineage),
    ("blob_ref", blob_ref),
    ("blob_file", blob_file),
];

/// The largest block a harness decompresses (bounds its allocation).
const MAX_BLOCK: usize = 4 << 20;

fn walk_batch(b: &WriteBatch) {
    for e in b.iter() {
        match e {
            Ok(e) => {
                std::hint::black_box((e.kind, e.key.len(), e.value.len()));
            }
            Err(_) => break,
        }
    }
}

/// Reads `data` as a log of `kind`, handing each record to `each`, and
/// returns the records read before the first error or the end.
///
/// Invariants: the valid prefix is within the input and the last record
/// returned starts inside it.
fn walk_log(data: &[u8], kind: LogKind, mut each: impl FnMut(&[u8])) -> Vec<Vec<u8>> {
    let Ok(mut r) = LogReader::new(data.to_vec(), PathBuf::from("fuzz.log"), kind) else {
        return Vec::new();
    };
    let mut records = Vec::new();
    while let Ok(Some(rec)) = r.next_record() {
        each(rec);
        records.push(rec.to_vec());
        assert!(records.len() <= data.len(), "log reader does not advance");
    }
    let valid = r.valid_len();
    std::hint::black_box(r.torn_tail());
    assert!(valid <= data.len() as u64, "valid prefix past the input");
    if !records.is_empty() {
        assert!(
            r.last_record_offset() < valid,
            "last record starts past the valid prefix"
        );
    }
    records
}

/// Writes `records` as a fresh log of `kind` and reads it back: the reader
/// must return exactly them (the writer's framing is what the reader
/// accepts, whatever the input looked like).
fn log_round_trip(records: &[Vec<u8>], kind: LogKind) {
    if records.is_empty() {
        return;
    }
    let mem = MemFs::new();
    let path = Path::new("/round.log");
    let bytes = mem
        .create(path)
        .and_then(|f| {
            let mut w = tern::internals::wal::LogWriter::new(f, kind)?;
            for r in records {
                w.add_record(r)?;
            }
            w.flush()
        })
        .and_then(|()| mem.read_all(path))
        .expect("writing a log to memory fails");
    let again = walk_log(&bytes, kind, |_| {});
    assert!(again == records, "records change when written again");
}

/// A WAL file: header, records, and the write batch in each record.
pub fn wal(data: &[u8]) {
    let records = walk_log(data, LogKind::Wal, |rec| {
        if let Ok(b) = WriteBatch::from_bytes(rec) {
            walk_batch(&b);
        }
    });
    log_round_trip(&records, LogKind::Wal);
}

/// A manifest file: header, records, and the version edit in each record.
pub fn manifest(data: &[u8]) {
    let records = walk_log(data, LogKind::Manifest, version_edit);
    log_round_trip(&records, LogKind::Manifest);
}

/// One encoded write batch (a WAL record's payload).
pub fn write_batch(data: &[u8]) {
    let Ok(b) = WriteBatch::from_bytes(data) else {
        return;
    };
    walk_batch(&b);
    std::hint::black_box(b.seq());
    // A batch of user entries built again from what decoded must decode to
    // the same entries, as many as the header counts.
    let entries: Vec<(ValueKind, Vec<u8>, Vec<u8>)> = b
        .iter()
        .map_while(Result::ok)
        .map(|e| (e.kind, e.key.to_vec(), e.value.to_vec()))
        .collect();
    if entries.len() != b.len() || entries.iter().any(|e| e.0 == ValueKind::BlobRef) {
        return;
    }
    let mut again = WriteBatch::new();
    for (kind, k, v) in &entries {
        match kind {
            ValueKind::Delete => again.delete(k),
            _ => again.put(k, v),
        };
    }
    let round: Vec<(ValueKind, Vec<u8>, Vec<u8>)> = WriteBatch::from_bytes(again.as_bytes())
        .map(|b| {
            b.iter()
                .map_while(Result::ok)
                .map(|e| (e.kind, e.key.to_vec(), e.value.to_vec()))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(round, entries, "a batch's entries change through a rebuild");
}

/// One encoded version edit (a manifest record's payload); whatever decodes
/// must encode and decode to the same edit.
pub fn version_edit(data: &[u8]) {
    if let Ok(e) = VersionEdit::decode(data) {
        let bytes = e.encode();
        match VersionEdit::decode(&bytes) {
            Ok(again) => {
                assert_eq!(again, e, "an edit changes through encode and decode");
                assert_eq!(again.encode(), bytes, "encoding is not stable");
            }
            Err(err) => panic!("a decoded edit does not decode after encoding: {err}"),
        }
    }
}

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
    let mem = MemFs::new();
    let path = Path::new("/fuzz/000001.sst");
    let written = mem.create_dir_all(Path::new("/fuzz")).and_then(|()| {
        let mut f = mem.create(path)?;
        f.append(data)?;
        f.sync()
    });
    if written.is_err() {
        return;
    }
    let fs: FsRef = mem;
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

/// One blob record (checksum, lengths, sequence, key, value); with its checksum
/// recomputed, a record whose lengths fit must decode and encode back to the
/// same bytes.
pub fn blob_record(data: &[u8]) {
    let _ = decode_record(data);
    if data.len() < RECORD_HEADER_LEN {
        return;
    }
    let mut fixed = data.to_vec();
    let crc = checksum::crc(&fixed[4..]);
    fixed[..4].copy_from_slice(&crc.to_le_bytes());
    let key_len = u64::from(u32::from_le_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]));
    let value_len = u64::from(u32::from_le_bytes([
        fixed[8], fixed[9], fixed[10], fixed[11],
    ]));
    let fits = RECORD_HEADER_LEN as u64 + key_len + value_len == fixed.len() as u64;
    match decode_record(&fixed) {
        Ok(rec) => {
            assert!(fits, "a record with wrong lengths decodes");
            let mut again = Vec::new();
            encode_record(&mut again, rec.key, rec.seq, rec.value);
            assert_eq!(again, fixed, "a decoded record encodes differently");
        }
        Err(_) => assert!(!fits, "a record with its checksum fixed does not decode"),
    }
}

/// Decodes `buf` as the footer of a file of `file_size` bytes; what decodes
/// must be consistent with that size and encode back to the same bytes.
fn check_footer(buf: &[u8], file_size: u64) {
    if let Ok(f) = BlobFooter::decode(buf, file_size) {
        assert!(f.index_offset >= BLOB_HEADER_LEN as u64);
        assert!(f
            .lineage_offset
            .checked_add(4 + BLOB_FOOTER_LEN as u64)
            .is_some_and(|end| end <= file_size));
        assert_eq!(&f.encode()[..], buf, "a decoded footer encodes differently");
    }
}

/// A blob file footer, read as the end of a file as long as the input, and
/// against a file size taken from the input; then again with magic and
/// checksum fixed.
pub fn blob_footer(data: &[u8]) {
    let _ = decode_header(data);
    if data.len() < BLOB_FOOTER_LEN {
        let _ = BlobFooter::decode(data, data.len() as u64);
        return;
    }
    let tail = &data[data.len() - BLOB_FOOTER_LEN..];
    check_footer(tail, data.len() as u64);
    let mut sizes = vec![data.len() as u64, BLOB_FOOTER_LEN as u64, u64::MAX];
    if data.len() >= BLOB_FOOTER_LEN + 8 {
        let mut n = [0u8; 8];
        n.copy_from_slice(&data[..8]);
        sizes.push(u64::from_le_bytes(n));
    }
    let mut fixed = tail.to_vec();
    fixed[40..].copy_from_slice(&BLOB_MAGIC);
    fixed[32..36].copy_from_slice(&1u32.to_le_bytes());
    let crc = checksum::crc(&fixed[..36]);
    fixed[36..40].copy_from_slice(&crc.to_le_bytes());
    for size in sizes {
        check_footer(tail, size);
        check_footer(&fixed, size);
    }
}

/// A blob ordinal index: the first 8 bytes give the record count, the rest
/// is the index; then the whole input as an index body with its checksum
/// appended. What decodes must be strictly increasing and encode back.
pub fn blob_index(data: &[u8]) {
    if data.len() >= 8 {
        let mut n = [0u8; 8];
        n.copy_from_slice(&data[..8]);
        let _ = decode_index(&data[8..], u64::from_le_bytes(n));
    }
    let count = (data.len() / 8) as u64;
    let mut fixed = data[..count as usize * 8].to_vec();
    let crc = checksum::crc(&fixed);
    fixed.extend_from_slice(&crc.to_le_bytes());
    let _ = decode_index(&fixed, count.wrapping_add(1));
    if let Ok(offsets) = decode_index(&fixed, count) {
        assert!(offsets.windows(2).all(|w| w[0] < w[1]));
        let mut again = Vec::new();
        encode_index(&mut again, &offsets);
        assert_eq!(again, fixed, "a decoded index encodes differently");
    }
}

/// A blob file's lineage block (entries of old file, base ordinal and a
/// roaring set of dead ordinals); then the input as a block body with its
/// checksum appended. What decodes must encode and decode to the same
/// entries.
pub fn blob_lineage(data: &[u8]) {
    let _ = decode_lineage(data);
    let mut fixed = data.to_vec();
    let crc = checksum::crc(&fixed);
    fixed.extend_from_slice(&crc.to_le_bytes());
    if let Ok(entries) = decode_lineage(&fixed) {
        let mut again = Vec::new();
        encode_lineage(&mut again, &entries);
        let back = decode_lineage(&again);
        assert!(
            back.as_ref() == Ok(&entries),
            "lineage does not survive encoding"
        );
        for e in &entries {
            std::hint::black_box((e.dead.len(), e.dead.min(), e.dead.max()));
        }
    }
}

/// A blob reference (four varints, nothing after them).
pub fn blob_ref(data: &[u8]) {
    if let Ok(r) = BlobRef::decode(data) {
        assert_eq!(
            BlobRef::decode(&r.encode()),
            Ok(r),
            "a ref does not round-trip"
        );
    }
}

/// Records a harness reads from one blob file, at most.
const MAX_BLOB_RECORDS: u32 = 4096;

/// A whole blob file on an in-memory file system: opened (header, footer,
/// index), verified, every record read by ordinal and again by offset as a
/// reference would, its lineage read, and record windows read as scans do.
pub fn blob_file(data: &[u8]) {
    let mem = MemFs::new();
    let path = Path::new("/fuzz/000001.blob");
    let written = mem.create_dir_all(Path::new("/fuzz")).and_then(|()| {
        let mut f = mem.create(path)?;
        f.append(data)?;
        f.sync()
    });
    if written.is_err() {
        return;
    }
    let fs: FsRef = mem;
    // Reads through the open-file cache open without the index and read
    // index entries one by one.
    let lazy = BlobReader::open_lazy(&fs, path, 1);
    let Ok(r) = BlobReader::open(&fs, path, 1) else {
        if let Ok(l) = lazy {
            for o in 0..(l.record_count().min(u64::from(MAX_BLOB_RECORDS)) as u32) {
                let _ = l.offset_of(o);
                let _ = l.record_len(o);
                let _ = l.read_ordinal(o);
            }
            assert!(l.verify().is_err(), "verify passes where a full open fails");
        }
        return;
    };
    let Ok(lazy) = lazy else {
        panic!("a blob file opens with its index but not without");
    };
    let verified = r.verify();
    let count = r.record_count();
    assert!(
        count <= data.len() as u64 / 8,
        "more records than the index can hold"
    );
    let _ = r.lineage();
    let _ = r.offset_of(u32::MAX);
    let _ = r.read_ordinal(count.min(u64::from(u32::MAX)) as u32);
    let mut window: Option<(u64, Vec<u8>)> = None;
    for o in 0..(count.min(u64::from(MAX_BLOB_RECORDS)) as u32) {
        let Ok(offset) = r.offset_of(o) else {
            panic!("ordinal {o} of {count} has no offset");
        };
        assert_eq!(lazy.offset_of(o).ok(), Some(offset), "lazy index entry {o}");
        assert_eq!(
            lazy.record_len(o).ok(),
            r.record_len(o).ok(),
            "lazy length {o}"
        );
        let Ok(rec) = r.read_ordinal(o) else {
            assert!(verified.is_err(), "verify passed but record {o} is bad");
            continue;
        };
        let want = ExpectedRecord {
            key: &rec.key,
            seq: rec.seq,
            size: u32::try_from(rec.value.len()).unwrap_or(u32::MAX),
        };
        match r.read_value(offset, want) {
            Ok(got) => assert_eq!(
                got, rec.value,
                "read by offset differs from read by ordinal"
            ),
            Err(e) => panic!("record {o} reads by ordinal but not by offset: {e}"),
        }
        let other_key = ExpectedRecord {
            key: b"another key",
            ..want
        };
        assert!(
            other_key.key == want.key || r.read_value(offset, other_key).is_err(),
            "record {o} read for another key"
        );
        let other_version = ExpectedRecord {
            seq: rec.seq ^ 1,
            ..want
        };
        assert!(
            r.read_value(offset, other_version).is_err(),
            "record {o} read for another version"
        );
        let _ = r.read_value(offset + 1, want);
        if window
            .as_ref()
            .is_none_or(|(start, buf)| offset >= start + buf.len() as u64)
        {
            window = r
                .read_records_raw(offset, 16 << 10)
                .ok()
                .map(|b| (offset, b));
        }
        if let Some((start, buf)) = &window {
            if let Some(got) = r.value_from_buffer(buf, *start, offset, want) {
                assert!(
                    got.as_ref().is_ok_and(|g| *g == rec.value),
                    "read from a window differs from read by ordinal"
                );
            }
        }
    }
}

/// Runs `target` on every file under `dir` (a corpus), returning how many
/// inputs it ran. A missing directory runs none.
pub fn replay_dir(dir: &Path, target: fn(&[u8])) -> std::io::Result<u64> {
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(0);
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    for p in paths {
        let data = std::fs::read(&p)?;
        target(&data);
        n += 1;
    }
    Ok(n)
}
