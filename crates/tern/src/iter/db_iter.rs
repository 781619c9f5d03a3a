//! The user-facing iterator: MVCC visibility, tombstones and bounds on top
//! of the merge of every source.
//!
//! Moving forward, the inner iterator sits on the entry being returned.
//! Moving backward, it sits just before all entries of the returned key, whose
//! value is then held in `saved_value` (the LevelDB scheme).

use std::sync::Arc;

use super::read_ahead::{After, ReadAhead, Staged};
use super::BoxedIter;
use crate::blob::{Located, ScanResolver};
use crate::error::{Error, Result};
use crate::format::blob::BlobRef;
use crate::format::internal_key::{self, SeqNo, ValueKind, MAX_SEQ};
use crate::format::internal_key::{append_internal_key, KIND_FOR_SEEK};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Backward,
}

/// Resources an iterator must keep alive (the version whose files it reads).
pub type Pin = Arc<dyn std::any::Any + Send + Sync>;

/// A cursor over the user-visible key-value pairs of one snapshot.
///
/// ```no_run
/// # fn f(db: &tern::Db) -> tern::Result<()> {
/// let mut it = db.iter(Default::default())?;
/// it.seek_to_first();
/// while it.valid() {
///     println!("{:?} = {:?}", it.key(), it.value());
///     it.next();
/// }
/// it.status()?;
/// # Ok(()) }
/// ```
pub struct DbIterator {
    inner: BoxedIter,
    seq: SeqNo,
    direction: Direction,
    valid: bool,
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    scratch: Vec<u8>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    error: Option<Error>,
    /// Resolves separated values: forward in read-ahead batches, backward
    /// one at a time into `saved_value`.
    resolver: Option<ScanResolver>,
    /// Forward over separated values: entries read ahead of the caller.
    ahead: ReadAhead,
    /// Serve separated values by their head (never read a blob file).
    heads: bool,
    /// The current value is the head of a separated value: where the head
    /// starts in the inner cursor's value (forward; backward the head is
    /// copied to `saved_value`).
    head: Option<usize>,
    _pins: Vec<Pin>,
}

impl DbIterator {
    /// Wraps `inner`, showing the state as of `seq`.
    pub fn new(
        inner: BoxedIter,
        seq: SeqNo,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
        pins: Vec<Pin>,
    ) -> Self {
        DbIterator {
            inner,
            seq,
            direction: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            scratch: Vec::new(),
            lower,
            upper,
            error: None,
            resolver: None,
            ahead: ReadAhead::default(),
            heads: false,
            head: None,
            _pins: pins,
        }
    }

    /// Resolves separated values through `resolver`; `scan_len_hint`:
    /// entries the caller expects to read after each seek.
    pub fn with_resolver(mut self, resolver: ScanResolver, scan_len_hint: Option<usize>) -> Self {
        self.resolver = Some(resolver);
        self.ahead = ReadAhead::with_hint(scan_len_hint);
        self
    }

    /// Serves each separated value by its head, the first bytes kept beside
    /// its reference (`blob_head_size`), instead of reading blob files;
    /// [`DbIterator::value_is_head`] tells which values are heads.
    pub fn heads_only(mut self) -> Self {
        self.heads = true;
        self
    }

    /// Whether the current value is only the head of a separated value
    /// (with [`DbIterator::heads_only`]). Requires `valid()`.
    pub fn value_is_head(&self) -> bool {
        self.head.is_some()
    }

    /// A damaged entry at the inner cursor: a corruption of the file and
    /// block it came from, or a bug when it came from a memtable.
    fn damaged(&self, reason: String) -> Error {
        match self.inner.source() {
            Some((file, block)) => Error::corruption(file, block, reason),
            None => Error::Internal(format!("malformed key in a memtable: {reason}")),
        }
    }

    /// Where the head starts in the blob reference at the inner cursor.
    fn head_start(&self) -> Result<usize> {
        let v = self.inner.value();
        match BlobRef::decode_with_head(v) {
            Ok((_, head)) => Ok(v.len() - head.len()),
            Err(e) => Err(self.damaged(format!("bad blob reference: {e}"))),
        }
    }

    /// The separated value at the inner cursor (a backward step; forward
    /// ones read ahead in batches).
    fn resolve_backward(&mut self) -> Result<Vec<u8>> {
        let Some((source, block)) = self.inner.source() else {
            return Err(Error::Internal("blob reference in a memtable".to_string()));
        };
        let Some(r) = self.resolver.as_mut() else {
            return Err(Error::Internal(
                "blob reference read without a resolver".to_string(),
            ));
        };
        let ikey = self.inner.key();
        r.resolve_backward(
            (source, block),
            internal_key::user_key(ikey),
            internal_key::trailer(ikey) >> 8,
            self.inner.value(),
        )
    }

    /// True when positioned at a key.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current key. Requires `valid()`.
    pub fn key(&self) -> &[u8] {
        if let Some(e) = self.ahead.current() {
            return &e.key;
        }
        match self.direction {
            Direction::Forward => internal_key::user_key(self.inner.key()),
            Direction::Backward => &self.saved_key,
        }
    }

    /// The current value. Requires `valid()`.
    pub fn value(&self) -> &[u8] {
        if let Some(e) = self.ahead.current() {
            return e.value.as_deref().unwrap_or_default();
        }
        match self.direction {
            Direction::Forward => &self.inner.value()[self.head.unwrap_or(0)..],
            Direction::Backward => &self.saved_value,
        }
    }

    /// The first error met; an iterator that stopped early because of an
    /// error is not valid and reports it here.
    pub fn status(&self) -> Result<()> {
        if let Some(e) = &self.error {
            return Err(e.duplicate());
        }
        self.inner.status()
    }

    fn seek_key(&mut self, ukey: &[u8], seq: SeqNo, kind: u8) {
        self.scratch.clear();
        append_internal_key(&mut self.scratch, ukey, seq, kind);
    }

    /// Positions at the first key.
    pub fn seek_to_first(&mut self) {
        self.ahead.reset();
        match self.lower.clone() {
            Some(lower) => self.seek(&lower),
            None => {
                self.direction = Direction::Forward;
                self.inner.seek_to_first();
                self.find_next_user_entry(false);
            }
        }
    }

    /// Positions at the first key `>= target`.
    pub fn seek(&mut self, target: &[u8]) {
        self.ahead.reset();
        self.direction = Direction::Forward;
        let target = match &self.lower {
            Some(l) if l.as_slice() > target => l.clone(),
            _ => target.to_vec(),
        };
        self.seek_key(&target, self.seq, KIND_FOR_SEEK);
        self.inner.seek(&self.scratch);
        self.find_next_user_entry(false);
    }

    /// Positions at the last key.
    pub fn seek_to_last(&mut self) {
        self.ahead.reset();
        self.direction = Direction::Backward;
        match self.upper.clone() {
            // The smallest internal key of `upper`: everything before it is < upper.
            Some(upper) => {
                self.seek_key(&upper, MAX_SEQ, KIND_FOR_SEEK);
                self.inner.seek_for_prev(&self.scratch);
            }
            None => self.inner.seek_to_last(),
        }
        self.find_prev_user_entry();
    }

    /// Positions at the last key `<= target`.
    pub fn seek_for_prev(&mut self, target: &[u8]) {
        self.ahead.reset();
        if self.upper.as_deref().is_some_and(|u| target >= u) {
            return self.seek_to_last();
        }
        self.direction = Direction::Backward;
        // The largest internal key of `target` (sequence 0, lowest kind).
        self.seek_key(target, 0, ValueKind::Delete as u8);
        self.inner.seek_for_prev(&self.scratch);
        self.find_prev_user_entry();
    }

    /// Moves to the next key. Requires `valid()`.
    pub fn next(&mut self) {
        if !self.valid {
            return;
        }
        if self.ahead.is_active() {
            return self.next_read_ahead();
        }
        if self.direction == Direction::Backward {
            self.direction = Direction::Forward;
            let key = std::mem::take(&mut self.saved_key);
            self.seek_key(&key, MAX_SEQ, KIND_FOR_SEEK);
            self.saved_key = key;
            self.inner.seek(&self.scratch);
        } else {
            self.step_past_current();
        }
        self.find_next_user_entry(true);
    }

    /// Steps the inner cursor off the current entry, remembering its user
    /// key so that the forward walk skips that key's older versions.
    fn step_past_current(&mut self) {
        self.saved_key.clear();
        self.saved_key
            .extend_from_slice(internal_key::user_key(self.inner.key()));
        self.inner.next();
    }

    /// Moves to the previous key. Requires `valid()`.
    pub fn prev(&mut self) {
        if !self.valid {
            return;
        }
        if let Some(key) = self.ahead.take_current_key() {
            // The inner cursor ran ahead: bring it back to the current key
            // (its newest entry), as a forward step would have left it.
            self.seek_key(&key, MAX_SEQ, KIND_FOR_SEEK);
            self.inner.seek(&self.scratch);
        }
        if self.direction == Direction::Forward {
            self.saved_key.clear();
            self.saved_key
                .extend_from_slice(internal_key::user_key(self.inner.key()));
            loop {
                self.inner.prev();
                if !self.inner.valid()
                    || internal_key::user_key(self.inner.key()) < self.saved_key.as_slice()
                {
                    break;
                }
            }
            self.direction = Direction::Backward;
        }
        self.find_prev_user_entry();
    }

    fn fail(&mut self, e: Error) {
        self.error = Some(e);
        self.valid = false;
    }

    /// Forward: skip hidden, deleted and shadowed entries, then load the
    /// value (a separated one through a read-ahead batch). With `skipping`,
    /// entries of keys `<= saved_key` are hidden.
    fn find_next_user_entry(&mut self, skipping: bool) {
        self.head = None;
        let Some(kind) = self.advance(skipping) else {
            return;
        };
        if kind == ValueKind::BlobRef {
            if !self.heads {
                return self.read_ahead();
            }
            match self.head_start() {
                Ok(at) => self.head = Some(at),
                Err(e) => return self.fail(e),
            }
        }
        self.valid = true;
        self.saved_key.clear();
    }

    /// Moves the inner cursor forward to the next visible entry and returns
    /// its kind; `None` at the end (not valid) or on an error (failed).
    fn advance(&mut self, mut skipping: bool) -> Option<ValueKind> {
        while self.inner.valid() {
            let parsed = match internal_key::parse(self.inner.key()) {
                Ok(p) => p,
                Err(e) => {
                    let e = self.damaged(e.to_string());
                    self.fail(e);
                    return None;
                }
            };
            if self.upper.as_deref().is_some_and(|u| parsed.user_key >= u) {
                break;
            }
            if parsed.seq <= self.seq {
                match parsed.kind {
                    ValueKind::Delete => {
                        self.saved_key.clear();
                        self.saved_key.extend_from_slice(parsed.user_key);
                        skipping = true;
                    }
                    kind @ (ValueKind::Value | ValueKind::BlobRef) => {
                        if !(skipping && parsed.user_key <= self.saved_key.as_slice()) {
                            return Some(kind);
                        }
                    }
                }
            }
            self.inner.next();
        }
        self.saved_key.clear();
        self.valid = false;
        None
    }

    /// The inner cursor is on a visible separated value: take it and the
    /// visible entries after it (up to the read-ahead size), read their
    /// separated values in one batch, and serve the first.
    fn read_ahead(&mut self) {
        let target = self.ahead.next_size();
        let mut entries: Vec<Staged> = Vec::new();
        // Entries whose value is separated (their index), and where it is.
        let mut blobs: Vec<(usize, Located)> = Vec::new();
        let mut after = After::Inner;
        loop {
            let ikey = self.inner.key();
            let key = internal_key::user_key(ikey).to_vec();
            let trailer = internal_key::trailer(ikey);
            let value = if trailer as u8 == ValueKind::BlobRef as u8 {
                let located = match (self.inner.source(), self.resolver.as_mut()) {
                    (Some(source), Some(r)) => r.locate(source, trailer >> 8, self.inner.value()),
                    _ => Err(Error::Internal(
                        "blob reference without a table or resolver".to_string(),
                    )),
                };
                // Filled in by the batch read below.
                located
                    .map(|l| blobs.push((entries.len(), l)))
                    .map(|()| Vec::new())
            } else {
                Ok(self.inner.value().to_vec())
            };
            entries.push(Staged { key, value });
            if entries.len() >= target {
                break;
            }
            self.step_past_current();
            if self.advance(true).is_none() {
                after = After::End(self.error.take());
                break;
            }
        }
        if let Some(r) = self.resolver.as_mut() {
            let batch: Vec<(&[u8], &Located)> = blobs
                .iter()
                .map(|(i, l)| (entries[*i].key.as_slice(), l))
                .collect();
            let values = r.read_batch(&batch);
            for ((i, _), v) in blobs.iter().zip(values) {
                entries[*i].value = v;
            }
        }
        self.ahead.fill(entries, after);
        self.saved_key.clear();
        self.valid = true;
        if let Some(e) = self.ahead.take_current_error() {
            self.fail(e);
        }
    }

    /// `next` while serving read-ahead entries.
    fn next_read_ahead(&mut self) {
        match self.ahead.advance() {
            Some(Ok(())) => {}
            Some(Err(e)) => self.fail(e),
            None => {
                // The read-ahead entries are used up: carry on from the
                // inner cursor, which sits on the last of them, or end.
                match self.ahead.finish() {
                    After::Inner => {
                        self.step_past_current();
                        self.find_next_user_entry(true);
                    }
                    After::End(end_error) => {
                        self.saved_key.clear();
                        self.valid = false;
                        if let Some(e) = end_error {
                            self.fail(e);
                        }
                    }
                }
            }
        }
    }

    /// Backward: find the newest visible version of the key before the cursor.
    fn find_prev_user_entry(&mut self) {
        let mut kind = ValueKind::Delete;
        self.head = None;
        while self.inner.valid() {
            let parsed = match internal_key::parse(self.inner.key()) {
                Ok(p) => p,
                Err(e) => {
                    let e = self.damaged(e.to_string());
                    return self.fail(e);
                }
            };
            if parsed.seq <= self.seq {
                if kind != ValueKind::Delete && parsed.user_key < self.saved_key.as_slice() {
                    break;
                }
                if self.lower.as_deref().is_some_and(|l| parsed.user_key < l) {
                    break;
                }
                kind = parsed.kind;
                self.head = None;
                if kind == ValueKind::Delete {
                    self.saved_key.clear();
                    self.saved_value.clear();
                } else {
                    self.saved_key.clear();
                    self.saved_key.extend_from_slice(parsed.user_key);
                    self.saved_value.clear();
                    if kind == ValueKind::BlobRef && self.heads {
                        match self.head_start() {
                            Ok(at) => {
                                self.saved_value
                                    .extend_from_slice(&self.inner.value()[at..]);
                                self.head = Some(0);
                            }
                            Err(e) => return self.fail(e),
                        }
                    } else if kind == ValueKind::BlobRef {
                        match self.resolve_backward() {
                            Ok(v) => self.saved_value = v,
                            Err(e) => return self.fail(e),
                        }
                    } else {
                        self.saved_value.extend_from_slice(self.inner.value());
                    }
                }
            }
            self.inner.prev();
        }
        if kind == ValueKind::Delete {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.direction = Direction::Forward;
        } else {
            self.valid = true;
        }
    }
}

#[cfg(test)]
mod tests;
