//! Harnesses for the logs (WAL, manifest) and what they carry (write
//! batches, version edits).

use std::path::{Path, PathBuf};

use tern::internals::format::internal_key::ValueKind;
use tern::internals::format::log_record::LogKind;
use tern::internals::format::version_edit::VersionEdit;
use tern::internals::format::write_batch::WriteBatch;
use tern::internals::version::{replay_manifest, OnProblem};
use tern::internals::wal::LogReader;
use tern::io::{FileSystem, MemFs};

fn walk_batch(b: &WriteBatch) {
    for e in b.iter() {
        match e {
            Ok(e) => {
                std::hint::black_box((e.kind, e.key.len(), e.value.len()));
            }
            Err(_) => break,
        }
    }
}

/// Reads `data` as a log of `kind`, handing each record to `each`, and
/// returns the records read before the first error or the end.
///
/// Invariants: the valid prefix is within the input and the last record
/// returned starts inside it.
fn walk_log(data: &[u8], kind: LogKind, mut each: impl FnMut(&[u8])) -> Vec<Vec<u8>> {
    let Ok(mut r) = LogReader::new(data.to_vec(), PathBuf::from("fuzz.log"), kind) else {
        return Vec::new();
    };
    // A WAL's predecessor record and sync marks are read, not returned.
    std::hint::black_box(r.predecessor());
    let mut records = Vec::new();
    while let Ok(Some(rec)) = r.next_record() {
        each(rec);
        records.push(rec.to_vec());
        assert!(records.len() <= data.len(), "log reader does not advance");
    }
    let valid = r.valid_len();
    std::hint::black_box((r.torn_tail(), r.synced_through()));
    assert!(valid <= data.len() as u64, "valid prefix past the input");
    if !records.is_empty() {
        assert!(
            r.last_record_offset() < valid,
            "last record starts past the valid prefix"
        );
    }
    records
}

/// Writes `records` as a fresh log of `kind` and reads it back: the reader
/// must return exactly them (the writer's framing is what the reader
/// accepts, whatever the input looked like).
fn log_round_trip(records: &[Vec<u8>], kind: LogKind) {
    if records.is_empty() {
        return;
    }
    let mem = MemFs::new();
    let path = Path::new("/round.log");
    let bytes = mem
        .create(path)
        .and_then(|f| {
            let mut w = tern::internals::wal::LogWriter::new(f, kind)?;
            for r in records {
                w.add_record(r)?;
            }
            w.flush()
        })
        .and_then(|()| mem.read_all(path))
        .expect("writing a log to memory fails");
    let again = walk_log(&bytes, kind, |_| {});
    assert!(again == records, "records change when written again");
}

/// A WAL file: header, records, and the write batch in each record.
pub fn wal(data: &[u8]) {
    let records = walk_log(data, LogKind::Wal, |rec| {
        if let Ok(b) = WriteBatch::from_bytes(rec) {
            walk_batch(&b);
        }
    });
    log_round_trip(&records, LogKind::Wal);
}

/// A manifest file: header, records, and the version edit in each record.
pub fn manifest(data: &[u8]) {
    let records = walk_log(data, LogKind::Manifest, version_edit);
    log_round_trip(&records, LogKind::Manifest);
    // Recovery and `tern check` replay with one function: recovery's error
    // is check's first problem, and a manifest recovery accepts check finds
    // sound.
    let path = Path::new("/fuzz/MANIFEST-000001");
    let strict = replay_manifest(path, data.to_vec(), OnProblem::Fail);
    let lenient = replay_manifest(path, data.to_vec(), OnProblem::Collect);
    match (strict, lenient) {
        (Ok(s), Ok(l)) => {
            assert!(l.problems.is_empty(), "check finds {:?}", l.problems);
            assert_eq!(s.records, l.records);
        }
        (Err(s), Ok(l)) => {
            let first = l.problems.first().map(ToString::to_string);
            assert_eq!(first, Some(s.to_string()), "check and recovery disagree");
        }
        (Err(s), Err(l)) => assert_eq!(s.to_string(), l.to_string()),
        (Ok(_), Err(l)) => panic!("check failed where recovery did not: {l}"),
    }
}

/// One encoded write batch (a WAL record's payload).
pub fn write_batch(data: &[u8]) {
    let Ok(b) = WriteBatch::from_bytes(data) else {
        return;
    };
    walk_batch(&b);
    std::hint::black_box(b.seq());
    // A batch of user entries built again from what decoded must decode to
    // the same entries, as many as the header counts.
    let entries: Vec<(ValueKind, Vec<u8>, Vec<u8>)> = b
        .iter()
        .map_while(Result::ok)
        .map(|e| (e.kind, e.key.to_vec(), e.value.to_vec()))
        .collect();
    if entries.len() != b.len() || entries.iter().any(|e| e.0 == ValueKind::BlobRef) {
        return;
    }
    let mut again = WriteBatch::new();
    for (kind, k, v) in &entries {
        match kind {
            ValueKind::Delete => again.delete(k),
            _ => again.put(k, v),
        };
    }
    let round: Vec<(ValueKind, Vec<u8>, Vec<u8>)> = WriteBatch::from_bytes(again.as_bytes())
        .map(|b| {
            b.iter()
                .map_while(Result::ok)
                .map(|e| (e.kind, e.key.to_vec(), e.value.to_vec()))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(round, entries, "a batch's entries change through a rebuild");
}

/// One encoded version edit (a manifest record's payload); whatever decodes
/// must encode and decode to the same edit.
pub fn version_edit(data: &[u8]) {
    if let Ok(e) = VersionEdit::decode(data) {
        let bytes = e.encode();
        match VersionEdit::decode(&bytes) {
            Ok(again) => {
                assert_eq!(again, e, "an edit changes through encode and decode");
                assert_eq!(again.encode(), bytes, "encoding is not stable");
            }
            Err(err) => panic!("a decoded edit does not decode after encoding: {err}"),
        }
    }
}

/// A durable memory tier table's bytes: the tier file header check, then
/// the table restored from them as recovery restores it (with their own
/// checksum, so mutations reach the node parser) and walked.
pub fn memtier(data: &[u8]) {
    let _ = tern::internals::memtier::check_header(data);
    tern::internals::memtier::exercise_restore(data);
}
