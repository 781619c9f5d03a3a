//! Writes one blob file.

use std::path::PathBuf;

use crate::error::{IoContext, Result};
use crate::format::blob::{self, BlobFooter, BlobRef, LineageEntry, BLOB_HEADER_LEN};
use crate::io::WritableFile;
use crate::version::BlobMeta;

/// Appends records to a new blob file.
pub struct BlobWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    number: u64,
    offsets: Vec<u64>,
    buf: Vec<u8>,
    pos: u64,
}

/// A completed blob file.
#[derive(Debug, Clone)]
pub struct FinishedBlob {
    /// Metadata for the manifest.
    pub meta: BlobMeta,
}

impl BlobWriter {
    /// Starts blob file `number` at `path`.
    pub fn new(mut file: Box<dyn WritableFile>, path: PathBuf, number: u64) -> Result<Self> {
        file.append(&blob::encode_header()).ctx(&path)?;
        Ok(BlobWriter {
            file,
            path,
            number,
            offsets: Vec::new(),
            buf: Vec::new(),
            pos: BLOB_HEADER_LEN as u64,
        })
    }

    /// Appends the value written under `key` at sequence `seq` and returns
    /// its reference.
    pub fn add(&mut self, key: &[u8], seq: u64, value: &[u8]) -> Result<BlobRef> {
        let ordinal = u32::try_from(self.offsets.len()).map_err(|_| {
            crate::Error::InvalidArgument("blob file holds too many records".into())
        })?;
        let size = u32::try_from(value.len()).map_err(|_| {
            crate::Error::InvalidArgument("value too large for a blob record".into())
        })?;
        self.buf.clear();
        blob::encode_record(&mut self.buf, key, seq, value);
        self.file.append(&self.buf).ctx(&self.path)?;
        let r = BlobRef {
            file: self.number,
            ordinal,
            offset: self.pos,
            size,
        };
        self.offsets.push(self.pos);
        self.pos += self.buf.len() as u64;
        Ok(r)
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.pos
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Writes index, lineage and footer, then syncs the file.
    pub fn finish(mut self, lineage: &[LineageEntry]) -> Result<FinishedBlob> {
        let index_offset = self.pos;
        let mut tail = Vec::with_capacity(self.offsets.len() * 8 + 64);
        blob::encode_index(&mut tail, &self.offsets);
        let lineage_offset = index_offset + tail.len() as u64;
        blob::encode_lineage(&mut tail, lineage);
        let footer = BlobFooter {
            index_offset,
            record_count: self.offsets.len() as u64,
            lineage_offset,
            data_bytes: index_offset - BLOB_HEADER_LEN as u64,
        };
        tail.extend_from_slice(&footer.encode());
        self.file.append(&tail).ctx(&self.path)?;
        self.file.sync().ctx(&self.path)?;
        Ok(FinishedBlob {
            meta: BlobMeta {
                number: self.number,
                file_size: index_offset + tail.len() as u64,
                record_count: self.offsets.len() as u64,
                data_bytes: footer.data_bytes,
                run_keys: None,
            },
        })
    }
}
