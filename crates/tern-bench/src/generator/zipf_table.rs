//! Zipf popularity with any exponent (including 0 and > 1) by inverting a
//! cumulative table: used by the trace generator, whose clusters have
//! α = 0, 0.735 and 1.97.

use super::{next_f64, NumberGen};

/// Zipf over `[0, n)` with exponent `alpha`: item `i` has weight `1/(i+1)^alpha`.
#[derive(Debug, Clone)]
pub struct ZipfTable {
    cdf: Vec<f64>,
}

impl ZipfTable {
    /// A table over `n` items (n ≥ 1).
    pub fn new(n: u64, alpha: f64) -> Self {
        let n = n.max(1);
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for i in 0..n {
            sum += 1.0 / ((i + 1) as f64).powf(alpha);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        ZipfTable { cdf }
    }
}

impl NumberGen for ZipfTable {
    fn next(&self, rng: &mut dyn rand::RngCore) -> u64 {
        let u = next_f64(rng);
        let i = self.cdf.partition_point(|&c| c < u);
        i.min(self.cdf.len() - 1) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn steep_exponent_concentrates_on_first_items() {
        let t = ZipfTable::new(1000, 1.97);
        let mut r = rand::rngs::StdRng::seed_from_u64(1);
        let mut first = 0;
        for _ in 0..100_000 {
            if t.next(&mut r) == 0 {
                first += 1;
            }
        }
        // 1 / zeta(1.97) ≈ 0.6145 (the series converges fast).
        let want: f64 = 1.0 / (1..=1000).map(|i| 1.0 / (i as f64).powf(1.97)).sum::<f64>();
        let got = first as f64 / 100_000.0;
        assert!((got - want).abs() < 0.01, "{got} vs {want}");
    }

    #[test]
    fn alpha_zero_is_uniform() {
        let t = ZipfTable::new(4, 0.0);
        let mut r = rand::rngs::StdRng::seed_from_u64(2);
        let mut c = [0u32; 4];
        for _ in 0..40_000 {
            c[t.next(&mut r) as usize] += 1;
        }
        for x in c {
            assert!((9_500..10_500).contains(&x), "{c:?}");
        }
    }
}
