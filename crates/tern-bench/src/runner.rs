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
    /// The thread's schedule when the phase has a target throughput.
    pacer: Option<Pacer>,
}

/// One client thread's share of a target throughput (YCSB's `target`):
/// operation `k` is due at `start + k * interval`. A thread ahead of its
/// schedule sleeps; one behind it runs the operations due back to back.
///
/// Latency counts from when an operation was due, not from when it
/// started (YCSB's `measurement.interval=intended`): a stall that holds a
/// thread for 10 ms delays every operation due in those 10 ms, and each is
/// charged its wait. Timing from the start instead would record one slow
/// operation and leave out the ones the stall kept from being sent
/// (coordinated omission), which makes tails look better than a client
/// with a fixed arrival rate sees them.
#[derive(Debug, Clone)]
struct Pacer {
    next: Instant,
    interval: Duration,
}

impl Pacer {
    /// Thread `index` of `threads` sharing `ops_per_sec`, starting at
    /// `start`; threads are staggered across one interval so that they do
    /// not all fire at once.
    fn new(ops_per_sec: f64, index: usize, threads: usize, start: Instant) -> Pacer {
        let interval = Duration::from_secs_f64(threads as f64 / ops_per_sec);
        let offset = interval.mul_f64(index as f64 / threads as f64);
        Pacer {
            next: start + offset,
            interval,
        }
    }

    /// Waits until the next operation is due and returns when it was due.
    fn due(&mut self) -> Instant {
        let due = self.next;
        self.next += self.interval;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        due
    }
}

impl Ctx {
    /// Times `f` as one operation of `kind`; `Ok(false)` (e.g. a missing
    /// record) and errors count as failures.
    pub fn time<T>(&mut self, kind: OpKind, f: impl FnOnce() -> Result<T>) -> Option<T>
    where
        T: Outcome,
    {
        let t = match &mut self.pacer {
            Some(p) => p.due(),
            None => Instant::now(),
        };
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
    /// Operations per second over all threads (YCSB's `target`); `None`:
    /// as fast as the threads go. With a target, latencies count from when
    /// each operation was due (see `Pacer`).
    pub target_ops_per_sec: Option<f64>,
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
                pacer: spec
                    .target_ops_per_sec
                    .map(|t| Pacer::new(t, i, threads, start)),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::binding::EngineStats;
    use std::path::Path;

    /// A binding whose puts stall once, for `stall`, on the `stall_at`-th call.
    struct Stalling {
        puts: AtomicU64,
        stall_at: u64,
        stall: Duration,
    }

    impl Binding for Stalling {
        fn name(&self) -> &str {
            "stalling"
        }
        fn read(&self, _: &[u8]) -> ReadResult {
            Ok(None)
        }
        fn put(&self, _: &[u8], _: &[u8]) -> Result<()> {
            if self.puts.fetch_add(1, Ordering::Relaxed) == self.stall_at {
                std::thread::sleep(self.stall);
            }
            Ok(())
        }
        fn delete(&self, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn scan(&self, _: &[u8], _: usize, _: &mut dyn FnMut(&[u8], &[u8])) -> Result<usize> {
            Ok(0)
        }
        fn stats(&self) -> EngineStats {
            EngineStats::default()
        }
        fn data_dir(&self) -> Option<&Path> {
            None
        }
    }

    /// `ops` puts per thread.
    struct Puts(u64);

    struct PutWorker(u64);

    impl Worker for PutWorker {
        fn step(&mut self, db: &dyn Binding, ctx: &mut Ctx) -> bool {
            if self.0 == 0 {
                return false;
            }
            self.0 -= 1;
            ctx.time(OpKind::Insert, || db.put(b"k", b"v"));
            true
        }
    }

    impl Workload for Puts {
        fn worker(&self, _: usize, _: usize) -> Box<dyn Worker> {
            Box::new(PutWorker(self.0))
        }
        fn logical_bytes(&self) -> u64 {
            0
        }
    }

    fn spec(threads: usize, target: Option<f64>) -> PhaseSpec {
        PhaseSpec {
            name: "t".into(),
            threads,
            expected_ops: 0,
            max_duration: None,
            status_interval: 0,
            quiet: true,
            target_ops_per_sec: target,
        }
    }

    fn run(stall_at: u64, stall: Duration, ops: u64, spec: &PhaseSpec) -> PhaseResult {
        let db: Arc<dyn Binding> = Arc::new(Stalling {
            puts: AtomicU64::new(0),
            stall_at,
            stall,
        });
        let w: Arc<dyn Workload> = Arc::new(Puts(ops));
        run_phase(&db, &w, spec).unwrap()
    }

    #[test]
    fn a_target_spaces_the_operations_of_every_thread() {
        // 200 operations at 1,000 per second cannot finish in under 0.2 s
        // (less one interval for the first, due at once).
        let r = run(u64::MAX, Duration::ZERO, 100, &spec(2, Some(1000.0)));
        assert_eq!(r.ops_ok, 200);
        assert!(r.runtime_sec >= 0.19, "ran in {} s", r.runtime_sec);
        assert!(r.throughput <= 1060.0, "{} ops/s", r.throughput);
    }

    #[test]
    fn with_a_target_a_stall_is_charged_to_every_operation_it_delayed() {
        // One thread at 1,000 per second; the second put stalls 100 ms,
        // holding back the ~100 puts due meanwhile. Timed from when they
        // were due, they wait 1–99 ms; timed from when they started, only
        // the stalled put would be slow.
        let r = run(1, Duration::from_millis(100), 300, &spec(1, Some(1000.0)));
        let s = &r.ops[0];
        assert_eq!(s.count, 300);
        assert!(s.max_us >= 100_000.0, "max {} µs", s.max_us);
        assert!(
            s.p90_us >= 10_000.0,
            "p90 {} µs: the delayed puts were not charged",
            s.p90_us
        );

        // Without a target only the stalled put is slow.
        let r = run(1, Duration::from_millis(100), 300, &spec(1, None));
        let s = &r.ops[0];
        assert!(s.max_us >= 100_000.0, "max {} µs", s.max_us);
        assert!(s.p90_us < 10_000.0, "p90 {} µs", s.p90_us);
    }

    #[test]
    fn a_target_must_be_a_rate() {
        let mut p = crate::props::Properties::default();
        p.set("target", "-5");
        assert!(crate::workload::ycsb::YcsbConfig::from_props(&p).is_err());
        p.set("target", "0");
        let c = crate::workload::ycsb::YcsbConfig::from_props(&p).unwrap();
        assert_eq!(c.target, None);
        p.set("target", "2500");
        let c = crate::workload::ycsb::YcsbConfig::from_props(&p).unwrap();
        assert_eq!(c.target, Some(2500.0));
    }
}
