//! `tern coordinator` and `tern worker`: the offload service's processes.
//! See docs/offload.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tern_offload::coordinator::Limits;
use tern_offload::worker_daemon::WorkerOptions;
use tern_offload::{FilterRegistry, SharedTier};

use crate::Failure;

/// Flags of `tern coordinator`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tern coordinator --listen 127.0.0.1:7700\n  \
    tern coordinator --listen 127.0.0.1:7700 --metrics-bind 127.0.0.1:9380\n  \
    tern coordinator status --coordinator http://127.0.0.1:7700")]
pub struct CoordinatorArgs {
    #[command(subcommand)]
    action: Option<CoordinatorAction>,
    /// Address to serve gRPC on.
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: String,
    /// A worker silent this long (ms) is taken for dead; its jobs go to others.
    #[arg(long, default_value_t = 3000)]
    lease_ms: u64,
    /// A job whose progress stands still this long (s) is given to another worker.
    #[arg(long, default_value_t = 30)]
    progress_timeout_s: u64,
    /// Attempts per job before its store is told to run it itself.
    #[arg(long, default_value_t = 3)]
    max_attempts: u32,
    /// Queued jobs beyond which new ones are refused (their stores run them).
    #[arg(long, default_value_t = 1024)]
    max_queue: usize,
    /// Keep jobs in etcd (comma-separated endpoints, http://host:2379), so a
    /// restart loses nothing; coordinators sharing --etcd-prefix elect one
    /// leader and the others stand by. Without it the queue lives in memory.
    #[arg(long)]
    etcd: Option<String>,
    /// Key prefix in etcd.
    #[arg(long, default_value = "/tern/offload")]
    etcd_prefix: String,
    /// Serve Prometheus metrics on http://HOST:PORT/metrics ("off": none).
    ///
    /// Exported (tern_coordinator_*): jobs queued and running per kind;
    /// workers registered and draining, their slots and free slots; jobs
    /// submitted, done, failed and refused, and attempts dispatched,
    /// reassigned and failed, by cause; histograms of job time (submission
    /// to done) and queue wait (submission to first hand-out) per kind;
    /// with --etcd, whether this coordinator leads (a standby serves its
    /// metrics too, showing 0). Scrape it as a static Prometheus target,
    /// or look with `curl http://HOST:PORT/metrics`. Every metric is
    /// described in docs/offload.md.
    #[arg(long, default_value = "off", value_name = "HOST:PORT")]
    metrics_bind: String,
}

#[derive(clap::Subcommand, Debug)]
enum CoordinatorAction {
    /// Show a running coordinator's workers, queue and jobs.
    Status {
        /// The coordinator, http://host:port; or a leader and its standbys,
        /// comma-separated: the one that leads answers.
        #[arg(long, default_value = "http://127.0.0.1:7700")]
        coordinator: String,
    },
}

/// Flags of `tern worker`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  \
    tern worker --coordinator http://127.0.0.1:7700 --shared file:///srv/tern-shared --slots 2\n  \
    tern worker --coordinator http://127.0.0.1:7700 --shared file:///srv/tern-shared --metrics-bind 0.0.0.0:9381\n\n\
    S3 settings for an s3:// tier come from AWS_* variables (AWS_ENDPOINT, \
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ALLOW_HTTP, AWS_REGION).")]
pub struct WorkerArgs {
    /// The coordinator, http://host:port; or a leader and its standbys
    /// (coordinators sharing one etcd), comma-separated: the worker moves
    /// on to the next when one fails or stands by.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    coordinator: String,
    /// The shared tier: file:///dir or s3://bucket/prefix.
    #[arg(long)]
    shared: String,
    /// Jobs run at once.
    #[arg(long, default_value_t = 1)]
    slots: u32,
    /// Scratch directory for inputs and outputs [default: a temporary one].
    #[arg(long)]
    scratch: Option<PathBuf>,
    /// Name shown in `tern coordinator status` [default: host and pid].
    #[arg(long)]
    name: Option<String>,
    /// Longest a shutdown (SIGTERM, Ctrl-C) waits for running jobs, seconds.
    #[arg(long, default_value_t = 60)]
    grace_s: u64,
    /// Fault injection for tests: wait this long before committing each job.
    #[arg(long, default_value_t = 0, hide = true)]
    commit_delay_ms: u64,
    /// Serve Prometheus metrics on http://HOST:PORT/metrics ("off": none).
    ///
    /// Exported (tern_worker_*): slots and running attempts; whether it is
    /// registered and draining, and seconds since its last successful poll;
    /// attempts ended ok, failed or abandoned; results the coordinator
    /// refused; bytes downloaded from and uploaded to the shared tier; a
    /// histogram of the run time of committed attempts per kind. Off by
    /// default, so workers on one host need no port each; give each its
    /// own port to scrape it, as a static Prometheus target or with `curl
    /// http://HOST:PORT/metrics`. Every metric is described in
    /// docs/offload.md.
    #[arg(long, default_value = "off", value_name = "HOST:PORT")]
    metrics_bind: String,
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(format!("cannot start the runtime: {e}")))
}

/// Binds the metrics listener `--metrics-bind` asks for; `None` for "off".
async fn metrics_listener(bind: &str) -> Result<Option<tokio::net::TcpListener>, Failure> {
    if bind == "off" {
        return Ok(None);
    }
    tokio::net::TcpListener::bind(bind)
        .await
        .map(Some)
        .map_err(|e| {
            Failure::new(format!("cannot listen for metrics on {bind}: {e}"))
                .hint("pick another HOST:PORT with --metrics-bind, or \"off\"")
        })
}

/// Completes on SIGTERM or SIGINT.
async fn terminated() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Runs `tern coordinator`.
pub fn coordinator(args: CoordinatorArgs) -> Result<ExitCode, Failure> {
    let rt = runtime()?;
    if let Some(CoordinatorAction::Status { coordinator }) = args.action {
        return rt.block_on(status(&coordinator));
    }
    let limits = Limits {
        lease: Duration::from_millis(args.lease_ms),
        progress_timeout: Duration::from_secs(args.progress_timeout_s),
        max_attempts: args.max_attempts,
        max_queue: args.max_queue,
        ..Limits::default()
    };
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| {
                Failure::new(format!("cannot listen on {}: {e}", args.listen))
                    .hint("pick another address with --listen")
            })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Failure::new(e.to_string()))?;
        let metrics = metrics_listener(&args.metrics_bind).await?;
        let etcd = args.etcd.map(|e| tern_offload::coordinator::EtcdConfig {
            endpoints: e.split(',').map(str::to_string).collect(),
            prefix: args.etcd_prefix.clone(),
            id: format!("{addr}/{}", std::process::id()),
        });
        eprintln!("tern coordinator: listening on http://{addr}");
        tern_offload::coordinator::serve_with_metrics(listener, metrics, limits, etcd, terminated())
            .await
            .map_err(|e| {
                Failure::new(format!("coordinator stopped: {e}")).hint(
                    "check that etcd is reachable; a standby or a restart takes over from etcd",
                )
            })
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn status(urls: &str) -> Result<ExitCode, Failure> {
    let coordinators = tern_offload::Coordinators::new(urls, std::time::Duration::from_secs(5))
        .map_err(|e| Failure::new(e.to_string()))?;
    let mut reply = None;
    let mut why = Vec::new();
    for _ in 0..coordinators.len() {
        let (i, mut client) = coordinators.client();
        match client.status(tern_offload::proto::StatusRequest {}).await {
            Ok(r) => {
                reply = Some((coordinators.url(i).to_string(), r.into_inner()));
                break;
            }
            Err(e) => {
                why.push(format!("{}: {}", coordinators.url(i), e.message()));
                coordinators.failed(i);
            }
        }
    }
    let Some((url, s)) = reply else {
        return Err(
            Failure::new(format!("no coordinator answered ({})", why.join("; ")))
                .hint("is `tern coordinator` running? pass its address with --coordinator"),
        );
    };
    if coordinators.len() > 1 {
        println!("leader: {url}");
    }
    println!(
        "jobs: {} submitted, {} done, {} failed (run by their stores), {} reassigned, {} refused",
        s.submitted, s.done, s.failed, s.reassigned, s.refused
    );
    println!("workers: {}", s.workers.len());
    for w in &s.workers {
        println!(
            "  {:<14} {:<24} {}/{} slots busy, lease {} ms left",
            w.worker_id, w.name, w.running, w.slots, w.lease_left_ms
        );
    }
    let active: Vec<_> = s
        .jobs
        .iter()
        .filter(|j| j.state == "queued" || j.state == "running")
        .collect();
    println!("queued or running: {}", active.len());
    for j in active {
        println!(
            "  {:<40} {:<10} {:<8} attempt {} {} {} bytes, {} ms old",
            j.job_id, j.kind, j.state, j.attempt, j.worker_id, j.progress, j.age_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The filters a worker built into `tern` can rebuild: `tern serve`'s
/// expiry filter.
fn filters() -> FilterRegistry {
    let mut r = FilterRegistry::new();
    r.register(
        tern_server::expiry::EXPIRY_FILTER,
        tern_server::expiry::ExpiryFilter::from_remote,
    );
    r
}

/// Runs `tern worker`.
pub fn worker(args: WorkerArgs) -> Result<ExitCode, Failure> {
    let tier = SharedTier::open(&args.shared, &[]).map_err(|e| Failure::new(e.to_string()))?;
    let tmp;
    let scratch = match args.scratch {
        Some(s) => s,
        None => {
            tmp = tempfile::tempdir()
                .map_err(|e| Failure::new(format!("no scratch directory: {e}")))?;
            tmp.path().to_path_buf()
        }
    };
    let name = args.name.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        format!("{}:{}", host.trim(), std::process::id())
    });
    let opts = WorkerOptions {
        coordinator: args.coordinator,
        name,
        slots: args.slots.max(1),
        scratch,
        poll_every: Duration::from_millis(200),
        grace: Duration::from_secs(args.grace_s),
        commit_delay: Duration::from_millis(args.commit_delay_ms),
    };
    eprintln!(
        "tern worker {}: {} slots, coordinator {}, shared tier {}",
        opts.name,
        opts.slots,
        opts.coordinator,
        tier.url()
    );
    runtime()?.block_on(async {
        let metrics = metrics_listener(&args.metrics_bind).await?;
        tern_offload::worker_daemon::run_with_metrics(opts, tier, filters(), metrics, terminated())
            .await
            .map_err(|e| Failure::new(format!("worker stopped: {e}")))
    })?;
    Ok(ExitCode::SUCCESS)
}
