//! What the committer and the read pool are doing, for INFO and `/metrics`
//! (kept apart from them so the shared state can hold it).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

/// The committer's and the read pool's counters.
#[derive(Debug)]
pub struct ExecStatus {
    epoch: Instant,
    /// Write jobs waiting for the committer.
    pub write_queue: AtomicUsize,
    /// Microseconds after `epoch` when the running group started; 0: idle.
    busy_since: AtomicU64,
    /// Engine commits made.
    pub commits: AtomicU64,
    /// The longest a group has taken, microseconds.
    pub longest_group_micros: AtomicU64,
    /// Read jobs waiting for a reader thread.
    pub read_queue: AtomicUsize,
}

impl Default for ExecStatus {
    fn default() -> Self {
        ExecStatus {
            epoch: Instant::now(),
            write_queue: AtomicUsize::new(0),
            busy_since: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            longest_group_micros: AtomicU64::new(0),
            read_queue: AtomicUsize::new(0),
        }
    }
}

impl ExecStatus {
    fn now_micros(&self) -> u64 {
        (self.epoch.elapsed().as_micros() as u64).max(1)
    }

    /// Marks the start of a commit group; returns its start time.
    pub fn group_started(&self) -> u64 {
        let t = self.now_micros();
        self.busy_since.store(t, Relaxed);
        t
    }

    /// Marks the end of the group started at `start`.
    pub fn group_finished(&self, start: u64) {
        self.busy_since.store(0, Relaxed);
        self.longest_group_micros
            .fetch_max(self.now_micros().saturating_sub(start), Relaxed);
    }

    /// How long the running group has taken so far, microseconds; 0 when
    /// the committer is idle. A large value means writes are waiting on
    /// the engine (a stall or a slow fsync).
    pub fn busy_micros(&self) -> u64 {
        match self.busy_since.load(Relaxed) {
            0 => 0,
            t => self.now_micros().saturating_sub(t),
        }
    }
}
