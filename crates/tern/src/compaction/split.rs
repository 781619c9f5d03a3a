//! Splitting one compaction into key-range parts that run at once
//! (RocksDB's subcompactions): on background threads, or on several
//! offload workers, each reading only the inputs its range overlaps.

use std::collections::HashMap;

use super::{CompactionJob, CompactionOutput, JobContext, KeyRange};
use crate::error::{Error, Result};
use crate::format::blob::BlobRef;
use crate::format::internal_key::{self, ValueKind};
use crate::io::FsRef;
use crate::iter::InternalIterator;
use crate::sst::Table;
use crate::version::FileMeta;
use crate::wal::table_file_name;

impl CompactionJob {
    /// Splits the job into at most `max_parts` jobs over adjacent user-key
    /// ranges that together cover its own, each reading about the same
    /// input bytes and at least `min_part_bytes` of them. Sizes are
    /// estimated from the inputs' index blocks (each data block's size, at
    /// its last key). Boundaries are user keys, so every version of a key
    /// lands in one part and retention works per part as it does whole.
    /// Each part lists only the inputs its range overlaps. Returns the job
    /// alone when it is not worth splitting.
    pub fn split(
        &self,
        fs: &FsRef,
        max_parts: usize,
        min_part_bytes: u64,
    ) -> Result<Vec<CompactionJob>> {
        let total: u64 = self.inputs.iter().map(|f| f.file_size).sum();
        let parts = (total / min_part_bytes.max(1)).min(max_parts as u64);
        if parts < 2 {
            return Ok(vec![self.clone()]);
        }
        // (user key, bytes of the data block ending there), over all inputs.
        let mut blocks: Vec<(Vec<u8>, u64)> = Vec::new();
        for f in &self.inputs {
            let path = self.dir.join(table_file_name(f.number));
            let table = Table::open(fs, &path, f.number, None)?;
            let mut index = table.index_iter();
            index.seek_to_first();
            while index.valid() {
                let handle = table.decode_handle(index.value())?;
                let key = internal_key::user_key(index.key());
                if self.range.contains(key) {
                    blocks.push((key.to_vec(), handle.size));
                }
                index.next();
            }
            index.status().map_err(|e| table.index_err(e))?;
        }
        blocks.sort_unstable();
        let sampled: u64 = blocks.iter().map(|(_, n)| n).sum();
        let lo = self
            .inputs
            .iter()
            .map(|f| internal_key::user_key(&f.smallest))
            .min();
        let mut bounds: Vec<Vec<u8>> = Vec::new();
        let mut acc = 0u64;
        for (key, bytes) in &blocks {
            acc += bytes;
            let k = bounds.len() as u64 + 1;
            if k >= parts || acc < sampled / parts * k {
                continue;
            }
            // A boundary starts the next part: it must leave keys below it
            // and rise strictly.
            let rises = bounds.last().is_none_or(|b| b < key)
                && lo.is_some_and(|lo| lo < key.as_slice())
                && self.range.start.as_ref().is_none_or(|s| s < key);
            if rises {
                bounds.push(key.clone());
            }
        }
        if bounds.is_empty() {
            return Ok(vec![self.clone()]);
        }
        let starts =
            std::iter::once(self.range.start.clone()).chain(bounds.iter().cloned().map(Some));
        let ends = bounds
            .iter()
            .cloned()
            .map(Some)
            .chain(std::iter::once(self.range.end.clone()));
        let mut parts: Vec<CompactionJob> = Vec::with_capacity(bounds.len() + 1);
        let mut pending_start = None;
        for (start, end) in starts.zip(ends) {
            let range = KeyRange {
                start: pending_start.take().unwrap_or(start),
                end,
            };
            let mut part = self.clone();
            part.inputs.retain(|f| {
                range.overlaps(
                    internal_key::user_key(&f.smallest),
                    internal_key::user_key(&f.largest),
                )
            });
            if !part.inputs.is_empty() {
                part.range = range;
                parts.push(part);
                continue;
            }
            // A range between the inputs' keys holds nothing to compact:
            // its neighbour takes it over, so the parts stay adjacent.
            match parts.last_mut() {
                Some(prev) => prev.range.end = range.end,
                None => pending_start = Some(range.start),
            }
        }
        if parts.is_empty() {
            return Ok(vec![self.clone()]);
        }
        Ok(parts)
    }

    /// The output of the whole job from the outputs of its parts (as
    /// [`CompactionJob::split`] made them, in order): their tables in key
    /// order, their counts added up. Checks that the parts together read
    /// every input entry once and kept or dropped each, and that their
    /// tables do not overlap; an error means a part ran wrong, and the
    /// caller removes the outputs.
    pub fn merge_parts(&self, parts: Vec<CompactionOutput>) -> Result<CompactionOutput> {
        account(&self.inputs, &parts)?;
        let mut out = CompactionOutput::default();
        for p in parts {
            out.files.extend(p.files);
            out.bytes_written += p.bytes_written;
            out.entries_read += p.entries_read;
            out.entries_dropped += p.entries_dropped;
            out.dead_refs.extend(p.dead_refs);
            out.refs_rewritten += p.refs_rewritten;
            out.blobs.extend(p.blobs);
            out.values_moved += p.values_moved;
            out.value_bytes_moved += p.value_bytes_moved;
            out.moves_stopped |= p.moves_stopped;
            out.ran_elsewhere |= p.ran_elsewhere;
        }
        // Each part counted its inputs whole; the job read each once.
        out.bytes_read = self.inputs.iter().map(|f| f.file_size).sum();
        Ok(out)
    }
}

/// Checks the outputs of a compaction's parts (in order) against each
/// other, for an executor that ran some elsewhere: together they read every
/// input entry once and kept or dropped each, their tables do not overlap,
/// and no part reports a blob record dead that another part's output still
/// refers to ([`CompactionJob::check_output`] checks that within a part;
/// across parts it takes reading the other parts' tables that refer to the
/// record's file). Reads through `ctx.fs`.
pub fn check_parts(
    parts: &[CompactionJob],
    outs: &[CompactionOutput],
    ctx: &JobContext,
) -> Result<()> {
    let mut inputs: Vec<FileMeta> = parts
        .iter()
        .flat_map(|p| p.inputs.iter().cloned())
        .collect();
    inputs.sort_by_key(|f| f.number);
    inputs.dedup_by_key(|f| f.number);
    account(&inputs, outs)?;
    // A record's current home (refs may name the file GC moved it from)
    // → the part that reported it dead.
    let mut dead: HashMap<(u64, u32), usize> = HashMap::new();
    for (i, (part, o)) in parts.iter().zip(outs).enumerate() {
        for &(file, ordinal, _) in &o.dead_refs {
            dead.insert(part.current_home(file, ordinal), i);
        }
    }
    if dead.is_empty() {
        return Ok(());
    }
    for (i, (part, o)) in parts.iter().zip(outs).enumerate() {
        for f in &o.files {
            let path = part.dir.join(table_file_name(f.number));
            let table = Table::open(&ctx.fs, &path, f.number, None)?;
            let mut it = table.iter();
            it.seek_to_first();
            while it.valid() {
                let kind = internal_key::parse(it.key())
                    .map(|p| p.kind)
                    .map_err(|e| Error::corruption(&path, 0, format!("bad internal key: {e}")))?;
                if kind == ValueKind::BlobRef {
                    let (r, _) = BlobRef::decode_with_head(it.value()).map_err(|e| {
                        Error::corruption(&path, 0, format!("bad blob reference: {e}"))
                    })?;
                    let home = part.current_home(r.file, r.ordinal);
                    if let Some(&by) = dead.get(&home).filter(|&&by| by != i) {
                        return Err(Error::corruption(
                            &path,
                            0,
                            format!(
                                "refers to blob record {}/{} that part {by} of its compaction reported dead",
                                home.0, home.1
                            ),
                        ));
                    }
                }
                it.next();
            }
            it.status()?;
        }
    }
    Ok(())
}

/// Checks that `outs`, the parts of one compaction over `inputs`, read
/// every input entry once and kept or dropped each, with tables in order.
fn account(inputs: &[FileMeta], outs: &[CompactionOutput]) -> Result<()> {
    let input_entries: u64 = inputs.iter().map(|f| f.num_entries).sum();
    let read: u64 = outs.iter().map(|o| o.entries_read).sum();
    let dropped: u64 = outs.iter().map(|o| o.entries_dropped).sum();
    let kept: u64 = outs
        .iter()
        .flat_map(|o| &o.files)
        .map(|f| f.num_entries)
        .sum();
    if read != input_entries || read.checked_sub(dropped) != Some(kept) {
        return Err(Error::Internal(format!(
            "a split compaction's parts read {read} of the inputs' {input_entries} entries, \
             dropped {dropped} and kept {kept}"
        )));
    }
    let files: Vec<&FileMeta> = outs.iter().flat_map(|o| &o.files).collect();
    for pair in files.windows(2) {
        if internal_key::user_key(&pair[0].largest) >= internal_key::user_key(&pair[1].smallest) {
            return Err(Error::Internal(format!(
                "a split compaction's outputs {} and {} overlap",
                pair[0].number, pair[1].number
            )));
        }
    }
    Ok(())
}
