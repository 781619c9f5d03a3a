//! Checkpoints: the `CHECKPOINT` file that names the durable part of the log,
//! and recovery, which rebuilds the index by reading that part.
//!
//! A checkpoint is a fold-over (FASTER's simplest kind): the read-only
//! boundary moves to the tail, the flusher writes everything below it, the
//! segment files are synced, and `CHECKPOINT` is replaced (written to a
//! temporary file, synced, renamed). Recovery reads the log from `begin` to
//! the checkpoint's `end`, pointing each key's index entry at its newest
//! record, and cuts off whatever was written after `end`.

use std::path::Path;
use std::sync::atomic::Ordering;

use tern::internals::format::checksum::crc;
use tern::io::FileSystem;

use crate::index::{with_address, HashIndex, KeyHash};
use crate::log::scan::scan;
use crate::log::segments::Segments;
use crate::{Error, Result};

/// The checkpoint file's name.
pub const CHECKPOINT_FILE: &str = "CHECKPOINT";
const MAGIC: &[u8; 8] = b"TERNHASH";
const VERSION: u32 = 1;
const LEN: usize = 56;

/// What a checkpoint file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointMeta {
    /// The log's page size, log2.
    pub page_bits: u32,
    /// The log's segment size, log2.
    pub segment_bits: u32,
    /// The index's bucket count, log2, when the log was written: chains
    /// are built for it, so the store reopens with as many buckets or more.
    pub index_bits: u32,
    /// Lowest address still in the log.
    pub begin: u64,
    /// Everything below this address is in the checkpoint.
    pub end: u64,
    /// Checkpoints taken in the store's life, this one included.
    pub number: u64,
}

impl CheckpointMeta {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.page_bits.to_le_bytes());
        out.extend_from_slice(&self.segment_bits.to_le_bytes());
        out.extend_from_slice(&self.index_bits.to_le_bytes());
        out.extend_from_slice(&self.begin.to_le_bytes());
        out.extend_from_slice(&self.end.to_le_bytes());
        out.extend_from_slice(&self.number.to_le_bytes());
        let c = crc(&out);
        out.extend_from_slice(&c.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out
    }

    /// Parses and checks a checkpoint file's bytes.
    pub fn decode(bytes: &[u8]) -> std::result::Result<CheckpointMeta, String> {
        if bytes.len() != LEN {
            return Err(format!(
                "{} bytes, a checkpoint file has {LEN}",
                bytes.len()
            ));
        }
        if &bytes[..8] != MAGIC {
            return Err("not a hash store checkpoint (bad magic)".into());
        }
        let u32_at =
            |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        let u64_at =
            |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or_default());
        if crc(&bytes[..48]) != u32_at(48) {
            return Err("checkpoint checksum mismatch".into());
        }
        if u32_at(8) != VERSION {
            return Err(format!(
                "checkpoint version {} (this build reads {VERSION})",
                u32_at(8)
            ));
        }
        let meta = CheckpointMeta {
            page_bits: u32_at(12),
            segment_bits: u32_at(16),
            index_bits: u32_at(20),
            begin: u64_at(24),
            end: u64_at(32),
            number: u64_at(40),
        };
        if !(12..=26).contains(&meta.page_bits)
            || meta.segment_bits < meta.page_bits
            || meta.segment_bits > 40
            || !(4..=32).contains(&meta.index_bits)
            || meta.begin < crate::log::FIRST_ADDRESS
            || meta.begin > meta.end
            || u32_at(52) != 0
            || meta.end >= crate::log::MAX_ADDRESS
            || meta.begin % 8 != 0
            || meta.end % 8 != 0
        {
            return Err(format!("checkpoint fields out of range: {meta:?}"));
        }
        Ok(meta)
    }
}

/// Writes `meta` as the store's checkpoint, atomically.
pub fn write_meta(fs: &dyn FileSystem, dir: &Path, meta: &CheckpointMeta) -> Result<()> {
    let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
    let path = dir.join(CHECKPOINT_FILE);
    let mut f = fs.create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.append(&meta.encode()).map_err(|e| Error::io(&tmp, e))?;
    f.sync().map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    fs.rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    fs.sync_dir(dir).map_err(|e| Error::io(dir, e))
}

/// The store's checkpoint, if it has one.
pub fn read_meta(fs: &dyn FileSystem, dir: &Path) -> Result<Option<CheckpointMeta>> {
    let path = dir.join(CHECKPOINT_FILE);
    if !fs.exists(&path) {
        return Ok(None);
    }
    let bytes = fs.read_all(&path).map_err(|e| Error::io(&path, e))?;
    CheckpointMeta::decode(&bytes)
        .map(Some)
        .map_err(|reason| Error::Corruption {
            file: path,
            offset: 0,
            reason,
        })
}

/// What recovery found in the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Records read.
    pub records: u64,
    /// Records skipped because their insert had lost a race.
    pub invalid: u64,
}

/// Reads the log in `[begin, end)` and points the index at each key's
/// newest record.
pub fn rebuild_index(
    segments: &Segments,
    index: &HashIndex,
    page_bits: u32,
    begin: u64,
    end: u64,
) -> Result<Recovered> {
    let mut out = Recovered::default();
    scan(segments, page_bits, begin, end, |address, rec| {
        if rec.invalid {
            out.invalid += 1;
        } else {
            let slot = index.find_or_create(KeyHash::of(rec.key))?;
            let entry = slot.load(Ordering::Relaxed);
            slot.store(with_address(entry, address), Ordering::Relaxed);
            out.records += 1;
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_meta_round_trips_and_damage_is_refused() {
        let meta = CheckpointMeta {
            page_bits: 12,
            segment_bits: 16,
            index_bits: 8,
            begin: 64,
            end: 8192 + 48,
            number: 3,
        };
        let bytes = meta.encode();
        assert_eq!(CheckpointMeta::decode(&bytes), Ok(meta));
        for at in 0..52 {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(CheckpointMeta::decode(&bad).is_err(), "byte {at}");
        }
        assert!(CheckpointMeta::decode(&bytes[..48]).is_err());
    }
}
