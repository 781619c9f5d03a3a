//! Hints to the CPU that change no result, only when memory is read.

/// Asks the CPU to bring the cache line holding `p` into its caches, so a
/// read of it soon after does not wait on memory. Only a hint: it reads
/// nothing and never faults, whatever `p` is.
#[inline]
pub fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch neither reads nor writes memory visibly and does
    // not fault on any address; SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
