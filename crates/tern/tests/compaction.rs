//! Manual and automatic compaction keep newer data above older data.
#![allow(clippy::unwrap_used)]

mod common;

use common::{key, small_opts, value, DIR};
use tern::io::MemFs;
use tern::{Db, Options};

/// Regression: `compact_range` sent L0 straight to the dynamic base level
/// even while a shallower level still held older data, so a tombstone was
/// dropped at the last level while the value it deleted survived above it.
#[test]
fn compact_range_never_pushes_l0_below_a_shallower_non_empty_level() {
    let fs = MemFs::new();
    let fixed = Options {
        dynamic_level_bytes: false,
        level0_file_num_compaction_trigger: 1,
        ..small_opts(fs.clone())
    };
    // With fixed level sizes L0 compacts into L1.
    let db = Db::open(DIR, fixed.clone()).unwrap();
    for i in 0..100 {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_background().unwrap();
    let st = db.stats();
    assert!(
        st.levels[1].files > 0,
        "data should sit in L1: {:?}",
        st.levels
    );
    db.close().unwrap();

    // With dynamic sizes the base level of this small store is the last
    // level, while L1 still holds the older data.
    let dynamic = Options {
        dynamic_level_bytes: true,
        // Nothing drains L1 in the background: only the manual compaction
        // below shapes the tree.
        disable_auto_compactions: true,
        ..fixed
    };
    let db = Db::open(DIR, dynamic.clone()).unwrap();
    db.delete(&key(7)).unwrap();
    db.put(&key(8), b"newer").unwrap();
    db.flush().unwrap();
    db.compact_range(Some(&key(0)), Some(&key(10))).unwrap();
    assert_eq!(db.get(&key(7)).unwrap(), None, "a deleted key came back");
    assert_eq!(db.get(&key(8)).unwrap(), Some(b"newer".to_vec()));
    db.close().unwrap();
    let db = Db::open(DIR, dynamic).unwrap();
    assert_eq!(
        db.get(&key(7)).unwrap(),
        None,
        "a deleted key came back after reopen"
    );
    assert_eq!(db.get(&key(8)).unwrap(), Some(b"newer".to_vec()));
}
