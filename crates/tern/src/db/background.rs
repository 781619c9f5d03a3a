//! Background threads: one flushes immutable memtables, one compacts, one
//! collects blob garbage, one syncs the WAL as it grows.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::core::Shared;
use crate::error::Error;

/// Consecutive compaction failures (with back-off in between, about 3 s
/// in all) after which the store stops accepting writes and reports the
/// cause, instead of letting writers stall behind L0 that nothing lowers.
/// Blob GC stalls no writer, so it only keeps retrying and counting.
pub const BACKGROUND_ATTEMPTS: u32 = 5;

/// Back-off before retrying after `failures` consecutive failures.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64 << failures.min(6))
}

/// Waits `wait` (other threads' wake-ups for new work do not cut it short)
/// unless the store shuts down first. Returns false on shutdown.
fn sleep_unless_shutting_down(
    s: &Shared,
    state: &mut parking_lot::MutexGuard<'_, super::core::State>,
    wait: Duration,
) -> bool {
    let deadline = std::time::Instant::now() + wait;
    while !state.shutting_down {
        if s.bg_work.wait_until(state, deadline).timed_out() {
            return true;
        }
    }
    false
}

/// Records one more consecutive failure of `what`. With `poisons`, the
/// [`BACKGROUND_ATTEMPTS`]th poisons the store with `e` as the cause;
/// otherwise failures are only logged (and retried by the caller).
fn after_failure(s: &Shared, failures: u32, what: &str, e: &Error, poisons: bool) {
    let mut state = s.state.lock();
    if state.bg_error.is_some() {
        // The failure already poisoned the store (a manifest write): no retry.
        return;
    }
    if failures < BACKGROUND_ATTEMPTS {
        tracing::warn!("tern: {what} failed (attempt {failures}), will retry: {e}");
    } else if poisons {
        s.set_bg_error_message(
            &mut state,
            format!("{what} failed {failures} times in a row, last with: {e}"),
        );
    } else {
        tracing::error!("tern: {what} failed {failures} times in a row, still retrying: {e}");
    }
}

/// Starts the flush and compaction threads.
pub fn start(shared: &Arc<Shared>) -> std::io::Result<Vec<JoinHandle<()>>> {
    let flush = {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("tern-flush".into())
            .spawn(move || flush_loop(&s))?
    };
    let compact = {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("tern-compact".into())
            .spawn(move || compaction_loop(&s))?
    };
    let gc = {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("tern-gc".into())
            .spawn(move || gc_loop(&s))?
    };
    let wal_sync = {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("tern-wal-sync".into())
            .spawn(move || super::wal_sync::syncer_loop(&s))?
    };
    Ok(vec![flush, compact, gc, wal_sync])
}

fn gc_loop(s: &Shared) {
    let mut failures = 0u32;
    loop {
        {
            let mut state = s.state.lock();
            if state.shutting_down {
                return;
            }
            if failures > 0 {
                if !sleep_unless_shutting_down(s, &mut state, backoff(failures)) {
                    return;
                }
            } else {
                s.bg_work.wait_for(&mut state, Duration::from_millis(500));
                if state.shutting_down {
                    return;
                }
            }
        }
        if !s.opts.enable_gc {
            continue;
        }
        // Keep collecting while there is work, then go back to waiting.
        loop {
            match s.gc_one() {
                Ok(true) => failures = 0,
                Ok(false) => {
                    failures = 0;
                    break;
                }
                Err(e) => {
                    failures += 1;
                    super::stats::Counters::add(&s.counters.gc_failures, 1);
                    after_failure(s, failures, "blob GC", &e, false);
                    break;
                }
            }
        }
    }
}

fn flush_loop(s: &Shared) {
    loop {
        {
            let mut state = s.state.lock();
            while !state.shutting_down && (state.imms.is_empty() || state.bg_error.is_some()) {
                s.bg_work.wait(&mut state);
            }
            if state.shutting_down && (state.imms.is_empty() || state.bg_error.is_some()) {
                return;
            }
        }
        // Errors are recorded as the background error inside.
        let _ = s.flush_one();
    }
}

fn compaction_loop(s: &Shared) {
    // Consecutive failures, for back-off and giving up.
    let mut failures = 0u32;
    loop {
        {
            let mut state = s.state.lock();
            if state.shutting_down {
                return;
            }
            // Back off after failures so a persistent error does not spin
            // and a short-lived one has time to clear.
            if failures > 0 && !sleep_unless_shutting_down(s, &mut state, backoff(failures)) {
                return;
            }
        }
        match s.compact_one() {
            Ok(true) => failures = 0,
            Ok(false) => {
                failures = 0;
                let mut state = s.state.lock();
                if !state.shutting_down {
                    s.bg_work.wait_for(&mut state, Duration::from_secs(1));
                }
                // Files an install could not delete because a reader still
                // held a version listing them: without this they would
                // wait for the next install, which may never come.
                let doomed = s.take_obsolete_files(&mut state);
                drop(state);
                s.remove_files(doomed);
            }
            Err(e) => {
                failures += 1;
                after_failure(s, failures, "compaction", &e, true);
            }
        }
    }
}
