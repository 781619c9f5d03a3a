//! An offload service on this machine: a `tern coordinator` and `tern
//! worker`s started as child processes of a harness (`tern stress
//! --crash-loop --offload`, `tern bench --db tern@offload`), killed when it
//! is dropped.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{OffloadError, Result};
use crate::proto;

/// What to start.
#[derive(Debug, Clone)]
pub struct LocalServiceOptions {
    /// The `tern` binary.
    pub program: PathBuf,
    /// Where the service keeps its files: the shared tier in
    /// `<base>.shared`, worker scratch space in `<base>.scratch`, logs in
    /// `<base>.offload-logs/`.
    pub base: PathBuf,
    /// Workers to start.
    pub workers: usize,
    /// Job slots per worker.
    pub slots: u32,
    /// CPUs for the workers, as `taskset -c` takes them (`1`, `2-3`), or
    /// `None` to leave them where the harness runs.
    pub worker_cpus: Option<String>,
    /// Each worker waits this long before committing a job (fault
    /// injection: widens the window in which a job is in flight).
    pub commit_delay: Duration,
}

impl LocalServiceOptions {
    /// One worker with one slot, no pinning, no delay.
    pub fn new(program: &Path, base: &Path) -> Self {
        LocalServiceOptions {
            program: program.to_path_buf(),
            base: base.to_path_buf(),
            workers: 1,
            slots: 1,
            worker_cpus: None,
            commit_delay: Duration::ZERO,
        }
    }
}

/// A running coordinator and its workers.
#[derive(Debug)]
pub struct LocalService {
    children: Vec<Child>,
    /// The coordinator's URL.
    pub coordinator: String,
    /// The shared tier's URL (`file://<base>.shared`).
    pub shared: String,
    /// The directory with the processes' logs.
    pub logs: PathBuf,
    /// The shared tier's and the workers' directories.
    data: [PathBuf; 2],
}

impl Drop for LocalService {
    fn drop(&mut self) {
        self.kill();
    }
}

fn beside(base: &Path, suffix: &str) -> PathBuf {
    let mut p = base.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

fn invalid(what: String) -> OffloadError {
    OffloadError::Invalid(what)
}

impl LocalService {
    fn kill(&mut self) {
        for mut c in self.children.drain(..) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the processes and deletes the shared tier and the workers'
    /// scratch space (the shared tier may hold a copy of every file of a
    /// store); the logs stay.
    pub fn stop_and_remove_data(mut self) {
        self.kill();
        for d in &self.data {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// Starts the coordinator and the workers and waits until every worker
    /// has registered.
    pub fn start(o: &LocalServiceOptions) -> Result<LocalService> {
        let logs = beside(&o.base, ".offload-logs");
        let shared_dir = std::path::absolute(beside(&o.base, ".shared"))
            .map_err(|e| invalid(format!("cannot resolve the shared tier's path: {e}")))?;
        for d in [&logs, &shared_dir] {
            std::fs::create_dir_all(d)
                .map_err(|e| invalid(format!("cannot create {}: {e}", d.display())))?;
        }
        let log = |name: &str| -> Result<Stdio> {
            let p = logs.join(name);
            File::create(&p)
                .map(Stdio::from)
                .map_err(|e| invalid(format!("cannot create {}: {e}", p.display())))
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| invalid(format!("no free port for the coordinator: {e}")))?
            .port();
        let scratch = beside(&o.base, ".scratch");
        let mut svc = LocalService {
            children: Vec::new(),
            coordinator: format!("http://127.0.0.1:{port}"),
            shared: format!("file://{}", shared_dir.display()),
            logs: logs.clone(),
            data: [shared_dir.clone(), scratch.clone()],
        };
        let spawn = |c: &mut Command, what: &str| {
            c.stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .map_err(|e| invalid(format!("cannot start {what}: {e}")))
        };
        svc.children.push(spawn(
            Command::new(&o.program)
                .args(["coordinator", "--listen", &format!("127.0.0.1:{port}")])
                .stderr(log("coordinator.log")?),
            "tern coordinator",
        )?);
        let names: Vec<String> = (0..o.workers).map(|i| format!("worker-{i}")).collect();
        for name in &names {
            let mut cmd = match &o.worker_cpus {
                Some(cpus) => {
                    let mut c = Command::new("taskset");
                    c.args(["-c", cpus]).arg(&o.program);
                    c
                }
                None => Command::new(&o.program),
            };
            cmd.args(["worker", "--coordinator", &svc.coordinator])
                .args(["--shared", &svc.shared, "--name", name])
                .args(["--slots", &o.slots.to_string()])
                .arg("--scratch")
                .arg(scratch.join(name))
                .args(["--commit-delay-ms", &o.commit_delay.as_millis().to_string()])
                .stderr(log(&format!("{name}.log"))?);
            svc.children.push(spawn(&mut cmd, "tern worker")?);
        }
        svc.wait_for_workers(&names, Duration::from_secs(30))?;
        Ok(svc)
    }

    /// Asks the coordinator for its status until it lists every worker in
    /// `names`.
    fn wait_for_workers(&mut self, names: &[String], limit: Duration) -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| invalid(format!("cannot start a runtime: {e}")))?;
        let start = Instant::now();
        let mut last = String::from("no answer");
        while start.elapsed() < limit {
            for c in &mut self.children {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(invalid(format!(
                        "an offload process exited with {status}; see the logs in {}",
                        self.logs.display()
                    )));
                }
            }
            let status = rt.block_on(async {
                let mut c =
                    proto::coordinator_client::CoordinatorClient::connect(self.coordinator.clone())
                        .await
                        .map_err(|e| e.to_string())?;
                c.status(proto::StatusRequest {})
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(|e| e.message().to_string())
            });
            match status {
                Ok(s) if names.iter().all(|n| s.workers.iter().any(|w| &w.name == n)) => {
                    return Ok(())
                }
                Ok(s) => {
                    last = format!("{} of {} workers registered", s.workers.len(), names.len())
                }
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(invalid(format!(
            "the offload workers did not register with {} within {limit:?} ({last}); see the logs in {}",
            self.coordinator,
            self.logs.display()
        )))
    }
}
