//! The manifest: a log of version edits, and the `CURRENT` pointer to it.
//!
//! Every change to the LSM shape is one edit, appended and fsynced before it
//! takes effect. At open and whenever the manifest outgrows
//! `max_manifest_file_size`, a new manifest starts with a snapshot of the
//! whole version, and `CURRENT` is switched to it by atomic rename followed by
//! a directory fsync. See `docs/format/manifest.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::builder::VersionBuilder;
use super::manifest_reader::read_current_manifest;
use super::replay::{replay_manifest, OnProblem};
use super::Version;
use crate::error::{Error, IoContext, Result};
use crate::format::version_edit::VersionEdit;
use crate::io::FsRef;
use crate::options::NUM_LEVELS;
use crate::wal::{manifest_file_name, set_current, LogKind, LogWriter};

/// An edit retiring every blob file and lineage entry of `version` that no
/// table can reach (through lineage) any more.
fn unreachable_blobs(version: &Version) -> VersionEdit {
    fn unreachable<V>(files: &BTreeMap<u64, V>, reachable: &BTreeSet<u64>) -> Vec<u64> {
        files
            .keys()
            .filter(|n| !reachable.contains(n))
            .copied()
            .collect()
    }
    let reachable = version.referenced_blob_files();
    VersionEdit {
        blob_files_deleted: unreachable(&version.blob_files, &reachable),
        relocations_dropped: unreachable(&version.relocations, &reachable),
        ..Default::default()
    }
}

/// `base` with `edit` applied, or [`Error::Internal`] when the edit does
/// not apply or the result breaks an invariant recovery checks (with
/// `next_file_number`, the one the edit records): a bug in whoever made the
/// edit, caught before anything is logged.
fn apply(base: &Version, edit: &VersionEdit) -> Result<Version> {
    let mut builder = VersionBuilder::new(base);
    if let Some(e) = builder.apply(edit).into_iter().next() {
        return Err(Error::Internal(format!("version edit does not apply: {e}")));
    }
    Ok(builder.build())
}

/// `version`, if it keeps every invariant ([`Version::check_invariants`]).
fn checked(version: Version, next_file_number: u64) -> Result<Version> {
    match version
        .check_invariants(Some(next_file_number))
        .into_iter()
        .next()
    {
        Some(e) => Err(Error::Internal(format!(
            "version edit breaks the version: {e}"
        ))),
        None => Ok(version),
    }
}

/// What recovery found in the manifest.
#[derive(Debug, Clone, Copy)]
pub struct RecoveredState {
    /// Manifest that was replayed.
    pub manifest_number: u64,
    /// Edits replayed.
    pub edits: u64,
}

/// The current version plus the counters persisted with it.
pub struct VersionSet {
    dir: PathBuf,
    fs: FsRef,
    current: Arc<Version>,
    next_file_number: Arc<AtomicU64>,
    /// WALs numbered below this hold only flushed data.
    pub log_number: u64,
    /// Highest sequence number known persisted in tables.
    pub last_sequence: u64,
    /// Where the next compaction of each level starts (round robin).
    pub compact_pointers: [Vec<u8>; NUM_LEVELS],
    manifest: Option<LogWriter>,
    manifest_number: u64,
    max_manifest_size: u64,
    live: Vec<Weak<Version>>,
    /// Set once a manifest write was attempted and failed: its outcome is
    /// unknown (the record may be durable, partly written, or absent), so no
    /// record may follow it. Only a reopen clears it.
    failed: Option<String>,
}

impl VersionSet {
    /// An empty set for a new store; call [`VersionSet::log_and_apply`] to
    /// write its first manifest.
    pub fn new(fs: FsRef, dir: &Path, max_manifest_size: u64) -> Self {
        VersionSet {
            dir: dir.to_path_buf(),
            fs,
            current: Arc::new(Version::default()),
            next_file_number: Arc::new(AtomicU64::new(2)),
            log_number: 0,
            last_sequence: 0,
            compact_pointers: Default::default(),
            manifest: None,
            manifest_number: 0,
            max_manifest_size,
            live: Vec::new(),
            failed: None,
        }
    }

    /// Replays the manifest named by `CURRENT`.
    pub fn recover(
        fs: FsRef,
        dir: &Path,
        max_manifest_size: u64,
    ) -> Result<(Self, RecoveredState)> {
        let (manifest_number, path, data) = read_current_manifest(fs.as_ref(), dir)?;
        let replayed = replay_manifest(&path, data, OnProblem::Fail)?;
        if let Some(at) = replayed.torn_tail {
            tracing::warn!(
                "tern: dropped the incomplete last record of {} at offset {at} (an interrupted write)",
                path.display()
            );
        }
        let next_file = replayed
            .next_file_number
            .ok_or_else(|| Error::corruption(&path, 0, "manifest has no next-file-number"))?;
        let mut set = VersionSet::new(fs, dir, max_manifest_size);
        set.log_number = replayed.log_number;
        set.last_sequence = replayed.last_sequence;
        set.compact_pointers = replayed.compact_pointers;
        set.next_file_number
            .store(next_file.max(manifest_number + 1), Ordering::SeqCst);
        set.current = Arc::new(replayed.version);
        set.manifest_number = manifest_number;
        Ok((
            set,
            RecoveredState {
                manifest_number,
                edits: replayed.records,
            },
        ))
    }

    /// The current version.
    pub fn current(&self) -> Arc<Version> {
        self.current.clone()
    }

    /// Allocates a new file number.
    pub fn new_file_number(&self) -> u64 {
        self.next_file_number.fetch_add(1, Ordering::SeqCst)
    }

    /// Makes sure future file numbers are above `number` (files found on
    /// disk whose numbers the manifest never recorded, e.g. WALs created
    /// after its last edit).
    pub fn mark_file_number_used(&self, number: u64) {
        self.next_file_number
            .fetch_max(number + 1, Ordering::SeqCst);
    }

    /// The shared file-number counter, for jobs that allocate their own outputs.
    pub fn file_number_counter(&self) -> Arc<AtomicU64> {
        self.next_file_number.clone()
    }

    /// Number of the live manifest.
    pub fn manifest_number(&self) -> u64 {
        self.manifest_number
    }

    /// Whether a manifest write failed: its outcome is unknown, so every
    /// later edit is refused until the store is reopened.
    pub fn write_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Logs `edit` durably as one record, then makes the resulting version
    /// current. Blob files and lineage entries that no table can reach any
    /// more once `edit` applies are retired in the same record, so an
    /// install is never split across two writes.
    ///
    /// An edit that does not apply, or that breaks an invariant, is
    /// [`Error::Internal`] and changes nothing. An I/O error
    /// means the outcome is unknown: the record may or may not be durable.
    /// Nothing changes in memory, every later call fails, and the caller must
    /// not delete any file the edit names (the next open decides which files
    /// are orphans).
    pub fn log_and_apply(&mut self, edit: &mut VersionEdit) -> Result<()> {
        if let Some(e) = &self.failed {
            return Err(Error::Poisoned(format!(
                "an earlier manifest write failed ({e}); reopen the store"
            )));
        }
        let next_file_number = self.next_file_number.load(Ordering::SeqCst);
        edit.next_file_number = Some(next_file_number);
        if edit.last_sequence.is_none() {
            edit.last_sequence = Some(self.last_sequence);
        }
        let mut version = apply(&self.current, edit)?;
        let cleanup = unreachable_blobs(&version);
        if !cleanup.is_empty() {
            version = apply(&version, &cleanup)?;
        }
        // One check of what gets installed: the cleanup only removes blob
        // files and lineage no table reaches. A refused edit is left as the
        // caller gave it.
        let version = checked(version, next_file_number)?;
        edit.blob_files_deleted.extend(cleanup.blob_files_deleted);
        edit.relocations_dropped.extend(cleanup.relocations_dropped);

        if let Err(e) = self.write_edit(&version, edit) {
            self.failed = Some(e.to_string());
            return Err(e);
        }
        if let Some(n) = edit.log_number {
            self.log_number = n;
        }
        if let Some(n) = edit.last_sequence {
            self.last_sequence = n;
        }
        for (level, key) in &edit.compact_pointers {
            if let Some(p) = self.compact_pointers.get_mut(*level as usize) {
                p.clone_from(key);
            }
        }
        self.live.retain(|w| w.strong_count() > 0);
        self.live.push(Arc::downgrade(&self.current));
        self.current = Arc::new(version);
        Ok(())
    }

    /// Appends `edit` to the live manifest, or starts a new one holding
    /// `version` when there is none or it outgrew its limit.
    fn write_edit(&mut self, version: &Version, edit: &VersionEdit) -> Result<()> {
        let roll = match &self.manifest {
            None => true,
            Some(m) => m.len() >= self.max_manifest_size,
        };
        if roll {
            self.write_new_manifest(version, edit)?;
        } else if let Some(m) = self.manifest.as_mut() {
            let path = self.dir.join(manifest_file_name(self.manifest_number));
            // New files named in the edit must be durable in the directory first.
            self.fs.sync_dir(&self.dir).ctx(&self.dir)?;
            m.add_record(&edit.encode()).ctx(&path)?;
            m.sync().ctx(&path)?;
        }
        Ok(())
    }

    fn write_new_manifest(&mut self, version: &Version, edit: &VersionEdit) -> Result<()> {
        let number = self.new_file_number();
        let path = self.dir.join(manifest_file_name(number));
        let file = self.fs.create(&path).ctx(&path)?;
        let mut writer = LogWriter::new(file, LogKind::Manifest).ctx(&path)?;
        let mut snapshot = VersionEdit {
            log_number: Some(edit.log_number.unwrap_or(self.log_number)),
            next_file_number: Some(self.next_file_number.load(Ordering::SeqCst)),
            last_sequence: edit.last_sequence.or(Some(self.last_sequence)),
            ..Default::default()
        };
        for (level, files) in version.levels.iter().enumerate() {
            for f in files {
                snapshot.new_files.push((level as u32, (**f).clone()));
            }
        }
        for b in version.blob_files.values() {
            snapshot.blob_files_added.push(b.meta.clone());
            if !b.dead.is_empty() {
                snapshot
                    .dead_ordinals
                    .push(crate::format::version_edit::DeadOrdinals {
                        file: b.meta.number,
                        ordinals: b.dead.clone(),
                        bytes: b.dead_bytes,
                    });
            }
        }
        for r in version.relocations.values() {
            snapshot.relocations.push((r.new_file, r.entry.clone()));
        }
        snapshot
            .tier_added
            .extend(version.tier.values().map(|t| (**t).clone()));
        for (level, key) in self.compact_pointers.iter().enumerate() {
            if !key.is_empty() {
                snapshot.compact_pointers.push((level as u32, key.clone()));
            }
        }
        snapshot
            .compact_pointers
            .extend(edit.compact_pointers.iter().cloned());
        writer.add_record(&snapshot.encode()).ctx(&path)?;
        writer.sync().ctx(&path)?;
        // The new manifest and the files its edit names must be durable in
        // the directory before `CURRENT` names it: a file system may keep
        // the rename and lose entries made before it.
        self.fs.sync_dir(&self.dir).ctx(&self.dir)?;
        set_current(self.fs.as_ref(), &self.dir, number)?;
        let old = std::mem::replace(&mut self.manifest_number, number);
        self.manifest = Some(writer);
        if old != 0 && old != number {
            let old_path = self.dir.join(manifest_file_name(old));
            // Best effort: an old manifest left behind is removed at next open.
            let _ = self.fs.remove_file(&old_path);
        }
        Ok(())
    }

    /// File numbers referenced by the current version or any version a
    /// reader still holds.
    pub fn live_files(&mut self) -> std::collections::HashSet<u64> {
        self.live.retain(|w| w.strong_count() > 0);
        let mut set: std::collections::HashSet<u64> = self.current.file_numbers().collect();
        for v in self.live.iter().filter_map(Weak::upgrade) {
            set.extend(v.file_numbers());
        }
        set
    }
}
