//! Starting and stopping the server: opening the engine, binding the
//! listeners, accepting connections, the once-a-second sync, signals, and a
//! clean shutdown that flushes and closes the engine.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::net::TcpListener;

use crate::config::{AppendFsync, Config, DEFAULT_METRICS_PORT, DEFAULT_PORT};
use crate::expiry::ExpiryFilter;
use crate::state::{ClientDetail, ClientInfo, State};
use crate::store::Store;

/// How long a shutdown waits for connections to finish their requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A server that could not start or stop cleanly, with what to do.
#[derive(Debug)]
pub struct ServerError(pub String);

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServerError {}

/// Options of [`start`] that are not part of the configuration.
#[derive(Clone, Default)]
pub struct StartOptions {
    /// Shut down cleanly on SIGTERM and SIGINT.
    pub handle_signals: bool,
    /// The configuration file's path, shown by INFO.
    pub config_file: String,
    /// The file system the engine stores its data on; `None` for the
    /// operating system's. Tests pass a simulated one to cut power.
    pub fs: Option<tern::io::FsRef>,
}

impl std::fmt::Debug for StartOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartOptions")
            .field("handle_signals", &self.handle_signals)
            .field("config_file", &self.config_file)
            .field("fs", &self.fs.as_ref().map(|_| "custom"))
            .finish()
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    state: Arc<State>,
    thread: Mutex<Option<std::thread::JoinHandle<Result<(), ServerError>>>>,
}

impl ServerHandle {
    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the `/metrics` endpoint, if enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The shared state (for tests and embedding).
    pub fn state(&self) -> &Arc<State> {
        &self.state
    }

    /// Stops the server: closes the listeners and connections, flushes and
    /// closes the engine.
    pub fn shutdown(&self) -> Result<(), ServerError> {
        self.state.request_shutdown();
        self.wait()
    }

    /// Waits until the server stops (SHUTDOWN, a signal, or [`Self::shutdown`]).
    pub fn wait(&self) -> Result<(), ServerError> {
        let Some(t) = self.thread.lock().take() else {
            return Ok(());
        };
        t.join()
            .map_err(|_| ServerError("the server thread panicked".into()))?
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Listens on `host:port` with a connection backlog of `backlog` (the
/// kernel caps it at `net.core.somaxconn`). `port` `None` tries `default`
/// and falls back to a free port if it is taken.
pub(crate) async fn bind(
    host: &str,
    port: Option<u16>,
    default: u16,
    backlog: u32,
    what: &str,
) -> Result<TcpListener, ServerError> {
    let fail = |p: u16, e: std::io::Error| {
        ServerError(format!(
            "cannot listen for {what} on {host}:{p}: {e}; choose another address or port (port 0 picks a free one)"
        ))
    };
    match port {
        Some(p) => listen(host, p, backlog).await.map_err(|e| fail(p, e)),
        None => match listen(host, default, backlog).await {
            Ok(l) => Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                listen(host, 0, backlog).await.map_err(|e| fail(0, e))
            }
            Err(e) => Err(fail(default, e)),
        },
    }
}

/// Binds the first address `host` resolves to that accepts the bind, like
/// `TcpListener::bind`, but with the given backlog: tokio's fixed 1,024 lets
/// a burst of connects overflow the accept queue, and the kernel then drops
/// handshakes and answers with SYN cookies.
async fn listen(host: &str, port: u16, backlog: u32) -> std::io::Result<TcpListener> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As TcpListener::bind does: a restarted server must not wait out
        // the old one's TIME_WAIT connections.
        socket.set_reuseaddr(true)?;
        match socket.bind(addr).and_then(|()| socket.listen(backlog)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolved to nothing",
        )
    }))
}

/// The executor that sends the store's compactions and GC to `tern
/// coordinator`'s workers ([`crate::config::OffloadConfig`]).
fn offload_executor(
    o: &crate::config::OffloadConfig,
    dir: &std::path::Path,
    fs: tern::io::FsRef,
) -> Result<Arc<tern_offload::RemoteExecutor>, ServerError> {
    let bad = |e: tern_offload::OffloadError| ServerError(format!("[offload]: {e}"));
    let store_id = match &o.store_id {
        Some(id) => id.clone(),
        None => tern_offload::RemoteOptions::id_for_dir("serve", dir),
    };
    let mut ro = tern_offload::RemoteOptions::new(&store_id);
    ro.fallback = o.fallback;
    ro.deadline = std::time::Duration::from_secs(o.deadline_secs.max(1));
    let exec =
        tern_offload::RemoteExecutor::connect(&o.coordinator, &o.shared, ro, fs).map_err(bad)?;
    Ok(Arc::new(exec))
}

/// The cluster settings of a node listening on `bind`:`port` whose store
/// is `store`.
fn node_settings(
    c: &crate::config::ClusterConfig,
    bind: &str,
    port: u16,
    store: &Store,
) -> Result<crate::cluster::NodeSettings, ServerError> {
    let id = store
        .node_id()
        .ok_or_else(|| ServerError("the store has no cluster node id".into()))?;
    let (host, port) = match c.announce.as_deref() {
        None => (bind.to_string(), port),
        Some(a) => match a.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && !h.contains(':') => (
                h.to_string(),
                p.parse().map_err(|_| {
                    ServerError(format!(
                        "[cluster] announce {a:?}: the port is not a number"
                    ))
                })?,
            ),
            _ => (a.to_string(), port),
        },
    };
    if matches!(host.as_str(), "0.0.0.0" | "::" | "") {
        return Err(ServerError(format!(
            "listening on {bind:?}, the node cannot tell clients where to connect; pass --cluster-announce HOST"
        )));
    }
    Ok(crate::cluster::NodeSettings {
        etcd: c.etcd.clone(),
        name: c.name.clone(),
        announce: crate::cluster::topology::NodeInfo {
            id: id.to_string(),
            host,
            port,
            replicas: Vec::new(),
        },
        ttl: Duration::from_secs(c.node_ttl_secs.max(1)),
        migrate_rate: (c.migrate_rate_mb * 1048576.0) as u64,
        migrate_part_bytes: c.migrate_part_kb << 10,
    })
}

/// How the server's Redis keys map to engine keys.
fn layout_of(config: &Config) -> crate::keyspace::Layout {
    if config.cluster.is_some() {
        crate::keyspace::Layout::Slotted
    } else {
        crate::keyspace::Layout::Plain
    }
}

/// Opens the engine in `config.dir`, binds the listeners and serves in the
/// background; returns once clients can connect.
pub fn start(config: Config, opts: StartOptions) -> Result<ServerHandle, ServerError> {
    config.validate().map_err(|e| ServerError(e.0))?;
    let mut engine_opts = config.engine_options();
    let generation = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let filter = ExpiryFilter::new(generation.clone(), layout_of(&config));
    let lookup = filter.lookup.clone();
    engine_opts.compaction_filter = Some(Arc::new(filter));
    if let Some(fs) = &opts.fs {
        engine_opts.fs = fs.clone();
    }
    let offload = match &config.offload {
        None => None,
        Some(o) => Some(offload_executor(o, &config.dir, engine_opts.fs.clone())?),
    };
    let executor = offload
        .clone()
        .map(|e| e as Arc<dyn tern::compaction::Executor>);
    let db = tern::Db::open_with_executor(&config.dir, engine_opts, executor).map_err(|e| {
        ServerError(format!(
            "cannot open the data directory {}: {e}; check that it is writable and that no other server uses it",
            config.dir.display()
        ))
    })?;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = match config.threads {
        0 => cores,
        n => n,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("tern-serve")
        .enable_all()
        .build()
        .map_err(|e| ServerError(format!("cannot start the runtime: {e}")))?;

    let (listener, metrics) = rt.block_on(async {
        let l = bind(
            &config.bind,
            config.port,
            DEFAULT_PORT,
            config.tcp_backlog,
            "clients",
        )
        .await?;
        let m = match config.metrics_bind.as_str() {
            "off" => None,
            "" => Some(bind("127.0.0.1", None, DEFAULT_METRICS_PORT, 128, "metrics").await?),
            addr => Some(TcpListener::bind(addr).await.map_err(|e| {
                ServerError(format!(
                    "cannot listen for metrics on {addr}: {e}; set metrics-bind to another host:port, or \"off\""
                ))
            })?),
        };
        Ok::<_, ServerError>((l, m))
    })?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServerError(format!("cannot read the listening address: {e}")))?;
    let metrics_addr = metrics.as_ref().and_then(|m| m.local_addr().ok());
    let layout = layout_of(&config);
    let store = Store::open(
        db,
        config.appendfsync,
        generation,
        config.engine.max_key_size,
        layout,
    )
    .map_err(|e| {
        ServerError(format!(
            "cannot read the keyspace in {}: {e}",
            config.dir.display()
        ))
    })?;
    // Bulk copy parts staged and never ingested: their copy starts over.
    crate::cluster::ingest::clear_staging(store.db.path());
    let read_threads = match config.read_threads {
        0 => 4 * cores,
        n => n,
    };
    let exec_status = Arc::new(crate::exec::ExecStatus::default());
    let exec = crate::exec::Exec::start(read_threads, exec_status.clone())
        .map_err(|e| ServerError(format!("cannot start the engine threads: {e}")))?;
    let exec = Arc::new(exec);
    let counters =
        crate::metrics::Metrics::new(crate::commands::table::COMMANDS.iter().map(|c| c.name));
    let mut state = State::new(
        store,
        exec_status,
        config,
        counters,
        addr.port(),
        opts.config_file.clone(),
    );
    state.offload = offload;
    let joined = match &state.config.cluster {
        None => None,
        Some(c) => {
            let settings = node_settings(c, &state.config.bind, addr.port(), &state.store)?;
            let node = Arc::new(crate::cluster::ClusterNode::new(
                settings.announce.clone(),
                &settings.name,
            ));
            let reg = rt
                .block_on(crate::cluster::join(&node, &settings))
                .map_err(|e| ServerError(format!("cannot join the cluster: {e}")))?;
            state.cluster = Some(node.clone());
            Some((node, reg, settings))
        }
    };
    let state = Arc::new(state);
    let weak = Arc::downgrade(&state);
    let _ = lookup.set(weak as std::sync::Weak<dyn crate::expiry::MetaLookup>);
    if let Some((node, reg, settings)) = joined {
        node.ingests.part_bytes.store(
            settings.migrate_part_bytes,
            std::sync::atomic::Ordering::Relaxed,
        );
        rt.spawn(crate::cluster::mover::drive(
            node.clone(),
            reg.clone(),
            state.clone(),
            exec.clone(),
            settings.migrate_rate,
            settings.ttl,
        ));
        rt.spawn(crate::cluster::run(
            node,
            reg,
            settings,
            state.shutdown_signal(),
        ));
    }

    let st = state.clone();
    let thread = std::thread::Builder::new()
        .name("tern-serve-main".into())
        .spawn(move || {
            rt.block_on(run(
                listener,
                metrics,
                st.clone(),
                exec.clone(),
                opts.handle_signals,
            ));
            // Connections are gone (or past the drain timeout): finish the
            // queued commands, then close the engine under them.
            exec.stop();
            let closed = st.store.db.close().map_err(|e| {
                ServerError(format!("closing the engine failed: {e}; the WAL still holds acknowledged writes, restart to recover them"))
            });
            rt.shutdown_timeout(Duration::from_secs(1));
            closed
        })
        .map_err(|e| ServerError(format!("cannot start the server thread: {e}")))?;
    Ok(ServerHandle {
        addr,
        metrics_addr,
        state,
        thread: Mutex::new(Some(thread)),
    })
}

/// Runs `tick` every `period` until the server shuts down.
fn every<F, Fut>(state: &Arc<State>, period: Duration, mut tick: F)
where
    F: FnMut(Arc<State>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let st = state.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(period);
        let mut shutdown = st.shutdown_signal();
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = shutdown.changed() => return,
            }
            tick(st.clone()).await;
        }
    });
}

async fn run(
    listener: TcpListener,
    metrics: Option<TcpListener>,
    state: Arc<State>,
    exec: Arc<crate::exec::Exec>,
    signals: bool,
) {
    if let Some(m) = metrics {
        tokio::spawn(crate::http::serve(m, state.clone()));
    }
    // INFO's instantaneous_ops_per_sec, sampled as Redis samples it.
    every(&state, Duration::from_millis(100), |st| {
        st.sample_ops();
        async {}
    });
    // Active expiry, ten times a second as Redis does it by default.
    let ex = exec.clone();
    every(&state, Duration::from_millis(100), move |st| {
        if st.active_expire.load(std::sync::atomic::Ordering::Relaxed) {
            ex.committer.expire(st);
        }
        async {}
    });
    if state.config.appendfsync == AppendFsync::Everysec {
        every(&state, Duration::from_secs(1), |st| async move {
            let r = tokio::task::spawn_blocking(move || st.store.sync_if_dirty()).await;
            if let Ok(Err(e)) = r {
                tracing::error!("tern serve: the once-a-second WAL sync failed: {e}");
            }
        });
    }
    if signals {
        let st = state.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            st.request_shutdown();
        });
    }
    let mut shutdown = state.shutdown_signal();
    loop {
        if state.shutting_down() {
            break;
        }
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => break,
        };
        let (sock, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: back off briefly.
                tracing::warn!("tern serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        state.metrics.connections_total.fetch_add(1, Relaxed);
        let _ = sock.set_nodelay(true);
        let id = state.next_id();
        let info = Arc::new(ClientInfo {
            id,
            addr: peer,
            laddr: sock.local_addr().unwrap_or(peer),
            created: Instant::now(),
            detail: Mutex::new(ClientDetail::default()),
        });
        {
            let mut clients = state.clients.lock();
            if clients.len() >= state.tunables.maxclients() {
                drop(clients);
                state.metrics.rejected_connections.fetch_add(1, Relaxed);
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    let mut sock = sock;
                    let _ = tokio::time::timeout(
                        Duration::from_secs(1),
                        sock.write_all(b"-ERR max number of clients reached\r\n"),
                    )
                    .await;
                });
                continue;
            }
            clients.insert(id, info.clone());
        }
        tokio::spawn(crate::connection::serve(
            sock,
            state.clone(),
            exec.clone(),
            info,
        ));
    }
    drop(listener);
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while state.connected() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of connects larger than tokio's default backlog (1,024) is
    /// queued by the kernel rather than dropped while the server is busy:
    /// dropped handshakes make clients retry for a second or more, and past
    /// the SYN queue the kernel falls back to SYN cookies.
    #[test]
    fn a_burst_of_connects_beyond_tokios_default_backlog_is_queued_not_dropped() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // The kernel caps every backlog at somaxconn (4,096 by default
        // since Linux 5.4); below the burst size this test shows nothing.
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if somaxconn < 1600 {
            eprintln!("net.core.somaxconn is {somaxconn}: skipping the 1,500-connect burst");
            return;
        }
        rt.block_on(async {
            let backlog = Config::default().tcp_backlog;
            let listener = bind("127.0.0.1", Some(0), DEFAULT_PORT, backlog, "clients")
                .await
                .unwrap();
            let addr = listener.local_addr().unwrap();
            // Nothing accepts: every connect must complete in the kernel's
            // accept queue.
            let mut pending = Vec::new();
            for _ in 0..1500 {
                pending.push(tokio::spawn(tokio::time::timeout(
                    Duration::from_secs(3),
                    tokio::net::TcpStream::connect(addr),
                )));
            }
            let mut held = Vec::new();
            for (i, p) in pending.into_iter().enumerate() {
                match p.await.unwrap() {
                    Ok(Ok(s)) => held.push(s),
                    Ok(Err(e)) => panic!("connect {i} failed: {e}"),
                    Err(_) => panic!("connect {i} was not queued within 3 s"),
                }
            }
            assert_eq!(held.len(), 1500);
            drop(listener);
        });
    }
}
