//! Bloom filter over user keys, one per table.
//!
//! Two layouts, told apart by the last byte:
//!
//! - **Blocked** (written now): `bits[m/8] ‖ k u8 ‖ 0xB1`, `m` a multiple of
//!   512. Each key is hashed once with 64-bit xxh3; the upper 32 bits pick
//!   one 64-byte block and the lower 32 bits, multiplied by the golden
//!   ratio between probes, pick `k` bits inside it. A probe is one cache
//!   line: the classic layout's `k` probes were `k` cache misses in a filter
//!   larger than the cache (a 2M-key table's is 2.5 MB), for about the same
//!   false-positive rate (1.2% against 0.8% at 10 bits per key).
//! - **Classic** (read for tables written before): `bits[m/8] ‖ k u8`, `m` a
//!   multiple of 8 (at least 64); probe `i` tests bit `(h + i·δ) mod m`,
//!   with `δ = rotl(h, 31) | 1` (double hashing).
//!
//! The filter block is stored with its own checksum like every other
//! block; see `docs/format/sst.md`.

use xxhash_rust::xxh3::xxh3_64;

use crate::error::DecodeError;

/// Largest number of probes a filter may use.
pub const MAX_PROBES: u8 = 30;

/// Last byte of a blocked filter (a classic one ends in its probe count,
/// 1..=30).
pub const BLOCKED_MARKER: u8 = 0xB1;

/// Bits in one block of a blocked filter: a 64-byte cache line.
const BLOCK_BITS: usize = 512;

/// Multiplier that moves a blocked filter's 32-bit probe hash on.
const PROBE_MIX: u32 = 0x9E37_79B9;

/// Hash of a key as used by the filter.
#[inline]
pub fn bloom_hash(key: &[u8]) -> u64 {
    xxh3_64(key)
}

/// Number of probes a classic filter used for `bits_per_key` (≈
/// bits_per_key · ln 2, clamped to 1..=30).
pub fn num_probes(bits_per_key: u32) -> u8 {
    let k = (f64::from(bits_per_key) * std::f64::consts::LN_2).round() as u32;
    k.clamp(1, u32::from(MAX_PROBES)) as u8
}

/// Number of probes a blocked filter uses for `bits_per_key`: fewer than a
/// classic filter's, since more probes in one block fill it unevenly
/// (≈ 0.6 · bits_per_key, clamped to 1..=30; 6 at 10 bits per key).
pub fn num_blocked_probes(bits_per_key: u32) -> u8 {
    let k = (f64::from(bits_per_key) * 0.6).round() as u32;
    k.clamp(1, u32::from(MAX_PROBES)) as u8
}

/// The block a blocked filter of `blocks` blocks keeps hash `h` in.
#[inline]
fn block_of(h: u64, blocks: usize) -> usize {
    // Maps the upper 32 bits onto 0..blocks without a division.
    (((h >> 32) * blocks as u64) >> 32) as usize
}

/// The `k` bits (0..512) hash `h` sets in its block of a blocked filter;
/// the writer and the reader both take them from here.
#[inline]
fn blocked_probes(h: u64, k: u8) -> impl Iterator<Item = usize> {
    let mut x = h as u32;
    (0..k).map(move |_| {
        let bit = (x >> 23) as usize;
        x = x.wrapping_mul(PROBE_MIX);
        bit
    })
}

/// The `k` bits (0..m) hash `h` sets in a classic filter of `m` bits.
#[inline]
fn classic_probes(h: u64, k: u8, m: u64) -> impl Iterator<Item = usize> {
    let delta = h.rotate_left(31) | 1;
    let mut x = h;
    (0..k).map(move |_| {
        let bit = (x % m) as usize;
        x = x.wrapping_add(delta);
        bit
    })
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
        Self::num_bits(self.hashes.len(), self.bits_per_key) / 8 + 2
    }

    fn num_bits(n: usize, bits_per_key: u32) -> usize {
        let bits = n.saturating_mul(bits_per_key as usize).max(BLOCK_BITS);
        bits.div_ceil(BLOCK_BITS).saturating_mul(BLOCK_BITS)
    }

    /// Builds the filter (blocked layout).
    pub fn finish(&self) -> Vec<u8> {
        let m = Self::num_bits(self.hashes.len(), self.bits_per_key);
        let k = num_blocked_probes(self.bits_per_key);
        let blocks = m / BLOCK_BITS;
        let mut out = vec![0u8; m / 8 + 2];
        for &h in &self.hashes {
            let block = &mut out[block_of(h, blocks) * 64..][..64];
            for bit in blocked_probes(h, k) {
                block[bit / 8] |= 1 << (bit % 8);
            }
        }
        out[m / 8] = k;
        out[m / 8 + 1] = BLOCKED_MARKER;
        out
    }

    /// Builds a filter in the classic layout, as tables written before the
    /// blocked one hold (for tests of reading them).
    #[cfg(test)]
    pub(crate) fn finish_classic(&self) -> Vec<u8> {
        let m = {
            let bits = self
                .hashes
                .len()
                .saturating_mul(self.bits_per_key as usize)
                .max(64);
            bits.div_ceil(8).saturating_mul(8)
        };
        let k = num_probes(self.bits_per_key);
        let mut out = vec![0u8; m / 8 + 1];
        for &h in &self.hashes {
            for bit in classic_probes(h, k, m as u64) {
                out[bit / 8] |= 1 << (bit % 8);
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
    blocked: bool,
}

impl<'a> BloomFilter<'a> {
    /// Checks the layout of `data`.
    pub fn new(data: &'a [u8]) -> Result<Self, DecodeError> {
        let Some((&last, rest)) = data.split_last() else {
            return Err(DecodeError::new(0, "empty bloom filter"));
        };
        let (blocked, k, bits) = if last == BLOCKED_MARKER {
            let Some((&k, bits)) = rest.split_last() else {
                return Err(DecodeError::new(
                    0,
                    "blocked bloom filter without a probe count",
                ));
            };
            if bits.is_empty() || bits.len() % (BLOCK_BITS / 8) != 0 {
                return Err(DecodeError::new(
                    0,
                    format!(
                        "blocked bloom filter of {} bytes, not whole 64-byte blocks",
                        bits.len()
                    ),
                ));
            }
            (true, k, bits)
        } else {
            (false, last, rest)
        };
        if k == 0 || k > MAX_PROBES {
            let at = data.len() - if blocked { 2 } else { 1 };
            return Err(DecodeError::new(at, format!("bad probe count {k}")));
        }
        if bits.is_empty() {
            return Err(DecodeError::new(0, "bloom filter without bits"));
        }
        Ok(BloomFilter { bits, k, blocked })
    }

    /// True for the blocked layout, false for the classic one.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// False only if `key` was certainly not added.
    #[inline]
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(bloom_hash(key))
    }

    /// [`BloomFilter::may_contain`] for a precomputed [`bloom_hash`].
    pub fn may_contain_hash(&self, h: u64) -> bool {
        if self.blocked {
            let blocks = self.bits.len() / 64;
            let block = &self.bits[block_of(h, blocks) * 64..][..64];
            return blocked_probes(h, self.k).all(|bit| block[bit / 8] & (1 << (bit % 8)) != 0);
        }
        let m = (self.bits.len() * 8) as u64;
        classic_probes(h, self.k, m).all(|bit| self.bits[bit / 8] & (1 << (bit % 8)) != 0)
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
    fn classic_filters_of_older_tables_still_answer() {
        let n = 20_000;
        let mut b = BloomBuilder::new(10);
        for i in 0..n {
            b.add_key(format!("key-{i}").as_bytes());
        }
        let data = b.finish_classic();
        assert_eq!(*data.last().unwrap(), 7, "a classic filter ends in k");
        let f = BloomFilter::new(&data).unwrap();
        assert!(!f.blocked);
        for i in 0..n {
            assert!(f.may_contain(format!("key-{i}").as_bytes()));
        }
        let fp = (0..100_000)
            .filter(|i| f.may_contain(format!("other-{i}").as_bytes()))
            .count();
        assert!(fp < 2_000, "false positives {fp} of 100000");
    }

    #[test]
    fn a_key_sets_bits_in_one_cache_line() {
        for i in 0..200 {
            let mut b = BloomBuilder::new(10);
            b.add_key(format!("k{i}").as_bytes());
            // Many keys whose hash is 0 make many blocks, all probed in block 0.
            for _ in 0..1000 {
                b.add_hash(0);
            }
            let data = b.finish();
            let bits = &data[..data.len() - 2];
            let lines: Vec<usize> = bits
                .chunks(64)
                .enumerate()
                .filter(|(_, c)| c.iter().any(|&x| x != 0))
                .map(|(l, _)| l)
                .collect();
            // Block 0 (the zero hashes) and at most one other.
            assert!(lines.len() <= 2 && lines.first() == Some(&0), "{lines:?}");
        }
    }

    #[test]
    fn blocked_false_positive_rate_at_ten_bits_per_key() {
        let n = 100_000;
        let mut b = BloomBuilder::new(10);
        for i in 0..n {
            b.add_key(format!("key-{i}").as_bytes());
        }
        let data = b.finish();
        assert_eq!(data.len(), b.estimated_size());
        assert_eq!(data[data.len() - 1], BLOCKED_MARKER);
        let f = BloomFilter::new(&data).unwrap();
        let trials = 200_000;
        let fp = (0..trials)
            .filter(|i| f.may_contain(format!("other-{i}").as_bytes()))
            .count();
        let rate = fp as f64 / trials as f64;
        assert!(rate < 0.016, "false-positive rate {rate}");
    }

    #[test]
    fn bad_filters_rejected() {
        let marker = BLOCKED_MARKER;
        assert!(BloomFilter::new(&[marker]).is_err());
        assert!(BloomFilter::new(&[6, marker]).is_err());
        let mut short = vec![0u8; 63];
        short.extend([6, marker]);
        assert!(BloomFilter::new(&short).is_err());
        let mut no_probes = vec![0u8; 64];
        no_probes.extend([0, marker]);
        assert!(BloomFilter::new(&no_probes).is_err());
        let mut ok = vec![0u8; 128];
        ok.extend([6, marker]);
        assert!(BloomFilter::new(&ok).is_ok());
        assert!(BloomFilter::new(&[]).is_err());
        assert!(BloomFilter::new(&[7]).is_err());
        assert!(BloomFilter::new(&[0, 0, 0]).is_err());
        assert!(BloomFilter::new(&[0, 31]).is_err());
    }
}
