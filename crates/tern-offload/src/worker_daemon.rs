//! `tern worker`: a stateless process that polls a coordinator for jobs and
//! runs them ([`crate::worker::run_job`]) over the shared tier.
//!
//! Each poll is its heartbeat and carries, per running attempt, how many
//! bytes its scratch directory holds (downloads, then outputs): a number
//! that stops growing tells the coordinator the attempt is stuck. On
//! shutdown it takes nothing new, finishes what runs (up to a grace
//! period), hands back the rest as failed, and exits.
//!
//! It counts what it does (attempts by outcome, bytes moved, run times)
//! for the metrics [`run_with_metrics`] serves to Prometheus.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::coordinators::Coordinators;
use crate::error::Result;
use crate::filters::FilterRegistry;
use crate::metrics::{Histogram, Text, Type, KINDS};
use crate::proto;
use crate::shared::SharedTier;
use crate::worker::{Moved, WorkerEnv};

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The coordinator, `http://host:port`, or a leader and its standbys
    /// separated by commas ([`Coordinators`]).
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

/// What a finished attempt's task reports: its key, how long it ran, and
/// its outcome.
type Done = (Key, Duration, Result<proto::ResultManifest>);

struct Attempt {
    task: tokio::task::JoinHandle<()>,
    dir: PathBuf,
    /// Bytes downloaded and uploaded so far.
    moved: Arc<Moved>,
    /// Its job's kind, as an index into [`KINDS`].
    kind: Option<usize>,
}

impl Attempt {
    /// What the coordinator sees grow while the attempt works: bytes moved
    /// plus bytes in its scratch directory (inputs, then outputs).
    fn progress(&self) -> u64 {
        self.moved.total() + dir_bytes(&self.dir)
    }

    /// Stops it and removes its scratch directory. Engine work already
    /// started on the blocking pool finishes, but nothing of it is used.
    fn abandon(self, metrics: &WorkerMetrics) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
        metrics.ended(&self, Ended::Abandoned);
    }
}

/// How an attempt ended.
enum Ended {
    /// It committed its result after running this long.
    Committed(Duration),
    /// It failed; the error goes to the coordinator.
    Failed,
    /// It was dropped unfinished.
    Abandoned,
}

/// What a worker counts, for its metrics endpoint.
#[derive(Debug)]
struct WorkerMetrics {
    slots: u32,
    counts: Mutex<WorkerCounts>,
}

/// The counts behind [`WorkerMetrics`]; every field is since the process
/// started.
#[derive(Debug, Default, Clone)]
struct WorkerCounts {
    /// Whether the worker holds an id from the coordinator.
    registered: bool,
    /// Whether it is shutting down.
    draining: bool,
    /// When a poll last succeeded.
    last_poll: Option<Instant>,
    /// Times it registered.
    registrations: u64,
    /// Attempts running.
    running: u64,
    /// Attempts that committed their result.
    ok: u64,
    /// Attempts that failed (their error is reported to the coordinator).
    failed: u64,
    /// Attempts dropped unfinished: cancelled by the coordinator, or
    /// handed back at shutdown.
    abandoned: u64,
    /// Results of committed attempts the coordinator refused (the attempt
    /// had been given to another worker).
    refused: u64,
    /// Bytes of ended attempts downloaded from the tier.
    downloaded: u64,
    /// Bytes of ended attempts uploaded to the tier.
    uploaded: u64,
    /// Run time of the attempts that committed, per kind (as [`KINDS`]).
    job_seconds: [Histogram; 2],
}

impl WorkerMetrics {
    /// Counts for a worker with `slots` slots.
    fn new(slots: u32) -> Self {
        WorkerMetrics {
            slots,
            counts: Mutex::new(WorkerCounts::default()),
        }
    }

    /// A copy of the counts.
    fn counts(&self) -> WorkerCounts {
        self.counts.lock().clone()
    }

    fn update(&self, f: impl FnOnce(&mut WorkerCounts)) {
        f(&mut self.counts.lock());
    }

    /// Counts attempt `a` as `ended`, with the bytes it moved.
    fn ended(&self, a: &Attempt, ended: Ended) {
        self.update(|c| {
            c.downloaded += a.moved.downloaded.load(Relaxed);
            c.uploaded += a.moved.uploaded.load(Relaxed);
            match ended {
                Ended::Committed(ran) => {
                    c.ok += 1;
                    if let Some(h) = a.kind.and_then(|k| c.job_seconds.get_mut(k)) {
                        h.observe(ran);
                    }
                }
                Ended::Failed => c.failed += 1,
                Ended::Abandoned => c.abandoned += 1,
            }
        });
    }

    /// The Prometheus exposition. Metric names and meanings:
    /// docs/offload.md.
    fn render(&self) -> String {
        // Copied under the lock, formatted after it is released.
        let c = self.counts();
        let mut t = Text::new();
        t.gauge(
            "tern_worker_slots",
            "Jobs this worker runs at once (--slots).",
            u64::from(self.slots),
        );
        t.gauge(
            "tern_worker_running_attempts",
            "Attempts running now.",
            c.running,
        );
        t.gauge(
            "tern_worker_registered",
            "1 while the worker holds an id from the coordinator, 0 before it registers and after it is told to register again.",
            u64::from(c.registered),
        );
        t.gauge(
            "tern_worker_draining",
            "1 once the worker is shutting down: it finishes what it runs and takes nothing new.",
            u64::from(c.draining),
        );
        t.gauge(
            "tern_worker_last_poll_age_seconds",
            "Seconds since a poll of the coordinator last succeeded (+Inf before the first). Above the coordinator's lease (--lease-ms): its attempts are given to others.",
            c.last_poll.map_or(f64::INFINITY, |t| t.elapsed().as_secs_f64()),
        );
        t.counter(
            "tern_worker_registrations_total",
            "Times the worker registered with the coordinator (again after a lost lease or a coordinator restart).",
            c.registrations,
        );
        t.counters(
            "tern_worker_attempts_total",
            "Attempts ended, by outcome: ok (committed), failed (error reported), abandoned (cancelled by the coordinator or handed back at shutdown).",
            "outcome",
            &[("ok", c.ok), ("failed", c.failed), ("abandoned", c.abandoned)],
        );
        t.counter(
            "tern_worker_results_refused_total",
            "Committed attempts whose result the coordinator refused: it had given the job to another worker.",
            c.refused,
        );
        t.counter(
            "tern_worker_downloaded_bytes_total",
            "Bytes of job inputs taken from the shared tier, counted as each attempt ends.",
            c.downloaded,
        );
        t.counter(
            "tern_worker_uploaded_bytes_total",
            "Bytes of job outputs given to the shared tier, counted as each attempt ends.",
            c.uploaded,
        );
        let name = "tern_worker_job_seconds";
        t.family(
            name,
            Type::Histogram,
            "Run time of the attempts that committed (download, run, upload, commit), by kind.",
        );
        for (kind, h) in KINDS.iter().zip(&c.job_seconds) {
            t.histogram_series(name, &[("kind", kind)], h);
        }
        t.finish()
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
    run_with_metrics(opts, tier, filters, None, shutdown).await
}

/// [`run`], with Prometheus metrics (`tern_worker_*`, docs/offload.md) on
/// `GET /metrics` at `metrics` if given, until it returns.
pub async fn run_with_metrics(
    opts: WorkerOptions,
    tier: SharedTier,
    filters: FilterRegistry,
    metrics: Option<tokio::net::TcpListener>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let counts = Arc::new(WorkerMetrics::new(opts.slots));
    let _endpoint = metrics.map(|l| {
        let counts = counts.clone();
        crate::metrics::spawn(l, "tern worker", move || counts.render())
    });
    work(opts, tier, filters, &counts, shutdown).await
}

/// The worker's loop, counting into `metrics`.
async fn work(
    opts: WorkerOptions,
    tier: SharedTier,
    filters: FilterRegistry,
    metrics: &WorkerMetrics,
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
    let coordinators = Coordinators::new(&opts.coordinator, Duration::from_secs(10))?;
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let mut running: HashMap<Key, Attempt> = HashMap::new();
    let mut worker_id: Option<String> = None;
    // The coordinator that gave `worker_id`: an id means nothing to another.
    let mut registered_with = 0usize;
    // A poll that takes longer than this finds the worker's lease expired
    // anyway; past it the coordinator is frozen or cut off, and with
    // several coordinators the next one may lead now.
    let mut poll_timeout = Duration::from_secs(10);
    let mut draining_since: Option<tokio::time::Instant> = None;
    let mut tick = tokio::time::interval(opts.poll_every);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown, if draining_since.is_none() => {
                tracing::info!("tern worker: shutting down after {} running jobs", running.len());
                draining_since = Some(tokio::time::Instant::now());
                metrics.update(|c| c.draining = true);
            }
            _ = tick.tick() => {}
        }
        if worker_id.is_some() && coordinators.client().0 != registered_with {
            // A request moved on to another coordinator (a poll, a Finish
            // or a hand-back failed): register with it.
            worker_id = None;
            metrics.update(|c| c.registered = false);
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
            let (i, mut client) = coordinators.client();
            match client.register(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    tracing::info!("tern worker: registered as {}", r.worker_id);
                    worker_id = Some(r.worker_id);
                    registered_with = i;
                    poll_timeout = (2 * Duration::from_millis(r.lease_ms.into()))
                        .clamp(Duration::from_millis(500), Duration::from_secs(10));
                    metrics.update(|c| {
                        c.registered = true;
                        c.registrations += 1;
                    });
                }
                Err(e) => {
                    tracing::warn!(
                        "tern worker: cannot register with {}: {}",
                        coordinators.url(i),
                        e.message()
                    );
                    // A standby, or a coordinator that is gone: try the
                    // next one, if there are several.
                    coordinators.failed(i);
                }
            }
            continue;
        };
        // Report what finished, counted first: once the coordinator
        // hears, a scrape of this worker already shows it.
        while let Ok(((job_id, attempt), ran, outcome)) = done_rx.try_recv() {
            // An attempt abandoned after its task finished was counted then.
            if let Some(a) = running.remove(&(job_id.clone(), attempt)) {
                let ended = match &outcome {
                    Ok(_) => Ended::Committed(ran),
                    Err(_) => Ended::Failed,
                };
                metrics.ended(&a, ended);
                metrics.update(|c| c.running = running.len() as u64);
            }
            let committed = outcome.is_ok();
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
            if report_finish(&coordinators, req).await == Some(false) && committed {
                metrics.update(|c| c.refused += 1);
            }
        }
        let draining = draining_since.is_some();
        if let Some(since) = draining_since {
            if running.is_empty() || since.elapsed() >= opts.grace {
                hand_back(&coordinators, &id, &mut running, metrics).await;
                metrics.update(|c| c.running = 0);
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
        let (i, mut client) = coordinators.client();
        let polled = tokio::time::timeout(poll_timeout, client.poll(req))
            .await
            .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer in time")));
        let reply = match polled {
            Ok(r) => r.into_inner(),
            Err(e) => {
                tracing::warn!(
                    "tern worker: poll of {} failed: {}",
                    coordinators.url(i),
                    e.message()
                );
                if coordinators.failed(i) {
                    // Another coordinator may lead now: register with it,
                    // as after being told to register again.
                    worker_id = None;
                    metrics.update(|c| c.registered = false);
                }
                continue;
            }
        };
        metrics.update(|c| c.last_poll = Some(Instant::now()));
        if reply.reregister {
            worker_id = None;
            metrics.update(|c| c.registered = false);
        }
        for c in reply.cancel {
            if let Some(a) = running.remove(&(c.job_id.clone(), c.attempt)) {
                tracing::info!(
                    "tern worker: abandoning job {} attempt {}",
                    c.job_id,
                    c.attempt
                );
                a.abandon(metrics);
            }
        }
        for a in reply.assign {
            let Some(job) = a.job else { continue };
            let key = (job.job_id.clone(), a.attempt);
            let dir = opts.scratch.join(format!("{}-{}", job.job_id, a.attempt));
            let (env, done) = (env.clone(), done_tx.clone());
            let k = key.clone();
            let kind = crate::metrics::kind_index(&job);
            let moved = Arc::new(Moved::default());
            let counter = moved.clone();
            let task = tokio::spawn(async move {
                let start = Instant::now();
                let r = crate::worker::run_job(&env, &job, k.1, &counter).await;
                let _ = done.send((k, start.elapsed(), r));
            });
            running.insert(
                key,
                Attempt {
                    task,
                    dir,
                    moved,
                    kind,
                },
            );
        }
        metrics.update(|c| c.running = running.len() as u64);
    }
}

/// Reports a finished attempt, retrying a few times: a lost report would
/// leave the attempt to time out and count as a failure. Returns whether
/// the coordinator accepted it, `None` if it never answered.
async fn report_finish(coordinators: &Coordinators, req: proto::FinishRequest) -> Option<bool> {
    for attempt in 0..5u32 {
        let (i, mut client) = coordinators.client();
        match client.finish(req.clone()).await {
            Ok(r) => {
                let accepted = r.get_ref().accepted;
                if !accepted {
                    tracing::info!(
                        "tern worker: job {} attempt {} was given to another worker; result dropped",
                        req.job_id,
                        req.attempt
                    );
                }
                return Some(accepted);
            }
            Err(e) => {
                tracing::warn!(
                    "tern worker: reporting job {} failed: {}",
                    req.job_id,
                    e.message()
                );
                coordinators.failed(i);
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
        }
    }
    None
}

/// Tells the coordinator the attempts still running will not finish.
async fn hand_back(
    coordinators: &Coordinators,
    id: &str,
    running: &mut HashMap<Key, Attempt>,
    metrics: &WorkerMetrics,
) {
    for ((job_id, attempt), a) in running.drain() {
        a.abandon(metrics);
        let req = proto::FinishRequest {
            worker_id: id.to_string(),
            job_id,
            attempt,
            result: None,
            error: "the worker shut down".into(),
        };
        let _ = coordinators.client().1.finish(req).await;
    }
}
