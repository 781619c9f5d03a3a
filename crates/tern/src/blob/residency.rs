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
//! So reads go through the mapping while no read has found a value
//! missing from memory for [`COLD_FOR_MS`], and the `pread` way otherwise.
//! Misses are seen where they are cheap to see: a no-wait read that would
//! have waited (a point read off the mapping tries one first), a mapped
//! scan batch during which its thread took a major page fault, or such a
//! fault between two looks every [`READS_PER_LOOK`] mapped reads of single
//! values. The state is one word for the process, like the page cache it
//! describes; reading it costs a coarse clock read and a load of a line
//! that is only written when a miss is seen (at most ten times a second).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How long after a read found a value missing reads stay on `pread`.
pub const COLD_FOR_MS: u64 = 1000;

/// Coarse clock milliseconds until which values are taken to be out of
/// memory.
static COLD_UNTIL_MS: AtomicU64 = AtomicU64::new(0);

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

/// Whether no read has found a separated value missing from memory lately:
/// reads may then go through the mapping.
#[inline]
pub fn warm() -> bool {
    now_ms() >= COLD_UNTIL_MS.load(Relaxed)
}

/// Records that a read found a value missing from memory.
pub fn saw_miss() {
    let until = now_ms() + COLD_FOR_MS;
    // Skip the store while the deadline is recent: misses come in bursts
    // from every reading thread, and each store takes the line from the
    // others.
    if COLD_UNTIL_MS.load(Relaxed) + 100 < until {
        COLD_UNTIL_MS.store(until, Relaxed);
    }
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
/// a backward scan); every [`READS_PER_LOOK`] reads, a major fault the
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
        if last.is_some_and(|l| now > l) {
            saw_miss();
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

/// Waits until reads may go through mappings again (a test that saw or
/// reported a miss holds them off for a second).
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

    #[test]
    fn a_miss_makes_reads_cold_for_a_while() {
        let _held = TEST_LOCK.lock();
        saw_miss();
        assert!(!warm());
        assert!(COLD_UNTIL_MS.load(Relaxed) > now_ms());
        assert!(COLD_UNTIL_MS.load(Relaxed) <= now_ms() + COLD_FOR_MS);
    }

    #[test]
    fn a_fault_between_two_looks_at_mapped_point_reads_is_a_miss() {
        let _held = TEST_LOCK.lock();
        until_warm();
        mapped_read_done(); // the first look
        for _ in 0..READS_PER_LOOK * 2 {
            mapped_read_done();
            assert!(warm(), "no fault, no miss");
        }
        inject_faults(1);
        for _ in 0..READS_PER_LOOK {
            mapped_read_done();
        }
        assert!(!warm(), "a fault within the next look is a miss");
    }
}
