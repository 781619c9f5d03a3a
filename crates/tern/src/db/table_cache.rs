//! Open table readers, by file number.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cache::{BlockCache, OpenFiles};
use crate::error::Result;
use crate::io::FsRef;
use crate::sst::Table;
use crate::wal::table_file_name;

/// Opens tables through the store's bounded set of open files.
pub struct TableCache {
    dir: PathBuf,
    fs: FsRef,
    blocks: Option<Arc<BlockCache>>,
    open: Arc<OpenFiles>,
}

impl TableCache {
    /// A cache for tables in `dir`, sharing `blocks` between them and
    /// keeping them open in `open`.
    pub fn new(
        dir: PathBuf,
        fs: FsRef,
        blocks: Option<Arc<BlockCache>>,
        open: Arc<OpenFiles>,
    ) -> Self {
        TableCache {
            dir,
            fs,
            blocks,
            open,
        }
    }

    /// The reader for table `number`, opening it if needed.
    pub fn get(&self, number: u64) -> Result<Arc<Table>> {
        self.open.get_or_open(number, || {
            let path = self.dir.join(table_file_name(number));
            let t = Table::open(&self.fs, &path, number, self.blocks.clone())?;
            let bytes = t.resident_bytes();
            Ok((t, bytes))
        })
    }

    /// Table `number` if it is open already; `None` if it needs opening.
    pub fn get_open(&self, number: u64) -> Option<Result<Arc<Table>>> {
        self.open.get_open(number)
    }

    /// Forgets table `number` (its file is being deleted).
    pub fn evict(&self, number: u64) {
        self.open.evict(number);
    }
}
