//! Counters and latency histograms, rendered for INFO and for Prometheus.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tern::striped::StripedCounter;

/// Upper bounds of the latency histogram buckets, microseconds.
pub const BUCKETS_US: [u64; 15] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    1_000_000,
];

/// Counters of one command, in one stripe.
#[derive(Debug, Default)]
struct CommandCells {
    calls: AtomicU64,
    errors: AtomicU64,
    usec: AtomicU64,
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
}

/// One command's counters, summed over the stripes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandTotals {
    /// The command's name, lower case.
    pub name: &'static str,
    /// Calls.
    pub calls: u64,
    /// Calls answered with an error.
    pub errors: u64,
    /// Total time, microseconds.
    pub usec: u64,
    /// Calls per latency bucket (last: above every bound).
    pub buckets: [u64; BUCKETS_US.len() + 1],
}

/// Server-wide counters.
///
/// Every command bumps its counters from whichever thread ran it. Shared
/// by all threads, those cache lines would move between cores on every
/// command, so each thread records into its own stripe
/// ([`tern::striped::stripe`]) and readers (INFO, `/metrics`) sum them.
#[derive(Debug)]
pub struct Metrics {
    names: Vec<&'static str>,
    /// `tern::striped::STRIPES` tables of per-command cells, each its own
    /// allocation.
    stripes: Vec<Box<[CommandCells]>>,
    /// Connections accepted.
    pub connections_total: AtomicU64,
    /// Connections refused (maxclients).
    pub rejected_connections: AtomicU64,
    /// Connections closed for a malformed request or a limit.
    pub protocol_errors: AtomicU64,
    /// Reads that found a key.
    pub keyspace_hits: StripedCounter,
    /// Reads that found no key.
    pub keyspace_misses: StripedCounter,
    /// Commands unknown to the server.
    pub unknown_commands: AtomicU64,
    /// Keys active expiry deleted.
    pub expired_keys: AtomicU64,
}

impl Metrics {
    /// Counters for the commands named in `commands`; a call is recorded
    /// by its index there.
    pub fn new(commands: impl IntoIterator<Item = &'static str>) -> Self {
        let names: Vec<&'static str> = commands.into_iter().collect();
        let stripes = (0..tern::striped::STRIPES)
            .map(|_| (0..names.len()).map(|_| CommandCells::default()).collect())
            .collect();
        Metrics {
            names,
            stripes,
            connections_total: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            protocol_errors: AtomicU64::new(0),
            keyspace_hits: StripedCounter::default(),
            keyspace_misses: StripedCounter::default(),
            unknown_commands: AtomicU64::new(0),
            expired_keys: AtomicU64::new(0),
        }
    }

    /// Records one call of command `idx`.
    pub fn record(&self, idx: usize, took: Duration, error: bool) {
        let Some(m) = self.stripes[tern::striped::stripe()].get(idx) else {
            return;
        };
        let us = took.as_micros() as u64;
        m.calls.fetch_add(1, Relaxed);
        m.usec.fetch_add(us, Relaxed);
        if error {
            m.errors.fetch_add(1, Relaxed);
        }
        let b = BUCKETS_US
            .iter()
            .position(|&ub| us <= ub)
            .unwrap_or(BUCKETS_US.len());
        m.buckets[b].fetch_add(1, Relaxed);
    }

    /// Records the keyspace reads of one command: keys found and missed.
    pub fn keyspace(&self, hits: u64, misses: u64) {
        if hits > 0 {
            self.keyspace_hits.add(hits);
        }
        if misses > 0 {
            self.keyspace_misses.add(misses);
        }
    }

    /// Every command's counters, in the order given to [`Metrics::new`].
    pub fn commands(&self) -> Vec<CommandTotals> {
        let mut totals: Vec<CommandTotals> = self
            .names
            .iter()
            .map(|&name| CommandTotals {
                name,
                ..CommandTotals::default()
            })
            .collect();
        for stripe in &self.stripes {
            for (t, c) in totals.iter_mut().zip(stripe.iter()) {
                t.calls += c.calls.load(Relaxed);
                t.errors += c.errors.load(Relaxed);
                t.usec += c.usec.load(Relaxed);
                for (b, cb) in t.buckets.iter_mut().zip(&c.buckets) {
                    *b += cb.load(Relaxed);
                }
            }
        }
        totals
    }

    /// Commands processed in total.
    pub fn total_commands(&self) -> u64 {
        self.stripes
            .iter()
            .flat_map(|s| s.iter())
            .map(|c| c.calls.load(Relaxed))
            .sum()
    }

    /// The Prometheus text exposition of these counters, the connection
    /// count and the engine's statistics.
    pub fn render_prometheus(
        &self,
        connected: usize,
        uptime: Duration,
        engine: &tern::Stats,
    ) -> String {
        let mut s = String::with_capacity(16 * 1024);
        let counter = |s: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter(
            &mut s,
            "tern_connections_total",
            "Client connections accepted.",
            self.connections_total.load(Relaxed),
        );
        counter(
            &mut s,
            "tern_rejected_connections_total",
            "Connections refused because maxclients was reached.",
            self.rejected_connections.load(Relaxed),
        );
        counter(
            &mut s,
            "tern_protocol_errors_total",
            "Connections closed for a malformed request or an exceeded limit.",
            self.protocol_errors.load(Relaxed),
        );
        counter(
            &mut s,
            "tern_keyspace_hits_total",
            "Key lookups that found a live key.",
            self.keyspace_hits.get(),
        );
        counter(
            &mut s,
            "tern_keyspace_misses_total",
            "Key lookups that found no live key.",
            self.keyspace_misses.get(),
        );
        counter(
            &mut s,
            "tern_expired_keys_total",
            "Keys deleted by active expiry once their time to live passed.",
            self.expired_keys.load(Relaxed),
        );
        counter(
            &mut s,
            "tern_unknown_commands_total",
            "Requests naming an unknown command.",
            self.unknown_commands.load(Relaxed),
        );
        let _ = writeln!(s, "# HELP tern_connected_clients Open client connections.\n# TYPE tern_connected_clients gauge\ntern_connected_clients {connected}");
        let _ = writeln!(s, "# HELP tern_uptime_seconds Seconds since the server started.\n# TYPE tern_uptime_seconds gauge\ntern_uptime_seconds {}", uptime.as_secs());

        let commands = self.commands();
        let _ = writeln!(s, "# HELP tern_commands_total Commands processed, by command.\n# TYPE tern_commands_total counter");
        for m in &commands {
            let _ = writeln!(s, "tern_commands_total{{cmd=\"{}\"}} {}", m.name, m.calls);
        }
        let _ = writeln!(s, "# HELP tern_command_errors_total Commands answered with an error, by command.\n# TYPE tern_command_errors_total counter");
        for m in &commands {
            let _ = writeln!(
                s,
                "tern_command_errors_total{{cmd=\"{}\"}} {}",
                m.name, m.errors
            );
        }
        let _ = writeln!(s, "# HELP tern_command_duration_seconds Time to execute a command, by command.\n# TYPE tern_command_duration_seconds histogram");
        for m in &commands {
            let calls = m.calls;
            if calls == 0 {
                continue;
            }
            let mut cum = 0;
            for (i, ub) in BUCKETS_US.iter().enumerate() {
                cum += m.buckets[i];
                let _ = writeln!(
                    s,
                    "tern_command_duration_seconds_bucket{{cmd=\"{}\",le=\"{}\"}} {cum}",
                    m.name,
                    *ub as f64 / 1e6
                );
            }
            cum += m.buckets[BUCKETS_US.len()];
            let _ = writeln!(
                s,
                "tern_command_duration_seconds_bucket{{cmd=\"{}\",le=\"+Inf\"}} {cum}",
                m.name
            );
            let _ = writeln!(
                s,
                "tern_command_duration_seconds_sum{{cmd=\"{}\"}} {}",
                m.name,
                m.usec as f64 / 1e6
            );
            let _ = writeln!(
                s,
                "tern_command_duration_seconds_count{{cmd=\"{}\"}} {cum}",
                m.name
            );
        }

        for (name, help, v) in engine_counters(engine) {
            let _ = writeln!(s, "# HELP tern_engine_{name} {help}\n# TYPE tern_engine_{name} counter\ntern_engine_{name} {v}");
        }
        for (name, help, v) in engine_gauges(engine) {
            let _ = writeln!(s, "# HELP tern_engine_{name} {help}\n# TYPE tern_engine_{name} gauge\ntern_engine_{name} {v}");
        }
        let _ = writeln!(s, "# HELP tern_engine_level_files SST files per LSM level.\n# TYPE tern_engine_level_files gauge");
        for (i, l) in engine.levels.iter().enumerate() {
            let _ = writeln!(s, "tern_engine_level_files{{level=\"{i}\"}} {}", l.files);
        }
        let _ = writeln!(s, "# HELP tern_engine_level_bytes SST bytes per LSM level.\n# TYPE tern_engine_level_bytes gauge");
        for (i, l) in engine.levels.iter().enumerate() {
            let _ = writeln!(s, "tern_engine_level_bytes{{level=\"{i}\"}} {}", l.bytes);
        }
        s
    }
}

/// Appends the committer's and the read pool's state (how many jobs wait,
/// how long the running commit has taken: a stall shows here) and the
/// keyspace counts it keeps.
pub fn render_exec(
    s: &mut String,
    c: &crate::exec::status::ExecStatus,
    keyspace: &crate::keyspace::Meta,
) {
    let gauge = |s: &mut String, name: &str, help: &str, v: String| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
    };
    gauge(
        s,
        "tern_keys",
        "Keys stored, counting expired keys active expiry has not yet deleted (DBSIZE).",
        keyspace.keys.to_string(),
    );
    gauge(
        s,
        "tern_expiring_keys",
        "Keys with a time to live.",
        keyspace.expires.to_string(),
    );
    gauge(
        s,
        "tern_write_queue_jobs",
        "Write jobs (runs of one connection's write commands) waiting for the committer.",
        c.write_queue.load(Relaxed).to_string(),
    );
    gauge(
        s,
        "tern_write_commit_in_progress_seconds",
        "How long the running commit group has taken; 0 when idle. Climbing: writes wait on the engine or the disk.",
        (c.busy_micros() as f64 / 1e6).to_string(),
    );
    gauge(
        s,
        "tern_read_queue_jobs",
        "Read jobs waiting for a reader thread.",
        c.read_queue.load(Relaxed).to_string(),
    );
    let _ = writeln!(
        s,
        "# HELP tern_write_commits_total Engine commits made by the committer.\n# TYPE tern_write_commits_total counter\ntern_write_commits_total {}",
        c.commits.load(Relaxed)
    );
}

/// Appends the offload executor's counters (`tern_offload_*_total`).
pub fn render_offload(s: &mut String, o: &tern_offload::OffloadStats) {
    for (name, help, v) in o.counters() {
        let _ = writeln!(
            s,
            "# HELP tern_offload_{name}_total {help}\n# TYPE tern_offload_{name}_total counter\ntern_offload_{name}_total {v}"
        );
    }
}

/// Cumulative engine counters: name, help, value.
pub fn engine_counters(e: &tern::Stats) -> Vec<(&'static str, &'static str, u64)> {
    vec![
        (
            "user_bytes_written_total",
            "Bytes of keys and values written by clients.",
            e.user_bytes_written,
        ),
        (
            "keys_written_total",
            "Keys written (puts and deletes).",
            e.keys_written,
        ),
        (
            "file_opens_total",
            "Table and blob files opened for reads (climbing fast: max-open-files or open-files-memory too low).",
            e.file_opens,
        ),
        (
            "wal_bytes_written_total",
            "Bytes appended to the WAL.",
            e.wal_bytes_written,
        ),
        ("wal_syncs_total", "WAL fsyncs.", e.wal_syncs),
        ("write_groups_total", "Group commits.", e.write_groups),
        (
            "flush_bytes_written_total",
            "Bytes written by memtable flushes.",
            e.flush_bytes_written,
        ),
        ("flushes_total", "Memtable flushes.", e.flushes),
        (
            "compaction_bytes_read_total",
            "Bytes read by compactions.",
            e.compaction_bytes_read,
        ),
        (
            "compaction_bytes_written_total",
            "Bytes written by compactions.",
            e.compaction_bytes_written,
        ),
        ("compactions_total", "Compactions run.", e.compactions),
        (
            "compaction_failures_total",
            "Compactions that failed.",
            e.compaction_failures,
        ),
        (
            "gc_failures_total",
            "Background blob GC attempts that failed (retried).",
            e.gc_failures,
        ),
        (
            "stall_micros_total",
            "Microseconds writes were delayed or stopped.",
            e.stall_micros,
        ),
        (
            "block_cache_hits_total",
            "Block cache hits.",
            e.block_cache_hits,
        ),
        (
            "block_cache_misses_total",
            "Block cache misses.",
            e.block_cache_misses,
        ),
        (
            "block_cache_busy_total",
            "Block cache lookups and inserts that found their shard locked past a short spin and went on without it.",
            e.block_cache_busy,
        ),
    ]
}

/// Engine gauges: name, help, value.
pub fn engine_gauges(e: &tern::Stats) -> Vec<(&'static str, &'static str, u64)> {
    vec![
        ("sst_bytes", "Bytes in SST files.", e.sst_bytes),
        ("wal_bytes", "Bytes in WAL files.", e.wal_bytes),
        ("memtable_bytes", "Bytes in memtables.", e.memtable_bytes),
        (
            "immutable_memtables",
            "Memtables waiting to be flushed.",
            e.immutable_memtables as u64,
        ),
        (
            "spare_memtable_bytes",
            "Bytes of a flushed memtable's arena kept for the next memtable.",
            e.spare_memtable_bytes,
        ),
        ("blob_bytes", "Bytes in blob files.", e.blob_bytes),
        (
            "blob_live_bytes",
            "Bytes of blob records not known to be dead.",
            e.blob_live_bytes,
        ),
        (
            "blob_hidden_garbage_bytes",
            "Estimated bytes of blob records shadowed from L0, not yet marked dead.",
            e.blob_hidden_garbage_bytes,
        ),
        ("last_sequence", "Last sequence number.", e.last_sequence),
        ("snapshots", "Open snapshots.", e.snapshots as u64),
        (
            "block_cache_usage_bytes",
            "Bytes of data blocks in the block cache.",
            e.block_cache_usage,
        ),
        (
            "open_files",
            "Table and blob files open for reads.",
            e.open_files as u64,
        ),
        (
            "open_file_bytes",
            "Bytes of the open tables' indexes and filters.",
            e.open_file_bytes,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_recorded_on_many_threads_sum_in_the_totals() {
        let m = std::sync::Arc::new(Metrics::new(["get", "set"]));
        let threads: Vec<_> = (0..2 * tern::striped::STRIPES)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        // 3 µs: the 10 µs bucket; every tenth an error.
                        m.record(t % 2, Duration::from_micros(3), i % 10 == 0);
                    }
                    m.record(1, Duration::from_secs(2), false);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("recording thread");
        }
        let n = tern::striped::STRIPES as u64;
        let totals = m.commands();
        assert_eq!(totals[0].name, "get");
        assert_eq!(totals[0].calls, 100 * n);
        assert_eq!(totals[0].errors, 10 * n);
        assert_eq!(totals[0].usec, 300 * n);
        assert_eq!(totals[0].buckets[0], 100 * n);
        assert_eq!(totals[1].calls, 100 * n + 2 * n);
        assert_eq!(totals[1].buckets[BUCKETS_US.len()], 2 * n);
        assert_eq!(m.total_commands(), 202 * n);
        let text = m.render_prometheus(0, Duration::ZERO, &tern::Stats::default());
        assert!(text.contains(&format!("tern_commands_total{{cmd=\"get\"}} {}", 100 * n)));
    }
}
