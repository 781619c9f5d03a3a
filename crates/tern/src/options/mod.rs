//! Options: a store's [`Settings`] (plain data, documented with default
//! and unit) plus the components it is given, and the options of one write.

/// Per-block compression of SST data blocks. Do not change the values: they
/// are stored in every block trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
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
    /// The name settings use: `none`, `lz4` or `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

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

/// How much CPU a background thread may take from the threads serving
/// reads and writes when both want the processor (RocksDB's
/// `Env::LowerThreadPoolCPUPriority` levels). On Linux only; elsewhere
/// every level runs as `Normal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuPriority {
    /// The scheduler's default share, the same as the foreground's.
    Normal,
    /// The lowest nice level (19): about 1/70 of a foreground thread's
    /// share while both are runnable, all of an idle processor.
    Low,
    /// `SCHED_IDLE`: the scheduler's smallest weight (3, against 1024 for
    /// a normal thread), so it runs on a processor the others leave, and a
    /// waking normal thread preempts it at once.
    Idle,
}

impl CpuPriority {
    /// The name settings use: `normal`, `low` or `idle`.
    pub fn name(self) -> &'static str {
        match self {
            CpuPriority::Normal => "normal",
            CpuPriority::Low => "low",
            CpuPriority::Idle => "idle",
        }
    }
}

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::compaction::CompactionFilter;
use crate::io::{FsRef, PosixFs};

mod memory;
mod settings;

pub use memory::{process_memory, BytesOrMemory};
pub use settings::{SettingValue, Settings, MIN_WRITE_BUFFER_SIZE};

/// Number of LSM levels (L0 … L6).
pub const NUM_LEVELS: usize = 7;

/// How a store is opened: its [`Settings`] (plain data) and the components
/// it is given (the file system, a compaction filter).
///
/// `Options` dereferences to its settings, so `opts.write_buffer_size`
/// reads and writes a setting directly.
///
/// ```
/// use tern::{Options, Settings};
/// let opts = Options {
///     settings: Settings {
///         write_buffer_size: 16 << 20,
///         ..Settings::default()
///     },
///     ..Options::default()
/// };
/// assert_eq!(opts.write_buffer_size, 16 << 20);
/// ```
#[derive(Clone)]
pub struct Options {
    /// The tuning. Default: [`Settings::default`].
    pub settings: Settings,
    /// Where files live. Default: the local file system.
    pub fs: FsRef,
    /// Retires values during compaction (e.g. expired keys). Default: none.
    pub compaction_filter: Option<Arc<dyn CompactionFilter>>,
}

impl Default for Options {
    fn default() -> Self {
        Options::new(Settings::default())
    }
}

impl Deref for Options {
    type Target = Settings;

    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl DerefMut for Options {
    fn deref_mut(&mut self) -> &mut Settings {
        &mut self.settings
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("settings", &self.settings)
            .field("compaction_filter", &self.compaction_filter.is_some())
            .finish_non_exhaustive()
    }
}

impl Options {
    /// `settings` on the local file system, without a compaction filter.
    pub fn new(settings: Settings) -> Self {
        Options {
            settings,
            fs: Arc::new(PosixFs),
            compaction_filter: None,
        }
    }

    /// These options with their settings changed by `f`.
    pub fn tune(mut self, f: impl FnOnce(&mut Settings)) -> Self {
        f(&mut self.settings);
        self
    }

    /// These options on file system `fs`.
    pub fn with_fs(mut self, fs: FsRef) -> Self {
        self.fs = fs;
        self
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
