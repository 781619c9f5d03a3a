//! Opening and reading a table.

use std::cell::Cell;
use std::cmp::Ordering;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::index_prefixes::IndexPrefixes;
use super::TableIter;
use crate::cache::BlockCache;
use crate::error::{DecodeError, Error, IoContext, Result};
use crate::format::block::{Block, BlockIter};
use crate::format::bloom::BloomFilter;
use crate::format::internal_key;
use crate::format::table::{
    check_block, decompress, BlockHandle, Footer, TableProperties, BLOCK_TRAILER_LEN, FOOTER_LEN,
    MAX_BLOCK_SIZE,
};
use crate::io::{FsRef, RandomAccessFile};
use crate::options::Compression;

thread_local! {
    /// The key buffers of [`Table::find`]'s index and data block cursors,
    /// kept between lookups so that a point read allocates none.
    static LOOKUP_KEYS: Cell<(Vec<u8>, Vec<u8>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

/// An entry found by a point lookup: internal key and value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// An open, immutable table. Shared between readers with `Arc`.
pub struct Table {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    file_number: u64,
    file_size: u64,
    /// End of the data area: data block handles must end at or before it.
    data_end: u64,
    index: Arc<Block>,
    index_offset: u64,
    /// Narrows searches of `index` (`None` when it is empty).
    index_prefixes: Option<IndexPrefixes>,
    filter: Option<Vec<u8>>,
    /// Where the filter block starts, for errors about it.
    filter_offset: u64,
    props: TableProperties,
    cache: Option<Arc<BlockCache>>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("path", &self.path)
            .field("file_number", &self.file_number)
            .field("file_size", &self.file_size)
            .finish()
    }
}

impl Table {
    /// Opens the table at `path`, reading and verifying its footer, index,
    /// filter and properties. Blocks read later go through `cache` if given.
    pub fn open(
        fs: &FsRef,
        path: &Path,
        file_number: u64,
        cache: Option<Arc<BlockCache>>,
    ) -> Result<Arc<Table>> {
        let file = fs.open(path).ctx(path)?;
        let file_size = file.len();
        let corrupt = |offset: u64, reason: &str| Error::corruption(path, offset, reason);
        if file_size < FOOTER_LEN as u64 {
            return Err(corrupt(0, "file too short to be a table"));
        }
        let footer_offset = file_size - FOOTER_LEN as u64;
        let mut buf = [0u8; FOOTER_LEN];
        file.read_exact_at(footer_offset, &mut buf).ctx(path)?;
        let footer =
            Footer::decode(&buf).map_err(|e| block_err(path, footer_offset, "footer", e))?;

        // Metadata blocks must lie before the footer.
        let check_handle = |h: BlockHandle, what: &str| -> Result<()> {
            match h.end() {
                Some(end) if end <= footer_offset => Ok(()),
                _ => Err(corrupt(
                    footer_offset,
                    &format!("{what} block handle out of range"),
                )),
            }
        };
        check_handle(footer.index, "index")?;
        check_handle(footer.properties, "properties")?;
        if let Some(f) = footer.filter {
            check_handle(f, "filter")?;
        }
        let mut data_end = footer.index.offset.min(footer.properties.offset);
        if let Some(f) = footer.filter {
            data_end = data_end.min(f.offset);
        }

        let read_meta = |h: BlockHandle| -> Result<Vec<u8>> {
            read_block_contents(&*file, path, h, MAX_BLOCK_SIZE)
        };
        let props_data = read_meta(footer.properties)?;
        let props = TableProperties::decode(&props_data)
            .map_err(|e| block_err(path, footer.properties.offset, "properties block", e))?;
        let index = Block::new(read_meta(footer.index)?)
            .map_err(|e| block_err(path, footer.index.offset, "index block", e))?;
        let index_prefixes = IndexPrefixes::build(&index)
            .map_err(|e| block_err(path, footer.index.offset, "index block", e))?;
        let filter = match footer.filter {
            Some(h) => {
                let data = read_meta(h)?;
                let f = BloomFilter::new(&data)
                    .map_err(|e| block_err(path, h.offset, "filter block", e))?;
                // Version 1 wrote classic filters, version 2 blocked ones.
                if f.is_blocked() != (footer.format_version >= 2) {
                    return Err(corrupt(
                        h.offset,
                        &format!(
                            "filter block: a {} filter in a table of format version {}",
                            if f.is_blocked() { "blocked" } else { "classic" },
                            footer.format_version
                        ),
                    ));
                }
                Some(data)
            }
            None => None,
        };

        Ok(Arc::new(Table {
            file,
            path: path.to_path_buf(),
            file_number,
            file_size,
            data_end,
            index: Arc::new(index),
            index_offset: footer.index.offset,
            index_prefixes,
            filter_offset: footer.filter.map_or(0, |h| h.offset),
            filter,
            props,
            cache,
        }))
    }

    /// Bytes the open table keeps in memory: its index block (and the
    /// prefixes that search it) and filter (what the open-file cache
    /// charges to the block cache).
    pub fn resident_bytes(&self) -> u64 {
        let prefixes = self.index_prefixes.as_ref().map_or(0, IndexPrefixes::size);
        (self.index.size() + prefixes + self.filter.as_ref().map_or(0, Vec::len)) as u64
    }

    /// Statistics and metadata stored in the table.
    pub fn properties(&self) -> &TableProperties {
        &self.props
    }

    /// The table's file number.
    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// The table's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The filter block's bytes, for tests of its layout.
    #[cfg(test)]
    pub(crate) fn filter_bytes(&self) -> Option<&[u8]> {
        self.filter.as_deref()
    }

    /// False when the bloom filter rules out `user_key`.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        match &self.filter {
            // Checked at open.
            Some(f) => BloomFilter::new(f).map_or(true, |f| f.may_contain(user_key)),
            None => true,
        }
    }

    /// Finds the first entry whose internal key is `>= lookup` (an internal
    /// seek key) and returns it if it has the same user key as `lookup`.
    pub fn get(&self, lookup: &[u8]) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        self.get_with(lookup, false).map(Option::flatten)
    }

    /// [`Table::get`] without waiting on the device: `Ok(None)` if a block
    /// it needs is neither in the block cache nor in the page cache.
    pub fn get_cached(&self, lookup: &[u8]) -> Result<Option<Option<Entry>>> {
        self.get_with(lookup, true)
    }

    fn get_with(&self, lookup: &[u8], cached_only: bool) -> Result<Option<Option<Entry>>> {
        self.find(lookup, cached_only, |key, value| {
            Ok((key.to_vec(), value.to_vec()))
        })
    }

    /// Finds the entry [`Table::get`] would and hands its internal key and
    /// value to `found` where they lie (in the index's or a data block's
    /// memory), returning what `found` makes of them: `Ok(Some(None))` when
    /// the table has no entry for the key, `Ok(None)` only when
    /// `cached_only` and a block would have to come from the device. It
    /// copies nothing and allocates nothing of its own: point reads call
    /// it for every table they probe.
    pub(crate) fn find<R>(
        &self,
        lookup: &[u8],
        cached_only: bool,
        found: impl FnOnce(&[u8], &[u8]) -> Result<R>,
    ) -> Result<Option<Option<R>>> {
        let user_key = internal_key::user_key(lookup);
        if !self.may_contain(user_key) {
            return Ok(Some(None));
        }
        let (index_key, mut data_key) = LOOKUP_KEYS.with(Cell::take);
        // The index is borrowed: an `Arc` clone would write a count every
        // thread reading this table shares.
        let mut index = BlockIter::with_key_buffer(&*self.index, internal_key::compare, index_key);
        self.seek_index(&mut index, lookup);
        let outcome = loop {
            if !index.valid() {
                break index
                    .status()
                    .map_err(|e| self.index_err(e))
                    .map(|()| Some(None));
            }
            let handle = match self.decode_handle(index.value()) {
                Ok(h) => h,
                Err(e) => break Err(e),
            };
            let block = match self.read_block_with(handle, true, cached_only) {
                Ok(Some(b)) => b,
                Ok(None) => break Ok(None),
                Err(e) => break Err(e),
            };
            let mut it = BlockIter::with_key_buffer(
                block,
                internal_key::compare,
                std::mem::take(&mut data_key),
            );
            it.seek(lookup);
            if it.valid() {
                let r = (internal_key::user_key(it.key()) == user_key)
                    .then(|| found(it.key(), it.value()));
                data_key = it.into_key_buffer();
                break Ok(Some(r));
            }
            let status = it.status();
            data_key = it.into_key_buffer();
            if let Err(e) = status {
                break Err(block_err(&self.path, handle.offset, "data block", e));
            }
            // The index key may be a separator above the block's last key:
            // the entry sought then starts the next block.
            index.next();
        };
        LOOKUP_KEYS.with(|c| c.set((index.into_key_buffer(), data_key)));
        match outcome? {
            None => Ok(None),
            Some(None) => Ok(Some(None)),
            Some(Some(r)) => r.map(|r| Some(Some(r))),
        }
    }

    /// An iterator over all entries.
    pub fn iter(self: &Arc<Self>) -> TableIter {
        TableIter::new(Arc::clone(self))
    }

    /// Reads every data block, checking checksums, structure and key order,
    /// and that the filter admits every key, and returns the number of
    /// entries seen.
    pub fn verify(&self) -> Result<u64> {
        let mut index = self.index_iter();
        index.seek_to_first();
        let mut count = 0u64;
        let mut prev: Vec<u8> = Vec::new();
        let mut prev_index_key: Vec<u8> = Vec::new();
        while index.valid() {
            if !prev_index_key.is_empty()
                && internal_key::compare(&prev_index_key, index.key()) != Ordering::Less
            {
                return Err(self.index_err(DecodeError::new(0, "index keys out of order")));
            }
            let handle = self.decode_handle(index.value())?;
            let block = self.read_block(handle, false)?;
            let mut it = BlockIter::new(block, internal_key::compare);
            it.seek_to_first();
            let bad = |reason: &str| Error::corruption(&self.path, handle.offset, reason);
            while it.valid() {
                let key = it.key();
                internal_key::parse(key)
                    .map_err(|e| block_err(&self.path, handle.offset, "data block", e))?;
                if count > 0 && internal_key::compare(&prev, key) != Ordering::Less {
                    return Err(bad("keys out of order"));
                }
                if internal_key::compare(key, index.key()) == Ordering::Greater {
                    return Err(bad("key above its index entry"));
                }
                // A filter that rules out a key the table holds would turn
                // point reads of it into misses: damage a checksum cannot
                // always show (the filter's own checksum can be matched).
                if !self.may_contain(internal_key::user_key(key)) {
                    return Err(Error::corruption(
                        &self.path,
                        self.filter_offset,
                        "the filter block rules out a key the table holds",
                    ));
                }
                prev.clear();
                prev.extend_from_slice(key);
                count += 1;
                it.next();
            }
            it.status()
                .map_err(|e| block_err(&self.path, handle.offset, "data block", e))?;
            prev_index_key.clear();
            prev_index_key.extend_from_slice(index.key());
            index.next();
        }
        index.status().map_err(|e| self.index_err(e))?;
        if count != self.props.num_entries {
            return Err(Error::corruption(
                &self.path,
                self.index_offset,
                format!(
                    "table holds {count} entries, properties say {}",
                    self.props.num_entries
                ),
            ));
        }
        Ok(count)
    }

    pub(crate) fn index_iter(&self) -> BlockIter {
        BlockIter::new(Arc::clone(&self.index), internal_key::compare)
    }

    /// Positions an [`Table::index_iter`] at the first index entry whose
    /// key is `>= target`: the block that may hold `target`.
    pub(crate) fn seek_index<B: Deref<Target = Block>>(
        &self,
        index: &mut BlockIter<B>,
        target: &[u8],
    ) {
        match &self.index_prefixes {
            Some(p) => {
                let (first, last) = p.seek_range(target);
                index.seek_between(target, first, last);
            }
            None => index.seek(target),
        }
    }

    pub(crate) fn index_err(&self, e: DecodeError) -> Error {
        block_err(&self.path, self.index_offset, "index block", e)
    }

    /// Decodes an index value into a data block handle within the data area.
    pub(crate) fn decode_handle(&self, value: &[u8]) -> Result<BlockHandle> {
        let h = BlockHandle::decode(value).map_err(|e| self.index_err(e))?;
        match h.end() {
            Some(end) if end <= self.data_end => Ok(h),
            _ => Err(Error::corruption(
                &self.path,
                self.index_offset,
                format!("data block handle {}+{} out of range", h.offset, h.size),
            )),
        }
    }

    /// The decoded data block at `handle`, from the cache when possible.
    pub(crate) fn read_block(&self, handle: BlockHandle, use_cache: bool) -> Result<Arc<Block>> {
        self.read_block_with(handle, use_cache, false)?
            .ok_or_else(|| Error::Internal("a waiting block read returned nothing".into()))
    }

    /// [`Table::read_block`]; with `nowait`, `None` if neither the block
    /// cache nor the page cache holds the block.
    fn read_block_with(
        &self,
        handle: BlockHandle,
        use_cache: bool,
        nowait: bool,
    ) -> Result<Option<Arc<Block>>> {
        let cache = if use_cache { self.cache.as_ref() } else { None };
        if let Some(c) = cache {
            if let Some(b) = c.get(self.file_number, handle.offset) {
                return Ok(Some(b));
            }
        }
        let data = if nowait {
            match read_block_contents_cached(&*self.file, &self.path, handle, MAX_BLOCK_SIZE)? {
                Some(d) => d,
                None => return Ok(None),
            }
        } else {
            read_block_contents(&*self.file, &self.path, handle, MAX_BLOCK_SIZE)?
        };
        let block =
            Block::new(data).map_err(|e| block_err(&self.path, handle.offset, "data block", e))?;
        let block = Arc::new(block);
        if let Some(c) = cache {
            c.insert(self.file_number, handle.offset, Arc::clone(&block));
        }
        Ok(Some(block))
    }
}

/// A corruption error at a block's offset; the position inside the block
/// goes into the reason.
fn block_err(path: &Path, block_offset: u64, what: &str, e: DecodeError) -> Error {
    Error::corruption(
        path,
        block_offset,
        format!("{what}: {} (at byte {} of it)", e.reason, e.offset),
    )
}

/// [`read_block_contents`] if the page cache holds the block; `None` if
/// reading it would wait for the device.
fn read_block_contents_cached(
    file: &dyn RandomAccessFile,
    path: &Path,
    handle: BlockHandle,
    max_len: usize,
) -> Result<Option<Vec<u8>>> {
    let len = block_len(file, path, handle)?;
    let mut raw = vec![0u8; len];
    if !file.read_cached_at(handle.offset, &mut raw).ctx(path)? {
        return Ok(None);
    }
    decode_block(raw, path, handle, max_len).map(Some)
}

/// The length of the block at `handle` with its trailer, checked against
/// the file.
fn block_len(file: &dyn RandomAccessFile, path: &Path, handle: BlockHandle) -> Result<usize> {
    usize::try_from(handle.size)
        .ok()
        .and_then(|n| n.checked_add(BLOCK_TRAILER_LEN))
        .filter(|&n| (n as u64) <= file.len())
        .ok_or_else(|| Error::corruption(path, handle.offset, "block size out of range"))
}

/// Checks a block read with its trailer and decompresses it.
fn decode_block(
    mut raw: Vec<u8>,
    path: &Path,
    handle: BlockHandle,
    max_len: usize,
) -> Result<Vec<u8>> {
    let (contents, ctype) =
        check_block(&raw).map_err(|e| block_err(path, handle.offset, "block", e))?;
    if ctype == Compression::None {
        let n = contents.len();
        raw.truncate(n);
        return Ok(raw);
    }
    decompress(ctype, contents, max_len).map_err(|e| block_err(path, handle.offset, "block", e))
}

/// Reads a block and its trailer, verifies the checksum and decompresses.
fn read_block_contents(
    file: &dyn RandomAccessFile,
    path: &Path,
    handle: BlockHandle,
    max_len: usize,
) -> Result<Vec<u8>> {
    let len = block_len(file, path, handle)?;
    let mut raw = vec![0u8; len];
    file.read_exact_at(handle.offset, &mut raw).ctx(path)?;
    decode_block(raw, path, handle, max_len)
}
