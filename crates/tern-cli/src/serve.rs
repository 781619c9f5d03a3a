//! `tern serve`: run the Redis-protocol server on a store.
//!
//! Settings come from an optional TOML file (`--config`), then the flags
//! below override it. See docs/server.md.

use std::path::PathBuf;
use std::process::ExitCode;

use tern_server::{AppendFsync, Config, StartOptions};

use crate::Failure;

/// `--help`'s list of engine settings: what the `[engine]` table of the
/// configuration file takes, with each setting's default.
fn engine_settings_help() -> String {
    let defaults = tern::Settings::default();
    let mut s = String::from(
        "Engine settings, the [engine] table of --config (sizes in bytes or as \"64M\", \
         optional values \"off\"; see docs/server.md), with their defaults:\n",
    );
    for (name, doc) in tern::Settings::help() {
        let value = defaults.get(name).unwrap_or_default();
        s += &format!("  {name} = {value}\n      {doc}\n");
    }
    s
}

/// Flags of `tern serve`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tern serve\n  \
    tern serve --port 7000 --dir /var/lib/tern --appendfsync always\n  \
    tern serve --config tern.toml\n  \
    tern serve --engine hash --port 7000\n  \
    tern serve --cluster --etcd http://127.0.0.1:2379 --port 7001 --dir node1\n\n\
    With no flags the server listens on 127.0.0.1:6379 (or a free port if \
    6379 is taken) with its data in ./tern-server-data; connect with redis-cli.",
    after_long_help = engine_settings_help())]
pub struct Args {
    /// TOML configuration file (see docs/server.md); flags override it.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1].
    #[arg(long)]
    bind: Option<String>,
    /// Port to listen on; 0 picks a free port [default: 6379, or a free port if taken].
    #[arg(long, short = 'p')]
    port: Option<u16>,
    /// Data directory [default: ./tern-server-data].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Password clients must send with AUTH.
    #[arg(long)]
    requirepass: Option<String>,
    /// Durability of acknowledged writes: always, everysec or no [default: everysec].
    #[arg(long, value_parser = parse_fsync)]
    appendfsync: Option<AppendFsync>,
    /// Most simultaneous client connections [default: 10000].
    #[arg(long)]
    maxclients: Option<usize>,
    /// Connections the kernel may queue before they are accepted; capped by net.core.somaxconn [default: 4096].
    #[arg(long)]
    tcp_backlog: Option<u32>,
    /// Close connections idle this many seconds; 0 never [default: 0].
    #[arg(long)]
    timeout: Option<u64>,
    /// Where /metrics is served (host:port), or "off" [default: 127.0.0.1:9379, or a free port].
    #[arg(long)]
    metrics_bind: Option<String>,
    /// Worker threads (connections, parsing, replies); 0 means one per core [default: 0].
    #[arg(long)]
    threads: Option<usize>,
    /// Threads that run read commands on the engine; 0 means four per core [default: 0].
    #[arg(long)]
    read_threads: Option<usize>,
    /// Run as a node of a cluster whose topology lives in etcd (see
    /// docs/cluster.md); needs --etcd. The data directory must be empty the
    /// first time.
    #[arg(long, requires = "etcd")]
    cluster: bool,
    /// etcd client URLs, comma-separated (cluster mode).
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// The engine under the server: `lsm` (Tern's LSM, every command) or
    /// `hash` (the hash engine: string commands at memory speed, durable by
    /// checkpoint; see docs/server.md) [default: lsm].
    #[arg(long, value_parser = ["lsm", "hash"])]
    engine: Option<String>,
    /// Which cluster this node belongs to [default: default].
    #[arg(long, value_name = "NAME")]
    cluster_name: Option<String>,
    /// Address clients are told to use for this node, HOST or HOST:PORT [default: the bind address and port].
    #[arg(long, value_name = "ADDR")]
    cluster_announce: Option<String>,
}

fn parse_fsync(s: &str) -> Result<AppendFsync, String> {
    AppendFsync::parse(s).ok_or_else(|| format!("'{s}' is not one of always, everysec, no"))
}

/// Runs the server until SIGTERM, SIGINT or SHUTDOWN.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let mut config = match &args.config {
        Some(p) => Config::from_file(p).map_err(|e| Failure::new(e.0))?,
        None => Config::default(),
    };
    if let Some(v) = args.bind {
        config.bind = v;
    }
    if args.port.is_some() {
        config.port = args.port;
    }
    if let Some(v) = args.dir {
        config.dir = v;
    }
    if let Some(v) = args.requirepass {
        config.requirepass = v;
    }
    if let Some(v) = args.appendfsync {
        config.appendfsync = v;
    }
    if let Some(v) = args.maxclients {
        config.maxclients = v;
    }
    if let Some(v) = args.tcp_backlog {
        config.tcp_backlog = v;
    }
    if let Some(v) = args.timeout {
        config.timeout = v;
    }
    if let Some(v) = args.metrics_bind {
        config.metrics_bind = v;
    }
    if let Some(v) = args.threads {
        config.threads = v;
    }
    if let Some(v) = args.read_threads {
        config.read_threads = v;
    }
    if args.cluster || args.etcd.is_some() {
        let c = config
            .cluster
            .get_or_insert_with(|| tern_server::config::ClusterConfig::new(""));
        if let Some(e) = args.etcd {
            c.etcd = e;
        }
    }
    if let Some(c) = &mut config.cluster {
        if let Some(n) = args.cluster_name {
            c.name = n;
        }
        if let Some(a) = args.cluster_announce {
            c.announce = Some(a);
        }
    }
    if let Some(e) = args
        .engine
        .as_deref()
        .and_then(tern_server::EngineKind::parse)
    {
        config.engine_kind = e;
    }
    let dir = config.dir.clone();
    let fsync = config.appendfsync;
    let opts = StartOptions {
        handle_signals: true,
        config_file: args
            .config
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        fs: None,
    };
    if config.engine_kind == tern_server::EngineKind::Hash {
        return run_hash(config, opts);
    }
    let server = tern_server::start(config, opts).map_err(|e| {
        Failure::new(e.0)
            .hint("run `tern serve --help` for the flags, docs/server.md for the config file")
    })?;
    eprintln!(
        "tern serve: listening on {} (data in {}, appendfsync {})",
        server.addr(),
        dir.display(),
        fsync.as_str()
    );
    if let Some(m) = server.metrics_addr() {
        eprintln!("tern serve: metrics on http://{m}/metrics");
    }
    match &server.state().cluster {
        Some(node) => eprintln!(
            "tern serve: cluster node {} of cluster {:?}; ready; connect with `redis-cli -c -p {}` (create the cluster with `tern cluster create` once every node runs)",
            node.info.id,
            node.name,
            server.addr().port()
        ),
        None => eprintln!(
            "tern serve: ready; connect with `redis-cli -p {}`",
            server.addr().port()
        ),
    }
    server.wait().map_err(|e| Failure::new(e.0))?;
    eprintln!("tern serve: stopped; all acknowledged writes are on disk");
    Ok(ExitCode::SUCCESS)
}

/// `tern serve --engine hash`: the string commands on the hash engine.
fn run_hash(config: Config, opts: StartOptions) -> Result<ExitCode, Failure> {
    if config.cluster.is_some() || config.offload.is_some() {
        return Err(Failure::new(
            "the hash engine serves one node on its own: drop --cluster and the [offload] table, or use --engine lsm",
        ));
    }
    let dir = config.dir.clone();
    let fsync = config.appendfsync;
    let server = tern_server::hash::start(config, opts).map_err(|e| {
        Failure::new(e.0)
            .hint("run `tern serve --help` for the flags, docs/server.md for the [hash] table")
    })?;
    eprintln!(
        "tern serve: hash engine listening on {} (data in {}, appendfsync {})",
        server.addr(),
        dir.display(),
        fsync.as_str()
    );
    eprintln!(
        "tern serve: ready; connect with `redis-cli -p {}`",
        server.addr().port()
    );
    server.wait().map_err(|e| Failure::new(e.0))?;
    eprintln!("tern serve: stopped; a last checkpoint holds every acknowledged write");
    Ok(ExitCode::SUCCESS)
}
