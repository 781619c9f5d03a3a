//! Sorted key-value blocks with prefix compression and restart points.
//!
//! A block is a run of entries followed by the restart array:
//!
//! ```text
//! entry*  restart[0] u32 LE … restart[n-1] u32 LE  n u32 LE
//! entry = shared varint32 ‖ non_shared varint32 ‖ value_len varint32
//!         ‖ key[shared..] (non_shared bytes) ‖ value (value_len bytes)
//! ```
//!
//! `shared` is the length of the prefix the key has in common with the
//! previous entry's key. Every `restart_interval` entries the prefix is reset
//! (`shared = 0`) and the entry's offset is recorded as a restart point, so a
//! seek can binary-search the restart points and then scan forward. An empty
//! block still has one restart point (offset 0). The byte layout is specified
//! in `docs/format/sst.md`.
//!
//! The decoder ([`Block`], [`BlockIter`]) checks every length against the
//! block bounds and reports malformed input as a [`DecodeError`]; it never
//! panics and every step makes progress, so it cannot loop on bad input.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::error::DecodeError;
use crate::format::coding::{fixed32_at, put_fixed32, put_varint32};

/// Steps of a seek's binary search whose restart keys are prefetched
/// together: all the keys of a block of up to 15 restart points (a 4 KiB
/// block of short keys at the default interval of 16 has about 7).
const PREFETCH_DEPTH: usize = 4;
/// Most bytes of a restart interval a seek prefetches before scanning it.
const PREFETCH_SPAN: usize = 1024;

/// Key comparison used by a [`BlockIter`].
pub type Comparator = fn(&[u8], &[u8]) -> Ordering;

/// Builds one block. Keys must be added in increasing order (not checked here).
#[derive(Debug, Clone)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    counter: usize,
    restart_interval: usize,
    last_key: Vec<u8>,
    num_entries: usize,
    finished: bool,
}

impl BlockBuilder {
    /// A builder that places a restart point every `restart_interval` entries
    /// (at least 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            counter: 0,
            restart_interval: restart_interval.max(1),
            last_key: Vec::new(),
            num_entries: 0,
            finished: false,
        }
    }

    /// Clears the builder for a new block, keeping its allocations.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.last_key.clear();
        self.num_entries = 0;
        self.finished = false;
    }

    /// Appends an entry. `key` must sort after the previously added key.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        debug_assert!(!self.finished, "add after finish without reset");
        let mut shared = 0;
        if self.counter < self.restart_interval {
            shared = common_prefix_len(&self.last_key, key);
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
        }
        let non_shared = key.len() - shared;
        put_varint32(&mut self.buf, shared as u32);
        put_varint32(&mut self.buf, non_shared as u32);
        put_varint32(&mut self.buf, value.len() as u32);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&key[shared..]);
        self.counter += 1;
        self.num_entries += 1;
    }

    /// Appends the restart array and returns the finished block contents.
    /// Call [`BlockBuilder::reset`] before adding to it again.
    pub fn finish(&mut self) -> &[u8] {
        if !self.finished {
            for &r in &self.restarts {
                put_fixed32(&mut self.buf, r);
            }
            put_fixed32(&mut self.buf, self.restarts.len() as u32);
            self.finished = true;
        }
        &self.buf
    }

    /// Size the block would have if finished now.
    pub fn estimated_size(&self) -> usize {
        if self.finished {
            self.buf.len()
        } else {
            self.buf.len() + 4 * self.restarts.len() + 4
        }
    }

    /// True when no entry was added since the last reset.
    pub fn is_empty(&self) -> bool {
        self.num_entries == 0
    }

    /// Entries added since the last reset.
    pub fn num_entries(&self) -> usize {
        self.num_entries
    }

    /// The last key added (empty if none).
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }
}

/// Length of the common prefix of `a` and `b`.
#[inline]
pub fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A decoded (uncompressed) block whose restart array has been validated.
#[derive(Debug, Clone)]
pub struct Block {
    data: Vec<u8>,
    restarts_offset: usize,
    num_restarts: usize,
}

impl Block {
    /// Parses block contents (without the trailer), validating the restart
    /// array: at least one restart point, offsets strictly increasing, the
    /// first at 0 and all inside the entry area.
    pub fn new(data: Vec<u8>) -> Result<Block, DecodeError> {
        if data.len() < 4 {
            return Err(DecodeError::new(0, "block shorter than its restart count"));
        }
        let count_pos = data.len() - 4;
        let num_restarts = fixed32_at(&data, count_pos) as usize;
        if num_restarts == 0 || num_restarts > count_pos / 4 {
            return Err(DecodeError::new(
                count_pos,
                format!("bad restart count {num_restarts}"),
            ));
        }
        let restarts_offset = count_pos - 4 * num_restarts;
        let mut prev = None;
        for i in 0..num_restarts {
            let pos = restarts_offset + 4 * i;
            let r = fixed32_at(&data, pos) as usize;
            let ok = match prev {
                None => r == 0,
                Some(p) => r > p && r < restarts_offset,
            };
            if !ok {
                return Err(DecodeError::new(pos, format!("bad restart point {r}")));
            }
            prev = Some(r);
        }
        Ok(Block {
            data,
            restarts_offset,
            num_restarts,
        })
    }

    /// The whole block contents, restart array included.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Bytes held by the block (for cache weighting).
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// Number of restart points.
    pub fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// True when the block holds no entries.
    pub fn is_empty(&self) -> bool {
        self.restarts_offset == 0
    }

    #[inline]
    fn restart_point(&self, i: usize) -> usize {
        fixed32_at(&self.data, self.restarts_offset + 4 * i) as usize
    }

    /// Decodes the entry header at `pos`: returns (shared, non_shared,
    /// value_len, offset of the key delta). Checks that the entry fits in
    /// the entry area.
    #[inline]
    fn decode_entry(&self, pos: usize) -> Result<(usize, usize, usize, usize), DecodeError> {
        let limit = self.restarts_offset;
        let d = &self.data[..limit];
        if pos + 3 <= limit && (d[pos] | d[pos + 1] | d[pos + 2]) < 0x80 {
            // Fast path: all three lengths fit in one byte.
            let (s, n, v) = (d[pos] as usize, d[pos + 1] as usize, d[pos + 2] as usize);
            let p = pos + 3;
            if n + v > limit - p {
                return Err(DecodeError::new(pos, "block entry overruns the block"));
            }
            return Ok((s, n, v, p));
        }
        let mut r = crate::format::coding::Reader::new(&d[pos..]);
        let err = |e: DecodeError| DecodeError::new(pos + e.offset as usize, e.reason);
        let s = r.varint32().map_err(err)? as usize;
        let n = r.varint32().map_err(err)? as usize;
        let v = r.varint32().map_err(err)? as usize;
        let p = pos + r.pos();
        if n.saturating_add(v) > limit - p {
            return Err(DecodeError::new(pos, "block entry overruns the block"));
        }
        Ok((s, n, v, p))
    }

    /// Asks the CPU for the first cache line of each restart key a binary
    /// search over restart points `left..=right` may compare in its first
    /// [`PREFETCH_DEPTH`] steps (all of them for up to 15 points), so that
    /// their misses overlap instead of following one another: in a block
    /// not in the CPU's caches, each step of the search would otherwise
    /// wait on memory in turn. A hint only: the search reads the same keys
    /// either way.
    #[inline]
    fn prefetch_restart_keys(&self, left: usize, right: usize) {
        // (left, right, depth) of the ranges still to visit, as the search
        // splits them: at most one pending range per level.
        let mut stack = [(0usize, 0usize, 0usize); PREFETCH_DEPTH + 1];
        stack[0] = (left, right, 0);
        let mut len = 1;
        while len > 0 {
            len -= 1;
            let (l, r, d) = stack[len];
            if l >= r || d == PREFETCH_DEPTH {
                continue;
            }
            let mid = (l + r).div_ceil(2);
            crate::hint::prefetch_read(self.data[self.restart_point(mid)..].as_ptr());
            stack[len] = (mid, r, d + 1);
            stack[len + 1] = (l, mid - 1, d + 1);
            len += 2;
        }
    }

    /// Asks the CPU for the cache lines of the entries from restart point
    /// `i` up to the next one (at most [`PREFETCH_SPAN`] bytes), which a
    /// seek scans one after another.
    #[inline]
    fn prefetch_interval(&self, i: usize) {
        let start = self.restart_point(i);
        let end = if i + 1 < self.num_restarts {
            self.restart_point(i + 1)
        } else {
            self.restarts_offset
        };
        crate::hint::prefetch_bytes(&self.data[start..end], PREFETCH_SPAN);
    }

    /// The key stored at restart point `i` (whose `shared` must be 0).
    pub(crate) fn restart_key(&self, i: usize) -> Result<&[u8], DecodeError> {
        let pos = self.restart_point(i);
        let (s, n, _, p) = self.decode_entry(pos)?;
        if s != 0 {
            return Err(DecodeError::new(pos, "restart entry with a shared prefix"));
        }
        Ok(&self.data[p..p + n])
    }
}

/// A cursor over a [`Block`], shared (`Arc<Block>`, the default) or
/// borrowed (`&Block`: no count to update on a block every reader shares).
/// Keys are rebuilt incrementally into one reused buffer; values are
/// borrowed from the block.
///
/// Errors make the iterator invalid and are kept in [`BlockIter::status`].
#[derive(Debug, Clone)]
pub struct BlockIter<B = Arc<Block>> {
    block: B,
    cmp: Comparator,
    /// Offset of the current entry; `restarts_offset` when invalid.
    current: usize,
    /// Offset just past the current entry.
    next: usize,
    /// Restart point at or before `current`.
    restart_index: usize,
    key: Vec<u8>,
    value: (usize, usize),
    err: Option<DecodeError>,
}

impl<B: std::ops::Deref<Target = Block>> BlockIter<B> {
    /// An unpositioned iterator over `block`, ordering keys with `cmp`.
    pub fn new(block: B, cmp: Comparator) -> Self {
        Self::with_key_buffer(block, cmp, Vec::new())
    }

    /// [`BlockIter::new`] rebuilding keys in `key` (cleared), a buffer
    /// kept from an earlier iterator by [`BlockIter::into_key_buffer`], so
    /// that a lookup that makes many iterators allocates for none.
    pub fn with_key_buffer(block: B, cmp: Comparator, mut key: Vec<u8>) -> Self {
        key.clear();
        let end = block.restarts_offset;
        let n = block.num_restarts;
        BlockIter {
            block,
            cmp,
            current: end,
            next: end,
            restart_index: n,
            key,
            value: (0, 0),
            err: None,
        }
    }

    /// The key buffer, for [`BlockIter::with_key_buffer`].
    pub fn into_key_buffer(self) -> Vec<u8> {
        self.key
    }

    /// The block iterated.
    pub fn block(&self) -> &B {
        &self.block
    }

    /// True when positioned at an entry.
    #[inline]
    pub fn valid(&self) -> bool {
        self.err.is_none() && self.current < self.block.restarts_offset
    }

    /// The key at the cursor. Requires `valid()`.
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The value at the cursor. Requires `valid()`.
    #[inline]
    pub fn value(&self) -> &[u8] {
        &self.block.data[self.value.0..self.value.1]
    }

    /// The first error met, if any.
    pub fn status(&self) -> Result<(), DecodeError> {
        match &self.err {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn invalidate(&mut self) {
        self.current = self.block.restarts_offset;
        self.next = self.block.restarts_offset;
        self.restart_index = self.block.num_restarts;
    }

    fn fail(&mut self, e: DecodeError) {
        if self.err.is_none() {
            self.err = Some(e);
        }
        self.invalidate();
    }

    fn seek_to_restart_point(&mut self, i: usize) {
        self.key.clear();
        self.restart_index = i;
        let off = self.block.restart_point(i);
        self.current = off;
        self.next = off;
    }

    /// Decodes the entry at `self.next`. Returns false at the end or on error.
    #[inline]
    fn parse_next(&mut self) -> bool {
        if self.err.is_some() {
            return false;
        }
        let pos = self.next;
        if pos >= self.block.restarts_offset {
            self.invalidate();
            return false;
        }
        let (s, n, v, p) = match self.block.decode_entry(pos) {
            Ok(x) => x,
            Err(e) => {
                self.fail(e);
                return false;
            }
        };
        if s > self.key.len() {
            self.fail(DecodeError::new(
                pos,
                "shared prefix longer than previous key",
            ));
            return false;
        }
        self.current = pos;
        self.key.truncate(s);
        self.key.extend_from_slice(&self.block.data[p..p + n]);
        self.value = (p + n, p + n + v);
        self.next = p + n + v;
        while self.restart_index + 1 < self.block.num_restarts
            && self.block.restart_point(self.restart_index + 1) <= self.current
        {
            self.restart_index += 1;
        }
        true
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) {
        if self.err.is_some() {
            return;
        }
        self.seek_to_restart_point(0);
        self.parse_next();
    }

    /// Positions at the last entry.
    pub fn seek_to_last(&mut self) {
        if self.err.is_some() {
            return;
        }
        self.seek_to_restart_point(self.block.num_restarts - 1);
        while self.parse_next() && self.next < self.block.restarts_offset {}
    }

    /// Positions at the first entry with key `>= target`.
    pub fn seek(&mut self, target: &[u8]) {
        self.seek_between(target, 0, usize::MAX);
    }

    /// [`BlockIter::seek`] for a caller that knows where the last restart
    /// point whose key is `< target` lies: at an index in `first..=last`,
    /// or, when no restart key is below `target`, `first` is 0. Only the
    /// restart keys in that range are compared; `last` is clamped to the
    /// block's restart count.
    pub fn seek_between(&mut self, target: &[u8], first: usize, last: usize) {
        if self.err.is_some() {
            return;
        }
        // Last restart point whose key is < target.
        let right = last.min(self.block.num_restarts - 1);
        let (mut left, mut right) = (first.min(right), right);
        self.block.prefetch_restart_keys(left, right);
        while left < right {
            let mid = (left + right).div_ceil(2);
            let ord = match self.block.restart_key(mid) {
                Ok(k) => (self.cmp)(k, target),
                Err(e) => {
                    self.fail(e);
                    return;
                }
            };
            if ord == Ordering::Less {
                left = mid;
            } else {
                right = mid - 1;
            }
        }
        self.block.prefetch_interval(left);
        self.seek_to_restart_point(left);
        while self.parse_next() {
            if (self.cmp)(&self.key, target) != Ordering::Less {
                return;
            }
        }
    }

    /// Positions at the last entry with key `<= target`.
    pub fn seek_for_prev(&mut self, target: &[u8]) {
        self.seek(target);
        if self.err.is_some() {
            return;
        }
        if !self.valid() {
            self.seek_to_last();
            return;
        }
        while self.valid() && (self.cmp)(&self.key, target) == Ordering::Greater {
            self.prev();
        }
    }

    /// Moves to the next entry. Requires `valid()`.
    #[inline]
    pub fn next(&mut self) {
        if !self.valid() {
            return;
        }
        self.parse_next();
    }

    /// Moves to the previous entry. Requires `valid()`.
    pub fn prev(&mut self) {
        if !self.valid() {
            return;
        }
        let original = self.current;
        // Find the last restart point before the current entry.
        while self.block.restart_point(self.restart_index) >= original {
            if self.restart_index == 0 {
                self.invalidate();
                return;
            }
            self.restart_index -= 1;
        }
        self.seek_to_restart_point(self.restart_index);
        // Scan forward to the entry just before `original`.
        loop {
            if !self.parse_next() {
                if self.err.is_none() {
                    // The restart array promised an entry before `original`.
                    self.fail(DecodeError::new(original, "entry not reachable backward"));
                }
                return;
            }
            if self.next >= original {
                if self.next != original {
                    self.fail(DecodeError::new(original, "entries overlap"));
                }
                return;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
