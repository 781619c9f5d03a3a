//! Reading the stable region record by record (recovery and log
//! compaction).

use crate::log::segments::Segments;
use crate::record::{decode, peek_len, Decoded, HEADER_LEN};
use crate::{Error, Result};

/// Calls `f` with each record in `[begin, end)` of the log on disk, in
/// address order, invalid ones included. A damaged record is an
/// [`Error::Corruption`] naming its segment file and offset.
pub fn scan(
    segments: &Segments,
    page_bits: u32,
    begin: u64,
    end: u64,
    mut f: impl FnMut(u64, Decoded<'_>) -> Result<()>,
) -> Result<()> {
    let page_size = 1u64 << page_bits;
    let mut page = vec![0u8; page_size as usize];
    let mut page_start = begin & !(page_size - 1);
    while page_start < end {
        let from = begin.max(page_start);
        let to = end.min(page_start + page_size);
        let bytes = &mut page[..(to - from) as usize];
        segments.read(from, bytes)?;
        let mut at = 0usize;
        while at < bytes.len() {
            let address = from + at as u64;
            let room = (page_start + page_size - address) as usize;
            let corrupt = |reason: String| {
                let (file, offset) = segments.locate(address);
                Error::Corruption {
                    file,
                    offset,
                    reason,
                }
            };
            let len = if bytes.len() - at < HEADER_LEN {
                None
            } else {
                peek_len(&bytes[at..], room).map_err(|e| corrupt(e.0))?
            };
            let Some(len) = len else {
                // The page's records end here. The rest of the page was never
                // written, so anything but zeros is damage, and so is a log
                // whose records stop short of where its last page ends.
                if bytes[at..].iter().any(|&b| b != 0) {
                    return Err(corrupt("bytes after the last record of the page".into()));
                }
                if to == end && end % page_size != 0 {
                    return Err(corrupt(format!(
                        "the log's records end here, before its end {end:#x}"
                    )));
                }
                break;
            };
            if at + len > bytes.len() {
                return Err(corrupt(format!(
                    "record of {len} bytes runs past the end of the log read ({end:#x})"
                )));
            }
            let rec = decode(&bytes[at..], room)
                .map_err(|e| corrupt(e.0))?
                .ok_or_else(|| corrupt("record vanished between two reads".into()))?;
            if rec.prev >= address {
                return Err(corrupt(format!(
                    "the record's previous address {:#x} is not below its own",
                    rec.prev
                )));
            }
            f(address, rec)?;
            at += len;
        }
        page_start += page_size;
    }
    Ok(())
}
