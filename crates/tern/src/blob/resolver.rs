//! Turns a `BlobRef` found in a table into its value.

use std::path::Path;
use std::sync::Arc;

use super::{BlobCache, BlobReader, ExpectedRecord};
use crate::error::{Error, Result};
use crate::format::blob::BlobRef;
use crate::version::Version;

/// Resolves refs against one version's blob files and lineage.
#[derive(Clone)]
pub struct BlobResolver {
    version: Arc<Version>,
    blobs: Arc<BlobCache>,
}

impl BlobResolver {
    /// A resolver for `version`.
    pub fn new(version: Arc<Version>, blobs: Arc<BlobCache>) -> Self {
        BlobResolver { version, blobs }
    }

    /// The value `encoded_ref` (stored for `user_key` at sequence `seq`)
    /// points to: follows GC lineage to the record's current file, then
    /// reads it and checks it holds that version.
    /// `source` names the table (and block offset) the reference was read
    /// from, for the error when it does not decode.
    pub fn resolve(
        &self,
        source: (&Path, u64),
        user_key: &[u8],
        seq: u64,
        encoded_ref: &[u8],
    ) -> Result<Vec<u8>> {
        let (reader, offset, size) = self.locate(source, encoded_ref)?;
        reader.read_value(
            offset,
            ExpectedRecord {
                key: user_key,
                seq,
                size,
            },
        )
    }

    /// [`BlobResolver::resolve`] without waiting on the device: `Ok(None)`
    /// if the blob file is not open or the record is not in the page cache.
    pub fn resolve_cached(
        &self,
        source: (&Path, u64),
        user_key: &[u8],
        seq: u64,
        encoded_ref: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        let mut closed = false;
        let located = self.locate_with(source, encoded_ref, |n| match self.blobs.get_open(n) {
            Some(r) => r,
            None => {
                closed = true;
                Err(Error::Internal(String::new()))
            }
        });
        let (reader, offset, size) = match located {
            Ok(l) => l,
            Err(_) if closed => return Ok(None),
            Err(e) => return Err(e),
        };
        reader.read_value_cached(
            offset,
            ExpectedRecord {
                key: user_key,
                seq,
                size,
            },
        )
    }

    /// The reader, offset and value size of the record a ref points to now.
    fn locate(
        &self,
        source: (&Path, u64),
        encoded_ref: &[u8],
    ) -> Result<(Arc<BlobReader>, u64, u32)> {
        self.locate_with(source, encoded_ref, |n| self.blobs.get(n))
    }

    /// [`locate`](Self::locate), opening files through `open` (a caller
    /// that reads many values keeps its own readers at hand).
    pub(crate) fn locate_with(
        &self,
        (table, block): (&Path, u64),
        encoded_ref: &[u8],
        open: impl FnOnce(u64) -> Result<Arc<BlobReader>>,
    ) -> Result<(Arc<BlobReader>, u64, u32)> {
        let r = BlobRef::decode(encoded_ref).map_err(|e| {
            Error::corruption(table, block, format!("malformed blob reference: {e}"))
        })?;
        let (file, ordinal, moved) = self
            .version
            .resolve_blob(r.file, r.ordinal)
            .map_err(|why| Error::corruption(table, block, why))?;
        let reader = open(file)?;
        let offset = if moved {
            reader.offset_of(ordinal)?
        } else {
            r.offset
        };
        Ok((reader, offset, r.size))
    }

    /// Blob file `number`, through the shared open-file cache.
    pub(crate) fn reader(&self, number: u64) -> Result<Arc<BlobReader>> {
        self.blobs.get(number)
    }
}
