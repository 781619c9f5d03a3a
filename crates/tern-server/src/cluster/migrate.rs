//! The commands nodes send each other while slots move (Shadowfax-style:
//! ownership first, data after), and the on-demand pull:
//!
//! - `TERN.FETCH key ...` (on the source): the keys' values and expiries,
//!   for a target that was asked for keys it does not have yet;
//! - `TERN.SLOTSCAN slot cursor count` (on the source): one page of a
//!   slot's keys and values, for the target's background copy;
//! - `TERN.IMPORT key value pexpireat ...` (on the target, run by the
//!   committer): stores each record unless the key was settled here
//!   already (imported before, or written by a client since the slot
//!   moved, as its import marker says), so migrated data never overwrites
//!   a newer write; `pexpireat` -1 records that the source has no such key;
//! - `TERN.DROPSLOT slot count` (on the source, once the target has
//!   everything): deletes keys of a slot this node no longer owns;
//! - `TERN.CLEARMARKS slot count`: deletes import markers of a slot no
//!   longer being imported.
//!
//! None of these is routed: they name slots this node may not own.

use std::time::Duration;

use super::slot::key_slot;
use super::view::View;
use crate::commands::strings::tri;
use crate::commands::{int_arg, store_error, Ctx};
use crate::expiry::now_ms;
use crate::resp::Reply;
use crate::state::State;

/// A migrated record: key, `pexpireat` (-1: the source has no such key;
/// 0: no expiry) and value.
pub type Record = (Vec<u8>, i64, Vec<u8>);

/// What `TERN.FETCH` says of one key: its value and `pexpireat`, if any.
pub type Fetched = Option<(Vec<u8>, i64)>;

/// Keys per `TERN.SLOTSCAN` page.
pub const PAGE_KEYS: usize = 256;
/// Value bytes per `TERN.SLOTSCAN` page.
pub const PAGE_BYTES: usize = 1 << 20;

fn cluster_only(ctx: &Ctx<'_>) -> Result<(), Reply> {
    match ctx.state.cluster {
        Some(_) => Ok(()),
        None => Err(Reply::err("This instance has cluster support disabled")),
    }
}

fn expiry_arg(e: Option<u64>) -> Reply {
    Reply::Int(e.map_or(0, |t| t.min(i64::MAX as u64) as i64))
}

/// TERN.FETCH key [key ...]
pub fn fetch(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let now = now_ms();
    let mut out = Vec::with_capacity(args.len() - 1);
    for k in &args[1..] {
        match tri!(ctx.store().get_at(k, now).map_err(store_error)) {
            None => out.push(Reply::NilArray),
            Some(e) => {
                let exp = expiry_arg(e.expire_at);
                out.push(Reply::Array(vec![Reply::Bulk(e.value), exp]));
            }
        }
    }
    Reply::Array(out)
}

/// TERN.SLOTSCAN slot cursor count
pub fn slotscan(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let slot = match int_arg(&args[1]) {
        Ok(s) if (0..16384).contains(&s) => s as u16,
        _ => return Reply::err("Invalid slot"),
    };
    let count = match int_arg(&args[3]) {
        Ok(c) if c > 0 => (c as usize).min(4096),
        _ => return Reply::err("count must be positive"),
    };
    let (page, next) = tri!(ctx
        .store()
        .slot_page(slot, &args[2], count, PAGE_BYTES)
        .map_err(store_error));
    let mut flat = Vec::with_capacity(page.len() * 3);
    for (k, e) in page {
        flat.push(Reply::Bulk(k));
        flat.push(expiry_arg(e.expire_at));
        flat.push(Reply::Bulk(e.value));
    }
    let next = match next {
        Some(k) => Reply::Bulk(k),
        None => Reply::Nil,
    };
    Reply::Array(vec![next, Reply::Array(flat)])
}

/// TERN.IMPORT key pexpireat value [key pexpireat value ...]
pub fn import(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    if (args.len() - 1) % 3 != 0 {
        return Reply::err("TERN.IMPORT takes key, pexpireat, value triples");
    }
    let view = ctx.state.cluster.as_ref().map(|c| c.view());
    let importing = view.as_ref().and_then(|v| v.importing());
    let store = &ctx.state.store;
    let now = now_ms();
    let mut applied = 0;
    for t in args[1..].chunks_exact(3) {
        let (key, exp, value) = (&t[0], &t[1], &t[2]);
        if !importing
            .as_ref()
            .is_some_and(|s| s.contains(key_slot(key)))
        {
            return Reply::err(format!("slot {} is not being imported here", key_slot(key)));
        }
        let exp = tri!(int_arg(exp));
        let pending = tri!(ctx.pending());
        if tri!(pending.marked(store, key).map_err(store_error)) {
            continue;
        }
        // Settled from now on, whatever the source said.
        pending.mark(key);
        let expire_at = match exp {
            -1 => continue,
            0 => None,
            t if t > 0 => Some(t as u64),
            _ => return Reply::err("bad pexpireat"),
        };
        if ctx.get(key).map_err(store_error).map(|e| e.is_some()) == Ok(true) {
            continue;
        }
        if expire_at.is_some_and(|t| t <= now) {
            continue;
        }
        tri!(ctx.put(key, value, expire_at));
        applied += 1;
    }
    Reply::Int(applied)
}

fn slot_and_count(args: &[Vec<u8>]) -> Result<(u16, usize), Reply> {
    let slot = match int_arg(&args[1]) {
        Ok(s) if (0..16384).contains(&s) => s as u16,
        _ => return Err(Reply::err("Invalid slot")),
    };
    let count = match int_arg(&args[2]) {
        Ok(c) if c > 0 => (c as usize).min(4096),
        _ => return Err(Reply::err("count must be positive")),
    };
    Ok((slot, count))
}

/// TERN.DROPSLOT slot count
pub fn dropslot(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let (slot, count) = tri!(slot_and_count(args));
    // Never the keys of a slot served here, nor of one a target still
    // pulls from here (decided with the view current now: the committer
    // runs this between other writes).
    let keep = ctx.state.cluster.as_ref().is_some_and(|c| {
        let v = c.view();
        let handing_over = v
            .topology
            .as_ref()
            .and_then(|t| t.migration_of(slot))
            .is_some_and(|m| {
                m.from == c.info.id && m.state != super::topology::MigrationState::Dropping
            });
        v.serves(slot) || handing_over
    });
    if keep {
        return Reply::err(format!(
            "slot {slot} is served here or still being handed over; refusing to drop it"
        ));
    }
    let keys = tri!(ctx.store().slot_keys_all(slot, count).map_err(store_error));
    let mut n = 0;
    for k in keys {
        tri!(ctx.delete(&k));
        n += 1;
    }
    Reply::Int(n)
}

/// TERN.CLEARMARKS slot count
pub fn clearmarks(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    tri!(cluster_only(ctx));
    let (slot, count) = tri!(slot_and_count(args));
    let importing = ctx
        .state
        .cluster
        .as_ref()
        .and_then(|c| c.view().importing());
    if importing.is_some_and(|s| s.contains(slot)) {
        return Reply::Int(0);
    }
    let marks = tri!(ctx.store().markers(slot, count).map_err(store_error));
    let pending = tri!(ctx.pending());
    for m in &marks {
        pending.delete_raw(m);
    }
    Reply::Int(marks.len() as i64)
}

/// A connection to another node, for fetches and page reads (pipelined:
/// every connection and the background copy share it).
#[derive(Debug, Clone)]
pub struct Peer {
    conn: tern_client::Connection,
}

/// Longest wait for another node's answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);

fn bulk(r: tern_client::Reply) -> Result<Vec<u8>, String> {
    match r {
        tern_client::Reply::Bulk(b) => Ok(b),
        other => Err(format!("expected a string, got {other:?}")),
    }
}

fn int(r: &tern_client::Reply) -> Result<i64, String> {
    match r {
        tern_client::Reply::Int(n) => Ok(*n),
        other => Err(format!("expected an integer, got {other:?}")),
    }
}

impl Peer {
    /// Connects to `addr`, authenticating with `password` if set.
    pub async fn connect(addr: &str, password: &str) -> Result<Peer, String> {
        let conn = tern_client::Connection::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let peer = Peer { conn };
        if !password.is_empty() {
            peer.call(vec![b"AUTH".to_vec(), password.as_bytes().to_vec()])
                .await?;
        }
        Ok(peer)
    }

    /// Whether the connection failed.
    pub fn is_broken(&self) -> bool {
        self.conn.is_broken()
    }

    async fn call(&self, cmd: Vec<Vec<u8>>) -> Result<tern_client::Reply, String> {
        let r = tokio::time::timeout(PEER_TIMEOUT, self.conn.call(cmd))
            .await
            .map_err(|_| format!("node {} did not answer in time", self.conn.addr()))?
            .map_err(|e| e.to_string())?;
        match r {
            tern_client::Reply::Error(e) => Err(format!("node {} answered: {e}", self.conn.addr())),
            r => Ok(r),
        }
    }

    /// `TERN.FETCH` of `keys`: per key, `None` if the source has none,
    /// else its value and expiry.
    pub async fn fetch(&self, keys: &[Vec<u8>]) -> Result<Vec<Fetched>, String> {
        let mut cmd = Vec::with_capacity(keys.len() + 1);
        cmd.push(b"TERN.FETCH".to_vec());
        cmd.extend(keys.iter().cloned());
        let tern_client::Reply::Array(items) = self.call(cmd).await? else {
            return Err("TERN.FETCH did not answer with an array".into());
        };
        if items.len() != keys.len() {
            return Err("TERN.FETCH answered for a different number of keys".into());
        }
        items
            .into_iter()
            .map(|it| match it {
                tern_client::Reply::Nil => Ok(None),
                tern_client::Reply::Array(mut pair) if pair.len() == 2 => {
                    let exp = int(&pair[1])?;
                    let value = bulk(pair.swap_remove(0))?;
                    Ok(Some((value, exp)))
                }
                other => Err(format!("TERN.FETCH item {other:?}")),
            })
            .collect()
    }

    /// One `TERN.SLOTSCAN` page: records and the cursor of the next page
    /// (`None`: done).
    pub async fn page(
        &self,
        slot: u16,
        cursor: &[u8],
    ) -> Result<(Vec<Record>, Option<Vec<u8>>), String> {
        let cmd = vec![
            b"TERN.SLOTSCAN".to_vec(),
            slot.to_string().into_bytes(),
            cursor.to_vec(),
            PAGE_KEYS.to_string().into_bytes(),
        ];
        let tern_client::Reply::Array(mut parts) = self.call(cmd).await? else {
            return Err("TERN.SLOTSCAN did not answer with an array".into());
        };
        if parts.len() != 2 {
            return Err("TERN.SLOTSCAN answered with a malformed page".into());
        }
        let flat = match parts.pop() {
            Some(tern_client::Reply::Array(f)) if f.len() % 3 == 0 => f,
            _ => return Err("TERN.SLOTSCAN answered with a malformed page".into()),
        };
        let next = match parts.pop() {
            Some(tern_client::Reply::Nil) => None,
            Some(r) => Some(bulk(r)?),
            None => None,
        };
        let mut out = Vec::with_capacity(flat.len() / 3);
        let mut it = flat.into_iter();
        while let (Some(k), Some(e), Some(v)) = (it.next(), it.next(), it.next()) {
            out.push((bulk(k)?, int(&e)?, bulk(v)?));
        }
        Ok((out, next))
    }
}

/// The `TERN.IMPORT` arguments for `records`.
pub fn import_args(records: Vec<Record>) -> Vec<Vec<u8>> {
    let mut args = Vec::with_capacity(1 + records.len() * 3);
    args.push(b"TERN.IMPORT".to_vec());
    for (k, e, v) in records {
        args.push(k);
        args.push(e.to_string().into_bytes());
        args.push(v);
    }
    args
}

/// Of `keys`, those not settled here yet (no record, no import
/// marker): the ones to pull. Blocking (reads the store).
pub fn unsettled(state: &State, keys: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, String> {
    let store = &state.store;
    let mut missing = Vec::new();
    for k in keys {
        let here = store
            .key_state(&store.layout().key(store.generation(), k))
            .map_err(|e| e.to_string())?
            .exists;
        let marked = store
            .db
            .get(&crate::keyspace::marker_key(k))
            .map_err(|e| e.to_string())?
            .is_some();
        if !here && !marked && !missing.contains(k) {
            missing.push(k.clone());
        }
    }
    Ok(missing)
}

/// Fetches `keys` from node `source` of `view`: the `TERN.IMPORT` records
/// for them (`pexpireat` -1 where the source has none), or why the source
/// could not answer.
pub async fn fetch_from(
    node: &super::ClusterNode,
    view: &View,
    source: usize,
    password: &str,
    keys: Vec<Vec<u8>>,
) -> Result<Vec<Record>, String> {
    let src = view
        .node(source)
        .ok_or_else(|| "the source node is not in the topology".to_string())?;
    let peer = node.peer(&src.addr(), password).await?;
    let values = peer.fetch(&keys).await?;
    Ok(keys
        .into_iter()
        .zip(values)
        .map(|(k, v)| match v {
            Some((value, exp)) => (k, exp, value),
            None => (k, -1, Vec::new()),
        })
        .collect())
}
