//! Scheduling blob GC and installing its results.

use std::sync::atomic::Ordering;

use super::core::Shared;
use super::stats::Counters;
use crate::blob::BlobReader;
use crate::error::Result;
use crate::format::version_edit::{DeadOrdinals, VersionEdit};
use crate::gc::{picker, GcContext, GcInput, GcJob, GcOutput};

impl Shared {
    /// Picks blob files over the garbage ratio, collects them into one new
    /// file and installs it. Returns whether a job ran.
    pub fn gc_one(&self) -> Result<bool> {
        let _guard = self.gc_lock.lock();
        // The version the job reads from stays pinned (via `_pin`) until the
        // install, so none of its input files is deleted while it runs.
        let (job, _pin) = {
            let state = self.state.lock();
            if state.bg_error.is_some() || state.shutting_down {
                return Ok(false);
            }
            let v = state.versions.current();
            let inputs: Vec<GcInput> = picker::pick(&v, &self.opts)
                .into_iter()
                .map(|b| GcInput {
                    number: b.meta.number,
                    record_count: b.meta.record_count,
                    dead: b.dead.clone(),
                })
                .collect();
            if inputs.is_empty() {
                return Ok(false);
            }
            let job = GcJob {
                dir: self.dir.clone(),
                inputs,
                output_number: state.versions.new_file_number(),
            };
            (job, v)
        };
        let ctx = GcContext {
            fs: self.fs.clone(),
            rate_limiter: self.rate_limiter.clone(),
        };
        let output = self.executor.execute_gc(&job, &ctx)?;
        self.install_gc(&job, output)?;
        Ok(true)
    }

    /// Installs a GC result: adds the output, retires the inputs with their
    /// lineage, and carries over dead marks that arrived while the job ran.
    fn install_gc(&self, job: &GcJob, output: GcOutput) -> Result<()> {
        let out_path = self
            .dir
            .join(crate::wal::blob_file_name(output.meta.number));
        // The output may come from another process or machine: its index
        // must check before the inputs are retired for it. Read it before
        // taking the state lock.
        let reader = match BlobReader::open(&self.fs, &out_path, output.meta.number) {
            Ok(r) => r,
            Err(e) => {
                let _ = self.fs.remove_file(&out_path);
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
            // it any more): the output is not needed.
            drop(state);
            drop(reader);
            let _ = self.fs.remove_file(&out_path);
            return Ok(());
        }
        let mut carried = DeadOrdinals {
            file: output.meta.number,
            ..Default::default()
        };
        for entry in &output.lineage {
            let Some(now) = v.blob_files.get(&entry.old_file) else {
                continue;
            };
            for o in now.dead.iter().filter(|o| !entry.dead.contains(*o)) {
                let new_o = entry.translate(o);
                carried.ordinals.insert(new_o);
                carried.bytes += reader.record_len(new_o)?;
            }
        }
        let mut edit = VersionEdit {
            blob_files_added: vec![output.meta.clone()],
            relocations: output
                .lineage
                .iter()
                .map(|e| (output.meta.number, e.clone()))
                .collect(),
            last_sequence: Some(
                self.visible_seq
                    .load(Ordering::Acquire)
                    .max(state.versions.last_sequence),
            ),
            ..Default::default()
        };
        if !carried.ordinals.is_empty() {
            edit.dead_ordinals.push(carried);
        }
        self.log_and_apply(&mut state, &mut edit)?;
        Counters::add(&self.counters.gc_runs, 1);
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
