//! CRC32C with LevelDB's masking, used for every checksummed unit on disk.
//!
//! Masking keeps a CRC stored inside data that is itself checksummed from
//! producing degenerate values; see `docs/format/` for where it is applied.

const MASK_DELTA: u32 = 0xa282_ead8;

/// CRC32C of `data`, masked.
pub fn crc(data: &[u8]) -> u32 {
    mask(crc32c::crc32c(data))
}

/// CRC32C of `a ‖ b`, masked, without concatenating.
pub fn crc2(a: &[u8], b: &[u8]) -> u32 {
    mask(crc32c::crc32c_append(crc32c::crc32c(a), b))
}

fn mask(c: u32) -> u32 {
    c.rotate_right(15).wrapping_add(MASK_DELTA)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_equals_whole() {
        assert_eq!(crc(b"hello world"), crc2(b"hello ", b"world"));
        assert_ne!(crc(b"hello world"), crc(b"hello worle"));
    }
}
