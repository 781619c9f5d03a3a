//! The shared tier on an S3 server (`moto_server`, started here): the same
//! offloaded compactions and GC as on a local directory.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use common::*;

#[test]
fn compaction_and_gc_through_an_s3_tier() {
    let Some((_moto, port)) = moto() else { return };
    let s = setup_s3(port);
    let (db, exec) = open(&s, Arc::new(in_process(&s)), false);
    let model = churn(&db);
    compact_and_collect(&db).unwrap();
    db.wait_for_background().unwrap();
    let st = exec.stats();
    assert!(st.remote_compactions.load(Relaxed) > 0, "{st:?}");
    assert!(st.remote_gcs.load(Relaxed) > 0, "{st:?}");
    assert_eq!(st.local_jobs.load(Relaxed), 0);
    assert_matches(&db, &model);
    db.close().unwrap();
    drop(db);
    check_clean(&s.dir);
    // The inputs really are in the bucket.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stored = rt.block_on(s.tier.list("stores/store1")).unwrap();
    assert!(!stored.is_empty(), "nothing uploaded to the bucket");
}
