//! Flush: an immutable memtable becomes one L0 table, with values of at
//! least `blob_threshold` bytes separated into blob files in key order.

use std::sync::atomic::{AtomicU64, Ordering};

use super::core::Shared;
use super::stats::Counters;
use crate::blob::BlobWriter;
use crate::compaction::{Retention, VersionWalk};
use crate::error::{IoContext, Result};
use crate::format::internal_key::{self, ValueKind};
use crate::format::version_edit::VersionEdit;
use crate::iter::InternalIterator;
use crate::sst::{TableBuilder, TableOptions};
use crate::version::{BlobMeta, FileMeta};
use crate::wal::{blob_file_name, table_file_name};

/// What a flush produced.
#[derive(Debug, Default)]
pub struct FlushOutput {
    /// The L0 table, unless the memtable was empty.
    pub table: Option<FileMeta>,
    /// Blob files holding its separated values.
    pub blobs: Vec<BlobMeta>,
}

impl Shared {
    /// Format options for tables written to `level`.
    pub fn table_options(&self, level: usize) -> TableOptions {
        TableOptions {
            block_size: self.opts.block_size,
            restart_interval: self.opts.block_restart_interval,
            bloom_bits_per_key: self.opts.bloom_bits_per_key,
            compression: self.opts.compression_for(level),
        }
    }

    /// Writes the entries of `it` (a memtable's or a memory-tier table's,
    /// in internal-key order without duplicates) to table file `number`
    /// (and blob files as needed).
    /// New blob files take their numbers from `counter`. A version that a
    /// newer one hides from every reader `retention` allows for is left out:
    /// under skewed updates most of a memtable is such versions, and writing
    /// them would only make garbage for compaction to mark and GC to copy.
    /// `entries`, the exact number of entries `it` holds, says that it can
    /// pass over a key's older versions without reading them
    /// ([`InternalIterator::next_user_key`]: a memtable's version chains);
    /// with no snapshot live, only each key's newest version is read then.
    pub fn write_level0_table(
        &self,
        it: &mut dyn InternalIterator,
        number: u64,
        counter: &AtomicU64,
        retention: &Retention,
        entries: Option<u64>,
    ) -> Result<FlushOutput> {
        let mut out = FlushOutput::default();
        it.seek_to_first();
        if !it.valid() {
            return Ok(out);
        }
        let path = self.dir.join(table_file_name(number));
        let mut created = vec![path.clone()];
        let res = (|| {
            let file = self.background_fs.create(&path).ctx(&path)?;
            let mut builder = TableBuilder::new(file, path.clone(), self.table_options(0));
            let mut blob: Option<BlobWriter> = None;
            let mut blob_files = Vec::new();
            let mut walk = VersionWalk::new(retention);
            let mut dropped = 0u64;
            let mut kept = 0u64;
            // Without snapshots a key's newest version hides all the others:
            // the entry count to take the kept ones from, when `it` can
            // pass over the others unread.
            let skip_older = entries.filter(|_| retention.snapshots().is_empty());
            while it.valid() {
                let user_key = internal_key::user_key(it.key());
                if walk
                    .place(user_key, internal_key::trailer(it.key()) >> 8)
                    .shadowed
                {
                    dropped += 1;
                    it.next();
                    continue;
                }
                kept += 1;
                let separate = self
                    .opts
                    .blob_threshold
                    .is_some_and(|t| it.value().len() >= t)
                    && internal_key::trailer(it.key()) as u8 == ValueKind::Value as u8;
                if !separate {
                    builder.add(it.key(), it.value())?;
                } else {
                    if blob
                        .as_ref()
                        .is_some_and(|b| b.len() >= self.opts.blob_file_size)
                    {
                        if let Some(b) = blob.take() {
                            out.blobs.push(b.finish(&[])?.meta);
                        }
                    }
                    if blob.is_none() {
                        let n = counter.fetch_add(1, Ordering::SeqCst);
                        let p = self.dir.join(blob_file_name(n));
                        created.push(p.clone());
                        let f = self.background_fs.create(&p).ctx(&p)?;
                        blob = Some(BlobWriter::new(f, p, n)?);
                        blob_files.push(n);
                        builder.add_blob_file(n);
                    }
                    if let Some(b) = blob.as_mut() {
                        let user_key = internal_key::user_key(it.key());
                        let seq = internal_key::trailer(it.key()) >> 8;
                        let value = it.value();
                        let r = b.add(user_key, seq, value)?;
                        let mut ikey = user_key.to_vec();
                        ikey.extend_from_slice(
                            &internal_key::pack_trailer(seq, ValueKind::BlobRef as u8)
                                .to_le_bytes(),
                        );
                        let head = &value[..self.opts.blob_head_size.min(value.len())];
                        builder.add(&ikey, &r.encode_with_head(head))?;
                    }
                }
                if skip_older.is_some() {
                    it.next_user_key();
                } else {
                    it.next();
                }
            }
            if let Some(b) = blob.take() {
                out.blobs.push(b.finish(&[])?.meta);
            }
            if let Some(n) = skip_older {
                dropped = n.saturating_sub(kept);
            }
            Counters::add(&self.counters.flush_versions_dropped, dropped);
            Ok(builder.finish()?.into_file_meta(number, blob_files))
        })();
        match res {
            Ok(meta) => {
                let blob_bytes: u64 = out.blobs.iter().map(|b| b.file_size).sum();
                Counters::add(
                    &self.counters.flush_bytes_written,
                    meta.file_size + blob_bytes,
                );
                Counters::add(&self.counters.blob_bytes_written, blob_bytes);
                out.table = Some(meta);
                Ok(out)
            }
            Err(e) => {
                for p in created {
                    let _ = self.fs.remove_file(&p);
                }
                Err(e)
            }
        }
    }

    /// Flushes the oldest immutable memtable, if any, into the memory tier
    /// when there is one, else to L0. Returns whether one was flushed.
    pub fn flush_one(&self) -> Result<bool> {
        let (mem, wal, number, counter) = {
            let mut state = self.state.lock();
            if state.flush_running {
                return Ok(false);
            }
            let Some(imm) = state.imms.front() else {
                return Ok(false);
            };
            let mem = imm.mem.clone();
            let wal = imm.wal_number;
            state.flush_running = true;
            (
                mem,
                wal,
                state.versions.new_file_number(),
                state.versions.file_number_counter(),
            )
        };
        match self.move_into_tier(&mem, wal) {
            Ok(None) => {}
            Ok(Some((table, meta))) => {
                let mut state = self.state.lock();
                state.flush_running = false;
                let flushed = state.imms.pop_front();
                let durable = meta.is_some();
                // Its WAL is released with the edit naming it.
                let logged = self.install_in_tier(&mut state, table, meta);
                if let Err(e) = logged {
                    if let Some(f) = flushed {
                        state.imms.push_front(f);
                    }
                    return Err(e);
                }
                if let (true, Some(f)) = (durable, flushed) {
                    state.obsolete_wals.push(f.wal_number);
                }
                self.publish_tier(&mut state);
                Counters::add(&self.counters.flushes, 1);
                self.bg_work.notify_all();
                self.finish_install(state);
                return Ok(true);
            }
            Err(e) => {
                let mut state = self.state.lock();
                state.flush_running = false;
                self.set_bg_error(&mut state, &e);
                return Err(e);
            }
        }
        // Read after the memtable turned immutable: a snapshot registered
        // later sees every version in it, so only the newest of each key.
        let retention = Retention::new(self.snapshots.all());
        let res = self.write_level0_table(
            &mut mem.iter_linked(),
            number,
            &counter,
            &retention,
            Some(mem.len() as u64),
        );
        let mut state = self.state.lock();
        state.flush_running = false;
        let output = match res {
            Ok(m) => m,
            Err(e) => {
                self.set_bg_error(&mut state, &e);
                return Err(e);
            }
        };
        let flushed = state.imms.pop_front();
        let mut edit = VersionEdit {
            log_number: Some(state.oldest_needed_wal()),
            last_sequence: Some(self.visible_seq.load(Ordering::Acquire)),
            blob_files_added: output.blobs,
            ..Default::default()
        };
        if let Some(m) = output.table {
            edit.new_files.push((0, m));
        }
        if let Err(e) = self.log_and_apply(&mut state, &mut edit) {
            if let Some(f) = flushed {
                state.imms.push_front(f);
            }
            return Err(e);
        }
        if let Some(f) = flushed {
            state.obsolete_wals.push(f.wal_number);
        }
        Counters::add(&self.counters.flushes, 1);
        self.bg_work.notify_all();
        self.finish_install(state);
        Ok(true)
    }
}
