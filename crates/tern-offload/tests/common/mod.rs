//! Helpers shared by the offload tests: a store, its tier and executor,
//! and a workload that makes every job kind run.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tern::compaction::Executor;
use tern::io::PosixFs;
use tern::{Db, Options};
use tern_offload::{
    FilterRegistry, InProcessRunner, JobRunner, RemoteExecutor, RemoteOptions, SharedTier,
};

pub fn opts() -> Options {
    Options {
        settings: tern::Settings {
            write_buffer_size: 64 << 10,
            target_file_size: 32 << 10,
            max_bytes_for_level_base: 256 << 10,
            block_size: 1 << 10,
            blob_file_size: 64 << 10,
            ..tern::Settings::default()
        },
        ..Options::default()
    }
}

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Three rounds of overwrites of 600 keys with 600-byte (separated) values,
/// then a compaction of everything and GC: every job kind runs.
pub fn churn(db: &Db) -> Model {
    let mut model = Model::new();
    for round in 0..3u32 {
        for i in 0..600u32 {
            let k = format!("key{i:06}").into_bytes();
            let mut v = format!("value-{i}-round-{round}-").into_bytes();
            v.resize(600, b'a' + (round % 26) as u8);
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.flush().unwrap();
    }
    for i in (0..600u32).step_by(3) {
        let k = format!("key{i:06}").into_bytes();
        db.delete(&k).unwrap();
        model.remove(&k);
    }
    db.flush().unwrap();
    model
}

pub fn compact_and_collect(db: &Db) -> tern::Result<usize> {
    db.compact_range(None, None)?;
    db.collect_garbage()
}

pub fn assert_matches(db: &Db, model: &Model) {
    let mut it = db.iter(tern::ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut seen = Model::new();
    while it.valid() {
        seen.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().unwrap();
    assert_eq!(seen.len(), model.len(), "key count");
    assert!(seen == *model, "the store's contents differ from the model");
}

pub fn check_clean(dir: &Path) {
    let report = tern::tools::check::check_store(dir, Arc::new(PosixFs)).unwrap();
    assert!(
        report.problems.is_empty(),
        "tern check: {:?}",
        report.problems
    );
}

/// A store, its tier and its executor.
pub struct Setup {
    pub _tmp: tempfile::TempDir,
    pub dir: std::path::PathBuf,
    pub tier: SharedTier,
    pub scratch: std::path::PathBuf,
}

/// A store directory, scratch space and a tier on a local directory.
pub fn setup() -> Setup {
    setup_with(|tmp| {
        let url = format!("file://{}", tmp.join("tier").display());
        SharedTier::open(&url, &[]).unwrap()
    })
}

/// A store directory and scratch space, with the tier `tier` makes.
pub fn setup_with(tier: impl FnOnce(&Path) -> SharedTier) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let tier = tier(tmp.path());
    Setup {
        dir: tmp.path().join("db"),
        scratch: tmp.path().join("scratch"),
        tier,
        _tmp: tmp,
    }
}

pub fn open(s: &Setup, runner: Arc<dyn JobRunner>, fallback: bool) -> (Db, Arc<RemoteExecutor>) {
    open_with(s, runner, fallback, opts())
}

pub fn open_with(
    s: &Setup,
    runner: Arc<dyn JobRunner>,
    fallback: bool,
    opts: Options,
) -> (Db, Arc<RemoteExecutor>) {
    let mut ro = RemoteOptions::new("store1");
    ro.fallback = fallback;
    ro.deadline = Duration::from_secs(30);
    let exec =
        Arc::new(RemoteExecutor::new(s.tier.clone(), runner, ro, Arc::new(PosixFs)).unwrap());
    let db = Db::open_with_executor(&s.dir, opts, Some(exec.clone() as Arc<dyn Executor>)).unwrap();
    (db, exec)
}

pub fn in_process(s: &Setup) -> InProcessRunner {
    InProcessRunner::new(s.tier.clone(), s.scratch.clone(), FilterRegistry::new())
}
