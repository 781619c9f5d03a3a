//! A compaction job: input tables + retention rules → output tables.
//!
//! The job holds no handle to the store: only file metadata, snapshot
//! sequence numbers and options, so it can run on any thread or, later, in
//! another process over shared storage.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{CompactionFilter, FilterDecision, FilterValue, Placed, Retention, VersionWalk};
use crate::blob::BlobCache;
use crate::cache::OpenFiles;
use crate::error::{Error, IoContext, Result};
use crate::format::blob::{self, BlobRef};
use crate::format::internal_key::{self, ValueKind};
use crate::io::{FsRef, RateLimitedFile, RateLimiter};
use crate::iter::{BoxedIter, InternalIterator, MergingIterator};
use crate::sst::{Table, TableBuilder, TableOptions};
use crate::version::{resolve, FileMeta, Relocations};
use crate::wal::table_file_name;

/// Blob files a compaction keeps open, with their verified indexes, to look
/// up offsets of moved records.
const JOB_OPEN_BLOB_FILES: usize = 64;
/// Most memory those indexes hold (8 bytes per record).
const JOB_BLOB_INDEX_BYTES: u64 = 64 << 20;

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
        out.bytes_written = out.files.iter().map(|f| f.file_size).sum();
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
