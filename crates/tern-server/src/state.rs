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
    /// Bytes held by all connections' request buffers and the arguments
    /// of requests still arriving.
    pub buffered: AtomicUsize,
    shutdown: watch::Sender<bool>,
    /// The executor running compactions and GC on workers, if offload is
    /// on (INFO reports its counters).
    pub offload: Option<Arc<tern_offload::RemoteExecutor>>,
    /// This node's cluster state, in cluster mode.
    pub cluster: Option<Arc<crate::cluster::ClusterNode>>,
    /// Active expiry runs (`DEBUG SET-ACTIVE-EXPIRE`).
    pub active_expire: std::sync::atomic::AtomicBool,
    /// Settings `CONFIG SET` changes.
    pub tunables: crate::tunables::Tunables,
    /// Commands processed, sampled ten times a second (INFO's
    /// `instantaneous_ops_per_sec`).
    pub ops_samples: Mutex<std::collections::VecDeque<(Instant, u64)>>,
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
        let tunables = crate::tunables::Tunables::new(config.maxclients, &config.requirepass);
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
            tunables,
            ops_samples: Mutex::new(std::collections::VecDeque::new()),
            offload: None,
            cluster: None,
            shutdown: watch::channel(false).0,
        }
    }

    /// The encoding thresholds `OBJECT ENCODING` applies.
    pub fn encoding_limits(&self) -> crate::tunables::EncodingLimits {
        self.tunables.encoding_limits()
    }

    /// Records the number of commands processed so far (ten times a
    /// second), keeping the last 16 samples.
    pub fn sample_ops(&self) {
        let total = self.metrics.total_commands();
        let mut s = self.ops_samples.lock();
        s.push_back((Instant::now(), total));
        if s.len() > 16 {
            s.pop_front();
        }
    }

    /// Commands per second over the last samples.
    pub fn instantaneous_ops(&self) -> u64 {
        let s = self.ops_samples.lock();
        match (s.front(), s.back()) {
            (Some(a), Some(b)) if b.0 > a.0 => {
                let dt = b.0.duration_since(a.0).as_secs_f64();
                ((b.1 - a.1) as f64 / dt).round() as u64
            }
            _ => 0,
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
    fn live_version(&self, meta_key: &[u8]) -> Option<crate::expiry::Liveness> {
        // The counter first: a value that got a version below it had
        // committed its metadata record by then (they commit together), so
        // the record read next reflects it.
        let counter = self.store.db.get(crate::keyspace::META_KEY).ok()??;
        let mut next = crate::keyspace::Meta::decode(&counter).ok()?.next_version;
        // Versions reserved for a bulk copy part on its way are handed out
        // but their values not yet committed.
        if let Some(floor) = self
            .cluster
            .as_ref()
            .and_then(|c| c.ingests.version_floor())
        {
            next = next.min(floor);
        }
        let raw = self.store.db.get(meta_key).ok()?;
        // An expired value still owns its members until the committer
        // deletes it: a PERSIST or EXPIRE decided just before the expiry
        // may be on its way to the engine and keep it. Only a record that
        // is gone, or holds another value, frees them.
        let live = match raw {
            None => None,
            Some(r) => {
                let h = crate::keyspace::decode_header(&r, false).ok()??;
                if !h.kind.is_composite() {
                    None
                } else if h.dropped {
                    // Its version went with its payload: keep the members.
                    return None;
                } else {
                    let e = crate::keyspace::decode_value(r).ok()?;
                    Some(
                        crate::members::Composite::decode(e.kind, &e.value)
                            .ok()?
                            .version,
                    )
                }
            }
        };
        Some(crate::expiry::Liveness { live, next })
    }
}
