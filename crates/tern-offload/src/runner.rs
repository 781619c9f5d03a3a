//! How a store's executor gets a job run: the seam between the store side
//! and whatever runs workers.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::error::{OffloadError, Result};
use crate::filters::FilterRegistry;
use crate::proto;
use crate::shared::SharedTier;
use crate::worker;

/// Gets jobs run by workers and returns the committed attempt's manifest.
pub trait JobRunner: Send + Sync {
    /// Has `job` run and returns the manifest of the attempt that
    /// committed it, or fails within `deadline`.
    fn run(
        &self,
        job: proto::JobSpec,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<proto::ResultManifest>>;
}

/// Runs each job with the worker code in this process, over the shared
/// tier: every step a remote worker takes except the network hop. For
/// tests and for a store that only wants its jobs off the engine's
/// threads.
#[derive(Debug)]
pub struct InProcessRunner {
    tier: SharedTier,
    scratch: PathBuf,
    filters: FilterRegistry,
    attempts: AtomicU32,
}

impl InProcessRunner {
    /// A runner working in `scratch` (a local directory) with `filters`.
    pub fn new(tier: SharedTier, scratch: PathBuf, filters: FilterRegistry) -> Self {
        InProcessRunner {
            tier,
            scratch,
            filters,
            attempts: AtomicU32::new(0),
        }
    }
}

impl JobRunner for InProcessRunner {
    fn run(
        &self,
        job: proto::JobSpec,
        deadline: Duration,
    ) -> BoxFuture<'_, Result<proto::ResultManifest>> {
        Box::pin(async move {
            let attempt = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
            let run = worker::run_job(
                &self.tier,
                &job,
                attempt,
                "in-process",
                &self.scratch,
                &self.filters,
            );
            tokio::time::timeout(deadline, run)
                .await
                .map_err(|_| OffloadError::Timeout(deadline))?
        })
    }
}
