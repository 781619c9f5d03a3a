//! A compaction job: input tables + retention rules → output tables.
//!
//! The job holds no handle to the store: only file metadata, snapshot
//! sequence numbers and options, so it can run on any thread or, later, in
//! another process over shared storage.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::{CompactionFilter, FilterDecision, FilterValue, Placed, Retention, VersionWalk};
use crate::blob::{BlobCache, BlobWriter, ExpectedRecord};
use crate::cache::OpenFiles;
use crate::error::{Error, IoContext, Result};
use crate::format::blob::{self, BlobRef};
use crate::format::internal_key::{self, ValueKind};
use crate::io::{FsRef, RateLimitedFile, RateLimiter};
use crate::iter::{BoxedIter, InternalIterator, MergingIterator};
use crate::sst::{Table, TableBuilder, TableOptions};
use crate::version::{resolve, BlobMeta, FileMeta, Relocations};
use crate::wal::{blob_file_name, table_file_name};

/// Blob files a compaction keeps open, with their verified indexes, to look
/// up offsets of moved records.
const JOB_OPEN_BLOB_FILES: usize = 64;
/// Most memory those indexes hold (8 bytes per record).
const JOB_BLOB_INDEX_BYTES: u64 = 64 << 20;
/// Blob files a compaction keeps open to read the values it moves: a last
/// level's keys draw values from many flushes.
const MOVE_OPEN_BLOB_FILES: usize = 256;

/// Everything a compaction needs to know.
#[derive(Clone)]
pub struct CompactionJob {
    /// Directory holding the inputs; outputs are written there too.
    pub dir: PathBuf,
    /// Input files (from the source and the output level).
    pub inputs: Vec<FileMeta>,
    /// Level the outputs are installed in.
    pub output_level: usize,
    /// Which versions must survive.
    pub retention: Retention,
    /// User-key ranges `[lo, hi]` of files in levels below the output level,
    /// one sorted list per level; a tombstone may be dropped only for keys
    /// outside all of them.
    pub deeper_ranges: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
    /// Output files are cut near this size, bytes.
    pub target_file_size: u64,
    /// Format options for the outputs.
    pub table_options: TableOptions,
    /// Application filter applied to surviving inline values.
    pub filter: Option<Arc<dyn CompactionFilter>>,
    /// Live blob files when the job was planned.
    pub live_blobs: BTreeSet<u64>,
    /// Lineage of retired blob files, to rewrite refs to current locations.
    pub lineage: Relocations,
    /// Level the inputs come from (the rest are from `output_level`).
    pub source_level: usize,
    /// The picker's score for the source level when the job was planned
    /// (how far over its target; at least 1 for automatic compactions, 0
    /// for manual ones): schedulers run higher scores first.
    pub score: f64,
    /// The user keys this job writes: all of its inputs' (unbounded), or
    /// one key-range part of a split compaction ([`CompactionJob::split`]).
    pub range: KeyRange,
    /// Separated values this job moves into a new sorted run (new blob
    /// files written in key order); `None` leaves every value where it is.
    pub move_values: Option<ValueMoves>,
}

/// Which separated values a compaction into the last level moves into a
/// sorted run of its own (`Settings::sorted_value_runs`), so that a range
/// scan later finds neighbouring keys' values next to each other.
#[derive(Debug, Clone, Default)]
pub struct ValueMoves {
    /// Sorted runs whose values under the job's keys move too, into the
    /// new run with the values not yet in runs.
    pub merge: BTreeSet<u64>,
    /// The live blob files that are sorted runs; their values stay where
    /// they are unless in `merge`.
    pub runs: BTreeSet<u64>,
    /// Blob files of the new run are cut near this size, bytes.
    pub blob_file_size: u64,
    /// When the job stops moving values; `None`: never (a compaction a
    /// caller asked for, or a store without automatic compactions).
    pub pressure: Option<MovePressure>,
}

impl ValueMoves {
    /// Whether a value whose record lives in blob file `file` moves.
    fn moves(&self, file: u64) -> bool {
        !self.runs.contains(&file) || self.merge.contains(&file)
    }
}

/// When moving values gives way to writes. A job that moves values reads
/// and rewrites every one of them, several times the work of rewriting
/// keys and references, and while it runs no other compaction does: L0
/// fills behind it until writes slow down. Once L0 holds `stop_at` files
/// (the job's own L0 inputs count: a job planned with that many moves
/// nothing) the job moves nothing more and finishes at the speed of a
/// plain compaction; the values it left stay where they are, to move in a
/// later job over their keys.
#[derive(Debug, Clone)]
pub struct MovePressure {
    /// Files in L0 of the store's current version.
    pub l0_files: Arc<AtomicUsize>,
    /// The count at which the job stops moving.
    pub stop_at: usize,
}

impl MovePressure {
    /// Whether L0 has filled to the point of stopping.
    fn high(&self) -> bool {
        self.l0_files.load(Ordering::Relaxed) >= self.stop_at
    }
}

/// A half-open range of user keys, `[start, end)`; `None` is unbounded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// First key in the range.
    pub start: Option<Vec<u8>>,
    /// First key past the range.
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    /// Whether `user_key` is in the range.
    pub fn contains(&self, user_key: &[u8]) -> bool {
        self.start.as_deref().is_none_or(|s| s <= user_key)
            && self.end.as_deref().is_none_or(|e| user_key < e)
    }

    /// Whether some key of `[lo, hi]` is in the range.
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.start.as_deref().is_none_or(|s| s <= hi) && self.end.as_deref().is_none_or(|e| lo < e)
    }

    /// Whether the range is all keys.
    pub fn is_unbounded(&self) -> bool {
        self.start.is_none() && self.end.is_none()
    }
}

/// What the job needs from its environment.
#[derive(Clone)]
pub struct JobContext {
    /// File system holding `dir`.
    pub fs: FsRef,
    /// Source of fresh file numbers.
    pub next_file_number: Arc<AtomicU64>,
    /// Paces output writes, shared with GC.
    pub rate_limiter: Option<Arc<RateLimiter>>,
}

/// The result of a job.
#[derive(Debug, Clone, Default)]
pub struct CompactionOutput {
    /// Output tables, in key order.
    pub files: Vec<FileMeta>,
    /// Bytes of input tables read.
    pub bytes_read: u64,
    /// Bytes of output tables written.
    pub bytes_written: u64,
    /// Entries read from the inputs.
    pub entries_read: u64,
    /// Entries dropped as shadowed or as obsolete tombstones.
    pub entries_dropped: u64,
    /// Blob refs of dropped entries, as stored: (file, ordinal, record bytes).
    /// The installer resolves them through current lineage and marks them dead.
    pub dead_refs: Vec<(u64, u32, u64)>,
    /// Refs rewritten to the file GC moved their record to.
    pub refs_rewritten: u64,
    /// Blob files of the sorted run the job wrote ([`ValueMoves`]), in key
    /// order; their bytes count in `bytes_written`.
    pub blobs: Vec<BlobMeta>,
    /// Values moved into those files.
    pub values_moved: u64,
    /// Bytes of the records moved (also in `dead_refs`: the old copies).
    pub value_bytes_moved: u64,
    /// Whether the job stopped moving values part-way because L0 filled
    /// ([`MovePressure`]).
    pub moves_stopped: bool,
    /// Set by an executor whose output another process made (an offload
    /// worker), for the store's counters.
    pub ran_elsewhere: bool,
}

impl std::fmt::Debug for CompactionJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactionJob")
            .field(
                "inputs",
                &self.inputs.iter().map(|f| f.number).collect::<Vec<_>>(),
            )
            .field("output_level", &self.output_level)
            .field("retention", &self.retention)
            .field("range", &self.range)
            .field(
                "filter",
                &self.filter.as_ref().map(|f| f.name().to_string()),
            )
            .finish_non_exhaustive()
    }
}

impl CompactionOutput {
    /// Removes the output tables from `dir` (a result that will not be
    /// installed), ignoring tables already gone.
    pub fn remove_files(&self, dir: &Path, fs: &FsRef) {
        for f in &self.files {
            let _ = fs.remove_file(&dir.join(table_file_name(f.number)));
        }
        for b in &self.blobs {
            let _ = fs.remove_file(&dir.join(blob_file_name(b.number)));
        }
    }
}

impl CompactionJob {
    /// Runs the job. On error, partial outputs are removed.
    pub fn run(&self, ctx: &JobContext) -> Result<CompactionOutput> {
        let mut out = CompactionOutput::default();
        let res = self.run_inner(ctx, &mut out);
        if res.is_err() {
            out.remove_files(&self.dir, &ctx.fs);
        }
        res.map(|()| out)
    }

    fn run_inner(&self, ctx: &JobContext, out: &mut CompactionOutput) -> Result<()> {
        let mut children: Vec<BoxedIter> = Vec::with_capacity(self.inputs.len());
        for f in &self.inputs {
            let path = self.dir.join(table_file_name(f.number));
            let t = Table::open(&ctx.fs, &path, f.number, None)?;
            out.bytes_read += f.file_size;
            children.push(Box::new(t.iter()));
        }
        let mut iter = MergingIterator::new(children);
        match &self.range.start {
            Some(start) => iter.seek(&internal_key::seek_key(start, internal_key::MAX_SEQ)),
            None => iter.seek_to_first(),
        }
        // Only for refs to rewrite: readers of its own, with verified
        // indexes, since looked-up offsets go into new tables unread.
        let blobs = BlobCache::with_verified_index(
            self.dir.clone(),
            ctx.fs.clone(),
            Arc::new(OpenFiles::new(JOB_OPEN_BLOB_FILES, JOB_BLOB_INDEX_BYTES)),
        );

        let mut output: Option<Output> = None;
        // The sorted run being written and the windows its values are read
        // through.
        let mut run: Option<RunWriter> = None;
        let mut sources = MoveSources::default();
        // Moved values are checked record by record, so their readers load
        // index entries on demand.
        let move_blobs = BlobCache::new(
            self.dir.clone(),
            ctx.fs.clone(),
            Arc::new(OpenFiles::new(MOVE_OPEN_BLOB_FILES, JOB_BLOB_INDEX_BYTES)),
        );
        let mut walk = VersionWalk::new(&self.retention);
        let mut scratch = Vec::new();
        while iter.valid() {
            let key = iter.key();
            let parsed = internal_key::parse(key).map_err(|e| {
                Error::corruption(
                    &self.dir,
                    0,
                    format!("bad internal key in compaction input: {e}"),
                )
            })?;
            if self
                .range
                .end
                .as_deref()
                .is_some_and(|end| parsed.user_key >= end)
            {
                break;
            }
            out.entries_read += 1;
            let Placed {
                new_key,
                stripe,
                shadowed,
            } = walk.place(parsed.user_key, parsed.seq);
            if new_key {
                // Cut outputs only between user keys, so levels never split a key.
                if output
                    .as_ref()
                    .is_some_and(|o| o.builder.estimated_size() >= self.target_file_size)
                {
                    if let Some(o) = output.take() {
                        out.files.push(o.finish()?);
                    }
                }
            }
            let obsolete_tombstone = parsed.kind == ValueKind::Delete
                && stripe == 0
                && !self.in_deeper_levels(parsed.user_key);
            let blob_ref = match parsed.kind {
                ValueKind::BlobRef => Some(self.decode_ref(iter.value())?),
                _ => None,
            };
            if shadowed || obsolete_tombstone {
                out.entries_dropped += 1;
                if let Some((r, _)) = &blob_ref {
                    out.dead_refs.push(dead_ref(parsed.user_key, r));
                }
                iter.next();
                continue;
            }
            if output.is_none() {
                let number = ctx.next_file_number.fetch_add(1, Ordering::SeqCst);
                let path = self.dir.join(table_file_name(number));
                let file = ctx.fs.create(&path).ctx(&path)?;
                let file = RateLimitedFile::wrap(file, ctx.rate_limiter.as_ref());
                let builder = TableBuilder::new(file, path, self.table_options.clone());
                output = Some(Output {
                    number,
                    builder,
                    blob_files: BTreeSet::new(),
                });
            }
            let Some(o) = output.as_mut() else { break };
            let decision = match (&self.filter, &blob_ref, parsed.kind) {
                (Some(f), Some((r, head)), _) => f.filter(
                    self.output_level,
                    parsed.user_key,
                    FilterValue::Separated { head, size: r.size },
                ),
                (Some(f), None, ValueKind::Value) => f.filter(
                    self.output_level,
                    parsed.user_key,
                    FilterValue::Inline(iter.value()),
                ),
                _ => FilterDecision::Keep,
            };
            if decision != FilterDecision::Keep {
                if let Some((r, _)) = &blob_ref {
                    // The blob record loses its last reference here.
                    out.dead_refs.push(dead_ref(parsed.user_key, r));
                }
                let (kind, value) = match &decision {
                    FilterDecision::Replace(v) => (ValueKind::Value, v.as_slice()),
                    _ => (ValueKind::Delete, &[][..]),
                };
                scratch.clear();
                internal_key::append_internal_key(
                    &mut scratch,
                    parsed.user_key,
                    parsed.seq,
                    kind as u8,
                );
                o.builder.add(&scratch, value)?;
                iter.next();
                continue;
            }
            match blob_ref {
                Some((r, head)) => {
                    let (file, ordinal, moved) =
                        resolve(&self.live_blobs, &self.lineage, r.file, r.ordinal).map_err(
                            |why| match iter.source() {
                                Some((table, block)) => Error::corruption(table, block, why),
                                None => Error::Internal(format!("{why} (in a memtable)")),
                            },
                        )?;
                    let mut moving = self
                        .move_values
                        .as_ref()
                        .filter(|m| !out.moves_stopped && m.moves(file));
                    // Stopped only between user keys, as run files are
                    // cut: a key's moved versions share one file.
                    if moving
                        .and_then(|m| m.pressure.as_ref())
                        .is_some_and(MovePressure::high)
                        && run.as_ref().is_none_or(|w| w.last != parsed.user_key)
                    {
                        out.moves_stopped = true;
                        moving = None;
                    }
                    if let Some(moves) = moving {
                        let want = ExpectedRecord {
                            key: parsed.user_key,
                            seq: parsed.seq,
                            size: r.size,
                        };
                        let at = if moved { None } else { Some(r.offset) };
                        match sources.value(&move_blobs, file, ordinal, at, want) {
                            Ok(value) => {
                                // Files are cut between user keys, so the
                                // versions of a key share one file.
                                let cut = run.as_ref().is_some_and(|w| {
                                    w.len() >= moves.blob_file_size && w.last != parsed.user_key
                                });
                                if cut {
                                    if let Some(w) = run.take() {
                                        out.blobs.push(w.finish()?);
                                    }
                                }
                                if run.is_none() {
                                    run = Some(RunWriter::create(&self.dir, ctx)?);
                                }
                                let w = run.as_mut().ok_or_else(|| {
                                    Error::Internal("no sorted run to write".into())
                                })?;
                                let nr = w.add(parsed.user_key, parsed.seq, &value)?;
                                o.builder.add(key, &nr.encode_with_head(head))?;
                                if o.blob_files.insert(nr.file) {
                                    o.builder.add_blob_file(nr.file);
                                }
                                // The old copy loses its reference here.
                                let dead = dead_ref(parsed.user_key, &r);
                                out.values_moved += 1;
                                out.value_bytes_moved += dead.2;
                                out.dead_refs.push(dead);
                                iter.next();
                                continue;
                            }
                            // A damaged record stays where it is: reads of
                            // its key report it, as they did, and one bad
                            // value does not stop every compaction over it.
                            Err(e @ Error::Corruption { .. }) => {
                                tracing::warn!("tern: a separated value stays unmoved: {e}");
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    if moved {
                        // Point the ref at the record's current home so
                        // lineage chains stay short.
                        let offset = blobs.get(file)?.offset_of(ordinal)?;
                        let nr = BlobRef {
                            file,
                            ordinal,
                            offset,
                            size: r.size,
                        };
                        o.builder.add(key, &nr.encode_with_head(head))?;
                        out.refs_rewritten += 1;
                    } else {
                        o.builder.add(key, iter.value())?;
                    }
                    if o.blob_files.insert(file) {
                        o.builder.add_blob_file(file);
                    }
                }
                None => o.builder.add(key, iter.value())?,
            }
            iter.next();
        }
        iter.status()?;
        if let Some(o) = output.take() {
            out.files.push(o.finish()?);
        }
        if let Some(w) = run.take() {
            out.blobs.push(w.finish()?);
        }
        out.bytes_written = out.files.iter().map(|f| f.file_size).sum::<u64>()
            + out.blobs.iter().map(|b| b.file_size).sum::<u64>();
        Ok(())
    }

    /// Where blob record `file`/`ordinal` lives now, following the lineage
    /// of files GC retired (a ref in a table may still name the old home);
    /// the address itself if the lineage does not know it.
    pub fn current_home(&self, file: u64, ordinal: u32) -> (u64, u32) {
        resolve(&self.live_blobs, &self.lineage, file, ordinal)
            .map_or((file, ordinal), |(f, o, _)| (f, o))
    }

    /// Decodes a ref and the head kept beside it.
    fn decode_ref<'v>(&self, v: &'v [u8]) -> Result<(BlobRef, &'v [u8])> {
        BlobRef::decode_with_head(v).map_err(|e| {
            Error::corruption(
                &self.dir,
                0,
                format!("bad blob reference in compaction input: {e}"),
            )
        })
    }

    fn in_deeper_levels(&self, ukey: &[u8]) -> bool {
        self.deeper_ranges.iter().any(|ranges| {
            let i = ranges.partition_point(|(_, hi)| hi.as_slice() < ukey);
            ranges.get(i).is_some_and(|(lo, _)| lo.as_slice() <= ukey)
        })
    }
}

/// One output table being written.
struct Output {
    number: u64,
    builder: TableBuilder,
    blob_files: BTreeSet<u64>,
}

impl Output {
    fn finish(self) -> Result<FileMeta> {
        let s = self.builder.finish()?;
        Ok(s.into_file_meta(self.number, self.blob_files.into_iter().collect()))
    }
}

/// The dead-record entry for a ref whose last reference compaction drops:
/// file, ordinal and the record's bytes.
fn dead_ref(user_key: &[u8], r: &BlobRef) -> (u64, u32, u64) {
    let bytes = blob::record_len(user_key.len(), r.size as usize);
    (r.file, r.ordinal, bytes)
}

/// Reads of a moved value's record go through one window per source
/// file: a compaction walks keys in order, and a flush or a sorted run
/// holds its records in key order, so the records a job moves out of one
/// file mostly come at rising offsets and one read serves many. The least
/// recently used window goes when a job reads from more files than it
/// keeps windows for.
#[derive(Default)]
struct MoveSources {
    windows: std::collections::HashMap<u64, Window>,
    tick: u64,
}

/// Bytes of one source file, read at once.
#[derive(Default)]
struct Window {
    start: u64,
    buf: Vec<u8>,
    used: u64,
}

/// Bytes read at once from a source file of moved values.
const MOVE_WINDOW: u64 = 256 << 10;
/// Source files whose windows a job keeps (32 MiB).
const MOVE_WINDOWS_KEPT: usize = 128;

impl MoveSources {
    /// The value of record `ordinal` of blob file `file` (at `offset` when
    /// the ref's own offset holds, else looked up in the file's index),
    /// checked against `want` as every read of a separated value is.
    fn value(
        &mut self,
        blobs: &BlobCache,
        file: u64,
        ordinal: u32,
        offset: Option<u64>,
        want: ExpectedRecord<'_>,
    ) -> Result<Vec<u8>> {
        let reader = blobs.get(file)?;
        let offset = match offset {
            Some(o) => o,
            None => reader.offset_of(ordinal)?,
        };
        self.tick += 1;
        if let Some(w) = self.windows.get_mut(&file) {
            w.used = self.tick;
            if let Some(v) = reader.value_from_buffer(&w.buf, w.start, offset, want) {
                return v;
            }
        } else if self.windows.len() >= MOVE_WINDOWS_KEPT {
            let oldest = self
                .windows
                .iter()
                .min_by_key(|(_, w)| w.used)
                .map(|(&f, _)| f);
            if let Some(f) = oldest {
                self.windows.remove(&f);
            }
        }
        let records_end = blob::BLOB_HEADER_LEN as u64 + reader.data_bytes();
        let len = MOVE_WINDOW
            .max(want.record_len())
            .min(records_end.saturating_sub(offset));
        let w = self.windows.entry(file).or_default();
        w.used = self.tick;
        reader.read_span(offset, len, &mut w.buf)?;
        w.start = offset;
        reader
            .value_from_buffer(&w.buf, offset, offset, want)
            .unwrap_or_else(|| {
                Err(Error::corruption(
                    reader.path(),
                    offset,
                    "blob record runs past the file's records",
                ))
            })
    }
}

/// One blob file of a sorted run being written; removed again if the job
/// fails before it is finished.
struct RunWriter {
    writer: Option<BlobWriter>,
    path: PathBuf,
    fs: FsRef,
    first: Vec<u8>,
    last: Vec<u8>,
}

impl RunWriter {
    fn create(dir: &Path, ctx: &JobContext) -> Result<RunWriter> {
        let number = ctx.next_file_number.fetch_add(1, Ordering::SeqCst);
        let path = dir.join(blob_file_name(number));
        let file = ctx.fs.create(&path).ctx(&path)?;
        let file = RateLimitedFile::wrap(file, ctx.rate_limiter.as_ref());
        let writer = match BlobWriter::new(file, path.clone(), number) {
            Ok(w) => w,
            Err(e) => {
                let _ = ctx.fs.remove_file(&path);
                return Err(e);
            }
        };
        Ok(RunWriter {
            writer: Some(writer),
            path,
            fs: ctx.fs.clone(),
            first: Vec::new(),
            last: Vec::new(),
        })
    }

    fn add(&mut self, user_key: &[u8], seq: u64, value: &[u8]) -> Result<BlobRef> {
        let w = self
            .writer
            .as_mut()
            .ok_or_else(|| Error::Internal("a finished sorted run written to".into()))?;
        if w.is_empty() {
            self.first = user_key.to_vec();
        }
        self.last.clear();
        self.last.extend_from_slice(user_key);
        w.add(user_key, seq, value)
    }

    fn len(&self) -> u64 {
        self.writer.as_ref().map_or(0, BlobWriter::len)
    }

    fn finish(mut self) -> Result<BlobMeta> {
        let w = self
            .writer
            .take()
            .ok_or_else(|| Error::Internal("a sorted run finished twice".into()))?;
        let mut meta = match w.finish(&[]) {
            Ok(f) => f.meta,
            Err(e) => {
                let _ = self.fs.remove_file(&self.path);
                return Err(e);
            }
        };
        meta.run_keys = Some((
            std::mem::take(&mut self.first),
            std::mem::take(&mut self.last),
        ));
        Ok(meta)
    }
}

impl Drop for RunWriter {
    fn drop(&mut self) {
        // Unfinished: the job failed; nothing will name the file.
        if self.writer.take().is_some() {
            let _ = self.fs.remove_file(&self.path);
        }
    }
}
