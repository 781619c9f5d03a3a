//! Ingesting files another store exported: added below all of this
//! store's data, so any version written here shadows them.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::Ordering;

use super::core::Shared;
use super::Db;
use crate::compaction::{CompactionJob, JobContext, KeyRange, Retention};
use crate::error::{Error, IoContext, Result};
use crate::format::internal_key::user_key;
use crate::format::version_edit::VersionEdit;
use crate::ingest::{check_files, CheckedFiles, ExportOptions, ExportedFile, ExportedKind};
use crate::options::NUM_LEVELS;
use crate::wal::table_file_name;

/// What [`Db::ingest_behind`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IngestReport {
    /// Tables ingested.
    pub tables: usize,
    /// Blob files ingested.
    pub blob_files: usize,
    /// Entries in the ingested tables.
    pub entries: u64,
    /// Bytes of the ingested files.
    pub bytes: u64,
    /// Tables of the last level the ingested tables were merged with
    /// (0: they were placed as they are).
    pub merged_with: usize,
}

impl Db {
    /// How this store lays out files it exports: its own table format,
    /// blob threshold, head size and file sizes.
    pub fn export_options(&self) -> ExportOptions {
        let o = &self.shared.opts;
        ExportOptions {
            table: self.shared.table_options(NUM_LEVELS - 1),
            blob_threshold: o.blob_threshold,
            blob_head_size: o.blob_head_size,
            blob_file_size: o.blob_file_size,
            target_file_size: o.target_file_size,
        }
    }

    /// Reserves `n` file numbers that this store will not use, for another
    /// store to write files under ([`crate::ingest::ExportWriter`]) that
    /// [`Db::ingest_behind`] then takes without renaming. Reservations
    /// last until the store closes.
    pub fn reserve_file_numbers(&self, n: u64) -> Range<u64> {
        let mut state = self.shared.state.lock();
        let start = state
            .versions
            .file_number_counter()
            .fetch_add(n, Ordering::SeqCst);
        state.reserved_numbers.push(start..start + n);
        start..start + n
    }

    /// Keeps every tombstone with a key in `[lo, hi]` (compaction would
    /// otherwise drop one at the last level, with nothing under it yet)
    /// until [`Db::unprotect_tombstones`] with the id returned: for a
    /// caller about to ingest files behind that range, whose entries those
    /// tombstones must hide. Compactions planned from now on keep them.
    pub fn protect_tombstones(&self, lo: &[u8], hi: &[u8]) -> u64 {
        let mut state = self.shared.state.lock();
        let id = state.next_protection;
        state.next_protection += 1;
        state.protected.push((id, lo.to_vec(), hi.to_vec()));
        id
    }

    /// Ends protection `id` ([`Db::protect_tombstones`]).
    pub fn unprotect_tombstones(&self, id: u64) {
        self.shared
            .state
            .lock()
            .protected
            .retain(|(p, _, _)| *p != id);
    }

    /// Gives back file numbers reserved with [`Db::reserve_file_numbers`]
    /// that no ingest will use (they are never handed out again either).
    pub fn release_file_numbers(&self, numbers: &Range<u64>) {
        self.shared
            .state
            .lock()
            .reserved_numbers
            .retain(|r| r != numbers);
    }

    /// Adds `files` (in directory `staging`, on this store's file system,
    /// numbered from a reservation of this store) below all data: every
    /// entry is at sequence number 0, so a version of the same key written
    /// here, before or after, shadows it, and a key deleted here stays
    /// deleted as long as its tombstone lives. (Keys this store deleted
    /// whose tombstones compaction already dropped come back: a caller that
    /// deletes keys in `range` must write their tombstones again first,
    /// under [`Db::protect_tombstones`].)
    ///
    /// The files are checked whole first ([`check_files`]): a damaged or
    /// foreign file is refused, named with the offset, and nothing changes.
    /// Then they are moved into the store's directory and installed in the
    /// last level in one manifest record; where last-level tables overlap
    /// them, they are merged with those tables instead. Snapshots taken
    /// before see the ingested keys too.
    pub fn ingest_behind(
        &self,
        staging: &Path,
        files: &[ExportedFile],
        range: &KeyRange,
    ) -> Result<IngestReport> {
        self.shared.check_open()?;
        let checked = check_files(&self.shared.fs, staging, files, range)?;
        self.shared.ingest_behind(staging, files, checked)
    }

    /// Runs [`check_files`] on `files` in `staging` with this store's file
    /// system: what [`Db::ingest_checked`] takes.
    pub fn check_ingest(
        &self,
        staging: &Path,
        files: &[ExportedFile],
        range: &KeyRange,
    ) -> Result<CheckedFiles> {
        check_files(&self.shared.fs, staging, files, range)
    }

    /// The file system the store lives on (where files to ingest must be
    /// staged, so they can be renamed into the store).
    pub fn file_system(&self) -> &crate::io::FsRef {
        &self.shared.fs
    }

    /// [`Db::ingest_behind`] of files [`check_files`] passed already (the
    /// check reads every byte; a caller may run it before it holds up
    /// anything else). `checked` must be what the check returned for these
    /// files, unchanged since.
    pub fn ingest_checked(
        &self,
        staging: &Path,
        files: &[ExportedFile],
        checked: CheckedFiles,
    ) -> Result<IngestReport> {
        self.shared.check_open()?;
        self.shared.ingest_behind(staging, files, checked)
    }
}

impl Shared {
    fn ingest_behind(
        &self,
        staging: &Path,
        files: &[ExportedFile],
        checked: CheckedFiles,
    ) -> Result<IngestReport> {
        if !files.iter().any(|f| f.kind == ExportedKind::Table) {
            return Err(Error::InvalidArgument("nothing to ingest: no table".into()));
        }
        {
            let state = self.state.lock();
            let mut seen = BTreeSet::new();
            for f in files {
                if !state.reserved_numbers.iter().any(|r| r.contains(&f.number)) {
                    return Err(Error::InvalidArgument(format!(
                        "file number {} was not reserved by this store for an ingest",
                        f.number
                    )));
                }
                if !seen.insert(f.number) {
                    return Err(Error::InvalidArgument(format!(
                        "file number {} listed twice",
                        f.number
                    )));
                }
            }
        }
        let mut moved = Vec::new();
        let res = (|| {
            for f in files {
                let from = staging.join(f.file_name());
                let to = self.dir.join(f.file_name());
                self.fs.rename(&from, &to).ctx(&to)?;
                moved.push(to);
            }
            self.fs.sync_dir(&self.dir).ctx(&self.dir)
        })();
        if let Err(e) = res {
            self.remove_paths(&moved);
            return Err(e);
        }
        let _guard = self.compaction_lock.lock();
        let (version, ctx) = {
            let state = self.state.lock();
            if let Some(e) = state.bg_error.clone() {
                drop(state);
                self.remove_paths(&moved);
                return Err(Error::Poisoned(e));
            }
            let ctx = JobContext {
                fs: self.background_fs.clone(),
                next_file_number: state.versions.file_number_counter(),
                rate_limiter: self.rate_limiter.clone(),
            };
            (state.versions.current(), ctx)
        };
        let bottom = NUM_LEVELS - 1;
        let (Some(first), Some(last)) = (checked.tables.first(), checked.tables.last()) else {
            return Err(Error::Internal("checked ingest without tables".into()));
        };
        let overlapping = version.overlapping(
            bottom,
            Some(user_key(&first.smallest)),
            Some(user_key(&last.largest)),
        );
        let mut edit = VersionEdit {
            blob_files_added: checked.blobs.clone(),
            ..VersionEdit::default()
        };
        let report = IngestReport {
            tables: checked.tables.len(),
            blob_files: checked.blobs.len(),
            entries: checked.tables.iter().map(|t| t.num_entries).sum(),
            bytes: checked.tables.iter().map(|t| t.file_size).sum::<u64>()
                + checked.blobs.iter().map(|b| b.file_size).sum::<u64>(),
            merged_with: overlapping.len(),
        };
        let mut dead_refs = Vec::new();
        if overlapping.is_empty() {
            for t in &checked.tables {
                edit.new_files.push((bottom as u32, t.clone()));
            }
        } else {
            // Merge with the last-level tables in the span: entries at
            // sequence 0 sort after every version of their key written
            // here, so the merge keeps whichever is newest.
            let mut live_blobs: BTreeSet<u64> = version.blob_files.keys().copied().collect();
            live_blobs.extend(checked.blobs.iter().map(|b| b.number));
            let job = CompactionJob {
                dir: self.dir.clone(),
                inputs: overlapping
                    .iter()
                    .map(|f| (**f).clone())
                    .chain(checked.tables.iter().cloned())
                    .collect(),
                output_level: bottom,
                retention: Retention::new(self.snapshots.all()),
                deeper_ranges: Vec::new(),
                target_file_size: self.opts.target_file_size,
                table_options: self.table_options(bottom),
                // None: a filter that asks the store about a key would not
                // see the ingested entries yet (they are not installed).
                filter: None,
                live_blobs,
                lineage: version.relocations.clone(),
                source_level: bottom,
                score: 0.0,
                range: KeyRange::default(),
                move_values: None,
            };
            let out = match job.run(&ctx) {
                Ok(o) => o,
                Err(e) => {
                    self.remove_paths(&moved);
                    return Err(e);
                }
            };
            for f in &overlapping {
                edit.deleted_files.push((bottom as u32, f.number));
            }
            for f in out.files {
                edit.new_files.push((bottom as u32, f));
            }
            dead_refs = out.dead_refs;
        }
        drop(version);
        // On failure the files stay: the manifest record naming them may be
        // durable. The next open removes them if it is not.
        self.install(edit, true, &dead_refs)?;
        if report.merged_with > 0 {
            // The ingested tables went into the merge's outputs.
            let tables: Vec<_> = checked
                .tables
                .iter()
                .map(|t| self.dir.join(table_file_name(t.number)))
                .collect();
            self.remove_paths(&tables);
        }
        {
            let mut state = self.state.lock();
            state
                .reserved_numbers
                .retain(|r| !files.iter().any(|f| r.contains(&f.number)));
        }
        Ok(report)
    }

    fn remove_paths(&self, paths: &[std::path::PathBuf]) {
        for p in paths {
            let _ = self.fs.remove_file(p);
        }
    }
}
