//! The kill -9 crash loop: start `tern stress` on a directory, kill it
//! (SIGKILL) at a random moment, check the dead store's files with
//! [`tern::tools::check::check_store`], restart (the new run verifies the whole store
//! against the expected state before it writes), repeat; at the end one
//! `--verify-only` run must pass.
//!
//! A process kill loses nothing acknowledged in either sync mode (the WAL is
//! handed to the OS before a write is acknowledged), so both modes are held
//! to the same rule: every key holds its last acknowledged state, or the
//! state of the write that was in flight when the process died.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::runner::check_dir;

/// What to run and how often to kill it.
#[derive(Debug, Clone)]
pub struct CrashLoopConfig {
    /// The `tern` binary.
    pub program: PathBuf,
    /// The store's directory (its expected state goes beside it).
    pub dir: PathBuf,
    /// How many times to kill the stress process.
    pub kills: u64,
    /// The sync mode of every run.
    pub sync: bool,
    /// Plain keys.
    pub keys: usize,
    /// Atomic groups.
    pub groups: usize,
    /// Worker threads per run.
    pub threads: usize,
    /// Each run is killed after a delay drawn from this range, milliseconds.
    pub run_ms: (u64, u64),
    /// Seed for the delays and the runs' seeds.
    pub seed: u64,
    /// Engine flags for every child (the rest each draws from its seed).
    pub engine_flags: Vec<String>,
    /// Start a coordinator and workers ([`crate::offload::start_service`]) and
    /// offload every run's compactions and GC to them, fallback off.
    pub offload: bool,
}

/// What a crash loop did.
#[derive(Debug, Clone, Default)]
pub struct CrashLoopReport {
    /// Processes killed with SIGKILL.
    pub kills: u64,
    /// Operations the killed runs reported in their last progress line (a
    /// lower bound of what they did).
    pub ops: u64,
    /// Writes found in flight at a restart, and how many of them had applied.
    pub in_flight: u64,
    /// Of `in_flight`, the writes the store held after the restart.
    pub in_flight_applied: u64,
    /// Blob GC jobs the killed runs reported in their last progress line.
    pub gc_runs: u64,
    /// Multi-key batches found in flight at a restart (each was checked to
    /// have applied whole or not at all).
    pub batches_in_flight: u64,
    /// With offload: jobs workers ran and the killed runs installed, by
    /// their last progress lines.
    pub offloaded: u64,
    /// With offload: kills whose run's last progress line showed jobs on
    /// workers.
    pub kills_with_jobs_in_flight: u64,
}

impl CrashLoopReport {
    /// "N offloaded jobs (K kills with jobs in flight), " for a loop with
    /// offload on, else nothing.
    pub fn offload_part(&self, offload: bool) -> String {
        if offload {
            format!(
                "{} offloaded jobs ({} kills with jobs in flight), ",
                self.offloaded, self.kills_with_jobs_in_flight
            )
        } else {
            String::new()
        }
    }
}

/// Environment variable with extra `tern stress` flags for every child run
/// of the loop (split on whitespace), for example
/// `--blob-threshold 0 --gc on`; what it leaves open each child draws from
/// its own seed.
pub const EXTRA_FLAGS_ENV: &str = "TERN_CRASH_LOOP_FLAGS";

fn last_number_after(text: &str, marker: &str) -> Option<u64> {
    let i = text.rfind(marker)? + marker.len();
    let digits: String = text[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Parses "N writes were in flight, M of them applied" from a run's output.
fn in_flight(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.contains("writes were in flight"))?;
    let n = last_number_after(line, ": ")?;
    let m = last_number_after(line, "in flight, ")?;
    Some((n, m))
}

/// Parses "K batches in flight were whole" from a run's output.
fn batches_in_flight(text: &str) -> u64 {
    text.lines()
        .find(|l| l.contains("batches in flight were whole"))
        .and_then(|l| last_number_after(l, "applied; "))
        .unwrap_or(0)
}

fn stress_command(cfg: &CrashLoopConfig, seed: u64, extra: &[String]) -> Command {
    let mut c = Command::new(&cfg.program);
    c.arg("stress")
        .arg("--dir")
        .arg(&cfg.dir)
        .args(["--seed", &seed.to_string()])
        .args(["--keys", &cfg.keys.to_string()])
        .args(["--groups", &cfg.groups.to_string()])
        .args(["--threads", &cfg.threads.to_string()])
        .args(["--sync", &cfg.sync.to_string()])
        .args([
            "--duration",
            "0",
            "--verify-every",
            "1",
            "--progress-every",
            "0.2",
        ])
        .args(&cfg.engine_flags)
        .args(extra)
        .args(
            std::env::var(EXTRA_FLAGS_ENV)
                .unwrap_or_default()
                .split_whitespace(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs killed after at least this long must report progress (progress
/// lines come every 0.2 s; opening and the startup verification of a
/// crash-loop store take a fraction of that): a store that hangs would
/// otherwise pass, killed on a timer whatever it was doing.
const MUST_PROGRESS_AFTER: Duration = Duration::from_millis(600);
/// Fewest operations such a run must report. A healthy store does
/// thousands in that time; a hung one only the reads its threads issue
/// before each blocks on its first write.
const MIN_OPS_PER_RUN: u64 = 20;
/// Such runs in a row allowed to fall short (a slow start under load).
const IDLE_RUNS_ALLOWED: u32 = 2;

/// Runs the loop, printing a line per kill to `log`.
pub fn run(cfg: &CrashLoopConfig, log: &mut dyn Write) -> Result<CrashLoopReport, String> {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut report = CrashLoopReport::default();
    let started = Instant::now();
    let mut idle_runs = 0u32;
    let service = if cfg.offload {
        let svc = crate::offload::start_service(&cfg.program, &cfg.dir)?;
        let _ = writeln!(
            log,
            "crash-loop: offloading to {} with two workers, shared tier {}",
            svc.coordinator, svc.shared
        );
        Some(svc)
    } else {
        None
    };
    let extra = service
        .as_ref()
        .map(crate::offload::flags)
        .unwrap_or_default();
    for i in 0..cfg.kills {
        let seed = rng.gen_range(0..1_000_000_000u64);
        let delay = Duration::from_millis(rng.gen_range(cfg.run_ms.0..=cfg.run_ms.1));
        let mut child = stress_command(cfg, seed, &extra)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", cfg.program.display()))?;
        let mut out = child.stdout.take();
        let mut err = child.stderr.take();
        // Drain the pipes on threads so the child never blocks on them.
        let out_t = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(o) = out.as_mut() {
                let _ = o.read_to_string(&mut s);
            }
            s
        });
        let err_t = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(e) = err.as_mut() {
                let _ = e.read_to_string(&mut s);
            }
            s
        });
        let t0 = Instant::now();
        let mut exited = None;
        while t0.elapsed() < delay {
            if let Some(st) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
                exited = Some(st);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if exited.is_none() {
            // `Child::kill` sends SIGKILL on Unix.
            child.kill().map_err(|e| format!("kill: {e}"))?;
        }
        let status = child.wait().map_err(|e| format!("wait: {e}"))?;
        let text = format!(
            "{}{}",
            out_t.join().unwrap_or_default(),
            err_t.join().unwrap_or_default()
        );
        if exited.is_some() {
            return Err(format!(
                "run {i} (seed {seed}) exited by itself with {status} before the kill:\n{text}"
            ));
        }
        report.kills += 1;
        let ops = last_number_after(&text, "] ops ").unwrap_or(0);
        if delay >= MUST_PROGRESS_AFTER {
            idle_runs = if ops < MIN_OPS_PER_RUN {
                idle_runs + 1
            } else {
                0
            };
            if idle_runs == IDLE_RUNS_ALLOWED + 1 {
                return Err(format!(
                    "{idle_runs} runs in a row completed fewer than {MIN_OPS_PER_RUN} operations \
                     in {:?} or more before the kill: the store hangs; the last one \
                     (seed {seed}):\n{text}",
                    MUST_PROGRESS_AFTER
                ));
            }
        }
        report.ops += ops;
        report.gc_runs += last_number_after(&text, "gc jobs ").unwrap_or(0);
        if let Some((n, m)) = in_flight(&text) {
            report.in_flight += n;
            report.in_flight_applied += m;
        }
        report.batches_in_flight += batches_in_flight(&text);
        report.offloaded += last_number_after(&text, "offloaded ").unwrap_or(0);
        if last_number_after(&text, "jobs in flight ").is_some_and(|n| n > 0) {
            report.kills_with_jobs_in_flight += 1;
        }
        check_dir(&cfg.dir).map_err(|e| format!("after kill {i} (seed {seed}): {e}\n{text}"))?;
        let _ = writeln!(
            log,
            "crash-loop: [{:.0}s] kill {}/{} after {:?} (sync={}), {} ops so far, {} gc jobs, {}{} in-flight writes at restarts ({} applied)",
            started.elapsed().as_secs_f64(),
            i + 1,
            cfg.kills,
            delay,
            cfg.sync,
            report.ops,
            report.gc_runs,
            report.offload_part(cfg.offload),
            report.in_flight,
            report.in_flight_applied
        );
        let _ = log.flush();
    }
    if cfg.kills > 0 && report.ops == 0 {
        return Err("no killed run reported a single operation".to_string());
    }
    let out = stress_command(cfg, cfg.seed, &extra)
        .arg("--verify-only")
        .output()
        .map_err(|e| format!("cannot start {}: {e}", cfg.program.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(format!("final verification failed:\n{text}"));
    }
    if let Some((n, m)) = in_flight(&text) {
        report.in_flight += n;
        report.in_flight_applied += m;
    }
    report.batches_in_flight += batches_in_flight(&text);
    check_dir(&cfg.dir).map_err(|e| format!("after the final verification: {e}"))?;
    if service.is_some() && report.kills > 0 && report.offloaded == 0 {
        return Err("offload was on, yet no killed run reported a job run by a worker".into());
    }
    let offload = report.offload_part(cfg.offload);
    let _ = writeln!(
        log,
        "crash-loop: {} kills, {} ops, {} gc jobs, {offload}{} in-flight writes at restarts ({} applied), {} in-flight batches whole: OK",
        report.kills,
        report.ops,
        report.gc_runs,
        report.in_flight,
        report.in_flight_applied,
        report.batches_in_flight
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_run_output() {
        let t = "stress: [0.2s] ops 10 (put 1)\nstress: [0.4s] ops 250 (put 3)\n";
        assert_eq!(last_number_after(t, "] ops "), Some(250));
        let g =
            "stress: [0.2s] ops 10 (put 1), gc jobs 2\nstress: [0.4s] ops 250 (put 3), gc jobs 7\n";
        assert_eq!(last_number_after(g, "gc jobs "), Some(7));
        let v = "stress: start-up verification of 5 slots passed in 1ms: 3 writes were in flight, 2 of them applied; 4 batches in flight were whole";
        assert_eq!(in_flight(v), Some((3, 2)));
        assert_eq!(batches_in_flight(v), 4);
        let o =
            "stress: [0.4s] ops 250 (put 3), gc jobs 7, offloaded 5 (local 0), jobs in flight 2";
        assert_eq!(last_number_after(o, "offloaded "), Some(5));
        assert_eq!(last_number_after(o, "jobs in flight "), Some(2));
    }
}
