//! Flush: an immutable memtable becomes one L0 table.

use std::sync::Arc;

use super::core::Shared;
use super::stats::Counters;
use crate::error::{IoContext, Result};
use crate::format::version_edit::VersionEdit;
use crate::iter::InternalIterator;
use crate::memtable::MemTable;
use crate::sst::{TableBuilder, TableOptions};
use crate::version::FileMeta;
use crate::wal::table_file_name;

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

    /// Writes `mem` to table file `number`; None if it is empty.
    pub fn write_level0_table(&self, mem: &Arc<MemTable>, number: u64) -> Result<Option<FileMeta>> {
        if mem.is_empty() {
            return Ok(None);
        }
        let path = self.dir.join(table_file_name(number));
        let file = self.fs.create(&path).ctx(&path)?;
        let mut builder = TableBuilder::new(file, path.clone(), self.table_options(0));
        let mut it = mem.iter();
        it.seek_to_first();
        let res = (|| {
            while it.valid() {
                builder.add(it.key(), it.value())?;
                it.next();
            }
            builder.finish()
        })();
        let s = match res {
            Ok(s) => s,
            Err(e) => {
                let _ = self.fs.remove_file(&path);
                return Err(e);
            }
        };
        Counters::add(&self.counters.flush_bytes_written, s.file_size);
        Ok(Some(FileMeta {
            number,
            file_size: s.file_size,
            smallest: s.smallest,
            largest: s.largest,
            smallest_seq: s.smallest_seq,
            largest_seq: s.largest_seq,
            num_entries: s.num_entries,
            num_deletions: s.num_deletions,
        }))
    }

    /// Flushes the oldest immutable memtable, if any. Returns whether one was
    /// flushed.
    pub fn flush_one(&self) -> Result<bool> {
        let (mem, number) = {
            let mut state = self.state.lock();
            if state.flush_running {
                return Ok(false);
            }
            let Some(imm) = state.imms.front() else {
                return Ok(false);
            };
            let mem = imm.mem.clone();
            state.flush_running = true;
            (mem, state.versions.new_file_number())
        };
        let res = self.write_level0_table(&mem, number);
        let mut state = self.state.lock();
        state.flush_running = false;
        let meta = match res {
            Ok(m) => m,
            Err(e) => {
                self.set_bg_error(&mut state, &e);
                return Err(e);
            }
        };
        let flushed = state.imms.pop_front();
        let next_wal = state
            .imms
            .front()
            .map_or(state.mem_wal_number, |i| i.wal_number);
        let mut edit = VersionEdit {
            log_number: Some(next_wal),
            last_sequence: Some(self.visible_seq.load(std::sync::atomic::Ordering::Acquire)),
            ..Default::default()
        };
        if let Some(m) = meta {
            edit.new_files.push((0, m));
        }
        if let Err(e) = state.versions.log_and_apply(&mut edit) {
            if let Some(f) = flushed {
                state.imms.push_front(f);
            }
            self.set_bg_error(&mut state, &e);
            return Err(e);
        }
        if let Some(f) = flushed {
            state.obsolete_wals.push(f.wal_number);
        }
        Counters::add(&self.counters.flushes, 1);
        self.install_super_version(&state);
        self.delete_obsolete_files(&mut state);
        self.bg_done.notify_all();
        self.bg_work.notify_all();
        Ok(true)
    }
}
