//! Sorted string tables: immutable files of internal entries in key order.
//!
//! A table is written once by a [`TableBuilder`] and read through a shared
//! [`Table`]: point lookups with [`Table::get`] (bloom filter, then index,
//! then one data block) and ordered scans with [`Table::iter`]. Blocks are
//! verified against their checksums on every read from disk and may be
//! kept, decoded, in a shared [`BlockCache`](crate::cache::BlockCache).
//!
//! The byte layout is specified in `docs/format/sst.md`; the pure encoders
//! and decoders live in [`crate::format::block`], [`crate::format::bloom`]
//! and [`crate::format::table`].

mod builder;
mod index_prefixes;
mod iter;
mod reader;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;

pub use crate::format::table::TableProperties;
pub use builder::{TableBuilder, TableSummary, MAX_ENTRY_SIZE};
pub use iter::TableIter;
pub use reader::Table;

use crate::options::Compression;

/// How tables are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableOptions {
    /// Target uncompressed size of a data block in bytes (default 4096). A
    /// block is closed once it reaches this size, so a block holding one
    /// large value may be bigger.
    pub block_size: usize,
    /// Entries between restart points in a block (default 16).
    pub restart_interval: usize,
    /// Bloom filter bits per user key (default 10, about 1% false
    /// positives); 0 writes no filter.
    pub bloom_bits_per_key: u32,
    /// Compression of data blocks (default none). A block is stored raw when
    /// compressing it saves less than 12.5%, and without trying when it
    /// holds no inline value (only blob references and tombstones).
    pub compression: Compression,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_size: 4096,
            restart_interval: 16,
            bloom_bits_per_key: 10,
            compression: Compression::None,
        }
    }
}
