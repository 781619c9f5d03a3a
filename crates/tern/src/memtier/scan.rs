//! Reading a copied arena node by node, links ignored: the checksum a
//! durable tier table is recorded with, and the check that its extent
//! still holds it (recovery, `tern check`). Layout and checksum are
//! specified in `docs/format/memtier.md`.

use crate::format::checksum::Crc;
use crate::format::internal_key;
use crate::memtable::skiplist::{parse_node, RawNode, HEAD_REGION};

/// What an arena copy holds, as [`scan`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentSummary {
    /// Masked CRC32C of every node's header, internal key and value.
    pub checksum: u32,
    /// Nodes.
    pub entries: u64,
    /// Smallest and largest sequence number (`(MAX, 0)` when empty).
    pub seqs: (u64, u64),
}

/// Where an arena copy stops making sense: the offset (from the copy's
/// start) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanError {
    /// Offset of the bad node from the start of the copy.
    pub offset: usize,
    /// What is wrong with it.
    pub why: String,
}

/// Walks the nodes of `bytes`, an arena copy (head region first, then
/// nodes back to back to its end), calling `each` for every node.
pub(crate) fn scan(
    bytes: &[u8],
    mut each: impl FnMut(&RawNode),
) -> Result<ExtentSummary, ScanError> {
    if bytes.len() < HEAD_REGION {
        return Err(ScanError {
            offset: 0,
            why: "shorter than a skiplist head".into(),
        });
    }
    let mut crc = Crc::default();
    let mut entries = 0u64;
    let mut seqs = (u64::MAX, 0);
    let mut at = HEAD_REGION;
    while at < bytes.len() {
        let node = parse_node(bytes, at).map_err(|why| ScanError {
            offset: at,
            why: why.into(),
        })?;
        crc.update(&bytes[at..at + 8]);
        crc.update(&bytes[node.key.start..node.value.end]);
        let trailer = internal_key::trailer(&bytes[node.key.clone()]);
        // A memtable holds values and tombstones; a blob reference appears
        // only when a table is written, and one here would name a blob file
        // nothing tracks.
        match internal_key::ValueKind::from_u8(trailer as u8) {
            Some(internal_key::ValueKind::Value | internal_key::ValueKind::Delete) => {}
            _ => {
                return Err(ScanError {
                    offset: at,
                    why: format!("value kind {} in a memtable copy", trailer as u8),
                })
            }
        }
        let seq = trailer >> 8;
        seqs = (seqs.0.min(seq), seqs.1.max(seq));
        entries += 1;
        each(&node);
        at = node.end;
    }
    Ok(ExtentSummary {
        checksum: crc.finish(),
        entries,
        seqs,
    })
}

/// Checks an arena copy against what the manifest recorded for it.
pub fn verify(
    bytes: &[u8],
    checksum: u32,
    entries: u64,
    seqs: (u64, u64),
) -> Result<ExtentSummary, ScanError> {
    let s = scan(bytes, |_| {})?;
    s.matches(checksum, entries, seqs)?;
    Ok(s)
}

impl ExtentSummary {
    /// Whether it is what the manifest recorded; if not, why.
    pub fn matches(&self, checksum: u32, entries: u64, seqs: (u64, u64)) -> Result<(), ScanError> {
        let wrong = |why: String| Err(ScanError { offset: 0, why });
        // The tier never takes an empty memtable, and an empty table's
        // sequence range would say nothing about the writes it holds.
        if entries == 0 {
            return wrong("a table of no entries".into());
        }
        if self.checksum != checksum {
            return wrong(format!(
                "checksum mismatch: recorded {checksum:#010x}, found {:#010x}",
                self.checksum
            ));
        }
        if self.entries != entries {
            return wrong(format!(
                "{} entries where the manifest recorded {entries}",
                self.entries
            ));
        }
        if self.seqs != seqs {
            return wrong(format!(
                "sequence numbers {:?} where the manifest recorded {seqs:?}",
                self.seqs
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::internal_key::ValueKind;
    use crate::memtable::MemTable;

    #[test]
    fn a_copy_verifies_and_any_changed_byte_outside_the_links_fails() {
        let m = MemTable::new(1 << 16).without_version_chains();
        for i in 0..50u64 {
            m.add(
                i + 1,
                ValueKind::Value,
                format!("k{i}").as_bytes(),
                b"value",
            )
            .unwrap();
        }
        let list = m.list().unwrap();
        // SAFETY: no insert runs any more.
        let bytes = unsafe { list.raw_bytes(list.used()) }.to_vec();
        let s = scan(&bytes, |_| {}).unwrap();
        assert_eq!((s.entries, s.seqs), (50, (1, 50)));
        verify(&bytes, s.checksum, 50, (1, 50)).unwrap();
        let mut covered = vec![];
        scan(&bytes, |n| {
            covered.push(n.at..n.at + 8);
            covered.push(n.key.start..n.value.end);
        })
        .unwrap();
        for i in HEAD_REGION..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            let counted = covered.iter().any(|r| r.contains(&i));
            let ok = verify(&bad, s.checksum, 50, (1, 50)).is_ok();
            assert_eq!(ok, !counted, "byte {i}: only links and padding may change");
        }
        assert!(verify(&bytes[..bytes.len() - 1], s.checksum, 50, (1, 50)).is_err());
    }
}
