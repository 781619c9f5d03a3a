//! db_bench's `mixgraph` (Cao et al., FAST'20): key ranges with two-term
//! power access probabilities, generalized-Pareto value sizes and scan
//! lengths, a get/put/seek mix, and an optional sine-shaped request rate
//! (`rate = sine_a·sin(sine_b·t + sine_c) + sine_d` ops/s, updated every
//! `sine_mix_rate_interval_milliseconds`).

use rand::Rng;

use crate::generator::keyrange::{KeyRangeDist, KeyRangeParams};
use crate::generator::{next_f64, pareto_cdf_inversion};

/// Every mixgraph parameter, named as db_bench's flags.
#[derive(Debug, Clone, PartialEq)]
pub struct MixgraphParams {
    /// `-keyrange_dist_a`.
    pub keyrange_dist_a: f64,
    /// `-keyrange_dist_b`.
    pub keyrange_dist_b: f64,
    /// `-keyrange_dist_c`.
    pub keyrange_dist_c: f64,
    /// `-keyrange_dist_d`.
    pub keyrange_dist_d: f64,
    /// `-keyrange_num`.
    pub keyrange_num: i64,
    /// `-key_dist_a`.
    pub key_dist_a: f64,
    /// `-key_dist_b`.
    pub key_dist_b: f64,
    /// `-value_theta`.
    pub value_theta: f64,
    /// `-value_k`.
    pub value_k: f64,
    /// `-value_sigma`.
    pub value_sigma: f64,
    /// `-iter_theta`.
    pub iter_theta: f64,
    /// `-iter_k`.
    pub iter_k: f64,
    /// `-iter_sigma`.
    pub iter_sigma: f64,
    /// `-mix_get_ratio`.
    pub get_ratio: f64,
    /// `-mix_put_ratio`.
    pub put_ratio: f64,
    /// `-mix_seek_ratio`.
    pub seek_ratio: f64,
    /// `-mix_max_value_size`.
    pub max_value_size: i64,
    /// `-mix_max_scan_len`.
    pub max_scan_len: i64,
    /// `-sine_mix_rate`: pace requests by the sine.
    pub sine_mix_rate: bool,
    /// `-sine_a`.
    pub sine_a: f64,
    /// `-sine_b`.
    pub sine_b: f64,
    /// `-sine_c`.
    pub sine_c: f64,
    /// `-sine_d`.
    pub sine_d: f64,
    /// `-sine_mix_rate_interval_milliseconds`.
    pub sine_interval_ms: u64,
}

impl Default for MixgraphParams {
    /// The Social Graph parameters of WORKLOADS.md (Cao et al.).
    fn default() -> Self {
        MixgraphParams {
            keyrange_dist_a: 14.18,
            keyrange_dist_b: -2.917,
            keyrange_dist_c: 0.0164,
            keyrange_dist_d: -0.08082,
            keyrange_num: 30,
            key_dist_a: 0.0,
            key_dist_b: 0.0,
            value_theta: 0.0,
            value_k: 0.923,
            value_sigma: 226.409,
            iter_theta: 0.0,
            iter_k: 2.517,
            iter_sigma: 14.236,
            get_ratio: 0.55,
            put_ratio: 0.44,
            seek_ratio: 0.01,
            max_value_size: 1024,
            max_scan_len: 10_000,
            sine_mix_rate: false,
            sine_a: 1000.0,
            sine_b: 0.000073,
            sine_c: 0.0,
            sine_d: 80_000.0,
            sine_interval_ms: 5000,
        }
    }
}

/// One generated mixgraph request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MixOp {
    /// Get of a key id.
    Get(i64),
    /// Put of a key id with a value size.
    Put(i64, usize),
    /// Seek to a key id, then read this many entries.
    Seek(i64, usize),
}

/// The mixgraph request generator (shared; each thread passes its RNG).
#[derive(Debug, Clone)]
pub struct Mixgraph {
    /// Parameters.
    pub params: MixgraphParams,
    keys: KeyRangeDist,
}

impl Mixgraph {
    /// A generator over `num` keys.
    pub fn new(num: i64, params: MixgraphParams) -> Self {
        let keys = KeyRangeDist::new(
            num,
            KeyRangeParams {
                a: params.keyrange_dist_a,
                b: params.keyrange_dist_b,
                c: params.keyrange_dist_c,
                d: params.keyrange_dist_d,
                num: params.keyrange_num,
                key_dist_a: params.key_dist_a,
                key_dist_b: params.key_dist_b,
            },
        );
        Mixgraph { params, keys }
    }

    /// The key-range distribution.
    pub fn keys(&self) -> &KeyRangeDist {
        &self.keys
    }

    /// A value size: Pareto, at least 10, wrapped at `max_value_size`.
    pub fn value_size(&self, rng: &mut dyn rand::RngCore) -> usize {
        let p = &self.params;
        let v = pareto_cdf_inversion(next_f64(rng), p.value_theta, p.value_k, p.value_sigma);
        let v = if v < 10 {
            10
        } else if v > p.max_value_size {
            v % p.max_value_size.max(1)
        } else {
            v
        };
        v.max(10) as usize
    }

    /// A scan length: Pareto, wrapped at `max_scan_len`, at least 1.
    pub fn scan_len(&self, rng: &mut dyn rand::RngCore) -> usize {
        let p = &self.params;
        let v = pareto_cdf_inversion(next_f64(rng), p.iter_theta, p.iter_k, p.iter_sigma);
        (v % p.max_scan_len.max(1)).max(1) as usize
    }

    /// The next request.
    pub fn next(&self, rng: &mut dyn rand::RngCore) -> MixOp {
        let key = self.keys.next_key(rng);
        let p = &self.params;
        let total = p.get_ratio + p.put_ratio + p.seek_ratio;
        let u = rng.gen::<f64>() * total;
        if u < p.get_ratio {
            MixOp::Get(key)
        } else if u < p.get_ratio + p.put_ratio {
            MixOp::Put(key, self.value_size(rng))
        } else {
            MixOp::Seek(key, self.scan_len(rng))
        }
    }

    /// Target request rate at `secs` into the run (ops/s), quantized to
    /// the sine interval.
    pub fn rate_at(&self, secs: f64) -> f64 {
        let p = &self.params;
        let step = p.sine_interval_ms.max(1) as f64 / 1000.0;
        let t = (secs / step).floor() * step;
        (p.sine_a * (p.sine_b * t + p.sine_c).sin() + p.sine_d).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn value_sizes_follow_generalized_pareto() {
        // Without wrapping, sizes follow the distribution itself.
        let wide = MixgraphParams {
            max_value_size: 1 << 40,
            ..MixgraphParams::default()
        };
        let m = Mixgraph::new(100_000, wide);
        let mut r = rand::rngs::StdRng::seed_from_u64(11);
        let n = 200_000;
        let sizes: Vec<usize> = (0..n).map(|_| m.value_size(&mut r)).collect();
        assert!(sizes.iter().all(|&s| s >= 10));
        // P(size <= x) = 1 - (1 + k x / sigma)^(-1/k) for x below the wrap.
        let cdf = |x: f64| 1.0 - (1.0 + 0.923 * x / 226.409).powf(-1.0 / 0.923);
        for x in [50usize, 100, 200, 400] {
            let got = sizes.iter().filter(|&&s| s <= x && s > 10).count() as f64 / n as f64;
            let want = cdf(x as f64) - cdf(10.0);
            assert!((got - want).abs() < 0.01, "x={x}: {got} vs {want}");
        }
        // With db_bench's default cap, sizes wrap below 1024.
        let m = Mixgraph::new(100_000, MixgraphParams::default());
        assert!((0..10_000).all(|_| (10..=1024).contains(&m.value_size(&mut r))));
        let scans: Vec<usize> = (0..10_000).map(|_| m.scan_len(&mut r)).collect();
        assert!(scans.iter().all(|&s| (1..10_000).contains(&s)));
    }

    #[test]
    fn mix_and_rate() {
        let m = Mixgraph::new(100_000, MixgraphParams::default());
        let mut r = rand::rngs::StdRng::seed_from_u64(12);
        let (mut g, mut p, mut s) = (0, 0, 0);
        for _ in 0..100_000 {
            match m.next(&mut r) {
                MixOp::Get(k) | MixOp::Put(k, _) | MixOp::Seek(k, _)
                    if !(0..100_000).contains(&k) =>
                {
                    panic!("key {k}")
                }
                MixOp::Get(_) => g += 1,
                MixOp::Put(..) => p += 1,
                MixOp::Seek(..) => s += 1,
            }
        }
        assert!((g as f64 / 1e5 - 0.55).abs() < 0.01);
        assert!((p as f64 / 1e5 - 0.44).abs() < 0.01);
        assert!((s as f64 / 1e5 - 0.01).abs() < 0.003);
        assert!((m.rate_at(0.0) - 80_000.0).abs() < 1e-6);
        let quarter = std::f64::consts::FRAC_PI_2 / 0.000073;
        assert!((m.rate_at(quarter) - 81_000.0).abs() < 1.0);
    }
}
