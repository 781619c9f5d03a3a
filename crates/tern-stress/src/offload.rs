//! Stress with offload on: a run's compactions and GC jobs go to `tern
//! worker`s through a `tern coordinator` ([`executor`]), and a crash loop
//! can start that service for itself ([`start_service`]) so that its kills land
//! with jobs in flight on the workers.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tern_offload::{LocalService, LocalServiceOptions, RemoteExecutor, RemoteOptions};

use crate::config::StressArgs;

/// The remote executor `args` ask for (`--offload-coordinator`,
/// `--offload-shared`, `--offload-fallback`), or `None` when offload is
/// off. The store id is derived from `dir`, so a restarted run finds its
/// uploads again.
pub fn executor(args: &StressArgs, dir: &Path) -> Result<Option<Arc<RemoteExecutor>>, String> {
    let (Some(coordinator), Some(shared)) = (&args.offload_coordinator, &args.offload_shared)
    else {
        return Ok(None);
    };
    let mut ro = RemoteOptions::new(&RemoteOptions::id_for_dir("stress", dir));
    ro.fallback = args.offload_fallback.unwrap_or(true);
    // A kill leaves attempts behind; the sweep of the next run removes
    // them once they are this old.
    ro.orphan_grace = Duration::from_secs(60);
    let fs: tern::io::FsRef = Arc::new(tern::io::PosixFs);
    let exec = RemoteExecutor::connect(coordinator, shared, ro, fs)
        .map_err(|e| format!("offload: {e}"))?;
    Ok(Some(Arc::new(exec)))
}

/// Workers a crash loop starts.
const WORKERS: usize = 2;
/// Each worker waits this long before it commits a job, widening the
/// window in which a kill of the store finds the job in flight.
const COMMIT_DELAY: Duration = Duration::from_millis(20);

/// Starts a coordinator and [`WORKERS`] workers for a crash loop on `dir`
/// with `program` (the `tern` binary): shared tier in `<dir>.shared`, logs
/// in `<dir>.offload-logs/`.
pub fn start_service(program: &Path, dir: &Path) -> Result<LocalService, String> {
    let mut o = LocalServiceOptions::new(program, dir);
    o.workers = WORKERS;
    o.commit_delay = COMMIT_DELAY;
    LocalService::start(&o).map_err(|e| format!("cannot start the offload service: {e}"))
}

/// The flags that send a `tern stress` run's jobs to `svc`, with local
/// fallback off.
pub fn flags(svc: &LocalService) -> Vec<String> {
    [
        "--offload-coordinator",
        &svc.coordinator,
        "--offload-shared",
        &svc.shared,
        "--offload-fallback",
        "off",
    ]
    .map(str::to_string)
    .to_vec()
}
