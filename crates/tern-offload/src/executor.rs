//! The store side: an [`Executor`] that ships jobs to workers through the
//! shared tier and installs only what it has verified.
//!
//! Inputs: every table and blob file the store installs is queued for
//! upload as it appears ([`Executor::file_added`]), and uploaded on demand
//! if a job needs it first; its size and CRC-32C are taken as it is read
//! for the upload, and go into the spec. Outputs: downloaded into the
//! store's directory under file numbers the store chose (a compaction's)
//! or reserved (a GC's: any other number is refused before a byte is
//! written), their checksums checked as they arrive, then every entry
//! checked by the engine ([`CompactionJob::check_output`],
//! [`GcJob::check_output`]). Whatever fails, the outputs are removed and,
//! unless fallback is off, the job runs on the calling thread as if
//! offload were off.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tern::compaction::{CompactionJob, CompactionOutput, Executor, JobContext};
use tern::gc::{GcContext, GcJob, GcOutput};
use tern::io::FsRef;
use tern::{table_file_name, FileMeta};

use crate::error::{OffloadError, Result};
use crate::proto::{self, job_spec, result_manifest};
use crate::runner::JobRunner;
use crate::shared::SharedTier;
use crate::spec;

/// The sweep never runs more often than this (each lists the tier).
const MIN_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// How the store offloads.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Names this store's files in the shared tier (`stores/<id>/…`):
    /// letters, digits, `-` and `_`; unique per store sharing the tier.
    pub store_id: String,
    /// Longest wait for a job's result before the store runs it itself.
    pub deadline: Duration,
    /// Run a job locally when offloading it fails (the default). Off,
    /// the job fails instead and the store retries it later: for tests,
    /// so remote failures cannot hide behind local runs.
    pub fallback: bool,
    /// Objects of this store's that nothing uses (attempts that were never
    /// installed, files the store deleted or no longer tracks) are deleted
    /// once this old; the sweep runs every tenth of it (at most once a
    /// second), however busy the store is.
    pub orphan_grace: Duration,
}

impl RemoteOptions {
    /// A store id stable across restarts and distinct per data directory:
    /// `<kind>-<hash of the directory's absolute path>`.
    pub fn id_for_dir(kind: &str, dir: &Path) -> String {
        let path = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        let h = xxhash_rust::xxh3::xxh3_64(path.to_string_lossy().as_bytes());
        format!("{kind}-{h:016x}")
    }

    /// Options for store `store_id` with the defaults: a 10-minute
    /// deadline, fallback on.
    pub fn new(store_id: &str) -> Self {
        RemoteOptions {
            store_id: store_id.to_string(),
            deadline: Duration::from_secs(600),
            fallback: true,
            orphan_grace: Duration::from_secs(3600),
        }
    }
}

/// What the executor has done, by outcome.
#[derive(Debug, Default)]
pub struct OffloadStats {
    /// Compactions run by workers and installed.
    pub remote_compactions: AtomicU64,
    /// GC jobs run by workers and installed.
    pub remote_gcs: AtomicU64,
    /// Jobs run locally because offloading them failed or was impossible.
    pub local_jobs: AtomicU64,
    /// Fallbacks because the job cannot leave the process (its compaction
    /// filter has no remote form).
    pub fallback_unsupported: AtomicU64,
    /// Fallbacks because an input could not be uploaded.
    pub fallback_upload: AtomicU64,
    /// Fallbacks because no worker delivered a result in time.
    pub fallback_remote: AtomicU64,
    /// Fallbacks because a result failed its checks.
    pub fallback_verify: AtomicU64,
    /// Input files uploaded.
    pub files_uploaded: AtomicU64,
    /// Bytes uploaded.
    pub bytes_uploaded: AtomicU64,
    /// Bytes of outputs downloaded.
    pub bytes_downloaded: AtomicU64,
    /// Orphaned objects deleted from the shared tier.
    pub orphans_deleted: AtomicU64,
}

impl OffloadStats {
    /// Jobs run by workers and installed, compactions and GC together.
    pub fn remote_jobs(&self) -> u64 {
        self.remote_compactions.load(Relaxed) + self.remote_gcs.load(Relaxed)
    }

    /// Every counter: name, what it counts, value (for INFO and metrics).
    pub fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        let c = |name, help, v: &AtomicU64| (name, help, v.load(Relaxed));
        vec![
            c(
                "remote_compactions",
                "Compactions run by workers and installed.",
                &self.remote_compactions,
            ),
            c(
                "remote_gcs",
                "GC jobs run by workers and installed.",
                &self.remote_gcs,
            ),
            c(
                "local_jobs",
                "Jobs run locally because offloading them failed or was impossible.",
                &self.local_jobs,
            ),
            c(
                "fallback_unsupported",
                "Jobs kept local: their compaction filter has no remote form.",
                &self.fallback_unsupported,
            ),
            c(
                "fallback_upload",
                "Jobs run locally: an input could not be uploaded.",
                &self.fallback_upload,
            ),
            c(
                "fallback_remote",
                "Jobs run locally: no worker delivered a result in time.",
                &self.fallback_remote,
            ),
            c(
                "fallback_verify",
                "Jobs run locally: a result failed its checks.",
                &self.fallback_verify,
            ),
            c(
                "files_uploaded",
                "Input files uploaded to the shared tier.",
                &self.files_uploaded,
            ),
            c(
                "bytes_uploaded",
                "Bytes uploaded to the shared tier.",
                &self.bytes_uploaded,
            ),
            c(
                "bytes_downloaded",
                "Bytes of outputs downloaded from the shared tier.",
                &self.bytes_downloaded,
            ),
            c(
                "orphans_deleted",
                "Orphaned objects deleted from the shared tier.",
                &self.orphans_deleted,
            ),
        ]
    }
}

/// Why one offload attempt failed, for the counters.
enum Failure {
    Unsupported,
    Upload(OffloadError),
    Remote(OffloadError),
    Verify(OffloadError),
}

impl Failure {
    fn describe(&self) -> String {
        match self {
            Failure::Unsupported => "its compaction filter cannot run elsewhere".into(),
            Failure::Upload(e) => format!("uploading an input failed: {e}"),
            Failure::Remote(e) => format!("no worker delivered: {e}"),
            Failure::Verify(e) => format!("the result failed its checks: {e}"),
        }
    }
}

/// What goes to the uploader thread.
enum Upload {
    Added(PathBuf),
    Removed(PathBuf),
    /// Answered once everything queued before it is handled.
    Flush(crossbeam_channel::Sender<()>),
}

struct Inner {
    tier: SharedTier,
    runner: Arc<dyn JobRunner>,
    opts: RemoteOptions,
    fs: FsRef,
    /// Owned so it lives as long as the executor; shut down without
    /// waiting when dropped (possibly inside another runtime).
    runtime: Option<tokio::runtime::Runtime>,
    rt: tokio::runtime::Handle,
    /// File name → its object, for files uploaded.
    uploaded: Mutex<HashMap<String, proto::FileRef>>,
    /// Files whose upload is under way: their objects may be in the tier
    /// before they are in `uploaded`. The sweep holds this lock from its
    /// check of a file to its deletion, so neither can start under the
    /// other. Counted: the parts of a split compaction share inputs and
    /// may upload one at once, and the first to finish must not unmark it
    /// while another still uploads.
    uploading: Mutex<HashMap<String, usize>>,
    stats: OffloadStats,
    /// Makes job ids unique across restarts of the store.
    id_base: u64,
    next_job: AtomicU64,
    /// Jobs submitted and not yet settled: the sweep leaves them alone.
    in_flight: Arc<Mutex<HashSet<String>>>,
}

/// Runs the store's compactions and GC jobs on workers (see the module
/// docs). Give it to `Db::open_with_executor`.
pub struct RemoteExecutor {
    inner: Arc<Inner>,
    uploads: crossbeam_channel::Sender<Upload>,
}

impl std::fmt::Debug for RemoteExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteExecutor")
            .field("tier", &self.inner.tier.url())
            .field("opts", &self.inner.opts)
            .finish_non_exhaustive()
    }
}

impl RemoteExecutor {
    /// An executor for the store whose files `fs` reads, shipping jobs
    /// through `tier` to `runner`.
    pub fn new(
        tier: SharedTier,
        runner: Arc<dyn JobRunner>,
        opts: RemoteOptions,
        fs: FsRef,
    ) -> Result<RemoteExecutor> {
        if !crate::worker::id_ok(&opts.store_id) {
            return Err(OffloadError::Invalid(format!(
                "store id {:?} is not 1 to 128 letters, digits, '-' or '_'",
                opts.store_id
            )));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tern-offload")
            .enable_all()
            .build()
            .map_err(|e| OffloadError::Invalid(format!("cannot start the offload runtime: {e}")))?;
        let id_base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let inner = Arc::new(Inner {
            tier,
            runner,
            opts,
            fs,
            rt: rt.handle().clone(),
            runtime: Some(rt),
            uploaded: Mutex::new(HashMap::new()),
            uploading: Mutex::new(HashMap::new()),
            stats: OffloadStats::default(),
            id_base,
            next_job: AtomicU64::new(0),
            in_flight: Arc::new(Mutex::new(HashSet::new())),
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let weak = Arc::downgrade(&inner);
        let grace = inner.opts.orphan_grace;
        std::thread::Builder::new()
            .name("tern-upload".into())
            .spawn(move || {
                let every = (grace / 10).max(MIN_SWEEP_INTERVAL);
                let mut last_sweep = std::time::Instant::now();
                // Ends when the executor (and so the sender) is dropped.
                loop {
                    // Timed from the last sweep, not from the last message:
                    // a store whose files keep changing still sweeps.
                    let wait = every.saturating_sub(last_sweep.elapsed());
                    let msg = match rx.recv_timeout(wait) {
                        Ok(m) => Some(m),
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                        Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
                    };
                    let Some(inner) = weak.upgrade() else { return };
                    if let Some(m) = msg {
                        inner.handle(m);
                    }
                    if last_sweep.elapsed() >= every {
                        last_sweep = std::time::Instant::now();
                        if let Err(e) = inner.sweep(grace) {
                            tracing::warn!("tern offload: sweeping the shared tier failed: {e}");
                        }
                    }
                }
            })
            .map_err(|e| OffloadError::Invalid(format!("cannot start the uploader: {e}")))?;
        Ok(RemoteExecutor { inner, uploads: tx })
    }

    /// An executor sending jobs to the coordinator at `coordinator`
    /// (`http://host:port`) over the shared tier at `shared` (`file:///…`
    /// or `s3://…`, S3 settings from `AWS_*` variables), for the store
    /// whose files `fs` reads.
    pub fn connect(
        coordinator: &str,
        shared: &str,
        opts: RemoteOptions,
        fs: FsRef,
    ) -> Result<RemoteExecutor> {
        let tier = SharedTier::open(shared, &[])?;
        let runner = Arc::new(crate::GrpcRunner::new(coordinator)?);
        RemoteExecutor::new(tier, runner, opts, fs)
    }

    /// The counters.
    pub fn stats(&self) -> &OffloadStats {
        &self.inner.stats
    }

    /// Deletes this store's objects in the shared tier that nothing uses
    /// and that are at least `grace` old: attempts of jobs no longer in
    /// flight (a zombie's outputs, an attempt whose cleanup was missed) and
    /// input files the store does not hold uploaded. Returns how many it
    /// deleted. Runs by itself every tenth of `orphan_grace` (at most once
    /// a second).
    pub fn sweep(&self, grace: Duration) -> Result<u64> {
        self.inner.sweep(grace)
    }

    /// Jobs submitted to workers and not yet settled.
    pub fn jobs_in_flight(&self) -> usize {
        self.inner.in_flight.lock().len()
    }

    /// Waits until every file queued for upload so far is uploaded (or its
    /// upload failed).
    pub fn wait_for_uploads(&self) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.uploads.send(Upload::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }
}

fn file_name(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    (name.ends_with(".sst") || name.ends_with(".blob")).then(|| name.to_string())
}

impl Inner {
    fn object_path(&self, name: &str) -> String {
        format!("stores/{}/{name}", self.opts.store_id)
    }

    fn handle(&self, msg: Upload) {
        match msg {
            Upload::Added(path) => {
                if let Err(e) = self.ensure_uploaded(&path) {
                    // The job that needs it tries again.
                    tracing::warn!("tern offload: uploading {} failed: {e}", path.display());
                }
            }
            Upload::Removed(path) => {
                let Some(name) = file_name(&path) else { return };
                self.uploaded.lock().remove(&name);
                let obj = self.object_path(&name);
                if let Err(e) = self.rt.block_on(self.tier.delete(&obj)) {
                    tracing::warn!("tern offload: deleting {obj} from the shared tier failed: {e}");
                }
            }
            Upload::Flush(done) => {
                let _ = done.send(());
            }
        }
    }

    /// The object of the local file `path`, uploading it first if needed.
    fn ensure_uploaded(&self, path: &Path) -> Result<proto::FileRef> {
        let name = file_name(path).ok_or_else(|| {
            OffloadError::Invalid(format!("{} is not a table or blob file", path.display()))
        })?;
        if let Some(r) = self.uploaded.lock().get(&name) {
            return Ok(r.clone());
        }
        *self.uploading.lock().entry(name.clone()).or_default() += 1;
        let r = self
            .rt
            .block_on(self.tier.upload(path, &self.object_path(&name), None));
        if let Ok(r) = &r {
            self.stats.files_uploaded.fetch_add(1, Relaxed);
            self.stats.bytes_uploaded.fetch_add(r.size, Relaxed);
            self.uploaded.lock().insert(name.clone(), r.clone());
        }
        let mut uploading = self.uploading.lock();
        if let Some(n) = uploading.get_mut(&name) {
            *n -= 1;
            if *n == 0 {
                uploading.remove(&name);
            }
        }
        r
    }

    /// Whether job id `job` is one of this store's (`<store>-<hex>-<n>`).
    fn ours(&self, job: &str) -> bool {
        job.strip_prefix(&self.opts.store_id)
            .and_then(|r| r.strip_prefix('-'))
            .is_some_and(|r| r.matches('-').count() == 1)
    }

    fn sweep(&self, grace: Duration) -> Result<u64> {
        let now = std::time::SystemTime::now();
        let old = |t: std::time::SystemTime| now.duration_since(t).is_ok_and(|age| age >= grace);
        let mut doomed = Vec::new();
        for o in self.rt.block_on(self.tier.list("jobs"))? {
            let job = o.path.split('/').nth(1).unwrap_or_default();
            if self.ours(job) && !self.in_flight.lock().contains(job) && old(o.last_modified) {
                doomed.push(o.path);
            }
        }
        let mut deleted = 0;
        for path in doomed {
            self.rt.block_on(self.tier.delete(&path))?;
            deleted += 1;
        }
        let mine = format!("stores/{}", self.opts.store_id);
        for o in self.rt.block_on(self.tier.list(&mine))? {
            let name = o.path.rsplit('/').next().unwrap_or_default();
            // A linked object keeps its file's time: its age says little,
            // so what decides is whether the store uses it.
            let uploading = self.uploading.lock();
            if !uploading.contains_key(name)
                && !self.uploaded.lock().contains_key(name)
                && old(o.last_modified)
            {
                self.rt.block_on(self.tier.delete(&o.path))?;
                deleted += 1;
            }
        }
        self.stats.orphans_deleted.fetch_add(deleted, Relaxed);
        Ok(deleted)
    }

    fn new_job_id(&self) -> String {
        let n = self.next_job.fetch_add(1, Relaxed);
        format!("{}-{:x}-{n}", self.opts.store_id, self.id_base)
    }

    /// Has `kind` run remotely and returns the committed manifest's kind,
    /// with a guard that deletes the attempt's objects once dropped (after
    /// the caller fetched them).
    fn run_remote(
        &self,
        kind: job_spec::Kind,
        priority: u32,
    ) -> Result<(result_manifest::Kind, Cleanup)> {
        let job_id = self.new_job_id();
        // Settled when the guard returned drops (or now, on failure).
        let settle = InFlight {
            set: self.in_flight.clone(),
            job: job_id.clone(),
        };
        self.in_flight.lock().insert(job_id.clone());
        let spec = proto::JobSpec {
            job_id: job_id.clone(),
            store: self.opts.store_id.clone(),
            kind: Some(kind),
        };
        let manifest = self
            .rt
            .block_on(self.runner.run(spec, priority, self.opts.deadline))?;
        if manifest.job_id != job_id {
            return Err(OffloadError::Invalid(format!(
                "asked for job {job_id}, got the result of {}",
                manifest.job_id
            )));
        }
        let cleanup = Cleanup {
            tier: self.tier.clone(),
            prefix: crate::worker::attempt_prefix(&job_id, manifest.attempt),
            handle: self.rt.clone(),
            _settle: settle,
        };
        let kind = manifest
            .kind
            .ok_or_else(|| OffloadError::Invalid("result manifest of no known kind".into()))?;
        Ok((kind, cleanup))
    }

    /// Downloads `r` to `path` through the store's file system, synced:
    /// from a local tier as a hard link where the file system can make
    /// one, its size and checksum checked by reading it back.
    fn fetch(&self, r: &proto::FileRef, path: &Path) -> Result<()> {
        if let Some(src) = self.tier.local_file(&r.path) {
            // A link is made only on the real file system, so `path` can
            // be read back directly.
            if self.fs.link_in(&src, path).is_ok() {
                let (size, crc) = self.rt.block_on(SharedTier::checksum(path, None))?;
                crate::shared::check_ref(r, size, crc)?;
                self.stats.bytes_downloaded.fetch_add(r.size, Relaxed);
                return Ok(());
            }
        }
        let mut file = self.fs.create(path).map_err(crate::error::io_err(path))?;
        self.rt.block_on(self.tier.download(r, |chunk| {
            file.append(chunk).map_err(crate::error::io_err(path))
        }))?;
        file.sync().map_err(crate::error::io_err(path))?;
        self.stats.bytes_downloaded.fetch_add(r.size, Relaxed);
        Ok(())
    }

    fn try_compaction(
        &self,
        job: &CompactionJob,
        ctx: &JobContext,
    ) -> std::result::Result<CompactionOutput, Failure> {
        let filter = match &job.filter {
            None => None,
            Some(f) => Some(f.remote().ok_or(Failure::Unsupported)?),
        };
        let mut refs = Vec::with_capacity(job.inputs.len());
        for f in &job.inputs {
            let path = job.dir.join(table_file_name(f.number));
            refs.push(self.ensure_uploaded(&path).map_err(Failure::Upload)?);
        }
        let spec = spec::compaction_spec(job, refs, filter);
        let (kind, _cleanup) = self
            .run_remote(
                job_spec::Kind::Compaction(spec),
                spec::compaction_priority(job),
            )
            .map_err(Failure::Remote)?;
        let result_manifest::Kind::Compaction(result) = kind else {
            return Err(Failure::Verify(OffloadError::Invalid(
                "a compaction's result is not a compaction result".into(),
            )));
        };
        let mut out = CompactionOutput {
            bytes_read: result.bytes_read,
            entries_read: result.entries_read,
            entries_dropped: result.entries_dropped,
            dead_refs: result
                .dead_refs
                .iter()
                .map(|d| (d.file, d.ordinal, d.bytes))
                .collect(),
            ran_elsewhere: true,
            ..CompactionOutput::default()
        };
        let fetched = self.fetch_tables(job, ctx, &result, &mut out.files);
        let checked = fetched
            .and_then(|()| job.check_output(ctx, &out).map_err(OffloadError::from))
            .and_then(|()| {
                ctx.fs
                    .sync_dir(&job.dir)
                    .map_err(crate::error::io_err(&job.dir))
            });
        if let Err(e) = checked {
            out.remove_files(&job.dir, &ctx.fs);
            return Err(Failure::Verify(e));
        }
        out.bytes_written = out.files.iter().map(|f| f.file_size).sum();
        Ok(out)
    }

    /// Downloads a compaction's tables under fresh numbers, recording each
    /// in `files` as soon as it exists (so a failure can remove it).
    fn fetch_tables(
        &self,
        job: &CompactionJob,
        ctx: &JobContext,
        result: &proto::CompactionResult,
        files: &mut Vec<FileMeta>,
    ) -> Result<()> {
        for o in &result.outputs {
            let (Some(file), Some(meta)) = (&o.file, &o.meta) else {
                return Err(OffloadError::Invalid(
                    "compaction output without its file or record".into(),
                ));
            };
            let number = ctx
                .next_file_number
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            files.push(spec::file_meta(number, file.size, meta));
            self.fetch(file, &job.dir.join(table_file_name(number)))?;
        }
        Ok(())
    }

    fn try_gc(&self, job: &GcJob, ctx: &GcContext) -> std::result::Result<GcOutput, Failure> {
        let mut refs = Vec::with_capacity(job.inputs.len());
        for i in &job.inputs {
            let path = job.dir.join(tern::blob_file_name(i.number));
            refs.push(self.ensure_uploaded(&path).map_err(Failure::Upload)?);
        }
        let (kind, _cleanup) = self
            .run_remote(
                job_spec::Kind::Gc(spec::gc_spec(job, refs)),
                spec::gc_priority(job),
            )
            .map_err(Failure::Remote)?;
        let result_manifest::Kind::Gc(result) = kind else {
            return Err(Failure::Verify(OffloadError::Invalid(
                "a GC job's result is not a GC result".into(),
            )));
        };
        let done = self.fetch_gc(job, &result).and_then(|out| {
            job.check_output(ctx, &out)?;
            ctx.fs
                .sync_dir(&job.dir)
                .map_err(crate::error::io_err(&job.dir))?;
            Ok(out)
        });
        done.map_err(|e| {
            job.remove_outputs(&ctx.fs);
            Failure::Verify(e)
        })
    }

    fn fetch_gc(&self, job: &GcJob, result: &proto::GcResult) -> Result<GcOutput> {
        let out = spec::gc_output(result)?;
        let mut seen = std::collections::BTreeSet::new();
        for (o, f) in result.outputs.iter().zip(&out.files) {
            let n = f.meta.number;
            // Never write under a number the job did not reserve: it may
            // name a live file.
            if !job.output_numbers.contains(&n) || !seen.insert(n) {
                return Err(OffloadError::Invalid(format!(
                    "GC result names output file {n}, not one of the job's unused reserved numbers {:?}",
                    job.output_numbers
                )));
            }
            let file = o
                .file
                .as_ref()
                .ok_or_else(|| OffloadError::Invalid("GC output without its file".into()))?;
            self.fetch(file, &job.output_path(n))?;
        }
        Ok(out)
    }

    /// The outcome of offloading one job: the remote result (counted in
    /// `remote`), or after a failure the job run here by `local`, unless
    /// fallback is off. A job that cannot leave the process always runs
    /// here.
    fn settle<T>(
        &self,
        what: &str,
        tried: std::result::Result<T, Failure>,
        remote: &AtomicU64,
        local: impl FnOnce() -> tern::Result<T>,
    ) -> tern::Result<T> {
        let f = match tried {
            Ok(out) => {
                remote.fetch_add(1, Relaxed);
                return Ok(out);
            }
            Err(f) => f,
        };
        let c = match f {
            Failure::Unsupported => &self.stats.fallback_unsupported,
            Failure::Upload(_) => &self.stats.fallback_upload,
            Failure::Remote(_) => &self.stats.fallback_remote,
            Failure::Verify(_) => &self.stats.fallback_verify,
        };
        c.fetch_add(1, Relaxed);
        if !matches!(f, Failure::Unsupported) {
            if !self.opts.fallback {
                return Err(tern::Error::Remote(format!(
                    "{what} (local fallback is off): {}",
                    f.describe()
                )));
            }
            tracing::warn!("tern offload: {what} not offloaded: {}", f.describe());
        }
        self.stats.local_jobs.fetch_add(1, Relaxed);
        local()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Removes a job from the in-flight set when dropped.
struct InFlight {
    set: Arc<Mutex<HashSet<String>>>,
    job: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.set.lock().remove(&self.job);
    }
}

/// Deletes an attempt's objects in the background when dropped (objects it
/// misses are left to the orphan sweep).
struct Cleanup {
    tier: SharedTier,
    prefix: String,
    handle: tokio::runtime::Handle,
    _settle: InFlight,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let tier = self.tier.clone();
        let prefix = std::mem::take(&mut self.prefix);
        self.handle.spawn(async move {
            if let Ok(objects) = tier.list(&prefix).await {
                for o in objects {
                    let _ = tier.delete(&o.path).await;
                }
            }
        });
    }
}

impl Executor for RemoteExecutor {
    fn file_added(&self, path: &Path) {
        let _ = self.uploads.send(Upload::Added(path.to_path_buf()));
    }

    fn file_removed(&self, path: &Path) {
        let _ = self.uploads.send(Upload::Removed(path.to_path_buf()));
    }

    fn execute(&self, job: &CompactionJob, ctx: &JobContext) -> tern::Result<CompactionOutput> {
        let inner = &self.inner;
        inner.settle(
            "compaction",
            inner.try_compaction(job, ctx),
            &inner.stats.remote_compactions,
            || job.run(ctx),
        )
    }

    /// Runs the parts at once (each offloaded or not, as `execute` runs
    /// it), then checks those that ran elsewhere against the others: a
    /// worker's part can pass its own check and still disagree with its
    /// neighbours (a record it calls dead that another part keeps, entries
    /// it claims to have read). On such a disagreement every part's outputs
    /// are removed and the parts run here, unless fallback is off.
    fn execute_parts(
        &self,
        parts: &[CompactionJob],
        ctx: &JobContext,
    ) -> tern::Result<Vec<CompactionOutput>> {
        let outs = tern::compaction::run_parts(self, parts, ctx)?;
        if !outs.iter().any(|o| o.ran_elsewhere) {
            return Ok(outs);
        }
        let Err(e) = tern::compaction::check_parts(parts, &outs, ctx) else {
            return Ok(outs);
        };
        for (part, o) in parts.iter().zip(&outs) {
            o.remove_files(&part.dir, &ctx.fs);
        }
        let inner = &self.inner;
        // Those parts were counted as run remotely; nothing of theirs is
        // installed.
        let remote = outs.iter().filter(|o| o.ran_elsewhere).count() as u64;
        inner.stats.remote_compactions.fetch_sub(remote, Relaxed);
        inner.settle(
            "split compaction",
            Err(Failure::Verify(e.into())),
            &inner.stats.remote_compactions,
            || tern::compaction::run_parts(&tern::compaction::LocalExecutor, parts, ctx),
        )
    }

    fn execute_gc(&self, job: &GcJob, ctx: &GcContext) -> tern::Result<GcOutput> {
        let inner = &self.inner;
        inner.settle(
            "GC job",
            inner.try_gc(job, ctx),
            &inner.stats.remote_gcs,
            || job.run(ctx),
        )
    }
}
