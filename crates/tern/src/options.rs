//! Options. Each is documented with its default and unit; "behaviour" options
//! change what the store does, "performance" options only how fast.

/// Per-block compression of SST data blocks. Do not change the values: they
/// are stored in every block trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Compression {
    /// Stored as is.
    None = 0,
    /// LZ4 block format (`lz4_flex`), size-prefixed.
    Lz4 = 1,
    /// Zstandard, level 3 by default.
    Zstd = 2,
}

impl Compression {
    /// Decodes a stored compression byte.
    pub fn from_u8(b: u8) -> Option<Compression> {
        match b {
            0 => Some(Compression::None),
            1 => Some(Compression::Lz4),
            2 => Some(Compression::Zstd),
            _ => None,
        }
    }
}
