//! Turns a `BlobRef` found in a table into its value.

use std::path::Path;
use std::sync::Arc;

use super::{BlobCache, BlobReader, ExpectedRecord};
use crate::error::{Error, Result};
use crate::format::blob::{BlobRef, BLOB_HEADER_LEN};
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

    /// The reader, offset and value size of the record a ref points to now.
    fn locate(
        &self,
        (table, block): (&Path, u64),
        encoded_ref: &[u8],
    ) -> Result<(Arc<BlobReader>, u64, u32)> {
        let r = BlobRef::decode(encoded_ref).map_err(|e| {
            Error::corruption(table, block, format!("malformed blob reference: {e}"))
        })?;
        let (file, ordinal, moved) = self
            .version
            .resolve_blob(r.file, r.ordinal)
            .map_err(|why| Error::corruption(table, block, why))?;
        let reader = self.blobs.get(file)?;
        let offset = if moved {
            reader.offset_of(ordinal)?
        } else {
            r.offset
        };
        Ok((reader, offset, r.size))
    }
}

/// Smallest readahead window, bytes.
const READAHEAD_MIN: u64 = 16 << 10;
/// Largest readahead window, bytes.
const READAHEAD_MAX: u64 = 1 << 20;

/// A resolver for range scans. Values separated by one flush sit in key
/// order in one file, so a scan reads them nearly sequentially: it reads a
/// window ahead of the cursor and serves the following records from it,
/// doubling the window while the scan keeps hitting it (up to 1 MiB) and
/// halving it when reads jump around.
pub struct ScanResolver {
    inner: BlobResolver,
    /// (file, offset of the first byte, bytes).
    window: Option<(u64, u64, Vec<u8>)>,
    readahead: u64,
    forward: bool,
}

impl ScanResolver {
    /// A scan resolver over `inner`.
    pub fn new(inner: BlobResolver) -> Self {
        ScanResolver {
            inner,
            window: None,
            readahead: READAHEAD_MIN,
            forward: true,
        }
    }

    /// Sets the scan direction (reverse scans read the window backwards).
    pub fn set_forward(&mut self, forward: bool) {
        if self.forward != forward {
            self.forward = forward;
            self.readahead = READAHEAD_MIN;
        }
    }

    /// Like [`BlobResolver::resolve`], served from the window when possible.
    pub fn resolve(
        &mut self,
        source: (&Path, u64),
        user_key: &[u8],
        seq: u64,
        encoded_ref: &[u8],
    ) -> Result<Vec<u8>> {
        let (reader, offset, size) = self.inner.locate(source, encoded_ref)?;
        let want = ExpectedRecord {
            key: user_key,
            seq,
            size,
        };
        if let Some((file, start, buf)) = &self.window {
            if *file == reader.number() {
                if let Some(v) = reader.value_from_buffer(buf, *start, offset, want) {
                    self.readahead = (self.readahead * 2).min(READAHEAD_MAX);
                    return v;
                }
            }
        }
        let need = want.record_len();
        let end = match offset.checked_add(need) {
            Some(end) if need < self.readahead && offset >= BLOB_HEADER_LEN as u64 => end,
            // A large value (or a damaged offset, which `read_value`
            // reports): read just its record.
            _ => {
                self.window = None;
                return reader.read_value(offset, want);
            }
        };
        let start = if self.forward {
            offset
        } else {
            end.saturating_sub(self.readahead)
                .max(BLOB_HEADER_LEN as u64)
        };
        let buf = reader.read_records_raw(start, self.readahead.max(end - start))?;
        let v = match reader.value_from_buffer(&buf, start, offset, want) {
            Some(v) => v,
            None => reader.read_value(offset, want),
        };
        self.window = Some((reader.number(), start, buf));
        self.readahead = (self.readahead / 2).max(READAHEAD_MIN);
        v
    }
}
