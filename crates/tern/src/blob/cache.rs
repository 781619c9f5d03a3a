//! Open blob readers, by file number.

use std::path::PathBuf;
use std::sync::Arc;

use super::BlobReader;
use crate::cache::OpenFiles;
use crate::error::Result;
use crate::io::FsRef;
use crate::wal::blob_file_name;

/// Opens blob files through a bounded set of open files (the store's, or
/// a job's own).
pub struct BlobCache {
    dir: PathBuf,
    fs: FsRef,
    open: Arc<OpenFiles>,
}

impl BlobCache {
    /// A cache for blob files in `dir`, keeping them open in `open`.
    pub fn new(dir: PathBuf, fs: FsRef, open: Arc<OpenFiles>) -> Self {
        BlobCache { dir, fs, open }
    }

    /// The reader for blob file `number`.
    pub fn get(&self, number: u64) -> Result<Arc<BlobReader>> {
        self.open.get_or_open(number, || {
            let path = self.dir.join(blob_file_name(number));
            let r = BlobReader::open_lazy(&self.fs, &path, number)?;
            let bytes = r.resident_bytes();
            Ok((Arc::new(r), bytes))
        })
    }

    /// Forgets blob file `number` (it is being deleted).
    pub fn evict(&self, number: u64) {
        self.open.evict(number);
    }
}
