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

/// A masked CRC32C built from pieces, equal to [`crc`] of their
/// concatenation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Crc(u32);

impl Crc {
    /// Adds `data`.
    pub fn update(&mut self, data: &[u8]) {
        self.0 = crc32c::crc32c_append(self.0, data);
    }

    /// The masked CRC of everything added.
    pub fn finish(self) -> u32 {
        mask(self.0)
    }
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
        let mut c = Crc::default();
        c.update(b"hello ");
        c.update(b"world");
        assert_eq!(c.finish(), crc(b"hello world"));
    }
}
