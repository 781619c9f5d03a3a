//! RocksDB and its integrated BlobDB (`rocksdb-blob`), through the
//! `rocksdb` crate linked against the system librocksdb.
//!
//! Both start from settings that mirror Tern's defaults (64 MiB memtables,
//! 256 MiB base level, 64 MiB files, dynamic level sizes, 10-bit Bloom
//! filters, a 64 MiB block cache, no compression on L0–L1 and LZ4 below,
//! two background jobs for this 2-core machine). BlobDB is configured as
//! AegonKV's baseline: 32 MiB blob files, garbage collection on with age
//! cutoff 0.5 and force threshold 0.5; values of `rocksdb.min_blob_size`
//! bytes (default 512) or more go to blob files.
//!
//! Overrides: `-p rocksdb.<name>=value` for `write_buffer_size`,
//! `max_write_buffer_number`, `max_background_jobs`,
//! `max_bytes_for_level_base`, `target_file_size_base`, `cache_size`,
//! `min_blob_size`, `blob_file_size`, `blob_gc_age_cutoff`,
//! `blob_gc_force_threshold`, `sync`, `statistics`, and
//! `background_cpu_priority=low` (RocksDB's `LowerThreadPoolCPUPriority`
//! on the compaction pool: nice 19 for compaction and BlobDB's GC inside
//! it, flush untouched; Tern's `tern.background_cpu_priority=low`). The
//! default environment is one per process, so once lowered it stays
//! lowered for every RocksDB store the process opens after.
//!
//! Statistics (`enable_statistics`) stay off unless
//! `-p rocksdb.statistics=true`: they cost RocksDB time on every operation,
//! and no other engine pays for its counters. Background-work numbers then
//! come from the `rocksdb.stats` property, which RocksDB keeps anyway.

use std::path::{Path, PathBuf};

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Env, Options, WriteOptions, DB};

use super::{flag, parse_size, wait_idle, Binding, EngineStats, ReadResult};
use crate::props::Properties;
use crate::{Error, Result};

/// An embedded RocksDB.
pub struct RocksBinding {
    db: DB,
    opts: Options,
    dir: PathBuf,
    label: &'static str,
    sync: bool,
    statistics: bool,
}

impl std::fmt::Debug for RocksBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksBinding")
            .field("dir", &self.dir)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

fn err(e: rocksdb::Error) -> Error {
    Error(format!("rocksdb: {e}"))
}

impl RocksBinding {
    /// Opens a store in `dir`; `blob` turns on BlobDB.
    pub fn open(dir: &Path, props: &Properties, blob: bool) -> Result<Self> {
        let get = |name: &str, default: u64| -> Result<u64> {
            match props.get(&format!("rocksdb.{name}")) {
                None => Ok(default),
                Some(v) => {
                    parse_size(v).ok_or_else(|| Error(format!("rocksdb.{name}: bad value {v:?}")))
                }
            }
        };
        let getf = |name: &str, default: f64| -> Result<f64> {
            props.parse_or(&format!("rocksdb.{name}"), default)
        };
        let mut o = Options::default();
        o.create_if_missing(true);
        let get_flag = |name: &str| -> Result<bool> {
            let prop = format!("rocksdb.{name}");
            props.get(&prop).map_or(Ok(false), |v| flag(&prop, v))
        };
        o.set_use_direct_reads(get_flag("use_direct_reads")?);
        o.set_use_direct_io_for_flush_and_compaction(get_flag(
            "use_direct_io_for_flush_and_compaction",
        )?);
        let statistics = get_flag("statistics")?;
        if statistics {
            o.enable_statistics();
        }
        o.set_write_buffer_size(get("write_buffer_size", 64 << 20)? as usize);
        o.set_max_write_buffer_number(get("max_write_buffer_number", 3)? as i32);
        o.set_max_background_jobs(get("max_background_jobs", 2)? as i32);
        o.set_level_compaction_dynamic_level_bytes(true);
        o.set_max_bytes_for_level_base(get("max_bytes_for_level_base", 256 << 20)?);
        o.set_target_file_size_base(get("target_file_size_base", 64 << 20)?);
        o.set_compression_per_level(&[
            DBCompressionType::None,
            DBCompressionType::None,
            DBCompressionType::Lz4,
            DBCompressionType::Lz4,
            DBCompressionType::Lz4,
            DBCompressionType::Lz4,
            DBCompressionType::Lz4,
        ]);
        let mut t = BlockBasedOptions::default();
        let cache = Cache::new_lru_cache(get("cache_size", 64 << 20)? as usize).map_err(err)?;
        t.set_block_cache(&cache);
        t.set_bloom_filter(10.0, false);
        o.set_block_based_table_factory(&t);
        if blob {
            o.set_enable_blob_files(true);
            o.set_min_blob_size(get("min_blob_size", 512)?);
            o.set_blob_file_size(get("blob_file_size", 32 << 20)?);
            o.set_enable_blob_gc(true);
            o.set_blob_gc_age_cutoff(getf("blob_gc_age_cutoff", 0.5)?);
            o.set_blob_gc_force_threshold(getf("blob_gc_force_threshold", 0.5)?);
        }
        match props.get("rocksdb.background_cpu_priority") {
            None | Some("normal") => {}
            Some("low") => {
                let mut env = Env::new().map_err(err)?;
                env.lower_thread_pool_cpu_priority();
                o.set_env(&env);
            }
            Some(other) => {
                return Err(Error(format!(
                    "rocksdb.background_cpu_priority: bad value {other:?} (normal or low)"
                )))
            }
        }
        let db = DB::open(&o, dir).map_err(err)?;
        Ok(RocksBinding {
            db,
            opts: o,
            dir: dir.to_path_buf(),
            label: if blob { "rocksdb-blob" } else { "rocksdb" },
            sync: get_flag("sync")?,
            statistics,
        })
    }

    fn ticker(text: &str, name: &str) -> Option<u64> {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.trim_start();
            let rest = rest.strip_prefix("COUNT :")?;
            rest.trim().parse().ok()
        })
    }
}

impl Binding for RocksBinding {
    fn name(&self) -> &str {
        self.label
    }

    fn read(&self, key: &[u8]) -> ReadResult {
        self.db.get(key).map_err(err)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.sync {
            let mut w = WriteOptions::default();
            w.set_sync(true);
            self.db.put_opt(key, value, &w).map_err(err)
        } else {
            self.db.put(key, value).map_err(err)
        }
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.db.delete(key).map_err(err)
    }

    fn scan(
        &self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut n = 0;
        while n < count && it.valid() {
            if let (Some(k), Some(v)) = (it.key(), it.value()) {
                visit(k, v);
            }
            n += 1;
            it.next();
        }
        it.status().map_err(err)?;
        Ok(n)
    }

    fn stats(&self) -> EngineStats {
        let live = self
            .db
            .property_int_value("rocksdb.live-sst-files-size")
            .ok()
            .flatten();
        let blobs = self
            .db
            .property_int_value("rocksdb.live-blob-file-size")
            .ok()
            .flatten();
        let engine_disk_bytes = live.map(|l| l + blobs.unwrap_or(0));
        if !self.statistics {
            let text = self
                .db
                .property_value("rocksdb.stats")
                .ok()
                .flatten()
                .unwrap_or_default();
            return EngineStats {
                engine_disk_bytes,
                ..stats_from_property(&text)
            };
        }
        let text = self.opts.get_statistics().unwrap_or_default();
        let t = |n: &str| Self::ticker(&text, n);
        let blob = self.label == "rocksdb-blob";
        EngineStats {
            compaction_read: t("rocksdb.compact.read.bytes"),
            compaction_write: t("rocksdb.compact.write.bytes"),
            flush_write: t("rocksdb.flush.write.bytes"),
            gc_read: if blob {
                t("rocksdb.blobdb.gc.bytes.relocated")
            } else {
                None
            },
            gc_write: if blob {
                t("rocksdb.blobdb.gc.bytes.relocated")
            } else {
                None
            },
            stall_micros: t("rocksdb.stall.micros"),
            engine_disk_bytes,
        }
    }

    fn data_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn settle(&self) -> Result<()> {
        self.db.flush().map_err(err)?;
        // Let pending compactions finish, as Tern's settle does.
        let int = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        wait_idle(self.label, 1, || {
            int("rocksdb.compaction-pending") > 0 || int("rocksdb.num-running-compactions") > 0
        })
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// Background-work counters from the text of the `rocksdb.stats` property:
/// `Cumulative compaction: W GB write, … R GB read`, `Flush(GB): cumulative
/// F` and `Cumulative stall: H:M:S`. Compaction totals there include the
/// flushes (level 0's row) and, with BlobDB, the blob files compaction
/// writes, which is where BlobDB's GC relocates values; so GC has no
/// separate figure and is counted in compaction.
fn stats_from_property(text: &str) -> EngineStats {
    let after = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(prefix).map(str::trim))
    };
    let gb = |s: &str| s.parse::<f64>().ok().map(|v| (v * GIB) as u64);
    let flush = after("Flush(GB): cumulative")
        .and_then(|r| r.split(',').next())
        .and_then(|v| gb(v.trim()));
    let (mut write, mut read) = (None, None);
    if let Some(rest) = after("Cumulative compaction:") {
        for part in rest.split(',') {
            let part = part.trim();
            if let Some(v) = part.strip_suffix(" GB write") {
                write = gb(v);
            } else if let Some(v) = part.strip_suffix(" GB read") {
                read = gb(v);
            }
        }
    }
    let stall_micros = after("Cumulative stall:")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|hms| {
            let mut it = hms.split(':');
            let h: f64 = it.next()?.parse().ok()?;
            let m: f64 = it.next()?.parse().ok()?;
            let s: f64 = it.next()?.parse().ok()?;
            Some(((h * 3600.0 + m * 60.0 + s) * 1e6) as u64)
        });
    EngineStats {
        compaction_read: read,
        compaction_write: write.map(|w| w.saturating_sub(flush.unwrap_or(0))),
        flush_write: flush,
        gc_read: None,
        gc_write: None,
        stall_micros,
        engine_disk_bytes: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn background_counters_from_the_stats_property() {
        let text = "\
** Compaction Stats [default] **
Flush(GB): cumulative 0.500, interval 0.000
Cumulative compaction: 2.50 GB write, 10.00 MB/s write, 1.25 GB read, 5.00 MB/s read, 12.3 seconds
** DB Stats **
Cumulative stall: 00:01:2.500 H:M:S, 3.2 percent
";
        let s = stats_from_property(text);
        assert_eq!(s.flush_write, Some(GIB as u64 / 2));
        assert_eq!(s.compaction_write, Some(2 * GIB as u64));
        assert_eq!(s.compaction_read, Some((1.25 * GIB) as u64));
        assert_eq!(s.stall_micros, Some(62_500_000));
        assert_eq!(stats_from_property(""), EngineStats::default());
    }

    #[test]
    fn live_store_reports_flush_and_compaction_without_statistics() {
        let dir = std::env::temp_dir().join(format!("tern-bench-rocks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut props = Properties::new();
        props.set_pair("rocksdb.write_buffer_size=1M").unwrap();
        let db = RocksBinding::open(&dir, &props, false).unwrap();
        let value = vec![3u8; 1000];
        for _ in 0..4 {
            for i in 0..4000u32 {
                db.put(format!("key{i:08}").as_bytes(), &value).unwrap();
            }
            db.db.flush().unwrap();
        }
        db.db.compact_range::<&[u8], &[u8]>(None, None);
        let s = db.stats();
        drop(db);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(s.flush_write.unwrap() > 10 << 20, "{s:?}");
        assert!(s.compaction_write.unwrap() > 0, "{s:?}");
        assert!(s.stall_micros.is_some(), "{s:?}");
    }
}
