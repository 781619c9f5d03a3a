//! `tern serve --engine hash`: the string commands on the hash engine
//! (`crates/tern-hash`).
//!
//! Connections are tokio tasks that parse requests and answer connection
//! commands (`PING`, `HELLO`, `AUTH`, `INFO`, `CONFIG GET`, …) themselves;
//! each run of engine commands in a pipeline goes to the engine threads as
//! one job ([`engine`]), and the connection waits for its replies before the
//! next run, so its commands take effect in the order sent. Durability
//! follows `appendfsync`: `always` answers a write once a checkpoint covers
//! it, `everysec` checkpoints every second, `no` every thirty seconds.
//! What differs from the LSM server is in `docs/server.md`.

pub mod commands;
mod conn;
pub mod engine;
pub mod value;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tern_hash::{HashOptions, HashStore};
use tokio::sync::watch;

use crate::config::{AppendFsync, Config, HashConfig, DEFAULT_PORT};
use crate::server::{bind, ServerError, StartOptions};
use engine::Engine;

/// What every connection of a hash-engine server shares.
pub struct Shared {
    /// The store.
    pub store: Arc<HashStore>,
    engine: Engine,
    /// The configuration in force.
    pub config: Config,
    started: Instant,
    port: u16,
    connected: AtomicU64,
    connections: AtomicU64,
    commands: AtomicU64,
    next_id: AtomicU64,
    shutdown: watch::Sender<bool>,
    stopping: AtomicBool,
}

impl Shared {
    fn request_shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.shutdown.send(true);
    }
}

/// A running hash-engine server.
pub struct HashServerHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<Result<(), ServerError>>>>,
}

impl std::fmt::Debug for HashServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashServerHandle")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl HashServerHandle {
    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The store under the server.
    pub fn store(&self) -> &Arc<HashStore> {
        &self.shared.store
    }

    /// Stops the server: closes the listener and connections and takes a
    /// last checkpoint.
    pub fn shutdown(&self) -> Result<(), ServerError> {
        self.shared.request_shutdown();
        self.wait()
    }

    /// Waits until the server stops (SHUTDOWN, a signal, or
    /// [`Self::shutdown`]).
    pub fn wait(&self) -> Result<(), ServerError> {
        let Some(t) = self.thread.lock().take() else {
            return Ok(());
        };
        t.join()
            .map_err(|_| ServerError("the server thread panicked".into()))?
    }
}

impl Drop for HashServerHandle {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// The hash engine's options from the `[hash]` table and `appendfsync`.
pub fn hash_options(h: &HashConfig, fsync: AppendFsync) -> Result<HashOptions, ServerError> {
    let size = |what: &str, v: &str| {
        <u64 as tern::SettingValue>::parse_setting(v)
            .map_err(|why| ServerError(format!("[hash] {what} = {v:?}: {why}")))
    };
    let page = 1u64 << h.page_bits.min(40);
    let pages = (size("memory", &h.memory)? / page).max(2);
    if !(0.0..=1.0).contains(&h.mutable_fraction) {
        return Err(ServerError(format!(
            "[hash] mutable-fraction = {}: give a number from 0 to 1",
            h.mutable_fraction
        )));
    }
    let memory_pages =
        u32::try_from(pages).map_err(|_| ServerError("[hash] memory is too large".into()))?;
    let o = HashOptions {
        page_bits: h.page_bits,
        memory_pages,
        mutable_pages: ((pages as f64 * h.mutable_fraction) as u32)
            .clamp(1, memory_pages.saturating_sub(1).max(1)),
        segment_bits: h.segment_bits,
        index_bits: h.index_bits,
        checkpoint_interval: Some(match fsync {
            AppendFsync::No => Duration::from_secs(30),
            _ => Duration::from_secs(1),
        }),
        log_size_limit: match h.log_size_limit.as_str() {
            "off" | "" => None,
            v => Some(size("log-size-limit", v)?),
        },
    };
    o.validate()
        .map_err(|e| ServerError(format!("[hash]: {e}")))?;
    Ok(o)
}

/// Opens the hash store in `config.dir`, binds the listener and serves in
/// the background; returns once clients can connect.
pub fn start(config: Config, opts: StartOptions) -> Result<HashServerHandle, ServerError> {
    let options = hash_options(&config.hash, config.appendfsync)?;
    let store = match &opts.fs {
        Some(fs) => HashStore::open_with_fs(fs.clone(), &config.dir, options),
        None => HashStore::open(&config.dir, options),
    }
    .map_err(|e| {
        ServerError(format!(
            "cannot open the hash store in {}: {e}; check that it is writable and that no other server uses it",
            config.dir.display()
        ))
    })?;
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let engine_threads = match config.hash.engine_threads {
        0 => cores * 2,
        n => n,
    };
    let engine = Engine::start(
        &store,
        engine_threads,
        config.appendfsync == AppendFsync::Always,
    )
    .map_err(|e| ServerError(format!("cannot start the engine threads: {e}")))?;
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
    let listener = rt.block_on(bind(
        &config.bind,
        config.port,
        DEFAULT_PORT,
        config.tcp_backlog,
        "clients",
    ))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ServerError(format!("cannot read the listening address: {e}")))?;
    let (shutdown, _) = watch::channel(false);
    let shared = Arc::new(Shared {
        store,
        engine,
        config,
        started: Instant::now(),
        port: addr.port(),
        connected: AtomicU64::new(0),
        connections: AtomicU64::new(0),
        commands: AtomicU64::new(0),
        next_id: AtomicU64::new(1),
        shutdown,
        stopping: AtomicBool::new(false),
    });
    let sh = shared.clone();
    let signals = opts.handle_signals;
    let thread = std::thread::Builder::new()
        .name("tern-serve-main".into())
        .spawn(move || {
            rt.block_on(accept(listener, sh.clone(), signals));
            rt.shutdown_timeout(Duration::from_secs(1));
            sh.store
                .checkpoint()
                .map(|_| ())
                .map_err(|e| ServerError(format!("the last checkpoint failed: {e}")))
        })
        .map_err(|e| ServerError(format!("cannot start the server thread: {e}")))?;
    Ok(HashServerHandle {
        addr,
        shared,
        thread: Mutex::new(Some(thread)),
    })
}

async fn accept(listener: tokio::net::TcpListener, shared: Arc<Shared>, signals: bool) {
    if signals {
        let sh = shared.clone();
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
            sh.request_shutdown();
        });
    }
    let mut stop = shared.shutdown.subscribe();
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => return,
        };
        let sock = match accepted {
            Ok((sock, _)) => sock,
            Err(e) => {
                tracing::warn!("tern serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        if shared.connected.load(Ordering::Relaxed) >= shared.config.maxclients as u64 {
            let mut sock = sock;
            let _ = tokio::io::AsyncWriteExt::write_all(
                &mut sock,
                b"-ERR max number of clients reached\r\n",
            )
            .await;
            continue;
        }
        let _ = sock.set_nodelay(true);
        shared.connected.fetch_add(1, Ordering::Relaxed);
        shared.connections.fetch_add(1, Ordering::Relaxed);
        let sh = shared.clone();
        tokio::spawn(async move {
            conn::serve(sock, &sh).await;
            sh.connected.fetch_sub(1, Ordering::Relaxed);
        });
    }
}
