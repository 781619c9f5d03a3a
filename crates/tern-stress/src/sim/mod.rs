//! `tern stress --sim`: the store on simulated files ([`MemFs`] behind a
//! [`FaultFs`]), random I/O errors, and simulated power failures
//! ([`MemFs::crashed_copy_with`], in every [`CrashMode`]: nothing unsynced
//! kept, everything kept, a random prefix of unsynced bytes, unsynced pages
//! out of order, or any subset of unsynced directory entries; a failed
//! operation may leave part of its effect) checked against the durability
//! contract.
//!
//! One thread issues every operation, so the log of acknowledged writes is
//! the store's commit order. After each power failure the recovered store
//! must equal the state after some prefix of that log that includes every
//! write made durable (a `sync` write, a `flush`, a clean `close`), plus
//! possibly the one write that failed last (its outcome is unknown). A batch
//! is one log entry, so a torn batch matches no prefix. Before reopening,
//! [`tern::tools::check::check_store`] must find no problem in the crashed files.

mod exec;
mod state;

use std::io::Write;
use std::path::Path;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::io::CrashMode;
use tern::Settings;
use tern_ops::{Budget, Generator, History, Profile, SaveTo};

use crate::config::StressConfig;
use exec::Exec;

/// What a simulation run did.
#[derive(Debug, Clone, Default)]
pub struct SimReport {
    /// Simulated power failures (each followed by a check and a reopen).
    pub crashes: u64,
    /// Of those, per [`CrashMode::ALL`] entry.
    pub crashes_by_mode: [u64; CrashMode::ALL.len()],
    /// Clean closes instead of a crash.
    pub clean_closes: u64,
    /// Operations issued.
    pub ops: u64,
    /// Injected I/O errors.
    pub faults: u64,
    /// Writes lost by crashes (acknowledged but not durable: allowed).
    pub lost_unsynced: u64,
    /// Of those, per [`CrashMode::ALL`] entry of the crash that lost them
    /// (clean closes lose nothing).
    pub lost_by_mode: [u64; CrashMode::ALL.len()],
    /// Explicit `collect_garbage` calls.
    pub gc_calls: u64,
    /// Epochs whose writes all skipped the WAL (`disable_wal`).
    pub no_wal_epochs: u64,
    /// Writes of those epochs lost by the crash that ended them (allowed:
    /// they were not flushed).
    pub lost_without_wal: u64,
    /// Blob GC jobs installed (`Stats::gc_runs`), background and explicit.
    pub gc_runs: u64,
    /// Blob files in the store at the end.
    pub blob_files: u64,
}

impl SimReport {
    /// The progress line after `done` of `total` cycles.
    fn progress_line(&self, done: u64, total: u64) -> String {
        format!(
            "stress: [cycle {done}/{total}] {} crashes, {} clean closes, {} ops, {} injected faults, {} un-synced writes lost, {} gc calls, {} gc jobs",
            self.crashes,
            self.clean_closes,
            self.ops,
            self.faults,
            self.lost_unsynced,
            self.gc_calls,
            self.gc_runs
        )
    }

    /// The closing line of a run.
    fn done_line(&self) -> String {
        format!(
            "stress: simulation done: {} crashes ({:?} per mode {:?}), {} clean closes, {} epochs without WAL, {} ops, {} injected faults, {} gc calls, {} gc jobs, {} blob files at the end",
            self.crashes,
            self.crashes_by_mode,
            CrashMode::ALL,
            self.clean_closes,
            self.no_wal_epochs,
            self.ops,
            self.faults,
            self.gc_calls,
            self.gc_runs,
            self.blob_files
        )
    }

    /// Counts the `lost` writes a recovery found missing, after an epoch
    /// that skipped the WAL (`no_wal`: allowed whatever the sync mode) or
    /// one that ended in the crash `last_crash` (none: a clean close). With
    /// every write synced, losing any is an error.
    fn count_lost(
        &mut self,
        lost: u64,
        no_wal: bool,
        last_crash: Option<CrashMode>,
        synced: bool,
    ) -> Result<(), String> {
        if no_wal {
            self.lost_without_wal += lost;
            return Ok(());
        }
        self.lost_unsynced += lost;
        if let Some(mode) = last_crash {
            self.lost_by_mode[mode as usize] += lost;
        }
        if synced && lost > 0 {
            return Err(format!("{lost} synced writes were lost"));
        }
        Ok(())
    }
}

/// The engine settings a `--sim` run uses: the drawn ones with sizes
/// capped, so flushes, compactions, manifest rolls and GC happen within a
/// few thousand operations.
fn sim_settings(cfg: &StressConfig) -> Settings {
    let k = &cfg.knobs.settings;
    let mut s = k.clone();
    s.write_buffer_size = k.write_buffer_size.min(64 << 10);
    s.target_file_size = k.target_file_size.min(32 << 10);
    s.max_bytes_for_level_base = k.max_bytes_for_level_base.min(256 << 10);
    s.max_manifest_file_size = k.max_manifest_file_size.min(64 << 10);
    // Small blob files, so GC has many to pick from.
    s.blob_file_size = k.blob_file_size.min(16 << 10);
    s
}

/// The history a `--sim` run executes: every setting, then `--crashes`
/// epochs of `--ops-per-crash` operations from the shared generator, each
/// ended by a power failure or (one in five) a clean reopen.
pub fn history_for(cfg: &StressConfig) -> History {
    let a = &cfg.args;
    let keys = a.keys.clamp(1, 20_000) as u32;
    let per_million = (a.fault_probability * 1e6).round() as u32;
    let profile = Profile {
        weights: cfg.weights,
        ..Profile::sim(keys, per_million, CrashMode::ALL.len() as u8)
    };
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5157_0000);
    let mut gen = Generator::new(profile, rng.gen());
    // The first epoch skips the WAL as often as later ones.
    let no_wal = gen.draw_no_wal();
    let mut ops = Vec::new();
    ops.extend(gen.epoch_start());
    for _ in 0..a.crashes {
        ops.extend(gen.take(a.ops_per_crash as usize));
        let clean = gen.below(5) == 0;
        ops.push(gen.epoch_end(clean));
        ops.extend(gen.epoch_start());
    }
    let settings = sim_settings(cfg);
    History {
        harness: "sim".into(),
        seed: cfg.seed,
        keys,
        settings: Settings::NAMES
            .iter()
            .filter_map(|n| settings.get(n).map(|v| (n.to_string(), v)))
            .collect(),
        params: vec![
            ("sync_all".into(), u8::from(cfg.knobs.sync).to_string()),
            ("no_wal".into(), u8::from(no_wal).to_string()),
        ],
        ops,
    }
}

/// Runs the history, logging progress every `progress_every` epochs.
/// `Err` names the failing operation.
pub fn execute(h: &History, log: &mut dyn Write, progress_every: u64) -> Result<SimReport, String> {
    if h.harness != "sim" {
        return Err(format!(
            "a {:?} history: `tern stress --sim --replay` runs `sim` histories",
            h.harness
        ));
    }
    let total = h.ops.iter().filter(|o| o.ends_epoch()).count() as u64;
    let mut ex = Exec::new(h)?;
    for (i, op) in h.ops.iter().enumerate() {
        ex.step(op)
            .map_err(|e| format!("operation {i} ({op}), epoch {}: {e}", ex.epochs))?;
        if op.ends_epoch()
            && progress_every > 0
            && (ex.epochs % progress_every == 0 || ex.epochs == total)
        {
            let _ = writeln!(log, "{}", ex.report.progress_line(ex.epochs, total));
            let _ = log.flush();
        }
    }
    ex.finish()
}

/// Runs the simulation `cfg` describes, logging progress to `log`. On a
/// failure the history is written to `--history-dir`, shrunk (at most
/// `--shrink-runs` runs) and the shrunk one written beside it.
pub fn run(cfg: &StressConfig, log: &mut dyn Write) -> Result<SimReport, String> {
    let _ = writeln!(log, "stress: {}", cfg.command_line());
    let h = history_for(cfg);
    match execute(&h, log, 10) {
        Ok(report) => {
            let _ = writeln!(log, "{}", report.done_line());
            Ok(report)
        }
        Err(e) => {
            let saved = save_and_shrink(cfg, &h, &e, log);
            Err(format!("{e}\nrepeat with: {}\n{saved}", cfg.command_line()))
        }
    }
}

/// Runs the history in `path` (`tern stress --sim --replay FILE`).
pub fn replay(path: &Path, log: &mut dyn Write) -> Result<SimReport, String> {
    let h = History::read(path)?;
    let _ = writeln!(
        log,
        "stress: replaying {} ({} operations, seed {})",
        path.display(),
        h.ops.len(),
        h.seed
    );
    let report = execute(&h, log, 10)?;
    let _ = writeln!(log, "{}", report.done_line());
    Ok(report)
}

/// Writes the failed history and its shrunk form; returns lines saying
/// where they are and how to replay them.
fn save_and_shrink(cfg: &StressConfig, h: &History, error: &str, log: &mut dyn Write) -> String {
    let dir = cfg
        .args
        .history_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let replay = |p: &Path| format!("replay with: tern stress --sim --replay {}", p.display());
    if cfg.args.shrink_runs > 0 {
        let _ = writeln!(
            log,
            "stress: shrinking the failed history ({} operations)",
            h.ops.len()
        );
    }
    let budget = Budget {
        runs: cfg.args.shrink_runs,
        time: None,
    };
    let to = SaveTo {
        dir: &dir,
        stem: &format!("tern-sim-{}", cfg.seed),
        replay: &replay,
        advice: "",
    };
    tern_ops::save_and_shrink(h, error, &to, budget, |candidate| {
        execute(candidate, &mut std::io::sink(), 0).map(|_| ())
    })
}
