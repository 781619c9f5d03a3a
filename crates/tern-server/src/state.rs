//! State shared by every connection: the store, configuration, counters,
//! the client registry and the shutdown signal.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::config::Config;
use crate::exec::status::ExecStatus;
use crate::metrics::Metrics;
use crate::store::Store;

/// What `CLIENT LIST` shows about one connection.
#[derive(Debug)]
pub struct ClientInfo {
    /// Client id (`CLIENT ID`).
    pub id: u64,
    /// Peer address.
    pub addr: SocketAddr,
    /// Local address.
    pub laddr: SocketAddr,
    /// When the connection was accepted.
    pub created: Instant,
    /// Mutable details.
    pub detail: Mutex<ClientDetail>,
}

/// The changing part of [`ClientInfo`].
#[derive(Debug, Default)]
pub struct ClientDetail {
    /// `CLIENT SETNAME`.
    pub name: Vec<u8>,
    /// `CLIENT SETINFO LIB-NAME`.
    pub lib_name: Vec<u8>,
    /// `CLIENT SETINFO LIB-VER`.
    pub lib_ver: Vec<u8>,
    /// The last command run.
    pub last_cmd: &'static str,
    /// When the last command ran.
    pub last_active: Option<Instant>,
    /// Protocol version (2 or 3).
    pub resp: u8,
}

/// Shared server state.
#[derive(Debug)]
pub struct State {
    /// The engine, as the server sees it.
    pub store: Store,
    /// What the committer and the read pool (where commands that touch
    /// the engine run, see [`crate::exec`]) are doing.
    pub exec: Arc<ExecStatus>,
    /// The configuration in force.
    pub config: Config,
    /// Counters.
    pub metrics: Metrics,
    /// Open connections by id.
    pub clients: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    /// When the server started.
    pub started: Instant,
    /// The port clients connect to.
    pub port: u16,
    /// Path of the configuration file, if any (INFO).
    pub config_file: String,
    /// Longest accepted Redis key, bytes: the engine's limit less what its
    /// expiry index entry adds.
    pub max_key_len: usize,
    next_client_id: AtomicU64,
    /// Bytes buffered by all connections' request buffers.
    pub buffered: AtomicUsize,
    shutdown: watch::Sender<bool>,
    /// The executor running compactions and GC on workers, if offload is
    /// on (INFO reports its counters).
    pub offload: Option<Arc<tern_offload::RemoteExecutor>>,
    /// This node's cluster state, in cluster mode.
    pub cluster: Option<Arc<crate::cluster::ClusterNode>>,
    /// Active expiry runs (`DEBUG SET-ACTIVE-EXPIRE`).
    pub active_expire: std::sync::atomic::AtomicBool,
}

impl State {
    /// New state around `store`, counting commands in `metrics`.
    pub fn new(
        store: Store,
        exec: Arc<ExecStatus>,
        config: Config,
        metrics: Metrics,
        port: u16,
        config_file: String,
    ) -> Self {
        State {
            store,
            exec,
            max_key_len: config
                .engine
                .max_key_size
                .saturating_sub(crate::keyspace::KEY_OVERHEAD),
            config,
            metrics,
            clients: Mutex::new(BTreeMap::new()),
            started: Instant::now(),
            port,
            config_file,
            next_client_id: AtomicU64::new(1),
            buffered: AtomicUsize::new(0),
            active_expire: std::sync::atomic::AtomicBool::new(true),
            offload: None,
            cluster: None,
            shutdown: watch::channel(false).0,
        }
    }

    /// A fresh client id.
    pub fn next_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Open connections.
    pub fn connected(&self) -> usize {
        self.clients.lock().len()
    }

    /// Asks the server to shut down (SIGTERM, SHUTDOWN).
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Whether a shutdown was requested.
    pub fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// A receiver that changes when shutdown is requested.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}

impl crate::expiry::MetaLookup for State {
    fn live_version(&self, meta_key: &[u8]) -> Option<Option<u64>> {
        let raw = self.store.db.get(meta_key).ok()?;
        let now = crate::expiry::now_ms();
        let Some(e) = raw.map(|r| crate::keyspace::live_entry(r, now)) else {
            return Some(None);
        };
        match e {
            Ok(Some(e)) if e.kind.is_composite() => {
                let c = crate::members::Composite::decode(e.kind, &e.value).ok()?;
                Some(Some(c.version))
            }
            Ok(_) => Some(None),
            // Unreadable: keep the members, the error surfaces elsewhere.
            Err(_) => None,
        }
    }
}
