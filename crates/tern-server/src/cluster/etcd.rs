//! The cluster's metadata in etcd, under `/tern/clusters/<name>/`:
//!
//! - `topology`: the [`Topology`] document, changed only by
//!   compare-and-set on its revision ([`Registry::update`]);
//! - `nodes/<id>`: one record per running node ([`NodeInfo`] as JSON),
//!   attached to a lease the node keeps alive, so it disappears when the
//!   node dies or is cut off;
//! - `acks/<id>`: the topology version the node routes with, written
//!   only once it has stopped serving what that version took away.
//!
//! Used by `tern serve --cluster` and by `tern cluster`.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};

use super::topology::{NodeInfo, Topology, TopologyError};

/// Times a compare-and-set is retried when others keep changing the
/// document.
const CAS_ATTEMPTS: usize = 64;

/// A cluster operation that failed, with what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterError(pub String);

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClusterError {}

impl From<TopologyError> for ClusterError {
    fn from(e: TopologyError) -> Self {
        ClusterError(e.0)
    }
}

fn etcd(e: etcd_client::Error) -> ClusterError {
    ClusterError(format!(
        "etcd: {e}; check that etcd runs and that --etcd names its client URL"
    ))
}

/// The etcd key prefix of cluster `name`.
pub fn prefix_for(name: &str) -> String {
    format!("/tern/clusters/{name}")
}

/// Progress of a migration's background copy, as stored in etcd.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// Slots copied completely.
    pub slots_done: usize,
    /// Slots to copy.
    pub slots: usize,
    /// Records imported (not overwritten here before they arrived).
    pub keys: u64,
    /// Bytes of keys and values received.
    pub bytes: u64,
}

/// A connection to one cluster's metadata.
#[derive(Clone)]
pub struct Registry {
    client: Client,
    prefix: String,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The topology as stored, with the revision a compare-and-set compares.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The document, if the cluster was created.
    pub topology: Option<Topology>,
    /// Its etcd modification revision (0: absent).
    pub mod_revision: i64,
    /// etcd's revision when it was read (a watch resumes after it).
    pub revision: i64,
}

impl Registry {
    /// Connects to etcd at `endpoints` (comma-separated URLs) for the
    /// cluster named `name`.
    pub async fn connect(endpoints: &str, name: &str) -> Result<Registry, ClusterError> {
        let eps: Vec<String> = endpoints
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if eps.is_empty() {
            return Err(ClusterError(
                "no etcd endpoint given; pass --etcd http://host:2379".into(),
            ));
        }
        if name.is_empty() || name.contains('/') {
            return Err(ClusterError(format!(
                "cluster name {name:?} must be non-empty and without '/'"
            )));
        }
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        let client = Client::connect(eps, Some(opts)).await.map_err(etcd)?;
        Ok(Registry {
            client,
            prefix: prefix_for(name),
        })
    }

    /// The key prefix of this cluster (with a trailing `/`).
    pub fn prefix(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// The topology document's key.
    pub fn topology_key(&self) -> String {
        format!("{}/topology", self.prefix)
    }

    fn node_key(&self, id: &str) -> String {
        format!("{}/nodes/{id}", self.prefix)
    }

    fn ack_key(&self, id: &str) -> String {
        format!("{}/acks/{id}", self.prefix)
    }

    /// The node id a key under `nodes/` names.
    pub fn node_of_key<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(&self.prefix)?.strip_prefix("/nodes/")
    }

    /// A client for watches.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Reads the topology.
    pub async fn topology(&mut self) -> Result<Stored, ClusterError> {
        let r = self
            .client
            .get(self.topology_key(), None)
            .await
            .map_err(etcd)?;
        let revision = r.header().map_or(0, |h| h.revision());
        match r.kvs().first() {
            None => Ok(Stored {
                topology: None,
                mod_revision: 0,
                revision,
            }),
            Some(kv) => Ok(Stored {
                topology: Some(Topology::decode(kv.value())?),
                mod_revision: kv.mod_revision(),
                revision,
            }),
        }
    }

    /// Changes the topology: `change` gets the current document and
    /// returns the next one, which is stored with its version raised by
    /// one only if nobody changed the document in between (retried
    /// otherwise). Returns what was stored.
    pub async fn update(
        &mut self,
        mut change: impl FnMut(Option<&Topology>) -> Result<Topology, ClusterError>,
    ) -> Result<Topology, ClusterError> {
        for _ in 0..CAS_ATTEMPTS {
            let cur = self.topology().await?;
            let mut next = change(cur.topology.as_ref())?;
            next.version = cur.topology.as_ref().map_or(1, |t| t.version + 1);
            next.validate()?;
            let key = self.topology_key();
            let cmp = if cur.mod_revision == 0 {
                Compare::create_revision(key.clone(), CompareOp::Equal, 0)
            } else {
                Compare::mod_revision(key.clone(), CompareOp::Equal, cur.mod_revision)
            };
            let txn = Txn::new()
                .when([cmp])
                .and_then([TxnOp::put(key, next.encode(), None)]);
            if self.client.txn(txn).await.map_err(etcd)?.succeeded() {
                return Ok(next);
            }
        }
        Err(ClusterError(
            "the topology kept changing under this update; try again".into(),
        ))
    }

    /// Grants a lease of `ttl` and records node `info` under it; returns
    /// the lease id.
    pub async fn register(&mut self, info: &NodeInfo, ttl: Duration) -> Result<i64, ClusterError> {
        let lease = self
            .client
            .lease_grant(ttl.as_secs().max(1) as i64, None)
            .await
            .map_err(etcd)?
            .id();
        let value = serde_json::to_vec(info).unwrap_or_default();
        self.client
            .put(
                self.node_key(&info.id),
                value,
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map_err(etcd)?;
        Ok(lease)
    }

    /// Every record under `<prefix>/<dir>/`: the rest of its key, its
    /// value.
    async fn list(&mut self, dir: &str) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
        let prefix = format!("{}/{dir}/", self.prefix);
        let r = self
            .client
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await
            .map_err(etcd)?;
        Ok(r.kvs()
            .iter()
            .filter_map(|kv| {
                let rest = kv.key_str().ok()?.strip_prefix(&prefix)?;
                Some((rest.to_string(), kv.value().to_vec()))
            })
            .collect())
    }

    /// The nodes registered and alive, by id.
    pub async fn live_nodes(&mut self) -> Result<BTreeMap<String, NodeInfo>, ClusterError> {
        Ok(self
            .list("nodes")
            .await?
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_slice::<NodeInfo>(&v).ok())
            .map(|info| (info.id.clone(), info))
            .collect())
    }

    /// Records that node `id` routes with topology version `version`.
    /// Acknowledgements only rise: concurrent writers cannot move one back.
    /// Stored as 20 zero-padded digits, so etcd compares them as numbers.
    pub async fn ack(&mut self, id: &str, version: u64) -> Result<(), ClusterError> {
        let key = self.ack_key(id);
        let value = format!("{version:020}");
        let raise = Txn::new()
            .when([Compare::value(key.clone(), CompareOp::Less, value.clone())])
            .and_then([TxnOp::put(key.clone(), value.clone(), None)]);
        if self.client.txn(raise).await.map_err(etcd)?.succeeded() {
            return Ok(());
        }
        let first = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value, None)]);
        self.client.txn(first).await.map_err(etcd)?;
        Ok(())
    }

    /// The topology version each node last acknowledged, by id.
    pub async fn acks(&mut self) -> Result<BTreeMap<String, u64>, ClusterError> {
        Ok(self
            .list("acks")
            .await?
            .into_iter()
            .filter_map(|(id, v)| Some((id, std::str::from_utf8(&v).ok()?.parse().ok()?)))
            .collect())
    }

    /// Records the background copy's progress of migration `id`.
    pub async fn put_progress(&mut self, id: u64, p: &Progress) -> Result<(), ClusterError> {
        let v = serde_json::to_vec(p).unwrap_or_default();
        self.client
            .put(format!("{}/progress/{id}", self.prefix), v, None)
            .await
            .map_err(etcd)?;
        Ok(())
    }

    /// Forgets the progress of finished migration `id`.
    pub async fn clear_progress(&mut self, id: u64) -> Result<(), ClusterError> {
        self.client
            .delete(format!("{}/progress/{id}", self.prefix), None)
            .await
            .map_err(etcd)?;
        Ok(())
    }

    /// The recorded progress of each migration's copy, by id.
    pub async fn progress(&mut self) -> Result<BTreeMap<u64, Progress>, ClusterError> {
        Ok(self
            .list("progress")
            .await?
            .into_iter()
            .filter_map(|(id, v)| Some((id.parse().ok()?, serde_json::from_slice(&v).ok()?)))
            .collect())
    }

    /// Waits until every node of `topology` has acknowledged its version
    /// (or a later one), for at most `timeout`.
    pub async fn wait_acks(
        &mut self,
        topology: &Topology,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let acks = self.acks().await?;
            let behind: Vec<&str> = topology
                .nodes
                .iter()
                .filter(|n| acks.get(&n.id).is_none_or(|&v| v < topology.version))
                .map(|n| n.id.as_str())
                .collect();
            if behind.is_empty() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClusterError(format!(
                    "nodes {} have not taken topology version {} yet; check that they run (`tern cluster status`)",
                    behind.join(", "),
                    topology.version
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
