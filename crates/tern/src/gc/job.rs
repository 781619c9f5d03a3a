//! The GC job: input blob files + dead sets → output blob files + lineage.

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
    /// Numbers reserved for the output files, used in order (at least
    /// one). Numbers a job does not need stay unused.
    pub output_numbers: Vec<u64>,
    /// Once an output holds this many bytes, the next input starts a new
    /// one while reserved numbers are left. Each input's records go to one
    /// output whole (its lineage entry maps it there), so an output ends up
    /// to one input's live bytes larger.
    pub output_file_size: u64,
}

/// What a GC job needs from its environment.
#[derive(Clone)]
pub struct GcContext {
    /// File system holding `dir`.
    pub fs: FsRef,
    /// Paces the output writes, shared with compaction.
    pub rate_limiter: Option<Arc<RateLimiter>>,
}

/// One blob file a GC job wrote.
#[derive(Debug, Clone)]
pub struct GcOutputFile {
    /// The new blob file.
    pub meta: BlobMeta,
    /// Where each input copied into this file put its live records.
    pub lineage: Vec<LineageEntry>,
}

/// The result of a GC job.
#[derive(Debug, Clone)]
pub struct GcOutput {
    /// The new blob files, in the order they were written; together their
    /// lineage covers every input once.
    pub files: Vec<GcOutputFile>,
    /// Bytes of input files read (records, and dead ones read through
    /// between live ones).
    pub bytes_read: u64,
    /// Bytes of the output files.
    pub bytes_written: u64,
    /// Live records copied.
    pub records_relocated: u64,
    /// Dead records left behind.
    pub records_dropped: u64,
    /// Set by an executor whose output another process made (an offload
    /// worker), for the store's counters.
    pub ran_elsewhere: bool,
}

/// The output file being written.
struct OpenOutput {
    writer: BlobWriter,
    lineage: Vec<LineageEntry>,
    copied: u64,
}

impl GcJob {
    /// Path of output number `n`.
    pub fn output_path(&self, n: u64) -> PathBuf {
        self.dir.join(blob_file_name(n))
    }

    /// Removes whatever exists under the numbers the job reserved (and only
    /// those: a number an executor reports may name a live file).
    pub fn remove_outputs(&self, fs: &FsRef) {
        for &n in &self.output_numbers {
            let _ = fs.remove_file(&self.output_path(n));
        }
    }

    /// Runs the job. On error every partial output is removed.
    pub fn run(&self, ctx: &GcContext) -> Result<GcOutput> {
        let res = self.run_inner(ctx);
        if res.is_err() {
            self.remove_outputs(&ctx.fs);
        }
        res
    }

    fn open_output(&self, ctx: &GcContext, index: usize) -> Result<OpenOutput> {
        let number = *self
            .output_numbers
            .get(index)
            .ok_or_else(|| Error::InvalidArgument("GC job has no output file number".into()))?;
        let path = self.output_path(number);
        let file = ctx.fs.create(&path).ctx(&path)?;
        let file = RateLimitedFile::wrap(file, ctx.rate_limiter.as_ref());
        Ok(OpenOutput {
            writer: BlobWriter::new(file, path, number)?,
            lineage: Vec::new(),
            copied: 0,
        })
    }

    fn run_inner(&self, ctx: &GcContext) -> Result<GcOutput> {
        let mut out = GcOutput {
            files: Vec::new(),
            bytes_read: 0,
            bytes_written: 0,
            records_relocated: 0,
            records_dropped: 0,
            ran_elsewhere: false,
        };
        let mut current = self.open_output(ctx, 0)?;
        for input in &self.inputs {
            let next = out.files.len() + 1;
            if current.writer.len() >= self.output_file_size && next < self.output_numbers.len() {
                let full = std::mem::replace(&mut current, self.open_output(ctx, next)?);
                out.files.push(finish(full)?);
            }
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
            let base = u32::try_from(current.copied).map_err(|_| {
                Error::InvalidArgument("GC output would hold too many records".into())
            })?;
            let writer = &mut current.writer;
            let mut copied = 0u64;
            out.bytes_read += reader.walk_records(
                |o| input.dead.contains(o),
                |_, rec| {
                    writer.add(rec.key, rec.seq, rec.value)?;
                    copied += 1;
                    Ok(())
                },
            )?;
            current.copied += copied;
            out.records_relocated += copied;
            // Only dead ordinals inside the file count (the walk checked the
            // count fits an ordinal).
            let last = u32::try_from(input.record_count)
                .ok()
                .and_then(|n| n.checked_sub(1));
            out.records_dropped += last.map_or(0, |l| input.dead.rank(l));
            current.lineage.push(LineageEntry {
                old_file: input.number,
                base,
                dead: input.dead.clone(),
            });
        }
        out.files.push(finish(current)?);
        out.bytes_written = out.files.iter().map(|f| f.meta.file_size).sum();
        Ok(out)
    }
}

/// Writes an output's index, lineage and footer.
fn finish(o: OpenOutput) -> Result<GcOutputFile> {
    let finished = o.writer.finish(&o.lineage)?;
    Ok(GcOutputFile {
        meta: finished.meta,
        lineage: o.lineage,
    })
}

impl GcJob {
    /// Checks that `output` is what this job may produce, reading each
    /// output file's index from `self.dir` through `ctx.fs`: outputs only
    /// under numbers the job reserved, each once; their lineage covering
    /// the inputs, each once, in order, with the job's dead sets and bases
    /// that follow the live records; and each file holding the record count
    /// and lineage reported, every record passing its checksum. Executors that
    /// run GC elsewhere call it before returning; the store checks again.
    pub fn check_output(&self, ctx: &GcContext, output: &GcOutput) -> Result<()> {
        // Every record's checksum too: the outputs were made elsewhere.
        for r in self.open_outputs(&ctx.fs, output)? {
            r.verify()?;
        }
        Ok(())
    }

    /// [`GcJob::check_output`], keeping the outputs' readers.
    pub(crate) fn open_outputs(&self, fs: &FsRef, output: &GcOutput) -> Result<Vec<BlobReader>> {
        if let Err(why) = check_output_matches_job(self, output) {
            return Err(Error::Internal(format!("GC output refused: {why}")));
        }
        let mut readers = Vec::with_capacity(output.files.len());
        for f in &output.files {
            let path = self.output_path(f.meta.number);
            let r = BlobReader::open(fs, &path, f.meta.number)?;
            // The file must say what the executor reported of it.
            if r.record_count() != f.meta.record_count || r.lineage()? != f.lineage {
                return Err(Error::corruption(
                    &path,
                    0,
                    "GC output disagrees with what its job reported (record count or lineage)",
                ));
            }
            readers.push(r);
        }
        Ok(readers)
    }
}

/// Checks an executor's result against its job before anything of it is
/// trusted: every output under a number the job reserved, each once, and
/// the outputs' lineage naming the job's inputs, each once, in order.
fn check_output_matches_job(job: &GcJob, output: &GcOutput) -> std::result::Result<(), String> {
    let mut numbers = std::collections::BTreeSet::new();
    for f in &output.files {
        if !job.output_numbers.contains(&f.meta.number) {
            return Err(format!(
                "output {} is a file number the job did not reserve ({:?})",
                f.meta.number, job.output_numbers
            ));
        }
        if !numbers.insert(f.meta.number) {
            return Err(format!("output {} is reported twice", f.meta.number));
        }
    }
    let covered: Vec<u64> = output
        .files
        .iter()
        .flat_map(|f| f.lineage.iter().map(|e| e.old_file))
        .collect();
    let inputs: Vec<u64> = job.inputs.iter().map(|i| i.number).collect();
    if covered != inputs {
        return Err(format!(
            "the outputs' lineage covers files {covered:?}, the job's inputs are {inputs:?}"
        ));
    }
    // Lineage translates ordinals by the dead set the copy skipped: any
    // other set would send refs to the wrong records.
    let entries = output.files.iter().flat_map(|f| f.lineage.iter());
    if let Some((e, _)) = entries
        .zip(&job.inputs)
        .find(|(e, input)| e.dead != input.dead)
    {
        return Err(format!(
            "the lineage of file {} skips other records than the job's dead set",
            e.old_file
        ));
    }
    // Each output holds its inputs' live records in order: an input's base
    // is the live records before it in that output, and the output holds
    // all of them. Any other numbers translate refs to the wrong records.
    let mut inputs = job.inputs.iter();
    for f in &output.files {
        let mut next: u64 = 0;
        for e in &f.lineage {
            let Some(input) = inputs.next() else {
                return Err("the outputs' lineage names more inputs than the job has".into());
            };
            if u64::from(e.base) != next {
                return Err(format!(
                    "the lineage of file {} puts its records at {} in output {}, after {next} live records",
                    e.old_file, e.base, f.meta.number
                ));
            }
            let dead_in_file = match input.record_count {
                0 => 0,
                n => input.dead.rank(u32::try_from(n - 1).unwrap_or(u32::MAX)),
            };
            next += input.record_count.saturating_sub(dead_in_file);
        }
        if f.meta.record_count != next {
            return Err(format!(
                "output {} reports {} records, its inputs have {next} live ones",
                f.meta.number, f.meta.record_count
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod check_tests {
    use super::*;

    fn input(number: u64, record_count: u64, dead: &[u32]) -> GcInput {
        GcInput {
            number,
            record_count,
            dead: dead.iter().copied().collect(),
        }
    }

    fn entry(old_file: u64, base: u32, dead: &[u32]) -> LineageEntry {
        LineageEntry {
            old_file,
            base,
            dead: dead.iter().copied().collect(),
        }
    }

    fn output(number: u64, record_count: u64, lineage: Vec<LineageEntry>) -> GcOutputFile {
        GcOutputFile {
            meta: BlobMeta {
                number,
                file_size: 0,
                record_count,
                data_bytes: 0,
                run_keys: None,
            },
            lineage,
        }
    }

    /// Two inputs of 4 and 3 records, one dead record each, copied into
    /// output 10: 3 + 2 live records, the second input based at 3.
    fn job_and_true_output() -> (GcJob, GcOutput) {
        let job = GcJob {
            dir: PathBuf::from("/db"),
            inputs: vec![input(1, 4, &[0]), input(2, 3, &[2])],
            output_numbers: vec![10, 11],
            output_file_size: 1 << 20,
        };
        let out = GcOutput {
            files: vec![output(10, 5, vec![entry(1, 0, &[0]), entry(2, 3, &[2])])],
            bytes_read: 0,
            bytes_written: 0,
            records_relocated: 5,
            records_dropped: 2,
            ran_elsewhere: false,
        };
        (job, out)
    }

    #[test]
    fn a_true_result_passes() {
        let (job, out) = job_and_true_output();
        check_output_matches_job(&job, &out).unwrap();
    }

    #[test]
    fn lineage_whose_bases_do_not_follow_the_live_records_is_refused() {
        let (job, mut out) = job_and_true_output();
        out.files[0].lineage[1].base = 0;
        assert!(check_output_matches_job(&job, &out).is_err());
        let (job, mut out) = job_and_true_output();
        out.files[0].lineage[1].base = u32::MAX - 1;
        assert!(check_output_matches_job(&job, &out).is_err());
    }

    #[test]
    fn an_output_whose_record_count_is_not_its_inputs_live_records_is_refused() {
        let (job, mut out) = job_and_true_output();
        out.files[0].meta.record_count = 6;
        assert!(check_output_matches_job(&job, &out).is_err());
    }

    #[test]
    fn a_second_output_starts_its_bases_at_zero() {
        let (job, mut out) = job_and_true_output();
        out.files = vec![
            output(10, 3, vec![entry(1, 0, &[0])]),
            output(11, 2, vec![entry(2, 0, &[2])]),
        ];
        check_output_matches_job(&job, &out).unwrap();
        out.files[1].lineage[0].base = 3;
        assert!(check_output_matches_job(&job, &out).is_err());
    }
}
