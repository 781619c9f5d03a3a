//! Reading one record of the stable region back from its segment file.

use std::ops::Range;

use super::HybridLog;
use crate::record::{decode, peek_len, HEADER_LEN};
use crate::{Error, Result};

/// A record read from disk; its key and value are ranges of the buffer it
/// was read into.
pub struct DiskRecord {
    /// The previous record of its chain.
    pub prev: u64,
    /// It deletes its key.
    pub tombstone: bool,
    /// Where the key is in the buffer.
    pub key: Range<usize>,
    /// Where the value is in the buffer.
    pub value: Range<usize>,
}

impl HybridLog {
    /// Reads the record at `address` (below the head) into `buf`. `Ok(None)`
    /// when a read fails and `moved()` says log compaction deleted the file
    /// meanwhile. Damage, including a previous address not below the
    /// record's own (a chain that could loop), is [`Error::Corruption`]
    /// with the segment file and offset.
    pub fn read_record(
        &self,
        address: u64,
        buf: &mut Vec<u8>,
        moved: impl Fn() -> bool,
    ) -> Result<Option<DiskRecord>> {
        let room = (self.page_size - (address & (self.page_size - 1))) as usize;
        let corrupt = |reason: String| {
            let (file, offset) = self.segments.locate(address);
            Error::Corruption {
                file,
                offset,
                reason,
            }
        };
        let missing = || corrupt("no record where the index chain points".into());
        // Fills `buf` from `address`; `false` when the read failed because
        // the log moved past it (the caller retries from the index).
        let fill = |buf: &mut Vec<u8>| match self.segments.read(address, buf) {
            Ok(()) => Ok(true),
            Err(_) if moved() => Ok(false),
            Err(e) => Err(e),
        };
        buf.resize(HEADER_LEN, 0);
        if !fill(buf)? {
            return Ok(None);
        }
        let len = peek_len(buf, room)
            .map_err(|e| corrupt(e.0))?
            .ok_or_else(missing)?;
        buf.resize(len, 0);
        if !fill(buf)? {
            return Ok(None);
        }
        let rec = decode(buf, room)
            .map_err(|e| corrupt(e.0))?
            .ok_or_else(missing)?;
        if rec.prev >= address {
            return Err(corrupt(format!(
                "the record's previous address {:#x} is not below its own",
                rec.prev
            )));
        }
        let base = buf.as_ptr() as usize;
        let range = |s: &[u8]| {
            let at = s.as_ptr() as usize - base;
            at..at + s.len()
        };
        Ok(Some(DiskRecord {
            prev: rec.prev,
            tombstone: rec.tombstone,
            key: range(rec.key),
            value: range(rec.value),
        }))
    }
}
