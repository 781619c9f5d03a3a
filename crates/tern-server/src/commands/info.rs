//! INFO: the sections monitoring tools read (server, clients, memory,
//! persistence, stats, cpu, commandstats, cluster, keyspace) and Tern's own
//! (the write queue, offload and engine counters). Every field comes from a
//! counter or the process's own accounting: INFO never walks the store.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use super::server::REDIS_VERSION;
use super::strings::tri;
use super::Ctx;
use crate::metrics::{engine_counters, engine_gauges};
use crate::resp::Reply;

/// The sections INFO shows by default and with `all`.
const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "cpu",
    "commandstats",
    "cluster",
    "keyspace",
    "tern",
];

/// INFO [section ...]
pub fn info(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let wanted: Vec<String> = args[1..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let everything = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| matches!(w.as_str(), "all" | "everything" | "default"));
    let mut out = String::new();
    for &section in SECTIONS {
        // Per-command statistics come with `all` or when named, as in Redis.
        let by_default = section != "commandstats";
        let all = wanted
            .iter()
            .any(|w| matches!(w.as_str(), "all" | "everything"));
        if (everything && (by_default || all)) || wanted.iter().any(|w| w == section) {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            tri!(info_section(ctx, section, &mut out));
        }
    }
    Reply::Verbatim(out)
}

fn info_section(ctx: &Ctx<'_>, section: &str, out: &mut String) -> Result<(), Reply> {
    let st = ctx.state;
    let m = &st.metrics;
    let mut title = section.to_string();
    title[..1].make_ascii_uppercase();
    if section == "cpu" {
        title = "CPU".into();
    }
    let _ = write!(out, "# {title}\r\n");
    let mut kv = |k: &str, v: String| {
        let _ = write!(out, "{k}:{v}\r\n");
    };
    match section {
        "server" => {
            let up = st.started.elapsed().as_secs();
            kv("redis_version", REDIS_VERSION.into());
            kv("tern_version", env!("CARGO_PKG_VERSION").into());
            let mode = if st.cluster.is_some() {
                "cluster"
            } else {
                "standalone"
            };
            kv("redis_mode", mode.into());
            kv("os", std::env::consts::OS.into());
            kv("arch_bits", (usize::BITS).to_string());
            kv("process_id", std::process::id().to_string());
            kv("tcp_port", st.port.to_string());
            kv("uptime_in_seconds", up.to_string());
            kv("uptime_in_days", (up / 86400).to_string());
            kv("config_file", st.config_file.clone());
        }
        "clients" => {
            kv("connected_clients", st.connected().to_string());
            kv("maxclients", st.tunables.maxclients().to_string());
            kv(
                "client_recent_max_input_buffer",
                st.buffered.load(Relaxed).to_string(),
            );
            kv("blocked_clients", "0".into());
        }
        "persistence" => {
            kv("loading", "0".into());
            kv("aof_enabled", "1".into());
            kv("appendfsync", st.config.appendfsync.as_str().into());
            // `err` once the engine refuses writes (see engine_background_error).
            let failed = st.store.db.stats().background_error.is_some();
            kv(
                "aof_last_write_status",
                if failed { "err" } else { "ok" }.into(),
            );
            kv("rdb_changes_since_last_save", "0".into());
        }
        "stats" => {
            kv(
                "total_connections_received",
                m.connections_total.load(Relaxed).to_string(),
            );
            kv("total_commands_processed", m.total_commands().to_string());
            kv(
                "instantaneous_ops_per_sec",
                st.instantaneous_ops().to_string(),
            );
            kv(
                "rejected_connections",
                m.rejected_connections.load(Relaxed).to_string(),
            );
            kv("expired_keys", m.expired_keys.load(Relaxed).to_string());
            kv("evicted_keys", "0".into());
            kv("keyspace_hits", m.keyspace_hits.get().to_string());
            kv("keyspace_misses", m.keyspace_misses.get().to_string());
            kv(
                "total_error_replies",
                m.commands()
                    .iter()
                    .map(|c| c.errors)
                    .sum::<u64>()
                    .to_string(),
            );
            kv(
                "unexpected_error_replies",
                m.protocol_errors.load(Relaxed).to_string(),
            );
        }
        "memory" => {
            let rss = crate::process::resident_bytes();
            let peak = crate::process::peak_resident_bytes().max(rss);
            let human = crate::process::human_bytes;
            // The process's resident memory: the engine's memtables and
            // cache, request and reply buffers, everything.
            kv("used_memory", rss.to_string());
            kv("used_memory_human", human(rss));
            kv("used_memory_rss", rss.to_string());
            kv("used_memory_rss_human", human(rss));
            kv("used_memory_peak", peak.to_string());
            kv("used_memory_peak_human", human(peak));
            kv("maxmemory", "0".into());
            kv("maxmemory_human", "0B".into());
            kv("maxmemory_policy", "noeviction".into());
            kv("mem_fragmentation_ratio", "1.00".into());
            kv("mem_allocator", "libc".into());
        }
        "cpu" => {
            let t = crate::process::cpu_times();
            kv("used_cpu_sys", format!("{:.6}", t.sys));
            kv("used_cpu_user", format!("{:.6}", t.user));
            kv("used_cpu_sys_children", format!("{:.6}", t.children_sys));
            kv("used_cpu_user_children", format!("{:.6}", t.children_user));
        }
        "commandstats" => {
            for (spec, c) in super::COMMANDS.iter().zip(&m.commands()) {
                let calls = c.calls;
                if calls == 0 {
                    continue;
                }
                let usec = c.usec;
                kv(
                    &format!("cmdstat_{}", spec.name),
                    format!(
                        "calls={calls},usec={usec},usec_per_call={:.2},rejected_calls=0,failed_calls={}",
                        usec as f64 / calls as f64,
                        c.errors
                    ),
                );
            }
        }
        "cluster" => {
            kv(
                "cluster_enabled",
                u8::from(st.cluster.is_some()).to_string(),
            );
        }
        "keyspace" => {
            // Counts the committer keeps exact: no walk of the store.
            let m = st.store.meta();
            if m.keys > 0 {
                let avg_ttl = m.avg_ttl(crate::expiry::now_ms());
                kv(
                    "db0",
                    format!("keys={},expires={},avg_ttl={avg_ttl}", m.keys, m.expires),
                );
            }
        }
        "tern" => {
            // A commit that takes long is a stalled engine (or disk): the
            // writes queued behind it wait, reads and everything else go on.
            let c = &st.exec;
            kv("write_queue_jobs", c.write_queue.load(Relaxed).to_string());
            kv(
                "write_commit_in_progress_ms",
                (c.busy_micros() / 1000).to_string(),
            );
            kv(
                "write_longest_commit_ms",
                (c.longest_group_micros.load(Relaxed) / 1000).to_string(),
            );
            kv("write_commits", c.commits.load(Relaxed).to_string());
            kv("read_queue_jobs", c.read_queue.load(Relaxed).to_string());
            if let Some(o) = &st.offload {
                for (name, _, v) in o.stats().counters() {
                    kv(&format!("offload_{name}"), v.to_string());
                }
            }
            let e = st.store.db.stats();
            for (name, _, v) in engine_counters(&e).into_iter().chain(engine_gauges(&e)) {
                kv(
                    &format!("engine_{}", name.trim_end_matches("_total")),
                    v.to_string(),
                );
            }
            for (i, l) in e.levels.iter().enumerate() {
                if l.files > 0 {
                    kv(
                        &format!("engine_level{i}"),
                        format!("files={},bytes={}", l.files, l.bytes),
                    );
                }
            }
            kv(
                "engine_write_amplification",
                format!("{:.2}", e.write_amplification()),
            );
            // Why the engine refuses writes, on one line; `none` while it accepts them.
            let cause = e.background_error.as_deref().unwrap_or("none");
            kv("engine_background_error", cause.replace(['\r', '\n'], " "));
        }
        _ => {}
    }
    Ok(())
}
