//! Background threads: one flushes immutable memtables, one compacts, one
//! collects blob garbage, one syncs the WAL as it grows.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::core::Shared;
use crate::error::{Error, IoContext};

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

/// A background thread's name and body.
type Loop = (&'static str, fn(&Shared));

/// Spawns one named thread running the given body.
type Spawn<'a> = &'a dyn Fn(&str, Box<dyn FnOnce() + Send>) -> std::io::Result<JoinHandle<()>>;

/// Starts the flush, memory tier, compaction, GC, WAL-sync and linker
/// threads.
pub fn start(shared: &Arc<Shared>) -> std::io::Result<Vec<JoinHandle<()>>> {
    start_with(shared, &|name, body| {
        std::thread::Builder::new().name(name.into()).spawn(body)
    })
}

fn start_with(shared: &Arc<Shared>, spawn: Spawn<'_>) -> std::io::Result<Vec<JoinHandle<()>>> {
    let loops: [Loop; 6] = [
        ("tern-flush", flush_loop),
        ("tern-memtier", memtier_loop),
        ("tern-compact", compaction_loop),
        ("tern-gc", gc_loop),
        ("tern-wal-sync", wal_sync_loop),
        ("tern-link", link_loop),
    ];
    let mut threads = Vec::with_capacity(loops.len());
    for (name, body) in loops {
        let s = shared.clone();
        match spawn(name, Box::new(move || body(&s))) {
            Ok(t) => threads.push(t),
            Err(e) => {
                // The threads already running hold the store, and with it
                // the directory lock: stop them, or no later open succeeds.
                stop(shared, threads);
                return Err(e);
            }
        }
    }
    Ok(threads)
}

/// Tells the background threads to finish and waits for them.
pub fn stop(shared: &Shared, threads: Vec<JoinHandle<()>>) {
    {
        let mut state = shared.state.lock();
        state.shutting_down = true;
        shared.bg_work.notify_all();
    }
    shared.wal_syncer.stop();
    shared.linker.stop();
    for t in threads {
        let _ = t.join();
    }
}

/// Lowers the calling background thread to `background_cpu_priority`;
/// a failure only costs foreground latency, so it is logged, not raised.
fn lower_priority(s: &Shared, thread: &str) {
    let p = s.opts.background_cpu_priority;
    if let Err(e) = super::cpu_priority::lower_current_thread(p) {
        tracing::warn!(
            "tern: cannot set the {thread} thread's CPU priority to {}: {e}; it runs at normal priority",
            p.name()
        );
    }
}

/// How long the store must take no writes before GC works down to
/// `gc_idle_space_amp_limit`.
const IDLE_AFTER: Duration = Duration::from_secs(1);

/// Tells, from the last published sequence number, whether the store has
/// taken no writes for [`IDLE_AFTER`].
struct IdleWatch {
    seq: u64,
    since: Instant,
}

impl IdleWatch {
    fn new(seq: u64, now: Instant) -> IdleWatch {
        IdleWatch { seq, since: now }
    }

    /// True once `seq` has not moved for [`IDLE_AFTER`] up to `now`.
    fn idle(&mut self, seq: u64, now: Instant) -> bool {
        if seq != self.seq {
            self.seq = seq;
            self.since = now;
            return false;
        }
        now.saturating_duration_since(self.since) >= IDLE_AFTER
    }
}

fn gc_loop(s: &Shared) {
    lower_priority(s, "GC");
    let mut failures = 0u32;
    let written = || s.visible_seq.load(Ordering::Acquire);
    let mut watch = IdleWatch::new(written(), Instant::now());
    let mut reveal = IdleReveal::default();
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
            let busy = s.poll_slots.background_job();
            let mut done = s.gc_one();
            // Nothing over the limit for a writing store: an idle one past
            // where idle passes start is worked down to its own limit. A
            // write ends that at the next job.
            if matches!(done, Ok(false)) {
                if watch.idle(written(), Instant::now()) {
                    done = s.idle_pass_step(|| Ok(reveal.run(s)));
                } else {
                    s.idle_pass.store(false, Ordering::Release);
                }
            }
            drop(busy);
            match done {
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

/// How long an idle store waits after a failed idle-time L0 compaction
/// before it tries another.
const REVEAL_RETRY: Duration = Duration::from_secs(60);

/// The idle store's L0 compaction that marks the blob garbage L0 hides
/// before GC copies (`Shared::reveal_hidden_garbage`). A failure is
/// logged and only delays the next try: GC goes on without it, since GC is
/// what frees space, on a full disk too.
#[derive(Default)]
struct IdleReveal {
    failed_at: Option<Instant>,
}

impl IdleReveal {
    /// Runs one if due and the compaction lock is free; whether one ran.
    fn run(&mut self, s: &Shared) -> bool {
        if self.failed_at.is_some_and(|t| t.elapsed() < REVEAL_RETRY) {
            return false;
        }
        match s.reveal_hidden_garbage(false) {
            Ok(ran) => {
                self.failed_at = None;
                ran
            }
            Err(e) => {
                tracing::warn!(
                    "tern: the idle-time L0 compaction failed, GC goes on without it (next try in {}s): {e}",
                    REVEAL_RETRY.as_secs()
                );
                self.failed_at = Some(Instant::now());
                false
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

/// Merges and copies out memory-tier tables (nothing without a tier).
fn memtier_loop(s: &Shared) {
    if s.tier.is_none() {
        return;
    }
    let mut failures = 0u32;
    loop {
        {
            let mut state = s.state.lock();
            while !state.shutting_down && (state.bg_error.is_some() || !s.tier_work_due(&state)) {
                s.bg_work.wait(&mut state);
            }
            if state.shutting_down {
                return;
            }
            if failures > 0 && !sleep_unless_shutting_down(s, &mut state, backoff(failures)) {
                return;
            }
        }
        match s.tier_step() {
            Ok(_) => failures = 0,
            Err(e) => {
                failures += 1;
                after_failure(s, failures, "memory tier copy-out", &e, true);
            }
        }
    }
}

fn compaction_loop(s: &Shared) {
    lower_priority(s, "compaction");
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
        let busy = s.poll_slots.background_job();
        let done = s.compact_one();
        drop(busy);
        match done {
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
                s.purge_obsolete_files(state);
            }
            Err(e) => {
                failures += 1;
                after_failure(s, failures, "compaction", &e, true);
            }
        }
    }
}

/// Starts writeback of the WALs the group leader hands over
/// (`wal_bytes_per_sync`, see `wal_sync.rs`) until stopped. A failure
/// poisons the store.
/// Links the memtables' deferred nodes whenever a large group asks for it
/// (see `super::linker`).
fn link_loop(s: &Shared) {
    while s.linker.next() {
        let sv = s.pin_super_version();
        // The active memtable gathers larger runs; an immutable one is
        // linked at once, for the flush that will read it in order.
        sv.mem.link_deferred_lazily();
        for m in sv.imms.iter() {
            m.link_deferred();
        }
    }
}

fn wal_sync_loop(s: &Shared) {
    /// Stops the syncer's queue however the loop ends, so that nothing
    /// waits for a thread that panicked, and poisons the store if it did:
    /// retired WALs would no longer be synced in the background.
    struct StopOnExit<'a>(&'a Shared);
    impl Drop for StopOnExit<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let cause = "the WAL syncer thread panicked; reopen the store".to_string();
                self.0.set_bg_error_message(&mut self.0.state.lock(), cause);
            }
            self.0.wal_syncer.stop();
        }
    }
    let _stop = StopOnExit(s);
    let counter = s.state.lock().versions.file_number_counter();
    while let Some(job) = s.wal_syncer.next() {
        let (number, sync) = match job {
            super::wal_sync::SyncJob::Writeback(number, sync) => (number, sync),
            super::wal_sync::SyncJob::Prepare => {
                prepare_wal(s, &counter);
                continue;
            }
            super::wal_sync::SyncJob::SyncRetired => {
                if let Err(e) = s.wal_syncer.sync_retired(&s.dir) {
                    let mut state = s.state.lock();
                    s.set_bg_error(&mut state, &e);
                }
                continue;
            }
        };
        // A switch already synced a WAL that is no longer active (a flush
        // may even have removed it): nothing to start.
        if s.wal.lock().as_ref().map(|w| w.number) != Some(number) {
            continue;
        }
        let path = s.dir.join(crate::wal::wal_file_name(number));
        match sync.start_writeback().ctx(&path) {
            Ok(()) => super::stats::Counters::add(&s.counters.wal_background_syncs, 1),
            Err(e) => {
                let mut state = s.state.lock();
                s.set_bg_error(&mut state, &e);
            }
        }
    }
}

/// Creates the WAL the next switch takes, unless one newer than the
/// active WAL is waiting (an older one is stale: removed and replaced).
fn prepare_wal(s: &Shared, counter: &std::sync::atomic::AtomicU64) {
    let active = s.wal.lock().as_ref().map(|w| w.number);
    if let Some(spare) = s.wal_syncer.take_spare() {
        if active.is_some_and(|a| spare.number > a) {
            s.wal_syncer.put_spare(spare);
            return;
        }
        // Empty, and named by nothing: an orphan if this fails.
        let path = s.dir.join(crate::wal::wal_file_name(spare.number));
        drop(spare);
        let _ = s.fs.remove_file(&path);
    }
    let number = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let wal = match s.create_wal_file(number) {
        Ok(wal) => wal,
        // The switch creates the WAL itself, and reports the error if it
        // persists.
        Err(e) => {
            tracing::warn!("tern: could not create the next WAL ahead of time: {e}");
            return;
        }
    };
    // A failed directory sync poisons the store, as it did at a switch: a
    // later sync through another descriptor need not report it again.
    if let Err(e) = s.fs.sync_dir(&s.dir).ctx(&s.dir) {
        let mut state = s.state.lock();
        s.set_bg_error(&mut state, &e);
        return;
    }
    s.wal_syncer.put_spare(wal);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::io::MemFs;
    use crate::{Db, Options};

    /// Regression: when a background thread could not be spawned, the ones
    /// already running were never stopped; they kept the store, and its
    /// directory lock, so the store could not be opened again.
    #[test]
    fn a_failed_spawn_stops_the_threads_already_started() {
        let opts = Options {
            fs: MemFs::new(),
            ..Options::default()
        };
        let shared = super::super::open::open(Path::new("/db"), opts.clone(), None).unwrap();
        let calls = AtomicUsize::new(0);
        let err = start_with(&shared, &|name, body| {
            if calls.fetch_add(1, Ordering::SeqCst) == 2 {
                return Err(std::io::Error::other("no more threads"));
            }
            std::thread::Builder::new().name(name.into()).spawn(body)
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "no more threads");
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "the threads that started let go of the store"
        );
        drop(shared);
        Db::open("/db", opts).unwrap().close().unwrap();
    }

    /// The threads `background_cpu_priority` lowers.
    #[cfg(target_os = "linux")]
    const LOWERED: [&str; 2] = ["tern-compact", "tern-gc"];

    /// Starts a store's background threads with `priority`, and returns
    /// the name, scheduling policy and nice value of each one still
    /// running once the compaction and GC threads are no longer at
    /// `normal` (the test thread's own).
    #[cfg(target_os = "linux")]
    fn thread_priorities(
        priority: crate::CpuPriority,
        normal: (u32, i32),
    ) -> Vec<(String, (u32, i32))> {
        use super::super::cpu_priority::{this_thread_id, thread_policy_and_nice};
        let mut opts = Options {
            fs: MemFs::new(),
            ..Options::default()
        };
        opts.background_cpu_priority = priority;
        let shared = super::super::open::open(Path::new("/db"), opts, None).unwrap();
        let tids = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let threads = start_with(&shared, &|name, body| {
            let tids = tids.clone();
            let name = name.to_string();
            std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    tids.lock().push((name, this_thread_id()));
                    body();
                })
        })
        .unwrap();
        let read = || -> Vec<(String, (u32, i32))> {
            let tids = tids.lock();
            tids.iter()
                .filter_map(|(name, tid)| Some((name.clone(), thread_policy_and_nice(tid)?)))
                .collect()
        };
        let lowered = |seen: &[(String, (u32, i32))]| {
            let lowered: Vec<_> = seen
                .iter()
                .filter(|(n, _)| LOWERED.contains(&n.as_str()))
                .collect();
            lowered.len() == 2 && lowered.iter().all(|(_, p)| *p != normal)
        };
        // Every thread has started (and named its id) before any is read.
        let started = || tids.lock().len() == 6;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !started() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut seen = read();
        while priority != crate::CpuPriority::Normal
            && !lowered(&seen)
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
            seen = read();
        }
        stop(&shared, threads);
        seen
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn compaction_and_gc_threads_run_at_the_background_cpu_priority_and_flush_does_not() {
        use super::super::cpu_priority::{this_thread_id, thread_policy_and_nice};
        // Normal is what this thread has (under `nice cargo test`, not 0).
        let normal = thread_policy_and_nice(&this_thread_id()).unwrap();
        for (priority, lowered) in [
            (
                crate::CpuPriority::Idle,
                (libc::SCHED_IDLE as u32, normal.1),
            ),
            (crate::CpuPriority::Low, (libc::SCHED_OTHER as u32, 19)),
        ] {
            let seen = thread_priorities(priority, normal);
            let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
            for name in ["tern-compact", "tern-gc", "tern-flush", "tern-wal-sync"] {
                assert!(names.contains(&name), "{name} is running: {seen:?}");
            }
            for (name, p) in &seen {
                let want = if LOWERED.contains(&name.as_str()) {
                    lowered
                } else {
                    normal
                };
                assert_eq!(*p, want, "{name} at {priority:?}: {seen:?}");
            }
        }
        for (name, p) in thread_priorities(crate::CpuPriority::Normal, normal) {
            assert_eq!(p, normal, "{name} at normal");
        }
    }

    #[test]
    fn a_store_is_idle_only_after_a_second_without_writes() {
        let t0 = Instant::now();
        let mut w = IdleWatch::new(7, t0);
        assert!(!w.idle(7, t0 + Duration::from_millis(999)));
        assert!(w.idle(7, t0 + IDLE_AFTER));
        // A write restarts the clock.
        assert!(!w.idle(8, t0 + Duration::from_secs(5)));
        assert!(!w.idle(8, t0 + Duration::from_millis(5500)));
        assert!(w.idle(8, t0 + Duration::from_secs(6)));
    }
}
