//! Replaying a manifest into a version: the one path both recovery
//! ([`VersionSet::recover`](super::VersionSet::recover)) and `tern check`
//! take, so the two cannot disagree about which manifests are sound.

use std::collections::BTreeMap;
use std::path::Path;

use super::builder::VersionBuilder;
use super::manifest_reader::ManifestReader;
use super::Version;
use crate::error::{Error, Result};
use crate::options::NUM_LEVELS;

/// What to do with a record that is damaged or does not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnProblem {
    /// Stop at the first one and return it (recovery).
    Fail,
    /// Skip what does not apply, collect every problem and go on (check).
    Collect,
}

/// The state a manifest describes.
#[derive(Debug)]
pub struct Replayed {
    /// The version the edits build.
    pub version: Version,
    /// WALs numbered below this hold only flushed data.
    pub log_number: u64,
    /// The last next-file-number recorded, if any was.
    pub next_file_number: Option<u64>,
    /// Highest sequence number recorded as persisted in tables.
    pub last_sequence: u64,
    /// Where the next compaction of each level starts.
    pub compact_pointers: [Vec<u8>; NUM_LEVELS],
    /// Records read (each one version edit).
    pub records: u64,
    /// Offset of an incomplete last record (an interrupted write), dropped.
    pub torn_tail: Option<u64>,
    /// With [`OnProblem::Collect`]: every corruption found, in file order,
    /// each with the manifest's path and the offset of the record at fault
    /// (0 for the version as a whole).
    pub problems: Vec<Error>,
}

/// Replays the manifest at `path` (its bytes in `data`).
///
/// A record that fails its checksum ends the replay (the framing is lost
/// past it); a record that does not decode or an edit that does not apply
/// to the version before it, a missing next-file-number and a version that
/// breaks the level or lineage invariants are corruptions. With
/// [`OnProblem::Fail`] the first of them is returned as the error; with
/// [`OnProblem::Collect`] they are gathered in [`Replayed::problems`] in the
/// same order, so the first problem check reports is the error recovery
/// returns. Either way an unreadable file header is an error.
pub fn replay_manifest(path: &Path, data: Vec<u8>, on: OnProblem) -> Result<Replayed> {
    let mut manifest = ManifestReader::new(path, data)?;
    let mut builder = VersionBuilder::new(&Version::default());
    let mut out = Replayed {
        version: Version::default(),
        log_number: 0,
        next_file_number: None,
        last_sequence: 0,
        compact_pointers: Default::default(),
        records: 0,
        torn_tail: None,
        problems: Vec::new(),
    };
    // Offset of the edit that added each lineage entry, to name it when the
    // chain turns out broken.
    let mut lineage_offsets: BTreeMap<u64, u64> = BTreeMap::new();
    let problem = |e: Error, problems: &mut Vec<Error>| match on {
        OnProblem::Fail => Err(e),
        OnProblem::Collect => {
            problems.push(e);
            Ok(())
        }
    };
    while let Some(next) = manifest.next_edit() {
        let (offset, edit) = match next {
            Ok(next) => next,
            Err(e) => {
                problem(e, &mut out.problems)?;
                continue;
            }
        };
        for e in builder.apply(&edit) {
            problem(
                Error::corruption(path, offset, e.to_string()),
                &mut out.problems,
            )?;
        }
        for (_, entry) in &edit.relocations {
            lineage_offsets.insert(entry.old_file, offset);
        }
        for n in &edit.relocations_dropped {
            lineage_offsets.remove(n);
        }
        if let Some(n) = edit.log_number {
            out.log_number = n;
        }
        if let Some(n) = edit.next_file_number {
            out.next_file_number = Some(n);
        }
        if let Some(n) = edit.last_sequence {
            out.last_sequence = n;
        }
        for (level, key) in &edit.compact_pointers {
            if let Some(p) = out.compact_pointers.get_mut(*level as usize) {
                p.clone_from(key);
            }
        }
    }
    out.records = manifest.records();
    out.torn_tail = manifest.torn_tail();
    if out.next_file_number.is_none() {
        problem(
            Error::corruption(path, 0, "manifest has no next-file-number"),
            &mut out.problems,
        )?;
    }
    out.version = builder.build();
    for e in out.version.check_invariants(out.next_file_number) {
        let offset = e
            .lineage_of()
            .and_then(|old| lineage_offsets.get(&old).copied())
            .unwrap_or(0);
        let e = Error::corruption(path, offset, format!("inconsistent version: {e}"));
        problem(e, &mut out.problems)?;
    }
    Ok(out)
}
