//! The node-to-node side of a slot migration: the connection a target
//! uses to reach the source (`TERN.FETCH`, `TERN.SLOTSCAN`; the commands
//! themselves are in `crate::commands::migrate`), and the on-demand pull of
//! keys a target does not have yet.

use std::time::Duration;

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

/// A connection to another node, for fetches and page reads (pipelined:
/// every connection and the background copy share it).
#[derive(Debug, Clone)]
pub struct Peer {
    conn: tern_client::Connection,
}

/// Longest wait for another node's answer.
const PEER_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for a `TERN.EXPORT` part (it reads and writes a few MiB).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// What an export reply holds: where the next part starts, the records,
/// and the files with their bytes.
type ExportParts = (
    tern_client::Reply,
    u64,
    Vec<(tern::ingest::ExportedFile, Vec<u8>)>,
);

/// One part of a bulk copy as `TERN.EXPORT` sent it.
#[derive(Debug, Default)]
pub struct Exported {
    /// Where the next part starts (`None`: the slots are done).
    pub next: Option<Vec<u8>>,
    /// Records in the files.
    pub records: u64,
    /// The files: name and bytes.
    pub files: Vec<(tern::ingest::ExportedFile, Vec<u8>)>,
}

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
        self.call_within(cmd, PEER_TIMEOUT).await
    }

    async fn call_within(
        &self,
        cmd: Vec<Vec<u8>>,
        timeout: Duration,
    ) -> Result<tern_client::Reply, String> {
        let r = tokio::time::timeout(timeout, self.conn.call(cmd))
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

    /// `TERN.HOTKEYS`: up to `count` of the source's hottest records in
    /// slot ranges `ranges`.
    pub async fn hot(&self, count: usize, ranges: &[(u16, u16)]) -> Result<Vec<Record>, String> {
        let mut cmd = vec![b"TERN.HOTKEYS".to_vec(), count.to_string().into_bytes()];
        for &(a, b) in ranges {
            cmd.push(a.to_string().into_bytes());
            cmd.push(b.to_string().into_bytes());
        }
        let tern_client::Reply::Array(flat) = self.call(cmd).await? else {
            return Err("TERN.HOTKEYS did not answer with an array".into());
        };
        if flat.len() % 3 != 0 {
            return Err("TERN.HOTKEYS answered with a malformed list".into());
        }
        let mut out = Vec::with_capacity(flat.len() / 3);
        let mut it = flat.into_iter();
        while let (Some(k), Some(e), Some(v)) = (it.next(), it.next(), it.next()) {
            out.push((bulk(k)?, int(&e)?, bulk(v)?));
        }
        Ok(out)
    }

    /// One `TERN.EXPORT` part of slots `slots`' string values, from
    /// `cursor`, as files of generation `gen` numbered from `numbers`.
    pub async fn export(
        &self,
        slots: (u16, u16),
        cursor: &[u8],
        gen: u32,
        numbers: std::ops::Range<u64>,
        max_bytes: u64,
    ) -> Result<Exported, String> {
        let cmd = vec![
            b"TERN.EXPORT".to_vec(),
            slots.0.to_string().into_bytes(),
            slots.1.to_string().into_bytes(),
            cursor.to_vec(),
            gen.to_string().into_bytes(),
            numbers.start.to_string().into_bytes(),
            (numbers.end - numbers.start).to_string().into_bytes(),
            max_bytes.to_string().into_bytes(),
        ];
        let (next, records, files) = self.export_call(cmd, &numbers).await?;
        let next = match next {
            tern_client::Reply::Nil => None,
            r => Some(bulk(r)?),
        };
        Ok(Exported {
            next,
            records,
            files,
        })
    }

    /// One `TERN.EXPORTCOMPOSITES` part: the hashes, sets, sorted sets and
    /// lists of whole slots from `slots.0`, as files of generation `gen`
    /// numbered from `numbers`, their values under `versions`. Its `next`
    /// is the first slot not exported, 2 bytes big-endian.
    pub async fn export_composites(
        &self,
        slots: (u16, u16),
        gen: u32,
        numbers: std::ops::Range<u64>,
        versions: std::ops::Range<u64>,
        max_bytes: u64,
    ) -> Result<Exported, String> {
        let cmd = vec![
            b"TERN.EXPORTCOMPOSITES".to_vec(),
            slots.0.to_string().into_bytes(),
            slots.1.to_string().into_bytes(),
            gen.to_string().into_bytes(),
            numbers.start.to_string().into_bytes(),
            (numbers.end - numbers.start).to_string().into_bytes(),
            versions.start.to_string().into_bytes(),
            (versions.end - versions.start).to_string().into_bytes(),
            max_bytes.to_string().into_bytes(),
        ];
        let (next, records, files) = self.export_call(cmd, &numbers).await?;
        let next = match next {
            tern_client::Reply::Nil => None,
            r => match u16::try_from(int(&r)?) {
                Ok(s) if s > slots.0 && s <= slots.1 => Some(s.to_be_bytes().to_vec()),
                _ => return Err("TERN.EXPORTCOMPOSITES answered with a bad next slot".into()),
            },
        };
        Ok(Exported {
            next,
            records,
            files,
        })
    }

    /// Sends an export command; its next-part reply, record count and
    /// files (checked to be named as reserved).
    async fn export_call(
        &self,
        cmd: Vec<Vec<u8>>,
        numbers: &std::ops::Range<u64>,
    ) -> Result<ExportParts, String> {
        let tern_client::Reply::Array(mut parts) = self.call_within(cmd, EXPORT_TIMEOUT).await?
        else {
            return Err("an export did not answer with an array".into());
        };
        let malformed = || "an export answered with a malformed part".to_string();
        if parts.len() != 3 {
            return Err(malformed());
        }
        let flat = match parts.pop() {
            Some(tern_client::Reply::Array(f)) if f.len() % 2 == 0 => f,
            _ => return Err(malformed()),
        };
        let records = int(&parts.pop().ok_or_else(malformed)?)?;
        let next = parts.pop().ok_or_else(malformed)?;
        let mut files = Vec::with_capacity(flat.len() / 2);
        let mut it = flat.into_iter();
        while let (Some(name), Some(bytes)) = (it.next(), it.next()) {
            let name = bulk(name)?;
            let file = super::ingest::parse_file_name(&name).ok_or_else(|| {
                format!(
                    "TERN.EXPORT sent a file named {:?}",
                    String::from_utf8_lossy(&name)
                )
            })?;
            if !numbers.contains(&file.number) {
                return Err(format!(
                    "TERN.EXPORT sent file {} outside the numbers reserved",
                    file.number
                ));
            }
            files.push((file, bulk(bytes)?));
        }
        Ok((next, records.max(0) as u64, files))
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

/// Fetches `keys` from the node at `addr` (a slot's previous owner): the
/// `TERN.IMPORT` records for them (`pexpireat` -1 where the source has
/// none), or why the source could not answer.
pub async fn fetch_from(
    node: &super::ClusterNode,
    addr: &str,
    password: &str,
    keys: Vec<Vec<u8>>,
) -> Result<Vec<Record>, String> {
    let peer = node.peer(addr, password).await?;
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
