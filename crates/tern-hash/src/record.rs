//! One record of the hybrid log: a 24-byte header, the key, the value.
//!
//! ```text
//! 0   info      u64  previous address (48 bits), tombstone, invalid, sealed,
//!                    present; reader count and exclusive bit in memory only
//! 8   key_len   u32
//! 12  value_len u32  bytes of the value in use
//! 16  capacity  u32  bytes reserved for the value (in-place updates fit here)
//! 20  checksum  u32  masked CRC32C of the stable info bits, the three lengths,
//!                    the key and the value in use
//! 24  key, then the value's capacity, padded to 8 bytes
//! ```
//!
//! A record never spans a page. Bytes of a page after its last record are
//! zero, and a word without the `present` bit ends the page for a reader
//! walking it. The format is specified in `docs/format/hash.md`.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tern::internals::format::checksum::Crc;

/// Bytes of a record header.
pub const HEADER_LEN: usize = 24;
/// The previous record of the same hash chain (0: none).
pub const PREV_MASK: u64 = (1 << 48) - 1;
/// The record deletes its key.
pub const TOMBSTONE: u64 = 1 << 48;
/// The record was written but never linked into the index (its insert lost a
/// race); readers of the log skip it.
pub const INVALID: u64 = 1 << 49;
/// A newer copy of the record was made from it; in-place updates must go to
/// the copy instead.
pub const SEALED: u64 = 1 << 50;
/// Set in every record header, so a zero word ends a page.
pub const PRESENT: u64 = 1 << 51;
const READER: u64 = 1 << 56;
const READERS: u64 = 0x7f << 56;
const EXCLUSIVE: u64 = 1 << 63;
/// The info bits the checksum covers: those that never change once the
/// record is written.
const STABLE_BITS: u64 = PREV_MASK | TOMBSTONE | PRESENT;

const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Bytes a record with this key and value capacity takes in the log.
pub fn record_len(key_len: usize, capacity: usize) -> usize {
    HEADER_LEN + align8(key_len + capacity)
}

/// The value capacity of a new record: the value's length plus the padding
/// the record would have anyway.
pub fn capacity_for(key_len: usize, value_len: usize) -> usize {
    align8(key_len + value_len) - key_len
}

pub(crate) fn checksum(
    info: u64,
    key_len: u32,
    value_len: u32,
    capacity: u32,
    key: &[u8],
    value: &[u8],
) -> u32 {
    let mut head = [0u8; 20];
    head[..8].copy_from_slice(&(info & STABLE_BITS).to_le_bytes());
    head[8..12].copy_from_slice(&key_len.to_le_bytes());
    head[12..16].copy_from_slice(&value_len.to_le_bytes());
    head[16..20].copy_from_slice(&capacity.to_le_bytes());
    let mut crc = Crc::default();
    crc.update(&head);
    crc.update(key);
    crc.update(value);
    crc.finish()
}

/// Why bytes read back from the log are not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

/// A record decoded from bytes read back from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// The previous record of the hash chain (0: none).
    pub prev: u64,
    /// The record deletes its key.
    pub tombstone: bool,
    /// The record was never linked into the index.
    pub invalid: bool,
    /// The key.
    pub key: &'a [u8],
    /// The value in use.
    pub value: &'a [u8],
    /// Bytes the record takes in the log.
    pub len: usize,
}

/// The whole length of the record whose header starts `bytes`, or `None`
/// where the word there has no `present` bit (the rest of the page is
/// empty). Checks the lengths against the page room `room` left from the
/// header's start.
pub fn peek_len(bytes: &[u8], room: usize) -> Result<Option<usize>, DecodeError> {
    let Some(head) = bytes.get(..HEADER_LEN) else {
        return Err(DecodeError(format!(
            "{} bytes where a record header takes {HEADER_LEN}",
            bytes.len()
        )));
    };
    let info = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
    if info & PRESENT == 0 {
        return Ok(None);
    }
    let word = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().unwrap_or_default());
    let (key_len, value_len, capacity) = (word(8) as usize, word(12) as usize, word(16) as usize);
    if value_len > capacity {
        return Err(DecodeError(format!(
            "value length {value_len} exceeds the record's capacity {capacity}"
        )));
    }
    // In u64: on a 32-bit target the sum of two u32 lengths overflows usize.
    let len = HEADER_LEN as u64 + ((key_len as u64 + capacity as u64 + 7) & !7);
    if len > room as u64 {
        return Err(DecodeError(format!(
            "record of {len} bytes runs past its page ({room} bytes left)"
        )));
    }
    Ok(Some(len as usize))
}

/// Decodes and checks one record from the start of `bytes`; `room` is what is
/// left of its page.
pub fn decode(bytes: &[u8], room: usize) -> Result<Option<Decoded<'_>>, DecodeError> {
    let Some(len) = peek_len(bytes, room)? else {
        return Ok(None);
    };
    let Some(rec) = bytes.get(..len) else {
        return Err(DecodeError(format!(
            "record of {len} bytes, {} read",
            bytes.len()
        )));
    };
    let info = u64::from_le_bytes(rec[..8].try_into().unwrap_or_default());
    let word = |at: usize| u32::from_le_bytes(rec[at..at + 4].try_into().unwrap_or_default());
    let (key_len, value_len, capacity, stored) = (word(8), word(12), word(16), word(20));
    let key = &rec[HEADER_LEN..HEADER_LEN + key_len as usize];
    let value_at = HEADER_LEN + key_len as usize;
    let value = &rec[value_at..value_at + value_len as usize];
    let computed = checksum(info, key_len, value_len, capacity, key, value);
    if computed != stored {
        return Err(DecodeError(format!(
            "record checksum {stored:#010x} does not match its contents ({computed:#010x})"
        )));
    }
    Ok(Some(Decoded {
        prev: info & PREV_MASK,
        tombstone: info & TOMBSTONE != 0,
        invalid: info & INVALID != 0,
        key,
        value,
        len,
    }))
}

/// Encodes a record into plain bytes, as the log holds it (tests and fuzz
/// seeds).
pub fn encode(prev: u64, tombstone: bool, key: &[u8], value: &[u8]) -> Vec<u8> {
    let capacity = capacity_for(key.len(), value.len());
    let mut out = vec![0u64; record_len(key.len(), capacity) / 8];
    // SAFETY: `out` is 8-aligned, zeroed and exactly one record long, and
    // nothing else can reach it.
    unsafe {
        let rec = Record::from_ptr(out.as_mut_ptr().cast());
        rec.init(prev, tombstone, key, value, capacity);
    }
    out.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A record in an in-memory page of the log.
///
/// A `Record` is only made for an address at or above the log's head while
/// the thread is epoch-protected, so the page under it stays in memory while
/// it is used. The key and capacity never change; the value and its length
/// change only under the exclusive lock, and only while the record is in the
/// mutable region, so reading them takes the shared lock unless the record is
/// below the safe read-only address.
#[derive(Clone, Copy)]
pub struct Record(NonNull<u8>);

impl Record {
    /// # Safety
    /// `ptr` is 8-aligned and points at a record header (or, for `init`, at
    /// room for the record) inside a page that stays allocated while the
    /// `Record` is used.
    pub unsafe fn from_ptr(ptr: *mut u8) -> Record {
        // SAFETY: the caller's contract: the pointer is into a live page.
        Record(unsafe { NonNull::new_unchecked(ptr) })
    }

    fn info(&self) -> &AtomicU64 {
        // SAFETY: the header starts with an 8-aligned word that every thread
        // accesses atomically (see `from_ptr`).
        unsafe { AtomicU64::from_ptr(self.0.as_ptr().cast()) }
    }

    fn u32_at(&self, at: usize) -> &AtomicU32 {
        // SAFETY: `at` is 8, 12, 16 or 20, 4-aligned inside the header.
        unsafe { AtomicU32::from_ptr(self.0.as_ptr().add(at).cast()) }
    }

    /// Writes a fresh record in room nobody else reads yet.
    ///
    /// # Safety
    /// The room is `record_len(key.len(), capacity)` bytes, zeroed, and not
    /// yet reachable by another thread.
    pub unsafe fn init(
        &self,
        prev: u64,
        tombstone: bool,
        key: &[u8],
        value: &[u8],
        capacity: usize,
    ) {
        let info = (prev & PREV_MASK) | PRESENT | if tombstone { TOMBSTONE } else { 0 };
        let (key_len, value_len) = (key.len() as u32, value.len() as u32);
        // SAFETY: the room is the caller's and holds key and capacity.
        unsafe {
            let base = self.0.as_ptr();
            std::ptr::copy_nonoverlapping(key.as_ptr(), base.add(HEADER_LEN), key.len());
            std::ptr::copy_nonoverlapping(
                value.as_ptr(),
                base.add(HEADER_LEN + key.len()),
                value.len(),
            );
        }
        self.u32_at(8).store(key_len, Ordering::Relaxed);
        self.u32_at(12).store(value_len, Ordering::Relaxed);
        self.u32_at(16).store(capacity as u32, Ordering::Relaxed);
        let crc = checksum(info, key_len, value_len, capacity as u32, key, value);
        self.u32_at(20).store(crc, Ordering::Relaxed);
        self.info().store(info, Ordering::Release);
    }

    /// The info word.
    pub fn load_info(&self) -> u64 {
        self.info().load(Ordering::Acquire)
    }

    /// The previous record of the chain.
    pub fn prev(&self) -> u64 {
        self.load_info() & PREV_MASK
    }

    /// The key (never changes).
    pub fn key(&self) -> &[u8] {
        let len = self.u32_at(8).load(Ordering::Relaxed) as usize;
        // SAFETY: the key was written before the record was published and is
        // never written again.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().add(HEADER_LEN), len) }
    }

    /// The value's capacity (never changes).
    pub fn capacity(&self) -> usize {
        self.u32_at(16).load(Ordering::Relaxed) as usize
    }

    /// Copies the value out. The caller holds a lock on the record or knows
    /// it is below the safe read-only address.
    pub fn read_value(&self, out: &mut Vec<u8>) {
        let len = self.u32_at(12).load(Ordering::Relaxed) as usize;
        let key_len = self.u32_at(8).load(Ordering::Relaxed) as usize;
        out.clear();
        // SAFETY: `len` is at most the capacity after the key; no writer runs
        // (the caller's locking contract).
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts(self.0.as_ptr().add(HEADER_LEN + key_len), len)
        });
    }

    /// Replaces the value in place. The caller holds the exclusive lock and
    /// `value` fits the capacity.
    pub fn overwrite_value(&self, value: &[u8]) {
        let key_len = self.u32_at(8).load(Ordering::Relaxed) as usize;
        let capacity = self.capacity();
        debug_assert!(value.len() <= capacity);
        // SAFETY: the exclusive lock keeps readers and writers out, and the
        // value fits the room reserved for it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                value.as_ptr(),
                self.0.as_ptr().add(HEADER_LEN + key_len),
                value.len(),
            );
        }
        let info = self.load_info();
        self.u32_at(12).store(value.len() as u32, Ordering::Relaxed);
        let crc = checksum(
            info,
            key_len as u32,
            value.len() as u32,
            capacity as u32,
            self.key(),
            value,
        );
        self.u32_at(20).store(crc, Ordering::Relaxed);
    }

    /// Takes the shared lock (readers of the mutable region).
    pub fn lock_shared(&self) {
        let info = self.info();
        let mut spins = 0u32;
        loop {
            let v = info.load(Ordering::Relaxed);
            if v & EXCLUSIVE == 0
                && v & READERS != READERS
                && info
                    .compare_exchange_weak(v, v + READER, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff(&mut spins);
        }
    }

    /// Releases the shared lock.
    pub fn unlock_shared(&self) {
        self.info().fetch_sub(READER, Ordering::Release);
    }

    /// Takes the exclusive lock; `false` (and no lock) when the record is
    /// sealed, so the caller must look up the newer copy.
    pub fn lock_exclusive(&self) -> bool {
        let info = self.info();
        let mut spins = 0u32;
        loop {
            let v = info.load(Ordering::Relaxed);
            if v & SEALED != 0 {
                return false;
            }
            if v & (EXCLUSIVE | READERS) == 0
                && info
                    .compare_exchange_weak(v, v | EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return true;
            }
            backoff(&mut spins);
        }
    }

    /// Releases the exclusive lock, sealing the record when a copy of it now
    /// heads its chain.
    pub fn unlock_exclusive(&self, seal: bool) {
        let set = if seal { SEALED } else { 0 };
        let info = self.info();
        let mut v = info.load(Ordering::Relaxed);
        loop {
            match info.compare_exchange_weak(
                v,
                (v & !EXCLUSIVE) | set,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => v = now,
            }
        }
    }

    /// Marks a record whose insert lost its race, so log readers skip it.
    pub fn mark_invalid(&self) {
        self.info().fetch_or(INVALID, Ordering::Release);
    }
}

/// Spins briefly, then yields: with two cores a lock holder may be waiting
/// for the CPU.
pub fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoded_record_decodes_to_what_was_written() {
        let bytes = encode(4096, false, b"key", b"value");
        assert_eq!(bytes.len(), record_len(3, capacity_for(3, 5)));
        let d = decode(&bytes, bytes.len())
            .expect("decodes")
            .expect("present");
        assert_eq!((d.prev, d.tombstone, d.invalid), (4096, false, false));
        assert_eq!(
            (d.key, d.value, d.len),
            (&b"key"[..], &b"value"[..], bytes.len())
        );
    }

    #[test]
    fn any_changed_byte_of_a_record_fails_its_checksum_or_its_bounds() {
        let bytes = encode(64, true, b"k1", b"some value");
        for at in 0..bytes.len() {
            // Room after the value is not covered, nor the in-memory lock
            // bits in the info word's last byte.
            if at >= HEADER_LEN + 2 + 10 || at == 7 {
                continue;
            }
            let mut bad = bytes.clone();
            bad[at] ^= 0x01;
            let got = decode(&bad, bad.len());
            assert!(
                matches!(got, Err(_) | Ok(None)),
                "byte {at} changed and the record still decoded: {got:?}"
            );
        }
    }

    #[test]
    fn a_zero_word_ends_the_page_and_lengths_past_the_page_are_refused() {
        assert_eq!(decode(&[0u8; 32], 32), Ok(None));
        let bytes = encode(0, false, b"k", &[7u8; 100]);
        assert!(decode(&bytes, bytes.len() - 8).is_err());
        assert!(decode(&bytes[..30], 4096).is_err());
    }

    #[test]
    fn in_place_updates_keep_the_checksum_right() {
        let key = b"counter";
        let capacity = capacity_for(key.len(), 16);
        let mut room = vec![0u64; record_len(key.len(), capacity) / 8];
        // SAFETY: `room` is 8-aligned, zeroed, one record long and private.
        let rec = unsafe {
            let rec = Record::from_ptr(room.as_mut_ptr().cast());
            rec.init(0, false, key, b"1", capacity);
            rec
        };
        assert!(rec.lock_exclusive());
        rec.overwrite_value(b"123456789");
        rec.unlock_exclusive(true);
        assert!(
            !rec.lock_exclusive(),
            "a sealed record takes no more updates"
        );
        let mut v = Vec::new();
        rec.read_value(&mut v);
        assert_eq!(v, b"123456789");
        let bytes: Vec<u8> = room.iter().flat_map(|w| w.to_le_bytes()).collect();
        let d = decode(&bytes, bytes.len())
            .expect("decodes")
            .expect("present");
        assert_eq!(d.value, b"123456789");
    }
}
