//! The commit queue: writes wait here in arrival order; the writer at the
//! front leads a group (see `write.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::error::Result;
use crate::format::write_batch::WriteBatch;
use crate::options::WriteOptions;

/// Pending writes, oldest first.
pub type CommitQueue = Mutex<VecDeque<Arc<Writer>>>;

/// A pending write in the commit queue.
pub struct Writer {
    /// Taken by the group leader.
    pub(super) batch: Mutex<Option<WriteBatch>>,
    /// Encoded size of the batch, so grouping needs no lock per writer.
    pub(super) size: usize,
    pub(super) opts: WriteOptions,
    /// Switch the memtable even if it is not full (used by `flush`).
    pub(super) force_switch: bool,
    pub(super) result: Mutex<Option<Result<()>>>,
    pub(super) cv: Condvar,
}

impl Writer {
    pub(super) fn new(
        batch: Option<WriteBatch>,
        opts: WriteOptions,
        force_switch: bool,
    ) -> Arc<Self> {
        Arc::new(Writer {
            size: batch.as_ref().map_or(0, WriteBatch::approximate_size),
            batch: Mutex::new(batch),
            opts,
            force_switch,
            result: Mutex::new(None),
            cv: Condvar::new(),
        })
    }
}
