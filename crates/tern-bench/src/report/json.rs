//! The JSON report (`--json FILE`). Schema (documented in docs/bench.md):
//! `{ "tool": "tern-bench", "version", "command", "workload", "binding",
//! "properties": {..}, "phases": [PhaseResult..] }`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::measure::phase::PhaseResult;
use crate::Result;

/// Everything one invocation measured.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Always `tern-bench`.
    pub tool: String,
    /// Schema version (currently 2).
    pub version: u32,
    /// The command line.
    pub command: String,
    /// Workload name (`workloada`, `fillrandom,readrandom`, …).
    pub workload: String,
    /// Binding name.
    pub binding: String,
    /// Effective properties (YCSB) or flags (db_bench).
    pub properties: BTreeMap<String, String>,
    /// One entry per phase, in order.
    pub phases: Vec<PhaseResult>,
}

impl Report {
    /// An empty report.
    pub fn new(workload: &str, binding: &str, properties: BTreeMap<String, String>) -> Self {
        Report {
            tool: "tern-bench".into(),
            version: 2,
            command: std::env::args().collect::<Vec<_>>().join(" "),
            workload: workload.into(),
            binding: binding.into(),
            properties,
            phases: Vec::new(),
        }
    }

    /// Writes the report as pretty JSON.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text)?;
        Ok(())
    }
}
