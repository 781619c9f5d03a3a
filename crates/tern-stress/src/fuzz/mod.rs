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
//! parser gets a target in the server crate; the hash engine's decoders
//! are the `hash_*` targets.

use std::path::{Path, PathBuf};

use tern::io::{FileSystem, FsRef, MemFs};

pub use blobs::{blob_file, blob_footer, blob_index, blob_lineage, blob_record, blob_ref};
pub use hash::{hash_checkpoint, hash_log, hash_record};
pub use logs::{manifest, memtier, version_edit, wal, write_batch};
pub use tables::{block, bloom, footer, table};

mod blobs;
mod hash;
mod logs;
mod tables;

/// A decoder harness: runs one input.
pub type Harness = fn(&[u8]);

/// The fuzz targets: name and harness. The corpus of target `name` lives in
/// `fuzz/corpus/<name>/`.
pub const TARGETS: &[(&str, Harness)] = &[
    ("wal", wal),
    ("manifest", manifest),
    ("write_batch", write_batch),
    ("version_edit", version_edit),
    ("memtier", memtier),
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
    ("hash_record", hash_record),
    ("hash_log", hash_log),
    ("hash_checkpoint", hash_checkpoint),
];

/// A fresh in-memory file system holding `data` at `path` (under
/// `/fuzz`), or `None` if it could not be written.
fn file_in_memory(path: &Path, data: &[u8]) -> Option<FsRef> {
    let mem = MemFs::new();
    let mut f = mem
        .create_dir_all(Path::new("/fuzz"))
        .and_then(|()| mem.create(path))
        .ok()?;
    f.append(data).and_then(|()| f.sync()).ok()?;
    Some(mem)
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
