//! `tern worker`: a stateless process that polls a coordinator for jobs and
//! runs them ([`crate::worker::run_job`]) over the shared tier.
//!
//! Each poll is its heartbeat and carries, per running attempt, how many
//! bytes its scratch directory holds (downloads, then outputs): a number
//! that stops growing tells the coordinator the attempt is stuck. On
//! shutdown it takes nothing new, finishes what runs (up to a grace
//! period), hands back the rest as failed, and exits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::error::Result;
use crate::filters::FilterRegistry;
use crate::proto::{self, coordinator_client::CoordinatorClient};
use crate::shared::SharedTier;
use crate::worker::WorkerEnv;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The coordinator, `http://host:port`.
    pub coordinator: String,
    /// Name shown in the coordinator's status.
    pub name: String,
    /// Jobs run at once.
    pub slots: u32,
    /// Where attempts download their inputs and write their outputs.
    pub scratch: PathBuf,
    /// Time between polls.
    pub poll_every: Duration,
    /// Longest a shutdown waits for running jobs.
    pub grace: Duration,
    /// See [`WorkerEnv::commit_delay`].
    pub commit_delay: Duration,
}

type Key = (String, u32);

struct Attempt {
    task: tokio::task::JoinHandle<()>,
    dir: PathBuf,
    /// Bytes downloaded and uploaded so far.
    moved: Arc<AtomicU64>,
}

impl Attempt {
    /// What the coordinator sees grow while the attempt works: bytes moved
    /// plus bytes in its scratch directory (inputs, then outputs).
    fn progress(&self) -> u64 {
        self.moved.load(Relaxed) + dir_bytes(&self.dir)
    }

    /// Stops it and removes its scratch directory. Engine work already
    /// started on the blocking pool finishes, but nothing of it is used.
    fn abandon(self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Bytes in the files of `dir` (an attempt's progress).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// Runs a worker until `shutdown` completes and its jobs are done.
pub async fn run(
    opts: WorkerOptions,
    tier: SharedTier,
    filters: FilterRegistry,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let env = Arc::new(WorkerEnv {
        tier,
        name: opts.name.clone(),
        scratch: opts.scratch.clone(),
        filters,
        commit_delay: opts.commit_delay,
    });
    std::fs::create_dir_all(&opts.scratch).map_err(crate::error::io_err(&opts.scratch))?;
    let endpoint = crate::runner::coordinator_endpoint(&opts.coordinator, Duration::from_secs(10))?;
    let mut client = CoordinatorClient::new(endpoint.connect_lazy());
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Key, Result<proto::ResultManifest>)>();
    let mut running: HashMap<Key, Attempt> = HashMap::new();
    let mut worker_id: Option<String> = None;
    let mut draining_since: Option<tokio::time::Instant> = None;
    let mut tick = tokio::time::interval(opts.poll_every);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown, if draining_since.is_none() => {
                tracing::info!("tern worker: shutting down after {} running jobs", running.len());
                draining_since = Some(tokio::time::Instant::now());
            }
            _ = tick.tick() => {}
        }
        let Some(id) = worker_id.clone() else {
            if draining_since.is_some() {
                return Ok(());
            }
            let req = proto::RegisterRequest {
                name: opts.name.clone(),
                slots: opts.slots,
                memory_bytes: 0,
            };
            match client.register(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    tracing::info!("tern worker: registered as {}", r.worker_id);
                    worker_id = Some(r.worker_id);
                }
                Err(e) => tracing::warn!(
                    "tern worker: cannot register with {}: {}",
                    opts.coordinator,
                    e.message()
                ),
            }
            continue;
        };
        // Report what finished.
        while let Ok(((job_id, attempt), outcome)) = done_rx.try_recv() {
            running.remove(&(job_id.clone(), attempt));
            let (result, error) = match outcome {
                Ok(m) => (Some(m), String::new()),
                Err(e) => (None, e.to_string()),
            };
            let req = proto::FinishRequest {
                worker_id: id.clone(),
                job_id: job_id.clone(),
                attempt,
                result,
                error,
            };
            report_finish(&mut client, req).await;
        }
        let draining = draining_since.is_some();
        if let Some(since) = draining_since {
            if running.is_empty() || since.elapsed() >= opts.grace {
                hand_back(&mut client, &id, &mut running).await;
                return Ok(());
            }
        }
        let req = proto::PollRequest {
            worker_id: id.clone(),
            free_slots: if draining {
                0
            } else {
                opts.slots.saturating_sub(running.len() as u32)
            },
            running: running
                .iter()
                .map(|((job_id, attempt), a)| proto::Running {
                    job_id: job_id.clone(),
                    attempt: *attempt,
                    progress: a.progress(),
                })
                .collect(),
            draining,
        };
        let reply = match client.poll(req).await {
            Ok(r) => r.into_inner(),
            Err(e) => {
                tracing::warn!("tern worker: poll failed: {}", e.message());
                continue;
            }
        };
        if reply.reregister {
            worker_id = None;
        }
        for c in reply.cancel {
            if let Some(a) = running.remove(&(c.job_id.clone(), c.attempt)) {
                tracing::info!(
                    "tern worker: abandoning job {} attempt {}",
                    c.job_id,
                    c.attempt
                );
                a.task.abort();
                let _ = std::fs::remove_dir_all(&a.dir);
            }
        }
        for a in reply.assign {
            let Some(job) = a.job else { continue };
            let key = (job.job_id.clone(), a.attempt);
            let dir = opts.scratch.join(format!("{}-{}", job.job_id, a.attempt));
            let (env, done) = (env.clone(), done_tx.clone());
            let k = key.clone();
            let moved = Arc::new(AtomicU64::new(0));
            let counter = moved.clone();
            let task = tokio::spawn(async move {
                let r = crate::worker::run_job(&env, &job, k.1, &counter).await;
                let _ = done.send((k, r));
            });
            running.insert(key, Attempt { task, dir, moved });
        }
    }
}

/// Reports a finished attempt, retrying a few times: a lost report would
/// leave the attempt to time out and count as a failure.
async fn report_finish(
    client: &mut CoordinatorClient<tonic::transport::Channel>,
    req: proto::FinishRequest,
) {
    for attempt in 0..5u32 {
        match client.finish(req.clone()).await {
            Ok(r) => {
                if !r.get_ref().accepted {
                    tracing::info!(
                        "tern worker: job {} attempt {} was given to another worker; result dropped",
                        req.job_id,
                        req.attempt
                    );
                }
                return;
            }
            Err(e) => {
                tracing::warn!(
                    "tern worker: reporting job {} failed: {}",
                    req.job_id,
                    e.message()
                );
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
}

/// Tells the coordinator the attempts still running will not finish.
async fn hand_back(
    client: &mut CoordinatorClient<tonic::transport::Channel>,
    id: &str,
    running: &mut HashMap<Key, Attempt>,
) {
    for ((job_id, attempt), a) in running.drain() {
        a.abandon();
        let req = proto::FinishRequest {
            worker_id: id.to_string(),
            job_id,
            attempt,
            result: None,
            error: "the worker shut down".into(),
        };
        let _ = client.finish(req).await;
    }
}
