//! Reading separated values for range scans.
//!
//! A forward scan knows the refs of the entries ahead of it before it
//! needs their values, so it hands them over in batches: the batch is
//! grouped by blob file and sorted by offset, and records lying close
//! together are read with one `pread` of exactly the span they cover. Keys
//! that are neighbours in the LSM were mostly written by different flushes,
//! so they sit in different blob files; per file, though, the records of one
//! key range are adjacent (each file is in key order), which is what the
//! grouping exploits. A backward scan reads one value at a time through a
//! window that grows while the scan walks a file sequentially.

use std::path::Path;
use std::sync::Arc;

use super::{residency, BlobReader, BlobResolver, ExpectedRecord};
use crate::error::Result;
use crate::format::blob::BLOB_HEADER_LEN;

/// Smallest readahead window, bytes.
const READAHEAD_MIN: u64 = 16 << 10;
/// Largest readahead window, bytes.
const READAHEAD_MAX: u64 = 1 << 20;
/// Records of one batch this close together are read with one `pread`:
/// reading the gap costs less than another system call (or device I/O).
const COALESCE_GAP: u64 = 8 << 10;
/// Largest single read of a batch.
const SPAN_MAX: u64 = 1 << 20;
/// Blob files an iterator keeps at hand without asking the shared cache.
const READERS_KEPT: usize = 64;
/// Reads one batch keeps in flight at once when its files are read with
/// direct I/O.
const PARALLEL_READS: usize = 8;

/// A value a scan will need: where its record is now and what it must hold.
pub struct Located {
    reader: Arc<BlobReader>,
    offset: u64,
    size: u32,
    seq: u64,
}

impl Located {
    /// What the record must hold for the entry stored under `key`.
    fn expect<'a>(&self, key: &'a [u8]) -> ExpectedRecord<'a> {
        ExpectedRecord {
            key,
            seq: self.seq,
            size: self.size,
        }
    }
}

/// Records of a batch read with one `pread`: `entries` index the batch's
/// sorted order; `len` bytes from `start` cover them.
struct Run {
    entries: std::ops::Range<usize>,
    start: u64,
    len: u64,
}

/// Batches in the process reading their runs together now; at most
/// [`FEW_BATCHES`] do, the others read run after run.
static BATCHES_IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Most batches reading their runs together at once.
const FEW_BATCHES: usize = 2;

/// A batch counted in [`BATCHES_IN_FLIGHT`] while it lives.
struct BatchesInFlight(usize);

impl BatchesInFlight {
    fn enter() -> BatchesInFlight {
        use std::sync::atomic::Ordering;
        BatchesInFlight(BATCHES_IN_FLIGHT.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Whether this batch is among the first [`FEW_BATCHES`] in flight.
    fn few(&self) -> bool {
        self.0 <= FEW_BATCHES
    }
}

impl Drop for BatchesInFlight {
    fn drop(&mut self) {
        BATCHES_IN_FLIGHT.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Reads the span of each of `runs` (`None` where a read failed or the
/// run is longer than [`SPAN_MAX`]), up to [`PARALLEL_READS`] at once on
/// scoped threads, the calling thread among them.
fn read_spans_together<'a>(
    runs: &[Run],
    reader_of: impl Fn(&Run) -> &'a Arc<BlobReader> + Sync,
) -> Vec<Option<Vec<u8>>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let work = || {
        let mut got = Vec::new();
        loop {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let Some(run) = runs.get(n) else {
                return got;
            };
            let mut buf = Vec::new();
            let read = run.len <= SPAN_MAX
                && reader_of(run)
                    .read_span(run.start, run.len, &mut buf)
                    .is_ok();
            got.push((n, read.then_some(buf)));
        }
    };
    let mut spans: Vec<Option<Vec<u8>>> = (0..runs.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        // A thread that cannot be started leaves its share to the others.
        let helpers: Vec<_> = (1..PARALLEL_READS.min(runs.len()))
            .filter_map(|_| std::thread::Builder::new().spawn_scoped(s, work).ok())
            .collect();
        let mut got = work();
        // A helper that panicked leaves its runs `None`: they are read
        // record by record.
        for h in helpers {
            got.extend(h.join().unwrap_or_default());
        }
        for (n, span) in got {
            spans[n] = span;
        }
    });
    spans
}

/// Resolves separated values for one iterator.
pub struct ScanResolver {
    inner: BlobResolver,
    /// Backward window: (file, offset of its first byte); its bytes are
    /// in `window_buf`.
    window: Option<(u64, u64)>,
    window_buf: Vec<u8>,
    readahead: u64,
    /// Reused buffer for batch spans.
    span: Vec<u8>,
    /// Reused list of a batch's runs.
    runs: Vec<Run>,
    /// Never announce reads ([`ScanResolver::serial_reads`]).
    serial: bool,
    /// Readers this scan used, in the order first used (the oldest goes
    /// past `READERS_KEPT`): a value then skips the shared open-file set's
    /// lookup (a read lock and a hash).
    readers: Vec<Arc<BlobReader>>,
}

impl ScanResolver {
    /// A scan resolver over `inner`.
    pub fn new(inner: BlobResolver) -> Self {
        ScanResolver {
            inner,
            window: None,
            window_buf: Vec::new(),
            readahead: READAHEAD_MIN,
            span: Vec::new(),
            runs: Vec::new(),
            serial: false,
            readers: Vec::new(),
        }
    }

    /// With `serial`, batches read their runs one after another even out of
    /// memory, announcing none ahead.
    pub fn serial_reads(mut self, serial: bool) -> Self {
        self.serial = serial;
        self
    }

    /// Finds where the record of `encoded_ref` (stored for a key at `seq`)
    /// lives now, without reading it. `source` names the table and block
    /// the ref came from, for the error when it does not decode.
    pub fn locate(
        &mut self,
        source: (&Path, u64),
        seq: u64,
        encoded_ref: &[u8],
    ) -> Result<Located> {
        let readers = &mut self.readers;
        let inner = &self.inner;
        let (reader, offset, size) = inner.locate_with(source, encoded_ref, |n| {
            if let Some(r) = readers.iter().rev().find(|r| r.number() == n) {
                return Ok(r.clone());
            }
            let r = inner.reader(n)?;
            if readers.len() >= READERS_KEPT {
                readers.remove(0);
            }
            readers.push(r.clone());
            Ok(r)
        })?;
        Ok(Located {
            reader,
            offset,
            size,
            seq,
        })
    }

    /// Reads the values of `batch` (each with the user key it was stored
    /// under), returning them in the same order. Each value is checked as
    /// [`BlobReader::read_value`] checks it; a damaged record fails only its
    /// own entry.
    ///
    /// Runs are first read only if the page cache holds them. At the first
    /// that would wait for the device, every run left is announced to it
    /// ([`BlobReader::prefetch`]) before the reads go on, so a scan out of
    /// memory waits about once per batch rather than once per value; a scan
    /// in memory pays no extra system call.
    ///
    /// While values are in memory ([`super::residency`]) and the files are
    /// mapped, values are copied out of the mappings instead; each major
    /// fault the thread took during a batch counts as a miss.
    pub fn read_batch(&mut self, batch: &[(&[u8], &Located)]) -> Vec<Result<Vec<u8>>> {
        if let Some(out) = Self::read_batch_mapped(batch) {
            return out;
        }
        // Every slot is written once below: `order` is a permutation.
        let mut out: Vec<Result<Vec<u8>>> = (0..batch.len()).map(|_| Ok(Vec::new())).collect();
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_unstable_by_key(|&i| (batch[i].1.reader.number(), batch[i].1.offset));
        let want = |i: usize| batch[i].1.expect(batch[i].0);
        let mut runs = std::mem::take(&mut self.runs);
        runs.clear();
        let mut i = 0;
        while i < order.len() {
            let first = batch[order[i]].1;
            let start = first.offset;
            let mut end = start.saturating_add(want(order[i]).record_len());
            let mut j = i + 1;
            while j < order.len() {
                let l = batch[order[j]].1;
                let l_end = l.offset.saturating_add(want(order[j]).record_len());
                let same_file = l.reader.number() == first.reader.number();
                if !same_file
                    || l.offset > end.saturating_add(COALESCE_GAP)
                    || l_end.max(end) - start > SPAN_MAX
                {
                    break;
                }
                end = end.max(l_end);
                j += 1;
            }
            runs.push(Run {
                entries: i..j,
                start,
                len: end - start,
            });
            i = j;
        }
        let reader_of = |r: &Run| &batch[order[r.entries.start]].1.reader;
        // Direct I/O: nothing reads ahead and announcing does nothing, so a
        // batch read run after run would wait for the device once per run.
        // Only while at most one other batch does, though: with many
        // scanners the device has work queued anyway, and helper threads
        // for every batch halved 16 scanners' throughput.
        let together = (!self.serial && runs.len() > 1 && reader_of(&runs[0]).uncached())
            .then(BatchesInFlight::enter)
            .filter(|b| b.few());
        if let Some(_in_flight) = together {
            let spans = read_spans_together(&runs, reader_of);
            for (run, span) in runs.iter().zip(&spans) {
                for &k in &order[run.entries.clone()] {
                    let l = batch[k].1;
                    out[k] = match span {
                        Some(span) => {
                            l.reader
                                .value_from_buffer_or_read(span, run.start, l.offset, want(k))
                        }
                        // Refused or failed: read on its own, it reports
                        // what is wrong.
                        None => l.reader.read_scanned_value(l.offset, want(k)),
                    };
                }
            }
            self.runs = runs;
            return out;
        }
        let mut waiting = self.serial || runs.len() < 2;
        for (n, run) in runs.iter().enumerate() {
            let reader = reader_of(run);
            // A run past `SPAN_MAX` is one large record: it is read on its
            // own, so the span never grows past `SPAN_MAX`.
            let fits = run.len <= SPAN_MAX;
            let mut spanned = false;
            if !waiting && fits {
                match reader.read_span_cached(run.start, run.len, &mut self.span) {
                    Ok(true) => spanned = true,
                    Ok(false) => {
                        // One miss, however many runs are left: a no-wait
                        // read now and then fails on pages in memory, and
                        // a scan out of memory fails batch after batch.
                        reader.saw_misses(1);
                        waiting = true;
                        for r in &runs[n..] {
                            reader_of(r).prefetch(r.start, r.len);
                        }
                    }
                    // Refused or failed: each record below is read on its
                    // own and reports what is wrong.
                    Err(_) => {}
                }
            }
            // Waiting anyway, a lone record is read straight into its value.
            if waiting && fits && !spanned && run.entries.len() > 1 {
                spanned = reader.read_span(run.start, run.len, &mut self.span).is_ok();
            }
            // A record the span does not hold (a span `read_span` refused or
            // failed to read) is read exactly by `read_value`, which reports
            // the damage.
            for &k in &order[run.entries.clone()] {
                let l = batch[k].1;
                out[k] = if spanned {
                    l.reader
                        .value_from_buffer_or_read(&self.span, run.start, l.offset, want(k))
                } else {
                    l.reader.read_scanned_value(l.offset, want(k))
                };
            }
        }
        self.runs = runs;
        out
    }

    /// [`ScanResolver::read_batch`] through the files' mappings; `None` when
    /// reads do not go through them now.
    fn read_batch_mapped(batch: &[(&[u8], &Located)]) -> Option<Vec<Result<Vec<u8>>>> {
        let (_, first) = batch.first()?;
        first.reader.mapping()?;
        let faults = residency::thread_major_faults();
        let out = batch
            .iter()
            .map(|&(key, l)| {
                let want = l.expect(key);
                l.reader
                    .read_value_mapped(l.offset, want)
                    .unwrap_or_else(|| l.reader.read_scanned_value(l.offset, want))
            })
            .collect();
        residency::saw_misses(residency::thread_major_faults().saturating_sub(faults));
        Some(out)
    }

    /// Like [`BlobResolver::resolve`], for a backward scan: served from a
    /// window of the file that ends at the record and grows while the scan
    /// walks the file backwards.
    pub fn resolve_backward(
        &mut self,
        source: (&Path, u64),
        user_key: &[u8],
        seq: u64,
        encoded_ref: &[u8],
    ) -> Result<Vec<u8>> {
        let located = self.locate(source, seq, encoded_ref)?;
        let want = located.expect(user_key);
        let Located { reader, offset, .. } = located;
        if let Some(v) = reader.read_value_mapped(offset, want) {
            residency::mapped_read_done();
            return v;
        }
        let mut sequential = false;
        if let Some((file, start)) = self.window {
            if file == reader.number() {
                if let Some(v) = reader.value_from_buffer(&self.window_buf, start, offset, want) {
                    return v;
                }
                // Just before the window: the scan is walking this file.
                sequential = offset < start && start - offset < self.readahead;
            }
        }
        self.readahead = if sequential {
            (self.readahead * 2).min(READAHEAD_MAX)
        } else {
            READAHEAD_MIN
        };
        let need = want.record_len();
        let end = offset.saturating_add(need);
        let start = end
            .saturating_sub(self.readahead)
            .max(BLOB_HEADER_LEN as u64);
        // A large value, or an offset outside the records (which
        // `read_value` reports): read just its record.
        if need >= self.readahead
            || start > offset
            || reader
                .read_span(start, end - start, &mut self.window_buf)
                .is_err()
        {
            self.window = None;
            return reader.read_scanned_value(offset, want);
        }
        self.window = Some((reader.number(), start));
        reader.value_from_buffer_or_read(&self.window_buf, start, offset, want)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::blob::{BlobCache, BlobWriter};
    use crate::cache::OpenFiles;
    use crate::io::{FileSystem, FsRef, MemFs};
    use crate::version::{BlobFileState, Version};

    /// A version holding one blob file, number 7, nothing of it dead.
    /// Blob files in `dir` through `fs`, 16 kept open.
    fn blob_cache(dir: PathBuf, fs: FsRef) -> Arc<BlobCache> {
        Arc::new(BlobCache::new(
            dir,
            fs,
            Arc::new(OpenFiles::new(16, 1 << 20)),
        ))
    }

    fn version_with(meta: crate::version::BlobMeta) -> Version {
        let mut v = Version::default();
        v.blob_files.insert(
            7,
            Arc::new(BlobFileState {
                meta,
                dead: Default::default(),
                dead_bytes: 0,
            }),
        );
        v
    }

    /// Regression: lone records went through the batch buffer, which then
    /// kept the size of the largest value an iterator ever read.
    #[test]
    fn a_large_value_never_grows_the_batch_buffer() {
        let fs = MemFs::new();
        let dir = PathBuf::from("/db");
        fs.create_dir_all(&dir).unwrap();
        let path = dir.join(crate::wal::blob_file_name(7));
        let mut w = BlobWriter::new(fs.create(&path).unwrap(), path.clone(), 7).unwrap();
        let values = [vec![1u8; 100], vec![2u8; 3 << 20], vec![3u8; 100]];
        let keys = [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
        let refs: Vec<Vec<u8>> = keys
            .iter()
            .zip(&values)
            .enumerate()
            .map(|(i, (k, v))| w.add(k, i as u64 + 1, v).unwrap().encode())
            .collect();
        let meta = w.finish(&[]).unwrap().meta;
        let v = version_with(meta);
        let cache = blob_cache(dir, fs.clone());
        for serial in [false, true] {
            let mut r = ScanResolver::new(BlobResolver::new(Arc::new(v.clone()), cache.clone()))
                .serial_reads(serial);
            let located: Vec<Located> = refs
                .iter()
                .enumerate()
                .map(|(i, e)| r.locate((&path, 0), i as u64 + 1, e).unwrap())
                .collect();
            let batch: Vec<(&[u8], &Located)> =
                keys.iter().map(|k| k.as_slice()).zip(&located).collect();
            let got = r.read_batch(&batch);
            for (g, want) in got.into_iter().zip(&values) {
                assert_eq!(&g.unwrap(), want);
            }
            assert!(
                r.span.capacity() as u64 <= SPAN_MAX,
                "serial {serial}: the batch buffer holds {} bytes",
                r.span.capacity()
            );
        }
    }

    /// Mapped batches and `pread` batches return the same values, a damaged
    /// record fails only its own entry either way, and a reported miss
    /// sends batches back to `pread` (which fills the span buffer).
    #[test]
    fn a_batch_reads_through_mappings_while_warm_and_with_pread_after_a_miss() {
        let tmp = tempfile::tempdir().unwrap();
        let fs: FsRef = crate::io::PosixFs::shared();
        let dir = tmp.path().to_path_buf();
        let path = dir.join(crate::wal::blob_file_name(7));
        let mut w = BlobWriter::new(fs.create(&path).unwrap(), path.clone(), 7).unwrap();
        let keys: Vec<Vec<u8>> = (0..20).map(|i| format!("k{i:03}").into_bytes()).collect();
        let refs: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| w.add(k, i as u64 + 1, &vec![i as u8; 700]).unwrap())
            .collect();
        let meta = w.finish(&[]).unwrap().meta;
        let mut data = std::fs::read(&path).unwrap();
        data[refs[5].offset as usize + 100] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        let v = version_with(meta);
        let cache = Arc::new(
            BlobCache::new(dir, fs, Arc::new(OpenFiles::new(16, 1 << 20))).mapped_reads(true),
        );
        let check = |got: Vec<Result<Vec<u8>>>| {
            for (i, g) in got.into_iter().enumerate() {
                match g {
                    Err(e) => {
                        assert!(i == 5 && e.to_string().contains(&refs[5].offset.to_string()))
                    }
                    Ok(g) => assert!(i != 5 && g == vec![i as u8; 700]),
                }
            }
        };
        let mut r = ScanResolver::new(BlobResolver::new(Arc::new(v), cache));
        let located: Vec<Located> = refs
            .iter()
            .enumerate()
            .map(|(i, e)| r.locate((&path, 0), i as u64 + 1, &e.encode()).unwrap())
            .collect();
        let batch: Vec<(&[u8], &Located)> =
            keys.iter().map(|k| k.as_slice()).zip(&located).collect();
        let _held = residency::TEST_LOCK.lock();
        residency::until_warm();
        check(r.read_batch(&batch));
        assert_eq!(r.span.capacity(), 0, "a warm batch reads no span");
        residency::make_cold();
        check(r.read_batch(&batch));
        assert!(r.span.capacity() > 0, "once cold, batches read spans");
        // Backward reads go through the mapping too, and notice faults.
        residency::until_warm();
        let enc = refs[3].encode();
        let back = |r: &mut ScanResolver| r.resolve_backward((&path, 0), &keys[3], 4, &enc);
        assert_eq!(back(&mut r).unwrap(), vec![3u8; 700]);
        residency::inject_faults(residency::MISSES_TO_COLD);
        for _ in 0..40 {
            assert_eq!(back(&mut r).unwrap(), vec![3u8; 700]);
        }
        assert!(!residency::warm(), "faults under backward reads are misses");
    }

    /// With direct I/O a batch reads its runs together, and returns what
    /// run-by-run reads return: every value, and a damaged record failing
    /// only its own entry.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_batch_of_direct_reads_reads_its_runs_together_with_the_same_results() {
        let Some(tmp) = crate::io::direct_test_dir("scan-direct") else {
            return;
        };
        let plain: FsRef = crate::io::PosixFs::shared();
        let dir = tmp.path().to_path_buf();
        let mut paths = Vec::new();
        let mut refs = Vec::new();
        let mut keys = Vec::new();
        // Two files, records 10 KiB apart in the batch: many runs.
        for file in 0..2u64 {
            let path = dir.join(crate::wal::blob_file_name(7 + file));
            let mut w =
                BlobWriter::new(plain.create(&path).unwrap(), path.clone(), 7 + file).unwrap();
            for i in 0..300u64 {
                let k = format!("k{file}{i:04}").into_bytes();
                let r = w.add(&k, i + 1, &vec![(i % 251) as u8; 700]).unwrap();
                if i % 15 == 0 {
                    keys.push(k);
                    refs.push((file, i, r));
                }
            }
            let meta = w.finish(&[]).unwrap().meta;
            paths.push((path, meta));
        }
        let bad = 7;
        let (bad_file, _, bad_ref) = &refs[bad];
        let mut data = std::fs::read(&paths[*bad_file as usize].0).unwrap();
        data[bad_ref.offset as usize + 100] ^= 0xff;
        std::fs::write(&paths[*bad_file as usize].0, &data).unwrap();
        let mut v = version_with(paths[0].1.clone());
        v.blob_files.insert(
            8,
            Arc::new(BlobFileState {
                meta: paths[1].1.clone(),
                dead: Default::default(),
                dead_bytes: 0,
            }),
        );
        let cache = blob_cache(dir, crate::io::DirectIo::for_reads(&plain, true));
        for serial in [false, true] {
            let mut r = ScanResolver::new(BlobResolver::new(Arc::new(v.clone()), cache.clone()))
                .serial_reads(serial);
            let located: Vec<Located> = refs
                .iter()
                .map(|(f, i, e)| {
                    r.locate((&paths[*f as usize].0, 0), i + 1, &e.encode())
                        .unwrap()
                })
                .collect();
            assert!(located[0].reader.uncached());
            let batch: Vec<(&[u8], &Located)> =
                keys.iter().map(|k| k.as_slice()).zip(&located).collect();
            for (n, g) in r.read_batch(&batch).into_iter().enumerate() {
                let i = refs[n].1;
                match g {
                    Err(e) => assert!(n == bad, "serial {serial}, entry {n}: {e}"),
                    Ok(g) => assert!(n != bad && g == vec![(i % 251) as u8; 700]),
                }
            }
        }
    }
}
