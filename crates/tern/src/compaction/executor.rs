//! Where compaction jobs run.

use std::path::Path;

use super::{CompactionJob, CompactionOutput, JobContext};
use crate::error::Result;
use crate::gc::{GcContext, GcJob, GcOutput};

/// Runs compaction and GC jobs: on the calling thread, a pool, or a remote
/// worker. The store checks a GC result against its job and reads each
/// output's index before installing it; an executor that runs compactions
/// out of process checks their outputs with [`CompactionJob::check_output`]
/// before returning them.
pub trait Executor: Send + Sync {
    /// A table or blob file the store just installed (`NNNNNN.sst`,
    /// `NNNNNN.blob`): complete, synced and never changed again. Called
    /// under the store's state lock, so it must only take note (an executor
    /// that ships inputs elsewhere queues the upload). A file moved
    /// between levels is reported again.
    fn file_added(&self, _path: &Path) {}

    /// A table or blob file the store deleted.
    fn file_removed(&self, _path: &Path) {}

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
