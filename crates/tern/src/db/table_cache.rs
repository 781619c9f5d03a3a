//! Open table readers, by file number.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cache::{BlockCache, OpenFiles};
use crate::error::Result;
use crate::io::FsRef;
use crate::sst::Table;
use crate::wal::table_file_name;

/// Opens and caches [`Table`]s.
pub struct TableCache {
    dir: PathBuf,
    fs: FsRef,
    blocks: Option<Arc<BlockCache>>,
    open: OpenFiles<Table>,
}

impl TableCache {
    /// A cache for tables in `dir`, sharing `blocks` between them.
    pub fn new(dir: PathBuf, fs: FsRef, blocks: Option<Arc<BlockCache>>) -> Self {
        TableCache {
            dir,
            fs,
            blocks,
            open: OpenFiles::default(),
        }
    }

    /// The reader for table `number`, opening it if needed.
    pub fn get(&self, number: u64) -> Result<Arc<Table>> {
        self.open.get_or_open(number, || {
            let path = self.dir.join(table_file_name(number));
            Table::open(&self.fs, &path, number, self.blocks.clone())
        })
    }

    /// Forgets table `number` (its file is being deleted).
    pub fn evict(&self, number: u64) {
        self.open.evict(number);
    }
}
