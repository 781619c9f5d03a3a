//! `tern bench compare`: the same YCSB steps against several bindings in
//! one process, each on a fresh directory, then a table of ratios against
//! the first binding. With `--rounds N` the binding order rotates every
//! round, so drift of the machine (page cache, thermal, neighbours) does not
//! always favour the same engine.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use crate::binding;
use crate::measure::phase::PhaseResult;
use crate::phases::ycsb_phases;
use crate::props::Properties;
use crate::report::text::bytes;
use crate::report::{html, OutputArgs, Report};
use crate::{Error, Result};

/// `tern bench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Bindings, first one is the baseline of the ratios.
    #[arg(long, value_delimiter = ',', default_value = "tern")]
    pub bindings: Vec<String>,
    /// Steps per binding, in order: `load`, then workload letters (a–f) or
    /// property-file paths.
    #[arg(
        short = 'w',
        long,
        value_delimiter = ',',
        default_value = "load,a,b,c,f,e"
    )]
    pub workloads: Vec<String>,
    /// Directory with the workload files.
    #[arg(long, default_value = "workloads")]
    pub workload_dir: PathBuf,
    /// Property override for every step (recordcount, operationcount, threadcount, …).
    #[arg(short = 'p', value_name = "NAME=VALUE")]
    pub props: Vec<String>,
    /// Parent of the per-binding data directories (each created fresh).
    #[arg(long, default_value = "tern-bench-compare")]
    pub dir: PathBuf,
    /// Repeat the whole comparison, rotating the binding order each round.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Keep the data directories afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Output options (JSON holds one report per binding and round).
    #[command(flatten)]
    pub out: OutputArgs,
}

/// The main operation of a phase, for the latency columns: the most
/// frequent one.
fn main_op(p: &PhaseResult) -> Option<&crate::measure::OpSummary> {
    p.ops.iter().max_by_key(|o| o.count)
}

fn step_file(a: &CompareArgs, step: &str) -> PathBuf {
    if step.len() == 1 {
        a.workload_dir.join(format!("workload{step}"))
    } else {
        PathBuf::from(step)
    }
}

/// Runs the comparison and prints the table.
pub fn run(a: CompareArgs) -> Result<()> {
    if a.bindings.is_empty() {
        return Err(Error::msg("--bindings needs at least one binding"));
    }
    let mut reports: Vec<(usize, Report)> = Vec::new();
    for round in 0..a.rounds.max(1) {
        let n = a.bindings.len();
        for i in 0..n {
            let b = &a.bindings[(i + round) % n];
            let dir = a
                .dir
                .join(format!("{}-r{round}", b.replace([':', '/'], "_")));
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            std::fs::create_dir_all(&dir)?;
            eprintln!("== round {round}: {b} in {}", dir.display());
            let mut base = Properties::new();
            for pair in &a.props {
                base.set_pair(pair)?;
            }
            let db = binding::open(b, &dir, &base)?;
            // Label by the binding as given, so variants (`tern@gc=off`) stay apart.
            let mut report = Report::new(&a.workloads.join(","), b, Default::default());
            for step in &a.workloads {
                let (file, load) = if step == "load" {
                    (step_file(&a, "a"), true)
                } else {
                    (step_file(&a, step), false)
                };
                let mut p = Properties::new();
                p.merge_file(&file)?;
                for pair in &a.props {
                    p.set_pair(pair)?;
                }
                let before = report.phases.len();
                ycsb_phases(
                    &db,
                    &p,
                    load,
                    !load,
                    a.out.status_interval,
                    &mut report,
                    false,
                )?;
                if let Some(r) = report.phases.get_mut(before) {
                    r.phase = step.clone();
                    eprintln!(
                        "   {step}: {:.0} ops/s in {:.1} s",
                        r.throughput, r.runtime_sec
                    );
                }
            }
            db.close()?;
            drop(db);
            if !a.keep {
                let _ = std::fs::remove_dir_all(&dir);
            }
            reports.push((round, report));
        }
    }
    let table = table(&a.bindings, &reports);
    print!("{table}");
    if let Some(p) = &a.out.json {
        let all: Vec<&Report> = reports.iter().map(|(_, r)| r).collect();
        std::fs::write(p, serde_json::to_string_pretty(&all)?)?;
    }
    if let Some(p) = &a.out.report {
        let all: Vec<Report> = reports.iter().map(|(_, r)| r.clone()).collect();
        html::write(&all, p)?;
    }
    Ok(())
}

fn opt_bytes(v: Option<u64>) -> String {
    v.map_or("n/a".into(), bytes)
}

/// The comparison table (Markdown), one row per round, step and binding.
pub fn table(bindings: &[String], reports: &[(usize, Report)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| round | step | binding | ops/s | vs {} | op | p99 µs | p99.9 µs | p99.99 µs | space amp | disk | write amp | compaction write | GC write | stall s | settle s |",
        bindings.first().map_or("", String::as_str)
    );
    let _ = writeln!(
        s,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let rounds = reports.iter().map(|(r, _)| *r).max().unwrap_or(0);
    for round in 0..=rounds {
        let in_round: Vec<&Report> = reports
            .iter()
            .filter(|(r, _)| *r == round)
            .map(|(_, r)| r)
            .collect();
        let Some(first) = in_round.first() else {
            continue;
        };
        for (pi, p0) in first.phases.iter().enumerate() {
            let base_tput = base_throughput(bindings, reports, round, pi);
            for name in bindings {
                let Some(r) = in_round.iter().find(|r| &r.binding == name) else {
                    continue;
                };
                let Some(p) = r.phases.get(pi) else {
                    continue;
                };
                let op = main_op(p);
                let _ = writeln!(
                    s,
                    "| {round} | {} | {} | {:.0} | {} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {} | {} | {} | {} | {} | {:.1} |",
                    p0.phase,
                    name,
                    p.throughput,
                    base_tput.map_or("-".into(), |b| format!("{:.2}x", p.throughput / b)),
                    op.map_or("-", |o| o.op.as_str()),
                    op.map_or(0.0, |o| o.p99_us),
                    op.map_or(0.0, |o| o.p999_us),
                    op.map_or(0.0, |o| o.p9999_us),
                    p.space.space_amp,
                    bytes(p.space.final_bytes),
                    p.io.write_amp().map_or("-".into(), |w| format!("{w:.2}")),
                    opt_bytes(p.engine.compaction_write),
                    opt_bytes(p.engine.gc_write),
                    p.engine
                        .stall_micros
                        .map_or("n/a".into(), |v| format!("{:.2}", v as f64 / 1e6)),
                    p.settle_sec,
                );
            }
        }
    }
    if rounds > 0 {
        s.push_str(&spread_table(bindings, reports));
    }
    s
}

/// Throughput of step `pi` of the first binding (the baseline of the
/// ratios) in `round`, if it ran and did anything.
fn base_throughput(
    bindings: &[String],
    reports: &[(usize, Report)],
    round: usize,
    pi: usize,
) -> Option<f64> {
    let base = bindings.first()?;
    reports
        .iter()
        .find(|(r, b)| *r == round && &b.binding == base)
        .and_then(|(_, b)| b.phases.get(pi))
        .map(|p| p.throughput)
        .filter(|&t| t > 0.0)
}

/// Median of `v` (sorted in place); 0 when empty.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Across rounds: per step and binding the median throughput, its spread
/// (min–max) and the median of the per-round ratios to the first binding.
pub fn spread_table(bindings: &[String], reports: &[(usize, Report)]) -> String {
    let mut s = String::new();
    let base_name = bindings.first().map_or("", String::as_str);
    let _ = writeln!(
        s,
        "\n| step | binding | rounds | median ops/s | min–max ops/s | median vs {base_name} | median p99.99 µs |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|");
    let steps: Vec<String> = reports
        .first()
        .map(|(_, r)| r.phases.iter().map(|p| p.phase.clone()).collect())
        .unwrap_or_default();
    for (pi, step) in steps.iter().enumerate() {
        for name in bindings {
            let mut tput = Vec::new();
            let mut ratio = Vec::new();
            let mut tail = Vec::new();
            for (round, r) in reports.iter().filter(|(_, r)| &r.binding == name) {
                let Some(p) = r.phases.get(pi) else { continue };
                tput.push(p.throughput);
                tail.push(main_op(p).map_or(0.0, |o| o.p9999_us));
                if let Some(base) = base_throughput(bindings, reports, *round, pi) {
                    ratio.push(p.throughput / base);
                }
            }
            if tput.is_empty() {
                continue;
            }
            let (lo, hi) = tput
                .iter()
                .fold((f64::MAX, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
            let n = tput.len();
            let _ = writeln!(
                s,
                "| {step} | {name} | {n} | {:.0} | {lo:.0}–{hi:.0} | {:.2}x | {:.0} |",
                median(&mut tput),
                median(&mut ratio),
                median(&mut tail),
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::phase::{PhaseIo, Space};

    fn phase(step: &str, throughput: f64) -> PhaseResult {
        PhaseResult {
            phase: step.into(),
            binding: String::new(),
            threads: 1,
            runtime_sec: 1.0,
            settle_sec: 0.0,
            ops_ok: throughput as u64,
            ops_fail: 0,
            throughput,
            ops: Vec::new(),
            engine: Default::default(),
            io: PhaseIo::default(),
            space: Space::default(),
            series: Vec::new(),
            extra: Vec::new(),
        }
    }

    fn report(binding: &str, tputs: &[f64]) -> Report {
        let mut r = Report::new("a", binding, Default::default());
        r.phases = tputs.iter().map(|&t| phase("a", t)).collect();
        r
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn spread_table_gives_median_range_and_median_ratio() {
        let b = vec!["x".to_string(), "y".to_string()];
        let reports = vec![
            (0, report("x", &[100.0])),
            (0, report("y", &[50.0])),
            (1, report("y", &[90.0])),
            (1, report("x", &[300.0])),
            (2, report("x", &[200.0])),
            (2, report("y", &[100.0])),
        ];
        let t = table(&b, &reports);
        // x: 100, 300, 200 -> median 200, ratios all 1.
        assert!(t.contains("| a | x | 3 | 200 | 100–300 | 1.00x |"), "{t}");
        // y: 50, 90, 100 -> median 90; ratios 0.5, 0.3, 0.5 -> 0.5.
        assert!(t.contains("| a | y | 3 | 90 | 50–100 | 0.50x |"), "{t}");
    }
}
