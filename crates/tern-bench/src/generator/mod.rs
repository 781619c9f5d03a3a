//! Random generators behind the workloads: key choice (uniform, zipfian,
//! scrambled zipfian, latest), value sizes (generalized Pareto), mixgraph's
//! key-range power distribution, and YCSB's FNV key hash.

pub mod counter;
pub mod hash;
pub mod keyrange;
pub mod pareto;
pub mod zipf_table;
pub mod zipfian;

pub use counter::AcknowledgedCounter;
pub use hash::fnv_hash64;
pub use keyrange::KeyRangeDist;
pub use pareto::pareto_cdf_inversion;
pub use zipf_table::ZipfTable;
pub use zipfian::{ScrambledZipfian, SkewedLatest, Zipfian};

use rand::Rng;

/// A generator of integers in a range, driven by a caller-supplied RNG so
/// each thread keeps its own random state.
pub trait NumberGen: Send + Sync {
    /// The next value.
    fn next(&self, rng: &mut dyn rand::RngCore) -> u64;
}

/// Uniform integers in `[lo, hi]`.
#[derive(Debug, Clone)]
pub struct Uniform {
    lo: u64,
    hi: u64,
}

impl Uniform {
    /// Uniform over `[lo, hi]` (inclusive; `hi < lo` is treated as `lo`).
    pub fn new(lo: u64, hi: u64) -> Self {
        Uniform { lo, hi: hi.max(lo) }
    }
}

impl NumberGen for Uniform {
    fn next(&self, rng: &mut dyn rand::RngCore) -> u64 {
        rng.gen_range(self.lo..=self.hi)
    }
}

/// Always the same value.
#[derive(Debug, Clone)]
pub struct Constant(pub u64);

impl NumberGen for Constant {
    fn next(&self, _rng: &mut dyn rand::RngCore) -> u64 {
        self.0
    }
}

/// A uniform double in `[0, 1)`.
pub fn next_f64(rng: &mut dyn rand::RngCore) -> f64 {
    rng.gen::<f64>()
}
