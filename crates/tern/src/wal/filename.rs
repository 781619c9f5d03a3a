//! Names of the files in a database directory, and the `CURRENT` pointer.
//!
//! Numbered files share one file-number sequence (see the manifest's
//! `next_file_number`), are zero-padded to six digits and grow wider past
//! 999999. [`parse_file_name`] accepts exactly the names these helpers
//! produce, so anything else in the directory is left alone.

use std::path::Path;

use crate::error::{Error, IoContext, Result};
use crate::io::FileSystem;

/// Name of the file naming the live manifest.
pub const CURRENT_FILE_NAME: &str = "CURRENT";

/// Name of the file locked by the process that has the database open.
pub const LOCK_FILE_NAME: &str = "LOCK";

const MANIFEST_PREFIX: &str = "MANIFEST-";

/// What a file in a database directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    /// A write-ahead log, `NNNNNN.log`.
    Wal,
    /// A sorted table, `NNNNNN.sst`.
    Table,
    /// A manifest, `MANIFEST-NNNNNN`.
    Manifest,
    /// `CURRENT`, naming the live manifest.
    Current,
    /// `LOCK`, held while the database is open.
    Lock,
    /// A file being written before an atomic rename, `NNNNNN.tmp`.
    Temp,
    /// A blob file holding separated values, `NNNNNN.blob`.
    Blob,
}

/// `NNNNNN.log`
pub fn wal_file_name(number: u64) -> String {
    format!("{number:06}.log")
}

/// `NNNNNN.sst`
pub fn table_file_name(number: u64) -> String {
    format!("{number:06}.sst")
}

/// `MANIFEST-NNNNNN`
pub fn manifest_file_name(number: u64) -> String {
    format!("{MANIFEST_PREFIX}{number:06}")
}

/// `NNNNNN.tmp`
pub fn temp_file_name(number: u64) -> String {
    format!("{number:06}.tmp")
}

/// `NNNNNN.blob`
pub fn blob_file_name(number: u64) -> String {
    format!("{number:06}.blob")
}

/// `LOCK`
pub fn lock_file_name() -> &'static str {
    LOCK_FILE_NAME
}

/// Classifies a directory entry name. Returns the file number (0 for
/// `CURRENT` and `LOCK`), or `None` for names Tern did not create. Only the
/// canonical spelling is accepted (`000007.log`, not `7.log`).
pub fn parse_file_name(name: &str) -> Option<(FileType, u64)> {
    match name {
        CURRENT_FILE_NAME => return Some((FileType::Current, 0)),
        LOCK_FILE_NAME => return Some((FileType::Lock, 0)),
        _ => {}
    }
    if let Some(digits) = name.strip_prefix(MANIFEST_PREFIX) {
        let n = parse_number(digits)?;
        return Some((FileType::Manifest, n));
    }
    let (digits, ext) = name.split_once('.')?;
    let ty = match ext {
        "log" => FileType::Wal,
        "sst" => FileType::Table,
        "tmp" => FileType::Temp,
        "blob" => FileType::Blob,
        _ => return None,
    };
    Some((ty, parse_number(digits)?))
}

/// Parses a canonical zero-padded number: ASCII digits only, and exactly
/// what `{:06}` would print for the value.
fn parse_number(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (format!("{n:06}") == digits).then_some(n)
}

/// The contents of `CURRENT` when manifest `number` is live:
/// `MANIFEST-NNNNNN\n`.
pub fn current_file_contents(number: u64) -> String {
    format!("{}\n", manifest_file_name(number))
}

/// Parses the contents of `CURRENT`; `None` unless it is exactly one
/// canonical manifest name followed by a newline.
pub fn parse_current(contents: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(contents).ok()?;
    let name = text.strip_suffix('\n')?;
    match parse_file_name(name)? {
        (FileType::Manifest, n) => Some(n),
        _ => None,
    }
}

/// Reads `CURRENT` in `dir`: `Ok(None)` when it does not exist (a new
/// database), the live manifest's number when it is well formed, and a
/// corruption at offset 0 otherwise.
pub fn read_current(fs: &dyn FileSystem, dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(CURRENT_FILE_NAME);
    if !fs.exists(&path) {
        return Ok(None);
    }
    let contents = fs.read_all(&path).ctx(&path)?;
    match parse_current(&contents) {
        Some(n) => Ok(Some(n)),
        None => Err(Error::corruption(
            path,
            0,
            "CURRENT does not name a manifest (expected \"MANIFEST-NNNNNN\\n\")",
        )),
    }
}

/// Makes manifest `number` the live one, atomically: writes
/// `MANIFEST-NNNNNN\n` to the temp file `NNNNNN.tmp` (the manifest's own
/// number, which no other file uses), syncs it, renames it over `CURRENT`
/// and syncs `dir`. On failure the old `CURRENT` is intact (or, after a
/// failed directory sync, either version may survive a crash).
pub fn set_current(fs: &dyn FileSystem, dir: &Path, number: u64) -> Result<()> {
    let tmp = dir.join(temp_file_name(number));
    let current = dir.join(CURRENT_FILE_NAME);
    let res = (|| {
        let mut f = fs.create(&tmp).ctx(&tmp)?;
        f.append(current_file_contents(number).as_bytes())
            .ctx(&tmp)?;
        f.sync().ctx(&tmp)?;
        drop(f);
        fs.rename(&tmp, &current).ctx(&current)
    })();
    if res.is_err() {
        // Best effort: the temp file is an orphan that open would also remove.
        let _ = fs.remove_file(&tmp);
        return res;
    }
    fs.sync_dir(dir).ctx(dir)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::io::PosixFs;

    #[test]
    fn names_roundtrip() {
        for n in [0u64, 1, 7, 999_999, 1_000_000, 123_456_789, u64::MAX] {
            assert_eq!(parse_file_name(&wal_file_name(n)), Some((FileType::Wal, n)));
            assert_eq!(
                parse_file_name(&table_file_name(n)),
                Some((FileType::Table, n))
            );
            assert_eq!(
                parse_file_name(&manifest_file_name(n)),
                Some((FileType::Manifest, n))
            );
            assert_eq!(
                parse_file_name(&temp_file_name(n)),
                Some((FileType::Temp, n))
            );
            assert_eq!(
                parse_file_name(&blob_file_name(n)),
                Some((FileType::Blob, n))
            );
            assert_eq!(parse_current(current_file_contents(n).as_bytes()), Some(n));
        }
        assert_eq!(wal_file_name(42), "000042.log");
        assert_eq!(manifest_file_name(3), "MANIFEST-000003");
        assert_eq!(parse_file_name("CURRENT"), Some((FileType::Current, 0)));
        assert_eq!(parse_file_name(lock_file_name()), Some((FileType::Lock, 0)));
    }

    #[test]
    fn rejects_foreign_names() {
        for name in [
            "",
            "7.log",
            "0000007.log",
            "+00001.log",
            "000001.LOG",
            "000001.log.bak",
            "abcdef.sst",
            "MANIFEST-",
            "MANIFEST-1",
            "MANIFEST-00000x",
            "000001",
            ".log",
            "current",
            "LOCK2",
            "99999999999999999999.sst",
            "000001.txt",
        ] {
            assert_eq!(parse_file_name(name), None, "{name:?}");
        }
        for c in ["MANIFEST-000001", "MANIFEST-000001\n\n", "000001.log\n", ""] {
            assert_eq!(parse_current(c.as_bytes()), None, "{c:?}");
        }
    }

    #[test]
    fn set_and_read_current() {
        let dir = tempfile::tempdir().unwrap();
        let fs = PosixFs;
        assert_eq!(read_current(&fs, dir.path()).unwrap(), None);
        set_current(&fs, dir.path(), 5).unwrap();
        assert_eq!(read_current(&fs, dir.path()).unwrap(), Some(5));
        set_current(&fs, dir.path(), 1_234_567).unwrap();
        assert_eq!(read_current(&fs, dir.path()).unwrap(), Some(1_234_567));
        let mut names = fs.list_dir(dir.path()).unwrap();
        names.sort();
        assert_eq!(names, vec!["CURRENT".to_string()]);
        std::fs::write(dir.path().join("CURRENT"), b"garbage").unwrap();
        let e = read_current(&fs, dir.path()).unwrap_err();
        assert!(e.is_corruption());
    }
}
