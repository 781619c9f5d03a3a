//! Options. Each is documented with its default and unit; "behaviour" options
//! change what the store does, "performance" options only how fast.

/// Per-block compression of SST data blocks. Do not change the values: they
/// are stored in every block trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compression {
    /// Stored as is.
    None = 0,
    /// LZ4 block format (`lz4_flex`), size-prefixed.
    Lz4 = 1,
    /// Zstandard, level 3 by default.
    Zstd = 2,
}

impl Compression {
    /// Decodes a stored compression byte.
    pub fn from_u8(b: u8) -> Option<Compression> {
        match b {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }
}

use std::sync::Arc;

use crate::io::{FsRef, PosixFs};

/// Number of LSM levels (L0 … L6).
pub const NUM_LEVELS: usize = 7;

/// How a database is opened and tuned.
///
/// Behaviour: `create_if_missing`, `error_if_exists`, `max_key_size`,
/// `max_value_size`, `fs`. Everything else affects only performance and space.
#[derive(Clone)]
pub struct Options {
    /// Create the directory and an empty store if none exists. Default: true.
    pub create_if_missing: bool,
    /// Fail if a store already exists. Default: false.
    pub error_if_exists: bool,
    /// Largest accepted key, bytes. Default: 64 KiB.
    pub max_key_size: usize,
    /// Largest accepted value, bytes. Default: 256 MiB.
    pub max_value_size: usize,
    /// Where files live. Default: the local file system.
    pub fs: FsRef,

    /// Memtable size that triggers a switch and flush, bytes. Default: 64 MiB.
    pub write_buffer_size: usize,
    /// Memtables (active + immutable) kept before writes stop. Default: 3.
    pub max_write_buffer_number: usize,
    /// L0 files that trigger a compaction. Default: 4.
    pub level0_file_num_compaction_trigger: usize,
    /// L0 files at which each write is delayed by 1 ms. Default: 20.
    pub level0_slowdown_writes_trigger: usize,
    /// L0 files at which writes wait for compaction. Default: 36.
    pub level0_stop_writes_trigger: usize,
    /// Target size of the base level, bytes. Default: 256 MiB.
    pub max_bytes_for_level_base: u64,
    /// Size ratio between adjacent levels. Default: 10.
    pub max_bytes_for_level_multiplier: u64,
    /// Size targets derived from the last level (RocksDB's
    /// `level_compaction_dynamic_level_bytes`). Default: true.
    pub dynamic_level_bytes: bool,
    /// Size at which compaction output files are cut, bytes. Default: 64 MiB.
    pub target_file_size: u64,
    /// Uncompressed data block size, bytes. Default: 4 KiB.
    pub block_size: usize,
    /// Keys between restart points in a block. Default: 16.
    pub block_restart_interval: usize,
    /// Bloom filter bits per key; 0 disables filters. Default: 10.
    pub bloom_bits_per_key: u32,
    /// Compression per level (the last entry applies to deeper levels).
    /// Default: none for L0–L1, LZ4 below.
    pub compression_per_level: Vec<Compression>,
    /// Block cache capacity (data blocks), bytes; 0 disables it.
    /// Default: 64 MiB.
    pub block_cache_capacity: usize,
    /// Table and blob files kept open for reads, each holding a descriptor;
    /// the least recently used one is closed when another must open.
    /// Readers in use by a read or an iterator stay open until it finishes.
    /// Compaction and GC open their inputs on their own. Default: half the
    /// process's soft descriptor limit (`ulimit -n`), at least 16.
    pub max_open_files: usize,
    /// Memory for the index and filter blocks of open tables, bytes (blob
    /// files keep no index in memory). Past it the least recently used
    /// table is closed; if `Stats::file_opens` keeps climbing, raise it.
    /// Together with `block_cache_capacity` and the memtables it bounds the
    /// engine's memory. Default: 256 MiB (about 100 million keys).
    pub open_files_memory: usize,
    /// Manifest size that triggers a rewrite as one snapshot, bytes. Default: 64 MiB.
    pub max_manifest_file_size: u64,
    /// Largest WAL group-commit record, bytes. Default: 1 MiB.
    pub max_write_group_bytes: usize,
    /// Values of at least this many bytes are separated into blob files at
    /// flush (0 separates every value); `None` keeps all values inline.
    /// Default: 512.
    pub blob_threshold: Option<usize>,
    /// Size at which blob files are cut, bytes. Default: 64 MiB.
    pub blob_file_size: u64,
    /// Run blob garbage collection. Default: true.
    pub enable_gc: bool,
    /// Never pick compactions on size or file-count triggers; only
    /// [`crate::Db::compact_range`] compacts. The L0 slowdown and stop
    /// triggers then do not stall writes (nothing would lower L0), so L0 and
    /// read cost grow until the user compacts (RocksDB's option of the same
    /// name). Default: false.
    pub disable_auto_compactions: bool,
    /// A blob file is collected once this fraction of its bytes is garbage;
    /// space amplification of the blob files stays below 1/(1−ratio).
    /// Default: 0.5.
    pub gc_garbage_ratio: f64,
    /// Most input bytes one GC job reads. Default: 256 MiB.
    pub gc_max_batch_bytes: u64,
    /// Most input files one GC job merges. Default: 8.
    pub gc_max_batch_files: usize,
    /// Background write rate shared by compaction and GC, bytes per second;
    /// `None` for unlimited. Default: unlimited.
    pub background_rate_limit: Option<u64>,
    /// Retires values during compaction (e.g. expired keys). Default: none.
    pub compaction_filter: Option<Arc<dyn crate::compaction::CompactionFilter>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            max_key_size: 64 << 10,
            max_value_size: 256 << 20,
            fs: Arc::new(PosixFs),
            write_buffer_size: 64 << 20,
            max_write_buffer_number: 3,
            level0_file_num_compaction_trigger: 4,
            level0_slowdown_writes_trigger: 20,
            level0_stop_writes_trigger: 36,
            max_bytes_for_level_base: 256 << 20,
            max_bytes_for_level_multiplier: 10,
            dynamic_level_bytes: true,
            target_file_size: 64 << 20,
            block_size: 4 << 10,
            block_restart_interval: 16,
            bloom_bits_per_key: 10,
            compression_per_level: vec![Compression::None, Compression::None, Compression::Lz4],
            block_cache_capacity: 64 << 20,
            max_open_files: default_max_open_files(),
            open_files_memory: 256 << 20,
            max_manifest_file_size: 64 << 20,
            max_write_group_bytes: 1 << 20,
            compaction_filter: None,
            blob_threshold: Some(512),
            blob_file_size: 64 << 20,
            enable_gc: true,
            disable_auto_compactions: false,
            gc_garbage_ratio: 0.5,
            gc_max_batch_bytes: 256 << 20,
            gc_max_batch_files: 8,
            background_rate_limit: None,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("write_buffer_size", &self.write_buffer_size)
            .field("max_write_buffer_number", &self.max_write_buffer_number)
            .field(
                "level0_file_num_compaction_trigger",
                &self.level0_file_num_compaction_trigger,
            )
            .field("max_bytes_for_level_base", &self.max_bytes_for_level_base)
            .field("target_file_size", &self.target_file_size)
            .field("compression_per_level", &self.compression_per_level)
            .finish_non_exhaustive()
    }
}

impl Options {
    /// Compression for SSTs written to `level`.
    pub fn compression_for(&self, level: usize) -> Compression {
        self.compression_per_level
            .get(level)
            .or(self.compression_per_level.last())
            .copied()
            .unwrap_or(Compression::None)
    }

    /// Checks the options for values the engine cannot work with.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |m: &str| Err(crate::Error::InvalidArgument(m.to_string()));
        if self.write_buffer_size < 4096 {
            return bad("write_buffer_size must be at least 4096 bytes");
        }
        if self.max_write_buffer_number < 2 {
            return bad("max_write_buffer_number must be at least 2");
        }
        if self.level0_file_num_compaction_trigger == 0
            || self.level0_slowdown_writes_trigger < self.level0_file_num_compaction_trigger
            || self.level0_stop_writes_trigger < self.level0_slowdown_writes_trigger
        {
            return bad("need 0 < level0 compaction trigger <= slowdown trigger <= stop trigger");
        }
        if self.max_bytes_for_level_multiplier < 2 {
            return bad("max_bytes_for_level_multiplier must be at least 2");
        }
        if self.block_size == 0 || self.block_restart_interval == 0 {
            return bad("block_size and block_restart_interval must be positive");
        }
        if self.max_key_size == 0 || self.max_key_size > (1 << 24) {
            return bad("max_key_size must be between 1 byte and 16 MiB");
        }
        if !(self.gc_garbage_ratio > 0.0 && self.gc_garbage_ratio <= 1.0) {
            return bad("gc_garbage_ratio must be in (0, 1]");
        }
        if self.blob_file_size < 4096 || self.gc_max_batch_files == 0 {
            return bad("blob_file_size must be at least 4096 and gc_max_batch_files at least 1");
        }
        if self.background_rate_limit == Some(0) {
            return bad("background_rate_limit must be positive (None for unlimited)");
        }
        if self.max_value_size > (1 << 30) {
            return bad("max_value_size must be at most 1 GiB");
        }
        if self.max_open_files == 0 {
            return bad("max_open_files must be at least 1");
        }
        if self.open_files_memory == 0 {
            // Every table would be read uncached: each get reopens its
            // files and reads their index and filter again.
            return bad("open_files_memory must be positive (the default is 256 MiB)");
        }
        Ok(())
    }
}

/// Fewest files [`default_max_open_files`] returns.
const MIN_DEFAULT_OPEN_FILES: usize = 16;
/// Most files [`default_max_open_files`] returns (for "unlimited" limits).
const MAX_DEFAULT_OPEN_FILES: usize = 1 << 20;

/// Half the process's soft descriptor limit, clamped to [16, 2^20]: the
/// other half stays for WALs, the manifest, compaction inputs and outputs
/// and, in a server, client connections.
pub fn default_max_open_files() -> usize {
    let soft = crate::io::descriptor_limit().unwrap_or(2 * MAX_DEFAULT_OPEN_FILES as u64);
    usize::try_from(soft / 2)
        .unwrap_or(MAX_DEFAULT_OPEN_FILES)
        .clamp(MIN_DEFAULT_OPEN_FILES, MAX_DEFAULT_OPEN_FILES)
}

/// Options for one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Fsync the WAL before acknowledging: survives power loss. Default: false
    /// (survives a process crash, not a power loss).
    pub sync: bool,
    /// Skip the WAL: the write survives only a flush or a clean close.
    pub disable_wal: bool,
}

impl WriteOptions {
    /// Options with `sync = true`.
    pub fn synced() -> Self {
        WriteOptions {
            sync: true,
            disable_wal: false,
        }
    }
}
