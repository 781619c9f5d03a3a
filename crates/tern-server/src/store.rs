//! The server's view of the engine: Redis keys and values encoded per
//! [`crate::keyspace`], with expiry applied on read, and the exact key
//! counts the committer keeps.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tern::{Db, ReadOptions, WriteBatch, WriteOptions};

use crate::config::AppendFsync;
use crate::expiry::now_ms;
use crate::keyspace::{
    self, decode_header, engine_key, expiry_key, generation_bounds, live_entry, parse_expiry_key,
    ClusterRecord, Entry, Header, Kind, Layout, Meta, CLUSTER_KEY, KEY_OVERHEAD, META_KEY,
    NS_EXPIRES, NS_KEYS, NS_V1_STRINGS,
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

/// A fresh node id: 40 hex digits from the clock, the process and a
/// counter, hashed (unique enough to tell nodes apart; not a secret).
fn new_node_id() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!(
        "{nanos}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let a = xxhash_rust::xxh3::xxh3_128(seed.as_bytes());
    let b = xxhash_rust::xxh3::xxh3_64_with_seed(seed.as_bytes(), 0x7e57);
    format!("{a:032x}{:08x}", b >> 32)
}

/// Keys per engine batch when migrating a format 1 store.
const MIGRATE_BATCH: usize = 1000;
/// Bytes per engine batch when migrating a format 1 store.
const MIGRATE_BATCH_BYTES: usize = 4 << 20;

/// One page of a slot's records and where the next starts (`None`: the
/// slot is exhausted).
pub type SlotPage = (Vec<(Vec<u8>, Entry)>, Option<Vec<u8>>);

/// What the store holds for one Redis key, read from its header only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyState {
    /// A record exists (possibly expired but not yet removed).
    pub exists: bool,
    /// Its expiry, unix ms.
    pub expire_at: Option<u64>,
    /// Its value, when the committer wrote it as a string that is an
    /// integer in canonical form (what INCR writes); `None`: not known
    /// here (another kind, another string, or a state read from a header).
    /// Lets INCR and DECR on a key the committer remembers skip the read
    /// of the store.
    pub int: Option<i64>,
}

impl From<Header> for KeyState {
    fn from(h: Header) -> Self {
        KeyState {
            exists: true,
            expire_at: h.expire_at,
            int: None,
        }
    }
}

/// The engine plus the durability mode and the keyspace's counts.
#[derive(Debug)]
pub struct Store {
    /// The engine.
    pub db: Db,
    appendfsync: AppendFsync,
    /// Set by unsynced writes, cleared by the once-a-second sync.
    dirty: AtomicBool,
    /// The current generation; shared with the compaction filter, which
    /// drops older ones.
    generation: Arc<AtomicU32>,
    /// The counts as of the last commit.
    meta: Mutex<Meta>,
    /// The earliest expiry written to the index since active expiry last
    /// asked (`u64::MAX`: none).
    expiry_floor: AtomicU64,
    /// How Redis keys map to engine keys.
    layout: Layout,
    /// A cluster node's id (slotted layout only).
    node_id: Option<String>,
    /// Keys clients WATCH.
    pub watches: crate::watch::Watches,
}

impl Store {
    /// Wraps an open engine: reads the keyspace record, moving a format 1
    /// keyspace to format 2 first (resumable: each batch moves keys
    /// atomically). `generation` is the compaction filter's;
    /// `max_key_size` the engine's key limit; `layout` how the caller
    /// (a standalone server or a cluster node) maps keys, which must be
    /// how the store was created.
    pub fn open(
        db: Db,
        appendfsync: AppendFsync,
        generation: Arc<AtomicU32>,
        max_key_size: usize,
        layout: Layout,
    ) -> StoreResult<Self> {
        let mut store = Store {
            db,
            appendfsync,
            dirty: AtomicBool::new(false),
            generation,
            meta: Mutex::new(Meta::default()),
            expiry_floor: AtomicU64::new(u64::MAX),
            layout,
            node_id: None,
            watches: crate::watch::Watches::default(),
        };
        let record = match store.db.get(CLUSTER_KEY)? {
            Some(raw) => Some(ClusterRecord::decode(&raw)?),
            None => None,
        };
        match (&record, layout) {
            (Some(r), Layout::Plain) => {
                return Err(StoreError::Format(format!(
                    "this data directory belongs to cluster node {}; start it with --cluster, or use another --dir",
                    r.node_id
                )))
            }
            (Some(r), Layout::Slotted) => store.node_id = Some(r.node_id.clone()),
            (None, Layout::Slotted) => {
                // Only an empty store becomes a cluster node: its keys would
                // have to move to the slotted layout otherwise.
                let it = store.range_iter(&[NS_KEYS], vec![NS_KEYS + 1], true, Some(1))?;
                it.status()?;
                let v1 =
                    store.range_iter(&[NS_V1_STRINGS], vec![NS_V1_STRINGS + 1], true, Some(1))?;
                v1.status()?;
                if it.valid() || v1.valid() {
                    return Err(StoreError::Format(
                        "this data directory holds a standalone server's keys; a cluster node starts on an empty directory (use another --dir)".into(),
                    ));
                }
                let r = ClusterRecord {
                    node_id: new_node_id(),
                };
                let mut b = WriteBatch::new();
                b.put(CLUSTER_KEY, &r.encode());
                store.db.write(b, WriteOptions::synced())?;
                store.node_id = Some(r.node_id);
            }
            (None, Layout::Plain) => {}
        }
        let meta = match store.db.get(META_KEY)? {
            Some(raw) => Meta::decode(&raw)?,
            None => {
                let moved = store.migrate_v1(max_key_size)?;
                if moved > 0 {
                    tracing::info!("tern serve: moved {moved} keys to keyspace format 2");
                }
                let meta = store.recount(0)?;
                let mut b = WriteBatch::new();
                b.put(META_KEY, &meta.encode());
                store.db.write(b, WriteOptions::synced())?;
                meta
            }
        };
        store.generation.store(meta.generation, Ordering::Release);
        *store.meta.lock() = meta;
        let meta = store.finish_interrupted_ingests(meta)?;
        *store.meta.lock() = meta;
        Ok(store)
    }

    /// After a crash in the middle of a cluster bulk copy (an ingest
    /// intent is left, `crate::cluster::ingest`): recounts the keyspace,
    /// writes the expiry index entries of the intent's slots again, and
    /// deletes the intents, in one synced write. Returns the counts.
    fn finish_interrupted_ingests(&self, meta: Meta) -> StoreResult<Meta> {
        let mut hi = keyspace::INGEST_INTENT_PREFIX.to_vec();
        if let Some(last) = hi.last_mut() {
            *last += 1;
        }
        let mut it = self.range_iter(keyspace::INGEST_INTENT_PREFIX, hi, false, None)?;
        let mut intents = Vec::new();
        while it.valid() {
            intents.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        it.status()?;
        if intents.is_empty() {
            return Ok(meta);
        }
        tracing::warn!(
            "tern serve: {} bulk copy ingest(s) were interrupted; recounting the keyspace",
            intents.len()
        );
        let gen = meta.generation;
        let fresh = self.recount(gen)?;
        let mut b = WriteBatch::new();
        let p = self.layout.prefix_len();
        for (k, v) in &intents {
            let (first, last) = keyspace::decode_ingest_intent(v)?;
            let (lo, _) = Layout::slot_bounds(gen, first);
            let (_, hi) = Layout::slot_bounds(gen, last.max(first));
            let mut it = self.range_iter(&lo, hi, true, None)?;
            while it.valid() {
                if let Some(t) = self
                    .header(it.key(), it.value(), it.value_is_head())?
                    .and_then(|h| h.expire_at)
                {
                    b.put(&expiry_key(gen, t, &it.key()[p..]), b"");
                    self.note_expiry(t);
                }
                it.next();
            }
            it.status()?;
            b.delete(k);
        }
        b.put(META_KEY, &fresh.encode());
        self.db.write(b, WriteOptions::synced())?;
        Ok(fresh)
    }

    /// Writes the live string values of slots `first..=last` to `w` as
    /// generation `target_gen`'s records (their stored bytes, header
    /// included), starting at `from` (an engine key past its tag and
    /// generation: slot ‖ key; empty: the first slot's start), until
    /// `max_bytes` of keys and values went out. Returns where the next
    /// part starts (`None`: the slots are exhausted) and how many records
    /// went out. Hashes, sets, sorted sets and lists are left out: they
    /// move as dumps ([`Store::slot_page_composites`]). The cluster bulk
    /// copy's export.
    pub fn export_strings(
        &self,
        slots: (u16, u16),
        from: &[u8],
        target_gen: u32,
        w: &mut tern::ingest::ExportWriter,
        max_bytes: u64,
    ) -> StoreResult<(Option<Vec<u8>>, u64)> {
        let gen = self.generation();
        let (mut lo, _) = Layout::slot_bounds(gen, slots.0);
        let (_, hi) = Layout::slot_bounds(gen, slots.1);
        if !from.is_empty() {
            lo.truncate(keyspace::KEY_PREFIX_LEN);
            lo.extend_from_slice(from);
        }
        let mut it = self.range_iter(&lo, hi, false, Some(256))?;
        let now = now_ms();
        let mut n = 0;
        let mut key = Vec::new();
        while it.valid() {
            if w.bytes_added() >= max_bytes {
                return Ok((Some(it.key()[keyspace::KEY_PREFIX_LEN..].to_vec()), n));
            }
            let v = it.value();
            let live_string =
                decode_header(v, false)?.is_some_and(|h| h.kind == Kind::String && !h.expired(now));
            if live_string {
                key.clear();
                key.push(NS_KEYS);
                key.extend_from_slice(&target_gen.to_be_bytes());
                key.extend_from_slice(&it.key()[keyspace::KEY_PREFIX_LEN..]);
                w.add(&key, v)?;
                n += 1;
            }
            it.next();
        }
        it.status()?;
        Ok((None, n))
    }

    /// Moves format 1 strings (`'s' ‖ key`) to generation 0 of format 2,
    /// with their expiry index entries; returns how many moved.
    fn migrate_v1(&self, max_key_size: usize) -> StoreResult<u64> {
        let mut moved = 0;
        // Where the next batch starts: past the tombstones of moved keys.
        let mut from = vec![NS_V1_STRINGS];
        loop {
            let mut it = self.db.iter(ReadOptions {
                lower_bound: Some(vec![NS_V1_STRINGS]),
                upper_bound: Some(vec![NS_V1_STRINGS + 1]),
                scan_len_hint: Some(MIGRATE_BATCH),
                ..ReadOptions::default()
            })?;
            it.seek(&from);
            let mut b = WriteBatch::new();
            let mut n = 0;
            while it.valid() && n < MIGRATE_BATCH && b.approximate_size() < MIGRATE_BATCH_BYTES {
                let key = &it.key()[1..];
                let limit = max_key_size.saturating_sub(KEY_OVERHEAD);
                if key.len() > limit {
                    return Err(StoreError::Format(format!(
                        "a format 1 key of {} bytes is longer than the {limit} bytes format 2 allows; raise [engine] max_key_size by {KEY_OVERHEAD} and start again",
                        key.len()
                    )));
                }
                let value = it.value();
                if let Some(t) = decode_header(value, false)?.and_then(|h| h.expire_at) {
                    b.put(&expiry_key(0, t, key), b"");
                }
                b.put(&engine_key(0, key), value);
                b.delete(it.key());
                n += 1;
                from.clear();
                from.extend_from_slice(it.key());
                from.push(0);
                it.next();
            }
            it.status()?;
            if n == 0 {
                return Ok(moved);
            }
            self.db.write(b, WriteOptions::synced())?;
            moved += n as u64;
        }
    }

    /// Counts generation `gen` by walking it (headers only): what the
    /// committer's counts must equal. For opening a store without a
    /// keyspace record, and for tests.
    pub fn recount(&self, gen: u32) -> StoreResult<Meta> {
        let mut meta = Meta {
            generation: gen,
            // Not a count: carried over.
            next_version: self.meta().next_version,
            ..Meta::default()
        };
        self.walk(gen, b"", usize::MAX, |_, h| {
            meta.keys += 1;
            if let Some(t) = h.expire_at {
                meta.expires += 1;
                meta.expire_sum += u128::from(t);
            }
            true
        })?;
        Ok(meta)
    }

    /// Notes that an index entry expiring at `at` is being written.
    pub fn note_expiry(&self, at: u64) {
        self.expiry_floor.fetch_min(at, Ordering::Relaxed);
    }

    /// The earliest expiry noted since the last call (`u64::MAX`: none).
    pub fn take_expiry_floor(&self) -> u64 {
        self.expiry_floor.swap(u64::MAX, Ordering::Relaxed)
    }

    /// How Redis keys map to engine keys.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The cluster node id this store belongs to (cluster mode only).
    pub fn node_id(&self) -> Option<&str> {
        self.node_id.as_deref()
    }

    /// The current generation.
    pub fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// The counts as of the last commit.
    pub fn meta(&self) -> Meta {
        *self.meta.lock()
    }

    /// Write options for acknowledged writes under the durability mode.
    fn write_options(&self) -> WriteOptions {
        WriteOptions {
            sync: self.appendfsync == AppendFsync::Always,
            disable_wal: false,
        }
    }

    /// The entry of `key` as of time `now` (unix ms).
    pub fn get_at(&self, key: &[u8], now: u64) -> StoreResult<Option<Entry>> {
        self.get_in(key, now, None, None)
    }

    /// [`Store::get_at`] as of `snapshot`, else in `view` (a read-ahead's,
    /// [`Store::read_ahead`]), else at the latest state.
    pub fn get_in(
        &self,
        key: &[u8],
        now: u64,
        snapshot: Option<&tern::Snapshot>,
        view: Option<&tern::ReadAhead<'_>>,
    ) -> StoreResult<Option<Entry>> {
        let k = self.layout.key(self.generation(), key);
        let raw = match (snapshot, view) {
            (None, None) => self.db.get(&k)?,
            (None, Some(v)) => self.db.get_in(v, &k)?,
            (Some(s), _) => self.db.get_opt(
                &k,
                &tern::ReadOptions {
                    snapshot: Some(s),
                    ..tern::ReadOptions::default()
                },
            )?,
        };
        match raw {
            None => Ok(None),
            Some(raw) => Ok(live_entry(raw, now)?),
        }
    }

    /// Read-ahead for point reads of Redis keys `keys` about to follow
    /// ([`tern::Db::read_ahead`]): their cache misses overlap instead of
    /// coming one per read. The reads may share the view it returns
    /// ([`Store::get_at_cached`]): the store as of now.
    pub fn read_ahead<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> tern::ReadAhead<'_> {
        let gen = self.generation();
        let mut ahead = self.db.read_ahead();
        let mut k = Vec::new();
        for key in keys.take(tern::READ_AHEAD_KEYS) {
            self.layout.key_into(gen, key, &mut k);
            ahead.key(&k);
        }
        ahead.prefetch();
        ahead
    }

    /// [`Store::get_at`] from memory only: [`StoreError::WouldBlock`] if
    /// the engine would have to read the device, or with `defer_mapped`
    /// if it would read the value through a blob file's mapping
    /// ([`tern::Db::get_if_cached_unless_mapped`]). With `view`, in the
    /// view of a read-ahead ([`Store::read_ahead`]) instead of a new one.
    pub fn get_at_cached(
        &self,
        key: &[u8],
        now: u64,
        defer_mapped: bool,
        view: Option<&tern::ReadAhead<'_>>,
    ) -> StoreResult<Option<Entry>> {
        let k = self.layout.key(self.generation(), key);
        let found = match view {
            Some(v) => self.db.get_if_cached_in(v, &k, defer_mapped)?,
            None if defer_mapped => self.db.get_if_cached_unless_mapped(&k)?,
            None => self.db.get_if_cached(&k)?,
        };
        match found {
            None => Err(StoreError::WouldBlock),
            Some(None) => Ok(None),
            Some(Some(raw)) => Ok(live_entry(raw, now)?),
        }
    }

    /// What the store holds under engine key `k`, from the value's header:
    /// no blob read unless the engine kept too short a head.
    pub fn key_state(&self, k: &[u8]) -> StoreResult<KeyState> {
        let Some(head) = self.db.get_head(k)? else {
            return Ok(KeyState::default());
        };
        let h = self.header(k, &head.bytes, head.partial)?;
        Ok(h.map(KeyState::from).unwrap_or_default())
    }

    /// The header of engine key `k` from `bytes`, its value or the head the
    /// engine kept (`partial`); the whole value is read only when the head
    /// is too short to hold the header. `None` if the key is gone by then.
    fn header(&self, k: &[u8], bytes: &[u8], partial: bool) -> StoreResult<Option<Header>> {
        if let Some(h) = decode_header(bytes, partial)? {
            return Ok(Some(h));
        }
        match self.db.get(k)? {
            None => Ok(None),
            Some(v) => Ok(decode_header(&v, false)?),
        }
    }

    /// A head-only iterator over the keys of generation `gen`.
    fn key_iter(&self, gen: u32) -> StoreResult<tern::DbIterator> {
        let (lo, hi) = generation_bounds(NS_KEYS, gen);
        Ok(self.db.iter(ReadOptions {
            lower_bound: Some(lo),
            upper_bound: Some(hi),
            value_heads: true,
            ..ReadOptions::default()
        })?)
    }

    /// An iterator over `[lo, hi)` positioned at `lo`, reading value heads
    /// only when `heads`; `hint` says how many keys the caller expects to
    /// read.
    fn range_iter(
        &self,
        lo: &[u8],
        hi: Vec<u8>,
        heads: bool,
        hint: Option<usize>,
    ) -> StoreResult<tern::DbIterator> {
        let mut it = self.db.iter(ReadOptions {
            lower_bound: Some(lo.to_vec()),
            upper_bound: Some(hi),
            value_heads: heads,
            scan_len_hint: hint,
            ..ReadOptions::default()
        })?;
        it.seek(lo);
        Ok(it)
    }

    /// Applies `batch` with the configured durability, then records `meta`
    /// as the committed counts (the caller put it in the batch).
    pub fn commit(&self, batch: WriteBatch, meta: Option<Meta>) -> StoreResult<()> {
        if let Err(e) = self.db.write(batch, self.write_options()) {
            // The batch may have reached the engine: composite versions it
            // handed out are never handed out again.
            if let Some(m) = meta {
                let mut cur = self.meta.lock();
                cur.next_version = cur.next_version.max(m.next_version);
            }
            return Err(e.into());
        }
        if self.appendfsync != AppendFsync::Always {
            self.dirty.store(true, Ordering::Relaxed);
        }
        if let Some(m) = meta {
            *self.meta.lock() = m;
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

    /// Visits the keys of generation `gen` in order from the first `>=
    /// from`, reading headers only, calling `f(key, header)` until it
    /// returns false or `limit` keys were visited. Returns the key to
    /// resume from, or `None` when the generation is exhausted.
    fn walk(
        &self,
        gen: u32,
        from: &[u8],
        limit: usize,
        mut f: impl FnMut(&[u8], Header) -> bool,
    ) -> StoreResult<Option<Vec<u8>>> {
        let mut it = self.key_iter(gen)?;
        it.seek(&self.layout.key(gen, from));
        let p = self.layout.prefix_len();
        let mut seen = 0;
        while it.valid() {
            if seen >= limit {
                return Ok(Some(it.key()[p..].to_vec()));
            }
            seen += 1;
            let Some(h) = self.header(it.key(), it.value(), it.value_is_head())? else {
                it.next();
                continue;
            };
            if !f(&it.key()[p..], h) {
                it.next();
                it.status()?;
                return Ok(it.valid().then(|| it.key()[p..].to_vec()));
            }
            it.next();
        }
        it.status()?;
        Ok(None)
    }

    /// Visits live keys in order, starting at the first key `>= from`
    /// (Redis key bytes), calling `f(key, expire_at)` until it returns
    /// false or `limit` keys (live or expired) were examined. Reads keys
    /// and value headers only. Returns the key to resume from, or `None`
    /// when the keyspace is exhausted.
    pub fn scan(
        &self,
        from: &[u8],
        limit: usize,
        mut f: impl FnMut(&[u8], Header) -> bool,
    ) -> StoreResult<Option<Vec<u8>>> {
        let now = now_ms();
        self.walk(self.generation(), from, limit, |k, h| {
            h.expired(now) || f(k, h)
        })
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
        let mut it = self.key_iter(self.generation())?;
        it.seek_to_last();
        let now = now_ms();
        while it.valid() {
            let header = self.header(it.key(), it.value(), it.value_is_head())?;
            if header.is_some_and(|h| !h.expired(now)) {
                return Ok(Some(it.key()[self.layout.prefix_len()..].to_vec()));
            }
            it.prev();
        }
        it.status()?;
        Ok(None)
    }

    /// Up to `limit` live keys of slot `slot`, in order (a slotted store;
    /// `CLUSTER GETKEYSINSLOT`).
    pub fn keys_in_slot(&self, slot: u16, limit: usize) -> StoreResult<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        self.walk_slot(slot, |k, _| {
            if keys.len() >= limit {
                return false;
            }
            keys.push(k.to_vec());
            true
        })?;
        Ok(keys)
    }

    /// Live keys of slot `slot` (a slotted store; `CLUSTER
    /// COUNTKEYSINSLOT`): a walk of the slot's key range, headers only.
    pub fn count_in_slot(&self, slot: u16) -> StoreResult<u64> {
        let mut n = 0;
        self.walk_slot(slot, |_, _| {
            n += 1;
            true
        })?;
        Ok(n)
    }

    /// Up to `max_keys` live keys of slot `slot` with their values, from
    /// Redis key `from` on (empty: the slot's start), stopping early once
    /// `max_bytes` of values were read; and the key to resume from, `None`
    /// when the slot is exhausted. The bulk copy of a slot migration.
    pub fn slot_page(
        &self,
        slot: u16,
        from: &[u8],
        max_keys: usize,
        max_bytes: usize,
    ) -> StoreResult<SlotPage> {
        let gen = self.generation();
        let (lo, hi) = Layout::slot_bounds(gen, slot);
        let mut it = self.range_iter(&lo, hi, false, Some(max_keys))?;
        if !from.is_empty() {
            it.seek(&self.layout.key(gen, from));
        }
        let p = self.layout.prefix_len();
        let now = now_ms();
        let (mut out, mut bytes) = (Vec::new(), 0);
        while it.valid() {
            if out.len() >= max_keys || bytes >= max_bytes {
                return Ok((out, Some(it.key()[p..].to_vec())));
            }
            if let Some(e) = live_entry(it.value().to_vec(), now)? {
                bytes += e.value.len() + it.key().len();
                out.push((it.key()[p..].to_vec(), e));
            }
            it.next();
        }
        it.status()?;
        Ok((out, None))
    }

    /// Writes the live hashes, sets, sorted sets and lists of whole slots,
    /// from `slots.0` on, to `w` as generation `target_gen`'s records:
    /// first every member (in member key order), then, in a table of their
    /// own, the metadata records. Each value gets version `versions.start +
    /// i` (versions are per store; the receiver reserved these), in its
    /// member keys and its metadata. Stops after the slot that took it past
    /// `max_bytes`, or before one whose values would need more versions
    /// than are left. Returns the first slot not exported (`None`: through
    /// `slots.1`) and the values exported (versions `versions.start..` in
    /// that number were used). The cluster bulk copy's export of
    /// composites.
    pub fn export_composites(
        &self,
        slots: (u16, u16),
        target_gen: u32,
        versions: std::ops::Range<u64>,
        w: &mut tern::ingest::ExportWriter,
        max_bytes: u64,
    ) -> StoreResult<(Option<u16>, u64)> {
        use crate::members::{member_prefix, Composite};
        let gen = self.generation();
        let now = now_ms();
        let p = self.layout.prefix_len();
        let budget = versions.end.saturating_sub(versions.start);
        // The metadata records, in key order: key, kind, metadata, expiry.
        let mut metas: Vec<(Vec<u8>, Kind, Composite, Option<u64>)> = Vec::new();
        let mut slot = slots.0;
        let mut out_key = Vec::new();
        loop {
            let (lo, hi) = Layout::slot_bounds(gen, slot);
            let mut it = self.range_iter(&lo, hi, true, None)?;
            let mut here = Vec::new();
            while it.valid() {
                let h = self.header(it.key(), it.value(), it.value_is_head())?;
                if h.is_some_and(|h| h.kind.is_composite() && !h.expired(now)) {
                    if let Some(raw) = self.db.get(it.key())? {
                        let e = keyspace::decode_value(raw)?;
                        let c = Composite::decode(e.kind, &e.value)?;
                        here.push((it.key()[p..].to_vec(), e.kind, c, e.expire_at));
                    }
                }
                it.next();
            }
            it.status()?;
            if (metas.len() + here.len()) as u64 > budget {
                if metas.is_empty() {
                    return Err(StoreError::Format(format!(
                        "slot {slot} holds {} hashes, sets, sorted sets and lists, more than the {budget} versions reserved for one part",
                        here.len()
                    )));
                }
                return self.finish_composites(w, target_gen, metas, Some(slot));
            }
            // Member keys sort by slot, then key length, then key.
            let mut order: Vec<usize> = (0..here.len()).collect();
            order.sort_by(|&a, &b| {
                (here[a].0.len(), &here[a].0).cmp(&(here[b].0.len(), &here[b].0))
            });
            for i in order {
                let (key, _, c, _) = &here[i];
                let nv = versions.start + (metas.len() + i) as u64;
                let from = member_prefix(self.layout, gen, key, c.version);
                let to = member_prefix(self.layout, target_gen, key, nv);
                let mut upper = from.clone();
                // The prefix's successor: `from` ends with the version,
                // below u64::MAX, so some byte can be raised.
                while upper.last() == Some(&0xff) {
                    upper.pop();
                }
                if let Some(b) = upper.last_mut() {
                    *b += 1;
                }
                let mut it = self.range_iter(&from, upper, false, None)?;
                while it.valid() && it.key().starts_with(&from) {
                    out_key.clear();
                    out_key.extend_from_slice(&to);
                    out_key.extend_from_slice(&it.key()[from.len()..]);
                    w.add(&out_key, it.value())?;
                    it.next();
                }
                it.status()?;
            }
            let first = versions.start + metas.len() as u64;
            for (i, (key, kind, c, exp)) in here.into_iter().enumerate() {
                let version = first + i as u64;
                metas.push((key, kind, Composite { version, ..c }, exp));
            }
            if slot >= slots.1 {
                return self.finish_composites(w, target_gen, metas, None);
            }
            slot += 1;
            if w.bytes_added() >= max_bytes {
                return self.finish_composites(w, target_gen, metas, Some(slot));
            }
        }
    }

    /// Writes the metadata records of [`Store::export_composites`] in a
    /// table of their own; returns `next` and how many there were.
    fn finish_composites(
        &self,
        w: &mut tern::ingest::ExportWriter,
        target_gen: u32,
        metas: Vec<(Vec<u8>, Kind, crate::members::Composite, Option<u64>)>,
        next: Option<u16>,
    ) -> StoreResult<(Option<u16>, u64)> {
        w.cut()?;
        for (key, kind, c, exp) in &metas {
            w.add(
                &self.layout.key(target_gen, key),
                &keyspace::encode_typed(*kind, &c.encode(), *exp),
            )?;
        }
        Ok((next, metas.len() as u64))
    }

    /// Up to `limit` keys of slot `slot`, expired ones included (dropping
    /// a slot that moved away).
    pub fn slot_keys_all(&self, slot: u16, limit: usize) -> StoreResult<Vec<Vec<u8>>> {
        let gen = self.generation();
        let (lo, hi) = Layout::slot_bounds(gen, slot);
        let mut it = self.range_iter(&lo, hi, true, Some(limit))?;
        let p = self.layout.prefix_len();
        let mut out = Vec::new();
        while it.valid() && out.len() < limit {
            out.push(it.key()[p..].to_vec());
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// The engine keys of every import marker of slots `first..=last`.
    pub fn markers_in(&self, first: u16, last: u16) -> StoreResult<Vec<Vec<u8>>> {
        let (lo, _) = keyspace::marker_bounds(first);
        let (_, hi) = keyspace::marker_bounds(last.max(first));
        let mut it = self.range_iter(&lo, hi, false, None)?;
        let mut out = Vec::new();
        while it.valid() {
            out.push(it.key().to_vec());
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// Up to `limit` import markers (engine keys) of slot `slot`.
    pub fn markers(&self, slot: u16, limit: usize) -> StoreResult<Vec<Vec<u8>>> {
        let (lo, hi) = keyspace::marker_bounds(slot);
        let mut it = self.range_iter(&lo, hi, false, Some(limit))?;
        let mut out = Vec::new();
        while it.valid() && out.len() < limit {
            out.push(it.key().to_vec());
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// The slots that hold keys or import markers, in order (one seek per
    /// slot that has some).
    pub fn occupied_slots(&self) -> StoreResult<(Vec<u16>, Vec<u16>)> {
        let mut keys = Vec::new();
        let mut marks = Vec::new();
        if self.layout != Layout::Slotted {
            return Ok((keys, marks));
        }
        let gen = self.generation();
        for (tag, out) in [(NS_KEYS, &mut keys), (keyspace::NS_IMPORTED, &mut marks)] {
            let (lo, hi) = if tag == NS_KEYS {
                generation_bounds(NS_KEYS, gen)
            } else {
                (vec![tag], vec![tag + 1])
            };
            let mut it = self.range_iter(&lo, hi, true, None)?;
            let at = lo.len();
            while it.valid() {
                let Some(s) = it.key().get(at..at + 2) else {
                    it.next();
                    continue;
                };
                let slot = u16::from_be_bytes([s[0], s[1]]);
                out.push(slot);
                match slot.checked_add(1) {
                    Some(next) => {
                        let mut k = lo.clone();
                        k.extend_from_slice(&next.to_be_bytes());
                        it.seek(&k);
                    }
                    None => break,
                }
            }
            it.status()?;
        }
        Ok((keys, marks))
    }

    /// Visits the live keys of slot `slot` in order until `f` returns
    /// false.
    fn walk_slot(&self, slot: u16, mut f: impl FnMut(&[u8], Header) -> bool) -> StoreResult<()> {
        if self.layout != Layout::Slotted {
            return Ok(());
        }
        let gen = self.generation();
        let (lo, hi) = Layout::slot_bounds(gen, slot);
        let mut it = self.range_iter(&lo, hi, true, None)?;
        let p = self.layout.prefix_len();
        let now = now_ms();
        while it.valid() {
            if let Some(h) = self.header(it.key(), it.value(), it.value_is_head())? {
                if !h.expired(now) && !f(&it.key()[p..], h) {
                    return Ok(());
                }
            }
            it.next();
        }
        it.status()?;
        Ok(())
    }

    /// Up to `limit` expiry index entries of generation `gen` due at `now`,
    /// from time `from` on, oldest first: `(expire_at, key)`.
    pub fn due_expiries(
        &self,
        gen: u32,
        from: u64,
        now: u64,
        limit: usize,
    ) -> StoreResult<Vec<(u64, Vec<u8>)>> {
        let (lo, _) = generation_bounds(NS_EXPIRES, gen);
        let mut it = self.db.iter(ReadOptions {
            lower_bound: Some(lo),
            upper_bound: Some(expiry_key(gen, now.saturating_add(1), b"")),
            ..ReadOptions::default()
        })?;
        it.seek(&expiry_key(gen, from, b""));
        let mut out = Vec::new();
        while it.valid() && out.len() < limit {
            match parse_expiry_key(it.key()) {
                Some((t, k)) => out.push((t, k.to_vec())),
                None => {
                    return Err(StoreError::Format(format!(
                        "malformed expiry index entry {:?}",
                        tern::tools::escape_bytes(it.key())
                    )))
                }
            }
            it.next();
        }
        it.status()?;
        Ok(out)
    }

    /// Starts a new, empty generation (FLUSHDB): one small write, whatever
    /// the number of keys. Older generations become invisible at once, and
    /// compaction drops them.
    pub fn flush_all(&self) -> StoreResult<()> {
        let next = self
            .meta()
            .generation
            .checked_add(1)
            .ok_or_else(|| StoreError::Format("generation counter exhausted".into()))?;
        let meta = Meta {
            generation: next,
            next_version: self.meta().next_version,
            ..Meta::default()
        };
        let mut b = WriteBatch::new();
        b.put(META_KEY, &meta.encode());
        // Synced whatever the durability mode: once the generation moves,
        // compaction starts dropping the old one, and a flush lost to a
        // power cut would leave counts for keys that are gone.
        self.db.write(b, WriteOptions::synced())?;
        *self.meta.lock() = meta;
        self.generation.store(next, Ordering::Release);
        Ok(())
    }
}
