//! Decoder harnesses shared by the fuzz targets (`fuzz/`) and the corpus
//! replay test: each feeds arbitrary bytes to one decoder and walks whatever
//! it accepts. On any input they must return (an error is fine) without
//! panicking, looping or allocating without bound; a harness panics itself
//! when a cursor stops making progress, so a hang shows up as a crash.
//!
//! Blob records and the blob file footer get targets once `format::blob`
//! exists; the RESP parser gets one in the server crate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern::format::block::{Block, BlockIter};
use tern::format::bloom::BloomFilter;
use tern::format::internal_key;
use tern::format::log_record::LogKind;
use tern::format::table::{
    check_block, decompress, BlockHandle, Footer, TableProperties, FOOTER_LEN,
};
use tern::format::version_edit::VersionEdit;
use tern::format::write_batch::WriteBatch;
use tern::io::{FileSystem, FsRef, MemFs};
use tern::iter::InternalIterator;
use tern::sst::Table;
use tern::wal::LogReader;

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

/// Reads `data` as a log of `kind`, handing each record to `each`.
fn walk_log(data: &[u8], kind: LogKind, mut each: impl FnMut(&[u8])) {
    let Ok(mut r) = LogReader::new(data.to_vec(), PathBuf::from("fuzz.log"), kind) else {
        return;
    };
    let mut n = 0usize;
    while let Ok(Some(rec)) = r.next_record() {
        each(rec);
        n += 1;
        assert!(n <= data.len(), "log reader does not advance");
    }
    std::hint::black_box((r.valid_len(), r.torn_tail(), r.last_record_offset()));
}

/// A WAL file: header, records, and the write batch in each record.
pub fn wal(data: &[u8]) {
    walk_log(data, LogKind::Wal, |rec| {
        if let Ok(b) = WriteBatch::from_bytes(rec) {
            walk_batch(&b);
        }
    });
}

/// A manifest file: header, records, and the version edit in each record.
pub fn manifest(data: &[u8]) {
    walk_log(data, LogKind::Manifest, |rec| {
        let _ = VersionEdit::decode(rec);
    });
}

/// One encoded write batch (a WAL record's payload).
pub fn write_batch(data: &[u8]) {
    if let Ok(b) = WriteBatch::from_bytes(data) {
        walk_batch(&b);
        std::hint::black_box(b.seq());
    }
}

/// One encoded version edit (a manifest record's payload); whatever decodes
/// must encode and decode to the same edit.
pub fn version_edit(data: &[u8]) {
    if let Ok(e) = VersionEdit::decode(data) {
        let again = VersionEdit::decode(&e.encode());
        assert!(
            again.is_ok(),
            "a decoded edit does not decode after encoding"
        );
    }
}

fn walk_block(contents: Vec<u8>) {
    let Ok(block) = Block::new(contents) else {
        return;
    };
    let limit = block.size() + 2;
    let block = Arc::new(block);
    let mut it = BlockIter::new(block.clone(), internal_key::compare);
    it.seek_to_first();
    let mut n = 0;
    let mut probe = Vec::new();
    while it.valid() {
        if n == 1 {
            probe = it.key().to_vec();
        }
        std::hint::black_box((it.key().len(), it.value().len()));
        it.next();
        n += 1;
        assert!(n <= limit, "block iterator does not advance (forward)");
    }
    let _ = it.status();
    let mut it = BlockIter::new(block.clone(), internal_key::compare);
    it.seek_to_last();
    let mut n = 0;
    while it.valid() {
        it.prev();
        n += 1;
        assert!(n <= limit, "block iterator does not advance (backward)");
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
            walk_block(raw);
        }
    }
    walk_block(data.to_vec());
}

/// A table footer, block handles and the properties block.
pub fn footer(data: &[u8]) {
    if data.len() >= FOOTER_LEN {
        let _ = Footer::decode(&data[data.len() - FOOTER_LEN..]);
    }
    let _ = Footer::decode(data);
    let _ = BlockHandle::decode(data);
    let _ = TableProperties::decode(data);
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
    let _ = t.verify();
    let mut it = t.iter();
    it.seek_to_first();
    let mut n = 0;
    let mut probe = Vec::new();
    while it.valid() {
        if n == 0 {
            probe = it.key().to_vec();
        }
        it.next();
        n += 1;
        assert!(n <= data.len(), "table iterator does not advance");
    }
    let _ = it.status();
    it.seek_to_last();
    let mut n = 0;
    while it.valid() {
        it.prev();
        n += 1;
        assert!(n <= data.len(), "table iterator does not advance backwards");
    }
    if !probe.is_empty() {
        let _ = t.get(&probe);
        let _ = t.may_contain(internal_key::user_key(&probe));
    }
    let _ = t.get(&internal_key::seek_key(b"k", internal_key::MAX_SEQ));
}

/// A bloom filter block, probed with a few keys.
pub fn bloom(data: &[u8]) {
    if let Ok(f) = BloomFilter::new(data) {
        for k in [&b""[..], b"a", b"k00000001", data] {
            std::hint::black_box(f.may_contain(k));
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
