//! Checking a compaction's outputs before they are installed, for
//! executors that ran the job somewhere the store cannot vouch for.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::{CompactionJob, CompactionOutput, JobContext};
use crate::error::{Error, Result};
use crate::format::blob::BlobRef;
use crate::format::internal_key::{self, ValueKind};
use crate::iter::InternalIterator;
use crate::sst::Table;
use crate::wal::table_file_name;

impl CompactionJob {
    /// Checks that `output` is what this job may produce, reading every
    /// output table in `self.dir` through `ctx.fs`: each file has the size
    /// and entry counts reported, verifies (checksums, structure, key
    /// order), starts and ends at the reported keys, holds only keys and
    /// sequence numbers of the inputs' ranges (and of its reported range)
    /// and refs to blob files the inputs referred to, inside the job's key
    /// range; the outputs do not overlap; every input entry was read (for a
    /// key-range part: no more than the inputs hold) and is either kept or
    /// counted dropped; dropped refs name the inputs' blob files and no record an
    /// output still refers to. Any disagreement is an error, naming the
    /// file where there is one.
    ///
    /// It checks that the result is well formed and consistent with its
    /// inputs, not that the executor applied the retention rules right: a
    /// tombstone or a version dropped by a wrong rule is not caught (that
    /// would take merging the inputs again).
    pub fn check_output(&self, ctx: &JobContext, output: &CompactionOutput) -> Result<()> {
        let input_blobs: BTreeSet<u64> = self
            .inputs
            .iter()
            .flat_map(|f| f.blob_files.iter().copied())
            .chain(self.lineage.values().map(|r| r.new_file))
            .collect();
        let lo = self
            .inputs
            .iter()
            .map(|f| internal_key::user_key(&f.smallest))
            .min();
        let hi = self
            .inputs
            .iter()
            .map(|f| internal_key::user_key(&f.largest))
            .max();
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return match output.files.is_empty() {
                true => Ok(()),
                false => Err(Error::Internal(
                    "a compaction without inputs reported outputs".into(),
                )),
            };
        };
        let min_seq = self
            .inputs
            .iter()
            .map(|f| f.smallest_seq)
            .min()
            .unwrap_or(0);
        let max_seq = self.inputs.iter().map(|f| f.largest_seq).max().unwrap_or(0);
        let input_entries: u64 = self.inputs.iter().map(|f| f.num_entries).sum();
        let mut total = 0u64;
        // Every blob record the outputs still refer to.
        let mut kept_refs: BTreeSet<(u64, u32)> = BTreeSet::new();
        let mut prev_largest: Option<&[u8]> = None;
        for f in &output.files {
            let path = self.dir.join(table_file_name(f.number));
            let bad = |offset: u64, why: String| Error::corruption(&path, offset, why);
            if let Some(prev) = prev_largest {
                if internal_key::user_key(prev) >= internal_key::user_key(&f.smallest) {
                    return Err(bad(0, "output overlaps the one before it".into()));
                }
            }
            prev_largest = Some(&f.largest);
            let table = Table::open(&ctx.fs, &path, f.number, None)?;
            if table.file_size() != f.file_size {
                return Err(bad(
                    0,
                    format!(
                        "file is {} bytes, its job reported {}",
                        table.file_size(),
                        f.file_size
                    ),
                ));
            }
            // Two passes: `verify` checks what iteration does not (the
            // index against the blocks, which point reads rely on); the
            // scan below checks what the result means.
            let verified = table.verify()?;
            let mut iter = table.iter();
            iter.seek_to_first();
            let (mut entries, mut deletions) = (0u64, 0u64);
            let mut first: Option<Vec<u8>> = None;
            let mut last: Vec<u8> = Vec::new();
            let mut refs = BTreeSet::new();
            let (mut seq_lo, mut seq_hi) = (u64::MAX, 0u64);
            while iter.valid() {
                let key = iter.key();
                let p = internal_key::parse(key)
                    .map_err(|e| bad(0, format!("bad internal key in an output: {e}")))?;
                if p.user_key < lo || p.user_key > hi {
                    return Err(bad(0, "output key outside the inputs' key range".into()));
                }
                if !self.range.contains(p.user_key) {
                    return Err(bad(0, "output key outside the job's key range".into()));
                }
                if p.seq < min_seq || p.seq > max_seq {
                    return Err(bad(
                        0,
                        format!(
                            "sequence number {} outside the inputs' {min_seq}..={max_seq}",
                            p.seq
                        ),
                    ));
                }
                match p.kind {
                    ValueKind::Delete => deletions += 1,
                    ValueKind::BlobRef => {
                        let (r, _) = BlobRef::decode_with_head(iter.value())
                            .map_err(|e| bad(0, format!("bad blob reference in an output: {e}")))?;
                        if !input_blobs.contains(&r.file) {
                            return Err(bad(
                                0,
                                format!("refers to blob file {} no input referred to", r.file),
                            ));
                        }
                        refs.insert(r.file);
                        // Compared at the record's current home: a worker
                        // copies refs as stored, GC may have moved them.
                        kept_refs.insert(self.current_home(r.file, r.ordinal));
                    }
                    ValueKind::Value => {}
                }
                seq_lo = seq_lo.min(p.seq);
                seq_hi = seq_hi.max(p.seq);
                if first.is_none() {
                    first = Some(key.to_vec());
                }
                last.clear();
                last.extend_from_slice(key);
                entries += 1;
                iter.next();
            }
            iter.status()?;
            let reported: BTreeSet<u64> = f.blob_files.iter().copied().collect();
            if entries != f.num_entries || verified != entries || deletions != f.num_deletions {
                return Err(bad(
                    0,
                    format!(
                        "holds {entries} entries ({deletions} deletions), its job reported {} ({})",
                        f.num_entries, f.num_deletions
                    ),
                ));
            }
            let ends_match = first.as_deref().is_some_and(|k| {
                internal_key::compare(k, &f.smallest) == Ordering::Equal
                    && internal_key::compare(&last, &f.largest) == Ordering::Equal
            });
            if !ends_match {
                return Err(bad(
                    0,
                    "first or last key differs from what its job reported".into(),
                ));
            }
            if (seq_lo, seq_hi) != (f.smallest_seq, f.largest_seq) {
                return Err(bad(
                    0,
                    format!(
                        "holds sequence numbers {seq_lo}..={seq_hi}, its job reported {}..={}",
                        f.smallest_seq, f.largest_seq
                    ),
                ));
            }
            if refs != reported {
                return Err(bad(
                    0,
                    format!("refers to blob files {refs:?}, its job reported {reported:?}"),
                ));
            }
            total += entries;
        }
        // Every input entry is either in an output or dropped: an output
        // lost or duplicated shows here. A key-range part reads only some
        // of its inputs' entries; the whole job's count is checked when
        // the parts are merged (`merge_parts`).
        let read_all = match self.range.is_unbounded() {
            true => output.entries_read == input_entries,
            false => output.entries_read <= input_entries,
        };
        if !read_all || output.entries_read.checked_sub(output.entries_dropped) != Some(total) {
            return Err(Error::Internal(format!(
                "compaction read {} of the inputs' {input_entries} entries, dropped {} and kept {total}",
                output.entries_read, output.entries_dropped
            )));
        }
        for &(file, ordinal, _) in &output.dead_refs {
            if !input_blobs.contains(&file) {
                return Err(Error::Internal(format!(
                    "compaction reported a dropped ref to blob file {file}, which no input refers to"
                )));
            }
            if kept_refs.contains(&self.current_home(file, ordinal)) {
                return Err(Error::Internal(format!(
                    "compaction reported blob record {file}/{ordinal} dead, but an output still refers to it"
                )));
            }
        }
        Ok(())
    }
}
