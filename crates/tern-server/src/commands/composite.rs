//! What commands on composite values (hashes, sets, sorted sets, lists)
//! share: a value's metadata (`WRONGTYPE` for another kind), its members
//! one at a time or in order, pending writes included, and writing them.
//! The layout is in [`crate::members`].

use super::{store_error, wrong_type, Access, Ctx};
use crate::expiry::now_ms;
use crate::keyspace::{Entry, Kind, KEY_OVERHEAD};
use crate::members::{member_key, member_prefix, prefix_end, Composite, MEMBER_OVERHEAD};
use crate::resp::Reply;
use crate::store::StoreError;

/// Refuses a member the engine could not store as a key with `key`.
pub(crate) fn check_member(ctx: &Ctx<'_>, key: &[u8], member: &[u8]) -> Result<(), Reply> {
    check_member_len(ctx, key, member.len())
}

/// Refuses a member whose engine key adds `len` bytes to `key` when the
/// engine could not store it.
pub(crate) fn check_member_len(ctx: &Ctx<'_>, key: &[u8], len: usize) -> Result<(), Reply> {
    let limit = ctx.state.max_key_len + KEY_OVERHEAD;
    if key.len() + len + MEMBER_OVERHEAD > limit {
        return Err(Reply::err(format!(
            "a member of {} bytes in a key of {} bytes exceeds the longest member the store accepts \
             ({} bytes together; raise [engine] max_key_size)",
            len,
            key.len(),
            limit - MEMBER_OVERHEAD
        )));
    }
    Ok(())
}

/// Most members one SRANDMEMBER or HRANDFIELD with a negative count (which
/// repeats members) returns: the reply is built whole in memory.
pub(crate) const MAX_RANDOM_REPLY: u64 = 1 << 20;

/// Refuses a negative count asking for more than [`MAX_RANDOM_REPLY`]
/// members (Redis would try to send them all).
pub(crate) fn check_random_count(c: i64) -> Result<(), Reply> {
    if c < 0 && c.unsigned_abs() > MAX_RANDOM_REPLY {
        return Err(Reply::err(format!(
            "count is too large: at most {MAX_RANDOM_REPLY} members a call; call again for more"
        )));
    }
    Ok(())
}

/// Redis's clamping of the rank range `start..=stop` (negative: from the
/// end) to a list or sorted set of `len`; `None` if the range is empty.
pub(crate) fn clamp(start: i64, stop: i64, len: u64) -> Option<(u64, u64)> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    let start = if start < 0 {
        start.saturating_add(len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop.saturating_add(len)
    } else {
        stop
    };
    if start > stop || start >= len {
        return None;
    }
    Some((start as u64, stop.min(len - 1) as u64))
}

/// A small random-number source for picking members.
pub(crate) fn rng() -> impl FnMut() -> u64 {
    let mut s = super::keys::random_u64() | 1;
    move || {
        // xorshift64*: enough for picking members.
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        s.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// `n` distinct random indexes below `len` (all of them if `n >= len`).
pub(crate) fn distinct_picks(len: usize, n: usize) -> Vec<usize> {
    let mut next = rng();
    let mut idx: Vec<usize> = (0..len).collect();
    let n = n.min(len);
    for i in 0..n {
        let j = i + (next() % (len - i) as u64) as usize;
        idx.swap(i, j);
    }
    idx.truncate(n);
    idx
}

/// A composite value as read: its metadata and expiry.
#[derive(Debug, Clone, Copy)]
pub struct Value {
    /// Version and size.
    pub meta: Composite,
    /// When it expires, unix ms.
    pub expire_at: Option<u64>,
}

/// Members with their stored bytes, in member order.
pub type Members = Vec<(Vec<u8>, Vec<u8>)>;

/// Which members a walk covers: those from `lo` (inclusive) to `hi`
/// (exclusive; `None`: to the last one), compared as bytes.
#[derive(Debug, Clone, Copy)]
pub struct Span<'a> {
    /// The first member that may be returned.
    pub lo: &'a [u8],
    /// The first member past the span.
    pub hi: Option<&'a [u8]>,
}

/// Moves a walk's iterator one member on.
fn step(it: &mut tern::DbIterator, reverse: bool) {
    if reverse {
        it.prev();
    } else {
        it.next();
    }
}

impl Ctx<'_> {
    /// The generation reads and writes go to.
    fn generation_now(&mut self) -> u32 {
        match &mut self.access {
            Access::Write(p) => p.generation(),
            _ => self.state.store.generation(),
        }
    }

    /// The value of composite `key` of `kind`; `None` if the key is absent,
    /// `WRONGTYPE` if it holds another kind. Counts a hit or a miss.
    pub fn composite(&mut self, key: &[u8], kind: Kind) -> Result<Option<Value>, Reply> {
        if matches!(self.access, Access::Read { .. }) && self.snapshot.is_none() {
            let snap = self
                .state
                .store
                .db
                .snapshot()
                .map_err(|e| store_error(e.into()))?;
            self.snapshot = Some(snap);
        }
        let Some(e) = self.get(key).map_err(store_error)? else {
            self.misses += 1;
            return Ok(None);
        };
        if e.kind != kind {
            return Err(wrong_type());
        }
        self.hits += 1;
        let meta = Composite::decode(kind, &e.value).map_err(|d| store_error(d.into()))?;
        if matches!(self.access, Access::Read { .. }) {
            let gen = self.state.store.generation();
            self.read_versions.push((key.to_vec(), gen, meta.version));
        }
        Ok(Some(Value {
            meta,
            expire_at: e.expire_at,
        }))
    }

    /// A new, empty value of `kind` (written once it has members).
    pub fn new_composite_of(&mut self, kind: Kind) -> Result<Value, Reply> {
        let mut v = self.new_composite()?;
        if kind == Kind::List {
            v.meta.head = Some(crate::members::LIST_START);
        }
        Ok(v)
    }

    /// A new, empty value (written once it has members).
    pub fn new_composite(&mut self) -> Result<Value, Reply> {
        let version = self.pending()?.new_version();
        Ok(Value {
            meta: Composite {
                version,
                size: 0,
                head: None,
            },
            expire_at: None,
        })
    }

    /// The engine key of `member` of `key`'s value `v`.
    fn member_engine_key(&mut self, key: &[u8], v: &Value, member: &[u8]) -> Vec<u8> {
        let gen = self.generation_now();
        member_key(self.state.store.layout(), gen, key, v.meta.version, member)
    }

    /// The stored bytes of `member` of `key`'s value `v`, pending writes
    /// included.
    pub fn member(
        &mut self,
        key: &[u8],
        v: &Value,
        member: &[u8],
    ) -> Result<Option<Vec<u8>>, Reply> {
        let k = self.member_engine_key(key, v, member);
        let db = &self.state.store.db;
        let r = match &mut self.access {
            Access::Write(p) => match p.lookup_raw(&k) {
                Some(found) => Ok(found.map(<[u8]>::to_vec)),
                None => db.get(&k),
            },
            Access::Read { .. } => db.get_opt(
                &k,
                &tern::ReadOptions {
                    snapshot: self.snapshot.as_ref(),
                    ..tern::ReadOptions::default()
                },
            ),
            Access::MemoryOnly { .. } => match db.get_if_cached(&k) {
                // A member found belongs to this value as it was at some
                // moment since its metadata was read: a version's members
                // change only while it is live. One not found may have been
                // dropped by compaction after the value was deleted: it
                // counts only if the metadata still says the same (a
                // version is never reused); otherwise the command runs
                // again on the read pool, from one snapshot.
                Ok(Some(None)) if !self.still(key, v)? => {
                    self.needs_io = true;
                    return Err(store_error(StoreError::WouldBlock));
                }
                Ok(Some(found)) => Ok(found),
                Ok(None) => {
                    self.needs_io = true;
                    return Err(store_error(StoreError::WouldBlock));
                }
                Err(e) => Err(e),
            },
        };
        r.map_err(|e| store_error(e.into()))
    }

    /// Whether every composite value this command read from its snapshot
    /// is still there, same version and generation: then no member it read
    /// can have been dropped by compaction meanwhile (compaction drops only
    /// the members of values deleted or replaced).
    pub(super) fn reads_still_hold(&self) -> bool {
        let store = &self.state.store;
        self.read_versions.iter().all(|(key, gen, version)| {
            if store.generation() != *gen {
                return false;
            }
            let Ok(Some(raw)) = store.db.get(&store.layout().key(*gen, key)) else {
                return false;
            };
            crate::keyspace::decode_value(raw).is_ok_and(|e| {
                e.kind.is_composite()
                    && Composite::decode(e.kind, &e.value).is_ok_and(|c| c.version == *version)
            })
        })
    }

    /// Forgets the snapshot and what was read from it, to run the command
    /// again.
    pub(super) fn restart_reads(&mut self) {
        self.snapshot = None;
        self.read_versions.clear();
        self.hits = 0;
        self.misses = 0;
    }

    /// Whether `key`'s metadata, read from memory, still describes `v`.
    fn still(&mut self, key: &[u8], v: &Value) -> Result<bool, Reply> {
        match self.state.store.get_at_cached(key, now_ms(), false, None) {
            Ok(Some(e)) => Ok(e.kind.is_composite()
                && Composite::decode(e.kind, &e.value).is_ok_and(|c| c == v.meta)),
            Ok(None) | Err(StoreError::WouldBlock) => Ok(false),
            Err(e) => Err(store_error(e)),
        }
    }

    /// Writes `member` of `key`'s value `v` (the caller updates the size).
    pub fn put_member(
        &mut self,
        key: &[u8],
        v: &Value,
        member: &[u8],
        bytes: &[u8],
    ) -> Result<(), Reply> {
        let k = self.member_engine_key(key, v, member);
        self.pending()?.put_member(key, k, bytes);
        Ok(())
    }

    /// Deletes `member` of `key`'s value `v` (the caller updates the size).
    pub fn delete_member(&mut self, key: &[u8], v: &Value, member: &[u8]) -> Result<(), Reply> {
        let k = self.member_engine_key(key, v, member);
        self.pending()?.delete_member(key, k);
        Ok(())
    }

    /// Writes the metadata of `key`'s value `v` of `kind`; a value left
    /// without members is deleted, as Redis deletes an empty hash.
    pub fn put_composite(&mut self, key: &[u8], kind: Kind, v: &Value) -> Result<(), Reply> {
        if v.meta.size == 0 {
            return self.delete(key);
        }
        self.put_kind(key, kind, &v.meta.encode(), v.expire_at)
    }

    /// Up to `limit` members of `key`'s value `v` from member `from` on (in
    /// member order), with their stored bytes, pending writes included;
    /// and the member to resume from (`None`: no more).
    pub fn members(
        &mut self,
        key: &[u8],
        kind: Kind,
        v: &Value,
        from: &[u8],
        limit: usize,
    ) -> Result<(Members, Option<Vec<u8>>), Reply> {
        self.walk(key, kind, v, Span { lo: from, hi: None }, limit, false)
    }

    /// Up to `limit` members of `key`'s value `v` in `span`, in member
    /// order or (`reverse`) from the last one down, with their stored
    /// bytes, pending writes included; and the next member the walk would
    /// have returned (`None`: no more).
    pub fn walk(
        &mut self,
        key: &[u8],
        kind: Kind,
        v: &Value,
        span: Span<'_>,
        limit: usize,
        reverse: bool,
    ) -> Result<(Members, Option<Vec<u8>>), Reply> {
        let mut out = Vec::new();
        let next = self.walk_each(key, kind, v, span, reverse, limit, &mut |m, val| {
            if out.len() >= limit {
                return false;
            }
            out.push((m.to_vec(), val));
            true
        })?;
        Ok((out, next))
    }

    /// How many members of `key`'s value `v` lie in `span`, counted
    /// without keeping them.
    pub fn count_members(
        &mut self,
        key: &[u8],
        kind: Kind,
        v: &Value,
        span: Span<'_>,
    ) -> Result<u64, Reply> {
        let mut n = 0u64;
        self.walk_each(key, kind, v, span, false, usize::MAX, &mut |_, _| {
            n += 1;
            true
        })?;
        Ok(n)
    }

    /// Hands the members of `key`'s value `v` in `span` to `f` one by one
    /// (in member order, or from the last one down), pending writes
    /// included, until `f` declines one: returns that member (`None` if
    /// the walk ran out). `hint` is how many members the caller expects to
    /// take (the engine reads ahead that far).
    ///
    /// On the read pool the walk reads the snapshot the metadata was read
    /// from; on the committer, the store merged with the pending writes.
    #[allow(clippy::too_many_arguments)]
    pub fn walk_each(
        &mut self,
        key: &[u8],
        kind: Kind,
        v: &Value,
        span: Span<'_>,
        reverse: bool,
        hint: usize,
        f: &mut dyn FnMut(&[u8], Vec<u8>) -> bool,
    ) -> Result<Option<Vec<u8>>, Reply> {
        if matches!(self.access, Access::MemoryOnly { .. }) {
            self.needs_io = true;
            return Err(store_error(StoreError::WouldBlock));
        }
        // The metadata `v` came from must be the state the walk reads: on
        // the read pool that is the command's snapshot, taken by
        // [`Ctx::composite`] before it read `v`.
        if matches!(self.access, Access::Read { .. }) && self.snapshot.is_none() {
            return Err(Reply::err(format!(
                "internal error: a {} walk without the snapshot its metadata was read from",
                kind.name()
            )));
        }
        let gen = self.generation_now();
        let prefix = member_prefix(self.state.store.layout(), gen, key, v.meta.version);
        let mut lo = prefix.clone();
        lo.extend_from_slice(span.lo);
        let hi = match span.hi {
            Some(h) => {
                let mut hi = prefix.clone();
                hi.extend_from_slice(h);
                hi
            }
            None => prefix_end(&prefix),
        };
        if lo >= hi {
            return Ok(None);
        }
        let mut it = self
            .state
            .store
            .db
            .iter(tern::ReadOptions {
                lower_bound: Some(lo.clone()),
                upper_bound: Some(hi.clone()),
                scan_len_hint: Some(hint.min(256)),
                snapshot: self.snapshot.as_ref(),
                ..tern::ReadOptions::default()
            })
            .map_err(|e| store_error(e.into()))?;
        let mut pend = match &mut self.access {
            Access::Write(p) => p.range(&lo, &hi),
            _ => Vec::new(),
        };
        if reverse {
            pend.reverse();
            it.seek_to_last();
        } else {
            it.seek(&lo);
        }
        let mut pend = pend.into_iter().peekable();
        let p = prefix.len();
        loop {
            let stored = it.valid().then(|| it.key());
            let next_pending = pend.peek().map(|(k, _)| k.as_slice());
            // The nearer key comes next; a pending write shadows the
            // stored entry of the same key.
            let take_pending = match (stored, next_pending) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(s), Some(q)) => (q <= s) != reverse || q == s,
            };
            let (k, val) = if take_pending {
                let Some((k, val)) = pend.next() else { break };
                if stored == Some(k.as_slice()) {
                    step(&mut it, reverse);
                }
                match val {
                    Some(val) => (k, val),
                    None => continue,
                }
            } else {
                let kv = (it.key().to_vec(), it.value().to_vec());
                step(&mut it, reverse);
                kv
            };
            if !f(&k[p..], val) {
                return Ok(Some(k[p..].to_vec()));
            }
        }
        it.status().map_err(|e| store_error(e.into()))?;
        Ok(None)
    }

    /// Stores `e`, the value of `src`, under `dst` as well, replacing what
    /// `dst` held: a string is written again; a composite value gets a new
    /// version under `dst` and a copy of every member (linear in its size).
    pub fn copy_value(&mut self, src: &[u8], dst: &[u8], e: &Entry) -> Result<(), Reply> {
        if !e.kind.is_composite() {
            return self.put_kind(dst, e.kind, &e.value, e.expire_at);
        }
        let from = Value {
            meta: Composite::decode(e.kind, &e.value).map_err(|d| store_error(d.into()))?,
            expire_at: e.expire_at,
        };
        let members = self.all_members(src, e.kind, &from)?;
        for (m, _) in &members {
            check_member_len(self, dst, m.len())?;
        }
        let mut to = self.new_composite()?;
        to.meta.size = from.meta.size;
        to.meta.head = from.meta.head;
        to.expire_at = from.expire_at;
        for (m, bytes) in &members {
            self.put_member(dst, &to, m, bytes)?;
        }
        self.put_composite(dst, e.kind, &to)
    }

    /// Every member of `key`'s value `v` with its stored bytes.
    pub fn all_members(&mut self, key: &[u8], kind: Kind, v: &Value) -> Result<Members, Reply> {
        Ok(self.members(key, kind, v, b"", usize::MAX)?.0)
    }
}
