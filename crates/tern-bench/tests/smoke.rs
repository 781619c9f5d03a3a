//! Smoke run: YCSB A at a few thousand records against the `tern` binding,
//! through the same code path as `tern bench ycsb`; checks that the text
//! output parses and that the counts add up.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;

use tern_bench::binding;
use tern_bench::phases::ycsb_phases;
use tern_bench::props::Properties;
use tern_bench::report::{text, Report};

fn workload(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../workloads")
        .join(name)
}

/// Parses `[OP: Count=N ...]` groups of a YCSB-cpp status line.
fn counts(line: &str) -> Vec<(String, u64)> {
    line.split('[')
        .skip(1)
        .filter_map(|g| {
            let (op, rest) = g.split_once(": Count=")?;
            let n = rest
                .split_whitespace()
                .next()?
                .trim_end_matches(']')
                .parse()
                .ok()?;
            Some((op.to_string(), n))
        })
        .collect()
}

fn smoke(binding_name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Properties::new();
    p.merge_file(&workload("workloada")).unwrap();
    for kv in ["recordcount=3000", "operationcount=4000", "threadcount=2"] {
        p.set_pair(kv).unwrap();
    }
    let db = binding::open(binding_name, dir.path(), &p).unwrap();
    let mut report = Report::new("workloada", db.name(), Default::default());
    ycsb_phases(&db, &p, true, true, 0, &mut report, false).unwrap();
    db.close().unwrap();
    assert_eq!(report.phases.len(), 2);

    let load = &report.phases[0];
    assert_eq!(load.ops_ok, 3000);
    assert_eq!(load.ops_fail, 0);
    let run = &report.phases[1];
    let lines = text::closing_lines(run);
    let mut it = lines.lines();
    let status = it.next().unwrap();
    assert!(status.contains(" sec: 4000 operations;"), "{status}");
    let c = counts(status);
    let reads = c.iter().find(|(o, _)| o == "READ").unwrap().1;
    let updates = c.iter().find(|(o, _)| o == "UPDATE").unwrap().1;
    assert_eq!(reads + updates, 4000, "{status}");
    assert!(reads > 1500 && updates > 1500);
    let field = |prefix: &str| -> f64 {
        lines
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(field("Run operations success(ops):"), 4000.0);
    assert_eq!(field("Run operations fail(ops):"), 0.0);
    assert!(field("Run throughput(ops/sec):") > 0.0);
    assert!(field("Run runtime(sec):") > 0.0);
    assert!(run.space.logical_bytes > 3000 * 1000);
    assert!(run.space.final_bytes > 0);
    // JSON round trip has the documented top-level fields.
    let json: serde_json::Value = serde_json::to_value(&report).unwrap();
    assert_eq!(json["tool"], "tern-bench");
    assert_eq!(json["phases"][1]["ops_ok"], 4000);
    let html = tern_bench::report::html::render(std::slice::from_ref(&report));
    assert!(html.contains("<svg"));
    let _ = Arc::strong_count(&db);
}

#[test]
fn ycsb_a_smoke_tern() {
    smoke("tern");
}

#[cfg(feature = "rocksdb")]
#[test]
fn ycsb_a_smoke_rocksdb() {
    smoke("rocksdb");
    smoke("rocksdb-blob");
}

#[cfg(feature = "fjall")]
#[test]
fn ycsb_a_smoke_fjall() {
    smoke("fjall");
}

#[test]
fn parses_checked_in_trace_samples() {
    use tern_bench::workload::trace::{Trace, TraceFormat};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let f = std::fs::File::open(dir.join("twitter_sample.csv")).unwrap();
    let t = Trace::read(TraceFormat::Twitter, std::io::BufReader::new(f), None).unwrap();
    assert_eq!(t.mix(), (4, 3, 0));
    assert_eq!(t.skipped, 2);
    // k1 and k3 are read before ever being written; k2 is set first.
    assert_eq!(t.preload, vec![b"k1".to_vec(), b"k3".to_vec()]);
    let f = std::fs::File::open(dir.join("meta_sample.txt")).unwrap();
    let t = Trace::read(TraceFormat::Meta, std::io::BufReader::new(f), None).unwrap();
    assert_eq!(t.mix(), (2, 2, 1));
    assert_eq!(t.preload, vec![b"100".to_vec()]);
}
