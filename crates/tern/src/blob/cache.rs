//! Open blob readers, by file number.

use std::path::PathBuf;
use std::sync::Arc;

use super::BlobReader;
use crate::cache::{BlockCache, OpenFiles};
use crate::error::Result;
use crate::io::FsRef;
use crate::wal::blob_file_name;

/// Opens blob files through a bounded set of open files (the store's, or
/// a job's own).
pub struct BlobCache {
    dir: PathBuf,
    fs: FsRef,
    open: Arc<OpenFiles>,
    verified_index: bool,
    mapped_reads: bool,
    records: Option<Arc<BlockCache>>,
}

impl BlobCache {
    /// A cache for blob files in `dir`, keeping them open in `open`. Readers
    /// read index entries on demand (reads check the record they reach).
    pub fn new(dir: PathBuf, fs: FsRef, open: Arc<OpenFiles>) -> Self {
        BlobCache {
            dir,
            fs,
            open,
            verified_index: false,
            mapped_reads: false,
            records: None,
        }
    }

    /// Readers read values through the file's mapping while values are in
    /// memory (`Settings::mmap_blob_reads`).
    pub fn mapped_reads(mut self, on: bool) -> Self {
        self.mapped_reads = on;
        self
    }

    /// Readers' point reads keep the records they read in `cache` and look
    /// there first (for direct reads, where no page cache keeps them).
    pub fn record_cache(mut self, cache: Option<Arc<BlockCache>>) -> Self {
        self.records = cache;
        self
    }

    /// Like [`BlobCache::new`], but readers load and verify the whole index
    /// at open: for compaction, which writes offsets it looks up into new
    /// tables without reading the records, so an entry must be proven.
    pub fn with_verified_index(dir: PathBuf, fs: FsRef, open: Arc<OpenFiles>) -> Self {
        BlobCache {
            verified_index: true,
            ..Self::new(dir, fs, open)
        }
    }

    /// The reader for blob file `number`.
    pub fn get(&self, number: u64) -> Result<Arc<BlobReader>> {
        self.open.get_or_open(number, || {
            let path = self.dir.join(blob_file_name(number));
            let r = if self.verified_index {
                BlobReader::open(&self.fs, &path, number)?
            } else {
                BlobReader::open_lazy(&self.fs, &path, number)?
            };
            let r = r
                .with_mapped_reads(self.mapped_reads)
                .with_record_cache(self.records.clone());
            let bytes = r.resident_bytes();
            Ok((Arc::new(r), bytes))
        })
    }

    /// Blob file `number`'s reader if it is open; `None` if it needs
    /// opening.
    pub fn get_open(&self, number: u64) -> Option<Result<Arc<BlobReader>>> {
        self.open.get_open(number)
    }

    /// Forgets blob file `number` (it is being deleted).
    pub fn evict(&self, number: u64) {
        self.open.evict(number);
    }
}
