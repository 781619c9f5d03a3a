//! Sessions: the operations. Each session is an epoch participant of its
//! own, pinned for the in-memory part of an operation only, never across a
//! disk read, so a session waiting for the disk holds up no other.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{Guard, LocalHandle};

use crate::index::{entry_address, with_address, KeyHash};
use crate::log::HybridLog;
use crate::record::{capacity_for, record_len, Record, TOMBSTONE};
use crate::store::HashStore;
use crate::{Error, Result};

/// Where a chain walk through memory ended.
enum Found {
    /// The key's newest record, in memory.
    Here(u64, Record),
    /// The chain goes on below the head, on disk, from this address.
    OnDisk(u64),
    /// The chain ended without the key.
    Absent,
}

/// What a read-modify-write does with the key ([`Session::update`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// Leave it as it is.
    Keep,
    /// Give it this value.
    Write(Vec<u8>),
    /// Delete it.
    Delete,
}

/// A record's exclusive lock, let go when dropped (also when a panic
/// unwinds through it), sealing the record if `seal` was set.
struct Exclusive {
    rec: Record,
    seal: bool,
}

impl Exclusive {
    /// `None` if the record is sealed.
    fn take(rec: Record) -> Option<Exclusive> {
        rec.lock_exclusive()
            .then_some(Exclusive { rec, seal: false })
    }
}

impl Drop for Exclusive {
    fn drop(&mut self) {
        self.rec.unlock_exclusive(self.seal);
    }
}

/// A key's newest record on disk; its bytes are in the session's buffer.
struct DiskHit {
    address: u64,
    tombstone: bool,
    value: std::ops::Range<usize>,
}

/// Where a chain walk on disk ended.
enum DiskWalk {
    Hit(DiskHit),
    Absent,
    /// Log compaction moved the begin past the walk: start over.
    Moved,
}

/// The region boundaries an operation works with, read once it is pinned.
pub(crate) struct View {
    pub(crate) begin: u64,
    pub(crate) head: u64,
    pub(crate) safe_read_only: u64,
    read_only: u64,
}

impl View {
    pub(crate) fn read(log: &HybridLog) -> View {
        let r = &log.regions;
        // `safe_read_only` first: read later, it could pass the
        // `read_only` read before it.
        let safe_read_only = r.safe_read_only.load(Ordering::SeqCst);
        View {
            begin: r.begin.load(Ordering::SeqCst),
            head: r.head.load(Ordering::SeqCst),
            safe_read_only,
            read_only: r.read_only.load(Ordering::SeqCst),
        }
    }

    fn walk(&self, log: &HybridLog, mut address: u64, key: &[u8]) -> Found {
        loop {
            if address < self.begin {
                return Found::Absent;
            }
            if address < self.head {
                return Found::OnDisk(address);
            }
            let rec = log.record(address);
            if rec.key() == key {
                return Found::Here(address, rec);
            }
            address = rec.prev();
        }
    }
}

#[derive(Default)]
struct SessionCounters {
    in_place: Cell<u64>,
    appended: Cell<u64>,
    disk_reads: Cell<u64>,
    retries: Cell<u64>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// One thread's handle for operations on a [`HashStore`]. Not `Send`: a
/// session is an epoch participant tied to its thread, as in FASTER. Make
/// one per thread with [`HashStore::session`].
pub struct Session {
    // Dropped before the store it belongs to.
    pub(crate) handle: LocalHandle,
    pub(crate) store: Arc<HashStore>,
    value: RefCell<Vec<u8>>,
    pub(crate) disk: RefCell<Vec<u8>>,
    counters: SessionCounters,
}

impl HashStore {
    /// A session: the handle one thread runs operations through. It keeps
    /// the store open while it lives.
    pub fn session(self: &Arc<Self>) -> Session {
        Session::new(self.clone())
    }
}

impl Session {
    fn new(store: Arc<HashStore>) -> Session {
        Session {
            handle: store.log.register(),
            store,
            value: RefCell::default(),
            disk: RefCell::default(),
            counters: SessionCounters::default(),
        }
    }

    pub(crate) fn log(&self) -> &HybridLog {
        &self.store.log
    }

    fn check_sizes(&self, key: &[u8], value_len: usize) -> Result<usize> {
        let capacity = capacity_for(key.len(), value_len);
        let len = record_len(key.len(), capacity) as u64;
        if key.len() > u32::MAX as usize || len > self.log().page_size() {
            return Err(Error::InvalidArgument(format!(
                "a key of {} bytes and a value of {value_len} bytes make a record of {len} bytes, \
                 larger than a log page ({} bytes): open the store with a larger page_bits",
                key.len(),
                self.log().page_size()
            )));
        }
        Ok(capacity)
    }

    /// The value of `key`, if it has one.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.then_some(out))
    }

    /// Reads `key`'s value into `out`; `false` if the key has none.
    pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let log = self.log();
        let hash = KeyHash::of(key);
        loop {
            let (on_disk, begin) = {
                let _guard = self.handle.pin();
                let Some(slot) = self.store.index.find(hash) else {
                    return Ok(false);
                };
                let view = View::read(log);
                match view.walk(log, entry_address(slot.load(Ordering::Acquire)), key) {
                    Found::Absent => return Ok(false),
                    Found::Here(address, rec) => {
                        if rec.load_info() & TOMBSTONE != 0 {
                            return Ok(false);
                        }
                        if address >= view.safe_read_only {
                            rec.lock_shared();
                            rec.read_value(out);
                            rec.unlock_shared();
                        } else {
                            rec.read_value(out);
                        }
                        return Ok(true);
                    }
                    Found::OnDisk(address) => (address, view.begin),
                }
            };
            match self.walk_disk(on_disk, key, begin)? {
                DiskWalk::Hit(hit) if !hit.tombstone => {
                    out.clear();
                    out.extend_from_slice(&self.disk.borrow()[hit.value]);
                    return Ok(true);
                }
                DiskWalk::Hit(_) | DiskWalk::Absent => return Ok(false),
                DiskWalk::Moved => bump(&self.counters.retries),
            }
        }
    }

    /// Sets `key` to `value`.
    pub fn upsert(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(key, Some(value))
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.write(key, None)
    }

    fn write(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let capacity = self.check_sizes(key, value.map_or(0, <[u8]>::len))?;
        let log = self.log();
        let hash = KeyHash::of(key);
        loop {
            log.regions.check()?;
            let guard = self.handle.pin();
            let slot = self.store.index.find_or_create(hash)?;
            let entry = slot.load(Ordering::Acquire);
            let view = View::read(log);
            match (view.walk(log, entry_address(entry), key), value) {
                (Found::Here(address, rec), Some(value))
                    if address >= view.read_only
                        && rec.load_info() & TOMBSTONE == 0
                        && rec.capacity() >= value.len() =>
                {
                    if rec.lock_exclusive() {
                        rec.overwrite_value(value);
                        rec.unlock_exclusive(false);
                        bump(&self.counters.in_place);
                        return Ok(());
                    }
                    // Sealed: a newer copy heads the chain now.
                    bump(&self.counters.retries);
                    continue;
                }
                (Found::Absent, None) => return Ok(()),
                (Found::Here(_, rec), None) if rec.load_info() & TOMBSTONE != 0 => return Ok(()),
                _ => {}
            }
            // Blind writes need no lock on the record they shadow: an update
            // in place that lands on it after this append is ordered before it.
            let tombstone = value.is_none();
            let linked = self.append(
                &guard,
                slot,
                entry,
                key,
                value.unwrap_or_default(),
                capacity,
                tombstone,
            );
            if self.settle(linked, guard) {
                return Ok(());
            }
        }
    }

    /// After an append: `true` if it was linked; otherwise counts a retry
    /// and, when the log had no room, unpins and waits for some.
    fn settle(&self, linked: Option<bool>, guard: Guard) -> bool {
        match linked {
            Some(true) => true,
            Some(false) => {
                bump(&self.counters.retries);
                false
            }
            None => {
                drop(guard);
                bump(&self.counters.retries);
                self.log().wait_for_room(&self.handle);
                false
            }
        }
    }

    /// Appends a record and links it in place of `entry`: `Some(true)` if
    /// linked, `Some(false)` if the entry changed first (the record is marked
    /// invalid), `None` if the log had no room yet.
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        guard: &Guard,
        slot: &AtomicU64,
        entry: u64,
        key: &[u8],
        value: &[u8],
        capacity: usize,
        tombstone: bool,
    ) -> Option<bool> {
        let log = self.log();
        let len = record_len(key.len(), capacity) as u64;
        let address = log.allocate(len, guard)?;
        let rec = log.record(address);
        // SAFETY: the room was just allocated to this thread, zeroed when its
        // page was turned, and is reachable by nobody until the swap below.
        unsafe { rec.init(entry_address(entry), tombstone, key, value, capacity) };
        if slot
            .compare_exchange(
                entry,
                with_address(entry, address),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            bump(&self.counters.appended);
            Some(true)
        } else {
            rec.mark_invalid();
            Some(false)
        }
    }

    /// Read-modify-write: `update` gets the current value (or `None`) and
    /// returns the new one, or `None` to leave the key as it is. Returns
    /// what was written. `update` may run more than once when the operation
    /// retries, each time on the value current then, so it must not have
    /// other effects.
    pub fn rmw(
        &mut self,
        key: &[u8],
        mut update: impl FnMut(Option<&[u8]>) -> Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>> {
        match self.update(key, |old| update(old).map_or(Update::Keep, Update::Write))? {
            Update::Write(v) => Ok(Some(v)),
            Update::Keep | Update::Delete => Ok(None),
        }
    }

    /// Read-modify-write that may also delete: `update` gets the current
    /// value (or `None`) and says what to do; returns what was done (a
    /// delete of a key that has no value does nothing). As with
    /// [`Session::rmw`], `update` may run more than once.
    pub fn update(
        &mut self,
        key: &[u8],
        mut update: impl FnMut(Option<&[u8]>) -> Update,
    ) -> Result<Update> {
        let log = self.log();
        let hash = KeyHash::of(key);
        loop {
            log.regions.check()?;
            let guard = self.handle.pin();
            let slot = self.store.index.find_or_create(hash)?;
            let entry = slot.load(Ordering::Acquire);
            let view = View::read(log);
            let (decided, existed, locked) = match view.walk(log, entry_address(entry), key) {
                Found::Here(address, rec) if rec.load_info() & TOMBSTONE == 0 => {
                    // Above `safe_read_only` an update in place may still be
                    // running: take the lock, and seal the record if a copy
                    // replaces it.
                    let lock = if address >= view.safe_read_only {
                        let Some(lock) = Exclusive::take(rec) else {
                            bump(&self.counters.retries);
                            continue;
                        };
                        Some(lock)
                    } else {
                        None
                    };
                    // A panic in `update` unwinds through the lock, which
                    // lets the record go.
                    let decided = {
                        let mut value = self.value.borrow_mut();
                        rec.read_value(&mut value);
                        update(Some(&value))
                    };
                    if let Update::Write(new) = &decided {
                        if lock.is_some()
                            && address >= view.read_only
                            && new.len() <= rec.capacity()
                        {
                            rec.overwrite_value(new);
                            drop(lock);
                            bump(&self.counters.in_place);
                            return Ok(decided);
                        }
                    }
                    (decided, true, lock)
                }
                Found::Here(..) | Found::Absent => (update(None), false, None),
                Found::OnDisk(address) => {
                    drop(guard);
                    let old = match self.walk_disk(address, key, view.begin)? {
                        DiskWalk::Hit(hit) if !hit.tombstone => {
                            Some(self.disk.borrow()[hit.value].to_vec())
                        }
                        DiskWalk::Hit(_) | DiskWalk::Absent => None,
                        DiskWalk::Moved => {
                            bump(&self.counters.retries);
                            continue;
                        }
                    };
                    let decided = update(old.as_deref());
                    let guard = self.handle.pin();
                    let linked = self.apply(&guard, slot, entry, key, &decided, old.is_some())?;
                    if self.settle(linked, guard) {
                        return Ok(decided);
                    }
                    continue;
                }
            };
            let linked = self.apply(&guard, slot, entry, key, &decided, existed)?;
            if let Some(mut lock) = locked {
                lock.seal = linked == Some(true) && !matches!(decided, Update::Keep);
            }
            if self.settle(linked, guard) {
                return Ok(decided);
            }
        }
    }

    /// Appends what `decided` asks for in place of `entry` (as
    /// [`Session::append`]); nothing to do counts as linked.
    fn apply(
        &self,
        guard: &Guard,
        slot: &AtomicU64,
        entry: u64,
        key: &[u8],
        decided: &Update,
        existed: bool,
    ) -> Result<Option<bool>> {
        match decided {
            Update::Keep => Ok(Some(true)),
            Update::Delete if !existed => Ok(Some(true)),
            Update::Delete => Ok(self.append(
                guard,
                slot,
                entry,
                key,
                &[],
                capacity_for(key.len(), 0),
                true,
            )),
            Update::Write(new) => {
                let capacity = self.check_sizes(key, new.len())?;
                Ok(self.append(guard, slot, entry, key, new, capacity, false))
            }
        }
    }

    /// Follows a chain on disk from `address` to `key`'s newest record,
    /// leaving it in `self.disk`. `begin` is the log's begin when the
    /// operation started: the chain ends below it. Should log compaction
    /// have moved the begin past the walk since, the answer is
    /// [`DiskWalk::Moved`] and the operation starts over (compaction copied
    /// what was live before it moved the begin).
    fn walk_disk(&self, mut address: u64, key: &[u8], begin: u64) -> Result<DiskWalk> {
        let log = self.log();
        let mut disk = self.disk.borrow_mut();
        loop {
            if address < begin {
                return Ok(DiskWalk::Absent);
            }
            let moved = || address < log.regions.begin.load(Ordering::Acquire);
            if moved() {
                return Ok(DiskWalk::Moved);
            }
            bump(&self.counters.disk_reads);
            let Some(rec) = log.read_record(address, &mut disk, moved)? else {
                return Ok(DiskWalk::Moved);
            };
            if disk[rec.key.clone()] == *key {
                return Ok(DiskWalk::Hit(DiskHit {
                    address,
                    tombstone: rec.tombstone,
                    value: rec.value,
                }));
            }
            address = rec.prev;
        }
    }

    /// The address of `key`'s newest record, with the index entry it was
    /// found under (log compaction's liveness check).
    pub(crate) fn newest(&self, key: &[u8]) -> Result<Option<(&AtomicU64, u64, u64)>> {
        let log = self.log();
        let hash = KeyHash::of(key);
        loop {
            let (slot, entry, on_disk, begin) = {
                let _guard = self.handle.pin();
                let Some(slot) = self.store.index.find(hash) else {
                    return Ok(None);
                };
                let entry = slot.load(Ordering::Acquire);
                let view = View::read(log);
                match view.walk(log, entry_address(entry), key) {
                    Found::Absent => return Ok(None),
                    Found::Here(address, _) => return Ok(Some((slot, entry, address))),
                    Found::OnDisk(address) => (slot, entry, address, view.begin),
                }
            };
            match self.walk_disk(on_disk, key, begin)? {
                DiskWalk::Hit(hit) => return Ok(Some((slot, entry, hit.address))),
                DiskWalk::Absent => return Ok(None),
                DiskWalk::Moved => bump(&self.counters.retries),
            }
        }
    }

    /// Appends a copy of a live record and links it in place of `entry`;
    /// `false` if the entry changed first.
    pub(crate) fn copy_forward(
        &self,
        slot: &AtomicU64,
        entry: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        let capacity = self.check_sizes(key, value.len())?;
        loop {
            self.log().regions.check()?;
            let guard = self.handle.pin();
            match self.append(&guard, slot, entry, key, value, capacity, false) {
                Some(linked) => return Ok(linked),
                None => {
                    drop(guard);
                    self.log().wait_for_room(&self.handle);
                }
            }
        }
    }

    /// Adds this session's counters to the store's.
    pub fn flush_counters(&mut self) {
        let c = &self.counters;
        let s = &self.store.counters;
        let add = |a: &AtomicU64, v: &Cell<u64>| {
            let v = v.take();
            if v > 0 {
                a.fetch_add(v, Ordering::Relaxed);
            }
        };
        add(&s.in_place, &c.in_place);
        add(&s.appended, &c.appended);
        add(&s.disk_reads, &c.disk_reads);
        add(&s.retries, &c.retries);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.flush_counters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashOptions;
    use tern::io::MemFs;

    #[test]
    fn a_record_whose_insert_lost_its_race_is_not_recovered() {
        let fs = MemFs::new();
        {
            let store =
                HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
            let mut s = store.session();
            s.upsert(b"k", b"linked").expect("upsert");
            let slot = store.index.find(KeyHash::of(b"k")).expect("entry");
            let stale = with_address(slot.load(Ordering::Acquire), 0);
            let guard = s.handle.pin();
            assert_eq!(
                s.append(&guard, slot, stale, b"k", b"lost", 8, false),
                Some(false)
            );
            drop(guard);
            drop(s);
            store.checkpoint().expect("checkpoint");
            fs.crash();
        }
        let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("reopen");
        assert_eq!(
            store.session().get(b"k").expect("get").as_deref(),
            Some(&b"linked"[..])
        );
    }
}
