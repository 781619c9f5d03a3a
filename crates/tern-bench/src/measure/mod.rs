//! Latency histograms per operation type (HdrHistogram, nanoseconds,
//! reported in microseconds like YCSB-cpp) and their summaries.

pub mod clock;
pub mod phase;
pub mod proc_io;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Operation types the harness measures, named as YCSB-cpp prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum OpKind {
    /// Point read.
    Read,
    /// Overwrite of an existing record.
    Update,
    /// Write of a new record.
    Insert,
    /// Range read of several entries.
    Scan,
    /// Read then write of the same record (measured as one operation).
    ReadModifyWrite,
    /// Deletion.
    Delete,
}

impl OpKind {
    /// Every kind, in report order.
    pub const ALL: [OpKind; 6] = [
        OpKind::Read,
        OpKind::Update,
        OpKind::Insert,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
        OpKind::Delete,
    ];

    /// YCSB-cpp's name.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "READ",
            OpKind::Update => "UPDATE",
            OpKind::Insert => "INSERT",
            OpKind::Scan => "SCAN",
            OpKind::ReadModifyWrite => "READ-MODIFY-WRITE",
            OpKind::Delete => "DELETE",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

const KINDS: usize = OpKind::ALL.len();
/// Highest latency recorded: one hour, in nanoseconds.
const MAX_NS: u64 = 3_600_000_000_000;

/// Histograms of one thread (or a merge of several).
#[derive(Debug, Clone)]
pub struct OpHistograms {
    hist: Vec<Option<Histogram<u64>>>,
    fails: [u64; KINDS],
}

impl Default for OpHistograms {
    fn default() -> Self {
        OpHistograms {
            hist: vec![None; KINDS],
            fails: [0; KINDS],
        }
    }
}

impl OpHistograms {
    /// Records one operation of `kind` that took `ns` nanoseconds; failed
    /// operations are counted but not timed.
    pub fn record(&mut self, kind: OpKind, ns: u64, ok: bool) {
        if !ok {
            self.fails[kind.index()] += 1;
            return;
        }
        let h = self.hist[kind.index()].get_or_insert_with(|| {
            Histogram::new_with_bounds(1, MAX_NS, 3)
                .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable_histogram()))
        });
        h.saturating_record(ns.max(1));
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &OpHistograms) {
        for i in 0..KINDS {
            self.fails[i] += other.fails[i];
            if let Some(o) = &other.hist[i] {
                match &mut self.hist[i] {
                    Some(h) => {
                        let _ = h.add(o);
                    }
                    None => self.hist[i] = Some(o.clone()),
                }
            }
        }
    }

    /// Successful operations.
    pub fn ok_count(&self) -> u64 {
        self.hist.iter().flatten().map(|h| h.len()).sum()
    }

    /// Failed operations.
    pub fn fail_count(&self) -> u64 {
        self.fails.iter().sum()
    }

    /// Summaries of every kind that ran, in report order.
    pub fn summaries(&self) -> Vec<OpSummary> {
        OpKind::ALL
            .iter()
            .filter_map(|&k| {
                let h = self.hist[k.index()].as_ref();
                let fails = self.fails[k.index()];
                if h.is_none() && fails == 0 {
                    return None;
                }
                let us = |ns: u64| ns as f64 / 1000.0;
                Some(match h {
                    Some(h) => OpSummary {
                        op: k.name().to_string(),
                        count: h.len(),
                        fail: fails,
                        min_us: us(h.min()),
                        max_us: us(h.max()),
                        avg_us: h.mean() / 1000.0,
                        p50_us: us(h.value_at_quantile(0.50)),
                        p90_us: us(h.value_at_quantile(0.90)),
                        p99_us: us(h.value_at_quantile(0.99)),
                        p999_us: us(h.value_at_quantile(0.999)),
                        p9999_us: us(h.value_at_quantile(0.9999)),
                    },
                    None => OpSummary {
                        op: k.name().to_string(),
                        fail: fails,
                        ..Default::default()
                    },
                })
            })
            .collect()
    }
}

/// Never reached: `Histogram::new(3)` only fails for a precision above 5.
fn unreachable_histogram() -> Histogram<u64> {
    Histogram::new(2).unwrap_or_else(|_| std::process::abort())
}

/// Latency summary of one operation type, in microseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct OpSummary {
    /// Operation name (`READ`, `UPDATE`, …).
    pub op: String,
    /// Successful operations.
    pub count: u64,
    /// Failed operations (errors; for YCSB also reads of missing records).
    pub fail: u64,
    /// Fastest, µs.
    pub min_us: f64,
    /// Slowest, µs.
    pub max_us: f64,
    /// Mean, µs.
    pub avg_us: f64,
    /// Median, µs.
    pub p50_us: f64,
    /// 90th percentile, µs.
    pub p90_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// 99.99th percentile, µs.
    pub p9999_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_merges_and_summarises() {
        let mut a = OpHistograms::default();
        for i in 1..=1000u64 {
            a.record(OpKind::Read, i * 1000, true);
        }
        a.record(OpKind::Read, 5, false);
        let mut b = OpHistograms::default();
        b.record(OpKind::Update, 2_000_000, true);
        b.merge(&a);
        assert_eq!(b.ok_count(), 1001);
        assert_eq!(b.fail_count(), 1);
        let s = b.summaries();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].op, "READ");
        assert_eq!(s[0].count, 1000);
        assert_eq!(s[0].fail, 1);
        assert!((s[0].p99_us - 990.0).abs() < 2.0, "{}", s[0].p99_us);
        assert!((s[0].avg_us - 500.5).abs() < 1.0);
        assert_eq!(s[1].op, "UPDATE");
        assert!((s[1].max_us - 2000.0).abs() < 2.0);
    }
}
