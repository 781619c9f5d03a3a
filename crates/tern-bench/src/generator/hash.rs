//! YCSB's 64-bit FNV-1 hash of an integer, used to scatter keys.

const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// FNV-1 over the eight little-endian bytes of `val`, as YCSB computes it.
pub fn fnv_hash64(mut val: u64) -> u64 {
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = val & 0xff;
        val >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatters_neighbours() {
        assert_ne!(fnv_hash64(0), fnv_hash64(1));
        assert_eq!(fnv_hash64(7), fnv_hash64(7));
        // Known value: FNV-1 of eight zero bytes.
        let mut h = FNV_OFFSET_BASIS_64;
        for _ in 0..8 {
            h = h.wrapping_mul(FNV_PRIME_64);
        }
        assert_eq!(fnv_hash64(0), h);
    }
}
