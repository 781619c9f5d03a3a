//! Open blob readers, by file number.

use std::path::PathBuf;
use std::sync::Arc;

use super::BlobReader;
use crate::cache::OpenFiles;
use crate::error::Result;
use crate::io::FsRef;
use crate::wal::blob_file_name;

/// Opens and caches [`BlobReader`]s.
pub struct BlobCache {
    dir: PathBuf,
    fs: FsRef,
    open: OpenFiles<BlobReader>,
}

impl BlobCache {
    /// A cache for blob files in `dir`.
    pub fn new(dir: PathBuf, fs: FsRef) -> Self {
        BlobCache {
            dir,
            fs,
            open: OpenFiles::default(),
        }
    }

    /// The reader for blob file `number`.
    pub fn get(&self, number: u64) -> Result<Arc<BlobReader>> {
        self.open.get_or_open(number, || {
            let path = self.dir.join(blob_file_name(number));
            BlobReader::open(&self.fs, &path, number).map(Arc::new)
        })
    }

    /// Forgets blob file `number` (it is being deleted).
    pub fn evict(&self, number: u64) {
        self.open.evict(number);
    }
}
