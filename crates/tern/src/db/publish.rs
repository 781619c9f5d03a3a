//! Writes made now and published later.
//!
//! A synced write is an append, an fsync and a memtable insert, one after
//! the other, and a writer that issues them one group at a time leaves the
//! device idle while it prepares the next group and the CPU idle while it
//! waits for the fsync. [`Db::write_unpublished`] splits the commit: the
//! batch goes to the WAL (not synced) and into the memtable under sequence
//! numbers above the visible one, so no reader sees it, and the returned
//! [`Unpublished`] syncs the WAL and publishes it later, from any thread.
//! Meanwhile the writer prepares and writes its next batch; reads it makes
//! inside [`Db::read_own_writes`] see its unpublished writes.
//!
//! Publication is in order of writing: a write waits until every write
//! before it was published, so the visible sequence only ever covers a
//! prefix of the history (each synced, for unpublished writes). Unpublished
//! writes stay in the active memtable: a switch waits until they are
//! published, since a flush takes every version it holds as readable.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::core::Shared;
use super::Db;
use crate::error::{Error, Result};
use crate::format::internal_key::SeqNo;
use crate::format::write_batch::WriteBatch;
use crate::io::FileSync;

/// Longest a waiting writer sleeps before it looks again (a safety net:
/// publishers wake waiters).
const RECHECK: Duration = Duration::from_millis(1);

/// Where writers wait for the writes before theirs to be published.
#[derive(Default)]
pub struct Publication {
    mx: Mutex<()>,
    cv: Condvar,
    waiters: AtomicUsize,
}

/// The sequence range an unpublished write took and the WAL it went to.
pub struct Written {
    pub(super) first: SeqNo,
    pub(super) last: SeqNo,
    /// The WAL's path and a handle that syncs it; `None` without a WAL.
    pub(super) wal: Option<(PathBuf, Arc<dyn FileSync>)>,
}

impl Written {
    /// An empty write that would have started at `first`.
    pub(super) fn empty(first: SeqNo) -> Written {
        Written {
            first,
            last: first - 1,
            wal: None,
        }
    }
}

impl Shared {
    /// Whether every write in the memtable is visible.
    pub(super) fn all_published(&self) -> bool {
        self.visible_seq.load(Ordering::Acquire) == self.written_seq.load(Ordering::Acquire)
    }

    /// Makes `first..=last` visible once every write before it is.
    pub(super) fn publish_in_order(&self, first: SeqNo, last: SeqNo) -> Result<()> {
        if self.visible_seq.load(Ordering::Acquire) < first - 1 {
            self.await_published(first - 1)?;
        }
        if last >= first {
            // SeqCst with the load of `waiters`, so a waiter that counted
            // itself before this store is always woken.
            self.visible_seq.store(last, Ordering::SeqCst);
            if self.publication.waiters.load(Ordering::SeqCst) > 0 {
                drop(self.publication.mx.lock());
                self.publication.cv.notify_all();
            }
        }
        Ok(())
    }

    /// Waits until `seq` is visible; refuses once the store is poisoned
    /// (an unpublished write that failed or was dropped is never
    /// published).
    pub(super) fn await_published(&self, seq: SeqNo) -> Result<()> {
        let p = &self.publication;
        p.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = p.mx.lock();
        let result = loop {
            if self.visible_seq.load(Ordering::SeqCst) >= seq {
                break Ok(());
            }
            if let Some(e) = self.bg_error_seen.lock().clone() {
                break Err(Error::Poisoned(e));
            }
            p.cv.wait_for(&mut g, RECHECK);
        };
        drop(g);
        p.waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// The sequence a read without a snapshot reads at on this thread.
    pub(super) fn read_seq(&self) -> SeqNo {
        if OWN_WRITES.get() == self as *const Shared as usize {
            self.written_seq.load(Ordering::Acquire)
        } else {
            self.visible_seq.load(Ordering::Acquire)
        }
    }
}

thread_local! {
    /// The store whose unpublished writes this thread's reads see (its
    /// `Shared`'s address), or 0.
    static OWN_WRITES: Cell<usize> = const { Cell::new(0) };
}

/// While alive, reads of its store on this thread see unpublished writes
/// ([`Db::read_own_writes`]).
pub struct OwnWrites<'a> {
    prev: usize,
    _db: std::marker::PhantomData<&'a Db>,
    /// Tied to the thread whose reads it changes.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for OwnWrites<'_> {
    fn drop(&mut self) {
        OWN_WRITES.set(self.prev);
    }
}

/// A write that is in the WAL (not yet synced) and the memtable, but that
/// no reader sees yet: [`Unpublished::publish`] syncs the WAL and makes it
/// visible. Dropping it unpublished poisons the store (the write can never
/// be published, and every later write waits behind it).
#[must_use = "an unpublished write that is dropped poisons the store"]
pub struct Unpublished {
    shared: Arc<Shared>,
    written: Written,
    done: bool,
}

impl std::fmt::Debug for Unpublished {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unpublished")
            .field("first", &self.written.first)
            .field("last", &self.written.last)
            .finish()
    }
}

impl Unpublished {
    /// The last sequence number the write took (the one before it, for an
    /// empty write).
    pub fn last_seq(&self) -> SeqNo {
        self.written.last
    }

    /// Syncs the WAL through this write: it and every write before it are
    /// then durable. A failure poisons the store.
    pub fn sync(&self) -> Result<()> {
        let s = &self.shared;
        if s.synced_seq.load(Ordering::Acquire) >= self.written.last {
            return Ok(());
        }
        if let Some((path, sync)) = &self.written.wal {
            if let Err(e) = sync.sync_data().map_err(|e| Error::io(path, e)) {
                s.set_bg_error(&mut s.state.lock(), &e);
                return Err(e);
            }
            super::stats::Counters::add(&s.counters.wal_syncs, 1);
        }
        s.synced_seq.fetch_max(self.written.last, Ordering::AcqRel);
        Ok(())
    }

    /// Syncs the WAL through this write unless a later write's sync did,
    /// waits until every earlier write is published, then makes this one
    /// visible. Refuses (leaving it unpublished for good) once the store is
    /// poisoned: a write after a failed one may have read it.
    pub fn publish(mut self) -> Result<()> {
        self.done = true;
        let s = self.shared.clone();
        if let Some(e) = s.bg_error_seen.lock().clone() {
            return Err(Error::Poisoned(e));
        }
        self.sync()?;
        s.publish_in_order(self.written.first, self.written.last)
    }
}

impl Drop for Unpublished {
    fn drop(&mut self) {
        if !self.done && self.written.last >= self.written.first {
            let s = &self.shared;
            s.set_bg_error_message(
                &mut s.state.lock(),
                "an unpublished write was dropped; reopen the store".into(),
            );
        }
    }
}

impl Db {
    /// Writes `batch` to the WAL and the memtable now and leaves it
    /// unpublished: no reader sees it until [`Unpublished::publish`] syncs
    /// the WAL and makes it visible, which may run on another thread while
    /// this one writes on. Writes are published in the order they were
    /// written, whichever way they were made. See also
    /// [`Db::read_own_writes`].
    ///
    /// A write that needs a new memtable, [`Db::flush`] and [`Db::close`]
    /// wait until every unpublished write is published or dropped: hand
    /// each one to whoever publishes it before writing again.
    pub fn write_unpublished(&self, batch: WriteBatch) -> Result<Unpublished> {
        // The same checks as `write`, on an empty batch too.
        self.check_batch(&batch)?;
        let written = self.shared.write_unpublished(batch)?;
        Ok(Unpublished {
            shared: self.shared.clone(),
            written,
            done: false,
        })
    }

    /// While the returned guard lives, reads of this store made on this
    /// thread without a snapshot also see its unpublished writes (those of
    /// every thread): what the writer of a pipeline of
    /// [`Db::write_unpublished`] batches needs to read the batches before.
    pub fn read_own_writes(&self) -> OwnWrites<'_> {
        let addr = Arc::as_ptr(&self.shared) as usize;
        OwnWrites {
            prev: OWN_WRITES.replace(addr),
            _db: std::marker::PhantomData,
            _not_send: std::marker::PhantomData,
        }
    }
}
