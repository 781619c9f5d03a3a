//! Helpers the engine's benchmarks share.

/// Key `i` of a set spread over the key space, as hashed keys are.
pub fn spread_key(i: u32) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes()
}
