//! What a node does for the migrations it takes part in, driven by the
//! topology it routes with (so a restarted node picks up where the
//! cluster is, and an admin that dies after starting a migration leaves
//! nothing stuck):
//!
//! - as a target in **handoff**: waits until the source acknowledges the
//!   topology that took the slots (it has stopped serving them), or until
//!   its registration lapsed, then moves the migration to **pulling**;
//! - as a target **pulling**: copies the slots from the source as files
//!   it exports and this node ingests (`super::ingest`, at a bounded
//!   rate), reporting progress in etcd, then moves the migration to
//!   **dropping**;
//! - as a source **dropping**: deletes its copy of the slots, then removes
//!   the migration;
//! - always: deletes keys of slots it neither serves nor is dropping for a
//!   migration (left by a crash), and import markers of slots no longer
//!   being imported.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::etcd::{ClusterError, Progress, Registry};
use super::ingest;
use super::migrate::import_args;
use super::topology::{Migration, MigrationState};
use super::ClusterNode;
use crate::commands::Session;
use crate::exec::{Exec, Request};
use crate::resp::Reply;
use crate::state::{ClientDetail, ClientInfo, State};

/// Hot records a target asks its source for when it takes slots over.
const HOT_RECORDS: usize = 1024;
/// Keys deleted per committer job when dropping a slot or its markers.
const DROP_BATCH: usize = 512;
/// Pause after a failed step before trying again.
const RETRY: Duration = Duration::from_millis(500);

/// The step of one migration a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    Handoff,
    Copy,
    Drop,
}

/// Runs node `node`'s part in migrations until the process ends.
pub async fn drive(
    node: Arc<ClusterNode>,
    reg: Registry,
    state: Arc<State>,
    exec: Arc<Exec>,
    rate: u64,
    ttl: Duration,
) {
    let running: Arc<Mutex<HashSet<(u64, Role)>>> = Arc::default();
    let mut versions = node.versions.subscribe();
    let mut cleaned = 0;
    loop {
        let view = node.view();
        if let Some(t) = &view.topology {
            for m in &t.migrations {
                let role = match m.state {
                    MigrationState::Handoff if m.to == node.info.id => Role::Handoff,
                    MigrationState::Pulling if m.to == node.info.id => Role::Copy,
                    MigrationState::Dropping if m.from == node.info.id => Role::Drop,
                    _ => continue,
                };
                if !running.lock().insert((m.id, role)) {
                    continue;
                }
                let step = Step {
                    node: node.clone(),
                    reg: reg.clone(),
                    state: state.clone(),
                    exec: exec.clone(),
                    m: m.clone(),
                };
                let running = running.clone();
                tokio::spawn(async move {
                    match role {
                        Role::Handoff => step.handoff(ttl).await,
                        Role::Copy => step.copy(rate).await,
                        Role::Drop => step.drop_source(rate).await,
                    }
                    running.lock().remove(&(step.m.id, role));
                });
            }
            // Leftovers of finished or crashed migrations, once per
            // version, one cleanup at a time.
            if cleaned != t.version && running.lock().insert((0, Role::Drop)) {
                cleaned = t.version;
                let (n, st, ex, r) = (node.clone(), state.clone(), exec.clone(), running.clone());
                tokio::spawn(async move {
                    while let Err(e) = clean_leftovers(&n, &st, &ex, rate).await {
                        tracing::warn!(
                            "tern serve: cleaning up after migrations failed: {e}; retrying"
                        );
                        tokio::time::sleep(RETRY * 2).await;
                    }
                    r.lock().remove(&(0, Role::Drop));
                });
            }
        }
        drop(view);
        if versions.changed().await.is_err() {
            return;
        }
    }
}

/// A session for the node's own commands.
fn internal_session(state: &State) -> Session {
    let any = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
    let info = Arc::new(ClientInfo {
        id: state.next_id(),
        addr: any,
        laddr: any,
        created: Instant::now(),
        detail: parking_lot::Mutex::new(ClientDetail::default()),
    });
    Session::new(info, true)
}

/// Runs `args` on the committer; its reply.
async fn write(state: &Arc<State>, exec: &Exec, args: Vec<Vec<u8>>) -> Result<Reply, String> {
    let req = VecDeque::from([Request::new(args)]);
    let done = exec
        .committer
        .run(state.clone(), internal_session(state), req)
        .await
        .ok_or("the server is stopping")?;
    match done.replies.into_iter().next() {
        Some(Reply::Error(e)) => Err(e),
        Some(r) => Ok(r),
        None => Err("no reply".into()),
    }
}

fn count_of(r: &Reply) -> i64 {
    match r {
        Reply::Int(n) => *n,
        _ => 0,
    }
}

struct Step {
    node: Arc<ClusterNode>,
    reg: Registry,
    state: Arc<State>,
    exec: Arc<Exec>,
    m: Migration,
}

impl Step {
    /// Whether the migration is still at `state` in the node's view.
    fn still(&self, state: MigrationState) -> bool {
        let v = self.node.view();
        v.topology
            .as_ref()
            .and_then(|t| t.migrations.iter().find(|m| m.id == self.m.id))
            .is_some_and(|m| m.state == state)
    }

    /// Moves the migration from `from` to `to` (or removes it, `None`).
    async fn advance(
        &self,
        from: MigrationState,
        to: Option<MigrationState>,
    ) -> Result<(), ClusterError> {
        let id = self.m.id;
        let mut reg = self.reg.clone();
        reg.update(|t| {
            let mut t = t
                .cloned()
                .ok_or_else(|| ClusterError("no topology".into()))?;
            let i = t
                .migrations
                .iter()
                .position(|m| m.id == id && m.state == from)
                .ok_or_else(|| ClusterError(format!("migration {id} is no longer {from:?}")))?;
            match to {
                Some(s) => t.migrations[i].state = s,
                None => {
                    t.migrations.remove(i);
                }
            }
            Ok(t)
        })
        .await
        .map(drop)
    }

    async fn handoff(&self, ttl: Duration) {
        let mut reg = self.reg.clone();
        let mut gone_since: Option<Instant> = None;
        while self.still(MigrationState::Handoff) {
            let acked = reg
                .acks()
                .await
                .ok()
                .and_then(|a| a.get(&self.m.from).copied())
                .is_some_and(|v| v >= self.m.since);
            // A source whose registration lapsed a lease ago serves
            // nothing (docs/cluster.md says what a frozen one may still
            // finish).
            let alive = reg
                .live_nodes()
                .await
                .map(|l| l.contains_key(&self.m.from))
                .unwrap_or(true);
            if alive {
                gone_since = None;
            } else {
                gone_since.get_or_insert_with(Instant::now);
            }
            let fenced = gone_since.is_some_and(|t| t.elapsed() >= ttl);
            if acked || fenced {
                // Whatever this node kept of the slots from an earlier
                // time it held them must not pass for their data.
                if let Err(e) = self.reset_slots().await {
                    tracing::warn!("tern serve: clearing slots before importing them: {e}");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
                // The source's hottest records come with the slots, so the
                // first requests for them need no pull (best effort: a
                // source that is gone sends none).
                if acked {
                    if let Err(e) = self.take_hot_records().await {
                        tracing::info!("tern serve: no hot records from the source: {e}");
                    }
                }
                match self
                    .advance(MigrationState::Handoff, Some(MigrationState::Pulling))
                    .await
                {
                    Ok(()) => return,
                    Err(e) => tracing::debug!("handoff of migration {}: {e}", self.m.id),
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A connection to the migration's source.
    async fn source(&self) -> Result<super::migrate::Peer, String> {
        let source = self
            .node
            .view()
            .topology
            .as_ref()
            .and_then(|t| t.node(&self.m.from).cloned())
            .ok_or("the source left the topology")?;
        self.node
            .peer(&source.addr(), &self.state.config.requirepass)
            .await
    }

    /// Imports the source's hottest records of the moving slots.
    async fn take_hot_records(&self) -> Result<(), String> {
        let peer = self.source().await?;
        let records = peer.hot(HOT_RECORDS, &self.m.slots).await?;
        if records.is_empty() {
            return Ok(());
        }
        let r = write(&self.state, &self.exec, import_args(records)).await?;
        self.node.counters.hot_records_received.fetch_add(
            count_of(&r).max(0) as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }

    /// Deletes this node's keys and import markers of the moving slots.
    async fn reset_slots(&self) -> Result<(), String> {
        for slot in self.m.each_slot() {
            loop {
                let args = vec![
                    b"TERN.RESETSLOT".to_vec(),
                    slot.to_string().into_bytes(),
                    DROP_BATCH.to_string().into_bytes(),
                ];
                if count_of(&write(&self.state, &self.exec, args).await?) == 0 {
                    break;
                }
            }
        }
        Ok(())
    }

    async fn copy(&self, rate: u64) {
        loop {
            if !self.still(MigrationState::Pulling) {
                return;
            }
            match self.copy_once(rate).await {
                Ok(()) => {
                    // What was imported is durable before the source
                    // deletes its copy, whatever appendfsync says.
                    let st = self.state.clone();
                    match tokio::task::spawn_blocking(move || st.store.db.sync_wal()).await {
                        Ok(Ok(())) => {}
                        other => {
                            tracing::warn!("tern serve: syncing imported records: {other:?}");
                            tokio::time::sleep(RETRY).await;
                            continue;
                        }
                    }
                    match self
                        .advance(MigrationState::Pulling, Some(MigrationState::Dropping))
                        .await
                    {
                        Ok(()) => return,
                        Err(e) => tracing::warn!("migration {}: {e}", self.m.id),
                    }
                }
                Err(e) => tracing::warn!(
                    "tern serve: copying migration {} from its source: {e}; retrying",
                    self.m.id
                ),
            }
            tokio::time::sleep(RETRY).await;
        }
    }

    /// Copies every slot of the migration once (again from the start
    /// after a failure: what is here already shadows or skips what comes
    /// again), as files the source exports and this node ingests: string
    /// values part by part, then hashes, sets, sorted sets and lists whole
    /// slots at a time.
    async fn copy_once(&self, rate: u64) -> Result<(), String> {
        let started = Instant::now();
        let mut progress = Progress {
            slots: self.m.slot_count(),
            ..Progress::default()
        };
        // Parts ingested before a restart are not copied again.
        let resume_key = crate::keyspace::copy_resume_key(self.m.id);
        let db = &self.state.store.db;
        let (from_range, from_phase, from_cursor) = match db.get(&resume_key) {
            Ok(Some(v)) if v.len() >= 5 => {
                let range = u32::from_be_bytes([v[0], v[1], v[2], v[3]]) as usize;
                (range, v[4], v[5..].to_vec())
            }
            _ => (0, 0, Vec::new()),
        };
        let note = |range: usize, phase: u8, cursor: &[u8]| {
            let mut v = (range as u32).to_be_bytes().to_vec();
            v.push(phase);
            v.extend_from_slice(cursor);
            // Unsynced: a point lost in a crash only repeats some parts.
            let _ = db.put(&resume_key, &v);
        };
        for (ri, &slots) in self.m.slots.iter().enumerate() {
            if ri < from_range {
                progress.slots_done += usize::from(slots.1 - slots.0) + 1;
                continue;
            }
            for (phase, composites) in [(0u8, false), (1u8, true)] {
                if ri == from_range && phase < from_phase {
                    continue;
                }
                let mut cursor: Vec<u8> = match ri == from_range && phase == from_phase {
                    true => from_cursor.clone(),
                    false => Vec::new(),
                };
                loop {
                    if !self.still(MigrationState::Pulling) {
                        return Err("the migration moved on".into());
                    }
                    let numbers = self
                        .state
                        .store
                        .db
                        .reserve_file_numbers(ingest::PART_FILE_NUMBERS);
                    let exported = self
                        .export(slots, &cursor, composites, numbers.clone())
                        .await;
                    let (part, versions) = match exported {
                        Ok(p) => p,
                        Err(e) => {
                            self.state.store.db.release_file_numbers(&numbers);
                            return Err(e);
                        }
                    };
                    progress.bytes += part.files.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
                    let ingested = match part.files.is_empty() {
                        true => Ok(0),
                        false => self.ingest_part(slots, composites, part.files).await,
                    };
                    if let Some(base) = versions {
                        self.node.ingests.settle_versions(base);
                    }
                    // Numbers the part did not use (or a failed one left).
                    self.state.store.db.release_file_numbers(&numbers);
                    progress.keys += ingested?;
                    // Bounded rate: foreground requests keep the disk and
                    // the committer.
                    if rate > 0 {
                        let due = Duration::from_secs_f64(progress.bytes as f64 / rate as f64);
                        if let Some(wait) = due.checked_sub(started.elapsed()) {
                            tokio::time::sleep(wait).await;
                        }
                    }
                    match part.next {
                        Some(n) => {
                            note(ri, phase, &n);
                            cursor = n;
                        }
                        None => {
                            match phase {
                                0 => note(ri, 1, &[]),
                                _ => note(ri + 1, 0, &[]),
                            }
                            break;
                        }
                    }
                }
            }
            progress.slots_done += usize::from(slots.1 - slots.0) + 1;
            let _ = self.reg.clone().put_progress(self.m.id, &progress).await;
        }
        let _ = db.delete(&resume_key);
        Ok(())
    }

    /// Asks the source for the next part of slots `slots` from `cursor`:
    /// string values, or with `composites` the other values (whose cursor
    /// is the next slot, 2 bytes big-endian), under versions reserved here
    /// from the one returned (the caller settles them,
    /// [`super::ingest::Ingests::settle_versions`]).
    async fn export(
        &self,
        slots: (u16, u16),
        cursor: &[u8],
        composites: bool,
        numbers: std::ops::Range<u64>,
    ) -> Result<(super::migrate::Exported, Option<u64>), String> {
        let store = &self.state.store;
        let gen = store.generation();
        let bytes = self.node.ingests.part_bytes();
        let source = self.source().await?;
        if !composites {
            let part = source.export(slots, cursor, gen, numbers, bytes).await?;
            return Ok((part, None));
        }
        let from = match cursor {
            [] => slots.0,
            [a, b] => u16::from_be_bytes([*a, *b]),
            _ => return Err("a bad composite export cursor".into()),
        };
        let args = vec![
            b"TERN.RESERVEVERSIONS".to_vec(),
            ingest::PART_VERSIONS.to_string().into_bytes(),
        ];
        let base = count_of(&write(&self.state, &self.exec, args).await?).max(0) as u64;
        self.node.ingests.reserve_versions(base);
        let versions = base..base + ingest::PART_VERSIONS;
        match source
            .export_composites((from, slots.1), gen, numbers, versions, bytes)
            .await
        {
            Ok(part) => Ok((part, Some(base))),
            Err(e) => {
                self.node.ingests.settle_versions(base);
                Err(e)
            }
        }
    }

    /// Ingests one exported part of slots `slots` (see
    /// [`super::ingest`]): stages and checks the files, then, with the
    /// slots held, counts and ingests them. Returns the keys it added.
    async fn ingest_part(
        &self,
        slots: (u16, u16),
        composites: bool,
        files: Vec<(tern::ingest::ExportedFile, Vec<u8>)>,
    ) -> Result<u64, String> {
        let id = self.node.ingests.register(ingest::Part {
            slots,
            ..ingest::Part::default()
        });
        let staging = ingest::staging_dir(self.state.store.db.path(), id);
        let res = self
            .ingest_staged(id, slots, composites, files, &staging)
            .await;
        // Ended (or never begun) either way.
        self.node.ingests.forget(id);
        let st = self.state.clone();
        let dir = staging.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let fs = st.store.db.file_system();
            if let Ok(names) = fs.list_dir(&dir) {
                for n in names {
                    let _ = fs.remove_file(&dir.join(n));
                }
            }
            let _ = std::fs::remove_dir(&dir);
        })
        .await;
        res
    }

    async fn ingest_staged(
        &self,
        id: u64,
        slots: (u16, u16),
        composites: bool,
        files: Vec<(tern::ingest::ExportedFile, Vec<u8>)>,
        staging: &std::path::Path,
    ) -> Result<u64, String> {
        // Tombstones of these slots stay until the files are in: they must
        // hide the files' versions of keys deleted here.
        let db = &self.state.store.db;
        let protections: Vec<u64> =
            ingest::protected_ranges(self.state.store.generation(), slots, composites)
                .iter()
                .map(|(lo, hi)| db.protect_tombstones(lo, hi))
                .collect();
        let res = self
            .ingest_protected(id, slots, composites, files, staging)
            .await;
        for p in protections {
            db.unprotect_tombstones(p);
        }
        res
    }

    async fn ingest_protected(
        &self,
        id: u64,
        slots: (u16, u16),
        composites: bool,
        files: Vec<(tern::ingest::ExportedFile, Vec<u8>)>,
        staging: &std::path::Path,
    ) -> Result<u64, String> {
        let list: Vec<_> = files.iter().map(|(f, _)| *f).collect();
        let bytes: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
        let st = self.state.clone();
        let dir = staging.to_path_buf();
        let staged_list = list.clone();
        let staged = tokio::task::spawn_blocking(move || {
            ingest::stage_and_check(&st.store, &dir, files, &staged_list, slots, composites)
        })
        .await
        .map_err(|e| format!("staging a bulk copy part: {e}"))??;
        let checked = staged.checked;
        self.node.ingests.with_part(id, |p| {
            p.records = staged.records;
            p.rewrite = staged.rewrite;
            p.slots = staged.span;
        });
        let begin = vec![b"TERN.INGESTBEGIN".to_vec(), id.to_string().into_bytes()];
        let counted = match write(&self.state, &self.exec, begin).await {
            Ok(r) => count_of(&r).max(0) as u64,
            Err(e) => {
                // Nothing of it took effect; only the hold goes.
                let _ = self.end_ingest(id, b"release").await;
                return Err(format!("starting an ingest: {e}"));
            }
        };
        // The intent, counts and tombstones are durable before the files
        // join the store (the manifest record is synced), whatever
        // appendfsync says: a crash between must find the intent.
        let st = self.state.clone();
        let dir = staging.to_path_buf();
        let ingest_list = list;
        let done = tokio::task::spawn_blocking(move || {
            st.store.db.sync_wal()?;
            st.store.db.ingest_checked(&dir, &ingest_list, checked)
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
        let how: &[u8] = if done.is_ok() { b"ok" } else { b"abort" };
        // A failed end leaves the intent; the next open settles it.
        let ended = self.end_ingest(id, how).await;
        let report = done.map_err(|e| format!("ingesting a bulk copy part: {e}"))?;
        ended.map_err(|e| format!("finishing an ingest: {e}"))?;
        let counters = &self.node.ingests;
        use std::sync::atomic::Ordering::Relaxed;
        counters
            .files
            .fetch_add((report.tables + report.blob_files) as u64, Relaxed);
        counters.bytes.fetch_add(bytes, Relaxed);
        counters.keys.fetch_add(counted, Relaxed);
        Ok(counted)
    }

    /// `TERN.INGESTEND id how`, again while its commit fails (it has the
    /// same effect each time), a few times.
    async fn end_ingest(&self, id: u64, how: &[u8]) -> Result<(), String> {
        let mut last = String::new();
        for _ in 0..5 {
            let end = vec![
                b"TERN.INGESTEND".to_vec(),
                id.to_string().into_bytes(),
                how.to_vec(),
            ];
            match write(&self.state, &self.exec, end).await {
                Ok(_) => return Ok(()),
                Err(e) => last = e,
            }
            tokio::time::sleep(RETRY).await;
        }
        Err(last)
    }

    async fn drop_source(&self, rate: u64) {
        loop {
            if !self.still(MigrationState::Dropping) {
                return;
            }
            let mut ok = true;
            for slot in self.m.each_slot() {
                if let Err(e) = drop_slot(&self.state, &self.exec, slot, rate).await {
                    tracing::warn!("tern serve: dropping slot {slot}: {e}; retrying");
                    ok = false;
                    break;
                }
            }
            if ok {
                match self.advance(MigrationState::Dropping, None).await {
                    Ok(()) => {
                        let _ = self.reg.clone().clear_progress(self.m.id).await;
                        return;
                    }
                    Err(e) => tracing::warn!("migration {}: {e}", self.m.id),
                }
            }
            tokio::time::sleep(RETRY).await;
        }
    }
}

/// Deletes every key of `slot` here, in committer jobs of
/// [`DROP_BATCH`], at most `rate / 1 KiB` keys a second (0: unbounded):
/// deletes are writes, and foreground writes share the committer.
async fn drop_slot(state: &Arc<State>, exec: &Exec, slot: u16, rate: u64) -> Result<(), String> {
    let keys_per_sec = (rate / 1024).max(1);
    loop {
        let args = vec![
            b"TERN.DROPSLOT".to_vec(),
            slot.to_string().into_bytes(),
            DROP_BATCH.to_string().into_bytes(),
        ];
        let n = count_of(&write(state, exec, args).await?);
        if n == 0 {
            return Ok(());
        }
        if rate > 0 {
            tokio::time::sleep(Duration::from_secs_f64(n as f64 / keys_per_sec as f64)).await;
        }
    }
}

/// Drops keys of slots this node neither serves nor still has to hand
/// over, and import markers of slots it no longer imports.
async fn clean_leftovers(
    node: &Arc<ClusterNode>,
    state: &Arc<State>,
    exec: &Exec,
    rate: u64,
) -> Result<(), String> {
    let st = state.clone();
    let (key_slots, marker_slots) = tokio::task::spawn_blocking(move || st.store.occupied_slots())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    // Decided with the view now; the view is not held while dropping (a
    // topology change waits for no cleanup), and `TERN.DROPSLOT` checks
    // again, with the view current when it runs, that the slot is not
    // served here.
    let (drop_slots, importing) = {
        let view = node.view();
        let Some(t) = view.topology.as_ref() else {
            return Ok(());
        };
        let me = &node.info.id;
        let drop_slots: Vec<u16> = key_slots
            .into_iter()
            .filter(|&slot| {
                let handing_over = t.migration_of(slot).is_some_and(|m| &m.from == me);
                !view.serves(slot) && !handing_over && t.node(me).is_some()
            })
            .collect();
        (drop_slots, view.importing())
    };
    for slot in drop_slots {
        tracing::info!("tern serve: dropping keys of slot {slot}, which this node no longer owns");
        drop_slot(state, exec, slot, rate).await?;
    }
    for slot in marker_slots {
        if importing.as_ref().is_some_and(|s| s.contains(slot)) {
            continue;
        }
        loop {
            let args = vec![
                b"TERN.CLEARMARKS".to_vec(),
                slot.to_string().into_bytes(),
                DROP_BATCH.to_string().into_bytes(),
            ];
            if count_of(&write(state, exec, args).await?) == 0 {
                break;
            }
        }
    }
    Ok(())
}
