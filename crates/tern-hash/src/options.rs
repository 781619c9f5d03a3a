//! What a hash store is opened with.

use crate::{Error, Result};

/// Settings of a hash store. The defaults suit a store of a few GiB with a
/// quarter of it in memory; tests shrink the pages to make the log spill.
#[derive(Clone, Debug)]
pub struct HashOptions {
    /// log2 of the log page size in bytes (default 22: 4 MiB). A record —
    /// 24 bytes of header, the key and the value — must fit in one page.
    pub page_bits: u32,
    /// Pages of the log kept in memory (default 64). Memory use is this
    /// many pages plus the index.
    pub memory_pages: u32,
    /// Of the in-memory pages, how many at the tail take in-place updates
    /// (default 57, about 90%); the rest is read-only and updated by copying
    /// the record to the tail.
    pub mutable_pages: u32,
    /// log2 of a log segment file's size in bytes (default 30: 1 GiB). Log
    /// compaction frees disk space a segment at a time.
    pub segment_bits: u32,
    /// log2 of the number of 64-byte index buckets (default 20: 64 MiB,
    /// seven entries a bucket). Keys beyond what the buckets hold share
    /// entries and make longer chains; a bucket with more than seven distinct
    /// tags takes an overflow bucket from an area half the table's size.
    pub index_bits: u32,
    /// How often a background thread takes a checkpoint (default every
    /// second; `None`: only when [`crate::HashStore::checkpoint`] is called).
    /// A crash loses the writes after the last completed checkpoint.
    pub checkpoint_interval: Option<std::time::Duration>,
    /// Once the log spans more than this many bytes, the periodic
    /// checkpointer compacts its oldest segments (default `None`: only
    /// [`crate::HashStore::compact`] does). Live records are copied forward,
    /// so a limit below the live data's size makes every round copy.
    pub log_size_limit: Option<u64>,
}

impl Default for HashOptions {
    fn default() -> Self {
        HashOptions {
            page_bits: 22,
            memory_pages: 64,
            mutable_pages: 57,
            segment_bits: 30,
            index_bits: 20,
            checkpoint_interval: Some(std::time::Duration::from_secs(1)),
            log_size_limit: None,
        }
    }
}

impl HashOptions {
    /// Small pages, segments and index for tests that want the log to spill
    /// to disk after a few hundred records; checkpoints only on request.
    pub fn small() -> Self {
        HashOptions {
            page_bits: 12,
            memory_pages: 8,
            mutable_pages: 4,
            segment_bits: 16,
            index_bits: 8,
            checkpoint_interval: None,
            log_size_limit: None,
        }
    }

    /// Checks the settings against each other.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(what));
        if !(12..=26).contains(&self.page_bits) {
            return bad(format!(
                "page_bits {} is outside 12..=26 (4 KiB to 64 MiB pages)",
                self.page_bits
            ));
        }
        if self.memory_pages < 2 {
            return bad(format!(
                "memory_pages {} is below 2: the log needs a page to write and one to flush",
                self.memory_pages
            ));
        }
        if self.mutable_pages == 0 || self.mutable_pages >= self.memory_pages {
            return bad(format!(
                "mutable_pages {} must be at least 1 and below memory_pages ({})",
                self.mutable_pages, self.memory_pages
            ));
        }
        if self.segment_bits < self.page_bits || self.segment_bits > 40 {
            return bad(format!(
                "segment_bits {} must be at least page_bits ({}) and at most 40",
                self.segment_bits, self.page_bits
            ));
        }
        if !(4..=32).contains(&self.index_bits) {
            return bad(format!("index_bits {} is outside 4..=32", self.index_bits));
        }
        Ok(())
    }

    /// The page size in bytes.
    pub fn page_size(&self) -> u64 {
        1 << self.page_bits
    }

    /// The largest key and value, together, that fit in a record.
    pub fn max_record_payload(&self) -> u64 {
        self.page_size() - crate::record::HEADER_LEN as u64
    }
}
