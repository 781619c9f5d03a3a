//! Reads of separated values through their blob files' mappings, on the
//! real file system (the in-memory one maps nothing). A file of its own:
//! whether reads go mapped is process-wide state, which other tests' cold
//! reads would change.

use tern::{Db, Options, Settings};

fn opts(mmap_blob_reads: bool) -> Options {
    Options {
        settings: Settings {
            blob_threshold: Some(64),
            mmap_blob_reads,
            ..Settings::default()
        },
        ..Options::default()
    }
}

/// `get_if_cached_unless_mapped` leaves a separated value to `get` exactly
/// when `get` would copy it out of the mapping, and answers the rest as
/// `get_if_cached` does.
#[test]
fn get_if_cached_unless_mapped_leaves_mapped_values_to_get() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![7u8; 300];
    {
        let db = Db::open(dir.path(), opts(true)).unwrap();
        db.put(b"small", b"v").unwrap();
        db.put(b"big", &big).unwrap();
        // In the memtable: answered, separated or not.
        assert_eq!(
            db.get_if_cached_unless_mapped(b"big").unwrap(),
            Some(Some(big.clone()))
        );
        db.flush().unwrap();
        db.wait_for_background().unwrap();
        assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
        // In a blob file the page cache holds: `get` would map it.
        assert_eq!(db.get_if_cached_unless_mapped(b"big").unwrap(), None);
        assert_eq!(db.get_if_cached(b"big").unwrap(), Some(Some(big.clone())));
        // Values kept in the table, and absent keys, are answered.
        assert_eq!(
            db.get_if_cached_unless_mapped(b"small").unwrap(),
            Some(Some(b"v".to_vec()))
        );
        assert_eq!(
            db.get_if_cached_unless_mapped(b"absent").unwrap(),
            Some(None)
        );
        db.close().unwrap();
    }
    // Without mapped reads nothing is left: `get` would `pread` too.
    let db = Db::open(dir.path(), opts(false)).unwrap();
    assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
    assert_eq!(
        db.get_if_cached_unless_mapped(b"big").unwrap(),
        Some(Some(big))
    );
}

/// A read left to `get` counts once, when `get` serves it, not also when
/// the memory-only attempt handed it back.
#[test]
fn deferred_point_read_counts_once() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![7u8; 300];
    let db = Db::open(dir.path(), opts(true)).unwrap();
    db.put(b"big", &big).unwrap();
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
    let before = db.stats().point_reads;
    assert_eq!(db.get_if_cached_unless_mapped(b"big").unwrap(), None);
    assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
    assert_eq!(db.stats().point_reads, before + 1);
    // A read answered from memory counts once too.
    assert_eq!(db.get_if_cached(b"big").unwrap(), Some(Some(big)));
    assert_eq!(db.stats().point_reads, before + 2);
}

/// Reads through a read-ahead's view resolve separated values as reads of
/// their own do: one left by the memory-only read is served by `get_in`.
#[test]
fn reads_through_a_view_resolve_separated_values() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![9u8; 300];
    let db = Db::open(dir.path(), opts(true)).unwrap();
    db.put(b"big", &big).unwrap();
    let before_flush = db.read_ahead();
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    assert_eq!(db.get(b"big").unwrap(), Some(big.clone()));
    // Made before the flush: the value is still in its memtable.
    assert_eq!(
        db.get_if_cached_in(&before_flush, b"big", true).unwrap(),
        Some(Some(big.clone()))
    );
    drop(before_flush);
    let view = db.read_ahead();
    assert_eq!(db.get_if_cached_in(&view, b"big", true).unwrap(), None);
    assert_eq!(db.get_in(&view, b"big").unwrap(), Some(big.clone()));
    assert_eq!(
        db.get_if_cached_in(&view, b"big", false).unwrap(),
        Some(Some(big))
    );
}

/// A read refused (an empty key, a key too long) serves nothing and counts
/// nothing.
#[test]
fn refused_point_read_counts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts(false)).unwrap();
    let before = db.stats().point_reads;
    assert!(db.get(b"").is_err());
    assert!(db.get_if_cached(b"").is_err());
    assert!(db.get(&vec![b'k'; 1 << 20]).is_err());
    assert_eq!(db.stats().point_reads, before);
}
