//! `tern stress`: stress a store against an expected state, in a kill -9
//! crash loop, or in process with injected I/O errors and power failures.

use std::path::PathBuf;
use std::process::ExitCode;

use tern_stress::crash_loop::{self, CrashLoopConfig};
use tern_stress::{StressArgs, StressConfig};

use crate::Failure;

/// Exit status when a check failed (the store disagrees with the expected
/// state, or a file is damaged).
const EXIT_PROBLEMS: u8 = 1;

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tern stress --dir /tmp/stress --duration 60\n  \
    tern stress --dir /tmp/stress --crash-loop 200 --sync true\n  \
    tern stress --dir /tmp/stress --crash-loop 50 --offload --blob-threshold 0 --gc on\n  \
    tern stress --sim --crashes 100 --seed 7\n  \
    tern stress --sim --replay /tmp/tern-sim-7.shrunk.history\n  \
    tern stress --engine hash --dir /tmp/hash-stress --crash-loop 50 --keys 500\n\n\
    Every option left out is drawn from the seed; the first line printed is a \
    command that repeats the run. The expected state lives in <dir>.expected: \
    keep it with the store, and remove both to start over.\n\n\
    Exit status: 0 when every check passed, 1 when one failed, 2 when the run \
    could not start.")]
pub struct Args {
    #[command(flatten)]
    stress: Box<StressArgs>,
    /// The engine to stress: `lsm` (the default) or `hash`. The hash
    /// engine's crash loop takes `--dir`, `--crash-loop`, `--threads`,
    /// `--keys` (per thread), `--seed`, `--min-run-ms` and `--max-run-ms`,
    /// and checks its checkpoint contract: each thread's writes come back
    /// as a prefix that includes everything before the last checkpoint.
    #[arg(long, default_value = "lsm", value_parser = ["lsm", "hash"])]
    engine: String,
    /// Internal: run as the hash crash loop's child (run number).
    #[arg(long, hide = true)]
    hash_child_run: Option<u64>,
}

/// `tern stress --engine hash`: the hash engine's crash loop, or its child.
fn run_hash(a: &StressArgs, child_run: Option<u64>) -> Result<ExitCode, Failure> {
    let dir = a
        .dir
        .clone()
        .ok_or_else(|| Failure::new("--engine hash needs --dir"))?;
    let seed = a.seed.unwrap_or_else(rand_seed);
    if let Some(run) = child_run {
        return match tern_stress::hash_loop::child(&dir, run, seed, a.threads, a.keys) {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(e) => Err(Failure::new(e)),
        };
    }
    let kills = a.crash_loop.ok_or_else(|| {
        Failure::new("--engine hash runs the kill -9 crash loop: give --crash-loop KILLS")
    })?;
    let program = std::env::current_exe()
        .map_err(|e| Failure::new(format!("cannot find the tern binary: {e}")))?;
    let cfg = tern_stress::hash_loop::HashLoopConfig {
        program,
        dir,
        kills,
        threads: a.threads,
        keys: a.keys,
        run_ms: (a.min_run_ms, a.max_run_ms.max(a.min_run_ms)),
        seed,
    };
    eprintln!(
        "stress: tern stress --engine hash --dir {} --crash-loop {kills} --threads {} --keys {} --seed {seed} --min-run-ms {} --max-run-ms {}",
        cfg.dir.display(),
        cfg.threads,
        cfg.keys,
        cfg.run_ms.0,
        cfg.run_ms.1
    );
    match tern_stress::hash_loop::run(&cfg, &mut std::io::stderr()) {
        Ok(r) => {
            println!(
                "hash crash loop passed: {} kills, {} checkpoints, {} operations held ({} beyond the last reported checkpoint)",
                r.kills, r.checkpoints, r.ops, r.beyond_checkpoint
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("FAILED: {e}");
            Ok(ExitCode::from(EXIT_PROBLEMS))
        }
    }
}

fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// Runs the stress mode the arguments select.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    if args.engine == "hash" {
        return run_hash(&args.stress, args.hash_child_run);
    }
    let cfg = StressConfig::resolve(*args.stress)
        .map_err(|e| Failure::new(e).hint("see `tern stress --help`"))?;
    let mut log = std::io::stderr();
    let outcome = if let Some(kills) = cfg.args.crash_loop {
        let dir: PathBuf = cfg.args.dir.clone().unwrap_or_default();
        let program = std::env::current_exe()
            .map_err(|e| Failure::new(format!("cannot find the tern binary: {e}")))?;
        let lc = CrashLoopConfig {
            program,
            dir,
            kills,
            sync: cfg.knobs.sync,
            keys: cfg.args.keys,
            groups: cfg.args.groups,
            threads: cfg.args.threads,
            run_ms: (
                cfg.args.min_run_ms,
                cfg.args.max_run_ms.max(cfg.args.min_run_ms),
            ),
            seed: cfg.seed,
            engine_flags: cfg.args.engine_flags_given(),
            offload: cfg.args.offload,
        };
        eprintln!("stress: {}", cfg.command_line());
        crash_loop::run(&lc, &mut log).map(|r| {
            format!(
                "crash loop passed: {} kills, {} operations, {}{} in-flight writes at restarts ({} applied)",
                r.kills,
                r.ops,
                r.offload_part(lc.offload),
                r.in_flight,
                r.in_flight_applied,
            )
        })
    } else if cfg.args.sim {
        match &cfg.args.replay {
            Some(file) => tern_stress::sim::replay(file, &mut log),
            None => tern_stress::sim::run(&cfg, &mut log),
        }
        .map(|r| {
            format!(
                "simulation passed: {} power failures, {} clean closes, {} operations, {} injected I/O errors, {} un-synced writes lost",
                r.crashes, r.clean_closes, r.ops, r.faults, r.lost_unsynced
            )
        })
    } else {
        tern_stress::runner::run(&cfg, &mut log).map(|r| format!("stress passed: {}", r.summary))
    };
    match outcome {
        Ok(line) => {
            println!("{line}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("FAILED: {e}");
            Ok(ExitCode::from(EXIT_PROBLEMS))
        }
    }
}
