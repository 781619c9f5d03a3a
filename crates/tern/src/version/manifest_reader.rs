//! Reading a manifest edit by edit: the one loop recovery, `tern check` and
//! `tern inspect` share.

use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::log_record::RECORD_HEADER_LEN;
use crate::format::version_edit::VersionEdit;
use crate::io::FileSystem;
use crate::wal::{manifest_file_name, read_current, LogKind, LogReader};

/// The manifest `CURRENT` in `dir` names: its path and bytes.
pub(crate) fn read_current_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<(u64, PathBuf, Vec<u8>)> {
    let number = read_current(fs, dir)?.ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{} holds no Tern store (no CURRENT file)",
            dir.display()
        ))
    })?;
    let path = dir.join(manifest_file_name(number));
    let data = fs.read_all(&path).ctx(&path)?;
    Ok((number, path, data))
}

/// The edits of one manifest, in order, each with its record's offset.
pub(crate) struct ManifestReader {
    reader: LogReader,
    path: PathBuf,
    records: u64,
    ended: bool,
}

impl ManifestReader {
    /// Reads the manifest at `path` from `data`; fails if its header does
    /// not check.
    pub(crate) fn new(path: &Path, data: Vec<u8>) -> Result<Self> {
        Ok(ManifestReader {
            reader: LogReader::new(data, path.to_path_buf(), LogKind::Manifest)?,
            path: path.to_path_buf(),
            records: 0,
            ended: false,
        })
    }

    /// The next edit and the offset of its record; `None` at the end. A
    /// record that fails its checksum is returned as an error and ends the
    /// manifest (the framing is lost past it); a record that does not
    /// decode is an error naming the byte at fault, and reading goes on.
    pub(crate) fn next_edit(&mut self) -> Option<Result<(u64, VersionEdit)>> {
        if self.ended {
            return None;
        }
        let rec = match self.reader.next_record() {
            Ok(Some(rec)) => rec,
            Ok(None) => {
                self.ended = true;
                return None;
            }
            Err(e) => {
                self.ended = true;
                return Some(Err(e));
            }
        };
        self.records += 1;
        let decoded = VersionEdit::decode(rec);
        let offset = self.reader.last_record_offset();
        Some(
            decoded
                .map(|edit| (offset, edit))
                .map_err(|e| e.in_file(&self.path, offset + RECORD_HEADER_LEN as u64)),
        )
    }

    /// Records read so far (each one edit, decoded or not).
    pub(crate) fn records(&self) -> u64 {
        self.records
    }

    /// Offset of an incomplete last record (an interrupted write, dropped).
    pub(crate) fn torn_tail(&self) -> Option<u64> {
        self.reader.torn_tail()
    }
}
