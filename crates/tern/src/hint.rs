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

/// Bytes in a CPU cache line.
const CACHE_LINE: usize = 64;

/// [`prefetch_read`] for every cache line `bytes` touches, up to `max`
/// bytes from its start: for a read that will go through all of them, so
/// their misses overlap instead of following the reader's pace. Only a
/// hint, like [`prefetch_read`].
#[inline]
pub fn prefetch_bytes(bytes: &[u8], max: usize) {
    let base = bytes.as_ptr();
    for line in lines(base as usize, bytes.len().min(max)) {
        // The line's start as an address derived from `base`.
        prefetch_read(
            base.wrapping_add(line * CACHE_LINE)
                .wrapping_sub(base as usize),
        );
    }
}

/// The numbers (address / [`CACHE_LINE`]) of the cache lines that `len`
/// bytes from address `at` touch; empty when `len` is 0.
fn lines(at: usize, len: usize) -> std::ops::Range<usize> {
    if len == 0 {
        return 0..0;
    }
    at / CACHE_LINE..(at + len - 1) / CACHE_LINE + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_cover_every_byte_and_no_more() {
        assert_eq!(lines(128, 0), 0..0);
        assert_eq!(lines(128, 1), 2..3);
        assert_eq!(lines(128, 64), 2..3);
        assert_eq!(lines(128, 65), 2..4);
        assert_eq!(lines(127, 2), 1..3);
        assert_eq!(lines(191, 1), 2..3);
        assert_eq!(lines(100, 1024), 1..18);
    }
}
