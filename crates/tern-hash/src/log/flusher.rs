//! The flusher: writes the log below `safe_read_only` to its segment files,
//! in address order, and keeps the epoch moving while sessions are idle so
//! deferred region moves take effect.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::HybridLog;

/// Starts the flusher thread of `log`; it ends once the log is shut down
/// (see [`HybridLog::shut_down`]) and everything read-only is flushed.
pub fn spawn_flusher(log: Arc<HybridLog>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tern-hash-flush".into())
        .spawn(move || run(&log))
}

fn run(log: &HybridLog) {
    let handle = log.register();
    let regions = &log.regions;
    let mut buf = Vec::new();
    loop {
        handle.pin().flush();
        if regions.check().is_err() {
            return;
        }
        let target = regions.safe_read_only.load(Ordering::Acquire);
        let mut from = regions.flushed.load(Ordering::Acquire);
        if from >= target {
            if regions.shutdown.load(Ordering::Acquire) {
                return;
            }
            let mut g = regions.wake.lock();
            regions
                .flusher_wake
                .wait_for(&mut g, Duration::from_millis(5));
            continue;
        }
        while from < target {
            let page_end = ((from >> log.page_bits) + 1) << log.page_bits;
            let to = target.min(page_end);
            log.copy_out(from, to, &mut buf);
            if let Err(e) = log.segments.write(from, &buf) {
                regions.stop(format!("flushing the log at {from:#x}: {e}"));
                return;
            }
            from = to;
            regions.flushed.store(from, Ordering::Release);
        }
        regions.notify_progress();
    }
}

impl HybridLog {
    /// Asks the flusher to finish: it flushes what is read-only and exits.
    pub fn shut_down(&self) {
        self.regions.shutdown.store(true, Ordering::Release);
        self.regions.wake_flusher();
    }
}
