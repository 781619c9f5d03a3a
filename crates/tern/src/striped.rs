//! Counters that many threads bump on every operation.
//!
//! A plain `AtomicU64` bumped by readers on several cores moves its cache
//! line between them on every add, and every other counter on that line
//! moves with it. A [`StripedCounter`] gives each thread one of
//! [`STRIPES`] cells, each on a cache line of its own; a read sums them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Cells per striped counter. Threads past this many share cells, which
/// stays correct, only slower.
pub const STRIPES: usize = 16;

/// An atomic word on a cache line (pair) of its own: a word one thread
/// writes often must not take from other cores the line they read.
#[repr(align(128))]
#[derive(Default, Debug)]
pub(crate) struct PaddedU64(pub(crate) AtomicU64);

impl PaddedU64 {
    /// A padded word holding `v`.
    pub(crate) const fn new(v: u64) -> Self {
        PaddedU64(AtomicU64::new(v))
    }
}

/// A relaxed counter for hot paths: adds touch the calling thread's own
/// cache line, reads sum every cell (exact once the adders are done).
#[derive(Default, Debug)]
pub struct StripedCounter {
    cells: [PaddedU64; STRIPES],
}

impl StripedCounter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.cells[stripe()].0.fetch_add(n, Relaxed);
    }

    /// The sum of every add so far.
    pub fn get(&self) -> u64 {
        self.cells
            .iter()
            .fold(0u64, |s, c| s.wrapping_add(c.0.load(Relaxed)))
    }
}

/// This thread's stripe, in `0..STRIPES`: threads take stripes round-robin
/// as they first ask, so a handful of threads never share one.
#[inline]
pub fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Relaxed) % STRIPES;
    }
    STRIPE.try_with(|s| *s).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_from_many_threads_sum_exactly() {
        let c = std::sync::Arc::new(StripedCounter::default());
        let threads: Vec<_> = (0..2 * STRIPES as u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(t + 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("adder thread");
        }
        let n = 2 * STRIPES as u64;
        assert_eq!(c.get(), 1000 * n * (n + 1) / 2);
    }

    #[test]
    fn cells_do_not_share_cache_lines() {
        assert!(std::mem::align_of::<PaddedU64>() >= 128);
        assert_eq!(std::mem::size_of::<StripedCounter>(), 128 * STRIPES);
    }
}
