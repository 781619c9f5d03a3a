//! The active WAL and its background syncer.
//!
//! A memtable switch retires the old WAL without syncing it: a whole
//! memtable's worth of WAL takes tens of milliseconds to fsync, during
//! which every writer would wait. The syncer thread syncs retired WALs in
//! number order ([`WalSyncer::sync_retired`]); whoever needs a newer WAL
//! durable (a synced write, `sync_wal`, close) syncs them first, so a
//! synced record never follows an unsynced one. Until then a crash may
//! keep a later WAL's records and lose an earlier one's, so recovery
//! stops at the first damaged WAL and drops the later ones
//! (`docs/format/wal.md`). Once the retired WALs are durable, the next
//! group written writes a sync mark naming them, so that recovery can
//! still tell damage to a synced WAL from a crash.
//!
//! Once `wal_bytes_per_sync` bytes were appended since the last request,
//! the group leader also asks the syncer to start writeback of the active
//! WAL through a second handle, off every lock (`sync_file_range`, as
//! RocksDB's option of the same name: no journal commit, no wait for the
//! device), so the eventual fsync finds little left to write. The same
//! handle lets `sync_wal` fsync without holding the WAL mutex.
//!
//! The handle is a separate open file description, not a duplicated
//! descriptor: Linux reports a writeback error once per open file
//! description, so with a shared one the syncer could consume an error the
//! leader's own sync then would not see. A failed background writeback or
//! sync poisons the store like a failed synced write.
//!
//! The syncer also creates the next WAL ahead of each switch
//! ([`WalSyncer::prepare`]): creating a file is cheap, but making its name
//! durable takes a directory fsync, measured at 17–110 ms while a flush
//! and a compaction write (`docs/engine.md`). The switch then finds the
//! WAL ready and does no I/O beyond handing the old one over.
//!
//! The handle itself is shared by the syncer and every `sync_wal` caller,
//! so it is gated ([`GatedSync`]): one sync through it at a time, and once
//! one failed every later one fails too. Otherwise of two overlapping
//! fsyncs the one that lost the race could report success for bytes the
//! failed writeback dropped, before the other's failure poisoned the store.

use std::collections::VecDeque;
use std::io;
use std::path::Path;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::format::log_record::SyncMark;
use crate::io::FileSync;
use crate::wal::{wal_file_name, LogWriter};

/// The WAL receiving writes; only the group leader (and `sync_wal`,
/// switches and shutdown, under the same mutex) touches it.
pub struct ActiveWal {
    /// File number.
    pub number: u64,
    /// Appends records.
    pub writer: LogWriter,
    /// Syncs the same file from the syncer thread.
    sync: Arc<dyn FileSync>,
    /// `writer.len()` when a background sync was last requested.
    requested_at: u64,
    /// The WAL retired when this one became active, until a sync mark
    /// naming it (or a newer one) is written here.
    mark_due: Option<u64>,
}

impl ActiveWal {
    /// Wraps a new WAL's writer, opening its sync handle.
    pub fn new(number: u64, writer: LogWriter) -> std::io::Result<ActiveWal> {
        Ok(ActiveWal {
            number,
            sync: Arc::new(GatedSync::new(writer.sync_handle()?)),
            requested_at: writer.len(),
            writer,
            mark_due: None,
        })
    }

    /// Becomes the active WAL in place of `old`, which `syncer` syncs
    /// later; `old`'s buffered records go to the operating system first.
    /// Its first record names `old` and its length, so that recovery can
    /// tell `old` was cut short by a crash even where the cut falls
    /// between two records.
    pub fn replace(&mut self, mut old: ActiveWal, syncer: &WalSyncer) -> io::Result<()> {
        old.writer.flush()?;
        let mark = SyncMark {
            number: old.number,
            len: old.writer.len(),
        };
        self.writer.add_predecessor(mark)?;
        syncer.retire(mark, old.sync);
        self.mark_due = Some(mark.number);
        Ok(())
    }

    /// Writes a sync mark when one is due and the retired WALs it names are
    /// durable (the group leader calls this before its record).
    pub fn add_due_mark(&mut self, syncer: &WalSyncer) -> io::Result<()> {
        let Some(due) = self.mark_due else {
            return Ok(());
        };
        if let Some(mark) = syncer.synced().filter(|m| m.number >= due) {
            self.writer.add_sync_mark(mark)?;
            self.mark_due = None;
        }
        Ok(())
    }

    /// A handle that syncs this WAL without its mutex held.
    pub fn sync_handle(&self) -> Arc<dyn FileSync> {
        self.sync.clone()
    }

    /// After an append: hands the WAL to `syncer` when `per_sync` bytes
    /// (0: never) accumulated since the last request. `synced` says the
    /// append was synced already.
    pub fn after_append(&mut self, syncer: &WalSyncer, per_sync: u64, synced: bool) {
        let len = self.writer.len();
        if synced {
            self.requested_at = len;
        } else if per_sync > 0 && len - self.requested_at >= per_sync {
            self.requested_at = len;
            syncer.request(self.number, self.sync.clone());
        }
    }
}

/// The pending requests (at most one writeback: a newer one covers an
/// older one of the same WAL, and a retired WAL is synced whole).
#[derive(Default)]
struct Pending {
    wal: Option<(u64, Arc<dyn FileSync>)>,
    /// Retired WALs wait to be synced.
    retired: bool,
    prepare: bool,
    /// The syncer thread is running a job.
    busy: bool,
    stop: bool,
}

impl Pending {
    fn idle(&self) -> bool {
        self.stop || !(self.busy || self.retired || self.prepare || self.wal.is_some())
    }
}

/// What the syncer thread is asked to do next.
pub(super) enum SyncJob {
    /// Start writeback of WAL `.0` through `.1`.
    Writeback(u64, Arc<dyn FileSync>),
    /// Sync the retired WALs ([`WalSyncer::sync_retired`]).
    SyncRetired,
    /// Create the WAL the next switch takes (see [`WalSyncer::take_spare`]).
    Prepare,
}

/// Hands sync requests to the syncer thread, and the WAL it prepared to the
/// next memtable switch.
#[derive(Default)]
pub struct WalSyncer {
    pending: Mutex<Pending>,
    cv: Condvar,
    /// Signalled when the syncer thread runs out of work.
    idle: Condvar,
    /// A new, empty WAL whose directory entry is durable.
    spare: Mutex<Option<ActiveWal>>,
    /// WALs a switch retired, not yet synced, oldest first.
    retired: Mutex<VecDeque<(SyncMark, Arc<dyn FileSync>)>>,
    /// Held while retired WALs are synced, so that they become durable in
    /// number order.
    retired_order: Mutex<()>,
    /// The newest retired WAL synced.
    synced: Mutex<Option<SyncMark>>,
}

impl WalSyncer {
    /// Asks for WAL `number` to be synced through `sync`.
    pub fn request(&self, number: u64, sync: Arc<dyn FileSync>) {
        self.pending.lock().wal = Some((number, sync));
        self.cv.notify_one();
    }

    /// Hands over WAL `mark.number`, retired by a switch, to be synced
    /// through `sync` in number order.
    fn retire(&self, mark: SyncMark, sync: Arc<dyn FileSync>) {
        self.retired.lock().push_back((mark, sync));
        self.pending.lock().retired = true;
        self.cv.notify_one();
    }

    /// Syncs every retired WAL, oldest first; once this returns `Ok` every
    /// WAL retired before the call is durable. `dir` names them in errors.
    /// A failure leaves the WAL queued (its gated handle fails every later
    /// sync too), and the caller poisons the store.
    pub fn sync_retired(&self, dir: &Path) -> Result<()> {
        let _order = self.retired_order.lock();
        loop {
            let Some((mark, sync)) = self.retired.lock().front().cloned() else {
                return Ok(());
            };
            sync.sync_data()
                .map_err(|e| Error::io(dir.join(wal_file_name(mark.number)), e))?;
            self.retired.lock().pop_front();
            *self.synced.lock() = Some(mark);
        }
    }

    /// The newest retired WAL synced so far (with every older one).
    pub fn synced(&self) -> Option<SyncMark> {
        *self.synced.lock()
    }

    /// Asks for the next WAL to be created ahead of the switch that needs
    /// it (nothing happens if one is ready).
    pub fn prepare(&self) {
        self.pending.lock().prepare = true;
        self.cv.notify_one();
    }

    /// Waits until the syncer thread has no job running or pending, so
    /// that a failure in one has poisoned the store by the time this
    /// returns. Only for a caller that stopped writing: new writes keep
    /// asking for work.
    pub fn wait_idle(&self) {
        let mut p = self.pending.lock();
        while !p.idle() {
            self.idle.wait(&mut p);
        }
    }

    /// Whether a prepared WAL is waiting.
    #[cfg(test)]
    pub fn has_spare(&self) -> bool {
        self.spare.lock().is_some()
    }

    /// Keeps `wal` for the next switch.
    pub fn put_spare(&self, wal: ActiveWal) {
        *self.spare.lock() = Some(wal);
    }

    /// The prepared WAL, if one is waiting.
    pub fn take_spare(&self) -> Option<ActiveWal> {
        self.spare.lock().take()
    }

    /// Makes the syncer thread return (dropping any pending request: the
    /// caller syncs the WAL itself on close).
    pub fn stop(&self) {
        self.pending.lock().stop = true;
        self.cv.notify_one();
        self.idle.notify_all();
    }

    /// The next request, or None once stopped; called by the syncer
    /// thread once it finished the job it took before. Retired WALs come
    /// first (they bound what a crash may lose), then writeback.
    pub(super) fn next(&self) -> Option<SyncJob> {
        let mut p = self.pending.lock();
        p.busy = false;
        loop {
            if p.stop {
                return None;
            }
            if std::mem::take(&mut p.retired) {
                p.busy = true;
                return Some(SyncJob::SyncRetired);
            }
            if let Some((number, sync)) = p.wal.take() {
                p.busy = true;
                return Some(SyncJob::Writeback(number, sync));
            }
            if std::mem::take(&mut p.prepare) {
                p.busy = true;
                return Some(SyncJob::Prepare);
            }
            self.idle.notify_all();
            self.cv.wait(&mut p);
        }
    }
}

/// A sync handle shared by several threads: syncs through it run one at a
/// time, and after one fails every later one reports that failure (Linux
/// would report it only once per open file description, then succeed
/// without the bytes it dropped).
pub struct GatedSync {
    inner: Arc<dyn FileSync>,
    /// Held across each sync; holds the first failure's kind and message
    /// once a sync failed.
    gate: Mutex<Option<(io::ErrorKind, String)>>,
}

impl GatedSync {
    /// Gates `inner`.
    pub fn new(inner: Arc<dyn FileSync>) -> GatedSync {
        GatedSync {
            inner,
            gate: Mutex::new(None),
        }
    }

    /// Runs `op` under the gate, recording its failure for every later
    /// caller. Waiting callers queue behind the one syncing, which is
    /// where their fsyncs would wait anyway.
    fn gated(&self, op: impl FnOnce(&dyn FileSync) -> io::Result<()>) -> io::Result<()> {
        let mut failed = self.gate.lock();
        if let Some((kind, first)) = &*failed {
            return Err(io::Error::new(
                *kind,
                format!(
                    "an earlier sync of this file failed ({first}); its bytes may not be on disk"
                ),
            ));
        }
        let res = op(&*self.inner);
        if let Err(e) = &res {
            *failed = Some((e.kind(), e.to_string()));
        }
        res
    }
}

impl FileSync for GatedSync {
    fn sync_data(&self) -> io::Result<()> {
        self.gated(|s| s.sync_data())
    }

    fn start_writeback(&self) -> io::Result<()> {
        self.gated(|s| s.start_writeback())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Fails its first sync, then succeeds: what Linux does on one open
    /// file description after a writeback error.
    #[derive(Default)]
    struct ReportsOnce(AtomicU32);

    impl FileSync for ReportsOnce {
        fn sync_data(&self) -> io::Result<()> {
            match self.0.fetch_add(1, Ordering::Relaxed) {
                0 => Err(io::Error::new(io::ErrorKind::StorageFull, "ENOSPC")),
                _ => Ok(()),
            }
        }
    }

    #[test]
    fn a_failure_is_reported_to_every_later_sync() {
        let inner = Arc::new(ReportsOnce::default());
        let gated = GatedSync::new(inner.clone());
        assert!(gated.sync_data().is_err());
        let later = gated.sync_data().unwrap_err();
        assert_eq!(
            later.kind(),
            io::ErrorKind::StorageFull,
            "the first failure's kind"
        );
        assert!(
            later.to_string().contains("ENOSPC"),
            "names the first failure: {later}"
        );
        assert!(gated.start_writeback().is_err());
        assert_eq!(
            inner.0.load(Ordering::Relaxed),
            1,
            "no sync after the failure"
        );
    }

    #[test]
    fn successful_syncs_pass_through() {
        let inner = Arc::new(ReportsOnce(AtomicU32::new(1)));
        let gated = GatedSync::new(inner.clone());
        gated.sync_data().unwrap();
        gated.start_writeback().unwrap();
        assert_eq!(inner.0.load(Ordering::Relaxed), 3);
    }
}
