//! Entry points for the fuzz targets (`fuzz/`) and their corpus replay:
//! arbitrary bytes into the hash engine's decoders. On any input they return
//! (an error is fine) without panicking or hanging.

use std::path::Path;

use tern::io::{FileSystem, MemFs};

use crate::checkpoint::{write_meta, CheckpointMeta};
use crate::record::{checksum, decode, encode, peek_len, HEADER_LEN};
use crate::{segment_file_name, HashOptions, HashStore};

/// One record: decoded as it is, then with its checksum recomputed so
/// mutations reach the fields behind it; whatever decodes re-encodes to a
/// record with the same contents.
pub fn record(data: &[u8]) {
    let _ = decode(data, data.len());
    let Ok(Some(len)) = peek_len(data, data.len()) else {
        return;
    };
    let Some(rec) = data.get(..len) else {
        return;
    };
    let mut fixed = rec.to_vec();
    let word = |at: usize| u32::from_le_bytes(fixed[at..at + 4].try_into().unwrap_or_default());
    let info = u64::from_le_bytes(fixed[..8].try_into().unwrap_or_default());
    let (key_len, value_len, capacity) = (word(8), word(12), word(16));
    let key_end = HEADER_LEN + key_len as usize;
    let value_end = key_end + value_len as usize;
    if value_end > fixed.len() {
        return;
    }
    let crc = checksum(
        info,
        key_len,
        value_len,
        capacity,
        &fixed[HEADER_LEN..key_end],
        &fixed[key_end..value_end],
    );
    fixed[20..24].copy_from_slice(&crc.to_le_bytes());
    let Ok(Some(d)) = decode(&fixed, fixed.len()) else {
        panic!("a record with its checksum recomputed must decode");
    };
    let again = encode(d.prev, d.tombstone, d.key, d.value);
    let Ok(Some(e)) = decode(&again, again.len()) else {
        panic!("a re-encoded record must decode");
    };
    assert_eq!(
        (e.prev, e.tombstone, e.key, e.value),
        (d.prev, d.tombstone, d.key, d.value)
    );
}

/// A log segment: `data` is segment 0 of a store whose checkpoint covers it
/// (its first 8-aligned `len`), so opening the store scans it as recovery
/// does; an opened store then reads back every key recovery indexed, takes a
/// write, and survives a checkpoint and a second open.
pub fn log(data: &[u8]) {
    let end = (data.len() as u64) & !7;
    if !(64..=1 << 16).contains(&end) {
        return;
    }
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let written = fs.create_dir_all(dir).and_then(|()| {
        let mut f = fs.create(&dir.join(segment_file_name(0)))?;
        f.append(data)?;
        f.sync()
    });
    if written.is_err() {
        return;
    }
    let options = HashOptions::small();
    let meta = CheckpointMeta {
        page_bits: options.page_bits,
        segment_bits: options.segment_bits,
        index_bits: options.index_bits,
        begin: 64,
        end,
        number: 1,
    };
    if write_meta(fs.as_ref(), dir, &meta).is_err() {
        return;
    }
    let Ok(store) = HashStore::open_with_fs(fs.clone(), dir, options.clone()) else {
        return;
    };
    let mut keys = Vec::new();
    let page = 1usize << options.page_bits;
    let mut at = 64usize;
    while at + HEADER_LEN <= end as usize {
        let room = page - at % page;
        match decode(&data[at..end as usize], room) {
            Ok(Some(d)) => {
                keys.push(d.key.to_vec());
                at += d.len;
            }
            _ => at = (at / page + 1) * page,
        }
    }
    {
        let mut s = store.session();
        for k in &keys {
            let _ = s.get(k);
        }
        let _ = s.upsert(b"fuzz", b"value");
    }
    if store.checkpoint().is_err() {
        return;
    }
    drop(store);
    let store = HashStore::open_with_fs(fs, dir, options)
        .expect("a store checkpointed by this build reopens");
    let got = store.session().get(b"fuzz").expect("read back");
    assert_eq!(got.as_deref(), Some(&b"value"[..]));
}

/// A checkpoint file: decoded, and what decodes re-encodes to the same
/// bytes.
pub fn checkpoint(data: &[u8]) {
    if let Ok(meta) = CheckpointMeta::decode(data) {
        assert_eq!(meta.encode(), data);
    }
}
