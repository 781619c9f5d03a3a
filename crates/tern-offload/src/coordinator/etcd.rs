//! The coordinator's state in etcd: one record per job under
//! `<prefix>/jobs/<id>`, and a leader key `<prefix>/leader` that only the
//! coordinator holding it (through a lease it keeps alive) may write
//! under. Every write is a transaction that first compares the leader key
//! with this coordinator's id, so a coordinator that lost leadership (its
//! lease expired while it was cut off or frozen) cannot change anything; it
//! then stops, and a new one takes over from what etcd holds.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use prost::Message;

use crate::error::{OffloadError, Result};
use crate::proto;

fn etcd(e: etcd_client::Error) -> OffloadError {
    OffloadError::Invalid(format!("etcd: {e}"))
}

/// A coordinator's hold on etcd.
pub struct EtcdState {
    client: Client,
    prefix: String,
    me: String,
    lease: i64,
    /// Fires when the lease could not be kept alive: leadership is lost.
    lost: tokio::sync::watch::Receiver<bool>,
}

impl std::fmt::Debug for EtcdState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdState")
            .field("prefix", &self.prefix)
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl EtcdState {
    fn leader_key(&self) -> String {
        format!("{}/leader", self.prefix)
    }

    fn job_key(&self, id: &str) -> String {
        format!("{}/jobs/{id}", self.prefix)
    }

    /// Connects to etcd at `endpoints` and waits until this coordinator
    /// (`me`) is the leader under `prefix`, holding a lease of `ttl`.
    pub async fn elect(
        endpoints: &[String],
        prefix: &str,
        me: &str,
        ttl: Duration,
    ) -> Result<Self> {
        let opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        let mut client = Client::connect(endpoints, Some(opts)).await.map_err(etcd)?;
        let ttl_s = ttl.as_secs().max(2) as i64;
        let lease = client.lease_grant(ttl_s, None).await.map_err(etcd)?.id();
        let (tx, lost) = tokio::sync::watch::channel(false);
        let mut keeper_client = client.clone();
        tokio::spawn(async move {
            let every = Duration::from_secs((ttl_s as u64 / 3).max(1));
            let kept = async {
                let (mut keeper, mut stream) = keeper_client.lease_keep_alive(lease).await?;
                loop {
                    keeper.keep_alive().await?;
                    match stream.message().await? {
                        Some(r) if r.ttl() > 0 => {}
                        _ => return Ok::<(), etcd_client::Error>(()),
                    }
                    tokio::time::sleep(every).await;
                }
            };
            let r = kept.await;
            tracing::error!("tern coordinator: lost the etcd lease: {r:?}");
            let _ = tx.send(true);
        });
        let state = EtcdState {
            client,
            prefix: prefix.trim_end_matches('/').to_string(),
            me: me.to_string(),
            lease,
            lost,
        };
        let mut announced = false;
        loop {
            let key = state.leader_key();
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key,
                    state.me.clone(),
                    Some(PutOptions::new().with_lease(state.lease)),
                )]);
            if state
                .client
                .clone()
                .txn(txn)
                .await
                .map_err(etcd)?
                .succeeded()
            {
                return Ok(state);
            }
            if !announced {
                tracing::info!("tern coordinator: another coordinator leads; standing by");
                announced = true;
            }
            if *state.lost.borrow() {
                return Err(OffloadError::Invalid(
                    "etcd: lost the lease while standing by".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// Gives up leadership at once (a clean stop): revoking the lease
    /// deletes the leader key with it, so a standby takes over without
    /// waiting for the lease to run out.
    pub async fn resign(&mut self) -> Result<()> {
        self.client.lease_revoke(self.lease).await.map_err(etcd)?;
        Ok(())
    }

    /// Turns true when leadership is lost.
    pub fn lost(&self) -> tokio::sync::watch::Receiver<bool> {
        self.lost.clone()
    }

    /// Every job record stored.
    pub async fn load(&mut self) -> Result<Vec<proto::JobRecord>> {
        let prefix = format!("{}/jobs/", self.prefix);
        let r = self
            .client
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(etcd)?;
        r.kvs()
            .iter()
            .map(|kv| proto::JobRecord::decode(kv.value()).map_err(OffloadError::from))
            .collect()
    }

    /// Writes `changed` and deletes `removed`, in one transaction that
    /// holds only while this coordinator leads.
    pub async fn persist(
        &mut self,
        changed: &[proto::JobRecord],
        removed: &[String],
    ) -> Result<()> {
        if changed.is_empty() && removed.is_empty() {
            return Ok(());
        }
        let mut ops = Vec::with_capacity(changed.len() + removed.len());
        for r in changed {
            let id = r
                .job
                .as_ref()
                .map(|j| j.job_id.as_str())
                .unwrap_or_default();
            ops.push(TxnOp::put(self.job_key(id), r.encode_to_vec(), None));
        }
        for id in removed {
            ops.push(TxnOp::delete(self.job_key(id), None));
        }
        let txn = Txn::new()
            .when([Compare::value(
                self.leader_key(),
                CompareOp::Equal,
                self.me.clone(),
            )])
            .and_then(ops);
        if self.client.txn(txn).await.map_err(etcd)?.succeeded() {
            Ok(())
        } else {
            Err(OffloadError::Invalid(
                "etcd: this coordinator no longer leads; stopping".into(),
            ))
        }
    }
}
