//! Where compaction jobs run.

use super::{CompactionJob, CompactionOutput, JobContext};
use crate::error::Result;

/// Runs compaction jobs. The store installs whatever the executor returns
/// after checking it, so an executor can run a job anywhere that sees the
/// same files: the calling thread, a pool, or a remote worker.
pub trait Executor: Send + Sync {
    /// Runs `job` to completion.
    fn execute(&self, job: &CompactionJob, ctx: &JobContext) -> Result<CompactionOutput>;
}

/// Runs each job on the calling background thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalExecutor;

impl Executor for LocalExecutor {
    fn execute(&self, job: &CompactionJob, ctx: &JobContext) -> Result<CompactionOutput> {
        job.run(ctx)
    }
}
