//! Writes the committer has accepted but not yet committed: one engine
//! batch, what it says about each key for commands that read before they
//! write, and the exact key counts it leads to.
//!
//! Every put and delete looks up the key's previous state (pending writes
//! first, then the committer's [`KeyCache`], then the value's header in the
//! store, never a blob read), so the
//! counts and the expiry index stay exact: a new key adds one, an
//! overwrite none; an expiry that changes moves the key's index entry. The
//! counts go into the same batch as the writes ([`Pending::take`]), so a
//! crash never separates them.

use std::collections::BTreeMap;

use tern::{ValueKind, WriteBatch};

use crate::cluster::slot::key_slot;
use crate::cluster::view::SlotSet;
use crate::key_cache::{Fingerprint, FingerprintMap, KeyCache};
use crate::keyspace::{encode_typed, expiry_key, marker_key, Kind, Layout, Meta, META_KEY};
use crate::store::{KeyState, Store, StoreResult};

/// What [`Pending::known`] knows of a key without reading the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    /// No record.
    Absent,
    /// A string holding this integer, with this expiry.
    Int(i64, Option<u64>),
}

/// The uncommitted writes of one commit group.
pub struct Pending {
    batch: WriteBatch,
    /// Engine key → encoded value (`None`: deleted). Built on the first
    /// read, so a group of plain writes never pays for it.
    overlay: Option<BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
    /// Redis key (by fingerprint) → its state after the pending writes.
    states: FingerprintMap<KeyState>,
    /// The Redis keys in `states`, for WATCH.
    written: Vec<Vec<u8>>,
    /// The last key fingerprinted and its fingerprint: a command reads,
    /// then writes, then accounts for one key, and hashes it once.
    memo: Option<(Vec<u8>, Fingerprint)>,
    /// The counts after the pending writes.
    meta: Meta,
    /// The counts as last committed.
    committed: Meta,
    /// States of the last batch taken, until it is known to have committed.
    unsettled: FingerprintMap<KeyState>,
    /// Their Redis keys.
    unsettled_keys: Vec<Vec<u8>>,
    /// What earlier commits left each key.
    cache: KeyCache,
    /// How Redis keys map to engine keys.
    layout: Layout,
    /// Slots this cluster node is importing: every write to one of their
    /// keys also writes the key's import marker.
    importing: Option<std::sync::Arc<SlotSet>>,
    /// Redis keys whose members changed without their metadata record
    /// (WATCH must see those writes too).
    member_writes: Vec<Vec<u8>>,
    /// Those of the last batch taken, until it settles.
    unsettled_members: Vec<Vec<u8>>,
}

impl Pending {
    /// Nothing pending, on top of the committed counts `meta`, knowing
    /// what `cache` remembers of earlier commits, for a store of `layout`.
    pub fn new(layout: Layout, meta: Meta, cache: KeyCache) -> Self {
        Pending {
            batch: WriteBatch::new(),
            overlay: None,
            states: FingerprintMap::default(),
            written: Vec::new(),
            memo: None,
            meta,
            committed: meta,
            unsettled: FingerprintMap::default(),
            unsettled_keys: Vec::new(),
            cache,
            layout,
            importing: None,
            member_writes: Vec::new(),
            unsettled_members: Vec::new(),
        }
    }

    /// Hands back the cache (once the last batch has settled).
    pub fn into_cache(self) -> KeyCache {
        self.cache
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.meta == self.committed
    }

    /// Approximate bytes pending.
    pub fn bytes(&self) -> usize {
        self.batch.approximate_size()
    }

    /// Keys stored once the pending writes commit.
    pub fn keys(&self) -> u64 {
        self.meta.keys
    }

    /// The generation the pending writes go to.
    pub fn generation(&self) -> u32 {
        self.meta.generation
    }

    /// The state of Redis key `key` (engine key `k`) after the pending
    /// writes.
    fn state(&mut self, store: &Store, key: &[u8], k: &[u8]) -> StoreResult<KeyState> {
        match self.remembered(key) {
            Some(s) => Ok(s),
            None => store.key_state(k),
        }
    }

    /// `key`'s fingerprint, hashed once for consecutive calls on one key.
    fn fingerprint(&mut self, key: &[u8]) -> Fingerprint {
        if let Some((k, fp)) = &self.memo {
            if k.as_slice() == key {
                return *fp;
            }
        }
        let fp = self.cache.fingerprint(key);
        self.expect(key, fp);
        fp
    }

    /// Fingerprints Redis key `key` and asks the CPU for the cache's slot of
    /// it ahead of the command that will look it up; hand the fingerprint
    /// to [`Pending::expect`] just before that command runs.
    pub fn prefetch(&self, key: &[u8]) -> Fingerprint {
        let fp = self.cache.fingerprint(key);
        self.cache.prefetch(fp);
        fp
    }

    /// The next command is about Redis key `key`, whose fingerprint
    /// [`Pending::prefetch`] gave as `fp`: it is not hashed again.
    pub fn expect(&mut self, key: &[u8], fp: Fingerprint) {
        debug_assert_eq!(
            fp,
            self.cache.fingerprint(key),
            "a fingerprint of another key"
        );
        match &mut self.memo {
            Some((k, f)) => {
                k.clear();
                k.extend_from_slice(key);
                *f = fp;
            }
            None => self.memo = Some((key.to_vec(), fp)),
        }
    }

    /// The state of Redis key `key` this group gave it, or else the one the
    /// cache remembers from earlier commits; `None`: only the store knows.
    fn remembered(&mut self, key: &[u8]) -> Option<KeyState> {
        let fp = self.fingerprint(key);
        match self.states.get(&fp) {
            Some(s) => Some(*s),
            None => self.cache.get(self.meta.generation, fp),
        }
    }

    /// Sets the state this group leaves Redis key `key` in.
    fn set_state(&mut self, key: &[u8], state: KeyState) {
        let fp = self.fingerprint(key);
        match self.states.entry(fp) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                *e.get_mut() = state;
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(state);
                self.written.push(key.to_vec());
            }
        }
    }

    /// What is known of Redis key `key` without reading the store or the
    /// pending writes: from its remembered state, that it is absent, or
    /// its integer value; `None`: ask [`Pending::lookup`], then the store.
    /// Agrees with [`Pending::lookup`] when both answer: every pending
    /// write of a key's record sets the state this group remembers for it
    /// (`set_state`), and a key this group did not write has no
    /// pending record write.
    pub fn known(&mut self, key: &[u8]) -> Option<Known> {
        let s = self.remembered(key)?;
        match (s.exists, s.int) {
            (false, _) => Some(Known::Absent),
            (true, Some(v)) => Some(Known::Int(v, s.expire_at)),
            (true, None) => None,
        }
    }

    /// Sets the slots being imported (cluster mode), whose writes leave
    /// import markers.
    pub fn set_importing(&mut self, slots: Option<std::sync::Arc<SlotSet>>) {
        self.importing = slots;
    }

    /// The slots being imported, as set.
    pub fn importing(&self) -> Option<std::sync::Arc<SlotSet>> {
        self.importing.clone()
    }

    /// The Redis keys of slots `first..=last` with an import marker,
    /// pending or committed: one range scan, for checking many keys.
    pub fn marked_in(
        &mut self,
        store: &Store,
        first: u16,
        last: u16,
    ) -> StoreResult<std::collections::HashSet<Vec<u8>>> {
        let skip = 1 + crate::keyspace::SLOT_LEN;
        let mut out: std::collections::HashSet<Vec<u8>> = store
            .markers_in(first, last)?
            .into_iter()
            .map(|m| m[skip..].to_vec())
            .collect();
        let (lo, _) = crate::keyspace::marker_bounds(first);
        let (_, hi) = crate::keyspace::marker_bounds(last.max(first));
        for (m, v) in self.range(&lo, &hi) {
            match v {
                Some(_) => out.insert(m[skip..].to_vec()),
                None => out.remove(&m[skip..]),
            };
        }
        Ok(out)
    }

    /// Whether Redis key `key` has an import marker, pending or committed.
    pub fn marked(&mut self, store: &Store, key: &[u8]) -> StoreResult<bool> {
        let m = marker_key(key);
        if let Some(v) = self.lookup_raw(&m) {
            return Ok(v.is_some());
        }
        Ok(store.db.get(&m)?.is_some())
    }

    /// Deletes engine key `k` outright (an import marker: no counts or
    /// index entries depend on it). Never a Redis key's record of one
    /// whose state is not already absent: the states this batch and the
    /// cache keep for a key answer the committer's reads of it
    /// ([`Pending::known`]).
    pub fn delete_raw(&mut self, k: &[u8]) {
        self.batch.delete(k);
        if let Some(o) = &mut self.overlay {
            o.insert(k.to_vec(), None);
        }
    }

    /// Writes engine key `k` outright (a record no counts depend on).
    /// Never a Redis key's record: the states this batch and the cache
    /// keep for a key answer the committer's reads of it
    /// ([`Pending::known`]).
    pub fn put_raw(&mut self, k: &[u8], v: &[u8]) {
        self.batch.put(k, v);
        if let Some(o) = &mut self.overlay {
            o.insert(k.to_vec(), Some(v.to_vec()));
        }
    }

    /// What the store holds for Redis key `key` once the pending writes
    /// land (headers only).
    pub fn key_state(&mut self, store: &Store, key: &[u8]) -> StoreResult<KeyState> {
        let k = self.layout.key(self.meta.generation, key);
        self.state(store, key, &k)
    }

    /// Counts Redis key `key`, with expiry `expire_at`, as stored (`add`)
    /// or takes such a count back: a key of files ingested behind the
    /// store (`crate::cluster::ingest`). No marker, and no expiry index
    /// entry (the caller writes it once the files are in).
    pub fn count_ingested(&mut self, key: &[u8], expire_at: Option<u64>, add: bool) {
        let m = &mut self.meta;
        if add {
            m.keys += 1;
            if let Some(t) = expire_at {
                m.expires += 1;
                m.expire_sum += u128::from(t);
            }
        } else {
            m.keys = m.keys.saturating_sub(1);
            if let Some(t) = expire_at {
                m.expires = m.expires.saturating_sub(1);
                m.expire_sum = m.expire_sum.saturating_sub(u128::from(t));
            }
        }
        let state = KeyState {
            exists: add,
            expire_at: expire_at.filter(|_| add),
            int: None,
        };
        self.set_state(key, state);
    }

    /// Writes the import marker of `key`.
    pub fn mark(&mut self, key: &[u8]) {
        let m = marker_key(key);
        self.batch.put(&m, b"");
        if let Some(o) = &mut self.overlay {
            o.insert(m, Some(Vec::new()));
        }
    }

    /// Sets Redis key `key` to stored value `raw` (header included) with
    /// expiry `expire_at`, keeping counts and the expiry index, but without
    /// an import marker: a bulk copy writing a file's version again on top
    /// of an older one of this store's own (`crate::cluster::ingest`), which
    /// a later attempt must still be free to write.
    pub fn put_stored_unmarked(
        &mut self,
        store: &Store,
        key: &[u8],
        raw: &[u8],
        expire_at: Option<u64>,
    ) -> StoreResult<()> {
        let k = self.layout.key(self.meta.generation, key);
        let old = self.state(store, key, &k)?;
        self.batch.put(&k, raw);
        if let Some(o) = &mut self.overlay {
            o.insert(k, Some(raw.to_vec()));
        }
        let new = KeyState {
            exists: true,
            expire_at,
            int: None,
        };
        self.account_as(store, key, old, new, false);
        Ok(())
    }

    /// Moves the counts and the expiry index of `key` from `old` to `new`.
    fn account(&mut self, store: &Store, key: &[u8], old: KeyState, new: KeyState) {
        self.account_as(store, key, old, new, true);
    }

    /// [`Pending::account`], leaving an import marker only if `mark`.
    fn account_as(&mut self, store: &Store, key: &[u8], old: KeyState, new: KeyState, mark: bool) {
        if mark
            && self
                .importing
                .as_ref()
                .is_some_and(|s| s.contains(key_slot(key)))
        {
            self.mark(key);
        }
        let m = &mut self.meta;
        // Saturating: a count is never worth a panic on the write path.
        m.keys = (m.keys + u64::from(new.exists)).saturating_sub(u64::from(old.exists));
        if old.expire_at != new.expire_at {
            let gen = m.generation;
            if let Some(t) = old.expire_at {
                m.expires = m.expires.saturating_sub(1);
                m.expire_sum = m.expire_sum.saturating_sub(u128::from(t));
                self.batch.delete(&expiry_key(gen, t, key));
            }
            if let Some(t) = new.expire_at {
                store.note_expiry(t);
                m.expires += 1;
                m.expire_sum += u128::from(t);
                self.batch.put(&expiry_key(gen, t, key), b"");
            }
        }
        self.set_state(key, new);
    }

    /// Sets Redis key `key` to a value of `kind` with `payload` (the
    /// string, or a composite's metadata).
    pub fn put(
        &mut self,
        store: &Store,
        key: &[u8],
        kind: Kind,
        payload: &[u8],
        expire_at: Option<u64>,
    ) -> StoreResult<()> {
        let k = self.layout.key(self.meta.generation, key);
        let old = self.state(store, key, &k)?;
        let v = encode_typed(kind, payload, expire_at);
        self.batch.put(&k, &v);
        if let Some(o) = &mut self.overlay {
            o.insert(k, Some(v));
        }
        let new = KeyState {
            exists: true,
            expire_at,
            // Strict parsing: the integer prints back as `payload`.
            int: match kind {
                Kind::String => crate::resp::parser::parse_int(payload),
                _ => None,
            },
        };
        self.account(store, key, old, new);
        Ok(())
    }

    /// Removes Redis key `key` (expired or not); returns whether a record
    /// existed.
    pub fn delete(&mut self, store: &Store, key: &[u8]) -> StoreResult<bool> {
        let k = self.layout.key(self.meta.generation, key);
        let old = self.state(store, key, &k)?;
        Ok(self.remove(store, key, k, old))
    }

    /// Removes `key` (engine key `k`) whose state is `old`, if it exists.
    fn remove(&mut self, store: &Store, key: &[u8], k: Vec<u8>, old: KeyState) -> bool {
        if !old.exists {
            // Deleting a key not imported yet settles it too: the bulk
            // copy must not bring it back.
            if self
                .importing
                .as_ref()
                .is_some_and(|s| s.contains(key_slot(key)))
            {
                self.mark(key);
            }
            return false;
        }
        self.batch.delete(&k);
        if let Some(o) = &mut self.overlay {
            o.insert(k, None);
        }
        self.account(store, key, old, KeyState::default());
        true
    }

    /// Active expiry of the index entry `(at, key)`: deletes `key` if its
    /// expiry is still `at` and returns true; otherwise drops the entry,
    /// which no longer describes the key.
    pub fn expire(&mut self, store: &Store, key: &[u8], at: u64) -> StoreResult<bool> {
        let k = self.layout.key(self.meta.generation, key);
        let s = self.state(store, key, &k)?;
        if s.exists && s.expire_at == Some(at) {
            return Ok(self.remove(store, key, k, s));
        }
        tracing::warn!(
            "tern serve: dropping a stale expiry index entry for a key of {} bytes",
            key.len()
        );
        self.batch
            .delete(&expiry_key(self.meta.generation, at, key));
        Ok(false)
    }

    /// What the pending writes say about Redis key `key`: `None` if they do
    /// not touch it, `Some(None)` if they delete it, else its new encoded
    /// value.
    pub fn lookup(&mut self, key: &[u8]) -> Option<Option<&[u8]>> {
        // Only a key this group gave a state has a pending record write (a
        // raw delete of a record is only ever of one already absent): any
        // other key is answered without ordering the pending writes.
        let fp = self.fingerprint(key);
        if !self.states.contains_key(&fp) {
            return None;
        }
        let k = self.layout.key(self.meta.generation, key);
        self.lookup_raw(&k)
    }

    /// [`Pending::lookup`] by engine key.
    pub fn lookup_raw(&mut self, k: &[u8]) -> Option<Option<&[u8]>> {
        self.overlay().and_then(|o| o.get(k)).map(|v| v.as_deref())
    }

    /// The pending writes by engine key, built on first use; `None` when
    /// nothing is pending. Ordered, so a member walk finds the pending
    /// writes in its range without looking at the others.
    fn overlay(&mut self) -> Option<&BTreeMap<Vec<u8>, Option<Vec<u8>>>> {
        if self.batch.is_empty() {
            return None;
        }
        let batch = &self.batch;
        Some(self.overlay.get_or_insert_with(|| {
            let mut o = BTreeMap::new();
            // Entries were built by `put`/`delete` above, so they parse.
            for e in batch.iter().flatten() {
                let v = (e.kind == ValueKind::Value).then(|| e.value.to_vec());
                o.insert(e.key.to_vec(), v);
            }
            o
        }))
    }

    /// The pending writes to engine keys in `[lo, hi)`, in key order
    /// (`None`: a delete). Member walks merge them with the store.
    pub fn range(&mut self, lo: &[u8], hi: &[u8]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let Some(o) = self.overlay() else {
            return Vec::new();
        };
        if lo >= hi {
            return Vec::new();
        }
        o.range::<[u8], _>((std::ops::Bound::Included(lo), std::ops::Bound::Excluded(hi)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Writes member key `k` of Redis key `key` (no counts depend on it).
    pub fn put_member(&mut self, key: &[u8], k: Vec<u8>, v: &[u8]) {
        self.note_member_write(key);
        self.batch.put(&k, v);
        if let Some(o) = &mut self.overlay {
            o.insert(k, Some(v.to_vec()));
        }
    }

    /// Deletes member key `k` of Redis key `key`.
    pub fn delete_member(&mut self, key: &[u8], k: Vec<u8>) {
        self.note_member_write(key);
        self.batch.delete(&k);
        if let Some(o) = &mut self.overlay {
            o.insert(k, None);
        }
    }

    fn note_member_write(&mut self, key: &[u8]) {
        let fp = self.fingerprint(key);
        if !self.states.contains_key(&fp)
            && self.member_writes.last().map(Vec::as_slice) != Some(key)
        {
            self.member_writes.push(key.to_vec());
        }
    }

    /// Whether the pending writes change Redis key `key` (an EXEC checks
    /// its watched keys against the writes ordered before it).
    pub fn writes_key(&self, key: &[u8]) -> bool {
        self.states.contains_key(&self.cache.fingerprint(key))
            || self.member_writes.iter().any(|k| k == key)
    }

    /// A version no composite value had before (see
    /// [`crate::members`]); committed with the counts.
    pub fn new_version(&mut self) -> u64 {
        let v = self.meta.next_version;
        self.meta.next_version += 1;
        v
    }

    /// Reserves `n` versions no composite value had before; returns the
    /// first. Committed with the counts.
    pub fn reserve_versions(&mut self, n: u64) -> u64 {
        let v = self.meta.next_version;
        self.meta.next_version = v.saturating_add(n);
        v
    }

    /// How Redis keys map to engine keys.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Takes the batch to commit, with the counts record when they changed,
    /// and the counts it commits; leaves nothing pending. The caller
    /// reports the commit's outcome through [`Pending::settle`].
    pub fn take(&mut self) -> (WriteBatch, Option<Meta>) {
        self.overlay = None;
        self.unsettled = std::mem::take(&mut self.states);
        self.unsettled_keys = std::mem::take(&mut self.written);
        self.unsettled_members = std::mem::take(&mut self.member_writes);
        let mut batch = std::mem::take(&mut self.batch);
        let meta = (self.meta != self.committed).then_some(self.meta);
        if let Some(m) = meta {
            batch.put(META_KEY, &m.encode());
        }
        self.committed = self.meta;
        (batch, meta)
    }

    /// Records whether the batch last taken `committed`, and starts over on
    /// top of the committed counts `meta` (the committer does after each
    /// commit: it may have failed, or FLUSHDB may have started a
    /// generation). A failed commit makes the cache forget everything: the
    /// engine may or may not hold the batch.
    ///
    /// The keys the batch wrote count as changed for WATCH either way.
    pub fn settle(&mut self, store: &Store, committed: bool) {
        let meta = store.meta();
        store.watches.touch(
            self.unsettled_keys
                .iter()
                .chain(self.unsettled_members.iter())
                .map(Vec::as_slice),
        );
        let unsettled = std::mem::take(&mut self.unsettled);
        if committed {
            self.cache.extend(self.meta.generation, unsettled);
        } else {
            self.cache.clear();
        }
        let cache = std::mem::take(&mut self.cache);
        let importing = self.importing.take();
        *self = Pending::new(self.layout, meta, cache);
        self.importing = importing;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    use tern::io::MemFs;

    use super::*;
    use crate::config::AppendFsync;

    fn store() -> Store {
        let opts = tern::Options {
            fs: MemFs::new(),
            ..tern::Options::default()
        };
        let db = tern::Db::open("/db", opts).unwrap();
        Store::open(
            db,
            AppendFsync::Always,
            Arc::new(AtomicU32::new(0)),
            1024,
            Layout::Plain,
        )
        .unwrap()
    }

    /// Puts `key` in its own batch, commits it if `commit`, and settles.
    fn put_and_settle(p: &mut Pending, s: &Store, key: &[u8], commit: bool) {
        p.put(s, key, Kind::String, b"v", None).unwrap();
        commit_and_settle(p, s, commit);
    }

    /// Commits what is pending if `commit` (else drops it), and settles.
    fn commit_and_settle(p: &mut Pending, s: &Store, commit: bool) {
        let (batch, meta) = p.take();
        let ok = commit && s.commit(batch, meta).is_ok();
        assert_eq!(ok, commit, "the commit failed");
        p.settle(s, ok);
    }

    /// Regression: versions reserved for a bulk copy part, with nothing
    /// else written in the group, left the batch empty, so the committer
    /// skipped the commit and the next group handed the same versions out
    /// again (a value created here then shared members with an ingested
    /// one).
    #[test]
    fn reserved_versions_alone_are_committed() {
        let s = store();
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        let before = s.meta().next_version;
        assert_eq!(p.reserve_versions(10), before);
        assert!(!p.is_empty(), "a counter change alone must be committed");
        commit_and_settle(&mut p, &s, true);
        assert_eq!(s.meta().next_version, before + 10);
        assert_eq!(p.new_version(), before + 10);
    }

    #[test]
    fn a_committed_write_is_remembered_so_the_next_one_reads_nothing() {
        let s = store();
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        put_and_settle(&mut p, &s, b"a", true);
        let reads = s.db.stats().point_reads;
        put_and_settle(&mut p, &s, b"a", true);
        assert_eq!(s.db.stats().point_reads, reads);
        assert_eq!(s.meta().keys, 1);
        assert_eq!(s.recount(s.meta().generation).unwrap(), s.meta());
    }

    /// Writes string `value` to `key` in its own batch, commits, settles.
    fn set_and_settle(p: &mut Pending, s: &Store, key: &[u8], value: &[u8], ttl: Option<u64>) {
        p.put(s, key, Kind::String, value, ttl).unwrap();
        commit_and_settle(p, s, true);
    }

    #[test]
    fn a_committed_integer_is_known_without_reading_the_store() {
        let s = store();
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        set_and_settle(&mut p, &s, b"n", b"41", None);
        set_and_settle(&mut p, &s, b"t", b"-7", Some(u64::MAX - 1));
        assert_eq!(p.known(b"n"), Some(Known::Int(41, None)));
        assert_eq!(p.known(b"t"), Some(Known::Int(-7, Some(u64::MAX - 1))));
        assert_eq!(
            p.known(b"never"),
            None,
            "nothing remembered: read the store"
        );
        // Within a group, before it commits, the group's own state counts.
        p.put(&s, b"n", Kind::String, b"42", None).unwrap();
        assert_eq!(p.known(b"n"), Some(Known::Int(42, None)));
        commit_and_settle(&mut p, &s, true);
        assert_eq!(p.known(b"n"), Some(Known::Int(42, None)));
    }

    #[test]
    fn only_canonical_integer_strings_are_known_by_value() {
        let s = store();
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        // Each would print back differently, or is not an i64 at all.
        for v in [
            &b"041"[..],
            b"+1",
            b"-0",
            b" 1",
            b"1 ",
            b"1.0",
            b"x",
            b"",
            b"9223372036854775808",
        ] {
            set_and_settle(&mut p, &s, b"k", v, None);
            assert_eq!(p.known(b"k"), None, "{:?}", String::from_utf8_lossy(v));
        }
        set_and_settle(&mut p, &s, b"k", b"-9223372036854775808", None);
        assert_eq!(p.known(b"k"), Some(Known::Int(i64::MIN, None)));
        // Another kind with the same payload is not a string.
        p.put(&s, b"h", Kind::Hash, b"12", None).unwrap();
        commit_and_settle(&mut p, &s, true);
        assert_eq!(p.known(b"h"), None);
    }

    #[test]
    fn a_deleted_key_is_known_absent_and_a_failed_commit_forgets_values() {
        let s = store();
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        set_and_settle(&mut p, &s, b"n", b"5", None);
        assert!(p.delete(&s, b"n").unwrap());
        commit_and_settle(&mut p, &s, true);
        assert_eq!(p.known(b"n"), Some(Known::Absent));
        set_and_settle(&mut p, &s, b"m", b"6", None);
        // A batch that never reaches the engine: neither its value nor
        // what was remembered before may be trusted.
        p.put(&s, b"m", Kind::String, b"7", None).unwrap();
        commit_and_settle(&mut p, &s, false);
        assert_eq!(p.known(b"m"), None);
        assert_eq!(&s.get_at(b"m", 0).unwrap().unwrap().value[..], b"6");
    }

    #[test]
    fn a_failed_commit_leaves_no_state_behind() {
        let s = store();
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        put_and_settle(&mut p, &s, b"b", true);
        // This batch never reaches the engine: `a` must not be remembered
        // as existing, and what was remembered before may be stale too.
        put_and_settle(&mut p, &s, b"a", false);
        assert_eq!(p.cache.len(), 0);
        put_and_settle(&mut p, &s, b"a", true);
        assert_eq!(s.meta().keys, 2, "a is a new key");
        assert_eq!(s.recount(s.meta().generation).unwrap(), s.meta());
    }

    /// What `known` and `lookup` say of `key` in one group, where both
    /// answer, must describe the same pending write.
    fn assert_known_agrees_with_lookup(p: &mut Pending, key: &[u8]) {
        let Some(known) = p.known(key) else {
            return;
        };
        match (known, p.lookup(key)) {
            (Known::Absent, Some(Some(raw))) => {
                panic!("{key:?}: known absent, pending write {raw:?}")
            }
            (Known::Int(v, exp), Some(Some(raw))) => {
                let e = crate::keyspace::decode_value(raw.to_vec()).unwrap();
                assert_eq!(e.kind, Kind::String, "{key:?}");
                assert_eq!(e.value, v.to_string().as_bytes(), "{key:?}");
                assert_eq!(e.expire_at, exp, "{key:?}");
            }
            (Known::Int(..), Some(None)) => panic!("{key:?}: known integer, pending delete"),
            _ => {}
        }
    }

    #[test]
    fn known_states_agree_with_the_pending_writes_of_every_kind() {
        let s = store();
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        set_and_settle(&mut p, &s, b"old", b"1", None);
        set_and_settle(&mut p, &s, b"gone", b"2", None);
        let keys: [&[u8]; 6] = [b"old", b"gone", b"n", b"str", b"h", b"new"];
        p.put(&s, b"old", Kind::String, b"10", Some(u64::MAX - 5))
            .unwrap();
        assert!(p.delete(&s, b"gone").unwrap());
        p.put(&s, b"n", Kind::String, b"-3", None).unwrap();
        p.put(&s, b"str", Kind::String, b"abc", None).unwrap();
        p.put(&s, b"h", Kind::Hash, b"12", None).unwrap();
        assert!(!p.delete(&s, b"new").unwrap());
        for k in keys {
            assert_known_agrees_with_lookup(&mut p, k);
        }
        // Overwritten within the group: the last write wins in both.
        p.put(&s, b"n", Kind::String, b"x", None).unwrap();
        p.put(&s, b"str", Kind::String, b"8", None).unwrap();
        assert!(p.delete(&s, b"old").unwrap());
        for k in keys {
            assert_known_agrees_with_lookup(&mut p, k);
        }
        assert_eq!(p.known(b"n"), None, "no longer an integer");
        assert_eq!(p.known(b"str"), Some(Known::Int(8, None)));
        assert_eq!(p.known(b"old"), Some(Known::Absent));
        commit_and_settle(&mut p, &s, true);
        assert_eq!(s.recount(s.meta().generation).unwrap(), s.meta());
    }

    /// Each INCR reads its key before writing it: answered from the key
    /// states, a group of them never orders its writes in the overlay.
    #[test]
    fn reads_of_known_keys_do_not_build_the_overlay() {
        let s = store();
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        set_and_settle(&mut p, &s, b"c0", b"0", None);
        for i in 0..100u32 {
            let key = format!("c{}", i % 10).into_bytes();
            let cur = match p.known(&key) {
                Some(Known::Int(v, _)) => v,
                Some(Known::Absent) => 0,
                None => {
                    // Not yet known: the store says (no pending write).
                    assert_eq!(p.lookup(&key), None);
                    s.get_at(&key, 0)
                        .unwrap()
                        .map_or(0, |e| crate::resp::parser::parse_int(&e.value).unwrap())
                }
            };
            p.put(
                &s,
                &key,
                Kind::String,
                (cur + 1).to_string().as_bytes(),
                None,
            )
            .unwrap();
        }
        assert!(p.overlay.is_none(), "the overlay was built");
        commit_and_settle(&mut p, &s, true);
        let c0 = s.get_at(b"c0", 0).unwrap().unwrap();
        assert_eq!(&c0.value[..], b"10");
        let c9 = s.get_at(b"c9", 0).unwrap().unwrap();
        assert_eq!(&c9.value[..], b"10");
    }
}
