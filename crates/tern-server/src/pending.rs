//! Writes the committer has accepted but not yet committed: one engine
//! batch, and what it says about each key for commands that read before
//! they write.

use std::collections::HashMap;

use tern::{ValueKind, WriteBatch};

use crate::keyspace::{encode_value, engine_key};

/// The uncommitted writes of one commit group.
#[derive(Default)]
pub struct Pending {
    batch: WriteBatch,
    /// Engine key → encoded value (`None`: deleted). Built on the first
    /// read, so a group of plain writes never pays for it.
    overlay: Option<HashMap<Vec<u8>, Option<Vec<u8>>>>,
}

impl Pending {
    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Approximate bytes pending.
    pub fn bytes(&self) -> usize {
        self.batch.approximate_size()
    }

    /// Sets Redis key `key`.
    pub fn put(&mut self, key: &[u8], value: &[u8], expire_at: Option<u64>) {
        let k = engine_key(key);
        let v = encode_value(value, expire_at);
        self.batch.put(&k, &v);
        if let Some(o) = &mut self.overlay {
            o.insert(k, Some(v));
        }
    }

    /// Removes Redis key `key`.
    pub fn delete(&mut self, key: &[u8]) {
        let k = engine_key(key);
        self.batch.delete(&k);
        if let Some(o) = &mut self.overlay {
            o.insert(k, None);
        }
    }

    /// What the pending writes say about Redis key `key`: `None` if they do
    /// not touch it, `Some(None)` if they delete it, else its new encoded
    /// value.
    pub fn lookup(&mut self, key: &[u8]) -> Option<Option<&[u8]>> {
        if self.batch.is_empty() {
            return None;
        }
        let batch = &self.batch;
        let overlay = self.overlay.get_or_insert_with(|| {
            let mut o = HashMap::with_capacity(batch.len());
            // Entries were built by `put`/`delete` above, so they parse.
            for e in batch.iter().flatten() {
                let v = (e.kind == ValueKind::Value).then(|| e.value.to_vec());
                o.insert(e.key.to_vec(), v);
            }
            o
        });
        overlay.get(&engine_key(key)).map(|v| v.as_deref())
    }

    /// Takes the batch to commit, leaving nothing pending.
    pub fn take(&mut self) -> WriteBatch {
        self.overlay = None;
        std::mem::take(&mut self.batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::decode_value;

    #[test]
    fn later_writes_win_before_and_after_the_overlay_is_built() {
        let mut p = Pending::default();
        assert!(p.lookup(b"a").is_none());
        p.put(b"a", b"1", None);
        p.put(b"a", b"2", Some(7));
        p.delete(b"b");
        let a = decode_value(p.lookup(b"a").unwrap().unwrap().to_vec()).unwrap();
        assert_eq!((a.value.as_slice(), a.expire_at), (&b"2"[..], Some(7)));
        assert_eq!(p.lookup(b"b"), Some(None));
        p.put(b"b", b"3", None);
        p.delete(b"a");
        assert_eq!(p.lookup(b"a"), Some(None));
        let b = decode_value(p.lookup(b"b").unwrap().unwrap().to_vec()).unwrap();
        assert_eq!(b.value, b"3");
        assert!(p.lookup(b"c").is_none());
        let batch = p.take();
        assert_eq!(batch.len(), 5);
        assert!(p.is_empty() && p.lookup(b"a").is_none());
    }
}
