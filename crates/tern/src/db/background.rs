//! Background threads: one flushes immutable memtables, one compacts, one
//! collects blob garbage.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::core::Shared;

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
    Ok(vec![flush, compact, gc])
}

fn gc_loop(s: &Shared) {
    let mut failures = 0u32;
    loop {
        {
            let mut state = s.state.lock();
            if state.shutting_down {
                return;
            }
            let wait = if failures > 0 {
                Duration::from_millis(100u64 << failures.min(6))
            } else {
                Duration::from_millis(500)
            };
            s.bg_work.wait_for(&mut state, wait);
            if state.shutting_down {
                return;
            }
        }
        if !s.opts.enable_gc {
            continue;
        }
        // Keep collecting while there is work, then go back to waiting.
        loop {
            match s.gc_one() {
                Ok(true) => failures = 0,
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!("tern: blob GC failed, will retry: {e}");
                    failures += 1;
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
    loop {
        {
            let mut state = s.state.lock();
            if state.shutting_down {
                return;
            }
            if state.compaction_failures > 0 {
                // Back off after failures so a persistent error does not spin.
                let wait = Duration::from_millis(100u64 << state.compaction_failures.min(6));
                s.bg_work.wait_for(&mut state, wait);
                if state.shutting_down {
                    return;
                }
            }
        }
        match s.compact_one() {
            Ok(true) => s.state.lock().compaction_failures = 0,
            Ok(false) => {
                let mut state = s.state.lock();
                if !state.shutting_down {
                    s.bg_work.wait_for(&mut state, Duration::from_secs(1));
                }
            }
            Err(e) => {
                tracing::warn!("tern: compaction failed, will retry: {e}");
                s.state.lock().compaction_failures += 1;
            }
        }
    }
}
