//! Where compaction jobs run.

use super::{CompactionJob, CompactionOutput, JobContext};
use crate::error::Result;
use crate::gc::{GcContext, GcJob, GcOutput};

/// Runs compaction jobs. The store installs whatever the executor returns
/// after checking it, so an executor can run a job anywhere that sees the
/// same files: the calling thread, a pool, or a remote worker.
pub trait Executor: Send + Sync {
    /// Runs `job` to completion (by default on the calling thread).
    fn execute(&self, job: &CompactionJob, ctx: &JobContext) -> Result<CompactionOutput> {
        job.run(ctx)
    }

    /// Runs a blob GC job to completion (by default on the calling thread).
    fn execute_gc(&self, job: &GcJob, ctx: &GcContext) -> Result<GcOutput> {
        job.run(ctx)
    }
}

/// Runs each job on the calling background thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalExecutor;

impl Executor for LocalExecutor {}
