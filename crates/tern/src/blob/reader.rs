//! Reads records from one blob file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::residency;

use crate::cache::BlockCache;
use crate::error::{Error, IoContext, Result};
use crate::format::blob::{
    self, BlobFooter, BlobRecord, LineageEntry, BLOB_FOOTER_LEN, BLOB_HEADER_LEN,
};
use crate::io::{FsRef, RandomAccessFile};

/// Most bytes [`BlobReader::walk_records`] reads at once (a larger record is
/// read whole).
pub const WALK_READ_BYTES: u64 = 1 << 20;

/// Skipped records spanning at least this many bytes are jumped over by
/// [`BlobReader::walk_records`]; shorter runs are read through, as one
/// larger read costs less than two.
pub const WALK_SKIP_BYTES: u64 = 64 << 10;
/// Most bytes of a record a mapped read asks the CPU for ahead of its
/// checksum: past a few KiB the hardware's own sequential prefetch keeps
/// up, and a large value's lines would only push others out.
const RECORD_PREFETCH_MAX: usize = 4 << 10;

/// One record read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobEntry {
    /// The user key.
    pub key: Vec<u8>,
    /// Sequence number of the write.
    pub seq: u64,
    /// The value.
    pub value: Vec<u8>,
}

/// The version a table entry names: the record its ref reaches must hold
/// this key and sequence number and a value of this size.
#[derive(Debug, Clone, Copy)]
pub struct ExpectedRecord<'a> {
    /// The user key of the table entry.
    pub key: &'a [u8],
    /// The sequence number of the table entry.
    pub seq: u64,
    /// The value size the ref records.
    pub size: u32,
}

impl ExpectedRecord<'_> {
    /// Bytes of the whole record.
    pub fn record_len(&self) -> u64 {
        blob::record_len(self.key.len(), self.size as usize)
    }

    /// Checks a decoded record against the expectation.
    fn check(&self, rec: &BlobRecord<'_>, path: &Path, offset: u64) -> Result<()> {
        if rec.key != self.key {
            return Err(Error::corruption(
                path,
                offset,
                "blob record belongs to another key",
            ));
        }
        if rec.seq != self.seq {
            return Err(Error::corruption(
                path,
                offset,
                format!(
                    "blob record holds another version of its key (sequence {}, the table names {})",
                    rec.seq, self.seq
                ),
            ));
        }
        Ok(())
    }
}

/// An open blob file. Its ordinal index is in memory when opened with
/// [`BlobReader::open`] (whole-file work: GC, checks) and read entry by
/// entry when opened with [`BlobReader::open_lazy`] (reads through the
/// open-file cache, which then holds no index memory). An index entry read
/// on its own has no checksum of its own; a read through it still checks
/// the record it reaches holds the version it wants.
pub struct BlobReader {
    file: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    number: u64,
    footer: BlobFooter,
    offsets: Option<Vec<u64>>,
    /// Read values through the file's mapping while they are in memory.
    mapped_reads: bool,
    /// Where point reads keep the records they read (direct reads: no page
    /// cache keeps them).
    records: Option<Arc<BlockCache>>,
}

impl BlobReader {
    /// Opens blob file `number` at `path`, checking header, footer and the
    /// whole index, which stays in memory.
    pub fn open(fs: &FsRef, path: &Path, number: u64) -> Result<BlobReader> {
        let mut r = Self::open_lazy(fs, path, number)?;
        r.offsets = Some(r.load_index()?);
        Ok(r)
    }

    /// Opens blob file `number` at `path`, checking header and footer; index
    /// entries are read when needed.
    pub fn open_lazy(fs: &FsRef, path: &Path, number: u64) -> Result<BlobReader> {
        Self::from_file(fs.open(path).ctx(path)?, path, number)
    }

    /// Blob file `number`, opened as `file` from `path`: checks header and
    /// footer.
    fn from_file(file: Arc<dyn RandomAccessFile>, path: &Path, number: u64) -> Result<BlobReader> {
        let size = file.len();
        if size < (BLOB_HEADER_LEN + BLOB_FOOTER_LEN) as u64 {
            return Err(Error::corruption(path, 0, "blob file too short"));
        }
        let mut header = [0u8; BLOB_HEADER_LEN];
        file.read_exact_at(0, &mut header).ctx(path)?;
        blob::decode_header(&header).map_err(|e| e.in_file(path, 0))?;
        let footer_at = size - BLOB_FOOTER_LEN as u64;
        let mut fbuf = [0u8; BLOB_FOOTER_LEN];
        file.read_exact_at(footer_at, &mut fbuf).ctx(path)?;
        let footer = BlobFooter::decode(&fbuf, size).map_err(|e| e.in_file(path, footer_at))?;
        Ok(BlobReader {
            file,
            path: path.to_path_buf(),
            number,
            footer,
            offsets: None,
            mapped_reads: false,
            records: None,
        })
    }

    /// Point reads look for records in `cache` first and keep the ones
    /// they read there.
    pub fn with_record_cache(mut self, cache: Option<Arc<BlockCache>>) -> Self {
        self.records = cache;
        self
    }

    /// With `on`, values are read through the file's mapping while
    /// [`residency::warm`] says they are in memory.
    pub fn with_mapped_reads(mut self, on: bool) -> Self {
        self.mapped_reads = on;
        self
    }

    /// Reads of this file found `n` values missing from memory. Only a
    /// reader that reads through mappings says so: the state is the
    /// process's, and a store without mappings must not send others back
    /// to `pread`.
    pub(crate) fn saw_misses(&self, n: u64) {
        if self.mapped_reads {
            residency::saw_misses(n);
        }
    }

    /// The file's mapping, if reads should go through it now.
    #[inline]
    pub(crate) fn mapping(&self) -> Option<&[u8]> {
        if self.mapped_reads && residency::warm() {
            self.file.mapped()
        } else {
            None
        }
    }

    /// The decoded footer (checked at open).
    pub(crate) fn footer(&self) -> &BlobFooter {
        &self.footer
    }

    /// Reads and checks the whole ordinal index.
    fn load_index(&self) -> Result<Vec<u64>> {
        let f = &self.footer;
        let mut ibuf = vec![0u8; (f.lineage_offset - f.index_offset) as usize];
        self.file
            .read_exact_at(f.index_offset, &mut ibuf)
            .ctx(&self.path)?;
        let offsets = blob::decode_index(&ibuf, f.record_count)
            .map_err(|e| e.in_file(&self.path, f.index_offset))?;
        if offsets.last().is_some_and(|&o| o >= f.index_offset) {
            return Err(Error::corruption(
                &self.path,
                f.index_offset,
                "blob index points past the records",
            ));
        }
        Ok(offsets)
    }

    /// Bytes the reader keeps in memory: its ordinal index, if loaded.
    pub fn resident_bytes(&self) -> u64 {
        self.offsets
            .as_ref()
            .map_or(0, |o| (o.len() * std::mem::size_of::<u64>()) as u64)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Number of records.
    pub fn record_count(&self) -> u64 {
        self.footer.record_count
    }

    /// Bytes of all records (headers, keys, values), as the footer says.
    pub fn data_bytes(&self) -> u64 {
        self.footer.data_bytes
    }

    /// Offset of record `ordinal`; `index_offset` (the end of the records)
    /// for `ordinal == record_count`.
    fn boundary(&self, ordinal: u64) -> Result<u64> {
        self.boundary_with(ordinal, false)?
            .ok_or_else(|| Error::Internal("a waiting index read returned nothing".into()))
    }

    /// [`BlobReader::boundary`]; with `nowait`, `None` if the index entry
    /// (of a reader opened without its index in memory) is not in the page
    /// cache.
    fn boundary_with(&self, ordinal: u64, nowait: bool) -> Result<Option<u64>> {
        let f = &self.footer;
        if ordinal == f.record_count {
            return Ok(Some(f.index_offset));
        }
        if ordinal > f.record_count {
            return Err(Error::corruption(
                &self.path,
                f.index_offset,
                format!("blob ordinal {ordinal} out of range"),
            ));
        }
        if let Some(offsets) = &self.offsets {
            return Ok(Some(offsets[ordinal as usize]));
        }
        let at = f.index_offset + 8 * ordinal;
        let mut b = [0u8; 8];
        if nowait {
            if !self.file.read_cached_at(at, &mut b).ctx(&self.path)? {
                return Ok(None);
            }
        } else {
            self.file.read_exact_at(at, &mut b).ctx(&self.path)?;
        }
        let offset = u64::from_le_bytes(b);
        if offset < BLOB_HEADER_LEN as u64 || offset >= f.index_offset {
            return Err(Error::corruption(
                &self.path,
                at,
                format!("blob index entry {ordinal} points outside the records"),
            ));
        }
        Ok(Some(offset))
    }

    /// Offset of record `ordinal`.
    pub fn offset_of(&self, ordinal: u32) -> Result<u64> {
        self.check_ordinal(ordinal)?;
        self.boundary(u64::from(ordinal))
    }

    /// [`BlobReader::offset_of`] without waiting on the device: `None` if
    /// the index entry is not in memory.
    pub fn offset_of_cached(&self, ordinal: u32) -> Result<Option<u64>> {
        self.check_ordinal(ordinal)?;
        self.boundary_with(u64::from(ordinal), true)
    }

    fn check_ordinal(&self, ordinal: u32) -> Result<()> {
        if u64::from(ordinal) >= self.footer.record_count {
            return Err(Error::corruption(
                &self.path,
                self.footer.index_offset,
                format!("blob ordinal {ordinal} out of range"),
            ));
        }
        Ok(())
    }

    /// Total bytes of record `ordinal` (header, key and value).
    pub fn record_len(&self, ordinal: u32) -> Result<u64> {
        let start = self.offset_of(ordinal)?;
        let end = self.boundary(u64::from(ordinal) + 1)?;
        end.checked_sub(start).filter(|&n| n > 0).ok_or_else(|| {
            Error::corruption(
                &self.path,
                self.footer.index_offset,
                format!("blob index entries {ordinal} and the next are not increasing"),
            )
        })
    }

    /// Reads record `ordinal` whole.
    pub fn read_ordinal(&self, ordinal: u32) -> Result<BlobEntry> {
        let offset = self.offset_of(ordinal)?;
        let len = self.record_len(ordinal)?;
        self.read_record(offset, len)
    }

    /// Calls `f` with every record `skip` does not reject, in ordinal order,
    /// reading runs of records with one read each (at most
    /// [`WALK_READ_BYTES`], or one larger record) instead of one read per
    /// record, and jumping over runs of skipped records of at least
    /// [`WALK_SKIP_BYTES`]. Each record's checksum is checked. Returns the
    /// bytes read (skipped records read through included). GC walks its
    /// inputs this way.
    pub fn walk_records(
        &self,
        skip: impl Fn(u32) -> bool,
        mut f: impl FnMut(u32, BlobRecord<'_>) -> Result<()>,
    ) -> Result<u64> {
        let count = u32::try_from(self.footer.record_count).map_err(|_| {
            Error::corruption(
                &self.path,
                self.footer.index_offset,
                "too many blob records",
            )
        })?;
        let out_of_order =
            |at: u64| Error::corruption(&self.path, at, "blob index entries are out of order");
        let mut buf = Vec::new();
        // The records one read covers: ordinal, offset, length.
        let mut planned: Vec<(u32, u64, u64)> = Vec::new();
        let mut read = 0u64;
        let mut next = 0u32;
        while next < count {
            // Plan one read: taken records, skipped ones between them read
            // through, until a long skipped run or the size limit.
            planned.clear();
            let mut end = 0;
            while next < count {
                let o = next;
                if skip(o) {
                    next += 1;
                    continue;
                }
                let at = self.offset_of(o)?;
                let len = self.record_len(o)?;
                if let Some(&(_, start, _)) = planned.first() {
                    let gap = at.checked_sub(end).ok_or_else(|| out_of_order(at))?;
                    if gap >= WALK_SKIP_BYTES || at + len - start > WALK_READ_BYTES {
                        break;
                    }
                }
                planned.push((o, at, len));
                end = at + len;
                next += 1;
            }
            let Some(&(_, start, _)) = planned.first() else {
                break;
            };
            self.read_span(start, end - start, &mut buf)?;
            read += end - start;
            for &(o, at, len) in &planned {
                // In order (checked while planning), so inside the read.
                let rel = (at - start) as usize;
                let rec = blob::decode_record(&buf[rel..rel + len as usize])
                    .map_err(|e| e.in_file(&self.path, at))?;
                f(o, rec)?;
            }
        }
        Ok(read)
    }

    /// Reads and decodes the `len` bytes of the record at `offset`.
    fn read_record(&self, offset: u64, len: u64) -> Result<BlobEntry> {
        let mut rec = vec![0u8; len as usize];
        self.file.read_exact_at(offset, &mut rec).ctx(&self.path)?;
        let r = blob::decode_record(&rec).map_err(|e| e.in_file(&self.path, offset))?;
        Ok(BlobEntry {
            key: r.key.to_vec(),
            seq: r.seq,
            value: r.value.to_vec(),
        })
    }

    /// `len` bytes at `offset` lie within the records, or a corruption
    /// saying `why`.
    fn check_inside(&self, offset: u64, len: u64, why: &str) -> Result<()> {
        let inside = offset
            .checked_add(len)
            .is_some_and(|end| end <= self.footer.index_offset);
        if offset < BLOB_HEADER_LEN as u64 || !inside {
            return Err(Error::corruption(&self.path, offset, why.to_string()));
        }
        Ok(())
    }

    /// Reads the value of the record at `offset`, which must hold the
    /// version `want` names.
    pub fn read_value(&self, offset: u64, want: ExpectedRecord<'_>) -> Result<Vec<u8>> {
        self.read_value_with(offset, want, false, true)?
            .ok_or_else(|| Error::Internal("a waiting blob read returned nothing".into()))
    }

    /// [`BlobReader::read_value`] for a scan: a record it reads stays out
    /// of the record cache, since a scan's values are seldom read again
    /// and would push out the blocks and records point reads come back to.
    pub fn read_scanned_value(&self, offset: u64, want: ExpectedRecord<'_>) -> Result<Vec<u8>> {
        self.read_value_with(offset, want, false, false)?
            .ok_or_else(|| Error::Internal("a waiting blob read returned nothing".into()))
    }

    /// [`BlobReader::read_value`] if the page cache holds the record;
    /// `Ok(None)` if reading it would wait for the device.
    pub fn read_value_cached(
        &self,
        offset: u64,
        want: ExpectedRecord<'_>,
    ) -> Result<Option<Vec<u8>>> {
        self.read_value_with(offset, want, true, true)
    }

    fn read_value_with(
        &self,
        offset: u64,
        want: ExpectedRecord<'_>,
        cached_only: bool,
        keep: bool,
    ) -> Result<Option<Vec<u8>>> {
        // A no-wait read cannot go through the mapping: a fault would wait.
        if !cached_only {
            if let Some(v) = self.read_value_mapped(offset, want) {
                residency::mapped_read_done();
                return v.map(Some);
            }
        }
        let len = want.record_len();
        self.check_inside(offset, len, "blob reference points outside the records")?;
        // A kept record is checked as a read one is; one shorter than the
        // ref says is left to the read below, which reports it.
        let kept = self
            .records
            .as_ref()
            .and_then(|c| c.get_record(self.number, offset));
        if let Some(v) = kept.and_then(|rec| self.value_from_buffer(&rec, offset, offset, want)) {
            return v.map(Some);
        }
        let mut rec = vec![0u8; len as usize];
        // Off the mapping, a reader that maps tries a no-wait read first, so
        // a miss is seen (and, once there are none, reads go mapped again).
        let try_cached = cached_only || self.mapped_reads;
        let cached = try_cached && self.file.read_cached_at(offset, &mut rec).ctx(&self.path)?;
        if !cached {
            self.saw_misses(1);
            if cached_only {
                return Ok(None);
            }
            self.file.read_exact_at(offset, &mut rec).ctx(&self.path)?;
        }
        let r = blob::decode_record(&rec).map_err(|e| e.in_file(&self.path, offset))?;
        want.check(&r, &self.path, offset)?;
        if let Some(cache) = self.records.as_ref().filter(|_| keep) {
            cache.insert_record(self.number, offset, Arc::from(&rec[..]));
        }
        // The value is the record's tail: keep the buffer, drop the rest.
        let value_start = rec.len() - r.value.len();
        rec.drain(..value_start);
        Ok(Some(rec))
    }

    /// [`BlobReader::read_value`] through the file's mapping; `None` when
    /// reads do not go through it now ([`BlobReader::mapping`]).
    pub(crate) fn read_value_mapped(
        &self,
        offset: u64,
        want: ExpectedRecord<'_>,
    ) -> Option<Result<Vec<u8>>> {
        let map = self.mapping()?;
        let len = want.record_len();
        if let Err(e) = self.check_inside(offset, len, "blob reference points outside the records")
        {
            return Some(Err(e));
        }
        // Inside the records, so inside the mapping (the file as opened).
        // The record's lines are asked for at once: the checksum then
        // reads them without waiting on each in turn.
        if let Some(rec) = map.get(offset as usize..(offset + len) as usize) {
            crate::hint::prefetch_bytes(rec, RECORD_PREFETCH_MAX);
        }
        self.value_from_buffer(map, 0, offset, want)
    }

    /// Reads exactly `len` raw bytes of records at `offset` into `buf`
    /// (resized, its allocation reused), for batched reads. The span must lie
    /// within the records.
    pub fn read_span(&self, offset: u64, len: u64, buf: &mut Vec<u8>) -> Result<()> {
        self.check_inside(offset, len, "read outside the records")?;
        buf.resize(len as usize, 0);
        self.file.read_exact_at(offset, buf).ctx(&self.path)
    }

    /// [`BlobReader::read_span`] if the page cache holds every byte of it:
    /// `Ok(false)` (and `buf` unspecified) when the read would wait for the
    /// device.
    pub fn read_span_cached(&self, offset: u64, len: u64, buf: &mut Vec<u8>) -> Result<bool> {
        self.check_inside(offset, len, "read outside the records")?;
        buf.resize(len as usize, 0);
        self.file.read_cached_at(offset, buf).ctx(&self.path)
    }

    /// Hints that `len` bytes from `offset` will be read soon.
    pub fn prefetch(&self, offset: u64, len: u64) {
        self.file.prefetch(offset, len);
    }

    /// Reads bypass every cache below the engine (direct I/O), so hints do
    /// nothing: see [`RandomAccessFile::uncached`].
    pub fn uncached(&self) -> bool {
        self.file.uncached()
    }

    /// Extracts the value of the record at `offset` from `buf` (which holds
    /// the file's bytes from `buf_offset`), checking it as `read_value` does.
    /// `None` if the record is not wholly inside `buf`.
    pub fn value_from_buffer(
        &self,
        buf: &[u8],
        buf_offset: u64,
        offset: u64,
        want: ExpectedRecord<'_>,
    ) -> Option<Result<Vec<u8>>> {
        let len = want.record_len();
        let start = offset.checked_sub(buf_offset)?;
        if start.checked_add(len)? > buf.len() as u64 {
            return None;
        }
        let rec = &buf[start as usize..(start + len) as usize];
        Some(match blob::decode_record(rec) {
            Ok(r) => want
                .check(&r, &self.path, offset)
                .map(|()| r.value.to_vec()),
            Err(e) => Err(e.in_file(&self.path, offset)),
        })
    }

    /// [`BlobReader::value_from_buffer`], or the record read on its own when
    /// it is not wholly inside `buf` (a scan's read: see
    /// [`BlobReader::read_scanned_value`]).
    pub fn value_from_buffer_or_read(
        &self,
        buf: &[u8],
        buf_offset: u64,
        offset: u64,
        want: ExpectedRecord<'_>,
    ) -> Result<Vec<u8>> {
        self.value_from_buffer(buf, buf_offset, offset, want)
            .unwrap_or_else(|| self.read_scanned_value(offset, want))
    }

    /// The lineage block (for GC outputs; empty otherwise).
    pub fn lineage(&self) -> Result<Vec<LineageEntry>> {
        let start = self.footer.lineage_offset;
        let end = self.file.len() - BLOB_FOOTER_LEN as u64;
        let mut buf = vec![0u8; (end - start) as usize];
        self.file.read_exact_at(start, &mut buf).ctx(&self.path)?;
        blob::decode_lineage(&buf).map_err(|e| e.in_file(&self.path, start))
    }

    /// Reads the index and every record, checking each checksum; returns
    /// the count.
    pub fn verify(&self) -> Result<u64> {
        let loaded;
        let offsets = match &self.offsets {
            Some(o) => o,
            None => {
                loaded = self.load_index()?;
                &loaded
            }
        };
        let ends = offsets.iter().skip(1).chain([&self.footer.index_offset]);
        for (&start, &end) in offsets.iter().zip(ends) {
            self.read_record(start, end - start)?;
        }
        self.lineage()?;
        Ok(offsets.len() as u64)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::blob::BlobWriter;
    use crate::io::{FileSystem, MemFs};

    /// A blob file of `sizes.len()` records, record `i` with a value of
    /// `sizes[i]` bytes of `i as u8`.
    fn blob_file(sizes: &[usize]) -> (FsRef, PathBuf) {
        let fs: FsRef = MemFs::new();
        fs.create_dir_all(Path::new("/b")).unwrap();
        let path = PathBuf::from("/b/000001.blob");
        let mut w = BlobWriter::new(fs.create(&path).unwrap(), path.clone(), 1).unwrap();
        for (i, &n) in sizes.iter().enumerate() {
            w.add(format!("k{i:05}").as_bytes(), i as u64, &vec![i as u8; n])
                .unwrap();
        }
        w.finish(&[]).unwrap();
        (fs, path)
    }

    fn walked(r: &BlobReader, skip: impl Fn(u32) -> bool) -> Vec<(u32, BlobEntry)> {
        let mut out = Vec::new();
        r.walk_records(skip, |o, rec| {
            out.push((
                o,
                BlobEntry {
                    key: rec.key.to_vec(),
                    seq: rec.seq,
                    value: rec.value.to_vec(),
                },
            ));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn walking_records_yields_what_reading_each_one_does() {
        // Small records, runs longer than one read, a record larger than a
        // read, and dead runs both shorter and longer than the jump.
        let mut sizes = vec![100; 3000];
        sizes[1500] = 3 << 20;
        let (fs, path) = blob_file(&sizes);
        let r = BlobReader::open(&fs, &path, 1).unwrap();
        type Skip = Box<dyn Fn(u32) -> bool>;
        let skips: Vec<(&str, Skip)> = vec![
            ("none", Box::new(|_| false)),
            ("all", Box::new(|_| true)),
            ("odd", Box::new(|o| o % 2 == 1)),
            ("short runs", Box::new(|o| o % 100 < 50)),
            (
                "long runs",
                Box::new(|o| (1000..2900).contains(&o) && o != 1500),
            ),
            ("the big one", Box::new(|o| o == 1500)),
        ];
        for (what, skip) in skips {
            let got = walked(&r, &skip);
            let want: Vec<(u32, BlobEntry)> = (0..sizes.len() as u32)
                .filter(|&o| !skip(o))
                .map(|o| (o, r.read_ordinal(o).unwrap()))
                .collect();
            assert_eq!(got.len(), want.len(), "{what}: records walked");
            assert!(got == want, "{what}: records differ");
            let live: u64 = (0..sizes.len() as u32)
                .filter(|&o| !skip(o))
                .map(|o| r.record_len(o).unwrap())
                .sum();
            let read = r.walk_records(&skip, |_, _| Ok(())).unwrap();
            let all = r.offset_of(sizes.len() as u32 - 1).unwrap()
                + r.record_len(sizes.len() as u32 - 1).unwrap()
                - r.offset_of(0).unwrap();
            assert!(
                live <= read && read <= all,
                "{what}: read {read} bytes for {live} live of {all}"
            );
        }
    }

    #[test]
    fn walking_over_a_damaged_record_names_file_and_offset() {
        let (fs, path) = blob_file(&[100; 50]);
        let r = BlobReader::open(&fs, &path, 1).unwrap();
        let at = r.offset_of(20).unwrap();
        let mem = MemFs::new();
        let mut data = fs.read_all(&path).unwrap();
        data[at as usize + 30] ^= 0xff;
        mem.create_dir_all(Path::new("/b")).unwrap();
        let mut f = mem.create(&path).unwrap();
        f.append(&data).unwrap();
        f.sync().unwrap();
        let mem: FsRef = mem;
        let r = BlobReader::open(&mem, &path, 1).unwrap();
        let mut seen = 0;
        let e = r
            .walk_records(
                |_| false,
                |_, _| {
                    seen += 1;
                    Ok(())
                },
            )
            .unwrap_err()
            .to_string();
        assert_eq!(seen, 20, "the records before the damage are delivered");
        assert!(
            e.contains("000001.blob") && e.contains(&at.to_string()),
            "{e}"
        );
        // Skipping the damaged record walks past it.
        assert_eq!(walked(&r, |o| o == 20).len(), 49);
    }

    #[test]
    fn a_mapped_read_returns_what_a_pread_does_and_names_damage_by_file_and_offset() {
        let _held = residency::TEST_LOCK.lock();
        let dir = tempfile::tempdir().unwrap();
        let fs = crate::io::PosixFs::shared();
        let path = dir.path().join("000001.blob");
        let mut w = BlobWriter::new(fs.create(&path).unwrap(), path.clone(), 1).unwrap();
        let refs: Vec<_> = (0..40usize)
            .map(|i| {
                w.add(
                    format!("k{i:05}").as_bytes(),
                    i as u64,
                    &vec![i as u8; 50 + i * 97],
                )
                .unwrap()
            })
            .collect();
        w.finish(&[]).unwrap();
        let want = |i: usize| ExpectedRecord {
            key: format!("k{i:05}").into_bytes().leak(),
            seq: i as u64,
            size: refs[i].size,
        };
        let mapped = BlobReader::open(&fs, &path, 1)
            .unwrap()
            .with_mapped_reads(true);
        let plain = BlobReader::open(&fs, &path, 1).unwrap();
        residency::until_warm();
        for (i, r) in refs.iter().enumerate() {
            let m = mapped
                .read_value_mapped(r.offset, want(i))
                .unwrap()
                .unwrap();
            assert_eq!(m, vec![i as u8; 50 + i * 97]);
            assert_eq!(m, plain.read_value(r.offset, want(i)).unwrap());
            assert!(plain.read_value_mapped(r.offset, want(i)).is_none());
        }
        // Another version's record, an offset outside the records, and one
        // past the end of the file: errors naming the file and offset,
        // never a read outside the mapping.
        let wrong = mapped
            .read_value_mapped(refs[3].offset, want(4))
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(wrong.contains("000001.blob"), "{wrong}");
        let past = mapped.footer().index_offset;
        for at in [past, past + 10_000, u64::MAX - 3] {
            let e = mapped.read_value(at, want(0)).unwrap_err().to_string();
            assert!(
                e.contains("000001.blob") && e.contains(&at.to_string()),
                "{e}"
            );
        }
        // A flipped byte in a value is caught by the record's checksum.
        let mut data = std::fs::read(&path).unwrap();
        data[refs[7].offset as usize + 60] ^= 0xff;
        let damaged = dir.path().join("000002.blob");
        std::fs::write(&damaged, &data).unwrap();
        let r = BlobReader::open(&fs, &damaged, 2)
            .unwrap()
            .with_mapped_reads(true);
        residency::until_warm();
        let e = r.read_value(refs[7].offset, want(7)).unwrap_err();
        assert!(matches!(e, crate::Error::Corruption { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("000002.blob") && e.contains(&refs[7].offset.to_string()),
            "{e}"
        );
        assert_eq!(
            r.read_value(refs[8].offset, want(8)).unwrap(),
            vec![8u8; 50 + 8 * 97]
        );
    }

    /// A file held in memory that maps itself and counts the reads that
    /// do not go through its mapping.
    struct CountingFile {
        data: Vec<u8>,
        mapped: bool,
        resident: std::sync::atomic::AtomicBool,
        preads: std::sync::atomic::AtomicU32,
        nowait_reads: std::sync::atomic::AtomicU32,
    }

    impl RandomAccessFile for CountingFile {
        fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.preads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let at = offset as usize;
            buf.copy_from_slice(&self.data[at..at + buf.len()]);
            Ok(())
        }
        fn read_cached_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<bool> {
            self.nowait_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if !self.resident.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(false);
            }
            let at = offset as usize;
            buf.copy_from_slice(&self.data[at..at + buf.len()]);
            Ok(true)
        }
        fn len(&self) -> u64 {
            self.data.len() as u64
        }
        fn mapped(&self) -> Option<&[u8]> {
            self.mapped.then_some(&self.data[..])
        }
    }

    /// A reader over a [`CountingFile`] holding `blob_file(&[300; 10])`'s
    /// bytes, with the file.
    fn counting_reader(mapped: bool, mapped_reads: bool) -> (BlobReader, Arc<CountingFile>) {
        let (fs, path) = blob_file(&[300; 10]);
        let file = Arc::new(CountingFile {
            data: fs.read_all(&path).unwrap(),
            mapped,
            resident: true.into(),
            preads: 0.into(),
            nowait_reads: 0.into(),
        });
        let r = BlobReader::from_file(file.clone(), &path, 1)
            .unwrap()
            .with_mapped_reads(mapped_reads);
        (r, file)
    }

    fn expect(i: u32) -> ExpectedRecord<'static> {
        ExpectedRecord {
            key: format!("k{i:05}").into_bytes().leak(),
            seq: i as u64,
            size: 300,
        }
    }

    #[test]
    fn point_reads_go_through_the_mapping_while_warm_and_no_wait_reads_never_do() {
        use std::sync::atomic::Ordering::Relaxed;
        let _held = residency::TEST_LOCK.lock();
        let (r, file) = counting_reader(true, true);
        let at: Vec<u64> = (0..10).map(|i| r.offset_of(i).unwrap()).collect();
        let (preads, nowait) = (file.preads.load(Relaxed), file.nowait_reads.load(Relaxed));
        residency::until_warm();
        for i in 0..10u32 {
            assert_eq!(
                r.read_value(at[i as usize], expect(i)).unwrap(),
                vec![i as u8; 300]
            );
        }
        assert_eq!(file.preads.load(Relaxed), preads, "warm: no pread");
        assert_eq!(file.nowait_reads.load(Relaxed), nowait, "warm: no probe");
        // A no-wait read must not fault: it never uses the mapping.
        let v = r.read_value_cached(at[2], expect(2)).unwrap().unwrap();
        assert_eq!(v, vec![2u8; 300]);
        assert_eq!(file.nowait_reads.load(Relaxed), nowait + 1);
        // Cold: a no-wait probe, then (the value missing) a plain read;
        // reads stay cold.
        residency::make_cold();
        file.resident.store(false, Relaxed);
        assert_eq!(r.read_value(at[3], expect(3)).unwrap(), vec![3u8; 300]);
        assert_eq!(file.nowait_reads.load(Relaxed), nowait + 2);
        assert_eq!(file.preads.load(Relaxed), preads + 1);
        assert!(!residency::warm());
        residency::until_warm();
    }

    #[test]
    fn a_store_without_mapped_reads_never_makes_others_cold() {
        let _held = residency::TEST_LOCK.lock();
        residency::until_warm();
        for (mapped, mapped_reads) in [(true, false), (false, false)] {
            let (r, file) = counting_reader(mapped, mapped_reads);
            file.resident
                .store(false, std::sync::atomic::Ordering::Relaxed);
            let at = r.offset_of(4).unwrap();
            // More misses than a burst: any of them counted would show.
            for _ in 0..residency::MISSES_TO_COLD {
                assert!(r.read_value_cached(at, expect(4)).unwrap().is_none());
                assert_eq!(r.read_value(at, expect(4)).unwrap(), vec![4u8; 300]);
            }
            assert!(
                residency::warm(),
                "mapped {mapped}, mapped reads {mapped_reads}"
            );
        }
    }

    #[test]
    fn a_record_cache_serves_repeat_point_reads_and_still_checks_what_it_serves() {
        use std::sync::atomic::Ordering::Relaxed;
        let (r, file) = counting_reader(false, false);
        let cache = BlockCache::new(1 << 20);
        let r = r.with_record_cache(Some(cache.clone()));
        let at: Vec<u64> = (0..10).map(|i| r.offset_of(i).unwrap()).collect();
        let before = file.preads.load(Relaxed);
        for _ in 0..3 {
            for i in 0..10u32 {
                assert_eq!(
                    r.read_value(at[i as usize], expect(i)).unwrap(),
                    vec![i as u8; 300]
                );
            }
        }
        assert_eq!(
            file.preads.load(Relaxed) - before,
            10,
            "one read per record"
        );
        assert_eq!((cache.record_hits(), cache.record_misses()), (20, 10));
        // A scan's reads find what point reads kept but keep nothing.
        let (r2, file2) = counting_reader(false, false);
        let r2 = r2.with_record_cache(Some(BlockCache::new(1 << 20)));
        let before2 = file2.preads.load(Relaxed);
        for _ in 0..2 {
            assert_eq!(
                r2.read_scanned_value(at[6], expect(6)).unwrap(),
                vec![6u8; 300]
            );
        }
        assert_eq!(
            file2.preads.load(Relaxed) - before2,
            2,
            "scan reads are not kept"
        );
        assert_eq!(
            r.read_scanned_value(at[6], expect(6)).unwrap(),
            vec![6u8; 300]
        );
        assert_eq!(
            file.preads.load(Relaxed) - before,
            10,
            "but find kept records"
        );
        // A no-wait read finds a cached record in memory.
        assert_eq!(
            r.read_value_cached(at[3], expect(3)).unwrap(),
            Some(vec![3u8; 300])
        );
        // A ref naming another version of the key at a cached offset is
        // still caught.
        let wrong = ExpectedRecord {
            seq: 99,
            ..expect(4)
        };
        let e = r.read_value(at[4], wrong).unwrap_err();
        assert!(matches!(e, crate::Error::Corruption { .. }), "{e}");
        // A cached record damaged in memory is caught by its checksum.
        let mut bad = cache.get_record(1, at[5]).unwrap().to_vec();
        bad[40] ^= 1;
        cache.insert_record(1, at[5], Arc::from(bad));
        let e = r.read_value(at[5], expect(5)).unwrap_err();
        assert!(matches!(e, crate::Error::Corruption { .. }), "{e}");
    }
}
