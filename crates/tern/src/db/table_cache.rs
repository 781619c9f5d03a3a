//! Open table readers, by file number.
//!
//! Tables stay open while they are live so a read costs no `open` call;
//! deleted tables are evicted when their files are removed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::cache::BlockCache;
use crate::error::Result;
use crate::io::FsRef;
use crate::sst::Table;
use crate::wal::table_file_name;

/// Opens and caches [`Table`]s.
pub struct TableCache {
    dir: PathBuf,
    fs: FsRef,
    blocks: Option<Arc<BlockCache>>,
    open: RwLock<HashMap<u64, Arc<Table>>>,
}

impl TableCache {
    /// A cache for tables in `dir`, sharing `blocks` between them.
    pub fn new(dir: PathBuf, fs: FsRef, blocks: Option<Arc<BlockCache>>) -> Self {
        TableCache {
            dir,
            fs,
            blocks,
            open: RwLock::new(HashMap::new()),
        }
    }

    /// The reader for table `number`, opening it if needed.
    pub fn get(&self, number: u64, _size: u64) -> Result<Arc<Table>> {
        if let Some(t) = self.open.read().get(&number) {
            return Ok(t.clone());
        }
        let path = self.dir.join(table_file_name(number));
        let table = Table::open(&self.fs, &path, number, self.blocks.clone())?;
        Ok(self.open.write().entry(number).or_insert(table).clone())
    }

    /// Forgets table `number` (its file is being deleted).
    pub fn evict(&self, number: u64) {
        self.open.write().remove(&number);
    }
}
