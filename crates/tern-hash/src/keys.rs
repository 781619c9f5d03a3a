//! Walking every key: `SCAN`, `KEYS`, `DBSIZE` and `FLUSHDB` of the server
//! on the hash engine. There is no order; the cursor is an index bucket.
//! Each bucket's chains are walked to their ends (on disk too), so a walk
//! costs a read of every record still in the log, live or not.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use crate::record::TOMBSTONE;
use crate::session::{Session, View};
use crate::{Error, Result};

/// One step of a chain walk.
struct Step {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    prev: u64,
}

impl Session {
    /// Adds the live keys of index buckets from `cursor` on to `out`, each
    /// with the first `value_bytes` bytes of its value, until `out` holds
    /// `count` more keys or `10 × count` buckets were visited (as Redis
    /// bounds a SCAN of a sparse table); returns the cursor to go on from
    /// (0: the walk is done). A key present for the whole walk is returned
    /// once; keys written during it may or may not be.
    pub fn scan(
        &mut self,
        cursor: u64,
        count: usize,
        value_bytes: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<u64> {
        let buckets = self.store.index.buckets() as u64;
        let (mut b, mut visited) = (cursor, 0usize);
        let start = out.len();
        while b < buckets {
            self.scan_bucket(b as usize, value_bytes, out)?;
            b += 1;
            visited += 1;
            if out.len() - start >= count || visited >= count.saturating_mul(10) {
                break;
            }
        }
        Ok(if b >= buckets { 0 } else { b })
    }

    fn scan_bucket(
        &self,
        b: usize,
        value_bytes: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<()> {
        let log = self.log();
        let mut tries = 0;
        'again: loop {
            tries += 1;
            if tries > 64 {
                return Err(Error::InvalidArgument(
                    "log compaction kept moving the log under a key walk; retry it".into(),
                ));
            }
            let begin = log.regions.begin.load(Ordering::SeqCst);
            let addresses = {
                let _guard = self.handle.pin();
                self.store.index.bucket_addresses(b)
            };
            let mut seen = HashSet::new();
            let mut found = Vec::new();
            for start in addresses {
                let mut address = start;
                while address >= begin {
                    let Some(step) = self.step(address, begin)? else {
                        // Compaction moved the begin past the walk: its
                        // copies are newer than what was read, so start the
                        // bucket over.
                        continue 'again;
                    };
                    if seen.insert(step.key.clone()) {
                        if let Some(mut v) = step.value {
                            v.truncate(value_bytes);
                            found.push((step.key, v));
                        }
                    }
                    address = step.prev;
                }
            }
            out.extend(found);
            return Ok(());
        }
    }

    /// The record at `address`, from memory or disk; `None` if the log's
    /// begin moved past it.
    fn step(&self, address: u64, begin: u64) -> Result<Option<Step>> {
        let log = self.log();
        {
            let _guard = self.handle.pin();
            let view = View::read(log);
            if view.begin != begin {
                return Ok(None);
            }
            if address >= view.head {
                let rec = log.record(address);
                let info = rec.load_info();
                let value = if info & TOMBSTONE != 0 {
                    None
                } else {
                    let mut v = Vec::new();
                    if address >= view.safe_read_only {
                        rec.lock_shared();
                        rec.read_value(&mut v);
                        rec.unlock_shared();
                    } else {
                        rec.read_value(&mut v);
                    }
                    Some(v)
                };
                return Ok(Some(Step {
                    key: rec.key().to_vec(),
                    value,
                    prev: rec.prev(),
                }));
            }
        }
        let mut disk = self.disk.borrow_mut();
        let moved = || log.regions.begin.load(Ordering::SeqCst) != begin;
        let Some(rec) = log.read_record(address, &mut disk, moved)? else {
            return Ok(None);
        };
        Ok(Some(Step {
            key: disk[rec.key].to_vec(),
            value: (!rec.tombstone).then(|| disk[rec.value].to_vec()),
            prev: rec.prev,
        }))
    }
}
