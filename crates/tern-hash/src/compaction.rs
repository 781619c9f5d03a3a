//! Log compaction: reclaims the disk space of dead records. The live records
//! of the oldest part of the log are copied to the tail (each copy linked
//! only if its record is still the key's newest), the log's begin moves past
//! that part, a checkpoint makes both durable, and only then are the
//! segment files below the new begin deleted.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::log::scan::scan;
use crate::store::HashStore;
use crate::Result;

/// What a log compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    /// The log's begin afterwards.
    pub begin: u64,
    /// Records read.
    pub scanned: u64,
    /// Live records copied to the tail.
    pub copied: u64,
    /// Bytes of keys and values copied.
    pub copied_bytes: u64,
    /// Segment files deleted.
    pub segments_removed: u64,
}

impl HashStore {
    /// Compacts the log below `until`, rounded down to a segment boundary
    /// and limited to the part on disk. Takes a checkpoint before deleting
    /// anything, so a crash at any point leaves either the old log or the
    /// new one.
    pub fn compact(self: &Arc<Self>, until: u64) -> Result<Compacted> {
        let _one = self.compaction.lock();
        let before = self.log.regions.begin.load(Ordering::Acquire);
        let mut out = self.copy_live(until)?;
        if out.begin == before {
            return Ok(out);
        }
        self.checkpoint()?;
        out.segments_removed = self.log.segments.remove_below(out.begin)?;
        self.counters.compactions.fetch_add(1, Ordering::Relaxed);
        self.counters
            .compacted_bytes
            .fetch_add(out.copied_bytes, Ordering::Relaxed);
        Ok(out)
    }

    /// Copies the live records below `until` (as [`HashStore::compact`]
    /// rounds it) to the tail and moves the log's begin there; deletes
    /// nothing.
    fn copy_live(self: &Arc<Self>, until: u64) -> Result<Compacted> {
        let log = &self.log;
        let regions = &log.regions;
        regions.check()?;
        let segment = 1u64 << self.options.segment_bits;
        let begin = regions.begin.load(Ordering::Acquire);
        let until = until.min(regions.head.load(Ordering::Acquire)) & !(segment - 1);
        let mut out = Compacted {
            begin,
            ..Compacted::default()
        };
        if until <= begin {
            return Ok(out);
        }
        let session = self.session();
        scan(
            &log.segments,
            self.options.page_bits,
            begin,
            until,
            |address, rec| {
                out.scanned += 1;
                // A tombstone that is its key's newest record goes with the
                // versions it hides, which are all older, so below `until` too.
                if rec.invalid || rec.tombstone {
                    return Ok(());
                }
                while let Some((slot, entry, newest)) = session.newest(rec.key)? {
                    if newest != address {
                        break;
                    }
                    if session.copy_forward(slot, entry, rec.key, rec.value)? {
                        out.copied += 1;
                        out.copied_bytes += (rec.key.len() + rec.value.len()) as u64;
                        break;
                    }
                }
                Ok(())
            },
        )?;
        drop(session);
        regions.begin.fetch_max(until, Ordering::SeqCst);
        out.begin = until;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashOptions;
    use tern::io::MemFs;

    #[test]
    fn a_checkpoint_cut_before_a_compaction_keeps_the_begin_it_read() {
        let fs = MemFs::new();
        let store = HashStore::open_with_fs(fs.clone(), "/db", HashOptions::small()).expect("open");
        {
            let mut s = store.session();
            for i in 0..6000u64 {
                s.upsert(
                    format!("k{}", i % 3000).as_bytes(),
                    format!("v{i}").as_bytes(),
                )
                .expect("upsert");
            }
        }
        // A checkpoint cuts the log, then a compaction copies the live
        // records past the cut and moves the begin, then the checkpoint is
        // written and the process dies before the compaction's own one.
        let cut = store.cut().expect("cut");
        let moved = store.copy_live(store.stats().head).expect("copy");
        assert!(moved.copied > 0 && moved.begin > cut.begin);
        let mut state = store.checkpoint.lock();
        store.write_checkpoint(&mut state, cut).expect("checkpoint");
        drop(state);
        drop(store);
        fs.crash();
        let store = HashStore::open_with_fs(fs, "/db", HashOptions::small()).expect("reopen");
        let mut s = store.session();
        for k in 0..3000u64 {
            let want = (0..6000u64).rev().find(|i| i % 3000 == k).expect("written");
            assert_eq!(
                s.get(format!("k{k}").as_bytes()).expect("get"),
                Some(format!("v{want}").into_bytes()),
                "k{k}"
            );
        }
    }
}
