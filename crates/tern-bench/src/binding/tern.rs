//! The embedded Tern engine. Options come from `-p tern.<option>=value`
//! (sizes accept K/M/G suffixes), e.g. `-p tern.write_buffer_size=64M`.

use std::path::{Path, PathBuf};

use tern::{Db, Options, ReadOptions, Settings, WriteOptions};

use super::tern_offload::{Offload, OffloadProps};
use super::{flag, Binding, EngineStats, ReadResult};
use crate::props::Properties;
use crate::{Error, Result};

/// Tern, opened in-process.
#[derive(Debug)]
pub struct TernBinding {
    db: Db,
    dir: PathBuf,
    write_opts: WriteOptions,
    /// Set for `tern@offload`; dropped after `db`.
    offload: Option<Offload>,
}

/// Older names `-p tern.` accepts, and the settings they mean.
const ALIASES: &[(&str, &str)] = &[
    ("cache_size", "block_cache_capacity"),
    ("min_blob_size", "blob_threshold"),
    ("gc", "enable_gc"),
    // One compression for every level.
    ("compression", "compression_per_level"),
];

/// Applies `tern.*` properties: every [`tern::Settings`] field by its name
/// (`-p tern.write_buffer_size=64M`), plus `sync` and `disable_wal` for the
/// writes. The `tern.offload*` ones are [`OffloadProps`]'s.
pub fn apply_options(props: &Properties) -> Result<(Options, WriteOptions)> {
    let mut settings = Settings::default();
    let mut w = WriteOptions::default();
    for (name, v) in props.with_prefix("tern.") {
        let v = v.as_str();
        match name.as_str() {
            n if OffloadProps::owns(n) => {}
            "sync" => w.sync = flag("tern.sync", v)?,
            "disable_wal" => w.disable_wal = flag("tern.disable_wal", v)?,
            other => {
                let setting = ALIASES
                    .iter()
                    .find(|(alias, _)| *alias == other)
                    .map_or(other, |(_, s)| s);
                settings.set(setting, v).map_err(|e| {
                    Error(format!(
                        "-p tern.{other}={v}: {e} (see `tern bench --help` and docs/bench.md)"
                    ))
                })?;
            }
        }
    }
    settings.validate()?;
    Ok((Options::new(settings), w))
}

impl TernBinding {
    /// Opens (creating) a store in `dir`.
    pub fn open(dir: &Path, props: &Properties) -> Result<Self> {
        let (opts, write_opts) = apply_options(props)?;
        let offload = match OffloadProps::parse(&props.with_prefix("tern."))? {
            Some(o) => Some(Offload::start(&o, dir)?),
            None => None,
        };
        let executor = offload
            .as_ref()
            .map(|o| o.executor.clone() as std::sync::Arc<dyn tern::compaction::Executor>);
        let db = Db::open_with_executor(dir, opts, executor)?;
        Ok(TernBinding {
            db,
            dir: dir.to_path_buf(),
            write_opts,
            offload,
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
            scan_len_hint: Some(count),
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
        self.db.close()?;
        if let Some(o) = &self.offload {
            eprintln!("{}", o.summary());
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn props(pairs: &[&str]) -> Properties {
        let mut p = Properties::new();
        for pair in pairs {
            p.set_pair(pair).unwrap();
        }
        p
    }

    #[test]
    fn every_setting_by_name_plus_aliases_and_write_options() {
        let (o, w) = apply_options(&props(&[
            "tern.write_buffer_size=32M",
            "tern.background_rate_limit=100M",
            "tern.disable_auto_compactions=true",
            "tern.compression=zstd",
            "tern.min_blob_size=off",
            "tern.gc=off",
            "tern.sync=true",
        ]))
        .unwrap();
        assert_eq!(o.write_buffer_size, 32 << 20);
        assert_eq!(o.background_rate_limit, Some(100 << 20));
        assert!(o.disable_auto_compactions);
        assert_eq!(o.compression_per_level, vec![tern::Compression::Zstd]);
        assert_eq!(o.blob_threshold, None);
        assert!(!o.enable_gc);
        assert!(w.sync && !w.disable_wal);
    }

    #[test]
    fn unknown_and_invalid_settings_are_errors() {
        let e = apply_options(&props(&["tern.write_bufer_size=1M"])).unwrap_err();
        assert!(e.to_string().contains("unknown setting"), "{e}");
        let e = apply_options(&props(&["tern.max_write_buffer_number=1"])).unwrap_err();
        assert!(e.to_string().contains("max_write_buffer_number"), "{e}");
    }
}
