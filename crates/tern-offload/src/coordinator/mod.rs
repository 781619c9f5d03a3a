//! `tern coordinator`: the control plane. Stores submit jobs and wait for
//! their outcome; workers register, poll for work and report it finished.
//! The state machine is [`queue::Queue`]; this module serves it over gRPC
//! and runs its clock, and renders its metrics.

pub mod etcd;
pub mod queue;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

use crate::metrics::{Text, Type};
use crate::proto::{self, coordinator_server};
pub use etcd::EtcdState;
pub use queue::{Limits, Queue};

/// How often the coordinator checks leases and progress.
const TICK: Duration = Duration::from_millis(100);
/// Longest an Await is held.
const MAX_WAIT: Duration = Duration::from_secs(10);

/// The coordinator's shared state.
#[derive(Debug)]
pub struct Coordinator {
    queue: Mutex<Queue>,
    /// Woken on every change an awaiting store may care about.
    changed: Notify,
    /// Where the jobs are kept, if anywhere but memory.
    etcd: Option<tokio::sync::Mutex<EtcdState>>,
    /// Set when a write to etcd failed: the coordinator must stop.
    failed: tokio::sync::watch::Sender<bool>,
}

impl Coordinator {
    /// A coordinator with `limits`, its state in memory only.
    pub fn new(limits: Limits) -> Arc<Self> {
        Self::with_state(Queue::new(limits), None)
    }

    fn with_state(queue: Queue, etcd: Option<EtcdState>) -> Arc<Self> {
        Arc::new(Coordinator {
            queue: Mutex::new(queue),
            changed: Notify::new(),
            etcd: etcd.map(tokio::sync::Mutex::new),
            failed: tokio::sync::watch::channel(false).0,
        })
    }

    /// Writes what changed to etcd (nothing without etcd) before a reply
    /// depends on it. A failure stops the coordinator: its memory may be
    /// ahead of etcd, and the next leader starts from etcd.
    async fn flush(&self) -> Result<(), Status> {
        let Some(etcd) = &self.etcd else {
            return Ok(());
        };
        // Taken under the etcd lock, so changes are written in order.
        let mut etcd = etcd.lock().await;
        if *self.failed.borrow() {
            // The write that failed took changes with it: writing nothing
            // now must not look like success to the caller.
            return Err(Status::unavailable(
                "coordinator stopping: an earlier write to etcd failed",
            ));
        }
        let (changed, removed) = self.queue.lock().take_changes();
        if let Err(e) = etcd.persist(&changed, &removed).await {
            tracing::error!("tern coordinator: {e}");
            self.failed.send_replace(true);
            return Err(Status::unavailable(format!("coordinator stopping: {e}")));
        }
        Ok(())
    }

    /// A snapshot for status displays.
    pub fn status(&self) -> proto::StatusReply {
        self.queue.lock().status(Instant::now())
    }

    /// The numbers its metrics show, taken under the lock at once.
    pub fn metrics(&self) -> queue::Metrics {
        self.queue.lock().metrics()
    }

    /// Checks leases and progress until the process ends.
    async fn clock(self: Arc<Self>) {
        let mut every = tokio::time::interval(TICK);
        loop {
            every.tick().await;
            if self.queue.lock().tick(Instant::now()) {
                if self.flush().await.is_err() {
                    return;
                }
                self.changed.notify_waiters();
            }
        }
    }
}

/// The gRPC face of a [`Coordinator`]: served from the start, so a
/// standby answers every request at once with `unavailable` and a client
/// given several coordinators moves on to the next instead of waiting on
/// a listener nobody accepts from.
#[derive(Debug, Clone, Default)]
pub struct Service(Arc<OnceLock<Arc<Coordinator>>>);

impl Service {
    /// A service for a coordinator that leads from the start.
    pub fn leading(c: Arc<Coordinator>) -> Self {
        let s = Service::default();
        let _ = s.0.set(c);
        s
    }

    /// The coordinator, once this one leads and while it may go on: after
    /// a failed write to etcd its memory may hold what etcd never got, so
    /// it answers nothing from it.
    fn lead(&self) -> Result<&Arc<Coordinator>, Status> {
        let c = self.0.get().ok_or_else(|| {
            Status::unavailable(
                "this coordinator stands by while another leads; ask the next coordinator",
            )
        })?;
        if *c.failed.borrow() {
            return Err(Status::unavailable(
                "coordinator stopping (shut down, lost leadership, or a write to etcd failed); \
                 ask the next coordinator",
            ));
        }
        Ok(c)
    }
}

#[tonic::async_trait]
impl coordinator_server::Coordinator for Service {
    async fn submit(
        &self,
        req: Request<proto::SubmitRequest>,
    ) -> Result<Response<proto::SubmitReply>, Status> {
        let req = req.into_inner();
        let job = req
            .job
            .ok_or_else(|| Status::invalid_argument("submit without a job"))?;
        let c = self.lead()?;
        let r = c.queue.lock().submit(job, req.priority, Instant::now());
        // An accepted job is in etcd before its store hears so.
        c.flush().await?;
        Ok(Response::new(match r {
            Ok(()) => proto::SubmitReply {
                accepted: true,
                reason: String::new(),
            },
            Err(reason) => proto::SubmitReply {
                accepted: false,
                reason,
            },
        }))
    }

    async fn r#await(
        &self,
        req: Request<proto::AwaitRequest>,
    ) -> Result<Response<proto::AwaitReply>, Status> {
        let req = req.into_inner();
        let wait = Duration::from_millis(req.wait_ms.into()).min(MAX_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        let c = self.lead()?;
        loop {
            // Registered before the check, so a change in between wakes it.
            let changed = c.changed.notified();
            if *c.failed.borrow() {
                // Woken after a write to etcd failed: memory may be ahead.
                return Err(Status::unavailable("coordinator stopping"));
            }
            let reply = c.queue.lock().outcome(&req.job_id);
            let pending = reply.state == proto::await_reply::State::Pending as i32;
            if !pending || tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Ok(Response::new(reply));
            }
        }
    }

    async fn register(
        &self,
        req: Request<proto::RegisterRequest>,
    ) -> Result<Response<proto::RegisterReply>, Status> {
        let req = req.into_inner();
        let mut q = self.lead()?.queue.lock();
        let id = q.register(&req.name, req.slots, Instant::now());
        tracing::info!(
            "tern coordinator: worker {id} ({}) registered with {} slots",
            req.name,
            req.slots
        );
        Ok(Response::new(proto::RegisterReply {
            worker_id: id,
            lease_ms: q.limits().lease.as_millis() as u32,
        }))
    }

    async fn poll(
        &self,
        req: Request<proto::PollRequest>,
    ) -> Result<Response<proto::PollReply>, Status> {
        let req = req.into_inner();
        let c = self.lead()?;
        let reply = c.queue.lock().poll(&req, Instant::now());
        c.flush().await?;
        Ok(Response::new(reply))
    }

    async fn finish(
        &self,
        req: Request<proto::FinishRequest>,
    ) -> Result<Response<proto::FinishReply>, Status> {
        let req = req.into_inner();
        let outcome = match req.result {
            Some(m) if req.error.is_empty() => Ok(m),
            _ => Err(if req.error.is_empty() {
                "the worker sent no result".to_string()
            } else {
                req.error
            }),
        };
        let c = self.lead()?;
        let accepted = c.queue.lock().finish(
            &req.worker_id,
            &req.job_id,
            req.attempt,
            outcome,
            Instant::now(),
        );
        // The outcome is in etcd before the store or the worker hears it.
        c.flush().await?;
        c.changed.notify_waiters();
        Ok(Response::new(proto::FinishReply { accepted }))
    }

    async fn status(
        &self,
        _req: Request<proto::StatusRequest>,
    ) -> Result<Response<proto::StatusReply>, Status> {
        Ok(Response::new(self.lead()?.status()))
    }
}

/// Where a coordinator keeps its state.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// etcd endpoints, `http://host:port`.
    pub endpoints: Vec<String>,
    /// Key prefix; coordinators sharing it elect one leader.
    pub prefix: String,
    /// This coordinator's id in the election.
    pub id: String,
}

/// The Prometheus exposition of a coordinator: `leading` is the
/// coordinator once it serves (`None` while it stands by), `etcd` whether
/// it keeps its state there (only then does `tern_coordinator_leader`
/// mean anything). Metric names and meanings: docs/offload.md.
pub fn render_metrics(leading: Option<&Coordinator>, etcd: bool) -> String {
    let mut t = Text::new();
    if etcd {
        t.gauge(
            "tern_coordinator_leader",
            "1 if this coordinator leads (holds the leader key in etcd), 0 while it stands by.",
            u64::from(leading.is_some()),
        );
    }
    let Some(c) = leading else {
        return t.finish();
    };
    // Copied under the lock, formatted after it is released.
    let m = c.metrics();
    let per_kind = |f: fn(&queue::KindMetrics) -> u64| -> Vec<(&str, u64)> {
        m.kinds.iter().map(|k| (k.kind, f(k))).collect()
    };
    t.gauges(
        "tern_coordinator_queued_jobs",
        "Jobs waiting for a worker, by kind.",
        "kind",
        &per_kind(|k| k.queued),
    );
    t.gauges(
        "tern_coordinator_running_jobs",
        "Jobs running as an attempt on a worker, by kind.",
        "kind",
        &per_kind(|k| k.running),
    );
    t.gauge(
        "tern_coordinator_workers",
        "Workers registered (draining ones included); a worker that misses its lease is dropped.",
        m.workers,
    );
    t.gauge(
        "tern_coordinator_draining_workers",
        "Registered workers shutting down: they finish what they run and take nothing new.",
        m.draining_workers,
    );
    t.gauge(
        "tern_coordinator_worker_slots",
        "Job slots of the registered workers.",
        m.slots,
    );
    t.gauge(
        "tern_coordinator_worker_free_slots",
        "Slots of the workers taking jobs that run no attempt. 0 with jobs queued: the workers are saturated.",
        m.free_slots,
    );
    let c = &m.counters;
    t.counter(
        "tern_coordinator_jobs_submitted_total",
        "Jobs accepted from stores.",
        c.submitted,
    );
    t.counter(
        "tern_coordinator_jobs_done_total",
        "Jobs a worker completed; their stores fetch, verify and install the results.",
        c.done,
    );
    t.counters(
        "tern_coordinator_jobs_failed_total",
        "Jobs given up on, by cause (their stores run them, or fail them with fallback off).",
        "cause",
        &[
            ("attempts_exhausted", c.failed_attempts_exhausted),
            ("no_worker_left", c.failed_no_worker_left),
        ],
    );
    t.counters(
        "tern_coordinator_jobs_refused_total",
        "Submissions refused at once, by cause (their stores run them).",
        "cause",
        &[
            ("no_worker", c.refused_no_worker),
            ("queue_full", c.refused_queue_full),
            ("invalid", c.refused_invalid),
        ],
    );
    t.counter(
        "tern_coordinator_jobs_restored_total",
        "Jobs restored from etcd when this coordinator began leading.",
        c.restored,
    );
    t.counter(
        "tern_coordinator_attempts_dispatched_total",
        "Attempts handed to workers.",
        c.dispatched,
    );
    t.counters(
        "tern_coordinator_attempts_reassigned_total",
        "Attempts taken from their worker and queued again, by cause.",
        "cause",
        &[
            ("lease_expired", c.reassigned_lease_expired),
            ("no_progress", c.reassigned_no_progress),
        ],
    );
    t.counter(
        "tern_coordinator_attempts_failed_total",
        "Attempts their worker reported failed; each is retried or fails its job.",
        c.attempts_failed,
    );
    t.counter(
        "tern_coordinator_stale_reports_total",
        "Reports of attempts no longer current (a zombie's), ignored.",
        c.stale_reports,
    );
    let name = "tern_coordinator_job_seconds";
    t.family(
        name,
        Type::Histogram,
        "Submission to done, of the jobs done, by kind.",
    );
    for k in &m.kinds {
        t.histogram_series(name, &[("kind", k.kind)], &k.job_seconds);
    }
    let name = "tern_coordinator_queue_wait_seconds";
    t.family(
        name,
        Type::Histogram,
        "Submission to the first attempt's hand-out, by kind.",
    );
    for k in &m.kinds {
        t.histogram_series(name, &[("kind", k.kind)], &k.queue_wait);
    }
    t.finish()
}

/// Serves a coordinator with `limits` on `listener` until `shutdown`
/// completes. With `etcd`, it first waits to lead (standing by while
/// another coordinator does), starts from the jobs etcd holds, writes every
/// change there before replying, and stops with an error when it loses
/// leadership or a write fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    limits: Limits,
    etcd: Option<EtcdConfig>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> crate::Result<()> {
    serve_with_metrics(listener, None, limits, etcd, shutdown).await
}

/// [`serve`], with Prometheus metrics ([`render_metrics`]) on `GET
/// /metrics` at `metrics` if given. Both are served from the start: a
/// standby answers metrics as not the leader, and gRPC requests with
/// `unavailable` until it leads.
pub async fn serve_with_metrics(
    listener: tokio::net::TcpListener,
    metrics: Option<tokio::net::TcpListener>,
    limits: Limits,
    etcd: Option<EtcdConfig>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> crate::Result<()> {
    let service = Service::default();
    let _endpoint = metrics.map(|l| {
        let (leading, etcd) = (service.0.clone(), etcd.is_some());
        crate::metrics::spawn(l, "tern coordinator", move || {
            render_metrics(leading.get().map(|c| &**c), etcd)
        })
    });
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(coordinator_server::CoordinatorServer::new(service.clone()))
            .serve_with_incoming_shutdown(incoming, async {
                let _ = rx.await;
            }),
    );
    let led = lead_until_stopped(&service, limits, etcd, stop).await;
    let _ = tx.send(());
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(crate::OffloadError::Invalid(format!("gRPC server: {e}"))),
        Err(e) => return Err(crate::OffloadError::Invalid(format!("gRPC server: {e}"))),
    }
    match led? {
        true => Err(crate::OffloadError::Invalid(
            "lost leadership or could not write to etcd; stopped".into(),
        )),
        false => Ok(()),
    }
}

/// Waits to lead (with etcd), then leads until `stop` turns true (returns
/// `false`) or leadership or an etcd write is lost (returns `true`).
async fn lead_until_stopped(
    service: &Service,
    limits: Limits,
    etcd: Option<EtcdConfig>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> crate::Result<bool> {
    let mut lost = None;
    let coordinator = match etcd {
        None => Coordinator::new(limits),
        Some(cfg) => {
            let elected = tokio::select! {
                r = EtcdState::elect(&cfg.endpoints, &cfg.prefix, &cfg.id, limits.lease * 3) => r?,
                _ = stop.wait_for(|s| *s) => return Ok(false),
            };
            let mut state = elected;
            let records = state.load().await?;
            tracing::info!(
                "tern coordinator: leading under {}, {} jobs restored",
                cfg.prefix,
                records.len()
            );
            let queue = Queue::restore(limits, records, Instant::now());
            lost = Some(state.lost());
            Coordinator::with_state(queue, Some(state))
        }
    };
    let _ = service.0.set(coordinator.clone());
    tokio::spawn(coordinator.clone().clock());
    let mut failed = coordinator.failed.subscribe();
    let lost = async {
        match lost {
            Some(mut rx) => {
                let _ = rx.wait_for(|l| *l).await;
            }
            None => std::future::pending().await,
        }
    };
    let failed = tokio::select! {
        _ = stop.wait_for(|s| *s) => false,
        _ = failed.wait_for(|f| *f) => true,
        () = lost => {
            // Deposed: answer nothing more from memory while the server
            // drains.
            coordinator.failed.send_replace(true);
            true
        }
    };
    if !failed {
        // Nothing answers from here on, then a standby may lead at once.
        coordinator.failed.send_replace(true);
        if let Some(etcd) = &coordinator.etcd {
            // No reply depends on anything after this: hand over now.
            if let Err(e) = etcd.lock().await.resign().await {
                tracing::warn!("tern coordinator: could not give up leadership: {e}");
            }
        }
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use coordinator_server::Coordinator as _;

    fn poll_req() -> Request<proto::PollRequest> {
        Request::new(proto::PollRequest {
            worker_id: "w".into(),
            ..Default::default()
        })
    }

    #[tokio::test]
    async fn a_standby_and_a_failed_leader_answer_only_unavailable() {
        let standby = Service::default();
        let e = standby.poll(poll_req()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        let e = standby
            .status(Request::new(proto::StatusRequest {}))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);

        let c = Coordinator::new(Limits::default());
        let leader = Service::leading(c.clone());
        assert!(leader.poll(poll_req()).await.is_ok());
        // A write to etcd failed: whatever memory holds may not be there.
        c.failed.send_replace(true);
        let e = leader.poll(poll_req()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
        let e = leader
            .r#await(Request::new(proto::AwaitRequest {
                job_id: "j".into(),
                wait_ms: 0,
            }))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unavailable);
    }
}
