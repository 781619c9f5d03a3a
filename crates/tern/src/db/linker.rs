//! Waking the thread that orders large commit groups into the memtable's
//! list (`tern-link`, its body in `background.rs`).
//!
//! A group of [`DEFER_MIN`] entries or more goes into the memtable with
//! [`crate::memtable::MemTable::add_all_deferred`]: the group leader only
//! writes each entry and puts it in the hash index, and that thread links
//! them into the skiplist (a sorted run, each search starting where the last
//! ended). Under a pipelined load the list's searches, most of a commit's
//! CPU time, so run beside the next commit instead of inside it. Readers
//! that need the list link a small backlog themselves or merge its sorted
//! runs with the list, so nothing depends on this thread keeping up.
//!
//! For the active memtable the thread waits until a run of
//! [`crate::memtable::LAZY_LINK_BATCH`] nodes has gathered, unless a reader
//! needed the list in the last second: a long sorted run links for about
//! half the CPU of runs the size of one group, and point reads, which find
//! the newest versions through the index, never wait for it. An iterator
//! that found nodes waiting wakes the thread, so a backlog that writes
//! left behind is linked once readers want it.

use parking_lot::{Condvar, Mutex};

/// Groups at least this large are linked by the linker thread; smaller ones
/// are linked by the leader as they go in (waking a thread would cost more).
pub const DEFER_MIN: usize = 64;

#[derive(Debug, Default)]
struct Work {
    requested: bool,
    stopping: bool,
}

/// Wakes the linker thread.
#[derive(Debug, Default)]
pub struct Linker {
    work: Mutex<Work>,
    cv: Condvar,
}

impl Linker {
    /// Asks the thread to link what the memtables hold deferred.
    pub fn wake(&self) {
        let mut w = self.work.lock();
        if !w.requested {
            w.requested = true;
            self.cv.notify_one();
        }
    }

    /// Tells the thread to exit.
    pub fn stop(&self) {
        self.work.lock().stopping = true;
        self.cv.notify_one();
    }

    /// Waits for a request; `false` once stopped.
    pub fn next(&self) -> bool {
        let mut w = self.work.lock();
        while !w.requested && !w.stopping {
            self.cv.wait(&mut w);
        }
        w.requested = false;
        !w.stopping
    }
}
