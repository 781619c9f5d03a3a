//! Cluster mode: Redis Cluster's 16384 hash slots spread over `tern serve`
//! nodes, with the topology in etcd (`docs/cluster.md`).
//!
//! - [`slot`]: the key → slot hash clients use too;
//! - [`topology`]: the versioned document that says who owns which slot;
//! - [`view`]: the routing a node does with one version of it;
//! - [`etcd`]: the document, node registrations and acknowledgements in
//!   etcd;
//! - [`migrate`], [`mover`]: moving slots between nodes.
//!
//! The commands (`CLUSTER …`, the internal `TERN.*` ones) are in
//! `crate::commands::cluster` and `crate::commands::migrate`; routing a
//! request batch with a view is `crate::routing`.
//!
//! A [`ClusterNode`] keeps the node's current view, installs new ones as
//! the watch on etcd delivers them, and acknowledges each only once no
//! request batch still routes with an older one.

pub mod etcd;
pub mod fuzz;
pub mod hot;
pub mod ingest;
pub mod migrate;
pub mod mover;
pub mod slot;
pub mod topology;
pub mod view;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};
use parking_lot::{Mutex, RwLock};

use self::etcd::{ClusterError, Registry};
use self::topology::{NodeInfo, Topology};
use self::view::View;

/// The `[cluster]` settings a node runs with.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// etcd endpoints (comma-separated URLs).
    pub etcd: String,
    /// Cluster name.
    pub name: String,
    /// What clients are told to connect to.
    pub announce: NodeInfo,
    /// How long the node's registration outlives it.
    pub ttl: Duration,
    /// Bytes per second a migration's background copy may read from its
    /// source (0: unbounded).
    pub migrate_rate: u64,
    /// Bytes of string values per bulk copy part.
    pub migrate_part_bytes: u64,
}

/// What this node did for migrations (`CLUSTER INFO`).
#[derive(Debug, Default)]
pub struct MigrationCounters {
    /// Keys pulled on demand from a previous owner.
    pub pulled_keys: std::sync::atomic::AtomicU64,
    /// Hot records received with ownership changes.
    pub hot_records_received: std::sync::atomic::AtomicU64,
    /// Hot records sent to new owners.
    pub hot_records_sent: std::sync::atomic::AtomicU64,
}

/// This node's cluster state.
#[derive(Debug)]
pub struct ClusterNode {
    /// Id, host and port as other nodes and clients see them.
    pub info: NodeInfo,
    /// The cluster's name.
    pub name: String,
    view: RwLock<Arc<View>>,
    /// Ids of the nodes registered in etcd (alive).
    live: Mutex<BTreeSet<String>>,
    /// Whether the node is in touch with etcd.
    connected: std::sync::atomic::AtomicBool,
    /// Connections to other nodes, by address, for pulls.
    peers: Mutex<std::collections::HashMap<String, migrate::Peer>>,
    /// Raised on every installed view.
    versions: tokio::sync::watch::Sender<u64>,
    /// The keys served most (shipped to a slot's next owner).
    pub hot: hot::HotKeys,
    /// Migration counters (`CLUSTER INFO`).
    pub counters: MigrationCounters,
    /// Bulk copies as files in flight, and the slots they hold.
    pub ingests: ingest::Ingests,
    /// Held by [`ClusterNode::install`].
    installing: Mutex<()>,
    /// Views replaced and not yet known to be out of use.
    retired: Mutex<Vec<std::sync::Weak<View>>>,
    /// Fencing: until when (ms after `epoch`) this node's registration is
    /// known to hold; past it the node may have been deposed (its slots
    /// handed over) and serves no keys.
    fresh_until: std::sync::atomic::AtomicU64,
    /// Whether the node re-read the topology (and drained every batch
    /// routed before) since its registration last lapsed.
    synced: std::sync::atomic::AtomicBool,
    /// The lease the node's registration is attached to.
    lease: std::sync::atomic::AtomicI64,
    epoch: std::time::Instant,
}

impl ClusterNode {
    /// A node that knows no topology yet.
    pub fn new(info: NodeInfo, name: &str) -> ClusterNode {
        ClusterNode {
            view: RwLock::new(Arc::new(View::new(&info.id, None))),
            info,
            name: name.to_string(),
            live: Mutex::new(BTreeSet::new()),
            connected: std::sync::atomic::AtomicBool::new(false),
            peers: Mutex::new(Default::default()),
            versions: tokio::sync::watch::channel(0).0,
            hot: hot::HotKeys::default(),
            counters: MigrationCounters::default(),
            ingests: ingest::Ingests::default(),
            installing: Mutex::new(()),
            retired: Mutex::new(Vec::new()),
            fresh_until: std::sync::atomic::AtomicU64::new(0),
            synced: std::sync::atomic::AtomicBool::new(false),
            lease: std::sync::atomic::AtomicI64::new(0),
            epoch: std::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Whether the node may serve keys: its registration in etcd is known
    /// to hold, and it has caught up with the topology since it last
    /// lapsed. A node cut off from etcd (or frozen) longer than its lease
    /// stops serving before another node can take its slots over (which
    /// waits a further lease after the registration disappears).
    pub fn lease_fresh(&self) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        self.synced.load(Acquire) && self.now_ms() < self.fresh_until.load(Acquire)
    }

    /// Records a renewal of the registration requested at `sent_ms` (a
    /// lease of `ttl`), counted from when it was sent, less a margin.
    fn renewed(&self, sent_ms: u64, ttl: Duration) {
        let ttl = ttl.as_millis() as u64;
        self.fresh_until.fetch_max(
            sent_ms + ttl - ttl / 10,
            std::sync::atomic::Ordering::AcqRel,
        );
    }

    /// The refusal for keyed requests while [`ClusterNode::lease_fresh`]
    /// is false.
    pub fn fenced_reply() -> crate::resp::Reply {
        crate::resp::Reply::Error(
            "CLUSTERDOWN The node is cut off from the cluster's metadata (etcd); retry".into(),
        )
    }

    /// A connection to node `addr` (one per node, shared: it pipelines).
    pub async fn peer(&self, addr: &str, password: &str) -> Result<migrate::Peer, String> {
        if let Some(p) = self.peers.lock().get(addr).filter(|p| !p.is_broken()) {
            return Ok(p.clone());
        }
        let p = migrate::Peer::connect(addr, password).await?;
        self.peers.lock().insert(addr.to_string(), p.clone());
        Ok(p)
    }

    /// Waits until a view newer than `version` is installed, for at most
    /// `timeout`.
    pub async fn changed_since(&self, version: u64, timeout: Duration) {
        let mut rx = self.versions.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|&v| v > version)).await;
    }

    /// The current view. A request batch holds it while it runs, which
    /// [`ClusterNode::install`] waits out.
    pub fn view(&self) -> Arc<View> {
        self.view.read().clone()
    }

    /// Routes with `topology` from now on, and returns once no request
    /// batch routes with an older view: from then on this node serves
    /// nothing the new topology took from it. Blocking.
    /// Returns the version now routed with (never older than before).
    pub fn install(&self, topology: Option<Topology>) -> u64 {
        // One install at a time, each waiting out every view retired
        // before it: a second install cannot acknowledge past batches
        // the first is still waiting for.
        let _one = self.installing.lock();
        let next = Arc::new(View::new(&self.info.id, topology));
        {
            let mut v = self.view.write();
            // A late document is never routed with, but the wait below
            // still runs (a re-sync relies on it).
            if next.version() >= v.version() {
                let old = std::mem::replace(&mut *v, next);
                self.retired.lock().push(Arc::downgrade(&old));
            }
        }
        let version = self.view.read().version();
        self.versions.send_replace(version);
        // Batches clone the view and drop it when they finish.
        loop {
            let mut retired = self.retired.lock();
            retired.retain(|w| w.strong_count() > 0);
            if retired.is_empty() {
                return version;
            }
            drop(retired);
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether node `id` is registered in etcd (as far as this node knows).
    pub fn alive(&self, id: &str) -> bool {
        id == self.info.id || self.live.lock().contains(id)
    }

    /// Whether the node is in touch with etcd.
    pub fn connected(&self) -> bool {
        self.connected.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Connects node `node` to etcd: registers it, reads the topology (and
/// corrects this node's address in it if it moved), and installs it.
/// Returns the registry for [`run`].
pub async fn join(node: &Arc<ClusterNode>, s: &NodeSettings) -> Result<Registry, ClusterError> {
    let mut reg = Registry::connect(&s.etcd, &s.name).await?;
    let sent = node.now_ms();
    let lease = reg.register(&node.info, s.ttl).await?;
    node.lease
        .store(lease, std::sync::atomic::Ordering::Release);
    node.renewed(sent, s.ttl);
    let mut stored = reg.topology().await?;
    let moved = stored
        .topology
        .as_ref()
        .and_then(|t| t.node(&node.info.id))
        .is_some_and(|n| n.host != node.info.host || n.port != node.info.port);
    if moved {
        let me = node.info.clone();
        reg.update(|t| {
            let mut t = t
                .cloned()
                .ok_or_else(|| ClusterError("topology vanished".into()))?;
            if let Some(n) = t.nodes.iter_mut().find(|n| n.id == me.id) {
                n.host = me.host.clone();
                n.port = me.port;
            }
            Ok(t)
        })
        .await?;
        stored = reg.topology().await?;
    }
    *node.live.lock() = reg.live_nodes().await?.into_keys().collect();
    apply(node, &mut reg, stored.topology).await?;
    node.connected
        .store(true, std::sync::atomic::Ordering::Relaxed);
    node.synced
        .store(true, std::sync::atomic::Ordering::Release);
    Ok(reg)
}

/// Renews node `node`'s registration (lease `lease`) until it lapses.
async fn keep_registered(
    node: &ClusterNode,
    reg: &Registry,
    lease: i64,
    ttl: Duration,
) -> Result<(), ClusterError> {
    let fail = |e: etcd_client::Error| ClusterError(format!("etcd: {e}"));
    let mut client = reg.client();
    let (mut keeper, mut stream) = client.lease_keep_alive(lease).await.map_err(fail)?;
    let every = (ttl / 4).max(Duration::from_millis(100));
    loop {
        let sent = node.now_ms();
        keeper.keep_alive().await.map_err(fail)?;
        let answer = tokio::time::timeout(ttl, stream.message())
            .await
            .map_err(|_| ClusterError("etcd did not answer a lease renewal".into()))?;
        match answer.map_err(fail)? {
            Some(r) if r.ttl() > 0 => node.renewed(sent, ttl),
            _ => return Err(ClusterError("the node's etcd lease expired".into())),
        }
        tokio::time::sleep(every).await;
    }
}

/// Keeps node `node` registered and its view current until `shutdown`
/// turns true: renews the registration (registering again after etcd comes
/// back), and watches the cluster's keys, installing and acknowledging
/// every new topology.
pub async fn run(
    node: Arc<ClusterNode>,
    reg: Registry,
    s: NodeSettings,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let keeper = {
        let node = node.clone();
        let mut reg = reg.clone();
        let s = s.clone();
        async move {
            use std::sync::atomic::Ordering::{Acquire, Release};
            let mut lease = node.lease.load(Acquire);
            loop {
                if let Err(e) = keep_registered(&node, &reg, lease, s.ttl).await {
                    tracing::warn!("tern serve: etcd registration lapsed: {e}");
                }
                // Serve no keys again until registered anew and caught up
                // with the topology: the slots may have moved meanwhile.
                node.synced.store(false, Release);
                loop {
                    let sent = node.now_ms();
                    match reg.register(&node.info, s.ttl).await {
                        Ok(l) => {
                            lease = l;
                            node.lease.store(l, Release);
                            node.renewed(sent, s.ttl);
                            break;
                        }
                        Err(e) => tracing::warn!("tern serve: cannot register in etcd: {e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                // Caught up in the background, while the new lease is
                // renewed: installing waits out every batch routed with an
                // older view, which may take longer than a lease.
                let (n, mut r, epoch) = (node.clone(), reg.clone(), lease);
                tokio::spawn(async move {
                    loop {
                        let synced = async {
                            let t = r.topology().await?.topology;
                            apply(&n, &mut r, t).await
                        };
                        match synced.await {
                            // Only for the lease it was started for.
                            Ok(()) if n.lease.load(Acquire) == epoch => {
                                n.synced.store(true, Release);
                                tracing::info!("tern serve: registered in etcd again");
                                return;
                            }
                            Ok(()) => return,
                            Err(e) => {
                                tracing::warn!("tern serve: catching up with the topology: {e}")
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                });
            }
        }
    };
    let watcher = watch(node, reg);
    tokio::select! {
        _ = keeper => {}
        _ = watcher => {}
        _ = shutdown.changed() => {}
    }
}

/// Follows the cluster's keys in etcd, from a fresh read after each
/// failure.
async fn watch(node: Arc<ClusterNode>, mut reg: Registry) {
    loop {
        if let Err(e) = watch_once(&node, &mut reg).await {
            node.connected
                .store(false, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!("tern serve: lost the watch on the cluster topology: {e}");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Installs `t` (waiting out every batch routed with an older view) and
/// acknowledges the version then routed with.
async fn apply(
    node: &Arc<ClusterNode>,
    reg: &mut Registry,
    t: Option<Topology>,
) -> Result<(), ClusterError> {
    let n = node.clone();
    let version = tokio::task::spawn_blocking(move || n.install(t))
        .await
        .map_err(|e| ClusterError(format!("installing the topology failed: {e}")))?;
    if version > 0 {
        reg.ack(&node.info.id, version).await?;
    }
    Ok(())
}

async fn watch_once(node: &Arc<ClusterNode>, reg: &mut Registry) -> Result<(), ClusterError> {
    let fail = |e: etcd_client::Error| ClusterError(format!("etcd: {e}"));
    let stored = reg.topology().await?;
    *node.live.lock() = reg.live_nodes().await?.into_keys().collect();
    if stored.topology.as_ref().map(|t| t.version) != Some(node.view().version())
        && stored.topology.is_some()
    {
        apply(node, reg, stored.topology).await?;
    }
    let mut stream = reg
        .client()
        .watch(
            reg.prefix(),
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(stored.revision + 1),
            ),
        )
        .await
        .map_err(fail)?;
    node.connected
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let topology_key = reg.topology_key();
    while let Some(resp) = stream.message().await.map_err(fail)? {
        if resp.canceled() {
            return Err(ClusterError(format!(
                "the watch was cancelled: {}",
                resp.cancel_reason()
            )));
        }
        let mut latest = None;
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let Ok(key) = kv.key_str() else { continue };
            if key == topology_key {
                if ev.event_type() == EventType::Put {
                    match Topology::decode(kv.value()) {
                        Ok(t) => latest = Some(t),
                        Err(e) => tracing::error!(
                            "tern serve: ignoring an unreadable topology document: {e}"
                        ),
                    }
                }
            } else if let Some(id) = reg.node_of_key(key) {
                let mut live = node.live.lock();
                match ev.event_type() {
                    EventType::Put => live.insert(id.to_string()),
                    EventType::Delete => live.remove(id),
                };
            }
        }
        if let Some(t) = latest {
            apply(node, reg, Some(t)).await?;
        }
    }
    Err(ClusterError("the watch stream ended".into()))
}

#[cfg(test)]
mod tests {
    use super::topology::test_node;
    use super::*;

    fn topology(version: u64) -> Topology {
        let mut t = Topology::create((0..2).map(test_node).collect()).unwrap();
        t.version = version;
        t
    }

    /// An install returns only once no batch holds an older view, however
    /// many installs overlap, and the node never routes with an older
    /// document than it has.
    #[test]
    fn installs_wait_out_every_older_view_and_never_go_back() {
        let node = Arc::new(ClusterNode::new(test_node(0), "t"));
        assert_eq!(node.install(Some(topology(1))), 1);
        // A batch routed with version 1, still running.
        let batch = node.view();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        for v in [3, 2] {
            let (n, tx) = (node.clone(), tx.clone());
            threads.push(std::thread::spawn(move || {
                let routed = n.install(Some(topology(v)));
                tx.send((v, routed)).unwrap();
            }));
            // Version 3 first, whenever its thread gets a core: the late
            // version 2 starts only once 3 is in (a fixed sleep lost that
            // race on a loaded machine).
            if v == 3 {
                let since = std::time::Instant::now();
                while node.view().version() != 3 {
                    assert!(
                        since.elapsed() < Duration::from_secs(10),
                        "version 3 never went in"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        // Neither install may return while the batch holds version 1.
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        assert_eq!(node.view().version(), 3, "the newer document wins");
        drop(batch);
        let mut done: Vec<(u64, u64)> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        done.sort_unstable();
        // The late version 2 changed nothing: both report version 3.
        assert_eq!(done, vec![(2, 3), (3, 3)]);
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(node.view().version(), 3);
    }

    #[test]
    fn a_fresh_node_is_fenced_until_it_has_synced_and_renewed() {
        let node = ClusterNode::new(test_node(0), "t");
        assert!(!node.lease_fresh());
        node.renewed(node.now_ms(), Duration::from_secs(5));
        assert!(!node.lease_fresh(), "renewed but not caught up");
        node.synced
            .store(true, std::sync::atomic::Ordering::Release);
        assert!(node.lease_fresh());
        // A renewal sent long ago no longer counts.
        let stale = ClusterNode::new(test_node(1), "t");
        stale
            .synced
            .store(true, std::sync::atomic::Ordering::Release);
        stale.renewed(0, Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!stale.lease_fresh());
    }
}
