//! Where compaction jobs run.

use std::path::Path;

use super::{CompactionJob, CompactionOutput, JobContext};
use crate::error::{Error, Result};
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

    /// Runs the key-range parts of one compaction ([`CompactionJob::split`])
    /// and returns their outputs in order; by default each part runs as
    /// [`Executor::execute`] runs it, all at once, the first on the calling
    /// thread and each other on a thread of its own. If any part fails, the
    /// others' outputs are removed and the first error is returned.
    fn execute_parts(
        &self,
        parts: &[CompactionJob],
        ctx: &JobContext,
    ) -> Result<Vec<CompactionOutput>> {
        run_parts(self, parts, ctx)
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

/// Runs the key-range parts of one compaction at once through `exec`, as
/// [`Executor::execute_parts`] does by default: the first on the calling
/// thread, each other on a thread of its own. If any part fails, the
/// others' outputs are removed and the first error is returned.
pub fn run_parts<E: Executor + ?Sized>(
    exec: &E,
    parts: &[CompactionJob],
    ctx: &JobContext,
) -> Result<Vec<CompactionOutput>> {
    let results: Vec<Result<CompactionOutput>> = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate().skip(1) {
            let spawned = std::thread::Builder::new()
                .name(format!("tern-subcompaction-{i}"))
                .spawn_scoped(scope, move || exec.execute(part, ctx));
            handles.push((part, spawned));
        }
        let mut results = Vec::with_capacity(parts.len());
        if let Some(first) = parts.first() {
            results.push(exec.execute(first, ctx));
        }
        for (part, h) in handles {
            results.push(match h {
                // A part that could not get a thread runs on this one.
                Err(_) => exec.execute(part, ctx),
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(Error::Internal("a subcompaction thread panicked".into()))
                }),
            });
        }
        results
    });
    if let Some(i) = results.iter().position(|r| r.is_err()) {
        for (part, r) in parts.iter().zip(&results) {
            if let Ok(out) = r {
                out.remove_files(&part.dir, &ctx.fs);
            }
        }
        return match results.into_iter().nth(i) {
            Some(Err(e)) => Err(e),
            _ => Err(Error::Internal("a subcompaction failed".into())),
        };
    }
    results.into_iter().collect()
}
