//! What a worker does with one attempt of a job: download the inputs from
//! the shared tier, run the engine's job code on them, upload the outputs
//! and commit the attempt by writing its result manifest.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use prost::Message;
use tern::compaction::JobContext;
use tern::gc::GcContext;
use tern::io::PosixFs;
use tern::{blob_file_name, table_file_name};

use crate::error::{io_err, OffloadError, Result};
use crate::filters::FilterRegistry;
use crate::proto::{self, job_spec, result_manifest};
use crate::shared::SharedTier;
use crate::spec;

/// Where attempt `attempt` of job `job` puts its files in the shared tier.
pub fn attempt_prefix(job: &str, attempt: u32) -> String {
    format!("jobs/{job}/{attempt}")
}

/// The result manifest's path in the shared tier.
pub fn manifest_path(job: &str, attempt: u32) -> String {
    format!("{}/result.pb", attempt_prefix(job, attempt))
}

/// Removes a scratch directory when the attempt ends, however it ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether `id` may name a job or store: 1 to 128 letters, digits, `-`, `_`.
pub fn id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// What a worker runs attempts with.
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    /// The shared tier.
    pub tier: SharedTier,
    /// The worker's name, recorded in each manifest.
    pub name: String,
    /// Each attempt works in a directory of its own under this one.
    pub scratch: PathBuf,
    /// The compaction filters it can rebuild.
    pub filters: FilterRegistry,
    /// Waits this long between uploading the outputs and committing: a
    /// fault-injection knob for tests of slow, frozen and killed workers
    /// (zero otherwise).
    pub commit_delay: std::time::Duration,
}

/// Bytes an attempt moved through the shared tier, counted as they move.
#[derive(Debug, Default)]
pub struct Moved {
    /// Bytes of inputs taken from the tier (for an input taken as a hard
    /// link, the bytes read to check it).
    pub downloaded: AtomicU64,
    /// Bytes of outputs given to the tier (likewise).
    pub uploaded: AtomicU64,
}

impl Moved {
    /// Both directions together: the attempt's progress, less its scratch
    /// directory.
    pub fn total(&self) -> u64 {
        self.downloaded.load(Relaxed) + self.uploaded.load(Relaxed)
    }
}

/// Runs attempt `attempt` of `job` in `env` and commits it. Returns the
/// manifest written. Fails without committing if anything goes wrong, or
/// if the attempt was committed already (its manifest exists).
///
/// `moved` grows with every byte downloaded and uploaded; the worker adds
/// the bytes its scratch directory holds and reports the sum as progress,
/// so a stuck attempt shows as a number that stops growing.
pub async fn run_job(
    env: &WorkerEnv,
    job: &proto::JobSpec,
    attempt: u32,
    moved: &Moved,
) -> Result<proto::ResultManifest> {
    let (tier, filters) = (&env.tier, &env.filters);
    if !id_ok(&job.job_id) {
        return Err(OffloadError::Invalid(format!(
            "job id {:?} is not 1 to 128 letters, digits, '-' or '_'",
            job.job_id
        )));
    }
    let dir = env.scratch.join(format!("{}-{attempt}", job.job_id));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let _scratch = Scratch(dir.clone());
    let prefix = attempt_prefix(&job.job_id, attempt);
    let kind = match &job.kind {
        Some(job_spec::Kind::Compaction(c)) => result_manifest::Kind::Compaction(
            compact(tier, c, &dir, &prefix, filters, moved).await?,
        ),
        Some(job_spec::Kind::Gc(g)) => {
            result_manifest::Kind::Gc(gc(tier, g, &dir, &prefix, moved).await?)
        }
        None => return Err(OffloadError::Invalid("job spec of no known kind".into())),
    };
    if !env.commit_delay.is_zero() {
        tokio::time::sleep(env.commit_delay).await;
    }
    let manifest = proto::ResultManifest {
        job_id: job.job_id.clone(),
        attempt,
        worker: env.name.clone(),
        kind: Some(kind),
    };
    let path = manifest_path(&job.job_id, attempt);
    if !tier.put_new(&path, manifest.encode_to_vec()).await? {
        return Err(OffloadError::Invalid(format!(
            "attempt {attempt} of job {} was committed already",
            job.job_id
        )));
    }
    Ok(manifest)
}

/// Downloads each input (its file, the name it takes in `dir`), checking
/// it.
async fn fetch_inputs(
    tier: &SharedTier,
    inputs: Vec<(Option<&proto::FileRef>, String)>,
    dir: &Path,
    moved: &Moved,
) -> Result<()> {
    for (file, name) in inputs {
        let file =
            file.ok_or_else(|| OffloadError::Invalid("job input without its file".into()))?;
        tier.download_to(file, &dir.join(name), &moved.downloaded)
            .await?;
    }
    Ok(())
}

/// Runs the engine's job code on the blocking pool.
async fn blocking<T: Send + 'static>(
    job: impl FnOnce() -> tern::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(job)
        .await
        .map_err(|e| OffloadError::Invalid(format!("the job's task failed: {e}")))?
        .map_err(OffloadError::from)
}

async fn compact(
    tier: &SharedTier,
    c: &proto::CompactionSpec,
    dir: &Path,
    prefix: &str,
    filters: &FilterRegistry,
    moved: &Moved,
) -> Result<proto::CompactionResult> {
    let inputs: Vec<_> = c
        .inputs
        .iter()
        .map(|i| (i.file.as_ref(), table_file_name(i.number)))
        .collect();
    fetch_inputs(tier, inputs, dir, moved).await?;
    let job = spec::compaction_job(c, dir.to_path_buf(), filters)?;
    // Outputs are numbered after the inputs so no name collides; the store
    // numbers them anew when it takes them.
    let first = c.inputs.iter().map(|i| i.number).max().unwrap_or(0) + 1;
    let ctx = JobContext {
        fs: Arc::new(PosixFs),
        next_file_number: Arc::new(AtomicU64::new(first)),
        rate_limiter: None,
    };
    let out = blocking(move || job.run(&ctx)).await?;
    let mut files = Vec::with_capacity(out.files.len());
    for (i, f) in out.files.iter().enumerate() {
        let local = dir.join(table_file_name(f.number));
        let rel = format!("{prefix}/{i:06}.sst");
        files.push(tier.upload(&local, &rel, Some(&moved.uploaded)).await?);
    }
    Ok(spec::compaction_result(&out, files))
}

async fn gc(
    tier: &SharedTier,
    g: &proto::GcSpec,
    dir: &Path,
    prefix: &str,
    moved: &Moved,
) -> Result<proto::GcResult> {
    let inputs: Vec<_> = g
        .inputs
        .iter()
        .map(|i| (i.file.as_ref(), blob_file_name(i.number)))
        .collect();
    fetch_inputs(tier, inputs, dir, moved).await?;
    let job = spec::gc_job(g, dir.to_path_buf())?;
    let ctx = GcContext {
        fs: Arc::new(PosixFs),
        rate_limiter: None,
    };
    let out = blocking(move || job.run(&ctx)).await?;
    let mut files = Vec::with_capacity(out.files.len());
    for f in &out.files {
        let name = blob_file_name(f.meta.number);
        files.push(
            tier.upload(
                &dir.join(&name),
                &format!("{prefix}/{name}"),
                Some(&moved.uploaded),
            )
            .await?,
        );
    }
    Ok(spec::gc_result(&out, files))
}
