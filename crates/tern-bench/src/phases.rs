//! Running phases with their closing lines printed and results kept in a
//! report: what every `tern bench` command does once its workload is built.

use std::sync::Arc;

use crate::binding::Binding;
use crate::props::Properties;
use crate::report::{text, Report};
use crate::runner::{run_phase, PhaseSpec, Workload};
use crate::workload::ycsb::{Ycsb, YcsbConfig};
use crate::Result;

/// A phase spec printing status lines every `status_interval` seconds.
pub fn phase(name: &str, threads: usize, ops: u64, status_interval: u64, quiet: bool) -> PhaseSpec {
    PhaseSpec {
        name: name.to_string(),
        threads,
        expected_ops: ops,
        max_duration: None,
        status_interval,
        quiet,
        target_ops_per_sec: None,
    }
}

/// Runs a phase, prints its closing lines and metrics, adds it to `report`.
pub fn run_and_print(
    db: &Arc<dyn Binding>,
    w: Arc<dyn Workload>,
    spec: &PhaseSpec,
    report: &mut Report,
    print: bool,
) -> Result<()> {
    let r = run_phase(db, &w, spec)?;
    if print {
        println!("{}", text::closing_lines(&r));
        print!("{}", text::metrics_lines(&r));
        println!();
    }
    report.phases.push(r);
    Ok(())
}

/// Runs the load and/or run phase of a YCSB workload on an open binding.
pub fn ycsb_phases(
    db: &Arc<dyn Binding>,
    props: &Properties,
    load: bool,
    run: bool,
    status_interval: u64,
    report: &mut Report,
    print: bool,
) -> Result<()> {
    let cfg = YcsbConfig::from_props(props)?;
    let threads = cfg.thread_count;
    let target = cfg.target;
    if load {
        let y = Arc::new(Ycsb::new(cfg.clone(), false)?);
        let mut spec = phase("Load", threads, y.phase_ops(), status_interval, !print);
        spec.target_ops_per_sec = target;
        run_and_print(db, Arc::new(y), &spec, report, print)?;
    }
    if run {
        let y = Arc::new(Ycsb::new(cfg, true)?);
        y.assume_loaded();
        let mut spec = phase("Run", threads, y.phase_ops(), status_interval, !print);
        spec.target_ops_per_sec = target;
        run_and_print(db, Arc::new(y), &spec, report, print)?;
    }
    Ok(())
}
