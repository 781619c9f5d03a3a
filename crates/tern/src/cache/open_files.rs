//! Open file readers by file number, shared by the table and blob caches:
//! a reader stays open while its file is live, so a read costs no `open`,
//! and is forgotten when the file is deleted.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::Result;

/// Readers of type `T`, by file number.
pub struct OpenFiles<T> {
    open: RwLock<HashMap<u64, Arc<T>>>,
}

impl<T> Default for OpenFiles<T> {
    fn default() -> Self {
        OpenFiles {
            open: RwLock::new(HashMap::new()),
        }
    }
}

impl<T> OpenFiles<T> {
    /// The reader for file `number`, calling `open` on first use.
    pub fn get_or_open(
        &self,
        number: u64,
        open: impl FnOnce() -> Result<Arc<T>>,
    ) -> Result<Arc<T>> {
        if let Some(r) = self.open.read().get(&number) {
            return Ok(r.clone());
        }
        let reader = open()?;
        Ok(self.open.write().entry(number).or_insert(reader).clone())
    }

    /// Forgets file `number` (it is being deleted).
    pub fn evict(&self, number: u64) {
        self.open.write().remove(&number);
    }
}
