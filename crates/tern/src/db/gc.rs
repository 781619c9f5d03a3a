//! Scheduling blob GC and installing its results.

use std::sync::atomic::Ordering;

use super::core::Shared;
use super::stats::Counters;
use crate::error::{Error, Result};
use crate::format::blob::LineageEntry;
use crate::format::version_edit::{DeadOrdinals, VersionEdit};
use crate::gc::{picker, GcContext, GcInput, GcJob, GcOutput};
use crate::options::Options;
use crate::version::{BlobFileState, Version};

impl Shared {
    /// Picks blob files to collect ([`picker::pick`]), copies their live
    /// records into new files and installs them. Returns whether a job ran.
    pub fn gc_one(&self) -> Result<bool> {
        self.gc_one_picked(picker::pick)
    }

    /// [`Shared::gc_one`] for a store that is not writing: the files over
    /// `gc_idle_space_amp_limit` ([`picker::pick_idle`]); nothing when it
    /// is off.
    pub fn gc_one_idle(&self) -> Result<bool> {
        if self.opts.gc_idle_space_amp_limit.is_none() {
            return Ok(false);
        }
        self.gc_one_picked(picker::pick_idle)
    }

    /// Whether a store that stopped writing should collect: a pass is
    /// under way ([`Shared::idle_pass`]), or its blob files are over
    /// [`picker::idle_start`], counting the garbage L0 hides when an idle
    /// L0 compaction would reveal it. Once started, a pass goes down to
    /// the idle limit ([`Shared::gc_one_idle`]).
    pub fn idle_gc_due(&self) -> bool {
        if self.idle_pass.load(Ordering::Acquire) {
            return true;
        }
        let Some(start) = picker::idle_start(&self.opts) else {
            return false;
        };
        let v = self.state.lock().versions.current();
        let hidden = self.hidden_garbage(&v);
        // Garbage no compaction will reveal is none GC can free: counting
        // it would start a pass that copies from just over the idle limit.
        let revealable = !self.opts.disable_auto_compactions
            && crate::compaction::picker::pick_reveal(&v, &self.opts, hidden).is_some();
        v.blob_space_excess(start, if revealable { hidden } else { 0 }) > 0
    }

    /// One job of an idle pass, when one is due ([`Shared::idle_gc_due`]):
    /// the L0 compaction `reveal` runs if it finds one worth it, else a GC
    /// job by the idle limit. The pass ends once neither has work; a failed
    /// job keeps it for the next try. Returns whether a job ran. The GC
    /// thread and `Db::wait_for_background` both take their idle jobs
    /// here, so either finishes a pass the other started.
    pub fn idle_pass_step(&self, reveal: impl FnOnce() -> Result<bool>) -> Result<bool> {
        if !self.opts.enable_gc || !self.idle_gc_due() {
            return Ok(false);
        }
        self.idle_pass.store(true, Ordering::Release);
        let done = match reveal() {
            Ok(false) => self.gc_one_idle(),
            other => other,
        };
        if matches!(done, Ok(false)) {
            self.idle_pass.store(false, Ordering::Release);
        }
        done
    }

    fn gc_one_picked(
        &self,
        pick: for<'a> fn(&'a Version, &Options) -> Vec<&'a BlobFileState>,
    ) -> Result<bool> {
        let _guard = self.gc_lock.lock();
        // The version the job reads from stays pinned (via `_pin`) until the
        // install, so none of its input files is deleted while it runs.
        let (job, _pin) = {
            let state = self.state.lock();
            if state.bg_error.is_some() || state.shutting_down {
                return Ok(false);
            }
            let v = state.versions.current();
            let picked = pick(&v, &self.opts);
            if picked.is_empty() {
                return Ok(false);
            }
            // One output per `blob_file_size` of live bytes, and one more for
            // the slack of cutting only between inputs.
            let live: u64 = picked
                .iter()
                .map(|b| b.meta.data_bytes.saturating_sub(b.dead_bytes))
                .sum();
            let outputs = (live / self.opts.blob_file_size + 1).min(picked.len() as u64);
            let job = GcJob {
                dir: self.dir.clone(),
                inputs: picked
                    .iter()
                    .map(|b| GcInput {
                        number: b.meta.number,
                        record_count: b.meta.record_count,
                        dead: b.dead.clone(),
                    })
                    .collect(),
                output_numbers: (0..outputs)
                    .map(|_| state.versions.new_file_number())
                    .collect(),
                output_file_size: self.opts.blob_file_size,
            };
            (job, v)
        };
        let ctx = GcContext {
            fs: self.background_fs.clone(),
            rate_limiter: self.rate_limiter.clone(),
        };
        let output = self.executor.execute_gc(&job, &ctx)?;
        self.install_gc(&job, output)?;
        Ok(true)
    }

    /// Installs a GC result: adds the outputs, retires the inputs with their
    /// lineage, and carries over dead marks that arrived while the job ran.
    fn install_gc(&self, job: &GcJob, output: GcOutput) -> Result<()> {
        let remove_outputs = || job.remove_outputs(&self.fs);
        // The outputs may come from another process or machine: they must
        // check before the inputs are retired for them. Read them before
        // taking the state lock.
        let readers = match job.open_outputs(&self.background_fs, &output) {
            Ok(r) => r,
            Err(e) => {
                remove_outputs();
                return Err(e);
            }
        };
        let mut state = self.state.lock();
        let v = state.versions.current();
        if job
            .inputs
            .iter()
            .any(|i| !v.blob_files.contains_key(&i.number))
        {
            // An input stopped being live while the job ran (nothing refers to
            // it any more): the outputs are not needed.
            drop(state);
            drop(readers);
            remove_outputs();
            return Ok(());
        }
        let mut edit = VersionEdit {
            last_sequence: Some(
                self.visible_seq
                    .load(Ordering::Acquire)
                    .max(state.versions.last_sequence),
            ),
            ..Default::default()
        };
        for (file, reader) in output.files.iter().zip(&readers) {
            let mut carried = DeadOrdinals {
                file: file.meta.number,
                ..Default::default()
            };
            for entry in &file.lineage {
                let Some(now) = v.blob_files.get(&entry.old_file) else {
                    continue;
                };
                for o in now.dead.iter().filter(|o| !entry.dead.contains(*o)) {
                    let new_o = entry.translate(o);
                    carried.ordinals.insert(new_o);
                    match reader.record_len(new_o) {
                        Ok(len) => carried.bytes += len,
                        Err(e) => {
                            drop(state);
                            remove_outputs();
                            return Err(e);
                        }
                    }
                }
            }
            let mut meta = file.meta.clone();
            meta.run_keys = run_keys_after_gc(&v, &file.lineage);
            edit.blob_files_added.push(meta);
            edit.relocations
                .extend(file.lineage.iter().map(|e| (file.meta.number, e.clone())));
            if !carried.ordinals.is_empty() {
                edit.dead_ordinals.push(carried);
            }
        }
        if let Err(e) = self.log_and_apply(&mut state, &mut edit) {
            // A refused edit wrote nothing, so its outputs are garbage; after
            // a failed manifest write a durable record may name them, and
            // the next open decides.
            let refused = matches!(e, Error::Internal(_)) && !state.versions.write_failed();
            drop(state);
            if refused {
                remove_outputs();
            }
            return Err(e);
        }
        Counters::add(&self.counters.gc_runs, 1);
        if output.ran_elsewhere {
            Counters::add(&self.counters.remote_gc_runs, 1);
        }
        Counters::add(&self.counters.gc_bytes_read, output.bytes_read);
        Counters::add(&self.counters.gc_bytes_written, output.bytes_written);
        Counters::add(
            &self.counters.gc_records_relocated,
            output.records_relocated,
        );
        self.finish_install(state);
        Ok(())
    }
}

/// The first and last key of a GC output that is still a sorted run: its
/// inputs (copied in lineage order, each in ordinal order) are all sorted
/// runs, each wholly after the one before. `None` otherwise.
fn run_keys_after_gc(v: &Version, lineage: &[LineageEntry]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut keys: Option<(Vec<u8>, Vec<u8>)> = None;
    for entry in lineage {
        let (first, last) = v.blob_files.get(&entry.old_file)?.meta.run_keys.as_ref()?;
        keys = match keys {
            None => Some((first.clone(), last.clone())),
            Some((start, end)) if end < *first => Some((start, last.clone())),
            Some(_) => return None,
        };
    }
    keys
}
