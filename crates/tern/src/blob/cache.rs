//! Open blob readers, by file number.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use super::BlobReader;
use crate::error::Result;
use crate::io::FsRef;
use crate::wal::blob_file_name;

/// Opens and caches [`BlobReader`]s.
pub struct BlobCache {
    dir: PathBuf,
    fs: FsRef,
    open: RwLock<HashMap<u64, Arc<BlobReader>>>,
}

impl BlobCache {
    /// A cache for blob files in `dir`.
    pub fn new(dir: PathBuf, fs: FsRef) -> Self {
        BlobCache {
            dir,
            fs,
            open: RwLock::new(HashMap::new()),
        }
    }

    /// The reader for blob file `number`.
    pub fn get(&self, number: u64) -> Result<Arc<BlobReader>> {
        if let Some(r) = self.open.read().get(&number) {
            return Ok(r.clone());
        }
        let path = self.dir.join(blob_file_name(number));
        let reader = Arc::new(BlobReader::open(&self.fs, &path, number)?);
        Ok(self.open.write().entry(number).or_insert(reader).clone())
    }

    /// Forgets blob file `number` (it is being deleted).
    pub fn evict(&self, number: u64) {
        self.open.write().remove(&number);
    }
}
