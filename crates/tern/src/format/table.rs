//! Table-level pieces of the SST format: block handles, block trailers,
//! block compression, the footer and the properties block.
//!
//! Pure encoding and decoding; the file-level reader and writer are in
//! [`crate::sst`]. The byte layout is specified in `docs/format/sst.md`.

use crate::error::DecodeError;
use crate::format::checksum;
use crate::format::coding::{
    fixed32_at, fixed64_at, put_fixed32, put_fixed64, put_varint64, Reader,
};
use crate::options::Compression;

/// The SST format version written by this code: 2, whose filter block is
/// a blocked bloom filter (`format::bloom`).
pub const FORMAT_VERSION: u32 = 2;

/// The oldest SST format version this code reads: 1, whose filter block is
/// a classic bloom filter.
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// Magic number at the end of every table: `b"TERNSST1"` read as a u64 LE.
/// Do not change.
pub const TABLE_MAGIC: u64 = u64::from_le_bytes(*b"TERNSST1");

/// Bytes after each block: compression type (1) ‖ masked CRC32C (4).
pub const BLOCK_TRAILER_LEN: usize = 5;

/// Size of the footer at the end of the file.
pub const FOOTER_LEN: usize = 64;

/// Largest uncompressed block a reader accepts (1 GiB). A block holding one
/// huge value may be large, but a corrupt size field must not make the
/// reader allocate without bound.
pub const MAX_BLOCK_SIZE: usize = 1 << 30;

/// Zstandard level used for data blocks.
pub const ZSTD_LEVEL: i32 = 3;

/// Longest encoding of a [`BlockHandle`] (two 10-byte varints).
pub const MAX_HANDLE_LEN: usize = 20;

/// Where a block lives in the file: offset of its first byte and the size of
/// its contents, not counting the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct BlockHandle {
    /// Offset of the block in the file.
    pub offset: u64,
    /// Size of the (possibly compressed) contents, without the trailer.
    pub size: u64,
}

impl BlockHandle {
    /// A handle.
    pub fn new(offset: u64, size: u64) -> Self {
        BlockHandle { offset, size }
    }

    /// Appends `offset varint64 ‖ size varint64`.
    pub fn encode_to(&self, dst: &mut Vec<u8>) {
        put_varint64(dst, self.offset);
        put_varint64(dst, self.size);
    }

    /// Reads a handle from `r`.
    pub fn decode_from(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let offset = r.varint64()?;
        let size = r.varint64()?;
        Ok(BlockHandle { offset, size })
    }

    /// Decodes a handle that must fill `buf` exactly (an index value).
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf);
        let h = Self::decode_from(&mut r)?;
        if !r.is_empty() {
            return Err(DecodeError::new(
                r.pos(),
                "trailing bytes after block handle",
            ));
        }
        Ok(h)
    }

    /// Offset just past the block's trailer, or `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset
            .checked_add(self.size)?
            .checked_add(BLOCK_TRAILER_LEN as u64)
    }
}

/// The trailer stored after `contents`: `type ‖ crc(contents ‖ type)`.
pub fn block_trailer(contents: &[u8], ctype: Compression) -> [u8; BLOCK_TRAILER_LEN] {
    let t = ctype as u8;
    let crc = checksum::crc2(contents, &[t]);
    let mut out = [0u8; BLOCK_TRAILER_LEN];
    out[0] = t;
    out[1..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Checks the trailer of `raw` (contents ‖ trailer) and returns the
/// contents and their compression type.
pub fn check_block(raw: &[u8]) -> Result<(&[u8], Compression), DecodeError> {
    if raw.len() < BLOCK_TRAILER_LEN {
        return Err(DecodeError::new(0, "block shorter than its trailer"));
    }
    let n = raw.len() - BLOCK_TRAILER_LEN;
    let (contents, trailer) = raw.split_at(n);
    let t = trailer[0];
    let stored = fixed32_at(trailer, 1);
    if checksum::crc2(contents, &[t]) != stored {
        return Err(DecodeError::new(n, "block checksum mismatch"));
    }
    let c = Compression::from_u8(t)
        .ok_or_else(|| DecodeError::new(n, format!("unknown compression type {t}")))?;
    Ok((contents, c))
}

/// Compresses block contents with a reusable context.
pub struct BlockCompressor {
    kind: Compression,
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl std::fmt::Debug for BlockCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCompressor")
            .field("kind", &self.kind)
            .finish()
    }
}

impl BlockCompressor {
    /// A compressor for `kind`.
    pub fn new(kind: Compression) -> Self {
        BlockCompressor { kind, zstd: None }
    }

    /// The configured compression.
    pub fn kind(&self) -> Compression {
        self.kind
    }

    /// Compresses `raw` into `out` (cleared first). Returns the type to
    /// store: the configured one if it saved at least 12.5%, else
    /// [`Compression::None`] (and `raw` is to be stored as is).
    ///
    /// Compressed layouts: LZ4 is `uncompressed_len u32 LE ‖ lz4 block`
    /// (`lz4_flex` size-prepended); Zstd is `uncompressed_len varint64 ‖
    /// zstd frame`.
    pub fn compress(&mut self, raw: &[u8], out: &mut Vec<u8>) -> Compression {
        out.clear();
        match self.kind {
            Compression::None => return Compression::None,
            Compression::Lz4 => {
                *out = lz4_flex::block::compress_prepend_size(raw);
            }
            Compression::Zstd => {
                if self.zstd.is_none() {
                    match zstd::bulk::Compressor::new(ZSTD_LEVEL) {
                        Ok(c) => self.zstd = Some(c),
                        Err(_) => return Compression::None,
                    }
                }
                let Some(c) = self.zstd.as_mut() else {
                    return Compression::None;
                };
                put_varint64(out, raw.len() as u64);
                let header = out.len();
                out.resize(header + zstd::zstd_safe::compress_bound(raw.len()), 0);
                match c.compress_to_buffer(raw, &mut out[header..]) {
                    Ok(n) => out.truncate(header + n),
                    Err(_) => return Compression::None,
                }
            }
        }
        if out.len() < raw.len() - raw.len() / 8 {
            self.kind
        } else {
            Compression::None
        }
    }
}

thread_local! {
    /// One reusable zstd decompression context per thread.
    static ZSTD_DCTX: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses block contents stored with `ctype`. Rejects sizes above
/// `max_len` (and above what the compressed input could possibly expand to)
/// before allocating.
pub fn decompress(ctype: Compression, data: &[u8], max_len: usize) -> Result<Vec<u8>, DecodeError> {
    let max_len = max_len.min(MAX_BLOCK_SIZE);
    match ctype {
        Compression::None => {
            if data.len() > max_len {
                return Err(DecodeError::new(0, "block too large"));
            }
            Ok(data.to_vec())
        }
        Compression::Lz4 => {
            if data.len() < 4 {
                return Err(DecodeError::new(0, "lz4 block without size"));
            }
            let size = fixed32_at(data, 0) as usize;
            // LZ4 expands at most ~255x.
            let bound = (data.len() - 4).saturating_mul(256).saturating_add(64);
            if size > max_len || size > bound {
                return Err(DecodeError::new(
                    0,
                    format!("bad lz4 uncompressed size {size}"),
                ));
            }
            let out = lz4_flex::block::decompress(&data[4..], size)
                .map_err(|e| DecodeError::new(4, format!("lz4: {e}")))?;
            if out.len() != size {
                return Err(DecodeError::new(0, "lz4 size mismatch"));
            }
            Ok(out)
        }
        Compression::Zstd => {
            let mut r = Reader::new(data);
            let size = r.varint64()?;
            let payload = &data[r.pos()..];
            // A zstd RLE block turns 4 bytes into at most 128 KiB.
            let bound = (payload.len() as u64)
                .saturating_mul(32 * 1024)
                .saturating_add(64);
            if size > max_len as u64 || size > bound {
                return Err(DecodeError::new(
                    0,
                    format!("bad zstd uncompressed size {size}"),
                ));
            }
            let size = size as usize;
            let mut out = Vec::with_capacity(size);
            let n = ZSTD_DCTX
                .with(|cell| {
                    let mut slot = cell.borrow_mut();
                    if slot.is_none() {
                        *slot = Some(zstd::bulk::Decompressor::new()?);
                    }
                    match slot.as_mut() {
                        Some(d) => d.decompress_to_buffer(payload, &mut out),
                        None => Err(std::io::Error::other("no zstd context")),
                    }
                })
                .map_err(|e| DecodeError::new(r.pos(), format!("zstd: {e}")))?;
            if n != size || out.len() != size {
                return Err(DecodeError::new(0, "zstd size mismatch"));
            }
            Ok(out)
        }
    }
}

/// The fixed-size record at the end of every table.
///
/// ```text
/// 0   index handle      offset u64 LE ‖ size u64 LE
/// 16  filter handle     offset u64 LE ‖ size u64 LE   (size 0: no filter)
/// 32  properties handle offset u64 LE ‖ size u64 LE
/// 48  format version    u32 LE
/// 52  checksum          masked CRC32C of bytes 0..52 ‖ 56..64
/// 56  magic             u64 LE = TABLE_MAGIC
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// The index block.
    pub index: BlockHandle,
    /// The filter block; `None` when the table has no filter.
    pub filter: Option<BlockHandle>,
    /// The properties block.
    pub properties: BlockHandle,
    /// Format version of the table.
    pub format_version: u32,
}

impl Footer {
    /// Encodes to exactly [`FOOTER_LEN`] bytes.
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut v = Vec::with_capacity(FOOTER_LEN);
        let filter = self.filter.unwrap_or_default();
        for h in [self.index, filter, self.properties] {
            put_fixed64(&mut v, h.offset);
            put_fixed64(&mut v, h.size);
        }
        put_fixed32(&mut v, self.format_version);
        let magic = TABLE_MAGIC.to_le_bytes();
        let crc = checksum::crc2(&v[..52], &magic);
        put_fixed32(&mut v, crc);
        v.extend_from_slice(&magic);
        let mut out = [0u8; FOOTER_LEN];
        out.copy_from_slice(&v);
        out
    }

    /// Decodes and checks magic, checksum and version.
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        if buf.len() != FOOTER_LEN {
            return Err(DecodeError::new(0, "footer has the wrong size"));
        }
        if fixed64_at(buf, 56) != TABLE_MAGIC {
            return Err(DecodeError::new(56, "bad magic: not a tern table"));
        }
        if checksum::crc2(&buf[..52], &buf[56..]) != fixed32_at(buf, 52) {
            return Err(DecodeError::new(52, "footer checksum mismatch"));
        }
        let format_version = fixed32_at(buf, 48);
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&format_version) {
            return Err(DecodeError::new(
                48,
                format!("unsupported table format version {format_version}"),
            ));
        }
        let h = |i: usize| BlockHandle::new(fixed64_at(buf, i), fixed64_at(buf, i + 8));
        let filter = h(16);
        Ok(Footer {
            index: h(0),
            filter: (filter.size != 0).then_some(filter),
            properties: h(32),
            format_version,
        })
    }
}

/// Statistics and metadata about a table, stored in its properties block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableProperties {
    /// Entries (all kinds).
    pub num_entries: u64,
    /// Tombstones.
    pub num_deletions: u64,
    /// Entries holding a blob reference.
    pub num_blob_refs: u64,
    /// Sum of internal key lengths.
    pub raw_key_size: u64,
    /// Sum of value lengths.
    pub raw_value_size: u64,
    /// Bytes of data blocks on disk, trailers included.
    pub data_size: u64,
    /// Bytes of the index block on disk, trailer included.
    pub index_size: u64,
    /// Bytes of the filter block on disk, trailer included (0: none).
    pub filter_size: u64,
    /// Number of data blocks.
    pub num_data_blocks: u64,
    /// Smallest sequence number of any entry (0 if empty).
    pub smallest_seq: u64,
    /// Largest sequence number of any entry (0 if empty).
    pub largest_seq: u64,
    /// Compression configured for data blocks (single blocks may be stored raw).
    pub compression: Compression,
    /// Format version of the table.
    pub format_version: u32,
    /// Bloom filter bits per key (0: no filter).
    pub bloom_bits_per_key: u32,
    /// Smallest internal key (empty if the table is empty).
    pub smallest_key: Vec<u8>,
    /// Largest internal key (empty if the table is empty).
    pub largest_key: Vec<u8>,
    /// Blob files referenced by entries of this table, ascending.
    pub blob_files: Vec<u64>,
}

impl Default for TableProperties {
    fn default() -> Self {
        TableProperties {
            num_entries: 0,
            num_deletions: 0,
            num_blob_refs: 0,
            raw_key_size: 0,
            raw_value_size: 0,
            data_size: 0,
            index_size: 0,
            filter_size: 0,
            num_data_blocks: 0,
            smallest_seq: 0,
            largest_seq: 0,
            compression: Compression::None,
            format_version: FORMAT_VERSION,
            bloom_bits_per_key: 0,
            smallest_key: Vec::new(),
            largest_key: Vec::new(),
            blob_files: Vec::new(),
        }
    }
}

/// Property tags. Do not change: they are stored in every table.
mod tag {
    pub const NUM_ENTRIES: u32 = 1;
    pub const NUM_DELETIONS: u32 = 2;
    pub const RAW_KEY_SIZE: u32 = 3;
    pub const RAW_VALUE_SIZE: u32 = 4;
    pub const DATA_SIZE: u32 = 5;
    pub const INDEX_SIZE: u32 = 6;
    pub const FILTER_SIZE: u32 = 7;
    pub const NUM_DATA_BLOCKS: u32 = 8;
    pub const SMALLEST_SEQ: u32 = 9;
    pub const LARGEST_SEQ: u32 = 10;
    pub const COMPRESSION: u32 = 11;
    pub const FORMAT_VERSION: u32 = 12;
    pub const BLOOM_BITS_PER_KEY: u32 = 13;
    pub const SMALLEST_KEY: u32 = 14;
    pub const LARGEST_KEY: u32 = 15;
    pub const BLOB_FILES: u32 = 16;
    pub const NUM_BLOB_REFS: u32 = 17;
}

impl TableProperties {
    /// Encodes as a sequence of `tag varint32 ‖ len varint ‖ payload`
    /// fields; integer payloads are one varint64.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.smallest_key.len() + self.largest_key.len());
        let mut tmp = Vec::with_capacity(16);
        let mut num = |out: &mut Vec<u8>, t: u32, v: u64| {
            tmp.clear();
            put_varint64(&mut tmp, v);
            field(out, t, &tmp);
        };
        num(&mut out, tag::NUM_ENTRIES, self.num_entries);
        num(&mut out, tag::NUM_DELETIONS, self.num_deletions);
        num(&mut out, tag::RAW_KEY_SIZE, self.raw_key_size);
        num(&mut out, tag::RAW_VALUE_SIZE, self.raw_value_size);
        num(&mut out, tag::DATA_SIZE, self.data_size);
        num(&mut out, tag::INDEX_SIZE, self.index_size);
        num(&mut out, tag::FILTER_SIZE, self.filter_size);
        num(&mut out, tag::NUM_DATA_BLOCKS, self.num_data_blocks);
        num(&mut out, tag::SMALLEST_SEQ, self.smallest_seq);
        num(&mut out, tag::LARGEST_SEQ, self.largest_seq);
        num(&mut out, tag::COMPRESSION, self.compression as u64);
        num(
            &mut out,
            tag::FORMAT_VERSION,
            u64::from(self.format_version),
        );
        num(
            &mut out,
            tag::BLOOM_BITS_PER_KEY,
            u64::from(self.bloom_bits_per_key),
        );
        num(&mut out, tag::NUM_BLOB_REFS, self.num_blob_refs);
        field(&mut out, tag::SMALLEST_KEY, &self.smallest_key);
        field(&mut out, tag::LARGEST_KEY, &self.largest_key);
        let mut files = Vec::new();
        put_varint64(&mut files, self.blob_files.len() as u64);
        for &f in &self.blob_files {
            put_varint64(&mut files, f);
        }
        field(&mut out, tag::BLOB_FILES, &files);
        out
    }

    /// Decodes properties. Unknown tags are skipped; `num_entries` and
    /// `format_version` are required.
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        let mut p = TableProperties::default();
        let mut r = Reader::new(buf);
        let (mut have_entries, mut have_version) = (false, false);
        while !r.is_empty() {
            let start = r.pos();
            let t = r.varint32()?;
            let payload = r.length_prefixed()?;
            let at =
                |e: DecodeError| DecodeError::new(start, format!("property {t}: {}", e.reason));
            let num = || -> Result<u64, DecodeError> {
                let mut pr = Reader::new(payload);
                let v = pr.varint64().map_err(at)?;
                if !pr.is_empty() {
                    return Err(DecodeError::new(
                        start,
                        format!("property {t}: trailing bytes"),
                    ));
                }
                Ok(v)
            };
            let small = |v: u64| {
                u32::try_from(v)
                    .map_err(|_| DecodeError::new(start, format!("property {t} too large")))
            };
            match t {
                tag::NUM_ENTRIES => {
                    p.num_entries = num()?;
                    have_entries = true;
                }
                tag::NUM_DELETIONS => p.num_deletions = num()?,
                tag::RAW_KEY_SIZE => p.raw_key_size = num()?,
                tag::RAW_VALUE_SIZE => p.raw_value_size = num()?,
                tag::DATA_SIZE => p.data_size = num()?,
                tag::INDEX_SIZE => p.index_size = num()?,
                tag::FILTER_SIZE => p.filter_size = num()?,
                tag::NUM_DATA_BLOCKS => p.num_data_blocks = num()?,
                tag::SMALLEST_SEQ => p.smallest_seq = num()?,
                tag::LARGEST_SEQ => p.largest_seq = num()?,
                tag::COMPRESSION => {
                    let v = num()?;
                    p.compression = u8::try_from(v)
                        .ok()
                        .and_then(Compression::from_u8)
                        .ok_or_else(|| {
                            DecodeError::new(start, format!("unknown compression {v}"))
                        })?;
                }
                tag::FORMAT_VERSION => {
                    p.format_version = small(num()?)?;
                    have_version = true;
                }
                tag::BLOOM_BITS_PER_KEY => p.bloom_bits_per_key = small(num()?)?,
                tag::NUM_BLOB_REFS => p.num_blob_refs = num()?,
                tag::SMALLEST_KEY => p.smallest_key = payload.to_vec(),
                tag::LARGEST_KEY => p.largest_key = payload.to_vec(),
                tag::BLOB_FILES => {
                    let mut fr = Reader::new(payload);
                    let n = fr.varint64().map_err(at)?;
                    // Each file number takes at least one byte.
                    if n > fr.remaining() as u64 {
                        return Err(DecodeError::new(start, "blob file count too large"));
                    }
                    let mut files = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        files.push(fr.varint64().map_err(at)?);
                    }
                    if !fr.is_empty() {
                        return Err(DecodeError::new(start, "trailing bytes in blob file list"));
                    }
                    p.blob_files = files;
                }
                _ => {}
            }
        }
        if !have_entries || !have_version {
            return Err(DecodeError::new(
                buf.len(),
                "properties missing required fields",
            ));
        }
        Ok(p)
    }
}

fn field(out: &mut Vec<u8>, t: u32, payload: &[u8]) {
    crate::format::coding::put_varint32(out, t);
    crate::format::coding::put_length_prefixed(out, payload);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
