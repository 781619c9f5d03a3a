//! Stress with offload on: a run's compactions and GC jobs go to `tern
//! worker`s through a `tern coordinator` ([`executor`]), and a crash loop
//! can start that service for itself ([`Service`]) so that its kills land
//! with jobs in flight on the workers.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_offload::{GrpcRunner, RemoteExecutor, RemoteOptions, SharedTier};

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
    let bad = |e: tern_offload::OffloadError| format!("offload: {e}");
    let tier = SharedTier::open(shared, &[]).map_err(bad)?;
    let runner = Arc::new(GrpcRunner::new(coordinator).map_err(bad)?);
    let mut ro = RemoteOptions::new(&RemoteOptions::id_for_dir("stress", dir));
    ro.fallback = args.offload_fallback.unwrap_or(true);
    // A kill leaves attempts behind; the sweep of the next run removes
    // them once they are this old.
    ro.orphan_grace = Duration::from_secs(60);
    let fs: tern::io::FsRef = Arc::new(tern::io::PosixFs);
    let exec = RemoteExecutor::new(tier, runner, ro, fs).map_err(bad)?;
    Ok(Some(Arc::new(exec)))
}

/// Workers a crash loop starts.
const WORKERS: usize = 2;
/// Each worker waits this long before it commits a job, widening the
/// window in which a kill of the store finds the job in flight.
const COMMIT_DELAY_MS: u64 = 20;

/// A coordinator and [`WORKERS`] workers as child processes of the crash
/// loop, killed when dropped. Their logs go to `<dir>.offload-logs/`.
#[derive(Debug)]
pub struct Service {
    children: Vec<Child>,
    /// The coordinator's URL.
    pub coordinator: String,
    /// The shared tier's URL (`file://<dir>.shared`).
    pub shared: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn beside(dir: &Path, suffix: &str) -> PathBuf {
    let mut p = dir.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

impl Service {
    /// Starts the coordinator and the workers with `program` (the `tern`
    /// binary) and waits until every worker has registered.
    pub fn start(program: &Path, dir: &Path) -> Result<Service, String> {
        let logs = beside(dir, ".offload-logs");
        let shared_dir = std::path::absolute(beside(dir, ".shared"))
            .map_err(|e| format!("cannot resolve the shared tier's path: {e}"))?;
        for d in [&logs, &shared_dir] {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        let log = |name: &str| -> Result<Stdio, String> {
            let p = logs.join(name);
            File::create(&p)
                .map(Stdio::from)
                .map_err(|e| format!("cannot create {}: {e}", p.display()))
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port for the coordinator: {e}"))?
            .port();
        let mut svc = Service {
            children: Vec::new(),
            coordinator: format!("http://127.0.0.1:{port}"),
            shared: format!("file://{}", shared_dir.display()),
        };
        let spawn = |c: &mut Command, what: &str| {
            c.stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {what}: {e}"))
        };
        svc.children.push(spawn(
            Command::new(program)
                .args(["coordinator", "--listen", &format!("127.0.0.1:{port}")])
                .stderr(log("coordinator.log")?),
            "tern coordinator",
        )?);
        for i in 0..WORKERS {
            let name = format!("stress-worker-{i}");
            svc.children.push(spawn(
                Command::new(program)
                    .args(["worker", "--coordinator", &svc.coordinator])
                    .args(["--shared", &svc.shared, "--name", &name])
                    .arg("--scratch")
                    .arg(beside(dir, ".scratch").join(&name))
                    .args(["--commit-delay-ms", &COMMIT_DELAY_MS.to_string()])
                    .stderr(log(&format!("{name}.log"))?),
                "tern worker",
            )?);
        }
        svc.wait_for_workers(program, Duration::from_secs(30))?;
        Ok(svc)
    }

    /// Polls `tern coordinator status` until it lists every worker.
    fn wait_for_workers(&self, program: &Path, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < limit {
            let out = Command::new(program)
                .args(["coordinator", "status", "--coordinator", &self.coordinator])
                .output()
                .map_err(|e| format!("cannot run tern coordinator status: {e}"))?;
            last = String::from_utf8_lossy(&out.stdout).into_owned();
            let workers = last
                .lines()
                .find_map(|l| l.strip_prefix("workers: "))
                .and_then(|n| n.trim().parse::<usize>().ok());
            if workers == Some(WORKERS) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "the offload workers did not register with {} within {limit:?}; last status:\n{last}",
            self.coordinator
        ))
    }

    /// The flags that send a `tern stress` run's jobs to this service,
    /// with local fallback off.
    pub fn flags(&self) -> Vec<String> {
        [
            "--offload-coordinator",
            &self.coordinator,
            "--offload-shared",
            &self.shared,
            "--offload-fallback",
            "off",
        ]
        .map(str::to_string)
        .to_vec()
    }
}
