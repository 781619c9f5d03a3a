//! The cluster client: a slot map, connections per node, and the
//! redirect and retry rules of Redis Cluster.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::connection::Connection;
use crate::error::Error;
use crate::reply::Reply;
use crate::slot::{key_slot, SLOTS};
use crate::{Cmd, Result};

/// Attempts per command before giving up (Redis clients use 16 too).
const ATTEMPTS: usize = 16;
/// Connections kept per node: concurrent callers spread over them.
const CONNS_PER_NODE: usize = 2;
/// Longest pause between retries of `-TRYAGAIN` and `-CLUSTERDOWN`.
const MAX_BACKOFF: Duration = Duration::from_millis(200);

/// A client for a Redis Cluster (a Tern cluster included).
#[derive(Debug, Clone)]
pub struct ClusterClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    seeds: Vec<String>,
    /// Owner address of each slot, as last learned.
    slots: RwLock<Vec<Option<Arc<str>>>>,
    /// Connections by address.
    conns: Mutex<HashMap<Arc<str>, Vec<Connection>>>,
    /// Round-robin over a node's connections.
    turn: std::sync::atomic::AtomicUsize,
    /// Counters: redirects followed, retries.
    moved: std::sync::atomic::AtomicU64,
    retries: std::sync::atomic::AtomicU64,
}

/// Where a command goes.
fn slot_of(cmd: &Cmd) -> Option<u16> {
    // The first key is the first argument of every keyed command this
    // client is used for (GET, SET, DEL, INCR, MGET, MSET, EXPIRE, ...).
    cmd.get(1).map(|k| key_slot(k))
}

impl ClusterClient {
    /// Connects to the cluster through any of `seeds` (`host:port`) and
    /// reads its slot map.
    pub async fn connect(seeds: &[&str]) -> Result<ClusterClient> {
        let c = ClusterClient {
            inner: Arc::new(Inner {
                seeds: seeds.iter().map(|s| s.to_string()).collect(),
                slots: RwLock::new(vec![None; SLOTS]),
                conns: Mutex::new(HashMap::new()),
                turn: Default::default(),
                moved: Default::default(),
                retries: Default::default(),
            }),
        };
        c.refresh().await?;
        Ok(c)
    }

    /// Redirects followed and retries made so far.
    pub fn counters(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.inner.moved.load(Relaxed),
            self.inner.retries.load(Relaxed),
        )
    }

    /// Rereads the slot map from the first node that answers (known
    /// owners first, then the seeds).
    pub async fn refresh(&self) -> Result<()> {
        let mut candidates: Vec<String> = {
            let conns = self.inner.conns.lock();
            conns.keys().map(|k| k.to_string()).collect()
        };
        candidates.extend(self.inner.seeds.iter().cloned());
        let mut last = None;
        for addr in candidates {
            let conn = match self.conn(&addr).await {
                Ok(c) => c,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            match conn
                .call(vec![b"CLUSTER".to_vec(), b"SLOTS".to_vec()])
                .await
            {
                Ok(Reply::Array(ranges)) => {
                    let map = slot_map(&ranges)?;
                    *self.inner.slots.write() = map;
                    return Ok(());
                }
                Ok(other) => {
                    last = Some(Error::Cluster(format!(
                        "{addr} answered CLUSTER SLOTS with {other:?}"
                    )))
                }
                Err(e) => {
                    self.forget(&addr);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Cluster("no node to ask for the slot map".into())))
    }

    /// A connection to `addr`, opened if needed.
    async fn conn(&self, addr: &str) -> Result<Connection> {
        use std::sync::atomic::Ordering::Relaxed;
        {
            let mut conns = self.inner.conns.lock();
            if let Some(list) = conns.get_mut(addr) {
                list.retain(|c| !c.is_broken());
                if list.len() >= CONNS_PER_NODE {
                    let i = self.inner.turn.fetch_add(1, Relaxed) % list.len();
                    return Ok(list[i].clone());
                }
            }
        }
        let c = Connection::connect(addr).await?;
        let mut conns = self.inner.conns.lock();
        let list = conns.entry(Arc::from(addr)).or_default();
        if list.len() < CONNS_PER_NODE {
            list.push(c.clone());
        }
        Ok(c)
    }

    fn forget(&self, addr: &str) {
        self.inner.conns.lock().remove(addr);
    }

    /// The address serving `slot` (any known node for keyless commands).
    fn addr_for(&self, slot: Option<u16>) -> Option<Arc<str>> {
        let slots = self.inner.slots.read();
        match slot {
            Some(s) => slots.get(usize::from(s)).cloned().flatten(),
            None => slots.iter().flatten().next().cloned(),
        }
    }

    /// Runs one command, following redirects and retrying.
    pub async fn execute(&self, cmd: Cmd) -> Result<Reply> {
        let mut r = self.batch(vec![cmd]).await?;
        r.pop().ok_or_else(|| Error::Protocol("no reply".into()))
    }

    /// Runs `cmds`: each node gets its commands as one pipeline, all nodes
    /// at once; commands answered with a redirect or a retryable error are
    /// sent again where they belong. Replies come back in the order of
    /// `cmds`. The order of commands is kept per key, not across nodes.
    pub async fn batch(&self, cmds: Vec<Cmd>) -> Result<Vec<Reply>> {
        let n = cmds.len();
        let mut replies: Vec<Option<Reply>> = vec![None; n];
        // (command index, where to send it, whether ASKING goes first)
        let mut todo: Vec<(usize, Option<Arc<str>>, bool)> = (0..n)
            .map(|i| (i, self.addr_for(slot_of(&cmds[i])), false))
            .collect();
        let mut backoff = Duration::from_millis(5);
        for attempt in 0..ATTEMPTS {
            if todo.is_empty() {
                break;
            }
            if todo.iter().any(|t| t.1.is_none()) {
                self.refresh().await?;
                for t in &mut todo {
                    if t.1.is_none() {
                        t.1 = self.addr_for(slot_of(&cmds[t.0]));
                    }
                }
            }
            let mut by_node: BTreeMap<Arc<str>, Vec<(usize, bool)>> = BTreeMap::new();
            for (i, addr, ask) in todo.drain(..) {
                match addr {
                    Some(a) => by_node.entry(a).or_default().push((i, ask)),
                    None => {
                        return Err(Error::Cluster(format!(
                            "no node serves the slot of command {i}"
                        )))
                    }
                }
            }
            let sends = by_node.into_iter().map(|(addr, items)| {
                let cmds = &cmds;
                async move {
                    let mut pipe = Vec::with_capacity(items.len());
                    for &(i, ask) in &items {
                        if ask {
                            pipe.push(vec![b"ASKING".to_vec()]);
                        }
                        pipe.push(cmds[i].clone());
                    }
                    // Connecting failed: nothing was sent, so retrying is
                    // safe. Sent and then failed: the outcome is unknown.
                    let result = match self.conn(&addr).await {
                        Ok(c) => c.pipeline(&pipe).await.map_err(|e| (e, true)),
                        Err(e) => Err((e, false)),
                    };
                    (addr, items, result)
                }
            });
            let results = futures::future::join_all(sends).await;
            let mut refresh = false;
            let mut wait = false;
            for (addr, items, result) in results {
                let got = match result {
                    Ok(r) => r,
                    Err((e, sent)) => {
                        // The node failed: the slot map may be stale.
                        self.forget(&addr);
                        if sent || attempt + 1 == ATTEMPTS {
                            // Commands that may have run are not sent
                            // again (an INCR would count twice).
                            return Err(e);
                        }
                        refresh = true;
                        wait = true;
                        todo.extend(items.iter().map(|&(i, _)| (i, None, false)));
                        continue;
                    }
                };
                let mut it = got.into_iter();
                for (i, ask) in items {
                    if ask {
                        let _ = it.next(); // ASKING's +OK
                    }
                    let Some(reply) = it.next() else {
                        return Err(Error::Protocol("a pipeline lost a reply".into()));
                    };
                    match reply.error_code() {
                        Some("MOVED") => {
                            if let Some((slot, to)) = reply.redirect() {
                                let to: Arc<str> = Arc::from(to);
                                self.inner.slots.write()[usize::from(slot) % SLOTS] =
                                    Some(to.clone());
                                self.note_moved();
                                refresh = true;
                                todo.push((i, Some(to), false));
                                continue;
                            }
                        }
                        Some("ASK") => {
                            if let Some((_, to)) = reply.redirect() {
                                self.note_moved();
                                todo.push((i, Some(Arc::from(to)), true));
                                continue;
                            }
                        }
                        Some(code @ ("TRYAGAIN" | "CLUSTERDOWN")) if attempt + 1 < ATTEMPTS => {
                            self.note_retry();
                            wait = true;
                            // A node without the slot (or fenced): ask
                            // the cluster again where it is.
                            let down = code == "CLUSTERDOWN";
                            refresh |= down;
                            todo.push((i, (!down).then(|| addr.clone()), false));
                            continue;
                        }
                        _ => {}
                    }
                    replies[i] = Some(reply);
                }
            }
            if todo.is_empty() {
                break;
            }
            if wait {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            if refresh {
                // A failed refresh leaves the map as it was; the next
                // attempt tries again.
                let _ = self.refresh().await;
                for t in &mut todo {
                    if t.1.is_none() {
                        t.1 = self.addr_for(slot_of(&cmds[t.0]));
                    }
                }
            }
        }
        if !todo.is_empty() {
            return Err(Error::Exhausted(format!(
                "{} command(s) still redirected after {ATTEMPTS} attempts",
                todo.len()
            )));
        }
        replies
            .into_iter()
            .map(|r| r.ok_or_else(|| Error::Protocol("a command got no reply".into())))
            .collect()
    }

    fn note_moved(&self) {
        self.inner
            .moved
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn note_retry(&self) {
        self.inner
            .retries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The slot map from a `CLUSTER SLOTS` reply.
fn slot_map(ranges: &[Reply]) -> Result<Vec<Option<Arc<str>>>> {
    let bad = || Error::Cluster("malformed CLUSTER SLOTS reply".into());
    let mut map = vec![None; SLOTS];
    for r in ranges {
        let Reply::Array(items) = r else {
            return Err(bad());
        };
        let (Some(Reply::Int(a)), Some(Reply::Int(b)), Some(Reply::Array(node))) =
            (items.first(), items.get(1), items.get(2))
        else {
            return Err(bad());
        };
        let (Some(Reply::Bulk(host)), Some(Reply::Int(port))) = (node.first(), node.get(1)) else {
            return Err(bad());
        };
        let addr: Arc<str> = Arc::from(format!("{}:{port}", String::from_utf8_lossy(host)));
        let (a, b) = (*a as usize, *b as usize);
        if a > b || b >= SLOTS {
            return Err(bad());
        }
        for s in &mut map[a..=b] {
            *s = Some(addr.clone());
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_slot_map() {
        let node = |p| {
            Reply::Array(vec![
                Reply::Bulk(b"10.0.0.1".to_vec()),
                Reply::Int(p),
                Reply::Bulk(b"id".to_vec()),
            ])
        };
        let r = vec![
            Reply::Array(vec![Reply::Int(0), Reply::Int(99), node(7001)]),
            Reply::Array(vec![Reply::Int(100), Reply::Int(16383), node(7002)]),
        ];
        let m = slot_map(&r).unwrap();
        assert_eq!(m[0].as_deref(), Some("10.0.0.1:7001"));
        assert_eq!(m[100].as_deref(), Some("10.0.0.1:7002"));
        assert!(slot_map(&[Reply::Int(1)]).is_err());
        assert!(slot_map(&[Reply::Array(vec![Reply::Int(5), Reply::Int(1), node(1)])]).is_err());
    }
}
