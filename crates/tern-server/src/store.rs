//! The server's view of the engine: Redis keys and values encoded per
//! [`crate::keyspace`], with expiry applied on read.

use std::sync::atomic::{AtomicBool, Ordering};

use tern::{Db, ReadOptions, WriteBatch, WriteOptions};

use crate::config::AppendFsync;
use crate::expiry::now_ms;
use crate::keyspace::{
    self, decode_expiry as decode_expiry_of, decode_value, engine_key, live_entry, Entry,
};

/// Why a store operation failed.
#[derive(Debug)]
pub enum StoreError {
    /// The engine refused or failed.
    Engine(tern::Error),
    /// A stored value has an unknown layout.
    Format(String),
    /// Answering needs a read from the device, and the caller asked for
    /// memory only ([`Store::get_at_cached`]).
    WouldBlock,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Engine(e) => write!(f, "storage engine: {e}"),
            StoreError::Format(m) => write!(f, "unreadable stored value: {m}"),
            StoreError::WouldBlock => f.write_str("the read would wait on the disk"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<tern::Error> for StoreError {
    fn from(e: tern::Error) -> Self {
        StoreError::Engine(e)
    }
}

impl From<keyspace::DecodeError> for StoreError {
    fn from(e: keyspace::DecodeError) -> Self {
        StoreError::Format(e.0)
    }
}

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Keys per engine batch when deleting many keys (FLUSHDB).
const DELETE_BATCH: usize = 1000;

/// The engine plus the durability mode.
#[derive(Debug)]
pub struct Store {
    /// The engine.
    pub db: Db,
    appendfsync: AppendFsync,
    /// Set by unsynced writes, cleared by the once-a-second sync.
    dirty: AtomicBool,
}

impl Store {
    /// Wraps an open engine.
    pub fn new(db: Db, appendfsync: AppendFsync) -> Self {
        Store {
            db,
            appendfsync,
            dirty: AtomicBool::new(false),
        }
    }

    /// Write options for acknowledged writes under the durability mode.
    fn write_options(&self) -> WriteOptions {
        WriteOptions {
            sync: self.appendfsync == AppendFsync::Always,
            disable_wal: false,
        }
    }

    /// The live (unexpired) entry of `key`.
    pub fn get(&self, key: &[u8]) -> StoreResult<Option<Entry>> {
        self.get_at(key, now_ms())
    }

    /// The entry of `key` as of time `now` (unix ms).
    pub fn get_at(&self, key: &[u8], now: u64) -> StoreResult<Option<Entry>> {
        match self.db.get(&engine_key(key))? {
            None => Ok(None),
            Some(raw) => Ok(live_entry(raw, now)?),
        }
    }

    /// [`Store::get_at`] from memory only: [`StoreError::WouldBlock`] if
    /// the engine would have to read the device.
    pub fn get_at_cached(&self, key: &[u8], now: u64) -> StoreResult<Option<Entry>> {
        match self.db.get_if_cached(&engine_key(key))? {
            None => Err(StoreError::WouldBlock),
            Some(None) => Ok(None),
            Some(Some(raw)) => Ok(live_entry(raw, now)?),
        }
    }

    /// Adds a delete of `key` to `batch`.
    pub fn batch_delete(batch: &mut WriteBatch, key: &[u8]) {
        batch.delete(&engine_key(key));
    }

    /// Applies `batch` with the configured durability.
    pub fn write(&self, batch: WriteBatch) -> StoreResult<()> {
        self.db.write(batch, self.write_options())?;
        if self.appendfsync != AppendFsync::Always {
            self.dirty.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Makes every acknowledged write durable if some are not yet (the
    /// `everysec` tick): one fsync of the engine's WAL.
    pub fn sync_if_dirty(&self) -> StoreResult<()> {
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return Ok(());
        }
        self.db.sync_wal()?;
        Ok(())
    }

    /// Visits live keys in order, starting at the first key `>= from`
    /// (Redis key bytes), calling `f(key, entry)` until it returns false or
    /// `limit` entries (live or expired) were examined. Returns the key to
    /// resume from, or `None` when the keyspace is exhausted.
    pub fn scan(
        &self,
        from: &[u8],
        limit: usize,
        mut f: impl FnMut(&[u8], &Entry) -> bool,
    ) -> StoreResult<Option<Vec<u8>>> {
        let (lo, hi) = keyspace::namespace_bounds();
        let mut it = self.db.iter(ReadOptions {
            snapshot: None,
            lower_bound: Some(lo),
            upper_bound: Some(hi),
            // A bounded SCAN reads its values in one batch (the engine adds
            // the one entry after them, which names where to resume).
            scan_len_hint: (limit < usize::MAX).then_some(limit),
            ..ReadOptions::default()
        })?;
        it.seek(&engine_key(from));
        let now = now_ms();
        let mut seen = 0;
        while it.valid() {
            if seen >= limit {
                return Ok(Some(it.key()[1..].to_vec()));
            }
            seen += 1;
            let e = decode_value(it.value().to_vec())?;
            if !e.expired(now) && !f(&it.key()[1..], &e) {
                it.next();
                it.status()?;
                return Ok(if it.valid() {
                    Some(it.key()[1..].to_vec())
                } else {
                    None
                });
            }
            it.next();
        }
        it.status()?;
        Ok(None)
    }

    /// The first live key at or after `from`, if any.
    pub fn first_key_from(&self, from: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let mut found = None;
        self.scan(from, usize::MAX, |k, _| {
            found = Some(k.to_vec());
            false
        })?;
        Ok(found)
    }

    /// The last live key, if any.
    pub fn last_key(&self) -> StoreResult<Option<Vec<u8>>> {
        let (lo, hi) = keyspace::namespace_bounds();
        let mut it = self.db.iter(ReadOptions {
            snapshot: None,
            lower_bound: Some(lo),
            upper_bound: Some(hi),
            ..ReadOptions::default()
        })?;
        it.seek_to_last();
        let now = now_ms();
        while it.valid() {
            if decode_expiry_of(it.value())?.is_none_or(|t| t > now) {
                return Ok(Some(it.key()[1..].to_vec()));
            }
            it.prev();
        }
        it.status()?;
        Ok(None)
    }

    /// Deletes every Redis key, in batches.
    pub fn flush_all(&self) -> StoreResult<()> {
        let mut from = Vec::new();
        loop {
            let mut keys = Vec::new();
            let next = self.scan(&from, DELETE_BATCH, |k, _| {
                keys.push(k.to_vec());
                true
            })?;
            // Expired entries are skipped: compaction drops them.
            let mut b = WriteBatch::new();
            for k in &keys {
                Self::batch_delete(&mut b, k);
            }
            if !b.is_empty() {
                self.write(b)?;
            }
            match next {
                Some(n) => from = n,
                None => return Ok(()),
            }
        }
    }
}
