//! Whether separated values are likely in memory, which decides how they
//! are read.
//!
//! In memory, reading a value through the blob file's mapping is a copy
//! out of the page cache the process already sees; a `pread` of the same
//! bytes costs a system call, a page-cache lookup and a reference count on
//! each page (half of a YCSB E profile at 2M records went there). Out of
//! memory the mapping is worse for scans: a missing page stalls the thread
//! on its own, while a batch read with `pread` learns which records would
//! wait and hands them all to the device at once (`blob::scan`).
//!
//! So reads go through the mapping until reads find values missing from
//! memory ([`MISSES_TO_COLD`] misses within [`MISS_WINDOW_MS`]), and the
//! `pread` way for [`COLD_FOR_MS`] after the last such burst. One miss is
//! not enough: a no-wait read now and then fails on a page that is in
//! memory, and a thread's major-fault count includes faults on any file
//! page, the program's own code among them. When one such miss sent reads
//! to `pread` for a second, the no-wait probes of that second found the
//! next one: a profile of YCSB C on a 2M-record store held wholly in
//! memory spent 36% of its time in `preadv2`, and runs of it went at
//! 0.73–0.98 times the throughput they have with bursts. Out of memory
//! most reads miss, so reads turn cold within a window all the same.
//! Misses are seen where they are cheap to see: a no-wait read that would
//! have waited (a point read off the mapping tries one first), each major
//! page fault a thread took during a mapped scan batch, and each such
//! fault between two looks every [`READS_PER_LOOK`] mapped reads of single
//! values. Misses are counted per fixed window of [`MISS_WINDOW_MS`] (a
//! burst that straddles two windows counts in each separately). The state
//! is two words for the process, like the page cache it describes, each on
//! cache lines of its own; reading it costs a coarse clock read and a load of
//! a line that is only written when reads turn (or stay) cold.

use std::sync::atomic::Ordering::Relaxed;

use crate::striped::PaddedU64;

/// How long after a burst of misses reads stay on `pread`.
pub const COLD_FOR_MS: u64 = 1000;

/// Coarse clock milliseconds until which values are taken to be out of
/// memory. Padded apart from [`MISSES`], which is written on every miss,
/// while every read loads this word.
static COLD_UNTIL_MS: PaddedU64 = PaddedU64::new(0);

/// Milliseconds of the coarse monotonic clock (a few ms of resolution,
/// no system call).
fn now_ms() -> u64 {
    #[cfg(target_os = "linux")]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC_COARSE;
    #[cfg(not(target_os = "linux"))]
    const CLOCK: libc::clockid_t = libc::CLOCK_MONOTONIC;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(CLOCK, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec as u64 / 1_000_000)
}

/// Whether no burst of reads has found separated values missing from
/// memory lately: reads may then go through the mapping.
#[inline]
pub fn warm() -> bool {
    now_ms() >= COLD_UNTIL_MS.0.load(Relaxed)
}

/// Misses within one window of [`MISS_WINDOW_MS`] that make reads cold.
pub const MISSES_TO_COLD: u64 = 8;

/// Length of the window in which misses are counted.
pub const MISS_WINDOW_MS: u64 = 100;

/// Misses seen in the current window: the window's number (its start over
/// [`MISS_WINDOW_MS`], low 32 bits) in the high half, the count in the low.
static MISSES: PaddedU64 = PaddedU64::new(0);

/// Records `n` reads that found values missing from memory; reads turn
/// (or stay) cold once a window holds [`MISSES_TO_COLD`] of them.
#[inline]
pub fn saw_misses(n: u64) {
    // The fault looks report every time, mostly nothing: no clock read
    // for that.
    if n != 0 {
        saw_misses_at(now_ms(), n);
    }
}

/// [`saw_misses`] by a thread that read the clock at `now`; `n > 0`.
fn saw_misses_at(now: u64, n: u64) {
    let window = (now / MISS_WINDOW_MS) & u64::from(u32::MAX);
    let mut count = 0;
    // A compare-and-swap loop: misses are rare while reads are warm, and
    // each one while cold has waited for the device, so contention on the
    // word costs nothing next to them.
    let _ = MISSES.0.fetch_update(Relaxed, Relaxed, |cur| {
        let held_window = cur >> 32;
        // A thread that read the clock before another thread opened a
        // newer window adds to that window rather than resetting it.
        // (Windows wrap after 13 years; the comparison is then off once.)
        let (window, held) = if held_window >= window {
            (held_window, cur & u64::from(u32::MAX))
        } else {
            (window, 0)
        };
        count = held.saturating_add(n).min(u64::from(u32::MAX));
        Some((window << 32) | count)
    });
    if count < MISSES_TO_COLD {
        return;
    }
    let until = now + COLD_FOR_MS;
    // Skip the store while the deadline is recent: misses come in bursts
    // from every reading thread, and each store takes the line from the
    // others.
    if COLD_UNTIL_MS.0.load(Relaxed) + 100 < until {
        COLD_UNTIL_MS.0.store(until, Relaxed);
    }
}

/// Makes reads cold now, as a burst of misses would.
#[cfg(test)]
pub(crate) fn make_cold() {
    saw_misses(MISSES_TO_COLD);
}

/// Mapped reads of single values between two looks at the thread's major
/// faults: a look is a system call, which is what the mapping saves.
const READS_PER_LOOK: u32 = 32;

thread_local! {
    /// Mapped reads since the last look, and the thread's major faults
    /// then (`None` before the first look).
    static MAPPED_READS: std::cell::Cell<(u32, Option<u64>)> =
        const { std::cell::Cell::new((0, None)) };
}

/// Counts a single value read through a mapping (a point read, a step of
/// a backward scan); every [`READS_PER_LOOK`] reads, each major fault the
/// thread took since the last look counts as a miss (such a read out of
/// memory costs more through a mapping than with `pread`).
#[inline]
pub fn mapped_read_done() {
    MAPPED_READS.with(|c| {
        let (n, last) = c.get();
        if n + 1 < READS_PER_LOOK && last.is_some() {
            c.set((n + 1, last));
            return;
        }
        let now = thread_major_faults();
        if let Some(l) = last {
            saw_misses(now.saturating_sub(l));
        }
        c.set((0, Some(now)));
    });
}

/// Held by tests that depend on the process's state, which any of them
/// may change.
#[cfg(test)]
pub(crate) static TEST_LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// Major page faults the calling thread has taken (0 where unknown).
pub fn thread_major_faults() -> u64 {
    #[cfg(test)]
    let injected = INJECTED_FAULTS.with(|f| f.get());
    #[cfg(not(test))]
    let injected = 0;
    injected + os_thread_major_faults()
}

#[cfg(target_os = "linux")]
fn os_thread_major_faults() -> u64 {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable for the call's duration.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_majflt as u64
}

/// Without per-thread counts, no fault is seen: misses then show through
/// no-wait reads only.
#[cfg(not(target_os = "linux"))]
fn os_thread_major_faults() -> u64 {
    0
}

#[cfg(test)]
thread_local! {
    /// Faults tests pretend the thread took.
    static INJECTED_FAULTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Waits until reads may go through mappings again (a test that made
/// reads cold holds them off for a second).
#[cfg(test)]
pub(crate) fn until_warm() {
    let start = std::time::Instant::now();
    while !warm() {
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Makes the calling thread look as if it took `n` more major faults.
#[cfg(test)]
pub(crate) fn inject_faults(n: u64) {
    INJECTED_FAULTS.with(|f| f.set(f.get() + n));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Forgets the misses of the current window, which earlier tests may
    /// have left.
    fn forget_misses() {
        MISSES.0.store(0, Relaxed);
    }

    #[test]
    fn a_lone_miss_leaves_reads_warm() {
        let _held = TEST_LOCK.lock();
        until_warm();
        forget_misses();
        saw_misses(1);
        assert!(warm(), "one miss in a second of reads is noise");
    }

    #[test]
    fn a_late_thread_adds_its_misses_to_the_newer_window() {
        let _held = TEST_LOCK.lock();
        until_warm();
        forget_misses();
        let now = now_ms();
        // Another thread opened the next window with most of a burst; this
        // one read the clock just before that window began.
        saw_misses_at(now + MISS_WINDOW_MS, MISSES_TO_COLD - 1);
        assert!(warm());
        saw_misses_at(now, 1);
        assert!(!warm(), "the late miss completes the newer window's burst");
        forget_misses();
    }

    #[test]
    fn a_burst_of_misses_makes_reads_cold_for_a_while() {
        let _held = TEST_LOCK.lock();
        until_warm();
        // A burst that straddles two windows counts from zero in the
        // second; three tries cannot all straddle one.
        for _ in 0..3 {
            forget_misses();
            saw_misses(MISSES_TO_COLD - 1);
            assert!(warm(), "fewer misses than a burst");
            let window = MISSES.0.load(Relaxed) >> 32;
            saw_misses(1);
            if MISSES.0.load(Relaxed) >> 32 == window {
                break;
            }
        }
        assert!(!warm(), "the burst's last miss");
        assert!(COLD_UNTIL_MS.0.load(Relaxed) > now_ms());
        assert!(COLD_UNTIL_MS.0.load(Relaxed) <= now_ms() + COLD_FOR_MS);
    }

    #[test]
    fn faults_between_two_looks_at_mapped_point_reads_are_misses() {
        let _held = TEST_LOCK.lock();
        until_warm();
        mapped_read_done(); // the first look
        for _ in 0..READS_PER_LOOK * 2 {
            mapped_read_done();
            assert!(warm(), "no fault, no miss");
        }
        forget_misses();
        inject_faults(1);
        for _ in 0..READS_PER_LOOK {
            mapped_read_done();
        }
        assert!(warm(), "a lone fault is noise");
        inject_faults(MISSES_TO_COLD);
        for _ in 0..READS_PER_LOOK {
            mapped_read_done();
        }
        assert!(!warm(), "each fault within the next look is a miss");
    }
}
