//! Writing a table.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::path::PathBuf;

use super::TableOptions;
use crate::error::{Error, IoContext, Result};
use crate::format::block::{common_prefix_len, BlockBuilder};
use crate::format::bloom::BloomBuilder;
use crate::format::internal_key::{self, ValueKind, KIND_FOR_SEEK, MAX_SEQ};
use crate::format::table::{
    block_trailer, BlockCompressor, BlockHandle, Footer, TableProperties, FORMAT_VERSION,
    MAX_BLOCK_SIZE,
};
use crate::io::WritableFile;
use crate::options::Compression;

/// What a finished table holds, for the manifest.
#[derive(Debug, Clone)]
pub struct TableSummary {
    /// Size of the file in bytes.
    pub file_size: u64,
    /// Smallest internal key (empty if the table is empty).
    pub smallest: Vec<u8>,
    /// Largest internal key (empty if the table is empty).
    pub largest: Vec<u8>,
    /// Entries written.
    pub num_entries: u64,
    /// Tombstones written.
    pub num_deletions: u64,
    /// Smallest sequence number written (0 if empty).
    pub smallest_seq: u64,
    /// Largest sequence number written (0 if empty).
    pub largest_seq: u64,
}

impl TableSummary {
    /// The manifest's record of this table as file `number`, referring to
    /// `blob_files`.
    pub fn into_file_meta(self, number: u64, blob_files: Vec<u64>) -> crate::version::FileMeta {
        crate::version::FileMeta {
            number,
            file_size: self.file_size,
            smallest: self.smallest,
            largest: self.largest,
            smallest_seq: self.smallest_seq,
            largest_seq: self.largest_seq,
            num_entries: self.num_entries,
            num_deletions: self.num_deletions,
            blob_files,
        }
    }
}

/// Writes a table to a file: entries in increasing internal-key order, then
/// [`TableBuilder::finish`].
pub struct TableBuilder {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    opts: TableOptions,
    offset: u64,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    /// Handle of the last flushed data block, whose index entry waits for
    /// the next key so that a short separator can be used.
    pending_handle: Option<BlockHandle>,
    bloom: Option<BloomBuilder>,
    compressor: BlockCompressor,
    compressed: Vec<u8>,
    /// The data block being built holds an inline value: only such blocks
    /// are compressed (see `flush_data_block`).
    block_has_values: bool,
    last_key: Vec<u8>,
    handle_buf: Vec<u8>,
    props: TableProperties,
    blob_files: BTreeSet<u64>,
    failed: bool,
    /// The format version written ([`FORMAT_VERSION`]; tests write older
    /// ones to check they are still read).
    format_version: u32,
}

impl std::fmt::Debug for TableBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableBuilder")
            .field("path", &self.path)
            .field("offset", &self.offset)
            .field("num_entries", &self.props.num_entries)
            .finish()
    }
}

impl TableBuilder {
    /// A builder writing to `file`, which lives at `path` (used in errors).
    pub fn new(file: Box<dyn WritableFile>, path: PathBuf, opts: TableOptions) -> Self {
        let bloom =
            (opts.bloom_bits_per_key > 0).then(|| BloomBuilder::new(opts.bloom_bits_per_key));
        let props = TableProperties {
            compression: opts.compression,
            bloom_bits_per_key: opts.bloom_bits_per_key,
            ..TableProperties::default()
        };
        TableBuilder {
            file,
            path,
            offset: 0,
            data_block: BlockBuilder::new(opts.restart_interval),
            // Every index entry is a restart point: index blocks are small
            // and seeks in them are binary searches.
            index_block: BlockBuilder::new(1),
            pending_handle: None,
            bloom,
            compressor: BlockCompressor::new(opts.compression),
            compressed: Vec::new(),
            block_has_values: false,
            last_key: Vec::new(),
            handle_buf: Vec::with_capacity(20),
            props,
            blob_files: BTreeSet::new(),
            failed: false,
            opts,
            format_version: FORMAT_VERSION,
        }
    }

    /// Writes format version 1 (a classic bloom filter), as tables written
    /// before version 2 are, to test that they are still read.
    #[cfg(test)]
    pub(crate) fn write_format_v1(mut self) -> Self {
        self.format_version = 1;
        self
    }

    /// Appends an entry. `ikey` is an internal key and must sort strictly
    /// after the previous one.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        if self.failed {
            return Err(Error::InvalidArgument(
                "table builder used after a failed write".into(),
            ));
        }
        let parsed = internal_key::parse(ikey)
            .map_err(|e| Error::InvalidArgument(format!("bad internal key: {e}")))?;
        let first = self.props.num_entries == 0;
        if !first && internal_key::compare(&self.last_key, ikey) != Ordering::Less {
            return Err(Error::InvalidArgument(
                "table keys must be added in strictly increasing order".into(),
            ));
        }
        // Every block must stay readable (see MAX_BLOCK_SIZE).
        let entry_size = ikey.len().saturating_add(value.len()).saturating_add(16);
        if entry_size > MAX_ENTRY_SIZE {
            return Err(Error::InvalidArgument(format!(
                "entry of {} bytes too large for a table (limit {MAX_ENTRY_SIZE})",
                ikey.len() + value.len()
            )));
        }
        if !self.data_block.is_empty()
            && self.data_block.estimated_size() + entry_size + 4 > MAX_BLOCK_SIZE
        {
            self.flush_data_block()?;
        }
        if let Some(handle) = self.pending_handle.take() {
            let sep = shortest_separator(&self.last_key, ikey);
            self.add_index_entry(&sep, handle);
        }
        if let Some(bloom) = &mut self.bloom {
            if first || internal_key::user_key(&self.last_key) != parsed.user_key {
                bloom.add_key(parsed.user_key);
            }
        }

        let p = &mut self.props;
        if first {
            p.smallest_key = ikey.to_vec();
            p.smallest_seq = parsed.seq;
            p.largest_seq = parsed.seq;
        } else {
            p.smallest_seq = p.smallest_seq.min(parsed.seq);
            p.largest_seq = p.largest_seq.max(parsed.seq);
        }
        p.num_entries += 1;
        match parsed.kind {
            ValueKind::Delete => p.num_deletions += 1,
            ValueKind::BlobRef => p.num_blob_refs += 1,
            ValueKind::Value => self.block_has_values = true,
        }
        p.raw_key_size += ikey.len() as u64;
        p.raw_value_size += value.len() as u64;

        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);
        self.data_block.add(ikey, value);
        if self.data_block.estimated_size() >= self.opts.block_size {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Records that entries of this table reference blob file `file_number`
    /// (kept in the properties; duplicates are ignored).
    pub fn add_blob_file(&mut self, file_number: u64) {
        self.blob_files.insert(file_number);
    }

    /// Bytes the file would have if finished now (approximately).
    pub fn estimated_size(&self) -> u64 {
        let filter = self.bloom.as_ref().map_or(0, |b| b.estimated_size());
        self.offset
            + self.data_block.estimated_size() as u64
            + self.index_block.estimated_size() as u64
            + filter as u64
    }

    /// Entries added so far.
    pub fn num_entries(&self) -> u64 {
        self.props.num_entries
    }

    fn add_index_entry(&mut self, key: &[u8], handle: BlockHandle) {
        self.handle_buf.clear();
        handle.encode_to(&mut self.handle_buf);
        self.index_block.add(key, &self.handle_buf);
    }

    fn flush_data_block(&mut self) -> Result<()> {
        if self.data_block.is_empty() {
            return Ok(());
        }
        debug_assert!(self.pending_handle.is_none());
        let raw = self.data_block.finish();
        // A block of keys, blob references and tombstones only is stored
        // as is: delta-encoded keys and references leave LZ4 about a tenth
        // of the block (10 MB of a 2.3 GiB store of 1 KB values), while
        // every compaction that rewrites the block and every read that
        // misses the block cache would pay for it (4.7% of the CPU of a
        // YCSB load and A). Blocks with inline values, where compression
        // is what keeps a store of small values small, are compressed as
        // configured.
        let ctype = if self.block_has_values {
            self.compressor.compress(raw, &mut self.compressed)
        } else {
            Compression::None
        };
        self.block_has_values = false;
        let contents: &[u8] = if ctype == Compression::None {
            raw
        } else {
            &self.compressed
        };
        let handle = write_block(
            &mut *self.file,
            &self.path,
            &mut self.offset,
            contents,
            ctype,
        );
        let handle = self.note_failure(handle)?;
        self.props.data_size += handle.size + crate::format::table::BLOCK_TRAILER_LEN as u64;
        self.props.num_data_blocks += 1;
        self.data_block.reset();
        self.pending_handle = Some(handle);
        Ok(())
    }

    fn note_failure<T>(&mut self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn write_raw_block(&mut self, contents: &[u8]) -> Result<BlockHandle> {
        let r = write_block(
            &mut *self.file,
            &self.path,
            &mut self.offset,
            contents,
            Compression::None,
        );
        self.note_failure(r)
    }

    /// Writes the last data block, the filter, properties and index blocks
    /// and the footer, then syncs the file.
    pub fn finish(mut self) -> Result<TableSummary> {
        if self.failed {
            return Err(Error::InvalidArgument(
                "table builder used after a failed write".into(),
            ));
        }
        self.flush_data_block()?;
        if let Some(handle) = self.pending_handle.take() {
            let sep = short_successor(&self.last_key);
            self.add_index_entry(&sep, handle);
        }

        let filter = match self.bloom.take() {
            Some(bloom) => {
                #[cfg(test)]
                let data = if self.format_version == 1 {
                    bloom.finish_classic()
                } else {
                    bloom.finish()
                };
                #[cfg(not(test))]
                let data = bloom.finish();
                let h = self.write_raw_block(&data)?;
                self.props.filter_size = block_disk_size(h);
                Some(h)
            }
            None => None,
        };

        let index = self.index_block.finish().to_vec();
        self.props.index_size = index.len() as u64 + crate::format::table::BLOCK_TRAILER_LEN as u64;
        self.props.largest_key = self.last_key.clone();
        self.props.blob_files = self.blob_files.iter().copied().collect();
        self.props.format_version = self.format_version;
        let props = self.props.encode();
        let properties = self.write_raw_block(&props)?;
        let index = self.write_raw_block(&index)?;

        let footer = Footer {
            index,
            filter,
            properties,
            format_version: self.format_version,
        };
        let r = self.file.append(&footer.encode()).ctx(&self.path);
        self.note_failure(r)?;
        self.offset += crate::format::table::FOOTER_LEN as u64;
        let r = self.file.sync().ctx(&self.path);
        self.note_failure(r)?;

        let p = &self.props;
        Ok(TableSummary {
            file_size: self.offset,
            smallest: p.smallest_key.clone(),
            largest: p.largest_key.clone(),
            num_entries: p.num_entries,
            num_deletions: p.num_deletions,
            smallest_seq: p.smallest_seq,
            largest_seq: p.largest_seq,
        })
    }
}

fn block_disk_size(h: BlockHandle) -> u64 {
    h.size + crate::format::table::BLOCK_TRAILER_LEN as u64
}

fn write_block(
    file: &mut dyn WritableFile,
    path: &std::path::Path,
    offset: &mut u64,
    contents: &[u8],
    ctype: Compression,
) -> Result<BlockHandle> {
    let handle = BlockHandle::new(*offset, contents.len() as u64);
    file.append(contents).ctx(path)?;
    file.append(&block_trailer(contents, ctype)).ctx(path)?;
    *offset += block_disk_size(handle);
    Ok(handle)
}

/// Largest internal key plus value accepted by [`TableBuilder::add`]: one
/// entry must fit in a block a reader accepts, with room for the restart
/// array.
pub const MAX_ENTRY_SIZE: usize = MAX_BLOCK_SIZE - 64;

/// The trailer of the smallest internal key of a user key.
const SEEK_TRAILER: u64 = (MAX_SEQ << 8) | KIND_FOR_SEEK as u64;

/// A short internal key `k` with `start <= k < limit` (given `start < limit`).
/// If the user keys differ, tries to shorten `start`'s user key to a prefix
/// with its last byte incremented.
pub(crate) fn shortest_separator(start: &[u8], limit: &[u8]) -> Vec<u8> {
    let su = internal_key::user_key(start);
    let lu = internal_key::user_key(limit);
    let n = common_prefix_len(su, lu);
    if n < su.len() && n < lu.len() {
        let b = su[n];
        if b < 0xff && b + 1 < lu[n] && n + 1 < su.len() {
            let mut sep = Vec::with_capacity(n + 1 + 8);
            sep.extend_from_slice(&su[..n]);
            sep.push(b + 1);
            sep.extend_from_slice(&SEEK_TRAILER.to_le_bytes());
            return sep;
        }
    }
    start.to_vec()
}

/// A short internal key `>= key`: the user key cut after its first byte
/// that can be incremented, incremented.
pub(crate) fn short_successor(key: &[u8]) -> Vec<u8> {
    let u = internal_key::user_key(key);
    if let Some(i) = u.iter().position(|&b| b != 0xff) {
        if i + 1 < u.len() {
            let mut k = Vec::with_capacity(i + 1 + 8);
            k.extend_from_slice(&u[..i]);
            k.push(u[i] + 1);
            k.extend_from_slice(&SEEK_TRAILER.to_le_bytes());
            return k;
        }
    }
    key.to_vec()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::internal_key::{compare, make_internal_key};

    #[test]
    fn separators_sort_between() {
        let cases: &[(&[u8], &[u8])] = &[
            (b"abcdef", b"abzz"),
            (b"abc", b"abd"),
            (b"ab", b"abc"),
            (b"a\xff\xff", b"b"),
            (b"foo", b"foo"),
            (b"", b"a"),
            (b"helloworld", b"hz"),
        ];
        for &(a, b) in cases {
            let s = make_internal_key(a, 5, ValueKind::Value);
            let l = if a == b {
                make_internal_key(b, 4, ValueKind::Value)
            } else {
                make_internal_key(b, 9, ValueKind::Value)
            };
            let sep = shortest_separator(&s, &l);
            assert_ne!(compare(&s, &sep), Ordering::Greater, "{a:?} {b:?}");
            assert_eq!(compare(&sep, &l), Ordering::Less, "{a:?} {b:?}");
            assert!(sep.len() <= s.len());
        }
        let sep = shortest_separator(
            &make_internal_key(b"helloworld", 1, ValueKind::Value),
            &make_internal_key(b"hz", 1, ValueKind::Value),
        );
        assert_eq!(internal_key::user_key(&sep), b"hf");
        for k in [&b"abc"[..], b"\xff\xff", b"a\xff", b"", b"\xffa"] {
            let key = make_internal_key(k, 3, ValueKind::Delete);
            let succ = short_successor(&key);
            assert_ne!(compare(&key, &succ), Ordering::Greater, "{k:?}");
        }
    }
}
