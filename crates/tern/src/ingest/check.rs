//! Checking files another store wrote before they join this one: every
//! checksum, every reference, and the rules of an ingest behind all data.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{ExportedFile, ExportedKind};
use crate::blob::BlobReader;
use crate::compaction::KeyRange;
use crate::error::{Error, Result};
use crate::format::blob::BlobRef;
use crate::format::internal_key::{self, ValueKind};
use crate::io::FsRef;
use crate::iter::InternalIterator;
use crate::sst::Table;
use crate::version::{BlobMeta, FileMeta};

/// Files that passed [`check_files`], with the metadata the manifest
/// records for them (computed here, never taken from the sender).
#[derive(Debug, Clone, Default)]
pub struct CheckedFiles {
    /// Tables, in key order, not overlapping one another.
    pub tables: Vec<FileMeta>,
    /// Blob files, each referred to by some table.
    pub blobs: Vec<BlobMeta>,
}

/// Reads every file in `dir` named by `files` whole and checks that:
/// each table and blob file is intact (checksums, key order, filter); every
/// table entry is a value or blob reference at sequence number 0, inside
/// `range`; every reference reaches a record of one of the blob files (at
/// the offset the file's index gives); every blob file is referred to and
/// carries no lineage; tables do not overlap.
pub fn check_files(
    fs: &FsRef,
    dir: &Path,
    files: &[ExportedFile],
    range: &KeyRange,
) -> Result<CheckedFiles> {
    let mut readers = BTreeMap::new();
    // Per blob file, what each record holds: its key and value size (one
    // sequential pass that checks every checksum, instead of a read per
    // reference).
    let mut records: BTreeMap<u64, Vec<(Vec<u8>, usize)>> = BTreeMap::new();
    for f in files.iter().filter(|f| f.kind == ExportedKind::Blob) {
        let path = dir.join(f.file_name());
        let r = BlobReader::open(fs, &path, f.number)?;
        let mut recs = Vec::with_capacity(usize::try_from(r.record_count()).unwrap_or(0));
        r.walk_records(
            |_| false,
            |ordinal, rec| {
                if rec.seq != 0 || ordinal as usize != recs.len() {
                    return Err(Error::corruption(
                        &path,
                        r.offset_of(ordinal).unwrap_or(0),
                        "an ingested blob record out of order or at a sequence number other than 0",
                    ));
                }
                recs.push((rec.key.to_vec(), rec.value.len()));
                Ok(())
            },
        )?;
        records.insert(f.number, recs);
        if !r.lineage()?.is_empty() {
            return Err(Error::corruption(
                &path,
                0,
                "an ingested blob file carries lineage",
            ));
        }
        if readers.insert(f.number, r).is_some() {
            return Err(Error::InvalidArgument(format!(
                "blob file {} listed twice",
                f.number
            )));
        }
    }
    let mut out = CheckedFiles::default();
    let mut referenced = BTreeSet::new();
    for f in files.iter().filter(|f| f.kind == ExportedKind::Table) {
        let path = dir.join(f.file_name());
        let table = Table::open(fs, &path, f.number, None)?;
        table.verify()?;
        let mut blob_files = BTreeSet::new();
        let mut it = table.iter();
        it.seek_to_first();
        let mut first: Option<Vec<u8>> = None;
        let mut last = Vec::new();
        let mut entries = 0u64;
        while it.valid() {
            let at = it.source().map_or(0, |(_, off)| off);
            let bad = |why: &str| Error::corruption(&path, at, why);
            let key = internal_key::parse(it.key()).map_err(|e| bad(&e.to_string()))?;
            if key.seq != 0 {
                return Err(bad("an ingested entry has a sequence number other than 0"));
            }
            if !range.contains(key.user_key) {
                return Err(bad("an ingested key lies outside the range allowed"));
            }
            match key.kind {
                ValueKind::Value => {}
                ValueKind::BlobRef => {
                    let (r, _head) = BlobRef::decode_with_head(it.value())
                        .map_err(|e| bad(&format!("bad blob reference: {e}")))?;
                    let reader = readers.get(&r.file).ok_or_else(|| {
                        bad(&format!(
                            "a reference names blob file {}, not ingested",
                            r.file
                        ))
                    })?;
                    if u64::from(r.ordinal) >= reader.record_count()
                        || reader.offset_of(r.ordinal)? != r.offset
                    {
                        return Err(bad("a blob reference reaches no record"));
                    }
                    let rec = records.get(&r.file).and_then(|v| v.get(r.ordinal as usize));
                    if rec.is_none_or(|(k, len)| {
                        k.as_slice() != key.user_key || *len != r.size as usize
                    }) {
                        return Err(bad("a blob reference reaches another key's record"));
                    }
                    blob_files.insert(r.file);
                }
                _ => return Err(bad("an ingested entry is neither a value nor a reference")),
            }
            if first.is_none() {
                first = Some(it.key().to_vec());
            }
            last.clear();
            last.extend_from_slice(it.key());
            entries += 1;
            it.next();
        }
        it.status()?;
        let Some(smallest) = first else {
            return Err(Error::corruption(&path, 0, "an ingested table is empty"));
        };
        referenced.extend(blob_files.iter().copied());
        out.tables.push(FileMeta {
            number: f.number,
            file_size: table.file_size(),
            smallest,
            largest: last,
            smallest_seq: 0,
            largest_seq: 0,
            num_entries: entries,
            num_deletions: 0,
            blob_files: blob_files.into_iter().collect(),
        });
    }
    out.tables
        .sort_by(|a, b| internal_key::compare(&a.smallest, &b.smallest));
    for pair in out.tables.windows(2) {
        if internal_key::user_key(&pair[0].largest) >= internal_key::user_key(&pair[1].smallest) {
            return Err(Error::InvalidArgument(format!(
                "ingested tables {} and {} overlap",
                pair[0].number, pair[1].number
            )));
        }
    }
    for (number, r) in &readers {
        if !referenced.contains(number) {
            return Err(Error::InvalidArgument(format!(
                "ingested blob file {number} is referred to by no table"
            )));
        }
        out.blobs.push(BlobMeta {
            number: *number,
            file_size: fs.file_size(r.path()).map_err(|e| Error::io(r.path(), e))?,
            record_count: r.record_count(),
            data_bytes: r.data_bytes(),
            run_keys: None,
        });
    }
    Ok(out)
}

/// Calls `f` with every entry of exported table `file` in `dir`, in key
/// order: the user key, and the value, or for a separated value the head
/// kept beside its reference (flagged `true`), unless `whole` asks for the
/// key's whole value (then read from its blob file in `dir`). For reading
/// what a checked table holds.
pub fn for_each_entry(
    fs: &FsRef,
    dir: &Path,
    file: &ExportedFile,
    whole: impl Fn(&[u8]) -> Result<bool>,
    mut f: impl FnMut(&[u8], &[u8], bool) -> Result<()>,
) -> Result<()> {
    let path = dir.join(file.file_name());
    let table = Table::open(fs, &path, file.number, None)?;
    let mut readers: BTreeMap<u64, BlobReader> = BTreeMap::new();
    let mut it = table.iter();
    it.seek_to_first();
    while it.valid() {
        let at = it.source().map_or(0, |(_, off)| off);
        let key = internal_key::parse(it.key())
            .map_err(|e| Error::corruption(&path, at, e.to_string()))?;
        match key.kind {
            ValueKind::BlobRef => {
                let (r, head) = BlobRef::decode_with_head(it.value()).map_err(|e| {
                    Error::corruption(&path, at, format!("bad blob reference: {e}"))
                })?;
                if !whole(key.user_key)? {
                    f(key.user_key, head, true)?;
                    it.next();
                    continue;
                }
                let reader = match readers.entry(r.file) {
                    std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::btree_map::Entry::Vacant(v) => {
                        let name = ExportedFile {
                            kind: ExportedKind::Blob,
                            number: r.file,
                        }
                        .file_name();
                        v.insert(BlobReader::open(fs, &dir.join(name), r.file)?)
                    }
                };
                let rec = reader.read_ordinal(r.ordinal)?;
                f(key.user_key, &rec.value, false)?;
            }
            _ => f(key.user_key, it.value(), false)?,
        }
        it.next();
    }
    it.status()
}
