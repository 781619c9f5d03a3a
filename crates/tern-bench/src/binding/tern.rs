//! The embedded Tern engine. Options come from `-p tern.<option>=value`
//! (sizes accept K/M/G suffixes), e.g. `-p tern.write_buffer_size=64M`.

use std::path::{Path, PathBuf};

use tern::{Compression, Db, Options, ReadOptions, WriteOptions};

use super::{parse_size, Binding, EngineStats, ReadResult};
use crate::props::Properties;
use crate::{Error, Result};

/// Tern, opened in-process.
#[derive(Debug)]
pub struct TernBinding {
    db: Db,
    dir: PathBuf,
    write_opts: WriteOptions,
}

fn size<T: TryFrom<u64>>(name: &str, v: &str) -> Result<T> {
    parse_size(v)
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| Error(format!("tern.{name}: {v:?} is not a size")))
}

fn compression(v: &str) -> Result<Compression> {
    match v.to_ascii_lowercase().as_str() {
        "none" | "no" => Ok(Compression::None),
        "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd),
        _ => Err(Error(format!(
            "unknown compression {v:?} (none, lz4, zstd)"
        ))),
    }
}

/// Applies `tern.*` properties to engine options and write options.
pub fn apply_options(props: &Properties) -> Result<(Options, WriteOptions)> {
    let mut o = Options::default();
    let mut w = WriteOptions::default();
    for (name, v) in props.with_prefix("tern.") {
        let v = v.as_str();
        match name.as_str() {
            "write_buffer_size" => o.write_buffer_size = size(&name, v)?,
            "max_write_buffer_number" => o.max_write_buffer_number = size(&name, v)?,
            "level0_file_num_compaction_trigger" => {
                o.level0_file_num_compaction_trigger = size(&name, v)?
            }
            "level0_slowdown_writes_trigger" => o.level0_slowdown_writes_trigger = size(&name, v)?,
            "level0_stop_writes_trigger" => o.level0_stop_writes_trigger = size(&name, v)?,
            "max_bytes_for_level_base" => o.max_bytes_for_level_base = size(&name, v)?,
            "max_bytes_for_level_multiplier" => o.max_bytes_for_level_multiplier = size(&name, v)?,
            "dynamic_level_bytes" => o.dynamic_level_bytes = v == "true" || v == "1",
            "target_file_size" => o.target_file_size = size(&name, v)?,
            "block_size" => o.block_size = size(&name, v)?,
            "block_restart_interval" => o.block_restart_interval = size(&name, v)?,
            "bloom_bits_per_key" => o.bloom_bits_per_key = size(&name, v)?,
            "block_cache_capacity" | "cache_size" => o.block_cache_capacity = size(&name, v)?,
            "max_open_files" => o.max_open_files = size(&name, v)?,
            "open_files_memory" => o.open_files_memory = size(&name, v)?,
            "max_write_group_bytes" => o.max_write_group_bytes = size(&name, v)?,
            "compression" => {
                let c = compression(v)?;
                o.compression_per_level = vec![c];
            }
            "compression_per_level" => {
                o.compression_per_level =
                    v.split(',').map(compression).collect::<Result<Vec<_>>>()?;
            }
            "blob_threshold" | "min_blob_size" => {
                o.blob_threshold = if v == "off" || v == "none" {
                    None
                } else {
                    Some(size(&name, v)?)
                }
            }
            "blob_file_size" => o.blob_file_size = size(&name, v)?,
            "enable_gc" | "gc" => o.enable_gc = v == "true" || v == "1" || v == "on",
            "gc_garbage_ratio" => {
                o.gc_garbage_ratio = v
                    .parse()
                    .map_err(|_| Error(format!("tern.{name}: {v:?} is not a ratio in (0, 1]")))?
            }
            "gc_max_batch_bytes" => o.gc_max_batch_bytes = size(&name, v)?,
            "gc_max_batch_files" => o.gc_max_batch_files = size(&name, v)?,
            "background_rate_limit" => o.background_rate_limit = Some(size(&name, v)?),
            "sync" => w.sync = v == "true" || v == "1",
            "disable_wal" => w.disable_wal = v == "true" || v == "1",
            other => {
                return Err(Error(format!(
                    "unknown Tern option tern.{other} (see `tern bench --help` for the list)"
                )))
            }
        }
    }
    o.validate()?;
    Ok((o, w))
}

impl TernBinding {
    /// Opens (creating) a store in `dir`.
    pub fn open(dir: &Path, props: &Properties) -> Result<Self> {
        let (opts, write_opts) = apply_options(props)?;
        let db = Db::open(dir, opts)?;
        Ok(TernBinding {
            db,
            dir: dir.to_path_buf(),
            write_opts,
        })
    }
}

impl Binding for TernBinding {
    fn name(&self) -> &str {
        "tern"
    }

    fn read(&self, key: &[u8]) -> ReadResult {
        Ok(self.db.get(key)?)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.write_opts.sync || self.write_opts.disable_wal {
            let mut b = tern::WriteBatch::new();
            b.put(key, value);
            self.db.write(b, self.write_opts)?;
        } else {
            self.db.put(key, value)?;
        }
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete(key)?)
    }

    fn scan(
        &self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut it = self.db.iter(ReadOptions {
            lower_bound: Some(start.to_vec()),
            ..Default::default()
        })?;
        it.seek(start);
        let mut n = 0;
        while n < count && it.valid() {
            visit(it.key(), it.value());
            n += 1;
            it.next();
        }
        it.status()?;
        Ok(n)
    }

    fn stats(&self) -> EngineStats {
        let s = self.db.stats();
        EngineStats {
            compaction_read: Some(s.compaction_bytes_read),
            compaction_write: Some(s.compaction_bytes_written),
            flush_write: Some(s.flush_bytes_written),
            gc_read: Some(s.gc_bytes_read),
            gc_write: Some(s.gc_bytes_written),
            stall_micros: Some(s.stall_micros),
            engine_disk_bytes: Some(s.disk_bytes()),
        }
    }

    fn data_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn settle(&self) -> Result<()> {
        self.db.flush()?;
        self.db.wait_for_background()?;
        Ok(())
    }

    fn close(&self) -> Result<()> {
        Ok(self.db.close()?)
    }
}
