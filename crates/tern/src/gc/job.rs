//! The GC job: input blob files + dead sets → one output blob file + lineage.

use std::path::PathBuf;
use std::sync::Arc;

use roaring::RoaringBitmap;

use crate::blob::{BlobReader, BlobWriter};
use crate::error::{Error, IoContext, Result};
use crate::format::blob::LineageEntry;
use crate::io::{FsRef, RateLimitedFile, RateLimiter};
use crate::version::BlobMeta;
use crate::wal::blob_file_name;

/// One input blob file, with the ordinals known dead when the job started.
#[derive(Debug, Clone)]
pub struct GcInput {
    /// Blob file number.
    pub number: u64,
    /// Records in the file.
    pub record_count: u64,
    /// Dead ordinals; their records are not copied.
    pub dead: RoaringBitmap,
}

/// Everything a GC job needs: files and bitmaps, nothing of the LSM.
#[derive(Debug, Clone)]
pub struct GcJob {
    /// Directory holding the blob files.
    pub dir: PathBuf,
    /// Inputs, in the order their records are copied.
    pub inputs: Vec<GcInput>,
    /// Number of the output blob file.
    pub output_number: u64,
}

/// What a GC job needs from its environment.
#[derive(Clone)]
pub struct GcContext {
    /// File system holding `dir`.
    pub fs: FsRef,
    /// Paces the output writes, shared with compaction.
    pub rate_limiter: Option<Arc<RateLimiter>>,
}

/// The result of a GC job.
#[derive(Debug, Clone)]
pub struct GcOutput {
    /// The new blob file.
    pub meta: BlobMeta,
    /// Where each input's live records went.
    pub lineage: Vec<LineageEntry>,
    /// Bytes of input files read (records, and dead ones read through
    /// between live ones).
    pub bytes_read: u64,
    /// Bytes of the output file.
    pub bytes_written: u64,
    /// Live records copied.
    pub records_relocated: u64,
    /// Dead records left behind.
    pub records_dropped: u64,
}

impl GcJob {
    /// Runs the job. On error the partial output is removed.
    pub fn run(&self, ctx: &GcContext) -> Result<GcOutput> {
        let path = self.dir.join(blob_file_name(self.output_number));
        let res = self.run_inner(ctx, &path);
        if res.is_err() {
            let _ = ctx.fs.remove_file(&path);
        }
        res
    }

    fn run_inner(&self, ctx: &GcContext, path: &std::path::Path) -> Result<GcOutput> {
        let file = ctx.fs.create(path).ctx(path)?;
        let file = RateLimitedFile::wrap(file, ctx.rate_limiter.as_ref());
        let mut writer = BlobWriter::new(file, path.to_path_buf(), self.output_number)?;
        let mut lineage = Vec::with_capacity(self.inputs.len());
        let (mut bytes_read, mut relocated, mut dropped) = (0u64, 0u64, 0u64);
        let mut copied: u64 = 0;
        for input in &self.inputs {
            let in_path = self.dir.join(blob_file_name(input.number));
            let reader = BlobReader::open(&ctx.fs, &in_path, input.number)?;
            if reader.record_count() != input.record_count {
                return Err(Error::corruption(
                    &in_path,
                    0,
                    format!(
                        "blob file holds {} records, the manifest says {}",
                        reader.record_count(),
                        input.record_count
                    ),
                ));
            }
            let base = u32::try_from(copied).map_err(|_| {
                Error::InvalidArgument("GC output would hold too many records".into())
            })?;
            bytes_read += reader.walk_records(
                |o| input.dead.contains(o),
                |_, rec| {
                    writer.add(rec.key, rec.seq, rec.value)?;
                    copied += 1;
                    relocated += 1;
                    Ok(())
                },
            )?;
            // Only dead ordinals inside the file count (the walk checked the
            // count fits an ordinal).
            let last = u32::try_from(input.record_count)
                .ok()
                .and_then(|n| n.checked_sub(1));
            dropped += last.map_or(0, |l| input.dead.rank(l));
            lineage.push(LineageEntry {
                old_file: input.number,
                base,
                dead: input.dead.clone(),
            });
        }
        let finished = writer.finish(&lineage)?;
        Ok(GcOutput {
            bytes_written: finished.meta.file_size,
            meta: finished.meta,
            lineage,
            bytes_read,
            records_relocated: relocated,
            records_dropped: dropped,
        })
    }
}
