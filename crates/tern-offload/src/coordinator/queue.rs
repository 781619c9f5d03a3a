//! The coordinator's state machine: jobs, attempts and workers, with time
//! passed in, so every transition is a plain function call (and tested as
//! one).
//!
//! A job is queued, then running as attempt n on one worker, then done or
//! failed. An attempt ends when its worker finishes it, when the worker's
//! lease runs out (it stopped polling: dead, frozen or cut off), or when
//! its progress counter stops growing for `progress_timeout` (the worker
//! polls but the job is stuck). An ended attempt's job is queued again and
//! the next dispatch makes attempt n+1; a finish from any other attempt is
//! refused, so a zombie's result is never used. After `max_attempts` the
//! job fails and its store runs it itself.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::metrics::Histogram;
use crate::proto::{self, await_reply, job_spec};

/// How long a restored queue waits for workers before failing its jobs
/// for want of one (at least ten leases).
const RESTORE_GRACE: Duration = Duration::from_secs(10);

/// The coordinator's limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A worker that has not polled for this long is taken for dead.
    pub lease: Duration,
    /// An attempt whose progress has not grown for this long is abandoned.
    pub progress_timeout: Duration,
    /// Attempts a job gets before it fails.
    pub max_attempts: u32,
    /// Jobs queued (not running) beyond which submissions are refused.
    pub max_queue: usize,
    /// How long a finished job's outcome is kept for its store to collect.
    pub keep_finished: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lease: Duration::from_secs(3),
            progress_timeout: Duration::from_secs(30),
            max_attempts: 3,
            max_queue: 1024,
            keep_finished: Duration::from_secs(120),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Compaction,
    Gc,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::Compaction, Kind::Gc];

    fn name(self) -> &'static str {
        match self {
            Kind::Compaction => "compaction",
            Kind::Gc => "gc",
        }
    }
}

#[derive(Debug)]
enum State {
    Queued,
    Running {
        worker: String,
        progress: u64,
        progress_at: Instant,
    },
    Done(Box<proto::ResultManifest>),
    Failed(String),
}

#[derive(Debug)]
struct Job {
    spec: proto::JobSpec,
    kind: Kind,
    /// Queue position: priority, then submission order.
    key: (u32, u64),
    attempt: u32,
    state: State,
    submitted: Instant,
    /// Whether an attempt has been handed out since it was submitted (or
    /// restored): its queue wait is recorded once.
    dispatched: bool,
    finished: Option<Instant>,
}

impl Job {
    fn record(&self) -> proto::JobRecord {
        let (state, worker_id, result, reason) = match &self.state {
            State::Queued => ("queued", String::new(), None, String::new()),
            State::Running { worker, .. } => ("running", worker.clone(), None, String::new()),
            State::Done(m) => ("done", String::new(), Some((**m).clone()), String::new()),
            State::Failed(why) => ("failed", String::new(), None, why.clone()),
        };
        proto::JobRecord {
            job: Some(self.spec.clone()),
            priority: self.key.0,
            seq: self.key.1,
            attempt: self.attempt,
            state: state.into(),
            worker_id,
            result,
            reason,
        }
    }
}

#[derive(Debug)]
struct Worker {
    name: String,
    slots: u32,
    /// (job, attempt) it runs.
    running: BTreeSet<(String, u32)>,
    lease_until: Instant,
    draining: bool,
    /// Attempts to tell it to drop at its next poll.
    cancel: Vec<(String, u32)>,
}

/// Why a submission was refused.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Invalid,
    NoWorker,
    QueueFull,
}

/// A queued job: its queue position (priority, submission order) and id.
type Queued = ((u32, u64), String);

/// Counters since start. The totals `failed`, `reassigned` and `refused`
/// are also split by cause (the fields after them), which add up to them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Jobs accepted.
    pub submitted: u64,
    /// Jobs done.
    pub done: u64,
    /// Jobs failed (their stores ran them).
    pub failed: u64,
    /// Attempts ended by a lease or progress timeout and given to another.
    pub reassigned: u64,
    /// Submissions refused (no worker, queue full).
    pub refused: u64,
    /// Of `failed`: their last attempt ended (`max_attempts`).
    pub failed_attempts_exhausted: u64,
    /// Of `failed`: queued while no worker was left for a lease.
    pub failed_no_worker_left: u64,
    /// Of `reassigned`: the worker's lease ran out.
    pub reassigned_lease_expired: u64,
    /// Of `reassigned`: the attempt's progress stood still.
    pub reassigned_no_progress: u64,
    /// Of `refused`: no worker was registered.
    pub refused_no_worker: u64,
    /// Of `refused`: the queue was full.
    pub refused_queue_full: u64,
    /// Of `refused`: a job of no known kind, a bad or a repeated id.
    pub refused_invalid: u64,
    /// Attempts handed to workers.
    pub dispatched: u64,
    /// Attempts their worker reported failed (an error, or another
    /// attempt's manifest); each is retried or fails its job.
    pub attempts_failed: u64,
    /// Reports of attempts that were no longer current, ignored.
    pub stale_reports: u64,
    /// Jobs restored from etcd when this coordinator began leading.
    pub restored: u64,
}

/// What the coordinator's metrics show, taken at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Metrics {
    /// Per job kind, in the order of [`crate::metrics::KINDS`].
    pub kinds: Vec<KindMetrics>,
    /// Workers registered (draining ones included).
    pub workers: u64,
    /// Of those, workers shutting down (they take nothing new).
    pub draining_workers: u64,
    /// Slots of the registered workers.
    pub slots: u64,
    /// Slots of the workers that take jobs, not running an attempt.
    pub free_slots: u64,
    /// The counters.
    pub counters: Counters,
}

/// One job kind's part of [`Metrics`].
#[derive(Debug, Clone, PartialEq)]
pub struct KindMetrics {
    /// `compaction` or `gc`.
    pub kind: &'static str,
    /// Jobs waiting for a worker.
    pub queued: u64,
    /// Jobs running as an attempt on a worker.
    pub running: u64,
    /// Submission to done, of the jobs done.
    pub job_seconds: Histogram,
    /// Submission to the first attempt's hand-out.
    pub queue_wait: Histogram,
}

/// Jobs and workers.
#[derive(Debug)]
pub struct Queue {
    limits: Limits,
    jobs: HashMap<String, Job>,
    /// Queued jobs per kind, in dispatch order.
    queued: BTreeMap<Kind, BTreeSet<Queued>>,
    workers: HashMap<String, Worker>,
    next_worker: u64,
    /// Starts every worker id this queue hands out, different for each
    /// queue (each coordinator start and each takeover), so a worker still
    /// holding an id from another leader is told to register again rather
    /// than taken for the worker that holds the same number here.
    worker_epoch: String,
    seq: u64,
    /// The kind dispatched last: kinds alternate when both wait, so
    /// compactions cannot starve GC or the other way round.
    last_kind: Kind,
    /// Since when no live worker has been registered.
    workerless_since: Option<Instant>,
    /// Jobs changed, and jobs forgotten, since the last
    /// [`Queue::take_changes`] (what a persistent coordinator writes).
    dirty: BTreeSet<String>,
    removed: Vec<String>,
    /// What happened so far.
    pub counters: Counters,
    /// Submission to done, per kind (indexed by `Kind as usize`).
    job_seconds: [Histogram; 2],
    /// Submission to the first hand-out, per kind.
    queue_wait: [Histogram; 2],
}

impl Queue {
    /// An empty queue.
    pub fn new(limits: Limits) -> Self {
        Queue {
            limits,
            jobs: HashMap::new(),
            queued: BTreeMap::new(),
            workers: HashMap::new(),
            next_worker: 0,
            worker_epoch: {
                let micros = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros());
                // The low bits tell starts apart; a collision needs two
                // starts 2^32 µs (71 minutes) apart to the microsecond.
                format!("{:08x}", micros as u32)
            },
            seq: 0,
            last_kind: Kind::Gc,
            workerless_since: None,
            dirty: BTreeSet::new(),
            removed: Vec::new(),
            counters: Counters::default(),
            job_seconds: Default::default(),
            queue_wait: Default::default(),
        }
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn live_workers(&self) -> impl Iterator<Item = &Worker> {
        self.workers.values().filter(|w| !w.draining)
    }

    /// Accepts `spec` with `priority` (smaller first), or says why not.
    pub fn submit(
        &mut self,
        spec: proto::JobSpec,
        priority: u32,
        now: Instant,
    ) -> Result<(), String> {
        let kind = match spec.kind {
            Some(job_spec::Kind::Compaction(_)) => Kind::Compaction,
            Some(job_spec::Kind::Gc(_)) => Kind::Gc,
            None => return self.refuse(Refusal::Invalid, "job of no known kind".into()),
        };
        if !crate::worker::id_ok(&spec.job_id) {
            return self.refuse(Refusal::Invalid, format!("bad job id {:?}", spec.job_id));
        }
        if let Some(known) = self.jobs.get(&spec.job_id) {
            // A store whose Submit reply was lost (the coordinator died
            // after writing it to etcd, or the store moved on to another
            // coordinator) submits again: the job it has is the job asked
            // for. Another spec under the same id is a client bug.
            if known.spec == spec {
                return Ok(());
            }
            let why = format!(
                "job {} was submitted already, with another spec",
                spec.job_id
            );
            return self.refuse(Refusal::Invalid, why);
        }
        if self.live_workers().next().is_none() {
            return self.refuse(Refusal::NoWorker, "no worker is registered".into());
        }
        let queued: usize = self.queued.values().map(BTreeSet::len).sum();
        if queued >= self.limits.max_queue {
            let why = format!("{queued} jobs are queued already");
            return self.refuse(Refusal::QueueFull, why);
        }
        self.seq += 1;
        let key = (priority, self.seq);
        let id = spec.job_id.clone();
        self.queued
            .entry(kind)
            .or_default()
            .insert((key, id.clone()));
        self.dirty.insert(id.clone());
        self.jobs.insert(
            id,
            Job {
                spec,
                kind,
                key,
                attempt: 0,
                state: State::Queued,
                submitted: now,
                dispatched: false,
                finished: None,
            },
        );
        self.counters.submitted += 1;
        Ok(())
    }

    /// Counts a refused submission and says `why`.
    fn refuse(&mut self, cause: Refusal, why: String) -> Result<(), String> {
        let c = &mut self.counters;
        c.refused += 1;
        *match cause {
            Refusal::Invalid => &mut c.refused_invalid,
            Refusal::NoWorker => &mut c.refused_no_worker,
            Refusal::QueueFull => &mut c.refused_queue_full,
        } += 1;
        Err(why)
    }

    /// Where job `id` stands, for its store.
    pub fn outcome(&self, id: &str) -> proto::AwaitReply {
        let Some(job) = self.jobs.get(id) else {
            return proto::AwaitReply {
                state: await_reply::State::Unknown as i32,
                ..Default::default()
            };
        };
        let (state, result, reason) = match &job.state {
            State::Queued | State::Running { .. } => {
                (await_reply::State::Pending, None, String::new())
            }
            State::Done(m) => (await_reply::State::Done, Some((**m).clone()), String::new()),
            State::Failed(why) => (await_reply::State::Failed, None, why.clone()),
        };
        proto::AwaitReply {
            state: state as i32,
            result,
            reason,
            attempt: job.attempt,
        }
    }

    /// Registers a worker; returns its id.
    pub fn register(&mut self, name: &str, slots: u32, now: Instant) -> String {
        self.next_worker += 1;
        let id = format!("w{}-{}", self.worker_epoch, self.next_worker);
        self.workers.insert(
            id.clone(),
            Worker {
                name: name.to_string(),
                slots: slots.max(1),
                running: BTreeSet::new(),
                lease_until: now + self.limits.lease,
                draining: false,
                cancel: Vec::new(),
            },
        );
        id
    }

    /// A worker's poll: renews its lease, records its progress, and hands
    /// it what to cancel and what to start.
    pub fn poll(&mut self, req: &proto::PollRequest, now: Instant) -> proto::PollReply {
        let Some(w) = self.workers.get_mut(&req.worker_id) else {
            return proto::PollReply {
                reregister: true,
                ..Default::default()
            };
        };
        w.lease_until = now + self.limits.lease;
        w.draining |= req.draining;
        let mut cancel: Vec<proto::Running> = w
            .cancel
            .drain(..)
            .map(|(job_id, attempt)| proto::Running {
                job_id,
                attempt,
                progress: 0,
            })
            .collect();
        for r in &req.running {
            let current = self
                .jobs
                .get_mut(&r.job_id)
                .and_then(|j| match &mut j.state {
                    State::Running {
                        worker,
                        progress,
                        progress_at,
                    } if j.attempt == r.attempt && *worker == req.worker_id => {
                        if r.progress > *progress {
                            *progress = r.progress;
                            *progress_at = now;
                        }
                        Some(())
                    }
                    _ => None,
                });
            if current.is_none()
                && !cancel
                    .iter()
                    .any(|c| c.job_id == r.job_id && c.attempt == r.attempt)
            {
                cancel.push(r.clone());
            }
        }
        let mut assign = Vec::new();
        let mut free = req.free_slots;
        while free > 0 && !req.draining && self.may_take(&req.worker_id) {
            let Some(a) = self.dispatch(&req.worker_id, now) else {
                break;
            };
            assign.push(a);
            free -= 1;
        }
        proto::PollReply {
            assign,
            cancel,
            reregister: false,
        }
    }

    /// Whether `worker` is among the least loaded workers with room (so
    /// work spreads instead of going to whoever polls first).
    fn may_take(&self, worker: &str) -> bool {
        let Some(w) = self.workers.get(worker) else {
            return false;
        };
        let load = |w: &Worker| w.running.len() as u64 * 1000 / u64::from(w.slots);
        if w.running.len() >= w.slots as usize {
            return false;
        }
        let mine = load(w);
        self.live_workers()
            .filter(|o| o.running.len() < o.slots as usize)
            .all(|o| load(o) >= mine)
    }

    /// Starts the next job on `worker`.
    fn dispatch(&mut self, worker: &str, now: Instant) -> Option<proto::Assignment> {
        let other = match self.last_kind {
            Kind::Compaction => Kind::Gc,
            Kind::Gc => Kind::Compaction,
        };
        let kind = [other, self.last_kind]
            .into_iter()
            .find(|k| self.queued.get(k).is_some_and(|q| !q.is_empty()))?;
        let (_, id) = self.queued.get_mut(&kind)?.pop_first()?;
        self.last_kind = kind;
        self.dirty.insert(id.clone());
        let job = self.jobs.get_mut(&id)?;
        job.attempt += 1;
        self.counters.dispatched += 1;
        if !job.dispatched {
            job.dispatched = true;
            self.queue_wait[kind as usize].observe(now.duration_since(job.submitted));
        }
        job.state = State::Running {
            worker: worker.to_string(),
            progress: 0,
            progress_at: now,
        };
        if let Some(w) = self.workers.get_mut(worker) {
            w.running.insert((id.clone(), job.attempt));
        }
        Some(proto::Assignment {
            job: Some(job.spec.clone()),
            attempt: job.attempt,
        })
    }

    /// A worker reports attempt `attempt` of job `id` finished, with its
    /// manifest or an error. Returns whether the report was for the
    /// current attempt (otherwise it is ignored).
    pub fn finish(
        &mut self,
        worker: &str,
        id: &str,
        attempt: u32,
        outcome: Result<proto::ResultManifest, String>,
        now: Instant,
    ) -> bool {
        if let Some(w) = self.workers.get_mut(worker) {
            w.running.remove(&(id.to_string(), attempt));
        }
        let current = self.jobs.get(id).is_some_and(|j| {
            j.attempt == attempt
                && matches!(&j.state, State::Running { worker: w, .. } if w == worker)
        });
        if !current {
            self.counters.stale_reports += 1;
            return false;
        }
        self.dirty.insert(id.to_string());
        match outcome {
            Ok(m) if m.job_id == id && m.attempt == attempt => {
                if let Some(j) = self.jobs.get_mut(id) {
                    j.state = State::Done(Box::new(m));
                    j.finished = Some(now);
                    self.job_seconds[j.kind as usize].observe(now.duration_since(j.submitted));
                }
                self.counters.done += 1;
            }
            Ok(_) => {
                self.counters.attempts_failed += 1;
                self.retry(id, "the worker sent another attempt's manifest".into(), now);
            }
            Err(why) => {
                self.counters.attempts_failed += 1;
                self.retry(id, why, now);
            }
        }
        true
    }

    /// Ends job `id`'s current attempt: queues it again, or fails it after
    /// its last attempt.
    fn retry(&mut self, id: &str, why: String, now: Instant) {
        let max = self.limits.max_attempts;
        let Some(j) = self.jobs.get_mut(id) else {
            return;
        };
        if j.attempt >= max {
            j.state = State::Failed(format!("{max} attempts failed, the last: {why}"));
            j.finished = Some(now);
            self.counters.failed += 1;
            self.counters.failed_attempts_exhausted += 1;
            return;
        }
        tracing::info!(
            "tern coordinator: job {id} attempt {} ended: {why}",
            j.attempt
        );
        j.state = State::Queued;
        self.queued
            .entry(j.kind)
            .or_default()
            .insert((j.key, id.to_string()));
    }

    /// Ends attempts whose worker's lease ran out or whose progress
    /// stalled, fails queued jobs once no worker has been left for a
    /// lease, and forgets old outcomes. Returns whether anything changed.
    pub fn tick(&mut self, now: Instant) -> bool {
        // Per job, why its attempt ended: `true` for a lease that ran out
        // (it wins when both happen at once), `false` for no progress.
        let mut ended: BTreeMap<String, bool> = BTreeMap::new();
        let dead: Vec<String> = self
            .workers
            .iter()
            .filter(|(_, w)| w.lease_until <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in dead {
            if let Some(w) = self.workers.remove(&id) {
                tracing::warn!(
                    "tern coordinator: worker {id} ({}) missed its lease; its {} attempts go to others",
                    w.name,
                    w.running.len()
                );
                for (job, attempt) in w.running {
                    if self.jobs.get(&job).is_some_and(|j| j.attempt == attempt) {
                        ended.insert(job, true);
                    }
                }
            }
        }
        for (id, j) in &self.jobs {
            if let State::Running {
                worker,
                progress_at,
                ..
            } = &j.state
            {
                if now.duration_since(*progress_at) >= self.limits.progress_timeout {
                    if let Some(w) = self.workers.get_mut(worker) {
                        w.running.remove(&(id.clone(), j.attempt));
                        w.cancel.push((id.clone(), j.attempt));
                    }
                    ended.entry(id.clone()).or_insert(false);
                }
            }
        }
        let mut changed = !ended.is_empty();
        for (job, lease) in ended {
            self.counters.reassigned += 1;
            let why = if lease {
                self.counters.reassigned_lease_expired += 1;
                "its worker stopped answering"
            } else {
                self.counters.reassigned_no_progress += 1;
                "it made no progress"
            };
            self.retry(&job, why.into(), now);
        }
        if self.live_workers().next().is_some() {
            self.workerless_since = None;
        } else {
            let since = *self.workerless_since.get_or_insert(now);
            if now.duration_since(since) >= self.limits.lease {
                changed |= self.fail_queued("no worker is left to run it", now);
            }
        }
        let keep = self.limits.keep_finished;
        let removed = &mut self.removed;
        self.jobs.retain(|id, j| {
            let keep = j.finished.is_none_or(|t| now.duration_since(t) < keep);
            if !keep {
                removed.push(id.clone());
            }
            keep
        });
        changed || !self.removed.is_empty()
    }

    /// The records of the jobs changed since the last call, and the ids of
    /// those forgotten.
    pub fn take_changes(&mut self) -> (Vec<proto::JobRecord>, Vec<String>) {
        let ids = std::mem::take(&mut self.dirty);
        let records = ids
            .iter()
            .filter_map(|id| self.jobs.get(id).map(|j| j.record()))
            .collect();
        (records, std::mem::take(&mut self.removed))
    }

    /// A queue holding `records` (as [`Queue::take_changes`] gave them out
    /// before a restart). Workers are not restored: they register again.
    /// A job that was running is queued again, so its next dispatch is a
    /// new attempt and whatever the old one reports is refused.
    pub fn restore(limits: Limits, records: Vec<proto::JobRecord>, now: Instant) -> Queue {
        let mut q = Queue::new(limits);
        // Workers need a while to find a new leader (their requests to the
        // old one must time out first): queued jobs do not fail for want
        // of a worker until this grace has passed.
        q.workerless_since = Some(now + RESTORE_GRACE.max(q.limits.lease * 10));
        for r in records {
            let Some(spec) = r.job else { continue };
            let kind = match spec.kind {
                Some(job_spec::Kind::Compaction(_)) => Kind::Compaction,
                Some(job_spec::Kind::Gc(_)) => Kind::Gc,
                None => continue,
            };
            let key = (r.priority, r.seq);
            q.seq = q.seq.max(r.seq);
            let (state, finished) = match r.state.as_str() {
                "done" => match r.result {
                    Some(m) => (State::Done(Box::new(m)), Some(now)),
                    None => (State::Queued, None),
                },
                "failed" => (State::Failed(r.reason), Some(now)),
                _ => (State::Queued, None),
            };
            if matches!(state, State::Queued) {
                q.queued
                    .entry(kind)
                    .or_default()
                    .insert((key, spec.job_id.clone()));
                if r.state == "running" {
                    // Written back with its new state at the next flush.
                    q.dirty.insert(spec.job_id.clone());
                }
            }
            q.jobs.insert(
                spec.job_id.clone(),
                Job {
                    spec,
                    kind,
                    key,
                    attempt: r.attempt,
                    state,
                    submitted: now,
                    dispatched: false,
                    finished,
                },
            );
            q.counters.restored += 1;
        }
        q
    }

    /// Fails every queued job because no worker is left, saying `why`;
    /// returns whether there was one.
    fn fail_queued(&mut self, why: &str, now: Instant) -> bool {
        let queued: Vec<Queued> = self.queued.values_mut().flat_map(std::mem::take).collect();
        for (_, id) in &queued {
            self.dirty.insert(id.clone());
            if let Some(j) = self.jobs.get_mut(id) {
                j.state = State::Failed(why.to_string());
                j.finished = Some(now);
                self.counters.failed += 1;
                self.counters.failed_no_worker_left += 1;
            }
        }
        !queued.is_empty()
    }

    /// The numbers the coordinator's metrics show. Cheap enough to take
    /// under the coordinator's lock at every scrape: one pass over the
    /// jobs and the workers, and small copies.
    pub fn metrics(&self) -> Metrics {
        let mut kinds: Vec<KindMetrics> = Kind::ALL
            .iter()
            .map(|&k| KindMetrics {
                kind: k.name(),
                queued: self.queued.get(&k).map_or(0, |q| q.len() as u64),
                running: 0,
                job_seconds: self.job_seconds[k as usize].clone(),
                queue_wait: self.queue_wait[k as usize].clone(),
            })
            .collect();
        for j in self.jobs.values() {
            if matches!(j.state, State::Running { .. }) {
                kinds[j.kind as usize].running += 1;
            }
        }
        let mut m = Metrics {
            kinds,
            workers: self.workers.len() as u64,
            draining_workers: 0,
            slots: 0,
            free_slots: 0,
            counters: self.counters,
        };
        for w in self.workers.values() {
            m.slots += u64::from(w.slots);
            if w.draining {
                m.draining_workers += 1;
            } else {
                m.free_slots += u64::from(w.slots).saturating_sub(w.running.len() as u64);
            }
        }
        m
    }

    /// Everything, for `tern coordinator status`.
    pub fn status(&self, now: Instant) -> proto::StatusReply {
        let mut workers: Vec<proto::WorkerStatus> = self
            .workers
            .iter()
            .map(|(id, w)| proto::WorkerStatus {
                worker_id: id.clone(),
                name: w.name.clone(),
                slots: w.slots,
                running: w.running.len() as u32,
                lease_left_ms: w.lease_until.saturating_duration_since(now).as_millis() as u64,
            })
            .collect();
        workers.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        let mut jobs: Vec<proto::JobStatus> = self
            .jobs
            .iter()
            .map(|(id, j)| {
                let (state, worker, progress) = match &j.state {
                    State::Queued => ("queued", String::new(), 0),
                    State::Running {
                        worker, progress, ..
                    } => ("running", worker.clone(), *progress),
                    State::Done(_) => ("done", String::new(), 0),
                    State::Failed(_) => ("failed", String::new(), 0),
                };
                proto::JobStatus {
                    job_id: id.clone(),
                    store: j.spec.store.clone(),
                    kind: j.kind.name().into(),
                    state: state.into(),
                    attempt: j.attempt,
                    worker_id: worker,
                    progress,
                    age_ms: now.duration_since(j.submitted).as_millis() as u64,
                }
            })
            .collect();
        jobs.sort_by_key(|j| std::cmp::Reverse(j.age_ms));
        let c = self.counters;
        proto::StatusReply {
            workers,
            jobs,
            submitted: c.submitted,
            done: c.done,
            failed: c.failed,
            reassigned: c.reassigned,
            refused: c.refused,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn spec(id: &str, gc: bool) -> proto::JobSpec {
        proto::JobSpec {
            job_id: id.into(),
            store: "s".into(),
            kind: Some(if gc {
                job_spec::Kind::Gc(proto::GcSpec::default())
            } else {
                job_spec::Kind::Compaction(proto::CompactionSpec::default())
            }),
        }
    }

    fn poll(
        q: &mut Queue,
        w: &str,
        free: u32,
        running: &[(&str, u32, u64)],
        now: Instant,
    ) -> proto::PollReply {
        q.poll(
            &proto::PollRequest {
                worker_id: w.into(),
                free_slots: free,
                running: running
                    .iter()
                    .map(|&(j, a, p)| proto::Running {
                        job_id: j.into(),
                        attempt: a,
                        progress: p,
                    })
                    .collect(),
                draining: false,
            },
            now,
        )
    }

    fn manifest(id: &str, attempt: u32) -> proto::ResultManifest {
        proto::ResultManifest {
            job_id: id.into(),
            attempt,
            ..Default::default()
        }
    }

    fn state(q: &Queue, id: &str) -> await_reply::State {
        await_reply::State::try_from(q.outcome(id).state).unwrap()
    }

    #[test]
    fn without_workers_a_job_is_refused_so_its_store_runs_it() {
        let mut q = Queue::new(Limits::default());
        assert!(q.submit(spec("a", false), 0, Instant::now()).is_err());
        assert_eq!(q.counters.refused, 1);
    }

    #[test]
    fn a_job_submitted_again_is_the_same_job_and_another_spec_is_refused() {
        let t = Instant::now();
        let mut q = Queue::new(Limits::default());
        let w = q.register("one", 1, t);
        q.submit(spec("a", false), 0, t).unwrap();
        let r = poll(&mut q, &w, 1, &[], t);
        assert_eq!(r.assign.len(), 1);
        // The store's reply was lost and it asks again: nothing new runs.
        q.submit(spec("a", false), 0, t).unwrap();
        assert!(poll(&mut q, &w, 1, &[("a", 1, 0)], t).assign.is_empty());
        assert_eq!(q.counters.submitted, 1);
        assert!(q.submit(spec("a", true), 0, t).is_err());
        assert!(q.finish(&w, "a", 1, Ok(manifest("a", 1)), t));
        q.submit(spec("a", false), 0, t).unwrap();
        assert_eq!(
            state(&q, "a"),
            await_reply::State::Done,
            "a done job stays done"
        );
    }

    #[test]
    fn a_finished_attempt_is_the_outcome_and_a_stale_one_is_ignored() {
        let t = Instant::now();
        let mut q = Queue::new(Limits::default());
        let w1 = q.register("one", 1, t);
        q.submit(spec("a", false), 0, t).unwrap();
        let r = poll(&mut q, &w1, 1, &[], t);
        assert_eq!(r.assign.len(), 1);
        assert_eq!(r.assign[0].attempt, 1);
        assert_eq!(state(&q, "a"), await_reply::State::Pending);
        assert!(
            !q.finish(&w1, "a", 2, Ok(manifest("a", 2)), t),
            "not the current attempt"
        );
        assert!(q.finish(&w1, "a", 1, Ok(manifest("a", 1)), t));
        assert_eq!(state(&q, "a"), await_reply::State::Done);
        assert_eq!(q.outcome("a").result.unwrap().attempt, 1);
    }

    #[test]
    fn a_worker_that_stops_polling_loses_its_attempt_to_another() {
        let t = Instant::now();
        let limits = Limits::default();
        let lease = limits.lease;
        let mut q = Queue::new(limits);
        let w1 = q.register("one", 1, t);
        let w2 = q.register("two", 1, t);
        q.submit(spec("a", false), 0, t).unwrap();
        assert_eq!(poll(&mut q, &w1, 1, &[], t).assign.len(), 1);
        // w2 keeps polling, w1 is silent past its lease.
        let later = t + lease / 2;
        poll(&mut q, &w2, 1, &[], later);
        let later = t + lease + Duration::from_millis(1);
        assert!(q.tick(later));
        assert_eq!(q.counters.reassigned, 1);
        let r = poll(&mut q, &w2, 1, &[], later);
        assert_eq!(r.assign[0].attempt, 2);
        // The frozen worker wakes and reports: it must re-register, and its
        // result is not used.
        assert!(poll(&mut q, &w1, 1, &[("a", 1, 10)], later).reregister);
        assert!(!q.finish(&w1, "a", 1, Ok(manifest("a", 1)), later));
        assert!(q.finish(&w2, "a", 2, Ok(manifest("a", 2)), later));
        assert_eq!(q.outcome("a").result.unwrap().attempt, 2);
    }

    #[test]
    fn an_attempt_without_progress_is_cancelled_and_retried() {
        let t = Instant::now();
        let limits = Limits {
            lease: Duration::from_secs(100),
            ..Limits::default()
        };
        let timeout = limits.progress_timeout;
        let mut q = Queue::new(limits);
        let w1 = q.register("one", 1, t);
        q.submit(spec("a", false), 0, t).unwrap();
        poll(&mut q, &w1, 1, &[], t);
        // Progress moves once, then stops while the worker keeps polling.
        poll(&mut q, &w1, 0, &[("a", 1, 5)], t + timeout / 2);
        assert!(!q.tick(t + timeout));
        let stuck = t + timeout / 2 + timeout;
        poll(&mut q, &w1, 0, &[("a", 1, 5)], stuck);
        assert!(q.tick(stuck));
        let r = poll(&mut q, &w1, 1, &[("a", 1, 5)], stuck);
        assert_eq!(r.cancel.len(), 1, "the stuck attempt is cancelled");
        assert_eq!(r.assign.len(), 1);
        assert_eq!(r.assign[0].attempt, 2);
    }

    #[test]
    fn queued_jobs_fail_once_no_worker_is_left() {
        let t = Instant::now();
        let limits = Limits::default();
        let lease = limits.lease;
        let mut q = Queue::new(limits);
        let w = q.register("one", 1, t);
        q.submit(spec("a", false), 0, t).unwrap();
        q.submit(spec("b", false), 0, t).unwrap();
        poll(&mut q, &w, 1, &[], t);
        // The only worker dies: its attempt and the queued job must not wait
        // for a worker that may never come.
        let later = t + lease + Duration::from_millis(1);
        q.tick(later);
        assert_eq!(
            state(&q, "a"),
            await_reply::State::Pending,
            "re-queued first"
        );
        q.tick(later + lease);
        assert_eq!(state(&q, "a"), await_reply::State::Failed);
        assert_eq!(state(&q, "b"), await_reply::State::Failed);
        assert!(q.outcome("b").reason.contains("no worker"));
    }

    #[test]
    fn a_restored_queue_waits_for_workers_to_find_it() {
        let t = Instant::now();
        let mut old = Queue::new(Limits::default());
        let lease = old.limits().lease;
        let w = old.register("one", 1, t);
        old.submit(spec("a", false), 0, t).unwrap();
        poll(&mut old, &w, 1, &[], t);
        let (records, _) = old.take_changes();
        // A standby takes over: no worker has found it yet.
        let mut q = Queue::restore(Limits::default(), records, t);
        q.tick(t + lease);
        q.tick(t + lease * 3);
        assert_eq!(
            state(&q, "a"),
            await_reply::State::Pending,
            "within the grace"
        );
        let w2 = q.register("one", 1, t + lease * 4);
        let r = poll(&mut q, &w2, 1, &[], t + lease * 4);
        assert_eq!(r.assign.len(), 1);
        assert_eq!(r.assign[0].attempt, 2, "a new attempt");
        // With no worker at all, the jobs fail once the grace is over.
        let (records, _) = old.take_changes();
        assert!(records.is_empty());
        let mut lonely = Queue::restore(Limits::default(), vec![q.jobs["a"].record()], t);
        let grace = RESTORE_GRACE.max(lease * 10);
        lonely.tick(t + grace);
        lonely.tick(t + grace + lease * 2);
        assert_eq!(state(&lonely, "a"), await_reply::State::Failed);
    }

    #[test]
    fn a_worker_id_from_another_leader_is_told_to_register_again() {
        let t = Instant::now();
        let mut old = Queue::new(Limits::default());
        let a = old.register("a", 1, t);
        std::thread::sleep(Duration::from_millis(2));
        let mut q = Queue::restore(Limits::default(), Vec::new(), t);
        let b = q.register("b", 1, t);
        assert_ne!(a, b, "ids must differ across leaders");
        let req = proto::PollRequest {
            worker_id: a,
            free_slots: 0,
            running: Vec::new(),
            draining: true,
        };
        assert!(q.poll(&req, t).reregister);
        assert!(!q.workers[&b].draining, "another worker's poll drained b");
    }

    #[test]
    fn a_stuck_attempt_of_a_dead_worker_is_retried_once() {
        let t = Instant::now();
        let limits = Limits {
            lease: Duration::from_secs(10),
            progress_timeout: Duration::from_secs(10),
            ..Limits::default()
        };
        let mut q = Queue::new(limits);
        let w1 = q.register("one", 1, t);
        let _w2 = q.register("two", 1, t);
        q.submit(spec("a", false), 0, t).unwrap();
        poll(&mut q, &w1, 1, &[], t);
        // Lease and progress run out at the same tick: one retry, not two.
        q.tick(t + Duration::from_secs(11));
        assert_eq!(q.counters.reassigned, 1);
    }

    #[test]
    fn a_restored_queue_keeps_every_job_and_starts_running_ones_over() {
        let t = Instant::now();
        let mut q = Queue::new(Limits::default());
        let w = q.register("one", 2, t);
        q.submit(spec("done", false), 0, t).unwrap();
        q.submit(spec("running", true), 0, t).unwrap();
        q.submit(spec("queued", false), 1, t).unwrap();
        poll(&mut q, &w, 1, &[], t);
        poll(&mut q, &w, 1, &[], t);
        assert!(q.finish(&w, "done", 1, Ok(manifest("done", 1)), t));
        let (records, removed) = q.take_changes();
        assert_eq!(records.len(), 3);
        assert!(removed.is_empty());
        // The coordinator restarts with what it wrote.
        let mut r = Queue::restore(Limits::default(), records, t);
        assert_eq!(r.outcome("done").result.unwrap().attempt, 1);
        assert_eq!(state(&r, "running"), await_reply::State::Pending);
        let w2 = r.register("two", 2, t);
        let a = poll(&mut r, &w2, 2, &[], t);
        let got: Vec<(String, u32)> = a
            .assign
            .iter()
            .map(|a| (a.job.as_ref().unwrap().job_id.clone(), a.attempt))
            .collect();
        assert!(
            got.contains(&("running".into(), 2)),
            "a new attempt: {got:?}"
        );
        assert!(got.contains(&("queued".into(), 1)), "{got:?}");
        // The old attempt's worker cannot finish it.
        assert!(!r.finish(&w, "running", 1, Ok(manifest("running", 1)), t));
    }

    #[test]
    fn after_its_last_attempt_a_job_fails() {
        let t = Instant::now();
        let mut q = Queue::new(Limits {
            max_attempts: 2,
            ..Limits::default()
        });
        let w = q.register("one", 1, t);
        q.submit(spec("a", true), 0, t).unwrap();
        for attempt in 1..=2 {
            let r = poll(&mut q, &w, 1, &[], t);
            assert_eq!(r.assign[0].attempt, attempt);
            assert!(q.finish(&w, "a", attempt, Err("disk full".into()), t));
        }
        assert_eq!(state(&q, "a"), await_reply::State::Failed);
        assert!(q.outcome("a").reason.contains("disk full"));
    }

    /// Checks that the causes add up to the totals they split.
    fn assert_causes_add_up(c: &Counters) {
        assert_eq!(
            c.failed,
            c.failed_attempts_exhausted + c.failed_no_worker_left,
            "{c:?}"
        );
        assert_eq!(
            c.reassigned,
            c.reassigned_lease_expired + c.reassigned_no_progress,
            "{c:?}"
        );
        assert_eq!(
            c.refused,
            c.refused_invalid + c.refused_no_worker + c.refused_queue_full,
            "{c:?}"
        );
    }

    #[test]
    fn refusals_are_counted_by_cause() {
        let t = Instant::now();
        let mut q = Queue::new(Limits {
            max_queue: 1,
            ..Limits::default()
        });
        assert!(q.submit(spec("a", false), 0, t).is_err());
        assert_eq!(q.counters.refused_no_worker, 1);
        q.register("one", 1, t);
        q.submit(spec("a", false), 0, t).unwrap();
        assert!(
            q.submit(spec("a", true), 0, t).is_err(),
            "a repeated id, another spec"
        );
        assert!(q.submit(spec("no/slash", false), 0, t).is_err(), "a bad id");
        let mut kindless = spec("k", false);
        kindless.kind = None;
        assert!(q.submit(kindless, 0, t).is_err());
        assert_eq!(q.counters.refused_invalid, 3);
        assert!(
            q.submit(spec("b", false), 0, t).is_err(),
            "the queue is full"
        );
        assert_eq!(q.counters.refused_queue_full, 1);
        assert_eq!(q.counters.refused, 5);
        assert_eq!(q.counters.submitted, 1);
        assert_causes_add_up(&q.counters);
    }

    #[test]
    fn ended_attempts_and_failed_jobs_are_counted_by_cause() {
        let t = Instant::now();
        let limits = Limits {
            lease: Duration::from_secs(10),
            progress_timeout: Duration::from_secs(20),
            max_attempts: 2,
            ..Limits::default()
        };
        let mut q = Queue::new(limits);
        let w1 = q.register("one", 1, t);
        let w2 = q.register("two", 1, t);
        q.submit(spec("a", false), 0, t).unwrap();
        q.submit(spec("b", true), 0, t).unwrap();
        assert_eq!(poll(&mut q, &w1, 1, &[], t).assign[0].attempt, 1);
        assert_eq!(poll(&mut q, &w2, 1, &[], t).assign[0].attempt, 1);
        // w1 goes silent; w2 polls on, its attempt stuck at one number.
        let t1 = t + Duration::from_secs(9);
        poll(&mut q, &w2, 0, &[("b", 1, 5)], t1);
        assert!(q.tick(t + Duration::from_secs(11)));
        assert_eq!(q.counters.reassigned_lease_expired, 1);
        let t2 = t + Duration::from_secs(25);
        poll(&mut q, &w2, 0, &[("b", 1, 5)], t2);
        assert!(q.tick(t + Duration::from_secs(30)));
        assert_eq!(q.counters.reassigned_no_progress, 1);
        assert_eq!(q.counters.reassigned, 2);
        // w2 takes the next attempt of one job and reports it failed: its
        // second and last.
        let t3 = t + Duration::from_secs(31);
        let r = poll(&mut q, &w2, 1, &[("b", 1, 5)], t3);
        let a = &r.assign[0];
        let id = a.job.as_ref().unwrap().job_id.clone();
        assert_eq!(a.attempt, 2);
        assert!(q.finish(&w2, &id, 2, Err("disk full".into()), t3));
        assert_eq!(q.counters.attempts_failed, 1);
        assert_eq!(q.counters.failed_attempts_exhausted, 1);
        // The zombie reports the first attempt late: ignored, counted.
        assert!(!q.finish(&w1, &id, 1, Ok(manifest(&id, 1)), t3));
        assert_eq!(q.counters.stale_reports, 1);
        // Then w2 dies too, and the other job, queued, fails for want of
        // a worker.
        let gone = t3 + Duration::from_secs(11);
        q.tick(gone);
        assert!(q.tick(gone + Duration::from_secs(10)));
        assert_eq!(q.counters.failed_no_worker_left, 1);
        assert_eq!(q.counters.failed, 2);
        assert_eq!(q.counters.dispatched, 3);
        assert_causes_add_up(&q.counters);
    }

    #[test]
    fn metrics_show_the_queue_the_workers_and_job_times() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut q = Queue::new(Limits {
            lease: s(100),
            progress_timeout: s(100),
            ..Limits::default()
        });
        let w = q.register("one", 2, t);
        let draining = q.register("two", 3, t);
        q.submit(spec("c1", false), 0, t).unwrap();
        q.submit(spec("c2", false), 1, t).unwrap();
        q.submit(spec("g1", true), 0, t).unwrap();
        q.poll(
            &proto::PollRequest {
                worker_id: draining.clone(),
                draining: true,
                ..Default::default()
            },
            t,
        );
        let m = q.metrics();
        assert_eq!(m.kinds[0].kind, crate::metrics::KINDS[0]);
        assert_eq!(m.kinds[1].kind, crate::metrics::KINDS[1]);
        assert_eq!((m.kinds[0].queued, m.kinds[1].queued), (2, 1));
        assert_eq!((m.workers, m.draining_workers), (2, 1));
        assert_eq!((m.slots, m.free_slots), (5, 2));
        // One of each kind starts after a second in the queue.
        assert_eq!(poll(&mut q, &w, 2, &[], t + s(1)).assign.len(), 2);
        let m = q.metrics();
        assert_eq!((m.kinds[0].queued, m.kinds[0].running), (1, 1));
        assert_eq!((m.kinds[1].queued, m.kinds[1].running), (0, 1));
        assert_eq!(m.free_slots, 0);
        assert_eq!(m.kinds[0].queue_wait.count, 1);
        assert_eq!(m.kinds[0].queue_wait.sum, 1.0);
        assert_eq!(m.kinds[1].queue_wait.count, 1);
        // The compaction is done three seconds after its submission; the GC
        // attempt fails and is queued again.
        assert!(q.finish(&w, "c1", 1, Ok(manifest("c1", 1)), t + s(3)));
        assert!(q.finish(&w, "g1", 1, Err("oops".into()), t + s(3)));
        let m = q.metrics();
        let h = &m.kinds[0].job_seconds;
        assert_eq!((h.count, h.sum), (1, 3.0));
        let le5 = crate::metrics::BUCKETS_S
            .iter()
            .position(|&b| b == 5.0)
            .unwrap();
        assert_eq!(h.buckets[le5], 1, "3 s falls in the bucket up to 5 s");
        assert_eq!(
            m.kinds[1].job_seconds.count, 0,
            "a failed attempt is no job time"
        );
        assert_eq!(m.counters.done, 1);
        // A second attempt's hand-out is not a queue wait again.
        assert_eq!(poll(&mut q, &w, 2, &[], t + s(4)).assign.len(), 2);
        let m = q.metrics();
        assert_eq!(m.kinds[0].queue_wait.count, 2);
        assert_eq!(m.kinds[0].queue_wait.sum, 5.0);
        assert_eq!(m.kinds[1].queue_wait.count, 1);
        assert_eq!(m.counters.dispatched, 4);
        // A restored queue counts what it restored.
        let (records, _) = q.take_changes();
        let r = Queue::restore(Limits::default(), records, t);
        assert_eq!(r.counters.restored, 3);
        assert_eq!(r.metrics().kinds[0].queued, 1, "c2 runs again; c1 is done");
    }

    #[test]
    fn kinds_alternate_priorities_order_and_load_spreads() {
        let t = Instant::now();
        let mut q = Queue::new(Limits::default());
        let w1 = q.register("one", 4, t);
        let w2 = q.register("two", 4, t);
        q.submit(spec("c-low", false), 5, t).unwrap();
        q.submit(spec("c-high", false), 0, t).unwrap();
        q.submit(spec("g1", true), 0, t).unwrap();
        q.submit(spec("g2", true), 0, t).unwrap();
        // A worker takes jobs only while no other with room is less loaded.
        let first = poll(&mut q, &w1, 4, &[], t);
        assert_eq!(first.assign.len(), 1, "after one, w2 is less loaded");
        let second = poll(&mut q, &w2, 4, &[], t);
        assert_eq!(
            second.assign.len(),
            2,
            "w2 takes one to catch up and one more"
        );
        let third = poll(&mut q, &w1, 3, &[], t);
        assert_eq!(third.assign.len(), 1, "the last one");
        let order: Vec<String> = [first, second, third]
            .iter()
            .flat_map(|r| {
                r.assign
                    .iter()
                    .map(|a| a.job.as_ref().unwrap().job_id.clone())
            })
            .collect();
        assert_eq!(order, ["c-high", "g1", "c-low", "g2"]);
    }
}
