//! Engines the harness drives, behind one trait.
//!
//! Bindings: `tern` (embedded), `tern-hash` (the hash engine), `rocksdb` and `rocksdb-blob` (feature
//! `rocksdb`), `fjall` (feature `fjall`) and `resp://host:port` (any
//! Redis-protocol server).

#[cfg(feature = "fjall")]
pub mod fjall;
pub mod resp;
pub mod resp_cluster;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
pub mod tern;
pub mod tern_hash;
pub mod tern_offload;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::props::Properties;
use crate::{Error, Result};

/// Counters an engine reports about its background work. `None`: the engine
/// does not expose it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct EngineStats {
    /// Bytes read by compactions.
    pub compaction_read: Option<u64>,
    /// Bytes written by compactions.
    pub compaction_write: Option<u64>,
    /// Bytes written by memtable flushes.
    pub flush_write: Option<u64>,
    /// Bytes read by value-log garbage collection.
    pub gc_read: Option<u64>,
    /// Bytes written by value-log garbage collection.
    pub gc_write: Option<u64>,
    /// Microseconds writers were stalled.
    pub stall_micros: Option<u64>,
    /// Bytes the engine itself counts as live on disk (tables, logs).
    pub engine_disk_bytes: Option<u64>,
}

impl EngineStats {
    /// Counters accumulated since `base` (a snapshot taken earlier).
    pub fn since(&self, base: &EngineStats) -> EngineStats {
        let d = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_sub(b)),
            (a, _) => a,
        };
        EngineStats {
            compaction_read: d(self.compaction_read, base.compaction_read),
            compaction_write: d(self.compaction_write, base.compaction_write),
            flush_write: d(self.flush_write, base.flush_write),
            gc_read: d(self.gc_read, base.gc_read),
            gc_write: d(self.gc_write, base.gc_write),
            stall_micros: d(self.stall_micros, base.stall_micros),
            engine_disk_bytes: self.engine_disk_bytes,
        }
    }
}

/// Outcome of a point read.
pub type ReadResult = Result<Option<Vec<u8>>>;

/// One engine, shared by all client threads.
pub trait Binding: Send + Sync {
    /// Short name (`tern`, `rocksdb`, …).
    fn name(&self) -> &str;
    /// Reads `key`.
    fn read(&self, key: &[u8]) -> ReadResult;
    /// Writes `key` = `value` (insert and update are the same for a KV store).
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Deletes `key`.
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Reads up to `count` entries starting at the first key `>= start`,
    /// passing each to `visit`; returns how many were read.
    fn scan(
        &self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize>;
    /// Background-work counters (cumulative since open).
    fn stats(&self) -> EngineStats;
    /// Directory holding the engine's files, sampled for space on disk.
    fn data_dir(&self) -> Option<&Path>;
    /// Flushes memtables and waits for background work (end of a load).
    fn settle(&self) -> Result<()> {
        Ok(())
    }
    /// Closes the engine cleanly.
    fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// Names accepted by `--db`.
pub const BINDINGS: &[&str] = &[
    "tern",
    "tern-hash",
    "rocksdb",
    "rocksdb-blob",
    "fjall",
    "resp://HOST:PORT",
    "resp-cluster://HOST:PORT,HOST:PORT",
];

/// Opens binding `name` on directory `dir`, configured from `props`
/// (`tern.*`, `rocksdb.*`, `fjall.*`). A variant of a binding takes its own
/// options after `@`, e.g. `tern@gc=off,blob_threshold=off` (same as
/// `-p tern.gc=off -p tern.blob_threshold=off` for that binding only), so
/// `compare` can run two setups of one engine side by side. A bare name
/// is switched on: `tern@offload` is `tern@offload=on`.
pub fn open(name: &str, dir: &Path, props: &Properties) -> Result<Arc<dyn Binding>> {
    if let Some((base, opts)) = name
        .split_once('@')
        .filter(|_| !name.starts_with("resp://") && !name.starts_with("resp-cluster://"))
    {
        let mut p = props.clone();
        let prefix = match base {
            "tern-hash" => "hash",
            _ => base.split('-').next().unwrap_or(base),
        };
        for pair in opts.split([',', '+']).filter(|s| !s.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, "on"));
            p.set(&format!("{prefix}.{k}"), v);
        }
        return open(base, dir, &p);
    }
    let direct = with_direct_io(name, props)?;
    open_plain(name, dir, direct.as_ref().unwrap_or(props))
}

/// `-p direct_io=true`: the engine reads and writes its files with direct
/// I/O (`O_DIRECT`), bypassing the page cache, so results do not depend on
/// how much of the data the kernel happens to cache. Returns `props` with
/// the binding's own options for it set (where not set already); a
/// binding without direct I/O refuses it rather than run with the page
/// cache.
fn with_direct_io(name: &str, props: &Properties) -> Result<Option<Properties>> {
    let Some(v) = props.get("direct_io") else {
        return Ok(None);
    };
    if !flag("direct_io", v)? {
        return Ok(None);
    }
    let prefix = match name {
        "tern" => "tern",
        "rocksdb" | "rocksdb-blob" => "rocksdb",
        other => {
            return Err(Error(format!(
                "{other} has no direct I/O setting here: leave it out of --bindings or drop \
                 -p direct_io (bindings with one: tern, rocksdb, rocksdb-blob)"
            )))
        }
    };
    let mut p = props.clone();
    for option in ["use_direct_reads", "use_direct_io_for_flush_and_compaction"] {
        let key = format!("{prefix}.{option}");
        if p.get(&key).is_none() {
            p.set(&key, "true");
        }
    }
    Ok(Some(p))
}

/// [`open`] for a binding name without options after `@`.
fn open_plain(name: &str, dir: &Path, props: &Properties) -> Result<Arc<dyn Binding>> {
    if let Some(seeds) = name.strip_prefix("resp-cluster://") {
        return Ok(Arc::new(resp_cluster::RespClusterBinding::connect(
            seeds, props,
        )?));
    }
    if let Some(addr) = name.strip_prefix("resp://") {
        return Ok(Arc::new(resp::RespBinding::connect(addr, props)?));
    }
    match name {
        "tern" => Ok(Arc::new(tern::TernBinding::open(dir, props)?)),
        "tern-hash" => Ok(Arc::new(tern_hash::HashBinding::open(dir, props)?)),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Ok(Arc::new(rocksdb::RocksBinding::open(dir, props, false)?)),
        #[cfg(feature = "rocksdb")]
        "rocksdb-blob" => Ok(Arc::new(rocksdb::RocksBinding::open(dir, props, true)?)),
        #[cfg(feature = "fjall")]
        "fjall" => Ok(Arc::new(fjall::FjallBinding::open(dir, props)?)),
        #[cfg(not(feature = "rocksdb"))]
        "rocksdb" | "rocksdb-blob" => Err(Error::msg(
            "this build has no RocksDB binding: rebuild with `--features rocksdb` \
             (needs librocksdb-dev and libclang-dev, ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu)",
        )),
        #[cfg(not(feature = "fjall"))]
        "fjall" => Err(Error::msg(
            "this build has no fjall binding: rebuild with `--features fjall`",
        )),
        other => Err(Error(format!(
            "unknown binding {other:?}; known: {}",
            BINDINGS.join(", ")
        ))),
    }
}

/// Bytes of all files under `dir` (0 if it does not exist).
pub fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// How long `settle` waits for an engine's background work before giving up.
pub const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Polls `busy` every 100 ms until it has answered false `quiet` times in a
/// row (an engine that schedules work shortly after a flush needs more than
/// one); an error naming `engine` if that takes longer than [`SETTLE_LIMIT`].
pub fn wait_idle(engine: &str, quiet: u32, busy: impl Fn() -> bool) -> Result<()> {
    let start = std::time::Instant::now();
    let mut idle = 0;
    loop {
        if busy() {
            idle = 0;
        } else {
            idle += 1;
            if idle >= quiet {
                return Ok(());
            }
        }
        if start.elapsed() > SETTLE_LIMIT {
            return Err(Error(format!(
                "{engine}: background work still running after {} s",
                SETTLE_LIMIT.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Parses property `name`'s value `v` as a boolean, as the engine's settings
/// take one (`true`/`false`, `on`/`off`, `1`/`0`).
pub fn flag(name: &str, v: &str) -> Result<bool> {
    <bool as ::tern::SettingValue>::parse_setting(v)
        .map_err(|why| Error(format!("{name}: {v:?} {why}")))
}

/// Parses a size with an optional K/M/G/T suffix (powers of 1024), as the
/// engine's size settings take it.
pub fn parse_size(s: &str) -> Option<u64> {
    <u64 as ::tern::SettingValue>::parse_setting(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_idle_needs_quiet_polls_in_a_row() {
        let polls = std::cell::Cell::new(0);
        // Busy, idle, busy, then idle for good.
        let busy = || {
            polls.set(polls.get() + 1);
            matches!(polls.get(), 1 | 3)
        };
        wait_idle("test", 2, busy).unwrap();
        assert_eq!(polls.get(), 5, "two idle polls after the last busy one");
    }

    #[test]
    fn flags_take_the_engine_forms_and_refuse_others() {
        assert!(flag("x.sync", "on").unwrap());
        assert!(!flag("x.sync", "0").unwrap());
        let e = flag("x.sync", "maybe").unwrap_err().to_string();
        assert!(e.contains("x.sync"), "{e}");
    }

    #[test]
    fn direct_io_turns_on_each_engines_own_options_or_is_refused() {
        let mut props = Properties::new();
        assert!(
            with_direct_io("fjall", &props).unwrap().is_none(),
            "off unless asked"
        );
        props.set("direct_io", "true");
        let p = with_direct_io("tern", &props).unwrap().unwrap();
        assert_eq!(p.get("tern.use_direct_reads"), Some("true"));
        assert_eq!(
            p.get("tern.use_direct_io_for_flush_and_compaction"),
            Some("true")
        );
        let p = with_direct_io("rocksdb-blob", &props).unwrap().unwrap();
        assert_eq!(p.get("rocksdb.use_direct_reads"), Some("true"));
        // An engine option set by hand wins.
        props.set("tern.use_direct_reads", "false");
        let p = with_direct_io("tern", &props).unwrap().unwrap();
        assert_eq!(p.get("tern.use_direct_reads"), Some("false"));
        for other in ["fjall", "tern-hash", "resp://127.0.0.1:1"] {
            let e = with_direct_io(other, &props).unwrap_err().to_string();
            assert!(e.contains("direct_io"), "{e}");
        }
        props.set("direct_io", "false");
        assert!(with_direct_io("fjall", &props).unwrap().is_none());
    }

    #[test]
    fn sizes_and_unknown_bindings() {
        assert_eq!(parse_size("64M"), Some(64 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        let d = tempfile::tempdir().unwrap();
        assert!(open("nope", d.path(), &Properties::new()).is_err());
    }
}
