//! Engine jobs and results to and from the protocol's messages.
//!
//! A compaction spec carries no lineage: the worker copies blob refs as
//! they are (treating every blob file the inputs name as live), so it
//! never reads a blob file. Refs to records GC has moved stay valid
//! through the store's lineage and are rewritten by a later local
//! compaction.

use std::collections::BTreeSet;
use std::path::PathBuf;

use roaring::RoaringBitmap;
use tern::compaction::{CompactionJob, CompactionOutput, KeyRange, RemoteFilter, Retention};
use tern::gc::{GcInput, GcJob, GcOutput, GcOutputFile};
use tern::{BlobMeta, Compression, FileMeta, LineageEntry, Relocations, TableOptions};

use crate::error::{OffloadError, Result};
use crate::filters::FilterRegistry;
use crate::proto;

fn invalid(why: impl Into<String>) -> OffloadError {
    OffloadError::Invalid(why.into())
}

/// A Roaring bitmap as bytes (its portable serialization).
pub fn bitmap_bytes(b: &RoaringBitmap) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.serialized_size());
    // Writing to a Vec cannot fail.
    let _ = b.serialize_into(&mut out);
    out
}

/// A Roaring bitmap from bytes.
pub fn bitmap_from(bytes: &[u8]) -> Result<RoaringBitmap> {
    RoaringBitmap::deserialize_from(bytes)
        .map_err(|e| invalid(format!("bad dead-ordinal set: {e}")))
}

/// A table's manifest record, less its number.
pub fn table_meta(f: &FileMeta) -> proto::TableMeta {
    proto::TableMeta {
        smallest: f.smallest.clone(),
        largest: f.largest.clone(),
        smallest_seq: f.smallest_seq,
        largest_seq: f.largest_seq,
        num_entries: f.num_entries,
        num_deletions: f.num_deletions,
        blob_files: f.blob_files.clone(),
    }
}

/// The manifest record of table `number` of `size` bytes described by `m`.
pub fn file_meta(number: u64, size: u64, m: &proto::TableMeta) -> FileMeta {
    FileMeta {
        number,
        file_size: size,
        smallest: m.smallest.clone(),
        largest: m.largest.clone(),
        smallest_seq: m.smallest_seq,
        largest_seq: m.largest_seq,
        num_entries: m.num_entries,
        num_deletions: m.num_deletions,
        blob_files: m.blob_files.clone(),
    }
}

fn compression(name: &str) -> Result<Compression> {
    [Compression::None, Compression::Lz4, Compression::Zstd]
        .into_iter()
        .find(|c| c.name() == name)
        .ok_or_else(|| invalid(format!("unknown compression {name:?}")))
}

/// The spec of compaction `job`, whose inputs (in `job.inputs` order) are
/// in the shared tier as `files` and whose filter's remote form is
/// `filter`.
pub fn compaction_spec(
    job: &CompactionJob,
    files: Vec<proto::FileRef>,
    filter: Option<RemoteFilter>,
) -> proto::CompactionSpec {
    let filter = filter.map(|RemoteFilter { name, params }| proto::FilterSpec { name, params });
    let blob_files: BTreeSet<u64> = job
        .inputs
        .iter()
        .flat_map(|f| f.blob_files.iter().copied())
        .collect();
    proto::CompactionSpec {
        inputs: job
            .inputs
            .iter()
            .zip(files)
            .map(|(f, file)| proto::TableInput {
                file: Some(file),
                number: f.number,
                meta: Some(table_meta(f)),
            })
            .collect(),
        output_level: job.output_level as u32,
        snapshots: job.retention.snapshots().to_vec(),
        deeper_ranges: job
            .deeper_ranges
            .iter()
            .map(|level| proto::LevelRanges {
                ranges: level
                    .iter()
                    .map(|(lo, hi)| proto::KeyRange {
                        lo: lo.clone(),
                        hi: hi.clone(),
                    })
                    .collect(),
            })
            .collect(),
        target_file_size: job.target_file_size,
        table_options: Some(proto::TableOptions {
            block_size: job.table_options.block_size as u64,
            restart_interval: job.table_options.restart_interval as u64,
            bloom_bits_per_key: job.table_options.bloom_bits_per_key,
            compression: job.table_options.compression.name().to_string(),
        }),
        filter,
        blob_files: blob_files.into_iter().collect(),
        range_start: job.range.start.clone(),
        range_end: job.range.end.clone(),
    }
}

/// The job `spec` describes, reading its inputs from `dir` (where the
/// worker put them under their store numbers).
pub fn compaction_job(
    spec: &proto::CompactionSpec,
    dir: PathBuf,
    filters: &FilterRegistry,
) -> Result<CompactionJob> {
    let mut inputs = Vec::with_capacity(spec.inputs.len());
    for i in &spec.inputs {
        let (Some(file), Some(meta)) = (&i.file, &i.meta) else {
            return Err(invalid("compaction input without its file or record"));
        };
        inputs.push(file_meta(i.number, file.size, meta));
    }
    let opts = spec
        .table_options
        .as_ref()
        .ok_or_else(|| invalid("compaction spec without table options"))?;
    let filter = match &spec.filter {
        None => None,
        Some(f) => Some(
            filters
                .build(&RemoteFilter {
                    name: f.name.clone(),
                    params: f.params.clone(),
                })
                .map_err(invalid)?,
        ),
    };
    Ok(CompactionJob {
        dir,
        inputs,
        output_level: spec.output_level as usize,
        retention: Retention::new(spec.snapshots.clone()),
        deeper_ranges: spec
            .deeper_ranges
            .iter()
            .map(|l| {
                l.ranges
                    .iter()
                    .map(|r| (r.lo.clone(), r.hi.clone()))
                    .collect()
            })
            .collect(),
        target_file_size: spec.target_file_size,
        table_options: TableOptions {
            block_size: opts.block_size as usize,
            restart_interval: opts.restart_interval as usize,
            bloom_bits_per_key: opts.bloom_bits_per_key,
            compression: compression(&opts.compression)?,
        },
        filter,
        live_blobs: spec.blob_files.iter().copied().collect(),
        lineage: Relocations::new(),
        // Scheduling only: the job's output does not depend on them.
        source_level: 0,
        score: 0.0,
        range: KeyRange {
            start: spec.range_start.clone(),
            end: spec.range_end.clone(),
        },
        // A worker writes tables only: values move into sorted runs in
        // compactions that run in the store's process.
        move_values: None,
    })
}

/// Score steps a compaction's priority tells apart (per 1/1000).
const SCORE_STEPS: u32 = (1 << 20) - 1;

/// The queue position of compaction `job` among compactions, smaller
/// first: jobs out of L0 first (they hold writes back), then by the
/// picker's score, higher first; the coordinator breaks ties by age.
pub fn compaction_priority(job: &CompactionJob) -> u32 {
    let level = job.source_level.min(15) as u32;
    let score = (job.score.max(0.0) * 1000.0).min(f64::from(SCORE_STEPS)) as u32;
    (level << 20) | (SCORE_STEPS - score)
}

/// The queue position of GC `job` among GC jobs, smaller first: the more
/// of its inputs' records are dead, the sooner (it frees the most space
/// per byte it copies).
pub fn gc_priority(job: &GcJob) -> u32 {
    let records: u64 = job.inputs.iter().map(|i| i.record_count).sum();
    let dead: u64 = job.inputs.iter().map(|i| i.dead.len()).sum();
    let ratio = if records == 0 {
        1.0
    } else {
        dead as f64 / records as f64
    };
    ((1.0 - ratio.clamp(0.0, 1.0)) * 1_000_000.0) as u32
}

/// The spec of GC `job`, whose inputs (in order) are in the shared tier as
/// `files`.
pub fn gc_spec(job: &GcJob, files: Vec<proto::FileRef>) -> proto::GcSpec {
    proto::GcSpec {
        inputs: job
            .inputs
            .iter()
            .zip(files)
            .map(|(i, file)| proto::GcInput {
                file: Some(file),
                number: i.number,
                record_count: i.record_count,
                dead: bitmap_bytes(&i.dead),
            })
            .collect(),
        output_numbers: job.output_numbers.clone(),
        output_file_size: job.output_file_size,
    }
}

/// The GC job `spec` describes, its inputs and outputs in `dir`.
pub fn gc_job(spec: &proto::GcSpec, dir: PathBuf) -> Result<GcJob> {
    let mut inputs = Vec::with_capacity(spec.inputs.len());
    for i in &spec.inputs {
        inputs.push(GcInput {
            number: i.number,
            record_count: i.record_count,
            dead: bitmap_from(&i.dead)?,
        });
    }
    if spec.output_numbers.is_empty() {
        return Err(invalid("GC spec reserves no output file numbers"));
    }
    Ok(GcJob {
        dir,
        inputs,
        output_numbers: spec.output_numbers.clone(),
        output_file_size: spec.output_file_size,
    })
}

/// A GC result as the engine reports it, from a result manifest.
pub fn gc_output(r: &proto::GcResult) -> Result<GcOutput> {
    let mut files = Vec::with_capacity(r.outputs.len());
    let mut written = 0;
    for o in &r.outputs {
        let file = o
            .file
            .as_ref()
            .ok_or_else(|| invalid("GC output without its file"))?;
        written += file.size;
        let mut lineage = Vec::with_capacity(o.lineage.len());
        for l in &o.lineage {
            lineage.push(LineageEntry {
                old_file: l.old_file,
                base: l.base,
                dead: bitmap_from(&l.dead)?,
            });
        }
        files.push(GcOutputFile {
            meta: BlobMeta {
                number: o.number,
                file_size: file.size,
                record_count: o.record_count,
                data_bytes: o.data_bytes,
                run_keys: None,
            },
            lineage,
        });
    }
    Ok(GcOutput {
        files,
        bytes_read: r.bytes_read,
        bytes_written: written,
        records_relocated: r.records_relocated,
        records_dropped: r.records_dropped,
        ran_elsewhere: true,
    })
}

/// The compaction result a worker reports for `out`, its tables uploaded
/// as `files` (in order).
pub fn compaction_result(
    out: &CompactionOutput,
    files: Vec<proto::FileRef>,
) -> proto::CompactionResult {
    proto::CompactionResult {
        outputs: out
            .files
            .iter()
            .zip(files)
            .map(|(f, file)| proto::TableOutput {
                file: Some(file),
                meta: Some(table_meta(f)),
            })
            .collect(),
        bytes_read: out.bytes_read,
        entries_read: out.entries_read,
        entries_dropped: out.entries_dropped,
        dead_refs: out
            .dead_refs
            .iter()
            .map(|&(file, ordinal, bytes)| proto::DeadRef {
                file,
                ordinal,
                bytes,
            })
            .collect(),
    }
}

/// The GC result a worker reports for `out`, its files uploaded as
/// `files` (in order).
pub fn gc_result(out: &GcOutput, files: Vec<proto::FileRef>) -> proto::GcResult {
    proto::GcResult {
        outputs: out
            .files
            .iter()
            .zip(files)
            .map(|(f, file)| proto::BlobOutput {
                file: Some(file),
                number: f.meta.number,
                record_count: f.meta.record_count,
                data_bytes: f.meta.data_bytes,
                lineage: f
                    .lineage
                    .iter()
                    .map(|l| proto::Lineage {
                        old_file: l.old_file,
                        base: l.base,
                        dead: bitmap_bytes(&l.dead),
                    })
                    .collect(),
            })
            .collect(),
        bytes_read: out.bytes_read,
        records_relocated: out.records_relocated,
        records_dropped: out.records_dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compaction(source_level: usize, score: f64) -> CompactionJob {
        CompactionJob {
            dir: PathBuf::new(),
            inputs: Vec::new(),
            output_level: source_level + 1,
            retention: Retention::new(Vec::new()),
            deeper_ranges: Vec::new(),
            target_file_size: 1 << 20,
            table_options: TableOptions::default(),
            filter: None,
            live_blobs: BTreeSet::new(),
            lineage: Relocations::new(),
            source_level,
            score,
            range: KeyRange::default(),
            move_values: None,
        }
    }

    fn gc(inputs: &[(u64, u32)]) -> GcJob {
        GcJob {
            dir: PathBuf::new(),
            inputs: inputs
                .iter()
                .enumerate()
                .map(|(i, &(records, dead))| GcInput {
                    number: i as u64 + 1,
                    record_count: records,
                    dead: (0..dead).collect(),
                })
                .collect(),
            output_numbers: vec![100],
            output_file_size: 1 << 20,
        }
    }

    #[test]
    fn l0_compactions_come_first_then_higher_scores() {
        let p = |level, score| compaction_priority(&compaction(level, score));
        assert!(p(0, 1.0) < p(1, 50.0), "L0 before any deeper level");
        assert!(p(1, 3.0) < p(1, 1.5), "higher score first");
        assert!(p(1, 1.5) < p(2, 9.0));
        assert!(
            p(0, 0.0) > p(0, 1.0),
            "a manual compaction after scored ones"
        );
        assert_eq!(p(2, 1e12), p(2, 2e12), "scores saturate, never wrap");
    }

    #[test]
    fn gc_jobs_with_more_garbage_come_first() {
        let p = |inputs: &[(u64, u32)]| gc_priority(&gc(inputs));
        assert!(p(&[(100, 90)]) < p(&[(100, 50)]));
        assert!(
            p(&[(100, 90), (100, 10)]) > p(&[(100, 60)]),
            "by all inputs together"
        );
        assert_eq!(p(&[(100, 100)]), 0);
        assert_eq!(p(&[]), 0, "nothing to copy: free");
    }

    #[test]
    fn a_parts_key_range_survives_the_spec() {
        for range in [
            KeyRange::default(),
            KeyRange {
                start: Some(b"k1".to_vec()),
                end: None,
            },
            KeyRange {
                start: Some(b"k1".to_vec()),
                end: Some(b"k5".to_vec()),
            },
            KeyRange {
                start: None,
                end: Some(Vec::new()),
            },
        ] {
            let mut job = compaction(1, 1.0);
            job.table_options = TableOptions::default();
            job.range = range.clone();
            let spec = compaction_spec(&job, Vec::new(), None);
            // Through the wire too: an empty end is not "unbounded".
            let spec = <proto::CompactionSpec as prost::Message>::decode(
                prost::Message::encode_to_vec(&spec).as_slice(),
            )
            .unwrap();
            let back = compaction_job(&spec, PathBuf::new(), &FilterRegistry::new()).unwrap();
            assert_eq!(back.range, range);
        }
    }
}
