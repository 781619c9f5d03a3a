//! `tern@offload`: the embedded engine with its compactions and GC jobs
//! sent to `tern worker`s. With `-p tern.offload=on` (or the binding name
//! `tern@offload`) the harness starts a coordinator and workers beside
//! the store as child processes; `tern.offload_coordinator` and
//! `tern.offload_shared` point it at a running service instead.
//!
//! | property | default | meaning |
//! |---|---|---|
//! | `tern.offload` | off | start a local service and offload to it |
//! | `tern.offload_workers` | 1 | workers to start |
//! | `tern.offload_slots` | 1 | jobs per worker at once |
//! | `tern.offload_worker_cpus` | — | pin the workers (`taskset -c` list, e.g. `1`) |
//! | `tern.offload_coordinator` | — | use this running coordinator … |
//! | `tern.offload_shared` | — | … and this shared tier |
//! | `tern.offload_fallback` | on | run a job locally when offloading it fails |

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tern_offload::{LocalService, LocalServiceOptions, RemoteExecutor, RemoteOptions};

use super::flag;
use crate::{Error, Result};

/// `tern.offload*` properties, taken out before the engine's settings.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OffloadProps {
    /// Start a local service.
    pub local: bool,
    /// Workers of a local service.
    pub workers: usize,
    /// Slots per worker of a local service.
    pub slots: u32,
    /// CPUs of a local service's workers.
    pub worker_cpus: Option<String>,
    /// A running coordinator.
    pub coordinator: Option<String>,
    /// The running service's shared tier.
    pub shared: Option<String>,
    /// Run failed jobs locally.
    pub fallback: bool,
}

impl OffloadProps {
    /// Whether property `name` (after `tern.`) is one of these.
    pub fn owns(name: &str) -> bool {
        name == "offload" || name.starts_with("offload_")
    }

    /// Parses the `tern.offload*` properties in `pairs` (names without
    /// `tern.`); `None` when offload is off.
    pub fn parse(pairs: &[(String, String)]) -> Result<Option<OffloadProps>> {
        let mut o = OffloadProps {
            workers: 1,
            slots: 1,
            fallback: true,
            ..OffloadProps::default()
        };
        let number = |name: &str, v: &str| -> Result<u64> {
            v.parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error(format!("tern.{name}: {v:?} is not a positive number")))
        };
        for (name, v) in pairs.iter().filter(|(n, _)| Self::owns(n)) {
            match name.as_str() {
                "offload" => o.local = flag("tern.offload", v)?,
                "offload_workers" => o.workers = number(name, v)? as usize,
                "offload_slots" => o.slots = number(name, v)?.min(u64::from(u32::MAX)) as u32,
                "offload_worker_cpus" => o.worker_cpus = Some(v.clone()),
                "offload_coordinator" => o.coordinator = Some(v.clone()),
                "offload_shared" => o.shared = Some(v.clone()),
                "offload_fallback" => o.fallback = flag("tern.offload_fallback", v)?,
                other => {
                    return Err(Error(format!(
                        "unknown property tern.{other}; the offload ones are tern.offload, \
                         offload_workers, offload_slots, offload_worker_cpus, \
                         offload_coordinator, offload_shared, offload_fallback"
                    )))
                }
            }
        }
        match (&o.coordinator, &o.shared) {
            (Some(_), Some(_)) if o.local => Err(Error::msg(
                "tern.offload=on starts its own service: drop tern.offload_coordinator and tern.offload_shared",
            )),
            (Some(_), Some(_)) => Ok(Some(o)),
            (None, None) if o.local => Ok(Some(o)),
            (None, None) => Ok(None),
            _ => Err(Error::msg(
                "tern.offload_coordinator and tern.offload_shared go together",
            )),
        }
    }
}

/// The service and executor behind a `tern@offload` store.
#[derive(Debug)]
pub struct Offload {
    /// The store's executor.
    pub executor: Arc<RemoteExecutor>,
    service: Option<LocalService>,
}

/// The `tern` binary: `TERN_BIN`, else this program (`tern bench`).
fn program() -> Result<PathBuf> {
    match std::env::var_os("TERN_BIN") {
        Some(p) => Ok(PathBuf::from(p)),
        None => std::env::current_exe()
            .map_err(|e| Error(format!("cannot find the tern binary (set TERN_BIN): {e}"))),
    }
}

impl Offload {
    /// Starts what `o` asks for, for the store in `dir`.
    pub fn start(o: &OffloadProps, dir: &Path) -> Result<Offload> {
        let mut base = dir.as_os_str().to_owned();
        base.push(".offload");
        let base = PathBuf::from(base);
        let bad = |e: tern_offload::OffloadError| Error(format!("tern@offload: {e}"));
        let service = if o.local {
            let mut so = LocalServiceOptions::new(&program()?, &base);
            so.workers = o.workers;
            so.slots = o.slots;
            so.worker_cpus = o.worker_cpus.clone();
            Some(LocalService::start(&so).map_err(bad)?)
        } else {
            None
        };
        let (coordinator, shared) = match &service {
            Some(s) => (s.coordinator.clone(), s.shared.clone()),
            None => (
                o.coordinator.clone().unwrap_or_default(),
                o.shared.clone().unwrap_or_default(),
            ),
        };
        let mut ro = RemoteOptions::new(&RemoteOptions::id_for_dir("bench", dir));
        ro.fallback = o.fallback;
        let fs: tern::io::FsRef = Arc::new(tern::io::PosixFs);
        let executor =
            Arc::new(RemoteExecutor::connect(&coordinator, &shared, ro, fs).map_err(bad)?);
        Ok(Offload { executor, service })
    }

    /// One line on what the executor did, for the end of a run.
    pub fn summary(&self) -> String {
        let s = self.executor.stats();
        format!(
            "tern@offload: {} compactions and {} GC jobs ran on workers, {} ran locally \
             ({} after a failed offload); {} MiB uploaded, {} MiB downloaded",
            s.remote_compactions.load(Relaxed),
            s.remote_gcs.load(Relaxed),
            s.local_jobs.load(Relaxed),
            s.fallback_upload.load(Relaxed)
                + s.fallback_remote.load(Relaxed)
                + s.fallback_verify.load(Relaxed),
            s.bytes_uploaded.load(Relaxed) >> 20,
            s.bytes_downloaded.load(Relaxed) >> 20
        )
    }
}

impl Drop for Offload {
    fn drop(&mut self) {
        if let Some(s) = self.service.take() {
            s.stop_and_remove_data();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Option<OffloadProps>> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OffloadProps::parse(&v)
    }

    #[test]
    fn offload_properties_parse_and_refuse_half_configurations() {
        assert_eq!(parse(&[("write_buffer_size", "1M")]).unwrap(), None);
        let o = parse(&[("offload", "on"), ("offload_worker_cpus", "1")])
            .unwrap()
            .unwrap();
        assert!(o.local && o.fallback);
        assert_eq!((o.workers, o.slots), (1, 1));
        assert_eq!(o.worker_cpus.as_deref(), Some("1"));
        let o = parse(&[
            ("offload_coordinator", "http://127.0.0.1:7700"),
            ("offload_shared", "file:///tmp/x"),
            ("offload_fallback", "off"),
        ])
        .unwrap()
        .unwrap();
        assert!(!o.local && !o.fallback);
        assert!(parse(&[("offload_coordinator", "http://x:1")]).is_err());
        assert!(parse(&[("offload", "on"), ("offload_workers", "0")]).is_err());
        assert!(parse(&[("offload_wrokers", "2")]).is_err());
    }
}
