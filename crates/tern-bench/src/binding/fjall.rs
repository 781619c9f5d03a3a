//! The fjall LSM store (one partition). fjall does not expose compaction
//! or stall counters, so those metrics are reported as unknown.
//! Options: `-p fjall.cache_size=64M`, `-p fjall.max_write_buffer_size=64M`.

use std::path::{Path, PathBuf};

use fjall::{Config, Keyspace, PartitionCreateOptions, PartitionHandle};

use super::{parse_size, wait_idle, Binding, EngineStats, ReadResult};
use crate::props::Properties;
use crate::{Error, Result};

/// An embedded fjall keyspace.
pub struct FjallBinding {
    keyspace: Keyspace,
    part: PartitionHandle,
    dir: PathBuf,
}

impl std::fmt::Debug for FjallBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallBinding")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn err(e: impl std::fmt::Display) -> Error {
    Error(format!("fjall: {e}"))
}

impl FjallBinding {
    /// Opens a keyspace in `dir`.
    pub fn open(dir: &Path, props: &Properties) -> Result<Self> {
        let size = |name: &str, default: u64| -> Result<u64> {
            match props.get(&format!("fjall.{name}")) {
                None => Ok(default),
                Some(v) => {
                    parse_size(v).ok_or_else(|| Error(format!("fjall.{name}: bad value {v:?}")))
                }
            }
        };
        let keyspace = Config::new(dir)
            .cache_size(size("cache_size", 64 << 20)?)
            .max_write_buffer_size(size("max_write_buffer_size", 192 << 20)?)
            .open()
            .map_err(err)?;
        let part = keyspace
            .open_partition("default", PartitionCreateOptions::default())
            .map_err(err)?;
        Ok(FjallBinding {
            keyspace,
            part,
            dir: dir.to_path_buf(),
        })
    }
}

impl Binding for FjallBinding {
    fn name(&self) -> &str {
        "fjall"
    }

    fn read(&self, key: &[u8]) -> ReadResult {
        Ok(self.part.get(key).map_err(err)?.map(|v| v.to_vec()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.part.insert(key, value).map_err(err)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.part.remove(key).map_err(err)
    }

    fn scan(
        &self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut n = 0;
        for kv in self.part.range(start.to_vec()..).take(count) {
            let (k, v) = kv.map_err(err)?;
            visit(&k, &v);
            n += 1;
        }
        Ok(n)
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            engine_disk_bytes: Some(self.keyspace.disk_space()),
            ..Default::default()
        }
    }

    fn data_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn settle(&self) -> Result<()> {
        self.part.rotate_memtable_and_wait().map_err(err)?;
        // fjall schedules compactions after a flush on its own threads and
        // exposes no pending count: wait for three idle polls in a row.
        wait_idle("fjall", 3, || self.keyspace.active_compactions() > 0)
    }
}
