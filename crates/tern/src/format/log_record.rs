//! Framing of append-only log files: the write-ahead log and the manifest.
//!
//! A log file is a 16-byte file header followed by records:
//!
//! ```text
//! file header:  magic (8) ‖ format version u32 LE ‖ masked crc32c u32 LE of the first 12 bytes
//! record:       masked crc32c u32 LE of (type ‖ payload) ‖ payload length u32 LE ‖ type u8 ‖ payload
//! ```
//!
//! This module only encodes and classifies bytes; the recovery policy for
//! damaged or incomplete tails lives in [`decode_record`] so it can be tested
//! and fuzzed without I/O. The full specification is `docs/format/wal.md`.

use crate::error::DecodeError;
use crate::format::checksum;
use crate::format::coding::{fixed32_at, put_fixed32};

/// Magic bytes at the start of every write-ahead log.
pub const WAL_MAGIC: [u8; 8] = *b"TERNWAL\0";

/// Magic bytes at the start of every manifest.
pub const MANIFEST_MAGIC: [u8; 8] = *b"TERNMAN\0";

/// Current log format version, stored in the file header.
pub const LOG_FORMAT_VERSION: u32 = 1;

/// Length of the file header: magic, version, header checksum.
pub const FILE_HEADER_LEN: usize = 16;

/// Length of a record header: checksum, payload length, type.
pub const RECORD_HEADER_LEN: usize = 9;

/// Largest payload a record can hold (the length field is a u32).
pub const MAX_PAYLOAD_LEN: usize = u32::MAX as usize;

/// Which kind of log a file is; each has its own magic so that a manifest is
/// never replayed as a WAL or the other way round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// A write-ahead log (records are encoded write batches).
    Wal,
    /// A manifest (records are encoded version edits).
    Manifest,
}

impl LogKind {
    /// The magic bytes that start a file of this kind.
    pub fn magic(self) -> [u8; 8] {
        match self {
            LogKind::Wal => WAL_MAGIC,
            LogKind::Manifest => MANIFEST_MAGIC,
        }
    }

    /// A short human-readable name, used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            LogKind::Wal => "write-ahead log",
            LogKind::Manifest => "manifest",
        }
    }

    fn from_magic(magic: &[u8]) -> Option<LogKind> {
        if magic == WAL_MAGIC {
            Some(LogKind::Wal)
        } else if magic == MANIFEST_MAGIC {
            Some(LogKind::Manifest)
        } else {
            None
        }
    }
}

/// The type byte of a record. Values 2–4 are reserved for fragmented
/// records (first/middle/last) and 0 is never valid, so zero-filled space
/// never parses as a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordType {
    /// The payload is one complete logical record.
    Full = 1,
    /// WAL only: the earlier WALs reached the disk whole; the payload is a
    /// [`SyncMark`]. Recovery uses it to tell damage from a crash.
    SyncMark = 5,
    /// WAL only, first record: the WAL that was active before this one and
    /// its final length (the same payload as a sync mark, but nothing is
    /// known durable). Recovery uses it to see that WAL cut short.
    Predecessor = 6,
}

impl RecordType {
    /// Decodes a type byte; `None` for unknown or reserved values.
    pub fn from_u8(b: u8) -> Option<RecordType> {
        match b {
            1 => Some(RecordType::Full),
            5 => Some(RecordType::SyncMark),
            6 => Some(RecordType::Predecessor),
            _ => None,
        }
    }
}

/// The payload of a [`RecordType::SyncMark`] record: WAL `number` was
/// fsynced with `len` bytes, and every WAL numbered below it was fsynced
/// whole, before this record was written. A [`RecordType::Predecessor`]
/// record carries the same fields: the WAL active before this one and
/// its final length, durable or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncMark {
    /// The newest earlier WAL known durable.
    pub number: u64,
    /// Its length in bytes, header included, when it was synced.
    pub len: u64,
}

/// Length of an encoded [`SyncMark`].
pub const SYNC_MARK_LEN: usize = 16;

impl SyncMark {
    /// The 16-byte payload: `number` u64 LE ‖ `len` u64 LE.
    pub fn encode(&self) -> [u8; SYNC_MARK_LEN] {
        let mut b = [0u8; SYNC_MARK_LEN];
        b[..8].copy_from_slice(&self.number.to_le_bytes());
        b[8..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes a payload; `None` unless it is exactly 16 bytes.
    pub fn decode(payload: &[u8]) -> Option<SyncMark> {
        let b: &[u8; SYNC_MARK_LEN] = payload.try_into().ok()?;
        let (number, len) = b.split_at(8);
        Some(SyncMark {
            number: u64::from_le_bytes(number.try_into().ok()?),
            len: u64::from_le_bytes(len.try_into().ok()?),
        })
    }
}

/// The 16-byte file header for a log of `kind`.
pub fn encode_file_header(kind: LogKind) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    h[..8].copy_from_slice(&kind.magic());
    h[8..12].copy_from_slice(&LOG_FORMAT_VERSION.to_le_bytes());
    let crc = checksum::crc(&h[..12]);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What the start of a log file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileHeader {
    /// The file is empty: no header, no records.
    Empty,
    /// The file is shorter than a header (or the header is all zero bytes):
    /// it was created but its header never fully reached the disk. It holds
    /// no records.
    Torn,
    /// A valid header of the expected kind; records start at
    /// [`FILE_HEADER_LEN`].
    Valid,
}

/// Checks the file header at the start of `file` (the whole file, or at
/// least its first [`FILE_HEADER_LEN`] bytes) against the expected `kind`.
///
/// Errors (always at offset 0): wrong or foreign magic, unsupported version,
/// header checksum mismatch. A short file whose bytes are a prefix of the
/// expected header (or are all zero) is [`FileHeader::Torn`], not an error.
pub fn decode_file_header(file: &[u8], kind: LogKind) -> Result<FileHeader, DecodeError> {
    if file.is_empty() {
        return Ok(FileHeader::Empty);
    }
    let expected = encode_file_header(kind);
    let head = &file[..file.len().min(FILE_HEADER_LEN)];
    if head.iter().all(|&b| b == 0) {
        // Space allocated before the header was written.
        return Ok(FileHeader::Torn);
    }
    if head.len() < FILE_HEADER_LEN {
        // Only a prefix of the header was persisted. The bytes present must
        // still match what we would have written.
        if expected[..head.len()] == *head {
            return Ok(FileHeader::Torn);
        }
        return Err(DecodeError::new(
            0,
            format!("torn {} header does not match its magic", kind.name()),
        ));
    }
    let magic = &head[..8];
    if magic != kind.magic() {
        let reason = match LogKind::from_magic(magic) {
            Some(other) => format!(
                "expected a {} but found a {} header",
                kind.name(),
                other.name()
            ),
            None => format!("bad magic for a {}", kind.name()),
        };
        return Err(DecodeError::new(0, reason));
    }
    let stored_crc = fixed32_at(head, 12);
    if stored_crc != checksum::crc(&head[..12]) {
        return Err(DecodeError::new(
            0,
            format!("{} header checksum mismatch", kind.name()),
        ));
    }
    let version = fixed32_at(head, 8);
    if version != LOG_FORMAT_VERSION {
        return Err(DecodeError::new(
            0,
            format!("unsupported {} format version {version}", kind.name()),
        ));
    }
    Ok(FileHeader::Valid)
}

/// Appends one framed record (header and payload) to `dst`.
///
/// The caller must keep `payload.len() <= MAX_PAYLOAD_LEN`; the writer checks
/// this before calling.
pub fn encode_record(dst: &mut Vec<u8>, payload: &[u8]) {
    encode_typed_record(dst, RecordType::Full, payload);
}

/// Appends one framed record of type `ty`.
pub fn encode_typed_record(dst: &mut Vec<u8>, ty: RecordType, payload: &[u8]) {
    debug_assert!(payload.len() <= MAX_PAYLOAD_LEN);
    let ty = [ty as u8];
    put_fixed32(dst, checksum::crc2(&ty, payload));
    put_fixed32(dst, payload.len() as u32);
    dst.push(ty[0]);
    dst.extend_from_slice(payload);
}

/// The result of decoding the record that starts at some offset of a log file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordOutcome<'a> {
    /// A valid record.
    Record {
        /// Its type: [`RecordType::SyncMark`] and
        /// [`RecordType::Predecessor`] only in a WAL, with a payload
        /// [`SyncMark::decode`] accepts.
        ty: RecordType,
        /// The payload bytes.
        payload: &'a [u8],
        /// Offset of the next record (just past this one).
        next: usize,
    },
    /// The offset is exactly the end of the file: no more records.
    End,
    /// The rest of the file is an incomplete or partially persisted final
    /// write (or unwritten, zero-filled space). Recovery stops here without
    /// an error; the bytes from this offset on are dropped.
    TornTail,
    /// A damaged record that is followed by more data. The error's offset is
    /// the record's start offset in `file`.
    Corrupt(DecodeError),
}

/// Decodes the record at `pos` in `file` (the whole log file's contents),
/// applying the recovery policy. A record that is short (fewer than
/// [`RECORD_HEADER_LEN`] bytes left, or a length running past the end of
/// the file) or fails its checksum is judged by `damage_or_tail`; a record
/// with a valid checksum but an unknown type is [`RecordOutcome::Corrupt`].
///
/// Never allocates: a huge length field is compared to the bytes present.
pub fn decode_record(file: &[u8], pos: usize, kind: LogKind) -> RecordOutcome<'_> {
    if pos >= file.len() {
        return RecordOutcome::End;
    }
    let rest = &file[pos..];
    if rest.len() < RECORD_HEADER_LEN {
        return damage_or_tail(file, pos, kind, None);
    }
    let stored_crc = fixed32_at(rest, 0);
    let len = fixed32_at(rest, 4) as usize;
    let ty = rest[8];
    let body = &rest[RECORD_HEADER_LEN..];
    if len > body.len() {
        return damage_or_tail(file, pos, kind, None);
    }
    let payload = &body[..len];
    if checksum::crc2(&[ty], payload) != stored_crc {
        return damage_or_tail(file, pos, kind, Some(pos + RECORD_HEADER_LEN + len));
    }
    let next = pos + RECORD_HEADER_LEN + len;
    match RecordType::from_u8(ty) {
        Some(RecordType::Full) => RecordOutcome::Record {
            ty: RecordType::Full,
            payload,
            next,
        },
        Some(RecordType::SyncMark | RecordType::Predecessor) if kind != LogKind::Wal => {
            RecordOutcome::Corrupt(DecodeError::new(
                pos,
                format!("a WAL-only record (type {ty}) in a manifest"),
            ))
        }
        Some(RecordType::SyncMark | RecordType::Predecessor)
            if SyncMark::decode(payload).is_none() =>
        {
            RecordOutcome::Corrupt(DecodeError::new(
                pos,
                format!("a WAL record of type {ty} with {len} bytes (expected {SYNC_MARK_LEN})"),
            ))
        }
        Some(ty @ (RecordType::SyncMark | RecordType::Predecessor)) => {
            RecordOutcome::Record { ty, payload, next }
        }
        None => RecordOutcome::Corrupt(DecodeError::new(
            pos,
            format!("unknown log record type {ty}"),
        )),
    }
}

/// Whether the bad record at `pos` (ending at `end` when its length is
/// intact and its checksum failed; `None` when it is short) is the torn
/// tail of an interrupted write or damage:
///
/// 1. everything from `pos` on is zeros → `TornTail` (unwritten space);
/// 2. in a WAL: a short record, or a checksum failure in a record that ends
///    at the end of the file → `TornTail`; anything else → `Corrupt`
///    (recovery then decides by point-in-time rules which WAL may end so);
/// 3. in a manifest, whose records are synced one at a time so only the
///    last can be torn: a valid record after it → `Corrupt` (that record's
///    sync proves this one was complete); else a short record →
///    `TornTail`; else (all bytes present, checksum wrong) `TornTail` only
///    if a stretch of the record itself that ends at a sector boundary
///    reads as zeros ([`lost_sector`]: write-back persisted a later page of
///    the unsynced append before an earlier one), `Corrupt` otherwise.
fn damage_or_tail(file: &[u8], pos: usize, kind: LogKind, end: Option<usize>) -> RecordOutcome<'_> {
    let corrupt = |why: &str| RecordOutcome::Corrupt(DecodeError::new(pos, why.to_string()));
    if all_zero(&file[pos..]) {
        return RecordOutcome::TornTail;
    }
    match (kind, end) {
        (LogKind::Wal, None) => RecordOutcome::TornTail,
        (LogKind::Wal, Some(end)) if end == file.len() => RecordOutcome::TornTail,
        (LogKind::Wal, Some(_)) => corrupt("log record checksum mismatch"),
        // A garbage length hides where the next record starts: look
        // anywhere after the header.
        (LogKind::Manifest, _) if valid_record_after(file, end.unwrap_or(pos + 1)) => {
            corrupt("damaged log record followed by a valid one")
        }
        (LogKind::Manifest, None) => RecordOutcome::TornTail,
        (LogKind::Manifest, Some(end)) if lost_sector(file, pos, end) => RecordOutcome::TornTail,
        (LogKind::Manifest, Some(_)) => corrupt("log record checksum mismatch"),
    }
}

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|&x| x == 0)
}

/// Write-back unit whose loss [`lost_sector`] recognises.
const SECTOR: usize = 512;

/// Whether a stretch of the record at `pos..end` reads as zeros up to a
/// sector boundary (512 bytes, aligned in the file): from `pos` itself, at
/// least its checksum's width, or a whole sector inside the record. That is
/// the signature of an append whose earlier sectors never reached the disk
/// while a later one did. Zeros after the record say nothing about it.
fn lost_sector(file: &[u8], pos: usize, end: usize) -> bool {
    let end = end.min(file.len());
    let mut start = pos;
    while start < end {
        let boundary = (start / SECTOR + 1) * SECTOR;
        if boundary > file.len() {
            return false;
        }
        if boundary - start >= CRC_LEN && all_zero(&file[start..boundary]) {
            return true;
        }
        start = boundary;
    }
    false
}

/// Bytes of a record's checksum, the least a lost sector must have zeroed
/// for [`lost_sector`] to believe it: fewer zeros at a record's start occur
/// by chance.
const CRC_LEN: usize = 4;

/// Most payload bytes [`valid_record_after`] checksums before it gives up.
const SCAN_BUDGET: usize = 64 << 20;

/// Whether a record with a valid checksum may start at or after `from`
/// (proof that the data before it was synced). Checksumming candidates at
/// every offset is quadratic on crafted input, so past [`SCAN_BUDGET`] it
/// answers yes: the damage is then reported, never dropped.
fn valid_record_after(file: &[u8], from: usize) -> bool {
    let mut budget = SCAN_BUDGET;
    (from..file.len().saturating_sub(RECORD_HEADER_LEN - 1)).any(|p| {
        let rest = &file[p..];
        let len = fixed32_at(rest, 4) as usize;
        if len == 0
            || len > rest.len() - RECORD_HEADER_LEN
            || RecordType::from_u8(rest[8]).is_none()
        {
            return false;
        }
        let Some(left) = budget.checked_sub(len) else {
            return true;
        };
        budget = left;
        checksum::crc2(
            &[rest[8]],
            &rest[RECORD_HEADER_LEN..RECORD_HEADER_LEN + len],
        ) == fixed32_at(rest, 0)
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn log(kind: LogKind, payloads: &[&[u8]]) -> Vec<u8> {
        let mut f = encode_file_header(kind).to_vec();
        for p in payloads {
            encode_record(&mut f, p);
        }
        f
    }

    fn collect(f: &[u8]) -> (Vec<Vec<u8>>, RecordOutcome<'_>) {
        let mut out = Vec::new();
        let mut pos = FILE_HEADER_LEN;
        loop {
            match decode_record(f, pos, LogKind::Wal) {
                RecordOutcome::Record { payload, next, .. } => {
                    out.push(payload.to_vec());
                    pos = next;
                }
                other => return (out, other),
            }
        }
    }

    #[test]
    fn header_roundtrip_and_kinds() {
        let w = encode_file_header(LogKind::Wal);
        assert_eq!(decode_file_header(&w, LogKind::Wal), Ok(FileHeader::Valid));
        let e = decode_file_header(&w, LogKind::Manifest).unwrap_err();
        assert_eq!(e.offset, 0);
        assert!(e.reason.contains("write-ahead log"), "{}", e.reason);
        assert_eq!(decode_file_header(&[], LogKind::Wal), Ok(FileHeader::Empty));
        for n in 1..FILE_HEADER_LEN {
            assert_eq!(
                decode_file_header(&w[..n], LogKind::Wal),
                Ok(FileHeader::Torn)
            );
        }
        assert_eq!(
            decode_file_header(&[0; 40], LogKind::Wal),
            Ok(FileHeader::Torn)
        );
        assert!(decode_file_header(b"XY", LogKind::Wal).is_err());
        let mut bad = w;
        bad[13] ^= 1;
        assert!(decode_file_header(&bad, LogKind::Wal).is_err());
        let mut v2 = w;
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = checksum::crc(&v2[..12]);
        v2[12..16].copy_from_slice(&crc.to_le_bytes());
        let e = decode_file_header(&v2, LogKind::Wal).unwrap_err();
        assert!(e.reason.contains("version"));
    }

    #[test]
    fn records_roundtrip() {
        let f = log(LogKind::Wal, &[b"a", b"", b"hello world"]);
        let (recs, end) = collect(&f);
        assert_eq!(recs, vec![b"a".to_vec(), vec![], b"hello world".to_vec()]);
        assert_eq!(end, RecordOutcome::End);
    }

    #[test]
    fn every_truncation_is_a_clean_torn_tail() {
        let f = log(LogKind::Wal, &[b"first", b"second record", b"third"]);
        let (full, _) = collect(&f);
        for cut in FILE_HEADER_LEN..f.len() {
            let (recs, end) = collect(&f[..cut]);
            assert!(recs.len() < 3);
            assert_eq!(recs[..], full[..recs.len()]);
            assert!(
                matches!(end, RecordOutcome::TornTail | RecordOutcome::End),
                "cut {cut}: {end:?}"
            );
        }
    }

    #[test]
    fn huge_length_is_torn_not_allocated() {
        let mut f = log(LogKind::Wal, &[b"x"]);
        let start = f.len();
        f.extend_from_slice(&[1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 1, 9, 9]);
        let (recs, end) = collect(&f);
        assert_eq!(recs.len(), 1);
        assert_eq!(end, RecordOutcome::TornTail);
        assert_eq!(
            decode_record(&f, start, LogKind::Wal),
            RecordOutcome::TornTail
        );
    }

    #[test]
    fn sync_marks_are_wal_records_of_sixteen_bytes() {
        let mark = SyncMark {
            number: 7,
            len: 1 << 40,
        };
        assert_eq!(SyncMark::decode(&mark.encode()), Some(mark));
        for kind in [LogKind::Wal, LogKind::Manifest] {
            let mut f = log(kind, &[]);
            encode_typed_record(&mut f, RecordType::SyncMark, &mark.encode());
            let outcome = decode_record(&f, FILE_HEADER_LEN, kind);
            match (kind, outcome) {
                (LogKind::Wal, RecordOutcome::Record { ty, payload, next }) => {
                    assert_eq!(ty, RecordType::SyncMark);
                    assert_eq!(SyncMark::decode(payload), Some(mark));
                    assert_eq!(next, f.len());
                }
                (LogKind::Manifest, RecordOutcome::Corrupt(e)) => {
                    assert_eq!(e.offset, FILE_HEADER_LEN as u64)
                }
                (kind, other) => panic!("{kind:?}: {other:?}"),
            }
        }
        let mut f = log(LogKind::Wal, &[]);
        encode_typed_record(&mut f, RecordType::SyncMark, &mark.encode()[..15]);
        assert!(matches!(
            decode_record(&f, FILE_HEADER_LEN, LogKind::Wal),
            RecordOutcome::Corrupt(_)
        ));
    }

    #[test]
    fn unknown_type_with_valid_crc_is_corrupt() {
        let mut f = log(LogKind::Wal, &[]);
        let payload = b"p";
        put_fixed32(&mut f, checksum::crc2(&[7], payload));
        put_fixed32(&mut f, 1);
        f.push(7);
        f.extend_from_slice(payload);
        match decode_record(&f, FILE_HEADER_LEN, LogKind::Wal) {
            RecordOutcome::Corrupt(e) => assert_eq!(e.offset, FILE_HEADER_LEN as u64),
            other => panic!("{other:?}"),
        }
    }

    /// A manifest whose last record starts `before` bytes ahead of a sector
    /// boundary, padded by a first record.
    fn manifest_ending_near_a_boundary(before: usize) -> (Vec<u8>, usize) {
        let pad = SECTOR - before - FILE_HEADER_LEN - RECORD_HEADER_LEN;
        let mut f = log(LogKind::Manifest, &[&vec![7u8; pad]]);
        let start = f.len();
        assert_eq!(start, SECTOR - before);
        encode_record(&mut f, &[9u8; 200]);
        (f, start)
    }

    /// Regression: a lost sector that held fewer than a record header's
    /// bytes of the last record (it started just before a boundary) was
    /// taken for damage, so a plain power loss left a store that would not
    /// open.
    #[test]
    fn lost_sector_holding_only_part_of_a_record_header_is_a_torn_tail() {
        for before in [4, 6, 8] {
            let (mut f, start) = manifest_ending_near_a_boundary(before);
            f[start..SECTOR].fill(0);
            assert_eq!(
                decode_record(&f, start, LogKind::Manifest),
                RecordOutcome::TornTail,
                "{before} bytes before the boundary"
            );
        }
    }

    /// Regression: a zero sector after a damaged manifest record (outside
    /// it) made the damage count as a torn tail, dropping a synced edit.
    #[test]
    fn zero_sector_after_a_damaged_manifest_record_does_not_make_it_torn() {
        let (mut f, start) = manifest_ending_near_a_boundary(100);
        f[start + 20] ^= 1;
        f.resize(3 * SECTOR, 0);
        assert!(matches!(
            decode_record(&f, start, LogKind::Manifest),
            RecordOutcome::Corrupt(_)
        ));
    }

    #[test]
    fn manifest_record_with_a_lost_sector_is_torn_only_when_nothing_valid_follows() {
        let mut f = log(LogKind::Manifest, &[b"first"]);
        let start = f.len();
        encode_record(&mut f, &[9u8; 1500]);
        let tail = f.clone();
        // The sector holding the record's start never reached the disk.
        f[start..SECTOR].fill(0);
        assert_eq!(
            decode_record(&f, start, LogKind::Manifest),
            RecordOutcome::TornTail
        );
        // Bits flipped, all sectors present: damage.
        let mut flipped = tail.clone();
        flipped[start + 100] ^= 1;
        assert!(matches!(
            decode_record(&flipped, start, LogKind::Manifest),
            RecordOutcome::Corrupt(_)
        ));
        // A valid record after the zeros proves the damaged one was synced.
        let mut followed = tail;
        followed[start..SECTOR].fill(0);
        encode_record(&mut followed, b"later");
        assert!(matches!(
            decode_record(&followed, start, LogKind::Manifest),
            RecordOutcome::Corrupt(_)
        ));
    }
}
