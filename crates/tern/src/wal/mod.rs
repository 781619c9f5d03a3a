//! Append-only logs: the write-ahead log and the manifest share one framing
//! ([`crate::format::log_record`]); this module adds the file I/O on top of
//! it, plus the names of the files in a database directory.
//!
//! The WAL module stores opaque payloads: write batches are encoded by
//! [`crate::format::write_batch`] and version edits by
//! [`crate::format::version_edit`]. Formats: `docs/format/wal.md` and
//! `docs/format/manifest.md`.

mod filename;
mod reader;
mod writer;

pub use crate::format::log_record::LogKind;
pub use filename::{
    blob_file_name, current_file_contents, lock_file_name, manifest_file_name, parse_current,
    parse_file_name, read_current, set_current, table_file_name, temp_file_name, wal_file_name,
    FileType, CURRENT_FILE_NAME, LOCK_FILE_NAME,
};
pub use reader::{later_wal_vouches_for, LogReader};
pub use writer::LogWriter;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::format::log_record::{FILE_HEADER_LEN, RECORD_HEADER_LEN};
    use crate::io::{FileSystem, PosixFs};
    use crate::Error;

    fn write_log(path: &Path, kind: LogKind, payloads: &[Vec<u8>]) -> Vec<u64> {
        let fs = PosixFs;
        let mut w = LogWriter::new(fs.create(path).unwrap(), kind).unwrap();
        assert_eq!(w.len(), FILE_HEADER_LEN as u64);
        assert!(w.is_empty());
        let mut offsets = Vec::new();
        for p in payloads {
            offsets.push(w.len());
            w.add_record(p).unwrap();
        }
        w.sync().unwrap();
        offsets
    }

    fn read_all(data: Vec<u8>, path: &Path, kind: LogKind) -> (Vec<Vec<u8>>, Option<u64>) {
        let mut r = LogReader::new(data, path.to_path_buf(), kind).unwrap();
        let mut out = Vec::new();
        while let Some(p) = r.next_record().unwrap() {
            out.push(p.to_vec());
        }
        (out, r.torn_tail())
    }

    fn sample_payloads() -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = vec![vec![], b"a".to_vec(), vec![0; 1 << 20]];
        for i in 0..500u32 {
            v.push(i.to_le_bytes().repeat(i as usize % 37));
        }
        v.push((0..(1u32 << 20)).map(|i| (i * 7) as u8).collect());
        v.push(vec![]);
        v
    }

    fn setup(kind: LogKind, payloads: &[Vec<u8>]) -> (tempfile::TempDir, PathBuf, Vec<u64>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(wal_file_name(1));
        let offsets = write_log(&path, kind, payloads);
        (dir, path, offsets)
    }

    #[test]
    fn roundtrip_many_records() {
        let payloads = sample_payloads();
        for kind in [LogKind::Wal, LogKind::Manifest] {
            let (_dir, path, offsets) = setup(kind, &payloads);
            let data = PosixFs.read_all(&path).unwrap();
            let len = data.len() as u64;
            let mut r = LogReader::new(data, path.clone(), kind).unwrap();
            let mut i = 0;
            while let Some(p) = r.next_record().unwrap() {
                assert_eq!(p, &payloads[i][..]);
                assert_eq!(r.last_record_offset(), offsets[i]);
                i += 1;
            }
            assert_eq!(i, payloads.len());
            assert_eq!(r.torn_tail(), None);
            assert_eq!(r.valid_len(), len);
            assert_eq!(r.next_record().unwrap(), None);
        }
    }

    #[test]
    fn empty_and_header_only_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000001.log");
        assert_eq!(read_all(Vec::new(), &path, LogKind::Wal), (vec![], None));
        write_log(&path, LogKind::Wal, &[]);
        let data = PosixFs.read_all(&path).unwrap();
        assert_eq!(read_all(data.clone(), &path, LogKind::Wal), (vec![], None));
        for cut in 1..FILE_HEADER_LEN {
            assert_eq!(
                read_all(data[..cut].to_vec(), &path, LogKind::Wal),
                (vec![], Some(0))
            );
        }
    }

    #[test]
    fn torn_tail_short_header_or_long_length() {
        let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100 + i as usize]).collect();
        let (_dir, path, offsets) = setup(LogKind::Wal, &payloads);
        let data = PosixFs.read_all(&path).unwrap();
        let last = offsets[9] as usize;
        // (a) fewer bytes than a record header after the last full record.
        for extra in 1..RECORD_HEADER_LEN {
            let cut = data[..last + extra].to_vec();
            assert_eq!(
                read_all(cut, &path, LogKind::Wal),
                (payloads[..9].to_vec(), Some(last as u64))
            );
        }
        // (a) a header whose length runs past the end of the file.
        for cut in last + RECORD_HEADER_LEN..data.len() {
            assert_eq!(
                read_all(data[..cut].to_vec(), &path, LogKind::Wal),
                (payloads[..9].to_vec(), Some(last as u64))
            );
        }
        let mut huge = data.clone();
        huge.extend_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd, 0xff, 0xff, 0xff, 0xff, 1, 2, 3]);
        assert_eq!(
            read_all(huge, &path, LogKind::Wal),
            (payloads.clone(), Some(data.len() as u64))
        );
    }

    #[test]
    fn torn_tail_zero_fill() {
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i + 1; 50]).collect();
        let (_dir, path, _) = setup(LogKind::Wal, &payloads);
        let data = PosixFs.read_all(&path).unwrap();
        for zeros in [1usize, 8, 9, 10, 4096, 100_000] {
            let mut d = data.clone();
            d.resize(d.len() + zeros, 0);
            assert_eq!(
                read_all(d, &path, LogKind::Wal),
                (payloads.clone(), Some(data.len() as u64))
            );
        }
        // A whole preallocated file that never got its header.
        assert_eq!(
            read_all(vec![0; 8192], &path, LogKind::Wal),
            (vec![], Some(0))
        );
    }

    #[test]
    fn torn_tail_bad_checksum_on_last_record() {
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i + 1; 64]).collect();
        let (_dir, path, offsets) = setup(LogKind::Wal, &payloads);
        let data = PosixFs.read_all(&path).unwrap();
        let last = offsets[4] as usize;
        for i in last..data.len() {
            if (last + 4..last + 8).contains(&i) {
                continue; // the length field: covered by the cases above
            }
            let mut d = data.clone();
            d[i] ^= 0x40;
            let (recs, torn) = read_all(d, &path, LogKind::Wal);
            assert_eq!(recs, payloads[..4].to_vec(), "byte {i}");
            assert_eq!(torn, Some(last as u64));
        }
    }

    #[test]
    fn flipped_byte_in_middle_record_is_corruption() {
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i + 1; 64]).collect();
        let (_dir, path, offsets) = setup(LogKind::Wal, &payloads);
        let data = PosixFs.read_all(&path).unwrap();
        let target = offsets[2] as usize;
        for i in [target, target + 2, target + 8, target + 9, target + 40] {
            let mut d = data.clone();
            d[i] ^= 0x01;
            let mut r = LogReader::new(d, path.clone(), LogKind::Wal).unwrap();
            assert_eq!(r.next_record().unwrap().unwrap(), &payloads[0][..]);
            assert_eq!(r.next_record().unwrap().unwrap(), &payloads[1][..]);
            for _ in 0..2 {
                match r.next_record() {
                    Err(Error::Corruption { file, offset, .. }) => {
                        assert_eq!(file, path);
                        assert_eq!(offset, target as u64);
                    }
                    other => panic!("byte {i}: {other:?}"),
                }
            }
            assert_eq!(r.last_record_offset(), offsets[1]);
        }
    }

    #[test]
    fn wrong_magic_is_corruption_at_zero() {
        let payloads = vec![b"x".to_vec()];
        let (_dir, path, _) = setup(LogKind::Manifest, &payloads);
        let data = PosixFs.read_all(&path).unwrap();
        match LogReader::new(data.clone(), path.clone(), LogKind::Wal) {
            Err(Error::Corruption { file, offset, .. }) => {
                assert_eq!(file, path);
                assert_eq!(offset, 0);
            }
            other => panic!("{other:?}"),
        }
        let mut wal = data.clone();
        wal[..8].copy_from_slice(b"TERNWAL\0");
        assert!(LogReader::new(wal, path.clone(), LogKind::Manifest).is_err());
        let mut garbage = data;
        garbage[0] = b'X';
        match LogReader::new(garbage, path.clone(), LogKind::Manifest) {
            Err(Error::Corruption { offset: 0, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn writer_needs_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000001.log");
        let mut f = PosixFs.create(&path).unwrap();
        f.append(b"x").unwrap();
        assert!(LogWriter::new(f, LogKind::Wal).is_err());
    }
}
