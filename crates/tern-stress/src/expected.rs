//! The expected state: what every key of the stress key space must hold,
//! kept in a memory-mapped file outside the store so that it survives a
//! `kill -9` of the process that writes both.
//!
//! Each key has two 64-bit slots: the committed state and a pending state.
//! A writer sets the pending state before it hands the write to the store
//! and commits it (committed := pending, pending := none) once the store
//! acknowledged it. After a crash, a key whose pending slot is set may hold
//! either state; every other key must hold exactly its committed state.
//!
//! A state packs a per-key version counter and whether the key exists:
//! `version << 1 | exists`. State 0 is "never written". The value of an
//! existing key is derived from `(key, version)` (see [`crate::keys`]), so a
//! read can be checked without storing values.
//!
//! After the slots come batch records, one per writer thread: the slots of
//! the multi-key batch it has in flight (count first, zero for none). A
//! batch in flight at a crash must have applied to all its slots or none.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapMut;

/// File magic, the first 8 bytes.
/// (v2 added the batch records after the slots.)
const MAGIC: [u8; 8] = *b"TERNEXP2";
/// Bytes before the first slot (magic, slot count, padding).
const HEADER_LEN: usize = 64;
/// Set in a pending slot that holds a state.
const PENDING_BIT: u64 = 1 << 63;
/// Writer threads that can record an in-flight batch.
pub const MAX_WRITERS: usize = 64;
/// Most slots in one recorded batch.
pub const MAX_BATCH: usize = 15;
/// Words per batch record: the count, then the slots.
const RECORD_WORDS: usize = MAX_BATCH + 1;
/// Words of all batch records.
const RECORDS_WORDS: usize = MAX_WRITERS * RECORD_WORDS;

/// The state of one key: a version and whether the key exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct KeyState(u64);

impl KeyState {
    /// Never written: absent.
    pub const ABSENT: KeyState = KeyState(0);

    /// A state with `version`, existing or deleted.
    pub fn new(version: u64, exists: bool) -> KeyState {
        KeyState(((version & (u64::MAX >> 2)) << 1) | u64::from(exists))
    }

    /// The version counter (0 for never written).
    pub fn version(self) -> u64 {
        self.0 >> 1
    }

    /// True when the key holds a value in this state.
    pub fn exists(self) -> bool {
        self.0 & 1 == 1
    }

    /// The raw encoding.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// Decodes a raw encoding.
    pub fn from_raw(raw: u64) -> KeyState {
        KeyState(raw & !PENDING_BIT)
    }
}

/// Why the expected-state file cannot be used.
#[derive(Debug)]
pub struct ExpectedError(pub String);

impl std::fmt::Display for ExpectedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ExpectedError {}

/// Where the slots live: a file mapping, or plain memory for in-process runs.
enum Backing {
    Mapped(MmapMut),
    Memory(#[allow(dead_code)] Box<[AtomicU64]>),
}

/// The expected state of `len` slots (see the module docs).
pub struct ExpectedState {
    backing: Backing,
    slots: *const AtomicU64,
    len: usize,
}

// SAFETY: `slots` points into `backing`, which is owned by the struct and
// never moved or unmapped while it lives; every access goes through atomics.
unsafe impl Send for ExpectedState {}
// SAFETY: as above; shared access only uses `AtomicU64` operations.
unsafe impl Sync for ExpectedState {}

impl std::fmt::Debug for ExpectedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExpectedState")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl ExpectedState {
    /// Opens (or creates, all keys absent) the file at `path` for `len`
    /// slots. An existing file made for another number of slots is an error.
    pub fn open(path: &Path, len: usize) -> Result<ExpectedState, ExpectedError> {
        let err = |what: &str, e: std::io::Error| {
            ExpectedError(format!("{what} {}: {e}", path.display()))
        };
        let size = HEADER_LEN + len * 16 + RECORDS_WORDS * 8;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| err("cannot open", e))?;
        let existing = file.metadata().map_err(|e| err("cannot stat", e))?.len();
        let fresh = existing == 0;
        if fresh {
            file.set_len(size as u64)
                .map_err(|e| err("cannot size", e))?;
        } else if existing != size as u64 {
            return Err(ExpectedError(format!(
                "{} holds {existing} bytes, expected {size} for {len} keys: \
                 it was made for another key space (remove it to start over)",
                path.display()
            )));
        }
        // SAFETY: the file is opened read-write and sized above; the mapping
        // is only accessed through atomics (slots) or before it is shared
        // (header). Another process changing the file concurrently would
        // race, which the stress tool rules out by running one writer per
        // expected-state file (the store's own lock guards the pair).
        let mut map = unsafe { MmapMut::map_mut(&file) }.map_err(|e| err("cannot map", e))?;
        if fresh {
            map[..8].copy_from_slice(&MAGIC);
            map[8..16].copy_from_slice(&(len as u64).to_le_bytes());
            map.flush().map_err(|e| err("cannot write", e))?;
        } else if map[..8] != MAGIC {
            return Err(ExpectedError(format!(
                "{} is not an expected-state file",
                path.display()
            )));
        }
        let slots = map[HEADER_LEN..].as_ptr().cast::<AtomicU64>();
        Ok(ExpectedState {
            backing: Backing::Mapped(map),
            slots,
            len,
        })
    }

    /// An expected state in plain memory (all keys absent), for in-process
    /// runs that simulate crashes themselves.
    pub fn in_memory(len: usize) -> ExpectedState {
        let mem: Box<[AtomicU64]> = (0..len * 2 + RECORDS_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        let slots = mem.as_ptr();
        ExpectedState {
            backing: Backing::Memory(mem),
            slots,
            len,
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty key space.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn slot(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len * 2, "slot {i} out of range");
        self.word(i)
    }

    /// Word `i` after the header: slots first, then batch records.
    fn word(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len * 2 + RECORDS_WORDS, "word {i} out of range");
        // SAFETY: `i` is in bounds (checked above); the backing holds
        // `2 * len + RECORDS_WORDS` properly aligned `u64`s (the mapping is
        // page aligned and HEADER_LEN is a multiple of 8) and lives as long
        // as `self`.
        unsafe { &*self.slots.add(i) }
    }

    fn record(&self, writer: usize, i: usize) -> &AtomicU64 {
        self.word(self.len * 2 + writer * RECORD_WORDS + i)
    }

    /// Records that `writer` has a batch of `slots` in flight (their
    /// pending states already set). Writers past [`MAX_WRITERS`] and
    /// batches past [`MAX_BATCH`] slots go unrecorded.
    pub fn begin_batch(&self, writer: usize, slots: &[usize]) {
        if writer >= MAX_WRITERS || slots.len() > MAX_BATCH {
            return;
        }
        for (i, &s) in slots.iter().enumerate() {
            self.record(writer, 1 + i).store(s as u64, Ordering::SeqCst);
        }
        // The count last: a crash before it leaves no record.
        self.record(writer, 0)
            .store(slots.len() as u64, Ordering::SeqCst);
    }

    /// Clears `writer`'s batch record (the batch was acknowledged and
    /// committed).
    pub fn end_batch(&self, writer: usize) {
        if writer < MAX_WRITERS {
            self.record(writer, 0).store(0, Ordering::SeqCst);
        }
    }

    /// The slots of every batch recorded as in flight.
    pub fn batches_in_flight(&self) -> Vec<Vec<usize>> {
        (0..MAX_WRITERS)
            .filter_map(|w| {
                let n = self.record(w, 0).load(Ordering::SeqCst) as usize;
                (n > 0).then(|| {
                    (1..=n.min(MAX_BATCH))
                        .map(|i| self.record(w, i).load(Ordering::SeqCst) as usize)
                        .collect()
                })
            })
            .collect()
    }

    /// The committed state of key `k`.
    pub fn committed(&self, k: usize) -> KeyState {
        KeyState(self.slot(2 * k).load(Ordering::SeqCst))
    }

    /// The pending state of key `k`, if a write of it is in flight.
    pub fn pending(&self, k: usize) -> Option<KeyState> {
        let raw = self.slot(2 * k + 1).load(Ordering::SeqCst);
        (raw & PENDING_BIT != 0).then_some(KeyState::from_raw(raw))
    }

    /// The next state of key `k` for a write: a fresh version, never used
    /// before for this key (higher than both slots).
    pub fn next_state(&self, k: usize, exists: bool) -> KeyState {
        let v = self
            .committed(k)
            .version()
            .max(self.pending(k).map_or(0, |p| p.version()));
        KeyState::new(v + 1, exists)
    }

    /// Marks a write of `state` to key `k` as in flight.
    pub fn set_pending(&self, k: usize, state: KeyState) {
        self.slot(2 * k + 1)
            .store(state.raw() | PENDING_BIT, Ordering::SeqCst);
    }

    /// Records that the in-flight write of key `k` was acknowledged.
    pub fn commit(&self, k: usize) {
        if let Some(p) = self.pending(k) {
            self.slot(2 * k).store(p.raw(), Ordering::SeqCst);
        }
        self.slot(2 * k + 1).store(0, Ordering::SeqCst);
    }

    /// Sets the committed state of `k` and clears its pending mark (after a
    /// verification found which of the two the store holds).
    pub fn resolve(&self, k: usize, state: KeyState) {
        self.slot(2 * k).store(state.raw(), Ordering::SeqCst);
        self.slot(2 * k + 1).store(0, Ordering::SeqCst);
    }

    /// Number of keys with a pending mark.
    pub fn pending_count(&self) -> usize {
        (0..self.len).filter(|&k| self.pending(k).is_some()).count()
    }

    /// Writes the mapping back to its file (msync); a no-op in memory.
    pub fn flush(&self) -> std::io::Result<()> {
        match &self.backing {
            Backing::Mapped(m) => m.flush(),
            Backing::Memory(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_then_commit_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("expected");
        {
            let e = ExpectedState::open(&path, 10).unwrap();
            let s = e.next_state(3, true);
            assert_eq!(s.version(), 1);
            e.set_pending(3, s);
            e.commit(3);
            let s2 = e.next_state(3, false);
            e.set_pending(3, s2);
        }
        let e = ExpectedState::open(&path, 10).unwrap();
        assert_eq!(e.committed(3), KeyState::new(1, true));
        assert_eq!(e.pending(3), Some(KeyState::new(2, false)));
        assert_eq!(e.pending_count(), 1);
        assert!(ExpectedState::open(&path, 11).is_err());
    }

    #[test]
    fn batch_records_survive_reopen_until_ended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("expected");
        {
            let e = ExpectedState::open(&path, 10).unwrap();
            e.begin_batch(0, &[1, 4, 9]);
            e.begin_batch(3, &[2, 3]);
            e.end_batch(3);
            e.begin_batch(MAX_WRITERS, &[5, 6]);
        }
        let e = ExpectedState::open(&path, 10).unwrap();
        assert_eq!(e.batches_in_flight(), vec![vec![1, 4, 9]]);
        e.end_batch(0);
        assert!(e.batches_in_flight().is_empty());
    }
}
