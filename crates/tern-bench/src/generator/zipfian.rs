//! YCSB's zipfian generators: plain (popular items first), scrambled (hot
//! items scattered over the key space by an FNV hash) and skewed-latest
//! (recently inserted items most popular). The algorithm is Gray et al.'s
//! "Quickly generating billion-record synthetic databases", as YCSB uses it.

use std::sync::RwLock;

use super::{fnv_hash64, next_f64, AcknowledgedCounter, NumberGen};

/// YCSB's default zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;
/// Item count YCSB's scrambled generator draws from before hashing.
const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// zeta(10^10, 0.99), precomputed by YCSB.
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

#[derive(Debug, Clone, Copy)]
struct ZetaState {
    count_for_zeta: u64,
    zetan: f64,
    eta: f64,
}

/// Zipfian integers in `[base, base + items)`, item `base` most popular.
#[derive(Debug)]
pub struct Zipfian {
    base: u64,
    items: u64,
    theta: f64,
    zeta2theta: f64,
    alpha: f64,
    state: RwLock<ZetaState>,
}

/// Sum of `1 / (i + 1)^theta` for `i` in `[start, n)`, added to `initial`.
pub fn zeta(start: u64, n: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in start..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

impl Zipfian {
    /// Zipfian over `[min, max]` with constant `theta` (YCSB: 0.99).
    pub fn new(min: u64, max: u64, theta: f64) -> Self {
        let items = max.saturating_sub(min) + 1;
        let zetan = zeta(0, items, theta, 0.0);
        Self::with_zetan(min, items, theta, zetan)
    }

    fn with_zetan(base: u64, items: u64, theta: f64, zetan: f64) -> Self {
        let zeta2theta = zeta(0, 2, theta, 0.0);
        let eta = Self::eta(items, theta, zeta2theta, zetan);
        Zipfian {
            base,
            items,
            theta,
            zeta2theta,
            alpha: 1.0 / (1.0 - theta),
            state: RwLock::new(ZetaState {
                count_for_zeta: items,
                zetan,
                eta,
            }),
        }
    }

    fn eta(items: u64, theta: f64, zeta2theta: f64, zetan: f64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan)
    }

    /// Number of items this generator was built for.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// A zipfian value over the first `item_count` items (the count may grow
    /// between calls; zeta is then extended incrementally, as YCSB does).
    pub fn next_long(&self, rng: &mut dyn rand::RngCore, item_count: u64) -> u64 {
        let item_count = item_count.max(1);
        let mut st = match self.state.read() {
            Ok(s) => *s,
            Err(p) => *p.into_inner(),
        };
        if item_count != st.count_for_zeta {
            let mut w = match self.state.write() {
                Ok(s) => s,
                Err(p) => p.into_inner(),
            };
            if item_count > w.count_for_zeta {
                w.zetan = zeta(w.count_for_zeta, item_count, self.theta, w.zetan);
            } else {
                w.zetan = zeta(0, item_count, self.theta, 0.0);
            }
            w.count_for_zeta = item_count;
            w.eta = Self::eta(item_count, self.theta, self.zeta2theta, w.zetan);
            st = *w;
        }
        let u = next_f64(rng);
        let uz = u * st.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        let off = (item_count as f64 * (st.eta * u - st.eta + 1.0).powf(self.alpha)) as u64;
        self.base + off.min(item_count - 1)
    }
}

impl NumberGen for Zipfian {
    fn next(&self, rng: &mut dyn rand::RngCore) -> u64 {
        self.next_long(rng, self.items)
    }
}

/// Zipfian popularity with the popular items scattered over `[min, max]`.
#[derive(Debug)]
pub struct ScrambledZipfian {
    base: u64,
    items: u64,
    gen: Zipfian,
}

impl ScrambledZipfian {
    /// Scrambled zipfian over `[min, max]` with YCSB's constant 0.99.
    pub fn new(min: u64, max: u64) -> Self {
        Self::with_constant(min, max, ZIPFIAN_CONSTANT)
    }

    /// Scrambled zipfian with constant `theta`. With 0.99, it draws from
    /// 10^10 items before hashing, exactly as YCSB; otherwise from the
    /// item count itself (YCSB would sum zeta over 10^10 terms).
    pub fn with_constant(min: u64, max: u64, theta: f64) -> Self {
        let items = max.saturating_sub(min) + 1;
        let gen = if (theta - ZIPFIAN_CONSTANT).abs() < f64::EPSILON {
            Zipfian::with_zetan(0, SCRAMBLED_ITEM_COUNT, theta, SCRAMBLED_ZETAN)
        } else {
            Zipfian::new(0, items - 1, theta)
        };
        ScrambledZipfian {
            base: min,
            items,
            gen,
        }
    }
}

impl NumberGen for ScrambledZipfian {
    fn next(&self, rng: &mut dyn rand::RngCore) -> u64 {
        let r = self.gen.next(rng);
        self.base + fnv_hash64(r) % self.items
    }
}

/// YCSB's "latest": zipfian over the distance back from the newest
/// acknowledged insert.
#[derive(Debug)]
pub struct SkewedLatest {
    basis: std::sync::Arc<AcknowledgedCounter>,
    gen: Zipfian,
}

impl SkewedLatest {
    /// Follows the inserts counted by `basis`.
    pub fn new(basis: std::sync::Arc<AcknowledgedCounter>) -> Self {
        let last = basis.last().max(1);
        SkewedLatest {
            basis,
            gen: Zipfian::new(0, last - 1, ZIPFIAN_CONSTANT),
        }
    }
}

impl NumberGen for SkewedLatest {
    fn next(&self, rng: &mut dyn rand::RngCore) -> u64 {
        let max = self.basis.last();
        max.saturating_sub(self.gen.next_long(rng, max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(42)
    }

    /// Expected share of item i (0-based) in a zipfian over n items.
    fn expected(i: u64, n: u64, theta: f64) -> f64 {
        (1.0 / ((i + 1) as f64).powf(theta)) / zeta(0, n, theta, 0.0)
    }

    #[test]
    fn zipfian_matches_expected_frequencies() {
        let n = 1000;
        let g = Zipfian::new(0, n - 1, ZIPFIAN_CONSTANT);
        let mut r = rng();
        let draws = 400_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            let v = g.next(&mut r);
            assert!(v < n);
            counts[v as usize] += 1;
        }
        // Items 0 and 1 are exact by construction; the rest come from Gray's
        // closed-form approximation, checked in aggregate below.
        for i in 0..2u64 {
            let got = counts[i as usize] as f64 / draws as f64;
            let want = expected(i, n, ZIPFIAN_CONSTANT);
            assert!(
                (got - want).abs() / want < 0.08,
                "item {i}: got {got:.5}, want {want:.5}"
            );
        }
        // Top 10% of items hold the bulk of the accesses.
        let top: u64 = counts[..100].iter().sum();
        let want: f64 = (0..100).map(|i| expected(i, n, ZIPFIAN_CONSTANT)).sum();
        let got = top as f64 / draws as f64;
        assert!((got - want).abs() < 0.03, "top decile {got} vs {want}");
        // Frequencies fall with rank: the first ten items are in order.
        for i in 0..9 {
            assert!(counts[i] > counts[i + 1] * 9 / 10, "rank {i}: {counts:?}");
        }
    }

    #[test]
    fn scrambled_zipfian_spreads_hot_keys_and_stays_in_range() {
        let g = ScrambledZipfian::new(100, 1099);
        let mut r = rng();
        let mut counts = vec![0u64; 1000];
        let draws = 200_000;
        for _ in 0..draws {
            let v = g.next(&mut r);
            assert!((100..1100).contains(&v));
            counts[(v - 100) as usize] += 1;
        }
        // The hottest item is as hot as zipfian's first item (≈ 1/zeta(10^10)).
        let max = *counts.iter().max().unwrap_or(&0) as f64 / draws as f64;
        let want = 1.0 / SCRAMBLED_ZETAN;
        assert!((max - want).abs() / want < 0.15, "hottest {max} vs {want}");
        // ... and it is not item 0: scrambling moved it.
        let hottest = counts
            .iter()
            .enumerate()
            .max_by_key(|(_, c)| **c)
            .map(|(i, _)| i);
        assert_ne!(hottest, Some(0));
    }

    #[test]
    fn latest_prefers_newest_inserts() {
        let c = std::sync::Arc::new(AcknowledgedCounter::new(1000));
        let g = SkewedLatest::new(c.clone());
        let mut r = rng();
        let draws = 200_000;
        let mut newest = 0u64;
        for _ in 0..draws {
            let v = g.next(&mut r);
            assert!(v <= 999);
            if v == 999 {
                newest += 1;
            }
        }
        let got = newest as f64 / draws as f64;
        let want = expected(0, 999, ZIPFIAN_CONSTANT);
        assert!((got - want).abs() / want < 0.05, "newest {got} vs {want}");
        // After more inserts, the newest key moves.
        for _ in 0..10 {
            let v = c.next_value();
            c.acknowledge(v);
        }
        let mut hits = 0;
        for _ in 0..10_000 {
            if g.next(&mut r) == 1009 {
                hits += 1;
            }
        }
        assert!(hits > 1000);
    }

    #[test]
    fn uniform_matches_expected_frequencies() {
        let g = super::super::Uniform::new(0, 9);
        let mut r = rng();
        let mut counts = [0u64; 10];
        let draws = 100_000;
        for _ in 0..draws {
            counts[g.next(&mut r) as usize] += 1;
        }
        // Chi-square with 9 degrees of freedom: 99.9% quantile is 27.88.
        let e = draws as f64 / 10.0;
        let chi2: f64 = counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum();
        assert!(chi2 < 27.88, "chi2 {chi2}");
    }
}
