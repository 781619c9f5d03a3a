//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern::io::{FaultFs, FsRef, MemFs};
use tern::{Db, Options, ReadOptions};

/// Where stores live on the in-memory file system.
pub const DIR: &str = "/db";

/// Small buffers and files so that flushes and compactions happen after a
/// few hundred kilobytes of writes.
pub fn small_opts(fs: FsRef) -> Options {
    Options {
        settings: tern::Settings {
            write_buffer_size: 64 << 10,
            target_file_size: 32 << 10,
            max_bytes_for_level_base: 256 << 10,
            block_size: 1 << 10,
            block_cache_capacity: 1 << 20,
            ..tern::Settings::default()
        },
        fs,
        ..Options::default()
    }
}

/// A fault-injecting file system over a fresh in-memory one.
pub fn fault_fs() -> (Arc<MemFs>, Arc<FaultFs>) {
    let mem = MemFs::new();
    let fault = FaultFs::new(mem.clone());
    (mem, fault)
}

/// `key000042`
pub fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

/// A value that names its key and the round that wrote it, padded so a few
/// hundred of them fill a small memtable.
pub fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("value-{i}-round-{round}-").into_bytes();
    v.resize(100, b'x');
    v
}

/// Paths of the files in `dir` on `fs` whose names end with `suffix`, sorted.
pub fn files_ending(fs: &MemFs, dir: &str, suffix: &str) -> Vec<PathBuf> {
    fs.file_names()
        .into_iter()
        .filter(|p| p.starts_with(dir) && p.to_string_lossy().ends_with(suffix))
        .collect()
}

/// The WALs in `dir` that hold records, oldest first: not the empty one a
/// store prepares for its next memtable switch.
pub fn wals_with_records(fs: &MemFs, dir: &str) -> Vec<PathBuf> {
    use tern::internals::format::log_record::FILE_HEADER_LEN;
    use tern::io::FileSystem;
    let mut wals: Vec<PathBuf> = files_ending(fs, dir, ".log")
        .into_iter()
        .filter(|p| fs.file_size(p).is_ok_and(|n| n > FILE_HEADER_LEN as u64))
        .collect();
    wals.sort();
    wals
}

/// The live manifest named by `CURRENT`.
pub fn current_manifest(fs: &MemFs, dir: &str) -> PathBuf {
    use tern::io::FileSystem;
    let current = fs.read_all(&Path::new(dir).join("CURRENT")).unwrap();
    let name = String::from_utf8(current).unwrap();
    Path::new(dir).join(name.trim_end())
}

/// Offsets of the records of a log file (WAL or manifest): a 16-byte file
/// header, then records of checksum (4) ‖ length (4) ‖ type (1) ‖ payload.
pub fn log_record_offsets(data: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut pos = 16usize;
    while pos + 9 <= data.len() {
        let len = u32::from_le_bytes(data[pos + 4..pos + 8].try_into().unwrap()) as usize;
        if pos + 9 + len > data.len() {
            break;
        }
        out.push(pos as u64);
        pos += 9 + len;
    }
    out
}

/// Every (key, value) pair of the store in order; panics on an iterator error.
pub fn scan(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    scan_at(db, None)
}

/// Every (key, value) pair the store holds at `snapshot` (or now), in order.
pub fn scan_at(db: &Db, snapshot: Option<&tern::Snapshot>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = db
        .iter(ReadOptions {
            snapshot,
            ..Default::default()
        })
        .unwrap();
    it.seek_to_first();
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next();
    }
    it.status().unwrap();
    out
}
