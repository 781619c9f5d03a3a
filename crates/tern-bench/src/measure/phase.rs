//! What one phase measured: throughput, latency per operation, space on
//! disk over time and the engine's counters.

use serde::Serialize;

use super::proc_io::ProcIo;
use super::OpSummary;
use crate::binding::EngineStats;

/// One sample of the time series, taken every second.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    /// Seconds since the phase started.
    pub t: f64,
    /// Operations completed so far.
    pub ops: u64,
    /// Operations per second over the last interval.
    pub ops_per_sec: f64,
    /// Bytes under the data directory (0 when the binding has none).
    pub disk_bytes: u64,
}

/// Space on disk over a phase.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Space {
    /// Bytes on disk at the end (after the phase and its settling).
    pub final_bytes: u64,
    /// Largest sample.
    pub max_bytes: u64,
    /// Live user data the harness tracked (keys + values).
    pub logical_bytes: u64,
    /// `final_bytes / logical_bytes`.
    pub space_amp: f64,
}

/// I/O over a phase and the settling that follows it (so background work
/// the phase caused counts towards it).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PhaseIo {
    /// The whole process's I/O: client threads and the engine's own.
    pub process: ProcIo,
    /// Bytes of keys and values the phase's successful writes passed.
    pub user_bytes_written: u64,
}

impl PhaseIo {
    /// `process.written / user_bytes_written`: bytes written (logs, tables,
    /// blob files, manifests; for a server binding, the protocol sent) per
    /// user byte. `None` when the phase wrote nothing.
    pub fn write_amp(&self) -> Option<f64> {
        (self.user_bytes_written > 0)
            .then(|| self.process.written as f64 / self.user_bytes_written as f64)
    }
}

/// Everything measured in one phase.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseResult {
    /// Phase name.
    pub phase: String,
    /// Binding name.
    pub binding: String,
    /// Client threads.
    pub threads: usize,
    /// Wall-clock seconds.
    pub runtime_sec: f64,
    /// Seconds spent after the phase waiting for the engine to finish the
    /// flushes, compactions and GC it caused.
    pub settle_sec: f64,
    /// Successful operations.
    pub ops_ok: u64,
    /// Failed operations.
    pub ops_fail: u64,
    /// Completed operations (ok + failed) per second.
    pub throughput: f64,
    /// Latency per operation type.
    pub ops: Vec<OpSummary>,
    /// Engine counters accumulated during this phase (and its settling).
    pub engine: EngineStats,
    /// I/O of the phase and its settling.
    pub io: PhaseIo,
    /// Space on disk.
    pub space: Space,
    /// Throughput and space every second.
    pub series: Vec<Sample>,
    /// Workload-specific numbers.
    pub extra: Vec<(String, f64)>,
}

impl PhaseResult {
    /// The summary of operation `op`, if it ran.
    pub fn op(&self, op: &str) -> Option<&OpSummary> {
        self.ops.iter().find(|o| o.op == op)
    }
}
