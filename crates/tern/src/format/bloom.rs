//! Bloom filter over user keys, one per table.
//!
//! Layout: `bits[m/8] ‖ k u8`, where `m` is a multiple of 8 (at least 64) and
//! `k` the number of probes (1..=30). Each key is hashed once with 64-bit
//! xxh3; probe `i` tests bit `(h + i·δ) mod m`, with `δ = rotl(h, 31) | 1`
//! (double hashing). The filter block is stored with its own checksum like
//! every other block; see `docs/format/sst.md`.

use xxhash_rust::xxh3::xxh3_64;

use crate::error::DecodeError;

/// Largest number of probes a filter may use.
pub const MAX_PROBES: u8 = 30;

/// Hash of a key as used by the filter.
#[inline]
pub fn bloom_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// Number of probes for `bits_per_key` (≈ bits_per_key · ln 2, clamped to 1..=30).
pub fn num_probes(bits_per_key: u32) -> u8 {
    let k = (f64::from(bits_per_key) * std::f64::consts::LN_2).round() as u32;
    k.clamp(1, u32::from(MAX_PROBES)) as u8
}

/// Collects key hashes and builds a filter.
#[derive(Debug, Clone)]
pub struct BloomBuilder {
    bits_per_key: u32,
    hashes: Vec<u64>,
}

impl BloomBuilder {
    /// A builder using `bits_per_key` bits of filter per key (at least 1).
    pub fn new(bits_per_key: u32) -> Self {
        BloomBuilder {
            bits_per_key: bits_per_key.max(1),
            hashes: Vec::new(),
        }
    }

    /// Adds a key.
    pub fn add_key(&mut self, key: &[u8]) {
        self.hashes.push(bloom_hash(key));
    }

    /// Adds a key by its [`bloom_hash`].
    pub fn add_hash(&mut self, h: u64) {
        self.hashes.push(h);
    }

    /// Keys added so far.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True when no key was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Bytes the finished filter will take.
    pub fn estimated_size(&self) -> usize {
        Self::num_bits(self.hashes.len(), self.bits_per_key) / 8 + 1
    }

    fn num_bits(n: usize, bits_per_key: u32) -> usize {
        let bits = n.saturating_mul(bits_per_key as usize).max(64);
        bits.div_ceil(8).saturating_mul(8)
    }

    /// Builds the filter.
    pub fn finish(&self) -> Vec<u8> {
        let m = Self::num_bits(self.hashes.len(), self.bits_per_key);
        let k = num_probes(self.bits_per_key);
        let mut out = vec![0u8; m / 8 + 1];
        for &h in &self.hashes {
            let delta = h.rotate_left(31) | 1;
            let mut x = h;
            for _ in 0..k {
                let bit = (x % m as u64) as usize;
                out[bit / 8] |= 1 << (bit % 8);
                x = x.wrapping_add(delta);
            }
        }
        out[m / 8] = k;
        out
    }
}

/// A decoded filter, borrowing its bytes.
#[derive(Debug, Clone, Copy)]
pub struct BloomFilter<'a> {
    bits: &'a [u8],
    k: u8,
}

impl<'a> BloomFilter<'a> {
    /// Checks the layout of `data`.
    pub fn new(data: &'a [u8]) -> Result<Self, DecodeError> {
        let Some((&k, bits)) = data.split_last() else {
            return Err(DecodeError::new(0, "empty bloom filter"));
        };
        if k == 0 || k > MAX_PROBES {
            return Err(DecodeError::new(
                data.len() - 1,
                format!("bad probe count {k}"),
            ));
        }
        if bits.is_empty() {
            return Err(DecodeError::new(0, "bloom filter without bits"));
        }
        Ok(BloomFilter { bits, k })
    }

    /// False only if `key` was certainly not added.
    #[inline]
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(bloom_hash(key))
    }

    /// [`BloomFilter::may_contain`] for a precomputed [`bloom_hash`].
    pub fn may_contain_hash(&self, h: u64) -> bool {
        let m = (self.bits.len() * 8) as u64;
        let delta = h.rotate_left(31) | 1;
        let mut x = h;
        for _ in 0..self.k {
            let bit = (x % m) as usize;
            if self.bits[bit / 8] & (1 << (bit % 8)) == 0 {
                return false;
            }
            x = x.wrapping_add(delta);
        }
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_low_fp_rate() {
        for n in [1usize, 10, 1000, 20_000] {
            let mut b = BloomBuilder::new(10);
            for i in 0..n {
                b.add_key(format!("key-{i}").as_bytes());
            }
            let data = b.finish();
            assert_eq!(data.len(), b.estimated_size());
            let f = BloomFilter::new(&data).unwrap();
            for i in 0..n {
                assert!(f.may_contain(format!("key-{i}").as_bytes()));
            }
            let trials = 100_000;
            let fp = (0..trials)
                .filter(|i| f.may_contain(format!("other-{i}").as_bytes()))
                .count();
            let rate = fp as f64 / trials as f64;
            if n >= 1000 {
                assert!(rate < 0.02, "n {n}: false-positive rate {rate}");
            }
        }
    }

    #[test]
    fn probes_from_bits_per_key() {
        assert_eq!(num_probes(10), 7);
        assert_eq!(num_probes(1), 1);
        assert_eq!(num_probes(100), 30);
    }

    #[test]
    fn empty_filter_matches_nothing() {
        let data = BloomBuilder::new(10).finish();
        let f = BloomFilter::new(&data).unwrap();
        assert!(!f.may_contain(b"x"));
    }

    #[test]
    fn bad_filters_rejected() {
        assert!(BloomFilter::new(&[]).is_err());
        assert!(BloomFilter::new(&[7]).is_err());
        assert!(BloomFilter::new(&[0, 0, 0]).is_err());
        assert!(BloomFilter::new(&[0, 31]).is_err());
    }
}
