//! [`Settings`]: every tuning knob of a store as plain data, the one type
//! the server's config, the benchmark's `-p tern.<name>=` and the test
//! harnesses embed. Serde (de)serializes it, so it loads from TOML; every
//! field names its default and unit.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{default_max_open_files, BytesOrMemory, Compression, CpuPriority};
use crate::error::{Error, Result};

/// A value a setting can hold, parsed from text: sizes take `K`, `M`, `G`
/// suffixes (powers of 1024), flags `true`/`false`/`on`/`off`/`1`/`0`,
/// optional values `off` or `none` for none, lists are comma-separated.
pub trait SettingValue: Sized {
    /// Parses `text`, or says what was expected.
    fn parse_setting(text: &str) -> std::result::Result<Self, String>;
    /// The text form [`SettingValue::parse_setting`] reads back.
    fn show_setting(&self) -> String;
}

fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 10),
        Some((i, 'M' | 'm')) => (&t[..i], 20),
        Some((i, 'G' | 'g')) => (&t[..i], 30),
        Some((i, 'T' | 't')) => (&t[..i], 40),
        _ => (t, 0),
    };
    let n: u64 = digits
        .trim()
        .replace('_', "")
        .parse()
        .map_err(|_| "is not a number (sizes may end in K, M, G or T)".to_string())?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| "is too large".to_string())
}

macro_rules! size_setting {
    ($($t:ty),*) => {$(
        impl SettingValue for $t {
            fn parse_setting(text: &str) -> std::result::Result<Self, String> {
                <$t>::try_from(parse_size(text)?).map_err(|_| "is too large".to_string())
            }
            fn show_setting(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
size_setting!(usize, u64, u32);

impl SettingValue for bool {
    fn parse_setting(text: &str) -> std::result::Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" | "1" => Ok(true),
            "false" | "off" | "no" | "0" => Ok(false),
            _ => Err("is not true or false".to_string()),
        }
    }
    fn show_setting(&self) -> String {
        self.to_string()
    }
}

impl SettingValue for f64 {
    fn parse_setting(text: &str) -> std::result::Result<Self, String> {
        text.trim()
            .parse()
            .map_err(|_| "is not a number".to_string())
    }
    fn show_setting(&self) -> String {
        self.to_string()
    }
}

impl<T: SettingValue> SettingValue for Option<T> {
    fn parse_setting(text: &str) -> std::result::Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => Ok(None),
            _ => T::parse_setting(text)
                .map(Some)
                .map_err(|why| format!("{why}, or off")),
        }
    }
    fn show_setting(&self) -> String {
        self.as_ref().map_or("off".to_string(), T::show_setting)
    }
}

impl SettingValue for BytesOrMemory {
    fn parse_setting(text: &str) -> std::result::Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "memory" => Ok(BytesOrMemory::Memory),
            _ => parse_size(text)
                .map(BytesOrMemory::Bytes)
                .map_err(|why| format!("{why}, or memory")),
        }
    }
    fn show_setting(&self) -> String {
        match self {
            BytesOrMemory::Memory => "memory".to_string(),
            BytesOrMemory::Bytes(n) => n.to_string(),
        }
    }
}

impl SettingValue for String {
    fn parse_setting(text: &str) -> std::result::Result<Self, String> {
        match text.trim() {
            "" => Err("is empty".to_string()),
            t => Ok(t.to_string()),
        }
    }
    fn show_setting(&self) -> String {
        self.clone()
    }
}

impl SettingValue for Compression {
    fn parse_setting(text: &str) -> std::result::Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "none" | "no" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            _ => Err("is not a compression (none, lz4, zstd)".to_string()),
        }
    }
    fn show_setting(&self) -> String {
        self.name().to_string()
    }
}

impl SettingValue for CpuPriority {
    fn parse_setting(text: &str) -> std::result::Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "normal" => Ok(CpuPriority::Normal),
            "low" => Ok(CpuPriority::Low),
            "idle" => Ok(CpuPriority::Idle),
            _ => Err("is not a CPU priority (normal, low, idle)".to_string()),
        }
    }
    fn show_setting(&self) -> String {
        self.name().to_string()
    }
}

impl SettingValue for Vec<Compression> {
    fn parse_setting(text: &str) -> std::result::Result<Self, String> {
        text.split(',').map(Compression::parse_setting).collect()
    }
    fn show_setting(&self) -> String {
        self.iter().map(|c| c.name()).collect::<Vec<_>>().join(",")
    }
}

/// Serde for every setting: its own form, or the text [`Settings::set`]
/// takes (`"64M"`, `"off"`, `"none,lz4"`), so a TOML file and a command
/// line say the same things the same way.
mod text_or_value {
    use super::*;

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ValueOrText<T> {
        Value(T),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de> + SettingValue>(
        d: D,
    ) -> std::result::Result<T, D::Error> {
        match ValueOrText::<T>::deserialize(d)? {
            ValueOrText::Value(v) => Ok(v),
            ValueOrText::Text(t) => {
                T::parse_setting(&t).map_err(|why| serde::de::Error::custom(format!("{t:?} {why}")))
            }
        }
    }
}

/// Optional settings serialize `None` as `"off"` (TOML has no null).
fn off_when_none<S: Serializer, T: Serialize>(
    v: &Option<T>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match v {
        Some(v) => v.serialize(s),
        None => s.serialize_str("off"),
    }
}

macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $(#[serde($($serde:tt)*)])?
        $name:ident: $ty:ty = $default:expr,
    )*) => {
        /// How a store is tuned: plain data, separate from the components a
        /// store is given ([`Options`](super::Options) holds both).
        ///
        /// Loads from TOML (or any serde format); missing fields take their
        /// defaults, unknown ones are an error. Each value may also be
        /// written as the text [`Settings::set`] takes (`"64M"`, `"off"`). "Behaviour" settings change
        /// what the store does (`create_if_missing`, `error_if_exists`,
        /// `max_key_size`, `max_value_size`); all others change only speed,
        /// memory and space.
        ///
        /// ```
        /// let s: tern::Settings = toml::from_str(
        ///     "write_buffer_size = 16777216\nblob_threshold = \"off\"\ntarget_file_size = \"8M\"",
        /// ).unwrap();
        /// assert_eq!(s.write_buffer_size, 16 << 20);
        /// assert_eq!(s.blob_threshold, None);
        /// assert_eq!(s.target_file_size, 8 << 20);
        /// ```
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Settings {
            $(
                $(#[doc = $doc])*
                #[serde(deserialize_with = "text_or_value::deserialize")]
                $(#[serde($($serde)*)])?
                pub $name: $ty,
            )*
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings { $($name: $default,)* }
            }
        }

        impl Settings {
            /// The name of every setting.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Sets `name` from text (see [`SettingValue`] for the forms).
            pub fn set(&mut self, name: &str, text: &str) -> Result<()> {
                match name {
                    $(stringify!($name) => {
                        self.$name = SettingValue::parse_setting(text).map_err(|why| {
                            Error::InvalidArgument(format!("setting {name}: {text:?} {why}"))
                        })?;
                    })*
                    _ => return Err(Error::InvalidArgument(format!(
                        "unknown setting {name:?} (settings: {})",
                        Self::NAMES.join(", ")
                    ))),
                }
                Ok(())
            }

            /// The text form of setting `name`, or `None` if there is none.
            pub fn get(&self, name: &str) -> Option<String> {
                match name {
                    $(stringify!($name) => Some(self.$name.show_setting()),)*
                    _ => None,
                }
            }

            /// Each setting's documentation as one paragraph, by name.
            pub fn help() -> Vec<(&'static str, String)> {
                vec![$((stringify!($name), doc_paragraph(&[$($doc),*])),)*]
            }
        }
    };
}

fn doc_paragraph(lines: &[&str]) -> String {
    lines.iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ")
}

/// Smallest `write_buffer_size` accepted, bytes.
pub const MIN_WRITE_BUFFER_SIZE: usize = 4096;

/// Longest `write_thread_max_yield_usec` accepted (10 ms).
const MAX_WRITE_YIELD_USEC: u64 = 10_000;

settings! {
    /// Create the directory and an empty store if none exists. Default: true.
    create_if_missing: bool = true,
    /// Fail if a store already exists. Default: false.
    error_if_exists: bool = false,
    /// Largest accepted key, bytes. Default: 64 KiB.
    max_key_size: usize = 64 << 10,
    /// Largest accepted value, bytes. Default: 256 MiB. A whole write
    /// batch must also fit in one memtable of the largest arena (about
    /// 4 GiB with its per-entry overhead); a larger one is refused.
    max_value_size: usize = 256 << 20,
    /// Memtable size that triggers a switch and flush, bytes. Default: 64 MiB.
    write_buffer_size: usize = 64 << 20,
    /// Memtables (active + immutable) kept before writes stop. Default: 3.
    max_write_buffer_number: usize = 3,
    /// How long a writer waiting behind a group's leader polls for the
    /// outcome, microseconds, before it sleeps on a condition variable
    /// (RocksDB's option of the same name). Polling saves the sleep and
    /// wake-up when client threads saturate the store with reads and
    /// writes mixed (YCSB A with 4 threads about 1.2–1.4× on two cores at
    /// 50), but with more client threads than cores it multiplies the
    /// tail at a steady arrival rate: 60,000 updates/s from 4 threads on
    /// two cores had a p99 of 40–75 ms at 5–50, against 7–9 ms at 0. A
    /// store that only writes, or has background work that needs the
    /// cores, is also about 10% faster at 0. At most two waiters per core
    /// poll at a time, per store, fewer while compactions or GC run; at
    /// most 10000. Default: 0 (sleep at once).
    write_thread_max_yield_usec: u64 = 0,
    /// L0 files that trigger a compaction. Default: 4.
    level0_file_num_compaction_trigger: usize = 4,
    /// L0 files at which each write is delayed by 1 ms. Default: 20.
    level0_slowdown_writes_trigger: usize = 20,
    /// L0 files at which writes wait for compaction. Default: 36.
    level0_stop_writes_trigger: usize = 36,
    /// Target size of the base level, bytes. Default: 256 MiB.
    max_bytes_for_level_base: u64 = 256 << 20,
    /// Size ratio between adjacent levels. Default: 10.
    max_bytes_for_level_multiplier: u64 = 10,
    /// Size targets derived from the last level (RocksDB's
    /// `level_compaction_dynamic_level_bytes`). Default: true.
    dynamic_level_bytes: bool = true,
    /// Size at which compaction output files are cut, bytes. Default: 64 MiB.
    target_file_size: u64 = 64 << 20,
    /// Most key-range parts one compaction is split into, run at once by
    /// the executor: on background threads, or on as many offload workers
    /// (each downloading only the inputs its range overlaps). A
    /// compaction is split only where each part reads at least
    /// `target_file_size` bytes; 1 runs every compaction whole (RocksDB's
    /// `max_subcompactions`). At most 64. Default: 1.
    max_subcompactions: usize = 1,
    /// Uncompressed data block size, bytes. Default: 4 KiB.
    block_size: usize = 4 << 10,
    /// Keys between restart points in a block. Default: 16.
    block_restart_interval: usize = 16,
    /// Bloom filter bits per key; 0 disables filters. Default: 10.
    bloom_bits_per_key: u32 = 10,
    /// Compression per level (the last entry applies to deeper levels).
    /// It applies to data blocks that hold inline values; blocks of blob
    /// references and tombstones alone are stored as is, since they gain
    /// little from it (`docs/format/sst.md`). Default: none for L0–L1,
    /// LZ4 below.
    compression_per_level: Vec<Compression> =
        vec![Compression::None, Compression::None, Compression::Lz4],
    /// Block cache capacity (data blocks), bytes; 0 disables it.
    /// Default: 64 MiB.
    block_cache_capacity: usize = 64 << 20,
    /// Table and blob files kept open for reads, each holding a descriptor;
    /// the least recently used one is closed when another must open.
    /// Readers in use by a read or an iterator stay open until it finishes.
    /// Compaction and GC open their inputs on their own. Default: half the
    /// process's soft descriptor limit (`ulimit -n`), at least 16.
    max_open_files: usize = default_max_open_files(),
    /// Memory for the index and filter blocks of open tables, bytes (blob
    /// files keep no index in memory). Past it the least recently used
    /// table is closed; if `Stats::file_opens` keeps climbing, raise it.
    /// Together with `block_cache_capacity` and the memtables it bounds the
    /// engine's memory. Default: 256 MiB (about 100 million keys).
    open_files_memory: usize = 256 << 20,
    /// Manifest size that triggers a rewrite as one snapshot, bytes. Default: 64 MiB.
    max_manifest_file_size: u64 = 64 << 20,
    /// Largest WAL group-commit record, bytes. Default: 1 MiB.
    max_write_group_bytes: usize = 1 << 20,
    /// WAL bytes appended after which a background thread starts writing
    /// the WAL to the device, so the fsync a memtable switch owes the old
    /// WAL finds little left instead of stalling writers on a whole
    /// memtable's worth; 0 leaves it all to the switch. Durability is
    /// unchanged: synced writes still fsync. Default: 4 MiB.
    wal_bytes_per_sync: u64 = 4 << 20,
    /// Bytes a flush, compaction or GC output file grows by before its
    /// writeback to the device is started (Linux `sync_file_range`), so
    /// the kernel never holds a burst of background output dirty for a
    /// foreground WAL sync to queue behind; 0 leaves it to the kernel and
    /// the file's final sync. Durability is unchanged. Unused with
    /// `use_direct_io_for_flush_and_compaction`, whose writes bypass the
    /// page cache. RocksDB's option of the same name, off there too: with
    /// memory to spare the kernel defers background output past a short
    /// burst of writes, which 1 MiB gives up (`docs/engine.md`). For
    /// sustained writes under `appendfsync always`. Default: 0 (off).
    bytes_per_sync: u64 = 0,
    /// Values of at least this many bytes are separated into blob files at
    /// flush (0 separates every value); `off` keeps all values inline.
    /// Default: 512.
    #[serde(serialize_with = "off_when_none")]
    blob_threshold: Option<usize> = Some(512),
    /// Bytes of each separated value's start also kept beside its
    /// reference in the tables, so compaction filters and head-only reads
    /// (`ReadOptions::value_heads`, `Db::get_head`) see them without
    /// reading a blob file: an application's value header (a type, an
    /// expiry time) goes there. Values stored before a change keep the
    /// head they were written with. At most 255. Default: 0.
    blob_head_size: usize = 0,
    /// Size at which blob files are cut, bytes. Default: 64 MiB.
    blob_file_size: u64 = 64 << 20,
    /// Compactions into the last level also move the separated values of
    /// the keys they write into a *sorted run*: new blob files written in
    /// key order. A range scan then finds neighbouring keys' values side
    /// by side and reads many with one read, where otherwise each value
    /// is a read of its own (neighbours were written by different
    /// flushes): out of memory, the difference between one device read
    /// per scan and one per row. A value already in a sorted run stays
    /// there until a compaction's new run would make more than this many
    /// runs overlap some key of its range; that compaction merges the
    /// sparsest of them (the fewest live bytes for their span of keys)
    /// into its new run, where the limit needs it. The price is write
    /// amplification: each value that lives until it reaches the last
    /// level is written once more, and again when its run merges. So by
    /// default runs are written only once the store outgrows memory
    /// (`sorted_value_runs_above`). `off` never moves values. Default: 4.
    #[serde(serialize_with = "off_when_none")]
    sorted_value_runs: Option<usize> = Some(4),
    /// Compactions move values into sorted runs (`sorted_value_runs`) only
    /// while the live bytes of the store's blob files exceed this many
    /// bytes. In memory a scan's values are a copy each wherever they lie,
    /// and moving them costs compaction time the foreground could use
    /// (YCSB A at 2M records in memory: a quarter of its throughput); once
    /// values outgrow memory, key order turns a scan's reads from one per
    /// row into one per scan (YCSB E at 10M records under a 2.5 GiB limit:
    /// about three times the scans). Values already in runs stay there
    /// below it. `memory`: the memory the process may use, the smaller of
    /// its memory cgroups' limits and the machine's RAM, read once (on
    /// Linux; elsewhere `memory` never moves values), or the block cache's
    /// capacity with `use_direct_reads`. It is compared with values alone:
    /// the engine's own memory (memtables, block cache, table indexes) and
    /// the tables' pages leave less than that for values, so set a size
    /// for an earlier start. Compactions run on offload workers move
    /// nothing either way. `0` always moves. Default: memory.
    sorted_value_runs_above: BytesOrMemory = BytesOrMemory::Memory,
    /// Read separated values through a read-only mapping of their blob
    /// file while they are in memory: a copy instead of a `pread` (a system
    /// call and a page-cache lookup per value). For a second after reads
    /// find values missing from memory (a burst of them, not one), reads
    /// use `pread` again, whose batches hand a scan's misses to the device
    /// together. The price, as
    /// with RocksDB's `allow_mmap_reads`: a device or file-system read
    /// error on a mapped page, or a blob file cut short by something
    /// outside the store, ends the process with SIGBUS instead of failing
    /// one read with an error. Default: true.
    mmap_blob_reads: bool = true,
    /// Read table and blob files with direct I/O (`O_DIRECT`), bypassing
    /// the operating system's page cache: the block cache, which then also
    /// keeps the blob records point reads read, is the only cache, so
    /// memory use is what it is given and every miss is a device read.
    /// Needs a file system that supports it (ext4, xfs; not procfs, nor
    /// tmpfs before Linux 6.6: the store then fails to open its files,
    /// saying so). Separated values are not mapped
    /// while it is on (`mmap_blob_reads` reads through the page cache).
    /// RocksDB's option of the same name. Default: false.
    use_direct_reads: bool = false,
    /// Write the files of flush, compaction and GC with direct I/O, and
    /// read the inputs of compaction and GC the same way, so background
    /// work neither fills the page cache nor pushes the foreground's data
    /// out of it. The WAL and the manifest stay buffered. RocksDB's option
    /// of the same name. Default: false.
    use_direct_io_for_flush_and_compaction: bool = false,
    /// Run blob garbage collection. Default: true.
    enable_gc: bool = true,
    /// Never pick compactions on size or file-count triggers; only
    /// `Db::compact_range` compacts. The L0 slowdown and stop triggers then
    /// do not stall writes (nothing would lower L0), so L0 and read cost
    /// grow until the user compacts (RocksDB's option of the same name).
    /// Default: false.
    disable_auto_compactions: bool = false,
    /// A blob file is collected once this fraction of its bytes is garbage;
    /// space amplification of the blob files stays below 1/(1−ratio).
    /// Default: 0.5.
    gc_garbage_ratio: f64 = 0.5,
    /// Bound on the blob files' bytes over their live bytes. When the
    /// garbage compaction has found pushes the blob files past it, GC also
    /// collects files under `gc_garbage_ratio`, most garbage first, until
    /// they are back under it; it never picks a file with less garbage than
    /// the bound allows in all (a fifth of it at 1.25), so every byte GC
    /// copies still frees at least a quarter byte. Under skewed updates the
    /// old, mostly cold files collect garbage slowly and sit just under the
    /// ratio, which would otherwise leave the store near 1/(1−ratio); `off`
    /// leaves a writing store's GC to the ratio alone
    /// (`gc_idle_space_amp_limit` still bounds an idle one). Default: 1.25.
    #[serde(serialize_with = "off_when_none")]
    gc_space_amp_limit: Option<f64> = Some(1.25),
    /// The bound of `gc_space_amp_limit` while the store is idle: once no
    /// write has landed for a second and the blob files hold half again
    /// the garbage this bound allows (1.15 at 1.1), or are halfway to
    /// `gc_space_amp_limit` if that is nearer, counting garbage L0 hides
    /// when an idle L0 compaction would reveal it, GC works them down to
    /// it, by the same rule (most garbage first, never a file with less
    /// than the bound allows in all: an eleventh at 1.1), and goes back
    /// to `gc_space_amp_limit` with the next write. The gap keeps a store
    /// that takes a few writes between idle spells from copying files
    /// after each of them. Under writes a file keeps its garbage until it
    /// is worth copying, since more keeps coming; garbage spread thinly
    /// over every file (a fifth is needed at 1.25) then stays on disk for
    /// good once the writes stop, which is when copying it costs the
    /// foreground the least. Reads do not count as
    /// activity: on a store that reads after it stops writing, that copy
    /// shares the disk and a core with them (`background_cpu_priority`
    /// and `background_rate_limit` bound it). Bulk ingestion and
    /// `compact_range` are not writes here, and a job already started
    /// (up to `gc_max_batch_bytes`) runs to its end when writes resume.
    /// `Db::wait_for_background` runs it as well, the caller being idle.
    /// An idle store also compacts L0 before its trigger when that marks
    /// enough of the garbage L0's newer versions hide (a writing store
    /// leaves it to the trigger), so GC does not copy it. A bound above `gc_space_amp_limit` changes nothing. `off`: the
    /// store keeps what `gc_space_amp_limit` leaves. Default: 1.1.
    #[serde(serialize_with = "off_when_none")]
    gc_idle_space_amp_limit: Option<f64> = Some(1.1),
    /// Most input bytes one GC job reads. Default: 256 MiB.
    gc_max_batch_bytes: u64 = 256 << 20,
    /// Most input files one GC job merges. Default: 8.
    gc_max_batch_files: usize = 8,
    /// Size of the memory tier between the memtables and L0, bytes; `off`
    /// for none. Full memtables are copied into it in one piece, merged
    /// there by relinking (dropping versions no reader needs) and written
    /// to L0 only when it fills: fewer, larger L0 writes under bursts and
    /// overwrites. Without `memtier_path` it is not durable: the WALs keep
    /// its data until it reaches L0, so a larger tier means more WAL to
    /// replay after a crash. At least twice `write_buffer_size`, at most
    /// 4 GiB. Default: off.
    #[serde(serialize_with = "off_when_none")]
    memtier_size: Option<u64> = None,
    /// The file that holds the memory tier, making it durable: a
    /// memtable's copy is synced there (`msync`) and its WAL released, and
    /// a restart finds the tier's tables in it. Put it on a DAX or tmpfs
    /// mount for memory speed (tmpfs survives a process crash, not a power
    /// loss), or on any file system. A relative path is inside the store's
    /// directory. The file must stay with the store: its tables are the
    /// only copy of the writes in them. Needs `memtier_size`; `off` keeps
    /// the tier in anonymous memory. Default: off.
    // Left out when off: a path may be any string, "off" included.
    #[serde(skip_serializing_if = "Option::is_none")]
    memtier_path: Option<String> = None,
    /// Levels of the memory tier (1 to 8). Default: 2.
    memtier_levels: usize = 2,
    /// Tables a memory-tier level above the last holds before they are
    /// merged into one table of the next level (at least 2); the last
    /// level merges whatever reaches it. Default: 4.
    memtier_level_tables: usize = 4,
    /// Background write rate shared by compaction and GC, bytes per second;
    /// `off` for unlimited. Default: off.
    #[serde(serialize_with = "off_when_none")]
    background_rate_limit: Option<u64> = None,
    /// CPU priority of the compaction and GC threads (and of the
    /// subcompaction threads they start) against the threads that read and
    /// write: `normal`, `low` (nice 19) or `idle` (`SCHED_IDLE`). Flush
    /// and the WAL syncer always run at normal priority, since writers
    /// wait for them. Lowering it keeps background work from holding a
    /// writer off the processor when there are fewer cores than runnable
    /// threads; if the foreground keeps every core busy, compaction falls
    /// behind until L0's slowdown and stop triggers give it time, GC falls
    /// behind with nothing to stop it, and a lowered thread holding the
    /// state lock through an install's fsync holds up flush and memtable
    /// switches with it (docs/engine.md). Default: normal.
    background_cpu_priority: CpuPriority = CpuPriority::Normal,
}

impl Settings {
    /// Applies `(name, text)` pairs in order, each as [`Settings::set`]
    /// does (a settings list from a file, a command line or a test
    /// history); the first bad pair is the error.
    pub fn set_all<N: AsRef<str>, V: AsRef<str>>(
        &mut self,
        pairs: impl IntoIterator<Item = (N, V)>,
    ) -> Result<()> {
        for (name, text) in pairs {
            self.set(name.as_ref(), text.as_ref())?;
        }
        Ok(())
    }

    /// Live separated bytes past which compactions move values into sorted
    /// runs (`sorted_value_runs_above` resolved): with `use_direct_reads`,
    /// `memory` is the block cache, the only memory that then holds values.
    pub fn sorted_runs_threshold(&self) -> u64 {
        match self.sorted_value_runs_above {
            BytesOrMemory::Memory if self.use_direct_reads => self.block_cache_capacity as u64,
            other => other.bytes(),
        }
    }

    /// Compression for SSTs written to `level`.
    pub fn compression_for(&self, level: usize) -> Compression {
        self.compression_per_level
            .get(level)
            .or(self.compression_per_level.last())
            .copied()
            .unwrap_or(Compression::None)
    }

    /// Checks the settings for values the engine cannot work with.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidArgument(m.to_string()));
        if self.write_buffer_size < MIN_WRITE_BUFFER_SIZE {
            return bad(&format!(
                "write_buffer_size must be at least {MIN_WRITE_BUFFER_SIZE} bytes"
            ));
        }
        if self.max_write_buffer_number < 2 {
            return bad("max_write_buffer_number must be at least 2");
        }
        if self.write_thread_max_yield_usec > MAX_WRITE_YIELD_USEC {
            // On idle cores a yield returns at once, so the slow-yield
            // cut-off never ends the poll: a waiter would spin that long
            // behind a leader blocked in an fsync or a write stop.
            return bad(
                "write_thread_max_yield_usec must be at most 10000 (10 ms); 0 turns polling off",
            );
        }
        if self.level0_file_num_compaction_trigger == 0
            || self.level0_slowdown_writes_trigger < self.level0_file_num_compaction_trigger
            || self.level0_stop_writes_trigger < self.level0_slowdown_writes_trigger
        {
            return bad("need 0 < level0 compaction trigger <= slowdown trigger <= stop trigger");
        }
        if self.sorted_value_runs == Some(0) {
            return bad("sorted_value_runs must be at least 1, or off");
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
        let not_above_one = |l: Option<f64>| l.is_some_and(|l| !(l > 1.0 && l.is_finite()));
        if not_above_one(self.gc_space_amp_limit) {
            return bad(
                "gc_space_amp_limit must be above 1 (off to leave a writing store's GC to gc_garbage_ratio)",
            );
        }
        if not_above_one(self.gc_idle_space_amp_limit) {
            return bad("gc_idle_space_amp_limit must be above 1 (off for no idle-time GC)");
        }
        if self.blob_file_size < 4096 || self.gc_max_batch_files == 0 {
            return bad("blob_file_size must be at least 4096 and gc_max_batch_files at least 1");
        }
        if self.background_rate_limit == Some(0) {
            return bad("background_rate_limit must be positive (off for unlimited)");
        }
        if self.blob_head_size > 255 {
            return bad("blob_head_size must be at most 255");
        }
        if self.max_value_size > (1 << 30) {
            return bad("max_value_size must be at most 1 GiB");
        }
        if !(1..=64).contains(&self.max_subcompactions) {
            return bad("max_subcompactions must be between 1 and 64");
        }
        if let Some(size) = self.memtier_size {
            if size > crate::memtier::MAX_TIER_SIZE {
                return bad("memtier_size must be at most 4 GiB (its offsets are 32-bit)");
            }
            if size < 2 * self.write_buffer_size as u64 {
                return bad("memtier_size must be at least twice write_buffer_size");
            }
        }
        if self.memtier_path.is_some() && self.memtier_size.is_none() {
            return bad("memtier_path needs memtier_size (the size of the tier file)");
        }
        if !(1..=8).contains(&self.memtier_levels) || self.memtier_level_tables < 2 {
            return bad("memtier_levels must be between 1 and 8, memtier_level_tables at least 2");
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Regression: with polling on by default, 60,000 updates/s from four
    /// client threads on two cores had a p99 of 40–75 ms instead of 7–9
    /// (`docs/engine.md`, "Write path"). Polling is for a caller who
    /// measured that it pays, never the default.
    #[test]
    fn waiting_writers_sleep_at_once_by_default() {
        assert_eq!(Settings::default().write_thread_max_yield_usec, 0);
    }

    /// Every setting reads back what `get` shows, and TOML round-trips the
    /// whole struct (including `off` for optional values).
    #[test]
    fn every_setting_round_trips_through_text_and_toml() {
        let mut s = Settings {
            blob_threshold: None,
            background_rate_limit: Some(1 << 20),
            memtier_size: Some(1 << 30),
            memtier_path: Some("tier".into()),
            background_cpu_priority: CpuPriority::Idle,
            ..Settings::default()
        };
        for name in Settings::NAMES {
            let text = s.get(name).unwrap();
            let before = s.clone();
            s.set(name, &text).unwrap();
            assert_eq!(s, before, "{name} = {text}");
        }
        let toml = toml::to_string(&s).unwrap();
        let back: Settings = toml::from_str(&toml).unwrap();
        assert_eq!(back, s, "{toml}");
        assert!(Settings::help().iter().all(|(_, doc)| !doc.is_empty()));
    }

    #[test]
    fn sorted_value_runs_above_takes_memory_or_a_size() {
        let mut s = Settings::default();
        assert_eq!(s.sorted_value_runs_above, BytesOrMemory::Memory);
        s.set("sorted_value_runs_above", "4G").unwrap();
        assert_eq!(s.sorted_value_runs_above, BytesOrMemory::Bytes(4 << 30));
        let toml = toml::to_string(&s).unwrap();
        assert_eq!(toml::from_str::<Settings>(&toml).unwrap(), s, "{toml}");
        s.set("sorted_value_runs_above", "Memory").unwrap();
        assert_eq!(s.sorted_value_runs_above, BytesOrMemory::Memory);
        let err = s.set("sorted_value_runs_above", "lots").unwrap_err();
        assert!(err.to_string().contains("or memory"), "{err}");
        let t: Settings = toml::from_str("sorted_value_runs_above = 0").unwrap();
        assert_eq!(t.sorted_value_runs_above, BytesOrMemory::Bytes(0));
    }

    #[test]
    fn with_direct_reads_memory_means_the_block_cache() {
        let s = Settings {
            use_direct_reads: true,
            block_cache_capacity: 256 << 10,
            ..Settings::default()
        };
        assert_eq!(s.sorted_runs_threshold(), 256 << 10);
        let buffered = Settings {
            use_direct_reads: false,
            ..s.clone()
        };
        assert_eq!(
            buffered.sorted_runs_threshold(),
            super::super::process_memory()
        );
        let fixed = Settings {
            sorted_value_runs_above: BytesOrMemory::Bytes(5),
            ..s
        };
        assert_eq!(fixed.sorted_runs_threshold(), 5);
    }

    #[test]
    fn set_all_applies_pairs_in_order_and_stops_at_a_bad_one() {
        let mut s = Settings::default();
        s.set_all([
            ("block_size", "8K"),
            ("block_size", "16K"),
            ("blob_threshold", "off"),
        ])
        .unwrap();
        assert_eq!((s.block_size, s.blob_threshold), (16 << 10, None));
        let err = s
            .set_all(vec![
                ("bloom_bits_per_key".to_string(), "5".to_string()),
                ("bloom_bits_per_key".to_string(), "many".to_string()),
            ])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bloom_bits_per_key") && err.contains("many"),
            "{err}"
        );
        assert_eq!(s.bloom_bits_per_key, 5);
    }

    #[test]
    fn text_forms() {
        let mut s = Settings::default();
        s.set("write_buffer_size", "16M").unwrap();
        assert_eq!(s.write_buffer_size, 16 << 20);
        s.set("target_file_size", "2KiB").unwrap();
        assert_eq!(s.target_file_size, 2048);
        s.set("blob_threshold", "off").unwrap();
        assert_eq!(s.blob_threshold, None);
        s.set("blob_threshold", "0").unwrap();
        assert_eq!(s.blob_threshold, Some(0));
        s.set("enable_gc", "off").unwrap();
        assert!(!s.enable_gc);
        s.set("compression_per_level", "none,zstd").unwrap();
        assert_eq!(
            s.compression_per_level,
            vec![Compression::None, Compression::Zstd]
        );
        s.set("gc_garbage_ratio", "0.25").unwrap();
        assert_eq!(s.gc_garbage_ratio, 0.25);
        // TOML takes the same text forms as `set`.
        let t: Settings = toml::from_str(
            "write_buffer_size = \"16M\"\nenable_gc = \"off\"\ncompression_per_level = \"none,zstd\"\nblob_threshold = \"OFF\"",
        )
        .unwrap();
        assert_eq!(t.write_buffer_size, 16 << 20);
        assert!(!t.enable_gc);
        assert_eq!(t.compression_per_level, s.compression_per_level);
        assert_eq!(t.blob_threshold, None);
    }

    #[test]
    fn a_polling_time_over_ten_milliseconds_is_refused() {
        let mut s = Settings::default();
        s.set("write_thread_max_yield_usec", "10000").unwrap();
        assert!(s.validate().is_ok());
        s.set("write_thread_max_yield_usec", "10001").unwrap();
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("write_thread_max_yield_usec"), "{e}");
    }

    #[test]
    fn bad_names_and_values_say_what_is_wrong() {
        let mut s = Settings::default();
        let e = s.set("write_bufer_size", "1").unwrap_err().to_string();
        assert!(
            e.contains("unknown setting") && e.contains("write_buffer_size"),
            "{e}"
        );
        let e = s.set("write_buffer_size", "lots").unwrap_err().to_string();
        assert!(
            e.contains("write_buffer_size") && e.contains("not a number"),
            "{e}"
        );
        let e = s.set("bloom_bits_per_key", "8G").unwrap_err().to_string();
        assert!(e.contains("too large"), "{e}");
        let e = s
            .set("compression_per_level", "lz5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("none, lz4, zstd"), "{e}");
        let e = toml::from_str::<Settings>("write_bufer_size = 1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("write_bufer_size"), "{e}");
        let e = toml::from_str::<Settings>("blob_threshold = \"sometimes\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("off"), "{e}");
    }
}
