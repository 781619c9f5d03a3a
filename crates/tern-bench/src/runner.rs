//! Runs one phase of a workload: client threads doing operations against a
//! binding, a sampler recording throughput and space on disk every second,
//! and progress output (a bar on a terminal, YCSB-cpp status lines
//! otherwise).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::binding::{dir_bytes, Binding, EngineStats, ReadResult};
use crate::measure::clock::now_string;
pub use crate::measure::phase::{PhaseIo, PhaseResult, Sample, Space};
use crate::measure::proc_io::ProcIo;
use crate::measure::{OpHistograms, OpKind};
use crate::report::text::status_line;
use crate::Result;

/// What one client thread does, one operation at a time.
pub trait Worker: Send {
    /// Performs one operation, recording it in `ctx`. Returns false when
    /// the worker has nothing more to do.
    fn step(&mut self, db: &dyn Binding, ctx: &mut Ctx) -> bool;
}

/// A workload phase: makes one worker per thread.
pub trait Workload: Send + Sync {
    /// The worker for thread `index` of `threads`.
    fn worker(&self, index: usize, threads: usize) -> Box<dyn Worker>;
    /// Bytes of live user data (keys + values) the phase leaves, for space
    /// amplification.
    fn logical_bytes(&self) -> u64;
    /// Extra numbers this workload reports (e.g. entries scanned).
    fn extra(&self) -> Vec<(String, f64)> {
        Vec::new()
    }
}

/// A thread's recording context.
pub struct Ctx {
    hist: Arc<Mutex<OpHistograms>>,
    done: Arc<AtomicU64>,
    /// Set when the phase must stop (duration reached).
    pub stop: Arc<AtomicBool>,
}

impl Ctx {
    /// Times `f` as one operation of `kind`; `Ok(false)` (e.g. a missing
    /// record) and errors count as failures.
    pub fn time<T>(&mut self, kind: OpKind, f: impl FnOnce() -> Result<T>) -> Option<T>
    where
        T: Outcome,
    {
        let t = Instant::now();
        let r = f();
        let ns = t.elapsed().as_nanos() as u64;
        let ok = matches!(&r, Ok(v) if v.succeeded());
        self.record(kind, ns, ok);
        r.ok()
    }

    /// Records an operation timed by the caller.
    pub fn record(&mut self, kind: OpKind, ns: u64, ok: bool) {
        match self.hist.lock() {
            Ok(mut h) => h.record(kind, ns, ok),
            Err(p) => p.into_inner().record(kind, ns, ok),
        }
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether an operation's result counts as a success.
pub trait Outcome {
    /// True for a success.
    fn succeeded(&self) -> bool;
}

impl Outcome for () {
    fn succeeded(&self) -> bool {
        true
    }
}

impl Outcome for usize {
    fn succeeded(&self) -> bool {
        true
    }
}

impl Outcome for bool {
    fn succeeded(&self) -> bool {
        *self
    }
}

impl<T> Outcome for Option<T> {
    fn succeeded(&self) -> bool {
        self.is_some()
    }
}

/// How to run a phase.
#[derive(Debug, Clone)]
pub struct PhaseSpec {
    /// `Load`, `Run`, or a db_bench benchmark name.
    pub name: String,
    /// Client threads.
    pub threads: usize,
    /// Operations expected (for the progress bar; 0 if unknown).
    pub expected_ops: u64,
    /// Stop after this long, if set.
    pub max_duration: Option<Duration>,
    /// Seconds between status lines when stdout is not a terminal (0: none).
    pub status_interval: u64,
    /// Print nothing while running.
    pub quiet: bool,
}

/// A client thread's view of the binding: counts the bytes it writes.
/// The counter has one writer (its thread), so it is bumped with a plain
/// load and store, no locked instruction.
struct Counted<'a> {
    inner: &'a dyn Binding,
    written: AtomicU64,
}

impl Counted<'_> {
    fn count(&self, r: Result<()>, bytes: usize) -> Result<()> {
        if r.is_ok() {
            let n = self.written.load(Ordering::Relaxed);
            self.written.store(n + bytes as u64, Ordering::Relaxed);
        }
        r
    }
}

impl Binding for Counted<'_> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn read(&self, key: &[u8]) -> ReadResult {
        self.inner.read(key)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.count(self.inner.put(key, value), key.len() + value.len())
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        self.count(self.inner.delete(key), key.len())
    }
    fn scan(
        &self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        self.inner.scan(start, count, visit)
    }
    fn stats(&self) -> EngineStats {
        self.inner.stats()
    }
    fn data_dir(&self) -> Option<&std::path::Path> {
        self.inner.data_dir()
    }
    fn settle(&self) -> Result<()> {
        self.inner.settle()
    }
    fn close(&self) -> Result<()> {
        self.inner.close()
    }
}

fn merged(hists: &[Arc<Mutex<OpHistograms>>]) -> OpHistograms {
    let mut all = OpHistograms::default();
    for h in hists {
        match h.lock() {
            Ok(h) => all.merge(&h),
            Err(p) => all.merge(&p.into_inner()),
        }
    }
    all
}

/// Runs `workload` against `db` as `spec` says, then settles the engine
/// (`Binding::settle`) before taking its counters and space: every engine
/// starts the next phase settled and is charged for the background work
/// this one caused. A failed settle is an error: the numbers would describe
/// a store in an unknown state.
pub fn run_phase(
    db: &Arc<dyn Binding>,
    workload: &Arc<dyn Workload>,
    spec: &PhaseSpec,
) -> Result<PhaseResult> {
    let threads = spec.threads.max(1);
    let before = db.stats();
    let io_before = ProcIo::sample();
    let user_written = AtomicU64::new(0);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let hists: Vec<_> = (0..threads)
        .map(|_| Arc::new(Mutex::new(OpHistograms::default())))
        .collect();
    let start = Instant::now();
    let tty = std::io::stdout().is_terminal() && !spec.quiet;

    let (series, runtime) = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (i, h) in hists.iter().enumerate() {
            let mut worker = workload.worker(i, threads);
            let mut ctx = Ctx {
                hist: h.clone(),
                done: done.clone(),
                stop: stop.clone(),
            };
            let db = db.clone();
            let user_written = &user_written;
            handles.push(s.spawn(move || {
                let counted = Counted {
                    inner: db.as_ref(),
                    written: AtomicU64::new(0),
                };
                while !ctx.stop.load(Ordering::Relaxed) && worker.step(&counted, &mut ctx) {}
                user_written.fetch_add(counted.written.into_inner(), Ordering::Relaxed);
            }));
        }
        // Sampler: every second, throughput and space; progress output.
        let sampler = {
            let done = done.clone();
            let finished = finished.clone();
            let stop = stop.clone();
            let hists = hists.clone();
            let db = db.clone();
            s.spawn(move || {
                let bar = if tty {
                    let b = indicatif::ProgressBar::new(spec.expected_ops.max(1));
                    if let Ok(style) = indicatif::ProgressStyle::with_template(
                        "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}",
                    ) {
                        b.set_style(style);
                    }
                    b.set_prefix(spec.name.clone());
                    Some(b)
                } else {
                    None
                };
                let mut series = Vec::new();
                let mut last_ops = 0;
                let mut last_t = 0.0;
                let mut next_status = spec.status_interval;
                let mut tick = 0u64;
                while !finished.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(100));
                    tick += 1;
                    if let Some(max) = spec.max_duration {
                        if start.elapsed() >= max {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    if tick % 10 != 0 {
                        continue;
                    }
                    let t = start.elapsed().as_secs_f64();
                    let ops = done.load(Ordering::Relaxed);
                    let rate = (ops - last_ops) as f64 / (t - last_t).max(1e-9);
                    let disk = db.data_dir().map(dir_bytes).unwrap_or(0);
                    series.push(Sample {
                        t,
                        ops,
                        ops_per_sec: rate,
                        disk_bytes: disk,
                    });
                    last_ops = ops;
                    last_t = t;
                    if let Some(b) = &bar {
                        b.set_position(ops);
                        b.set_message(format!("{rate:.0} ops/s, {} MiB on disk", disk >> 20));
                    } else if !spec.quiet && spec.status_interval > 0 && t as u64 >= next_status {
                        next_status += spec.status_interval;
                        let h = merged(&hists);
                        println!("{}", status_line(&now_string(), t, ops, &h.summaries()));
                    }
                }
                if let Some(b) = bar {
                    b.finish_and_clear();
                }
                series
            })
        };
        for h in handles {
            let _ = h.join();
        }
        // Taken before the sampler's last sleep ends: a short phase's
        // throughput is not rounded to its 100 ms ticks.
        let runtime = start.elapsed().as_secs_f64();
        finished.store(true, Ordering::Release);
        (sampler.join().unwrap_or_default(), runtime)
    });
    let settle_start = Instant::now();
    db.settle()?;
    let settle_sec = settle_start.elapsed().as_secs_f64();
    let all = merged(&hists);
    let engine = db.stats().since(&before);
    let process = match (ProcIo::sample(), io_before) {
        (Some(now), Some(base)) => now.since(&base),
        _ => ProcIo::default(),
    };
    let user_bytes_written = user_written.into_inner();
    let final_bytes = db.data_dir().map(dir_bytes).unwrap_or(0);
    let logical = workload.logical_bytes();
    let max_bytes = series
        .iter()
        .map(|s| s.disk_bytes)
        .max()
        .unwrap_or(0)
        .max(final_bytes);
    let ops_ok = all.ok_count();
    let ops_fail = all.fail_count();
    Ok(PhaseResult {
        phase: spec.name.clone(),
        binding: db.name().to_string(),
        threads,
        runtime_sec: runtime,
        settle_sec,
        ops_ok,
        ops_fail,
        throughput: (ops_ok + ops_fail) as f64 / runtime.max(1e-9),
        ops: all.summaries(),
        engine,
        io: PhaseIo {
            process,
            user_bytes_written,
        },
        space: Space {
            final_bytes,
            max_bytes,
            logical_bytes: logical,
            space_amp: if logical > 0 {
                final_bytes as f64 / logical as f64
            } else {
                0.0
            },
        },
        series,
        extra: workload.extra(),
    })
}
