//! A Redis Cluster (a Tern cluster included) through `tern-client`
//! (`resp-cluster://host:port,host:port`): GET, SET and DEL routed by slot
//! over pipelined connections, redirects and retries handled by the
//! client. Concurrent client threads share each node's connections, so
//! their requests go out together. Scans are not supported: a key range
//! spans every node.

use std::path::Path;

use tern_client::{ClusterClient, Reply};

use super::{Binding, EngineStats, ReadResult};
use crate::props::Properties;
use crate::{Error, Result};

/// A cluster as a binding.
pub struct RespClusterBinding {
    label: String,
    rt: tokio::runtime::Runtime,
    client: ClusterClient,
}

impl std::fmt::Debug for RespClusterBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RespClusterBinding")
            .field("label", &self.label)
            .finish()
    }
}

impl RespClusterBinding {
    /// Connects through the comma-separated `seeds` and reads the slot map.
    pub fn connect(seeds: &str, _props: &Properties) -> Result<Self> {
        let list: Vec<&str> = seeds.split(',').filter(|s| !s.is_empty()).collect();
        if list.is_empty() {
            return Err(Error::msg("resp-cluster:// needs at least one host:port"));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bench-cluster-client")
            .enable_all()
            .build()
            .map_err(|e| Error(format!("cannot start the client runtime: {e}")))?;
        let client = rt
            .block_on(ClusterClient::connect(&list))
            .map_err(|e| Error(format!("resp-cluster://{seeds}: {e}")))?;
        Ok(RespClusterBinding {
            label: format!("resp-cluster://{seeds}"),
            rt,
            client,
        })
    }

    fn call(&self, args: &[&[u8]]) -> Result<Reply> {
        let cmd = args.iter().map(|a| a.to_vec()).collect();
        match self.rt.block_on(self.client.execute(cmd)) {
            Ok(Reply::Error(e)) => Err(Error(format!("server error: {e}"))),
            Ok(r) => Ok(r),
            Err(e) => Err(Error(e.to_string())),
        }
    }
}

impl Binding for RespClusterBinding {
    fn name(&self) -> &str {
        &self.label
    }

    fn read(&self, key: &[u8]) -> ReadResult {
        match self.call(&[b"GET", key])? {
            Reply::Bulk(v) => Ok(Some(v)),
            Reply::Nil => Ok(None),
            other => Err(Error(format!("GET answered {other:?}"))),
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.call(&[b"SET", key, value]).map(|_| ())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.call(&[b"DEL", key]).map(|_| ())
    }

    fn scan(
        &self,
        _start: &[u8],
        _count: usize,
        _visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        Err(Error::msg(
            "resp-cluster:// does not scan: a key range spans every node",
        ))
    }

    fn stats(&self) -> EngineStats {
        EngineStats::default()
    }

    fn data_dir(&self) -> Option<&Path> {
        None
    }
}
