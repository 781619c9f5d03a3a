//! The user-facing iterator: MVCC visibility, tombstones and bounds on top
//! of the merge of every source.
//!
//! Moving forward, the inner iterator sits on the entry being returned.
//! Moving backward, it sits just before all entries of the returned key, whose
//! value is then held in `saved_value` (the LevelDB scheme).

use std::sync::Arc;

use super::BoxedIter;
use crate::blob::{BlobResolver, ScanResolver};
use crate::error::{Error, Result};
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
    /// Resolves separated values; `blob_value` holds the current one.
    resolver: Option<ScanResolver>,
    blob_value: Option<Vec<u8>>,
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
            blob_value: None,
            _pins: pins,
        }
    }

    /// Resolves separated values through `resolver`.
    pub fn with_resolver(mut self, resolver: BlobResolver) -> Self {
        self.resolver = Some(ScanResolver::new(resolver));
        self
    }

    /// A damaged entry at the inner cursor: a corruption of the file and
    /// block it came from, or a bug when it came from a memtable.
    fn damaged(&self, reason: String) -> Error {
        match self.inner.source() {
            Some((file, block)) => Error::corruption(file, block, reason),
            None => Error::Internal(format!("malformed key in a memtable: {reason}")),
        }
    }

    /// The value at the inner cursor, resolving a blob reference.
    fn load_value(&mut self, kind: ValueKind) -> Result<()> {
        self.blob_value = None;
        if kind == ValueKind::BlobRef {
            let forward = self.direction == Direction::Forward;
            let Some((source, block)) = self.inner.source() else {
                return Err(Error::Internal("blob reference in a memtable".to_string()));
            };
            let Some(r) = self.resolver.as_mut() else {
                return Err(Error::Internal(
                    "blob reference read without a resolver".to_string(),
                ));
            };
            r.set_forward(forward);
            let ikey = self.inner.key();
            let seq = internal_key::trailer(ikey) >> 8;
            let v = r.resolve(
                (source, block),
                internal_key::user_key(ikey),
                seq,
                self.inner.value(),
            )?;
            self.blob_value = Some(v);
        }
        Ok(())
    }

    /// True when positioned at a key.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current key. Requires `valid()`.
    pub fn key(&self) -> &[u8] {
        match self.direction {
            Direction::Forward => internal_key::user_key(self.inner.key()),
            Direction::Backward => &self.saved_key,
        }
    }

    /// The current value. Requires `valid()`.
    pub fn value(&self) -> &[u8] {
        match self.direction {
            Direction::Forward => self
                .blob_value
                .as_deref()
                .unwrap_or_else(|| self.inner.value()),
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
        if self.direction == Direction::Backward {
            self.direction = Direction::Forward;
            let key = std::mem::take(&mut self.saved_key);
            self.seek_key(&key, MAX_SEQ, KIND_FOR_SEEK);
            self.saved_key = key;
            self.inner.seek(&self.scratch);
        } else {
            self.saved_key.clear();
            self.saved_key
                .extend_from_slice(internal_key::user_key(self.inner.key()));
            self.inner.next();
        }
        self.find_next_user_entry(true);
    }

    /// Moves to the previous key. Requires `valid()`.
    pub fn prev(&mut self) {
        if !self.valid {
            return;
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

    /// Forward: skip hidden, deleted and shadowed entries. With `skipping`,
    /// entries of keys `<= saved_key` are hidden.
    fn find_next_user_entry(&mut self, mut skipping: bool) {
        while self.inner.valid() {
            let parsed = match internal_key::parse(self.inner.key()) {
                Ok(p) => p,
                Err(e) => {
                    let e = self.damaged(e.to_string());
                    return self.fail(e);
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
                            if let Err(e) = self.load_value(kind) {
                                return self.fail(e);
                            }
                            self.valid = true;
                            self.saved_key.clear();
                            return;
                        }
                    }
                }
            }
            self.inner.next();
        }
        self.saved_key.clear();
        self.valid = false;
    }

    /// Backward: find the newest visible version of the key before the cursor.
    fn find_prev_user_entry(&mut self) {
        let mut kind = ValueKind::Delete;
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
                if kind == ValueKind::Delete {
                    self.saved_key.clear();
                    self.saved_value.clear();
                } else {
                    self.saved_key.clear();
                    self.saved_key.extend_from_slice(parsed.user_key);
                    self.saved_value.clear();
                    if kind == ValueKind::BlobRef {
                        let resolved = self.load_value(kind).map(|()| self.blob_value.take());
                        match resolved {
                            Ok(v) => self.saved_value = v.unwrap_or_default(),
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
mod tests {
    use super::*;
    use crate::iter::testing::VecIter;
    use crate::iter::MergingIterator;
    use std::collections::BTreeMap;

    fn ikey(k: &str, seq: u64, kind: ValueKind) -> Vec<u8> {
        internal_key::make_internal_key(k.as_bytes(), seq, kind)
    }

    fn collect_fwd(it: &mut DbIterator) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = vec![];
        it.seek_to_first();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next();
        }
        out
    }

    fn collect_bwd(it: &mut DbIterator) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = vec![];
        it.seek_to_last();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.prev();
        }
        out.reverse();
        out
    }

    #[test]
    fn versions_tombstones_snapshots_bounds_random() {
        use rand::{Rng, SeedableRng};
        for seed in 0..40u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            // Random history of writes split over three sources.
            let mut sources: Vec<Vec<(Vec<u8>, Vec<u8>)>> = vec![vec![], vec![], vec![]];
            let mut history: Vec<(String, u64, Option<String>)> = vec![];
            for seq in 1..=60u64 {
                let k = format!("k{:02}", rng.gen_range(0..15));
                let v = if rng.gen_bool(0.3) {
                    None
                } else {
                    Some(format!("v{seq}"))
                };
                let kind = if v.is_some() {
                    ValueKind::Value
                } else {
                    ValueKind::Delete
                };
                sources[rng.gen_range(0..3)].push((
                    ikey(&k, seq, kind),
                    v.clone().unwrap_or_default().into_bytes(),
                ));
                history.push((k, seq, v));
            }
            let snap = rng.gen_range(0..=60u64);
            let lower = rng
                .gen_bool(0.3)
                .then(|| format!("k{:02}", rng.gen_range(0..15)).into_bytes());
            let upper = rng
                .gen_bool(0.3)
                .then(|| format!("k{:02}", rng.gen_range(0..15)).into_bytes());
            let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            for (k, seq, v) in &history {
                if *seq <= snap {
                    model.insert(k.clone().into_bytes(), v.clone().map(String::into_bytes));
                }
            }
            let expect: Vec<_> = model
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .filter(|(k, _)| {
                    lower.as_ref().is_none_or(|l| k >= l) && upper.as_ref().is_none_or(|u| k < u)
                })
                .collect();
            let make = || {
                let children = sources
                    .iter()
                    .map(|s| Box::new(VecIter::new(s.clone())) as BoxedIter)
                    .collect();
                DbIterator::new(
                    Box::new(MergingIterator::new(children)),
                    snap,
                    lower.clone(),
                    upper.clone(),
                    vec![],
                )
            };
            assert_eq!(collect_fwd(&mut make()), expect, "seed {seed} forward");
            assert_eq!(collect_bwd(&mut make()), expect, "seed {seed} backward");
            // Zig-zag: next then prev returns to the same key.
            let mut it = make();
            it.seek_to_first();
            for (i, (k, _)) in expect.iter().enumerate() {
                assert_eq!(it.key(), k.as_slice());
                it.next();
                if i + 1 < expect.len() {
                    it.prev();
                    assert_eq!(it.key(), k.as_slice(), "seed {seed} zigzag");
                    it.next();
                }
            }
            assert!(!it.valid());
            // seek / seek_for_prev against the model.
            for probe in 0..16 {
                let p = format!("k{probe:02}").into_bytes();
                it.seek(&p);
                let want = expect.iter().find(|(k, _)| *k >= p);
                assert_eq!(
                    it.valid().then(|| it.key().to_vec()),
                    want.map(|w| w.0.clone()),
                    "seed {seed} seek"
                );
                it.seek_for_prev(&p);
                let want = expect.iter().rev().find(|(k, _)| *k <= p);
                assert_eq!(
                    it.valid().then(|| it.key().to_vec()),
                    want.map(|w| w.0.clone()),
                    "seed {seed} seek_for_prev"
                );
            }
        }
    }
}
