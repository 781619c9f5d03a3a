//! Server configuration: a TOML file, overridden by command-line flags.
//!
//! Names follow `redis.conf` where a Redis setting exists (`port`,
//! `requirepass`, `appendfsync`, `maxclients`, `tcp-backlog`, `timeout`,
//! `proto-max-bulk-len`, `client-query-buffer-limit`). See `docs/server.md`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The Redis port, used when no port is configured (falling back to a free
/// port if it is taken).
pub const DEFAULT_PORT: u16 = 6379;
/// The metrics port used when none is configured (with the same fallback).
pub const DEFAULT_METRICS_PORT: u16 = 9379;

/// How acknowledged writes are made durable (Redis's `appendfsync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AppendFsync {
    /// Every write is fsynced before it is acknowledged (`sync: true`).
    Always,
    /// Writes reach the OS before they are acknowledged; the WAL is fsynced
    /// once a second, so a power loss loses at most about a second.
    #[default]
    Everysec,
    /// Writes reach the OS before they are acknowledged; fsync is left to
    /// the engine (memtable switches, flushes) and the OS.
    No,
}

impl AppendFsync {
    /// The `redis.conf` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AppendFsync::Always => "always",
            AppendFsync::Everysec => "everysec",
            AppendFsync::No => "no",
        }
    }

    /// Parses the `redis.conf` spelling.
    pub fn parse(s: &str) -> Option<AppendFsync> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Some(AppendFsync::Always),
            "everysec" => Some(AppendFsync::Everysec),
            "no" => Some(AppendFsync::No),
            _ => None,
        }
    }
}

/// Everything `tern serve` can be told.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Config {
    /// Address to listen on.
    pub bind: String,
    /// Port; `None`: 6379, or a free port if 6379 is taken. 0: a free port.
    pub port: Option<u16>,
    /// Data directory of the engine.
    pub dir: PathBuf,
    /// Password required from clients (`AUTH`/`HELLO … AUTH`); empty: none.
    pub requirepass: String,
    /// Durability of acknowledged writes.
    pub appendfsync: AppendFsync,
    /// Most simultaneous client connections.
    pub maxclients: usize,
    /// Connections the kernel may queue before the server accepts them
    /// (capped by `net.core.somaxconn`).
    pub tcp_backlog: u32,
    /// Close a connection idle this many seconds; 0: never.
    pub timeout: u64,
    /// Close a connection that stalls this many seconds in the middle of a
    /// request or while its replies are being written; 0: never.
    pub stall_timeout: u64,
    /// Largest argument, bytes.
    pub proto_max_bulk_len: usize,
    /// Most arguments in one request.
    pub max_args: usize,
    /// Largest buffered request of one connection, bytes.
    pub client_query_buffer_limit: usize,
    /// Most bytes of buffered requests over all connections; a connection
    /// that grows its buffer past this is closed.
    pub maxmemory_clients: usize,
    /// Where `/metrics` is served: `host:port`; empty: 127.0.0.1:9379 (or a
    /// free port if taken); "off": disabled.
    pub metrics_bind: String,
    /// Worker threads (connections, parsing, replies); 0: one per core.
    pub threads: usize,
    /// Threads that run read commands against the engine; 0: four per
    /// core. Reads that wait on the disk hold one each.
    pub read_threads: usize,
    /// Compaction and GC on workers (the `[offload]` table); off when
    /// absent. See docs/offload.md.
    pub offload: Option<OffloadConfig>,
    /// Cluster mode (the `[cluster]` table); standalone when absent. See
    /// docs/cluster.md.
    pub cluster: Option<ClusterConfig>,
    /// Engine settings (the `[engine]` table, names as in
    /// [`tern::Settings`]). `max_value_size` follows `proto-max-bulk-len`.
    pub engine: tern::Settings,
    /// Which engine stores the data: `lsm` (Tern's LSM, every command) or
    /// `hash` (the hash engine: strings only, see docs/server.md).
    pub engine_kind: EngineKind,
    /// Settings of the hash engine (the `[hash]` table).
    pub hash: HashConfig,
}

/// The engine under the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    /// Tern's LSM engine.
    #[default]
    Lsm,
    /// The hash engine (`crates/tern-hash`).
    Hash,
}

impl EngineKind {
    /// Parses `lsm` or `hash`.
    pub fn parse(s: &str) -> Option<EngineKind> {
        match s {
            "lsm" => Some(EngineKind::Lsm),
            "hash" => Some(EngineKind::Hash),
            _ => None,
        }
    }
}

/// The `[hash]` table: the hash engine's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct HashConfig {
    /// Memory for the log's in-memory pages (default "256M").
    pub memory: String,
    /// log2 of the page size (default 22: 4 MiB); a key and value must fit
    /// in a page.
    pub page_bits: u32,
    /// Of the in-memory log, the share updated in place (default 0.9).
    pub mutable_fraction: f64,
    /// log2 of the index's bucket count (default 20).
    pub index_bits: u32,
    /// log2 of a log segment's size (default 30).
    pub segment_bits: u32,
    /// Compact the log once it spans more than this (a size, or "off",
    /// the default).
    pub log_size_limit: String,
    /// Threads that run commands on the engine; 0: two per core.
    pub engine_threads: usize,
}

impl Default for HashConfig {
    fn default() -> Self {
        HashConfig {
            memory: "256M".into(),
            page_bits: 22,
            mutable_fraction: 0.9,
            index_bits: 20,
            segment_bits: 30,
            log_size_limit: "off".into(),
            engine_threads: 0,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: "127.0.0.1".into(),
            port: None,
            dir: PathBuf::from("tern-server-data"),
            requirepass: String::new(),
            appendfsync: AppendFsync::Everysec,
            maxclients: 10_000,
            tcp_backlog: 4096,
            timeout: 0,
            stall_timeout: 60,
            proto_max_bulk_len: 512 << 20,
            max_args: 1 << 20,
            client_query_buffer_limit: 1 << 30,
            maxmemory_clients: 1 << 30,
            metrics_bind: String::new(),
            threads: 0,
            read_threads: 0,
            engine: tern::Settings::default(),
            offload: None,
            cluster: None,
            engine_kind: EngineKind::Lsm,
            hash: HashConfig::default(),
        }
    }
}

/// The `[cluster]` table: where the cluster's metadata lives and how
/// clients reach this node.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ClusterConfig {
    /// etcd client URLs, comma-separated (`http://host:2379`).
    pub etcd: String,
    /// The cluster's name: its metadata lives under
    /// `/tern/clusters/<name>/` in etcd (default `default`).
    #[serde(default = "default_cluster_name")]
    pub name: String,
    /// What clients are told to connect to: `host` or `host:port`; default
    /// the bind address and the listening port.
    #[serde(default)]
    pub announce: Option<String>,
    /// Seconds the node's registration in etcd outlives it (default 5).
    #[serde(default = "default_node_ttl")]
    pub node_ttl_secs: u64,
    /// Megabytes per second a migration's background copy reads from the
    /// source, so foreground latency stays flat (default 32; 0: unbounded;
    /// fractions allowed).
    #[serde(default = "default_migrate_rate")]
    pub migrate_rate_mb: f64,
    /// Kilobytes of string values one part of a migration's bulk copy
    /// carries: the source exports each part as table and blob files, the
    /// target ingests it while holding writes to its slots (default 8192,
    /// 16 to 65536).
    #[serde(default = "default_migrate_part_kb")]
    pub migrate_part_kb: u64,
}

impl ClusterConfig {
    /// Cluster settings with the defaults, for etcd at `etcd`.
    pub fn new(etcd: &str) -> ClusterConfig {
        ClusterConfig {
            etcd: etcd.to_string(),
            name: default_cluster_name(),
            announce: None,
            node_ttl_secs: default_node_ttl(),
            migrate_rate_mb: default_migrate_rate(),
            migrate_part_kb: default_migrate_part_kb(),
        }
    }
}

fn default_cluster_name() -> String {
    "default".into()
}

fn default_node_ttl() -> u64 {
    5
}

fn default_migrate_rate() -> f64 {
    32.0
}

fn default_migrate_part_kb() -> u64 {
    8192
}

/// The `[offload]` table: where the coordinator and the shared tier are.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct OffloadConfig {
    /// The coordinator, `http://host:port`.
    pub coordinator: String,
    /// The shared tier: `file:///dir` or `s3://bucket/prefix` (S3 settings
    /// from `AWS_*` variables).
    pub shared: String,
    /// Names this store's files in the shared tier; default: derived from
    /// the data directory's path.
    #[serde(default)]
    pub store_id: Option<String>,
    /// Run a job locally when offloading it fails (default true).
    #[serde(default = "yes")]
    pub fallback: bool,
    /// Longest wait for a job's result, seconds (default 600).
    #[serde(default = "default_deadline")]
    pub deadline_secs: u64,
}

fn yes() -> bool {
    true
}

fn default_deadline() -> u64 {
    600
}

/// A configuration that cannot be used, with what to fix.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads a TOML configuration file.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError(format!(
                "cannot read config file {}: {e}; check the path passed to --config",
                path.display()
            ))
        })?;
        Self::from_toml(&text)
            .map_err(|e| ConfigError(format!("config file {}: {}", path.display(), e.0)))
    }

    /// Parses a TOML configuration.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let see = |e: &dyn std::fmt::Display| {
            ConfigError(format!("{e}(see docs/server.md for the accepted settings)"))
        };
        let mut table: toml::Table = toml::from_str(text).map_err(|e| see(&e))?;
        // Engine settings are named as in `tern::Settings`; the kebab-case
        // spelling of the rest of this file is accepted too. Only a file
        // that uses it is rebuilt from its table: parsing the text keeps
        // the line and column in errors.
        let kebab = match table.get_mut("engine") {
            Some(toml::Value::Table(engine)) if engine.keys().any(|k| k.contains('-')) => engine,
            _ => {
                let c: Config = toml::from_str(text).map_err(|e| see(&e))?;
                c.validate()?;
                return Ok(c);
            }
        };
        let mut snake = toml::Table::new();
        for (k, v) in std::mem::take(kebab) {
            let name = k.replace('-', "_");
            if snake.insert(name.clone(), v).is_some() {
                let kebab = name.replace('_', "-");
                return Err(ConfigError(format!(
                    "[engine] sets {name} twice (also as {kebab}); keep one"
                )));
            }
        }
        *kebab = snake;
        let c = Config::deserialize(table).map_err(|e| see(&e))?;
        c.validate()?;
        Ok(c)
    }

    /// Checks values that would make the server unusable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError(m.to_string()));
        if self.tcp_backlog == 0 {
            return bad("tcp-backlog must be at least 1");
        }
        if self.maxclients == 0 {
            return bad("maxclients must be at least 1");
        }
        if self.proto_max_bulk_len < 1024 || self.proto_max_bulk_len > (1 << 30) - 64 {
            return bad("proto-max-bulk-len must be between 1 KiB and 1 GiB - 64 bytes (the engine's value limit)");
        }
        if self.max_args < 16 {
            return bad("max-args must be at least 16");
        }
        if self.client_query_buffer_limit < 1 << 20 {
            return bad("client-query-buffer-limit must be at least 1 MiB");
        }
        if self.dir.as_os_str().is_empty() {
            return bad("dir must name a data directory");
        }
        if let Some(c) = &self.cluster {
            if c.etcd.trim().is_empty() {
                return bad("[cluster] etcd must name etcd's client URL (http://host:2379)");
            }
            if c.migrate_rate_mb.is_nan() || c.migrate_rate_mb < 0.0 {
                return bad("[cluster] migrate-rate-mb must be 0 (unbounded) or more");
            }
            if !(16..=65536).contains(&c.migrate_part_kb) {
                return bad("[cluster] migrate-part-kb must be between 16 and 65536");
            }
            if c.name.is_empty() || c.name.contains('/') {
                return bad("[cluster] name must be non-empty and without '/'");
            }
        }
        if self.engine.max_value_size != tern::Settings::default().max_value_size {
            return bad("[engine] max_value_size follows proto-max-bulk-len: set that instead");
        }
        self.engine_options()
            .validate()
            .map_err(|e| ConfigError(format!("[engine]: {e}")))
    }

    /// The engine options for this configuration.
    pub fn engine_options(&self) -> tern::Options {
        tern::Options::new(tern::Settings {
            max_value_size: self.proto_max_bulk_len + 64,
            // Value headers (type, expiry) stay readable without a blob read.
            blob_head_size: self.engine.blob_head_size.max(crate::keyspace::HEAD_LEN),
            ..self.engine.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_in_a_file_name_their_line() {
        let e = Config::from_toml("port = 7000\nmaxclients = \"many\"\n").unwrap_err();
        assert!(e.0.contains("line 2"), "{e}");
    }

    #[test]
    fn parses_a_file_and_rejects_unknown_keys() {
        let c = Config::from_toml(
            "port = 7000\nappendfsync = \"always\"\nrequirepass = \"pw\"\n[engine]\nwrite_buffer_size = 1048576\nblob_threshold = \"off\"\n",
        )
        .unwrap();
        assert_eq!(c.port, Some(7000));
        assert_eq!(c.appendfsync, AppendFsync::Always);
        assert_eq!(c.engine.write_buffer_size, 1 << 20);
        assert_eq!(c.engine.blob_threshold, None);
        assert_eq!(c.engine_options().write_buffer_size, 1 << 20);
        // The kebab-case spelling of the other settings works for the
        // engine's too; unknown engine settings are errors.
        let c = Config::from_toml("[engine]\nmax-open-files = 64\n").unwrap();
        let e =
            Config::from_toml("[engine]\nmax-open-files = 64\nmax_open_files = 8\n").unwrap_err();
        assert!(e.0.contains("max_open_files twice"), "{e}");
        assert_eq!(c.engine.max_open_files, 64);
        let e = Config::from_toml("[engine]\nwrite-bufer-size = 1\n").unwrap_err();
        assert!(e.0.contains("write_bufer_size"), "{e}");
        let e = Config::from_toml("prot = 1\n").unwrap_err();
        assert!(e.0.contains("prot"), "{e}");
        assert!(Config::from_toml("maxclients = 0\n").is_err());
        assert!(Config::from_toml("tcp-backlog = 0\n").is_err());
        assert_eq!(
            Config::from_toml("tcp-backlog = 511\n")
                .unwrap()
                .tcp_backlog,
            511
        );
    }

    /// The sample configuration in docs/server.md parses and validates.
    #[test]
    fn documented_sample_parses() {
        let doc = include_str!("../../../docs/server.md");
        let start = doc
            .find("```toml\n")
            .expect("docs/server.md has a TOML sample")
            + 8;
        let len = doc[start..].find("```").expect("the sample ends");
        let c = Config::from_toml(&doc[start..start + len]).unwrap();
        assert_eq!(c.engine.blob_threshold, Some(512));
        assert_eq!(c.engine.background_rate_limit, None);
        // A value the sample sets away from its default: the table is read.
        assert_eq!(c.engine.max_open_files, 1000);
        let e = Config::from_toml("[engine]\nmax_value_size = 10\n").unwrap_err();
        assert!(e.0.contains("proto-max-bulk-len"), "{e}");
    }
}
