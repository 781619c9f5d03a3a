//! Tern's hash engine (`tern-hash`): point reads, writes and deletes over a
//! hybrid log; no ordered scans (workload E is refused). Options, from
//! `-p hash.<name>=value` (or `tern-hash@name=value`):
//! `memory` (in-memory log, default 256M), `page_bits` (22),
//! `mutable_fraction` (0.9), `index_bits` (20), `segment_bits` (30),
//! `checkpoint_ms` (1000; 0: only at settle and close) and
//! `log_size_limit` (a size, or `off`).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tern_hash::{HashOptions, HashStore, Session};

use super::{parse_size, Binding, EngineStats, ReadResult};
use crate::props::Properties;
use crate::{Error, Result};

thread_local! {
    /// Each client thread's sessions, by store.
    static SESSIONS: RefCell<Vec<(usize, Session)>> = const { RefCell::new(Vec::new()) };
}

fn err(e: impl std::fmt::Display) -> Error {
    Error(format!("tern-hash: {e}"))
}

/// A hash store, opened in-process; each client thread gets a session.
pub struct HashBinding {
    store: Arc<HashStore>,
    dir: PathBuf,
}

impl std::fmt::Debug for HashBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashBinding")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The store's options from `hash.*` properties.
pub fn hash_options(props: &Properties) -> Result<HashOptions> {
    let mut o = HashOptions::default();
    let mut memory: Option<u64> = None;
    let mut fraction = 0.9f64;
    for (name, v) in props.with_prefix("hash.") {
        let bad = || {
            Error(format!(
                "-p hash.{name}={v}: not a valid value (see docs/bench.md)"
            ))
        };
        let int = || v.parse::<u32>().map_err(|_| bad());
        match name.as_str() {
            "memory" => memory = Some(parse_size(&v).ok_or_else(bad)?),
            "page_bits" => o.page_bits = int()?,
            "index_bits" => o.index_bits = int()?,
            "segment_bits" => o.segment_bits = int()?,
            "mutable_fraction" => {
                fraction = v.parse().map_err(|_| bad())?;
                if !(0.0..=1.0).contains(&fraction) {
                    return Err(bad());
                }
            }
            "checkpoint_ms" => {
                let ms = v.parse::<u64>().map_err(|_| bad())?;
                o.checkpoint_interval = (ms > 0).then(|| Duration::from_millis(ms));
            }
            "log_size_limit" => {
                o.log_size_limit = match v.as_str() {
                    "off" | "none" => None,
                    s => Some(parse_size(s).ok_or_else(bad)?),
                }
            }
            other => {
                return Err(Error(format!(
                    "unknown tern-hash option hash.{other}; known: memory, page_bits, \
                     mutable_fraction, index_bits, segment_bits, checkpoint_ms, log_size_limit"
                )))
            }
        }
    }
    let page = 1u64 << o.page_bits;
    let pages = (memory.unwrap_or(256 << 20) / page).max(2);
    o.memory_pages = u32::try_from(pages).map_err(|_| err("hash.memory is too large"))?;
    o.mutable_pages = ((pages as f64 * fraction) as u32).clamp(1, o.memory_pages - 1);
    o.validate().map_err(err)?;
    Ok(o)
}

impl HashBinding {
    /// Opens (creating) a store in `dir`.
    pub fn open(dir: &Path, props: &Properties) -> Result<Self> {
        let store = HashStore::open(dir, hash_options(props)?).map_err(err)?;
        Ok(HashBinding {
            store,
            dir: dir.to_path_buf(),
        })
    }

    fn with_session<R>(&self, f: impl FnOnce(&mut Session) -> R) -> R {
        let id = Arc::as_ptr(&self.store) as usize;
        SESSIONS.with(|cell| {
            let mut sessions = cell.borrow_mut();
            let at = match sessions.iter().position(|(s, _)| *s == id) {
                Some(at) => at,
                None => {
                    sessions.push((id, self.store.session()));
                    sessions.len() - 1
                }
            };
            f(&mut sessions[at].1)
        })
    }
}

impl Binding for HashBinding {
    fn name(&self) -> &str {
        "tern-hash"
    }

    fn read(&self, key: &[u8]) -> ReadResult {
        self.with_session(|s| s.get(key)).map_err(err)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.with_session(|s| s.upsert(key, value)).map_err(err)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.with_session(|s| s.delete(key)).map_err(err)
    }

    fn scan(
        &self,
        _start: &[u8],
        _count: usize,
        _visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        Err(err(
            "the hash engine has no ordered scans; run scan workloads on an LSM binding",
        ))
    }

    fn stats(&self) -> EngineStats {
        let s = self.store.stats();
        EngineStats {
            flush_write: Some(s.flushed),
            compaction_write: Some(s.compacted_bytes),
            stall_micros: None,
            engine_disk_bytes: Some(s.flushed.saturating_sub(s.begin)),
            ..Default::default()
        }
    }

    fn data_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn settle(&self) -> Result<()> {
        self.store.checkpoint().map_err(err)?;
        Ok(())
    }

    fn close(&self) -> Result<()> {
        self.store.checkpoint().map_err(err)?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn options_from_properties() {
        let mut p = Properties::new();
        p.set("hash.memory", "64M");
        p.set("hash.page_bits", "20");
        p.set("hash.mutable_fraction", "0.5");
        p.set("hash.checkpoint_ms", "0");
        let o = hash_options(&p).unwrap();
        assert_eq!((o.memory_pages, o.mutable_pages, o.page_bits), (64, 32, 20));
        assert_eq!(o.checkpoint_interval, None);
        p.set("hash.nope", "1");
        assert!(hash_options(&p)
            .unwrap_err()
            .to_string()
            .contains("hash.nope"));
    }

    #[test]
    fn reads_back_across_threads_and_refuses_scans() {
        let d = tempfile::tempdir().unwrap();
        let b = Arc::new(HashBinding::open(d.path(), &Properties::new()).unwrap());
        std::thread::scope(|s| {
            for t in 0..3u8 {
                let b = b.clone();
                s.spawn(move || {
                    for i in 0..500u32 {
                        b.put(format!("{t}-{i}").as_bytes(), &[t; 100]).unwrap();
                    }
                });
            }
        });
        assert_eq!(b.read(b"2-499").unwrap(), Some(vec![2; 100]));
        b.delete(b"2-499").unwrap();
        assert_eq!(b.read(b"2-499").unwrap(), None);
        assert!(b.scan(b"", 10, &mut |_, _| {}).is_err());
        b.settle().unwrap();
        assert!(b.stats().flush_write.unwrap() > 0);
    }
}
