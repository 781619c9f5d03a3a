//! Turns a `BlobRef` found in a table into its value.

use std::ops::Deref;
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
        resolve_in(&self.version, source, user_key, seq, encoded_ref, |n| {
            self.blobs.get(n)
        })
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
        resolve_cached_in(
            &self.version,
            source,
            user_key,
            seq,
            encoded_ref,
            false,
            |n| self.blobs.get_open(n),
        )
    }

    /// The reader, offset and value size of the record a ref points to
    /// now, opening files through `open` (a caller
    /// that reads many values keeps its own readers at hand).
    pub(crate) fn locate_with(
        &self,
        source: (&Path, u64),
        encoded_ref: &[u8],
        open: impl FnOnce(u64) -> Result<Arc<BlobReader>>,
    ) -> Result<(Arc<BlobReader>, u64, u32)> {
        let target = self.target(source, encoded_ref)?;
        let reader = open(target.file)?;
        let offset = target.offset_in(&reader)?;
        Ok((reader, offset, target.r.size))
    }

    /// Decodes `encoded_ref` and follows GC lineage to the file holding its
    /// record now.
    fn target(&self, source: (&Path, u64), encoded_ref: &[u8]) -> Result<Target> {
        target(&self.version, source, encoded_ref)
    }

    /// Blob file `number`, through the shared open-file cache.
    pub(crate) fn reader(&self, number: u64) -> Result<Arc<BlobReader>> {
        self.blobs.get(number)
    }
}

/// [`BlobResolver::resolve`] against `version`, with blob file readers
/// from `reader`: a point read borrows them from its pinned super version
/// rather than building a resolver (two shared reference counts) per read.
pub fn resolve_in<B: Deref<Target = BlobReader>>(
    version: &Version,
    source: (&Path, u64),
    user_key: &[u8],
    seq: u64,
    encoded_ref: &[u8],
    reader: impl FnOnce(u64) -> Result<B>,
) -> Result<Vec<u8>> {
    let target = target(version, source, encoded_ref)?;
    let reader = reader(target.file)?;
    let offset = target.offset_in(&reader)?;
    reader.read_value(
        offset,
        ExpectedRecord {
            key: user_key,
            seq,
            size: target.r.size,
        },
    )
}

/// [`BlobResolver::resolve_cached`] against `version`, with blob file
/// readers from `reader` (`None` when the file is not open). With
/// `unless_mapped`, also `None` when the reader would read the value
/// through the file's mapping ([`crate::Db::get_if_cached_unless_mapped`]).
pub fn resolve_cached_in<B: Deref<Target = BlobReader>>(
    version: &Version,
    source: (&Path, u64),
    user_key: &[u8],
    seq: u64,
    encoded_ref: &[u8],
    unless_mapped: bool,
    reader: impl FnOnce(u64) -> Option<Result<B>>,
) -> Result<Option<Vec<u8>>> {
    let target = target(version, source, encoded_ref)?;
    let Some(reader) = reader(target.file) else {
        return Ok(None);
    };
    let reader = reader?;
    if unless_mapped && reader.mapping().is_some() {
        return Ok(None);
    }
    let offset = if target.moved {
        match reader.offset_of_cached(target.ordinal)? {
            Some(o) => o,
            None => return Ok(None),
        }
    } else {
        target.r.offset
    };
    reader.read_value_cached(
        offset,
        ExpectedRecord {
            key: user_key,
            seq,
            size: target.r.size,
        },
    )
}

/// Decodes `encoded_ref` and follows `version`'s GC lineage to the file
/// holding its record now.
fn target(version: &Version, (table, block): (&Path, u64), encoded_ref: &[u8]) -> Result<Target> {
    let r = BlobRef::decode(encoded_ref)
        .map_err(|e| Error::corruption(table, block, format!("malformed blob reference: {e}")))?;
    let (file, ordinal, moved) = version
        .resolve_blob(r.file, r.ordinal)
        .map_err(|why| Error::corruption(table, block, why))?;
    Ok(Target {
        r,
        file,
        ordinal,
        moved,
    })
}

/// Where a blob reference's record lives now.
struct Target {
    /// The reference as stored.
    r: BlobRef,
    /// The file holding the record now.
    file: u64,
    /// The record's ordinal in `file`.
    ordinal: u32,
    /// Whether GC moved it (the stored offset is stale).
    moved: bool,
}

impl Target {
    /// The record's offset in `reader` (the reader of `self.file`).
    fn offset_in(&self, reader: &BlobReader) -> Result<u64> {
        if self.moved {
            reader.offset_of(self.ordinal)
        } else {
            Ok(self.r.offset)
        }
    }
}
