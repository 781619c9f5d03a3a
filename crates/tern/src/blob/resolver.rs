//! Turns a `BlobRef` found in a table into its value.

use std::sync::Arc;

use super::BlobCache;
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

    /// The value `encoded_ref` (stored for `user_key`) points to: follows GC
    /// lineage to the record's current file, then reads and verifies it.
    pub fn resolve(&self, user_key: &[u8], encoded_ref: &[u8]) -> Result<Vec<u8>> {
        let r = BlobRef::decode(encoded_ref).map_err(|e| {
            Error::corruption("<table entry>", 0, format!("malformed blob reference: {e}"))
        })?;
        let (file, ordinal, moved) = self.version.resolve_blob(r.file, r.ordinal).map_err(|e| {
            Error::corruption(crate::wal::blob_file_name(r.file), r.offset, e.to_string())
        })?;
        let reader = self.blobs.get(file)?;
        let offset = if moved {
            reader.offset_of(ordinal)?
        } else {
            r.offset
        };
        reader.read_value(offset, user_key, r.size)
    }
}
