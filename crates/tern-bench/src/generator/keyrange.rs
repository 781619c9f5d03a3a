//! db_bench mixgraph's key-range model (Cao et al., FAST'20): the key space
//! is cut into `keyrange_num` equal ranges; the access probability of range
//! `i` is the two-term power `a·e^(b·i) + c·e^(d·i)`; ranges are shuffled with
//! a seed fixed by the distribution, and a key inside a range is uniform
//! (or follows `key_dist_a`, `key_dist_b` when both are set).

use super::next_f64;

#[derive(Debug, Clone, Copy)]
struct Unit {
    start: i64,
    access: i64,
}

/// The key-range distribution of mixgraph.
#[derive(Debug, Clone)]
pub struct KeyRangeDist {
    units: Vec<Unit>,
    rand_max: i64,
    range_size: i64,
    key_dist_a: f64,
    key_dist_b: f64,
}

/// Parameters of [`KeyRangeDist`], named as db_bench's flags.
#[derive(Debug, Clone, Copy)]
pub struct KeyRangeParams {
    /// `-keyrange_dist_a`.
    pub a: f64,
    /// `-keyrange_dist_b`.
    pub b: f64,
    /// `-keyrange_dist_c`.
    pub c: f64,
    /// `-keyrange_dist_d`.
    pub d: f64,
    /// `-keyrange_num`.
    pub num: i64,
    /// `-key_dist_a` (0: uniform inside a range).
    pub key_dist_a: f64,
    /// `-key_dist_b`.
    pub key_dist_b: f64,
}

/// db_bench's `Random64` (a 64-bit Mersenne twister in db_bench); here a
/// SplitMix64 seeded the same way: deterministic per seed.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl KeyRangeDist {
    /// Builds the distribution over `total_keys` keys.
    pub fn new(total_keys: i64, p: KeyRangeParams) -> Self {
        let num = p.num.max(1);
        let range_size = (total_keys / num).max(1);
        let mut units = Vec::with_capacity(num as usize);
        let mut amplify: i64 = 0;
        let mut start = 0;
        for pfx in (1..=num).rev() {
            let x = pfx as f64;
            let mut prob = p.a * (p.b * x).exp() + p.c * (p.d * x).exp();
            if prob < 1e-16 {
                prob = 0.0;
            }
            if amplify < 1 && prob > 0.0 {
                amplify = (1.0 / prob).floor() as i64 + 1;
            }
            let access = if prob <= 0.0 {
                0
            } else {
                (amplify as f64 * prob).floor() as i64
            };
            units.push(Unit { start, access });
            start += access;
        }
        let rand_max = start.max(1);
        let mut seed = rand_max as u64;
        for i in 0..units.len() {
            let pos = (splitmix(&mut seed) % units.len() as u64) as usize;
            units.swap(i, pos);
        }
        let mut off = 0;
        for u in &mut units {
            u.start = off;
            off += u.access;
        }
        KeyRangeDist {
            units,
            rand_max,
            range_size,
            key_dist_a: p.key_dist_a,
            key_dist_b: p.key_dist_b,
        }
    }

    /// Share of accesses that go to each range, in key order.
    pub fn range_shares(&self) -> Vec<f64> {
        self.units
            .iter()
            .map(|u| u.access as f64 / self.rand_max as f64)
            .collect()
    }

    /// Keys per range.
    pub fn range_size(&self) -> i64 {
        self.range_size
    }

    /// Maps a non-negative random integer to a key id (db_bench's `DistGetKeyID`).
    pub fn key_id(&self, ini_rand: i64) -> i64 {
        let ini_rand = ini_rand.abs();
        let r = ini_rand % self.rand_max;
        let idx = self
            .units
            .partition_point(|u| u.start <= r)
            .saturating_sub(1);
        let offset = if self.key_dist_a == 0.0 || self.key_dist_b == 0.0 {
            ini_rand % self.range_size
        } else {
            let u = (ini_rand % self.range_size) as f64 / self.range_size as f64;
            let mut seed = (u / self.key_dist_a).powf(1.0 / self.key_dist_b).ceil() as u64;
            (splitmix(&mut seed) % self.range_size as u64) as i64
        };
        self.range_size * idx as i64 + offset
    }

    /// Draws a key id.
    pub fn next_key(&self, rng: &mut dyn rand::RngCore) -> i64 {
        let r = (next_f64(rng) * (i64::MAX as f64)) as i64;
        self.key_id(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn social_graph() -> KeyRangeParams {
        KeyRangeParams {
            a: 14.18,
            b: -2.917,
            c: 0.0164,
            d: -0.08082,
            num: 30,
            key_dist_a: 0.0,
            key_dist_b: 0.0,
        }
    }

    #[test]
    fn range_frequencies_follow_the_power_model() {
        let total = 300_000;
        let d = KeyRangeDist::new(total, social_graph());
        let shares = d.range_shares();
        let mut r = rand::rngs::StdRng::seed_from_u64(7);
        let draws = 300_000;
        let mut counts = vec![0u64; 30];
        for _ in 0..draws {
            let k = d.next_key(&mut r);
            assert!((0..total).contains(&k));
            counts[(k / d.range_size()) as usize] += 1;
        }
        for (i, (&c, &s)) in counts.iter().zip(&shares).enumerate() {
            let got = c as f64 / draws as f64;
            assert!((got - s).abs() < 0.01, "range {i}: {got} vs {s}");
        }
        // The hottest range (pfx = 1 term: a·e^b + c·e^d) dominates.
        let max = shares.iter().cloned().fold(0.0, f64::max);
        let p1 = 14.18 * (-2.917f64).exp() + 0.0164 * (-0.08082f64).exp();
        let total_p: f64 = (1..=30)
            .map(|i| 14.18 * (-2.917 * i as f64).exp() + 0.0164 * (-0.08082 * i as f64).exp())
            .sum();
        assert!(
            (max - p1 / total_p).abs() < 0.02,
            "{max} vs {}",
            p1 / total_p
        );
    }
}
