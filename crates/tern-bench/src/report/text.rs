//! Text output in YCSB-cpp's shape, followed by the five metrics.

use std::fmt::Write as _;

use crate::measure::clock::now_string;
use crate::measure::phase::PhaseResult;
use crate::measure::OpSummary;

/// One YCSB-cpp status line:
/// `<date time> <secs> sec: <N> operations; [READ: Count=.. Max=.. …] …`.
pub fn status_line(date: &str, secs: f64, ops: u64, summaries: &[OpSummary]) -> String {
    let mut s = format!("{date} {} sec: {ops} operations;", secs as u64);
    for o in summaries {
        if o.count > 0 {
            let _ = write!(
                s,
                " [{}: Count={} Max={:.2} Min={:.2} Avg={:.2} 90={:.2} 99={:.2} 99.9={:.2} 99.99={:.2}]",
                o.op, o.count, o.max_us, o.min_us, o.avg_us, o.p90_us, o.p99_us, o.p999_us, o.p9999_us
            );
        }
        if o.fail > 0 {
            let _ = write!(s, " [{}-FAILED: Count={}]", o.op, o.fail);
        }
    }
    s
}

/// `Load`/`Run` label of a phase for the closing lines.
fn label(phase: &str) -> &str {
    if phase.eq_ignore_ascii_case("load") {
        "Load"
    } else {
        "Run"
    }
}

/// The closing lines of a phase, exactly as YCSB-cpp prints them.
pub fn closing_lines(r: &PhaseResult) -> String {
    let l = label(&r.phase);
    format!(
        "{}\n{l} runtime(sec): {:.2}\n{l} operations success(ops): {}\n{l} operations fail(ops): {}\n{l} throughput(ops/sec): {:.1}\n",
        status_line(&now_string(), r.runtime_sec, r.ops_ok + r.ops_fail, &r.ops),
        r.runtime_sec,
        r.ops_ok,
        r.ops_fail,
        r.throughput
    )
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| v.to_string())
}

/// Human-readable bytes.
pub fn bytes(b: u64) -> String {
    let f = b as f64;
    if f >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", f / (1u64 << 30) as f64)
    } else if f >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", f / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", f / 1024.0)
    }
}

/// The five metrics, one `name: value` per line (prefixed `[metrics]` so
/// scripts can grep them; counters mirror RocksDB's ticker names).
pub fn metrics_lines(r: &PhaseResult) -> String {
    let e = &r.engine;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "[metrics] phase={} binding={} threads={}",
        r.phase, r.binding, r.threads
    );
    let _ = writeln!(s, "[metrics] throughput(ops/sec): {:.1}", r.throughput);
    for o in &r.ops {
        let _ = writeln!(
            s,
            "[metrics] latency(us) {}: avg={:.2} p90={:.2} p99={:.2} p99.9={:.2} p99.99={:.2} max={:.2}",
            o.op, o.avg_us, o.p90_us, o.p99_us, o.p999_us, o.p9999_us, o.max_us
        );
    }
    let _ = writeln!(
        s,
        "[metrics] space: disk_bytes={} max_disk_bytes={} logical_bytes={} space_amp={:.3}",
        r.space.final_bytes, r.space.max_bytes, r.space.logical_bytes, r.space.space_amp
    );
    let _ = writeln!(
        s,
        "[metrics] io: written={} read={} user_written={} write_amp={} settle_sec={:.1}",
        r.io.process.written,
        r.io.process.read,
        r.io.user_bytes_written,
        r.io.write_amp().map_or("n/a".into(), |w| format!("{w:.3}")),
        r.settle_sec
    );
    let _ = writeln!(s, "compact.read.bytes COUNT : {}", opt(e.compaction_read));
    let _ = writeln!(s, "compact.write.bytes COUNT : {}", opt(e.compaction_write));
    let _ = writeln!(s, "flush.write.bytes COUNT : {}", opt(e.flush_write));
    let _ = writeln!(s, "gc.read.bytes COUNT : {}", opt(e.gc_read));
    let _ = writeln!(s, "gc.write.bytes COUNT : {}", opt(e.gc_write));
    let _ = writeln!(s, "stall.micros COUNT : {}", opt(e.stall_micros));
    for (k, v) in &r.extra {
        let _ = writeln!(s, "[metrics] {k}: {v}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_has_ycsb_shape() {
        let o = OpSummary {
            op: "READ".into(),
            count: 3,
            fail: 1,
            min_us: 1.0,
            max_us: 9.5,
            avg_us: 4.25,
            p50_us: 4.0,
            p90_us: 8.0,
            p99_us: 9.0,
            p999_us: 9.5,
            p9999_us: 9.5,
        };
        let s = status_line("2024-02-29 09:57:35", 12.7, 4, &[o]);
        assert_eq!(
            s,
            "2024-02-29 09:57:35 12 sec: 4 operations; [READ: Count=3 Max=9.50 Min=1.00 Avg=4.25 90=8.00 99=9.00 99.9=9.50 99.99=9.50] [READ-FAILED: Count=1]"
        );
    }
}
