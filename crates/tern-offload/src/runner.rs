//! How a store's executor gets a job run: the seam between the store side
//! and whatever runs workers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::coordinators::Coordinators;
use crate::error::{OffloadError, Result};
use crate::filters::FilterRegistry;
use crate::proto;
use crate::shared::SharedTier;
use crate::worker::{self, WorkerEnv};

/// Gets jobs run by workers and returns the committed attempt's manifest.
pub trait JobRunner: Send + Sync {
    /// Has `job` run, queued at `priority` (smaller first among jobs of
    /// its kind), and returns the manifest of the attempt that committed
    /// it, or fails within `deadline`.
    fn run(
        &self,
        job: proto::JobSpec,
        priority: u32,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<proto::ResultManifest>>;
}

/// Runs each job with the worker code in this process, over the shared
/// tier: every step a remote worker takes except the network hop. For
/// tests and for a store that only wants its jobs off the engine's
/// threads.
#[derive(Debug)]
pub struct InProcessRunner {
    env: WorkerEnv,
    attempts: AtomicU32,
}

impl InProcessRunner {
    /// A runner working in `scratch` (a local directory) with `filters`.
    pub fn new(tier: SharedTier, scratch: PathBuf, filters: FilterRegistry) -> Self {
        InProcessRunner {
            env: WorkerEnv {
                tier,
                name: "in-process".into(),
                scratch,
                filters,
                commit_delay: Duration::ZERO,
            },
            attempts: AtomicU32::new(0),
        }
    }
}

impl JobRunner for InProcessRunner {
    fn run(
        &self,
        job: proto::JobSpec,
        _priority: u32,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<proto::ResultManifest>> {
        Box::pin(async move {
            let attempt = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
            let moved = worker::Moved::default();
            let run = worker::run_job(&self.env, &job, attempt, &moved);
            tokio::time::timeout(deadline, run)
                .await
                .map_err(|_| OffloadError::Timeout(deadline))?
        })
    }
}

/// Gets jobs run through a `tern coordinator` over gRPC (or the first of
/// a leader and its standbys that leads: [`Coordinators`]).
#[derive(Debug)]
pub struct GrpcRunner {
    coordinators: Coordinators,
}

impl GrpcRunner {
    /// A runner for the coordinator at `url` (`http://host:port`, or
    /// several separated by commas). Connects on first use and reconnects
    /// as needed.
    pub fn new(url: &str) -> Result<Self> {
        Ok(GrpcRunner {
            // An Await is held at most 5 s; a coordinator that takes much
            // longer is frozen or cut off, and the next one may lead.
            coordinators: Coordinators::new(url, Duration::from_secs(10))?,
        })
    }

    /// Submits `submit`, moving on through the coordinators while one
    /// fails or stands by (a repeated submission of the same job is the
    /// same job to the coordinator).
    async fn submit(
        &self,
        submit: proto::SubmitRequest,
        until: tokio::time::Instant,
        deadline: Duration,
    ) -> Result<proto::SubmitReply> {
        let mut tries = 0;
        loop {
            let (i, mut client) = self.coordinators.client();
            let e = match tokio::time::timeout_at(until, client.submit(submit.clone())).await {
                Err(_) => return Err(OffloadError::Timeout(deadline)),
                Ok(Ok(r)) => return Ok(r.into_inner()),
                Ok(Err(e)) => e,
            };
            tries += 1;
            if !self.coordinators.failed(i) || tries >= 2 * self.coordinators.len() {
                return Err(rpc(e));
            }
            tracing::debug!(
                "tern offload: {} did not take the job: {}",
                self.coordinators.url(i),
                e.message()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn rpc(e: tonic::Status) -> OffloadError {
    OffloadError::Invalid(format!("coordinator: {}", e.message()))
}

impl JobRunner for GrpcRunner {
    fn run(
        &self,
        job: proto::JobSpec,
        priority: u32,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<proto::ResultManifest>> {
        Box::pin(async move {
            let until = tokio::time::Instant::now() + deadline;
            let job_id = job.job_id.clone();
            let submit = proto::SubmitRequest {
                job: Some(job),
                priority,
            };
            let r = self.submit(submit, until, deadline).await?;
            if !r.accepted {
                return Err(OffloadError::Invalid(format!(
                    "coordinator refused the job: {}",
                    r.reason
                )));
            }
            loop {
                let left = until.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return Err(OffloadError::Timeout(deadline));
                }
                let ask = proto::AwaitRequest {
                    job_id: job_id.clone(),
                    wait_ms: left.min(Duration::from_secs(5)).as_millis() as u32,
                };
                let (i, mut client) = self.coordinators.client();
                let r = match tokio::time::timeout_at(until, client.r#await(ask)).await {
                    Err(_) => return Err(OffloadError::Timeout(deadline)),
                    Ok(Ok(r)) => r.into_inner(),
                    Ok(Err(e)) => {
                        // The coordinator may be restarting, or a standby
                        // may be taking over; one that keeps its jobs in
                        // etcd still has it. Ask again (the next one, if
                        // there are several) until the deadline.
                        tracing::debug!(
                            "tern offload: awaiting {job_id} at {}: {}",
                            self.coordinators.url(i),
                            e.message()
                        );
                        self.coordinators.failed(i);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                use proto::await_reply::State;
                match State::try_from(r.state).unwrap_or(State::Unknown) {
                    State::Pending => continue,
                    State::Done => {
                        return r.result.ok_or_else(|| {
                            OffloadError::Invalid("coordinator: done without a result".into())
                        })
                    }
                    State::Failed => {
                        return Err(OffloadError::Invalid(format!("job failed: {}", r.reason)))
                    }
                    State::Unknown => {
                        return Err(OffloadError::Invalid(
                            "the coordinator lost the job (it restarted?)".into(),
                        ))
                    }
                }
            }
        })
    }
}
