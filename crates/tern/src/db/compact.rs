//! Running compactions and installing their results.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use super::core::Shared;
use super::stats::Counters;
use crate::compaction::picker::{self, CompactionPlan, PickerInput};
use crate::compaction::value_runs;
use crate::compaction::{
    CompactionJob, CompactionOutput, JobContext, KeyRange, MovePressure, Retention, ValueMoves,
};
use crate::error::Result;
use crate::format::internal_key::user_key;
use crate::format::version_edit::{DeadOrdinals, VersionEdit};
use crate::options::NUM_LEVELS;
use crate::version::Version;

impl Shared {
    /// Estimated bytes of blob records that versions in L0 shadow and no
    /// compaction has marked dead yet: L0's entries times what the last L0
    /// compaction found dead per entry. Zero until one has run since open,
    /// and near zero while new keys are inserted.
    pub fn hidden_garbage(&self, v: &crate::version::Version) -> u64 {
        let per_entry = f64::from_bits(self.l0_shadow.load(Ordering::Relaxed));
        let entries: u64 = v.levels[0].iter().map(|f| f.num_entries).sum();
        (entries as f64 * per_entry) as u64
    }

    /// Learns from a compaction of L0 that merged `entries` L0 entries and
    /// found `dead_bytes` of blob records dead. The last one alone counts:
    /// it averages over all of L0 already, and a change of workload (a load
    /// after updates) shows at once.
    pub(super) fn observe_l0_compaction(&self, entries: u64, dead_bytes: u64) {
        if entries > 0 {
            let per_entry = dead_bytes as f64 / entries as f64;
            self.l0_shadow.store(per_entry.to_bits(), Ordering::Relaxed);
        }
    }

    /// Picks and runs one background compaction. Returns whether one ran.
    pub fn compact_one(&self) -> Result<bool> {
        if self.opts.disable_auto_compactions {
            return Ok(false);
        }
        let guard = self.compaction_lock.lock();
        self.compact_picked(guard, |s, version, pointers| {
            picker::pick(&PickerInput {
                version,
                opts: &s.opts,
                compact_pointers: pointers,
            })
        })
    }

    /// For a store that is not writing: compacts L0 before its trigger
    /// when that reveals enough of the blob garbage L0 hides for GC to
    /// free it ([`picker::pick_reveal`]); nothing else. With `wait` false
    /// it gives up at once when another compaction holds the lock, so the
    /// idle GC it precedes does not wait for that job.
    pub fn reveal_hidden_garbage(&self, wait: bool) -> Result<bool> {
        if self.opts.disable_auto_compactions {
            return Ok(false);
        }
        let guard = if wait {
            self.compaction_lock.lock()
        } else {
            match self.compaction_lock.try_lock() {
                Some(g) => g,
                None => return Ok(false),
            }
        };
        self.compact_picked(guard, |s, version, _| {
            picker::pick_reveal(version, &s.opts, s.hidden_garbage(version))
        })
    }

    /// Runs the plan `pick` makes from the current version, under the
    /// compaction lock the caller took.
    fn compact_picked(
        &self,
        _guard: parking_lot::MutexGuard<'_, ()>,
        pick: impl FnOnce(&Self, &Version, &[Vec<u8>; NUM_LEVELS]) -> Option<CompactionPlan>,
    ) -> Result<bool> {
        let plan = {
            let state = self.state.lock();
            if state.bg_error.is_some() || state.shutting_down {
                return Ok(false);
            }
            let version = state.versions.current();
            pick(self, &version, &state.versions.compact_pointers)
        };
        match plan {
            Some(plan) => self.run_plan(&plan).map(|()| true),
            None => Ok(false),
        }
    }

    /// Compacts every level's data in `[lo, hi]` down to the last level.
    pub fn compact_range(&self, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
        let _guard = self.compaction_lock.lock();
        let res = (|| {
            for level in 0..NUM_LEVELS {
                let plan = {
                    let state = self.state.lock();
                    if let Some(e) = &state.bg_error {
                        return Err(crate::Error::Poisoned(e.clone()));
                    }
                    picker::plan_range(&state.versions.current(), &self.opts, level, lo, hi)
                };
                if let Some(plan) = plan {
                    self.run_plan(&plan)?;
                }
            }
            Ok(())
        })();
        self.bg_work.notify_all();
        res
    }

    /// Runs a plan and installs it. The caller holds `compaction_lock`.
    fn run_plan(&self, plan: &CompactionPlan) -> Result<()> {
        tracing::debug!(
            level = plan.level,
            output_level = plan.output_level,
            inputs = plan.inputs.len() + plan.output_level_inputs.len(),
            score = plan.score,
            trivial_move = plan.trivial_move,
            "tern: compaction"
        );
        let mut edit = VersionEdit::default();
        for f in &plan.inputs {
            edit.deleted_files.push((plan.level as u32, f.number));
        }
        if let Some(last) = plan
            .inputs
            .iter()
            .map(|f| &f.largest)
            .max_by(|a, b| crate::format::internal_key::compare(a, b))
        {
            edit.compact_pointers
                .push((plan.level as u32, last.clone()));
        }
        if plan.trivial_move {
            for f in &plan.inputs {
                edit.new_files
                    .push((plan.output_level as u32, (**f).clone()));
            }
            self.install(edit, false, &[])?;
            if plan.level == 0 {
                // Nothing below overlaps it: its entries shadow nothing.
                let entries = plan.inputs.iter().map(|f| f.num_entries).sum();
                self.observe_l0_compaction(entries, 0);
            }
            Counters::add(&self.counters.trivial_moves, 1);
            Counters::add(&self.counters.compactions, 1);
            return Ok(());
        }
        for f in &plan.output_level_inputs {
            edit.deleted_files
                .push((plan.output_level as u32, f.number));
        }
        // `_pin` keeps the version the job reads alive, so no file it may
        // open (input tables, blob files it rewrites refs to) is deleted
        // while it runs.
        let (job, ctx, _pin) = self.build_job(plan);
        let output = match self.execute(&job, &ctx) {
            Ok(o) => o,
            Err(e) => {
                Counters::add(&self.counters.compaction_failures, 1);
                return Err(e);
            }
        };
        for f in &output.files {
            edit.new_files.push((plan.output_level as u32, f.clone()));
        }
        edit.blob_files_added.extend(output.blobs.iter().cloned());
        // On failure the outputs stay: the manifest record naming them may
        // be durable. The next open removes them if it is not.
        let dead_bytes = self.install(edit, true, &output.dead_refs)?;
        if plan.level == 0 {
            let entries = plan.inputs.iter().map(|f| f.num_entries).sum();
            // Moved values are no garbage L0 hides.
            let shadowed = dead_bytes.saturating_sub(output.value_bytes_moved);
            self.observe_l0_compaction(entries, shadowed);
        }
        Counters::add(&self.counters.values_moved, output.values_moved);
        Counters::add(&self.counters.value_bytes_moved, output.value_bytes_moved);
        Counters::add(
            &self.counters.value_moves_stopped,
            u64::from(output.moves_stopped),
        );
        Counters::add(&self.counters.compaction_bytes_read, output.bytes_read);
        Counters::add(
            &self.counters.compaction_bytes_written,
            output.bytes_written,
        );
        Counters::add(&self.counters.compactions, 1);
        Counters::add(&self.counters.blob_refs_rewritten, output.refs_rewritten);
        Ok(())
    }

    /// Runs `job` through the executor: whole, or split into key-range
    /// parts that run at once when `max_subcompactions` allows and the job
    /// is large enough.
    fn execute(&self, job: &CompactionJob, ctx: &JobContext) -> Result<CompactionOutput> {
        let parts = match self.opts.max_subcompactions {
            0 | 1 => Vec::new(),
            n => job
                .split(&ctx.fs, n, self.opts.target_file_size)
                .unwrap_or_else(|e| {
                    // Reading the inputs' indexes failed: the whole job
                    // meets the same file and reports it.
                    tracing::warn!("tern: cannot split a compaction, running it whole: {e}");
                    Vec::new()
                }),
        };
        if parts.len() < 2 {
            let out = self.executor.execute(job, ctx)?;
            if out.ran_elsewhere {
                Counters::add(&self.counters.remote_compactions, 1);
            }
            return Ok(out);
        }
        let outs = self.executor.execute_parts(&parts, ctx)?;
        // Kept to remove them if the merge refuses the parts.
        let files = CompactionOutput {
            files: outs.iter().flat_map(|o| o.files.iter().cloned()).collect(),
            blobs: outs.iter().flat_map(|o| o.blobs.iter().cloned()).collect(),
            ..CompactionOutput::default()
        };
        let remote = outs.iter().filter(|o| o.ran_elsewhere).count() as u64;
        match job.merge_parts(outs) {
            Ok(out) => {
                Counters::add(&self.counters.subcompactions, parts.len() as u64);
                Counters::add(&self.counters.remote_compactions, remote);
                Ok(out)
            }
            Err(e) => {
                files.remove_files(&job.dir, &self.fs);
                Err(e)
            }
        }
    }

    /// The job for `plan`, its context, and the version it was planned on.
    fn build_job(
        &self,
        plan: &CompactionPlan,
    ) -> (
        CompactionJob,
        JobContext,
        std::sync::Arc<crate::version::Version>,
    ) {
        let state = self.state.lock();
        let version = state.versions.current();
        let ctx = JobContext {
            fs: self.background_fs.clone(),
            next_file_number: state.versions.file_number_counter(),
            rate_limiter: self.rate_limiter.clone(),
        };
        let mut deeper_ranges: Vec<Vec<(Vec<u8>, Vec<u8>)>> = version.levels
            [plan.output_level + 1..]
            .iter()
            .map(|files| {
                files
                    .iter()
                    .map(|f| {
                        (
                            user_key(&f.smallest).to_vec(),
                            user_key(&f.largest).to_vec(),
                        )
                    })
                    .collect()
            })
            .collect();
        // Files about to be ingested behind everything count as deeper
        // data already: the tombstones over them must stay.
        for (_, lo, hi) in &state.protected {
            deeper_ranges.push(vec![(lo.clone(), hi.clone())]);
        }
        // Halfway from L0's compaction trigger to slowing writes. Without
        // automatic compactions L0 never slows writes: nothing to give way
        // to; a compaction a caller asks for moves what it can.
        let automatic = plan.score > 0.0 && !self.opts.disable_auto_compactions;
        let pressure = automatic.then(|| MovePressure {
            l0_files: self.l0_files.clone(),
            stop_at: self
                .opts
                .level0_file_num_compaction_trigger
                .midpoint(self.opts.level0_slowdown_writes_trigger)
                .max(self.opts.level0_file_num_compaction_trigger + 1),
        });
        let move_values = value_moves(&version, plan, &self.opts, &deeper_ranges, pressure);
        let job = CompactionJob {
            dir: self.dir.clone(),
            inputs: plan.all_inputs().map(|f| (**f).clone()).collect(),
            output_level: plan.output_level,
            retention: Retention::new(self.snapshots.all()),
            deeper_ranges,
            target_file_size: self.opts.target_file_size,
            table_options: self.table_options(plan.output_level),
            filter: self.opts.compaction_filter.clone(),
            live_blobs: version.blob_files.keys().copied().collect(),
            lineage: version.relocations.clone(),
            source_level: plan.level,
            score: plan.score,
            range: KeyRange::default(),
            move_values,
        };
        (job, ctx, version)
    }

    /// Logs `edit` and publishes the new version. With `rewrite`, the deleted
    /// files become obsolete (a trivial move keeps them). `dead_refs` are the
    /// blob refs a rewriting compaction dropped: they are resolved through
    /// the lineage current at install time (GC may have moved them while the
    /// job ran) and marked dead in the same edit, under the same lock, so no
    /// GC install can slip in between. Returns the bytes newly marked dead.
    pub(super) fn install(
        &self,
        mut edit: VersionEdit,
        rewrite: bool,
        dead_refs: &[(u64, u32, u64)],
    ) -> Result<u64> {
        let mut state = self.state.lock();
        edit.dead_ordinals =
            dead_ordinals(&state.versions.current(), &edit.blob_files_added, dead_refs);
        edit.last_sequence = Some(
            self.visible_seq
                .load(Ordering::Acquire)
                .max(state.versions.last_sequence),
        );
        let dead_bytes = edit.dead_ordinals.iter().map(|d| d.bytes).sum();
        self.log_and_apply(&mut state, &mut edit)?;
        if rewrite {
            let obsolete: Vec<u64> = edit.deleted_files.iter().map(|&(_, n)| n).collect();
            state.obsolete_tables.extend(obsolete);
        }
        self.finish_install(state);
        Ok(dead_bytes)
    }
}

/// Groups dropped blob refs by the live file holding their record now,
/// skipping records already dead. Refs into `added` (blob files the same
/// edit adds, which an ingest merge can drop records of) are marked as
/// they are.
fn dead_ordinals(
    current: &crate::version::Version,
    added: &[crate::version::BlobMeta],
    dead_refs: &[(u64, u32, u64)],
) -> Vec<DeadOrdinals> {
    let mut dead: std::collections::BTreeMap<u64, DeadOrdinals> = Default::default();
    for &(file, ordinal, bytes) in dead_refs {
        if added.iter().any(|b| b.number == file) {
            let d = dead.entry(file).or_insert_with(|| DeadOrdinals {
                file,
                ..Default::default()
            });
            if d.ordinals.insert(ordinal) {
                d.bytes += bytes;
            }
            continue;
        }
        // An error means GC already dropped the record: nothing to mark.
        let Ok((file, ordinal, _)) = current.resolve_blob(file, ordinal) else {
            continue;
        };
        let Some(state) = current.blob_files.get(&file) else {
            continue;
        };
        if state.dead.contains(ordinal) {
            continue;
        }
        let d = dead.entry(file).or_insert_with(|| DeadOrdinals {
            file,
            ..Default::default()
        });
        if d.ordinals.insert(ordinal) {
            d.bytes += bytes;
        }
    }
    dead.into_values().collect()
}

/// What a compaction moves into a sorted run ([`ValueMoves`],
/// `Settings::sorted_value_runs`): nothing unless values are separated,
/// the store's live values exceed `Settings::sorted_value_runs_above` and
/// it writes the last level that holds its keys. Values already in sorted
/// runs move too when the new run would make more runs overlap some key of
/// its range than the setting allows: the sparsest runs where too many
/// share a key ([`value_runs::runs_to_merge`]). The job stops moving when
/// L0 fills (`pressure`).
fn value_moves(
    version: &Version,
    plan: &CompactionPlan,
    opts: &crate::options::Options,
    deeper_ranges: &[Vec<(Vec<u8>, Vec<u8>)>],
    pressure: Option<MovePressure>,
) -> Option<ValueMoves> {
    let max_runs = opts.sorted_value_runs?;
    opts.blob_threshold?;
    if plan.output_level == 0 || plan.trivial_move {
        return None;
    }
    let lo = plan.all_inputs().map(|f| user_key(&f.smallest)).min()?;
    let hi = plan.all_inputs().map(|f| user_key(&f.largest)).max()?;
    let deeper = deeper_ranges
        .iter()
        .flatten()
        .any(|(a, b)| a.as_slice() <= hi && lo <= b.as_slice());
    if deeper {
        return None;
    }
    // Below the threshold nothing moves: checked last, as it sums over
    // every blob file.
    if version.blob_live_bytes() <= opts.sorted_runs_threshold() {
        return None;
    }
    let runs: BTreeSet<u64> = version
        .blob_files
        .iter()
        .filter(|(_, b)| b.meta.run_keys.is_some())
        .map(|(&n, _)| n)
        .collect();
    // The files holding the inputs' values now: tables name the file a
    // record was written to, which GC may have retired since.
    let referenced: BTreeSet<u64> = plan
        .all_inputs()
        .flat_map(|f| f.blob_files.iter())
        .map(|&n| version.live_blob_file(n))
        .collect();
    // The runs among them, each whole, with its live bytes.
    let spans: Vec<(u64, value_runs::RunSpan<'_>)> = referenced
        .iter()
        .filter_map(|n| {
            let b = version.blob_files.get(n)?;
            let (first, last) = b.meta.run_keys.as_ref()?;
            let span = value_runs::RunSpan {
                first,
                last,
                live_bytes: b.meta.data_bytes.saturating_sub(b.dead_bytes),
            };
            Some((*n, span))
        })
        .collect();
    let density = value_runs::densities(&spans.iter().map(|&(_, span)| span).collect::<Vec<_>>());
    // Only the part of each run under the job's keys counts.
    let parts: Vec<value_runs::RunPart<'_>> = spans
        .iter()
        .zip(density)
        .filter_map(|(&(file, span), density)| {
            let (first, last) = (span.first.max(lo), span.last.min(hi));
            (first <= last).then_some(value_runs::RunPart {
                file,
                first,
                last,
                density,
            })
        })
        .collect();
    // Values outside runs make a new run over the job's keys, which takes
    // one of the places. A job without any moves nothing: its runs were
    // placed by earlier jobs, and a limit they seem to exceed is mostly
    // counted over stale spans (a run keeps the span it was written with
    // while later jobs move parts of it out).
    let new_run = referenced.iter().any(|n| !runs.contains(n));
    let merge = if new_run {
        value_runs::runs_to_merge(&parts, max_runs - 1)
    } else {
        BTreeSet::new()
    };
    Some(ValueMoves {
        merge,
        runs,
        blob_file_size: opts.blob_file_size,
        pressure,
    })
}
