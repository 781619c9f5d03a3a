//! Compaction and GC offloaded through a shared tier on a local directory,
//! run by the worker code in this process: results that check are
//! installed, and every kind of damaged or missing result is refused, with
//! the job run locally (or, with fallback off, failing) and no data lost.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use common::*;

use futures::future::BoxFuture;
use prost::Message;
use tern::compaction::Executor;
use tern::Db;
use tern_offload::proto::{self, result_manifest};
use tern_offload::{InProcessRunner, JobRunner, OffloadError, SharedTier};

#[test]
fn compaction_and_gc_run_remotely_and_their_results_are_installed() {
    let s = setup();
    let (db, exec) = open(&s, Arc::new(in_process(&s)), false);
    let model = churn(&db);
    let gcs = compact_and_collect(&db).unwrap();
    db.wait_for_background().unwrap();
    let st = exec.stats();
    assert!(
        st.remote_compactions.load(Relaxed) > 0,
        "no compaction ran remotely"
    );
    assert!(
        st.remote_gcs.load(Relaxed) > 0,
        "no GC ran remotely ({gcs} by collect_garbage, stats {st:?})"
    );
    assert_eq!(
        st.local_jobs.load(Relaxed),
        0,
        "with fallback off nothing runs locally"
    );
    assert!(st.files_uploaded.load(Relaxed) > 0 && st.bytes_downloaded.load(Relaxed) > 0);
    let engine = db.stats();
    assert!(engine.blob_live_bytes > 0);
    assert_matches(&db, &model);
    db.close().unwrap();
    drop(db);
    check_clean(&s.dir);
    // The store reopens as a plain one, with the same contents.
    let db = Db::open(&s.dir, opts()).unwrap();
    assert_matches(&db, &model);
    // The attempts' objects are removed once installed (in the background);
    // inputs stay while live.
    exec.wait_for_uploads();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let start = std::time::Instant::now();
    loop {
        let left = rt.block_on(s.tier.list("jobs")).unwrap();
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "attempt objects left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!rt
        .block_on(s.tier.list("stores/store1"))
        .unwrap()
        .is_empty());
}

/// Runs jobs in process, then damages the first committed result with
/// `damage` before the store sees it.
struct Damaging {
    inner: InProcessRunner,
    tier: SharedTier,
    damage: Damage,
    damaged: std::sync::atomic::AtomicU32,
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    /// A byte of the first output flipped: its checksum no longer matches.
    FlipByte,
    /// A byte flipped and the manifest's checksum updated to match: only
    /// the table's own checks can catch it.
    FlipByteWithValidChecksum,
    /// The manifest claims one entry more than the table holds.
    WrongCount,
    /// No result at all.
    Fail,
}

impl JobRunner for Damaging {
    fn run(
        &self,
        job: proto::JobSpec,
        priority: u32,
        deadline: Duration,
    ) -> BoxFuture<'_, tern_offload::Result<proto::ResultManifest>> {
        Box::pin(async move {
            let mut m = self.inner.run(job, priority, deadline).await?;
            let Some(result_manifest::Kind::Compaction(c)) = &mut m.kind else {
                return Ok(m);
            };
            // Only the first compaction that produced something.
            if c.outputs.is_empty() || self.damaged.fetch_add(1, Relaxed) > 0 {
                return Ok(m);
            }
            let out = &mut c.outputs[0];
            let file = out.file.as_mut().unwrap();
            match self.damage {
                Damage::Fail => {
                    return Err(OffloadError::Invalid("the worker died".into()));
                }
                Damage::WrongCount => out.meta.as_mut().unwrap().num_entries += 1,
                Damage::FlipByte | Damage::FlipByteWithValidChecksum => {
                    let mut bytes = self.tier.get(&file.path).await?.unwrap().to_vec();
                    bytes[100] ^= 0x40;
                    if matches!(self.damage, Damage::FlipByteWithValidChecksum) {
                        file.crc32c = crc32c::crc32c(&bytes);
                    }
                    self.tier.put(&file.path, bytes).await?;
                }
            }
            // What the store reads is the manifest returned; keep the
            // committed one in step, as a lying worker would.
            let path = format!("jobs/{}/{}/result.pb", m.job_id, m.attempt);
            self.tier.put(&path, m.encode_to_vec()).await?;
            Ok(m)
        })
    }
}

fn damaged_result_is_refused_and_the_job_runs_locally(damage: Damage) {
    let s = setup();
    let runner = Damaging {
        inner: in_process(&s),
        tier: s.tier.clone(),
        damage,
        damaged: std::sync::atomic::AtomicU32::new(0),
    };
    let (db, exec) = open(&s, Arc::new(runner), true);
    let model = churn(&db);
    compact_and_collect(&db).unwrap();
    db.wait_for_background().unwrap();
    let st = exec.stats();
    let refused = match damage {
        Damage::Fail => st.fallback_remote.load(Relaxed),
        _ => st.fallback_verify.load(Relaxed),
    };
    assert!(
        refused >= 1,
        "{damage:?}: the damaged result was not refused"
    );
    assert!(
        st.local_jobs.load(Relaxed) >= 1,
        "{damage:?}: the job did not run locally"
    );
    assert!(
        st.remote_compactions.load(Relaxed) >= 1,
        "{damage:?}: later jobs stopped offloading"
    );
    assert_matches(&db, &model);
    db.close().unwrap();
    drop(db);
    check_clean(&s.dir);
}

#[test]
fn an_output_whose_checksum_fails_is_refused() {
    damaged_result_is_refused_and_the_job_runs_locally(Damage::FlipByte);
}

#[test]
fn a_damaged_output_with_a_matching_checksum_is_refused() {
    damaged_result_is_refused_and_the_job_runs_locally(Damage::FlipByteWithValidChecksum);
}

#[test]
fn a_result_that_misreports_its_outputs_is_refused() {
    damaged_result_is_refused_and_the_job_runs_locally(Damage::WrongCount);
}

#[test]
fn a_job_no_worker_finishes_runs_locally() {
    damaged_result_is_refused_and_the_job_runs_locally(Damage::Fail);
}

#[test]
fn with_fallback_off_a_failed_job_fails_instead_of_running_locally() {
    let s = setup();
    let runner = Damaging {
        inner: in_process(&s),
        tier: s.tier.clone(),
        damage: Damage::FlipByte,
        damaged: std::sync::atomic::AtomicU32::new(0),
    };
    // Only the compaction asked for runs, so it is the one damaged.
    let mut o = opts();
    o.disable_auto_compactions = true;
    let (db, exec) = open_with(&s, Arc::new(runner), false, o);
    let model = churn(&db);
    let first = db.compact_range(None, None);
    assert!(
        first.is_err(),
        "the damaged compaction must fail, not run locally"
    );
    assert_eq!(exec.stats().local_jobs.load(Relaxed), 0);
    // The next attempt goes to a worker again and succeeds.
    compact_and_collect(&db).unwrap();
    assert_matches(&db, &model);
    db.close().unwrap();
    drop(db);
    check_clean(&s.dir);
}

/// Runs jobs in process, holding each a moment, and counts the key-range
/// parts it was given and how many jobs ran at once.
struct Overlapping {
    inner: InProcessRunner,
    running: std::sync::atomic::AtomicU32,
    most: std::sync::atomic::AtomicU32,
    parts: std::sync::atomic::AtomicU32,
}

impl JobRunner for Overlapping {
    fn run(
        &self,
        job: proto::JobSpec,
        priority: u32,
        deadline: Duration,
    ) -> BoxFuture<'_, tern_offload::Result<proto::ResultManifest>> {
        Box::pin(async move {
            if let Some(proto::job_spec::Kind::Compaction(c)) = &job.kind {
                if c.range_start.is_some() || c.range_end.is_some() {
                    self.parts.fetch_add(1, Relaxed);
                }
            }
            let now = self.running.fetch_add(1, Relaxed) + 1;
            self.most.fetch_max(now, Relaxed);
            tokio::time::sleep(Duration::from_millis(200)).await;
            let r = self.inner.run(job, priority, deadline).await;
            self.running.fetch_sub(1, Relaxed);
            r
        })
    }
}

#[test]
fn a_split_compaction_runs_its_parts_remotely_at_once() {
    let s = setup();
    let runner = Arc::new(Overlapping {
        inner: in_process(&s),
        running: Default::default(),
        most: Default::default(),
        parts: Default::default(),
    });
    let mut o = opts();
    o.disable_auto_compactions = true;
    o.settings.max_subcompactions = 3;
    o.settings.target_file_size = 8 << 10;
    let (db, exec) = open_with(&s, runner.clone(), false, o);
    let model = churn(&db);
    compact_and_collect(&db).unwrap();
    let engine = db.stats();
    assert!(
        runner.parts.load(Relaxed) >= 2 && engine.subcompactions >= 2,
        "no compaction was split: {} parts sent, {} run",
        runner.parts.load(Relaxed),
        engine.subcompactions
    );
    assert!(
        runner.most.load(Relaxed) >= 2,
        "the parts ran one at a time"
    );
    // Every compaction and part ran remotely, and the engine knows it.
    assert_eq!(exec.stats().local_jobs.load(Relaxed), 0);
    assert_eq!(
        engine.remote_compactions,
        exec.stats().remote_compactions.load(Relaxed)
    );
    assert_eq!(engine.remote_gc_runs, exec.stats().remote_gcs.load(Relaxed));
    assert!(engine.remote_gc_runs > 0);
    assert_matches(&db, &model);
    db.close().unwrap();
    drop(db);
    check_clean(&s.dir);
}

/// Runs jobs in process, then has every key-range part claim one entry
/// more read and dropped than it did: each part still passes its own
/// check, but the parts together no longer account for their inputs.
struct Miscounting(InProcessRunner);

impl JobRunner for Miscounting {
    fn run(
        &self,
        job: proto::JobSpec,
        priority: u32,
        deadline: Duration,
    ) -> BoxFuture<'_, tern_offload::Result<proto::ResultManifest>> {
        Box::pin(async move {
            let ranged = matches!(&job.kind, Some(proto::job_spec::Kind::Compaction(c))
                if c.range_start.is_some() || c.range_end.is_some());
            let mut m = self.0.run(job, priority, deadline).await?;
            if let (true, Some(result_manifest::Kind::Compaction(c))) = (ranged, &mut m.kind) {
                c.entries_read += 1;
                c.entries_dropped += 1;
            }
            Ok(m)
        })
    }
}

#[test]
fn a_split_whose_parts_disagree_runs_locally_or_fails_without_fallback() {
    for fallback in [true, false] {
        let s = setup();
        let mut o = opts();
        o.disable_auto_compactions = true;
        o.settings.max_subcompactions = 3;
        o.settings.target_file_size = 8 << 10;
        let (db, exec) = open_with(&s, Arc::new(Miscounting(in_process(&s))), fallback, o);
        let model = churn(&db);
        let r = db.compact_range(None, None);
        let st = exec.stats();
        assert!(st.fallback_verify.load(Relaxed) >= 1, "{st:?}");
        if fallback {
            r.unwrap();
            assert!(db.stats().subcompactions >= 2);
            assert!(st.local_jobs.load(Relaxed) >= 1);
        } else {
            // Refused by the check across parts, not by a part's own.
            match r {
                Err(tern::Error::Remote(m)) => assert!(m.contains("split compaction"), "{m}"),
                other => panic!("expected a refused split, got {other:?}"),
            }
            assert_eq!(st.local_jobs.load(Relaxed), 0);
            assert_eq!(
                st.remote_compactions.load(Relaxed),
                0,
                "nothing remote was installed"
            );
        }
        assert_matches(&db, &model);
        db.close().unwrap();
        drop(db);
        check_clean(&s.dir);
    }
}

#[test]
fn the_sweep_deletes_this_stores_orphans_and_nothing_in_use() {
    let s = setup();
    let (db, exec) = open(&s, Arc::new(in_process(&s)), false);
    let model = churn(&db);
    compact_and_collect(&db).unwrap();
    exec.wait_for_uploads();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let put = |path: &str| rt.block_on(s.tier.put(path, b"orphan".to_vec())).unwrap();
    put("jobs/store1-abc-7/1/000000.sst");
    put("jobs/store1-abc-7/1/result.pb");
    put("stores/store1/999999.sst");
    // Another store's, whose id starts like this one's.
    put("jobs/store1-x-abc-7/1/000000.sst");
    put("stores/store10/000001.sst");
    let live_before = rt.block_on(s.tier.list("stores/store1")).unwrap().len();
    assert_eq!(exec.sweep(Duration::ZERO).unwrap(), 3);
    let left = |p: &str| rt.block_on(s.tier.list(p)).unwrap();
    assert!(left("jobs/store1-abc-7").is_empty());
    assert_eq!(left("jobs/store1-x-abc-7").len(), 1, "another store's job");
    assert_eq!(left("stores/store10").len(), 1, "another store's file");
    assert_eq!(
        left("stores/store1").len(),
        live_before - 1,
        "live inputs stay"
    );
    // Offloading goes on, and nothing was lost.
    let before = exec.stats().remote_compactions.load(Relaxed);
    for i in 0..300u32 {
        db.put(format!("key{i:06}").as_bytes(), &[b'z'; 700])
            .unwrap();
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    assert!(exec.stats().remote_compactions.load(Relaxed) > before);
    let mut model = model;
    for i in 0..300u32 {
        model.insert(format!("key{i:06}").into_bytes(), vec![b'z'; 700]);
    }
    assert_matches(&db, &model);
}

/// Regression: the sweep ran only after a quiet spell as long as its
/// interval, so a store whose files kept changing never swept.
#[test]
fn the_sweep_runs_on_schedule_while_files_keep_arriving() {
    let s = setup();
    let mut ro = tern_offload::RemoteOptions::new("store1");
    ro.orphan_grace = Duration::from_secs(2);
    let exec = Arc::new(
        tern_offload::RemoteExecutor::new(
            s.tier.clone(),
            Arc::new(in_process(&s)),
            ro,
            Arc::new(tern::io::PosixFs),
        )
        .unwrap(),
    );
    let db =
        Db::open_with_executor(&s.dir, opts(), Some(exec.clone() as Arc<dyn Executor>)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(s.tier.put("stores/store1/999999.sst", b"orphan".to_vec()))
        .unwrap();
    // A new table (and an upload message) every 100 ms, for up to 10 s.
    let start = std::time::Instant::now();
    let mut i = 0u32;
    while exec.stats().orphans_deleted.load(Relaxed) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no sweep ran while files kept arriving"
        );
        db.put(format!("k{i}").as_bytes(), b"v").unwrap();
        db.flush().unwrap();
        i += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = rt.block_on(s.tier.list("stores/store1")).unwrap();
    assert!(left.iter().all(|o| !o.path.ends_with("999999.sst")));
    db.close().unwrap();
}

/// A sweep that lists an input while its upload is still under way (the
/// object is in the tier, the upload not yet recorded) must leave it: the
/// store would otherwise name a deleted object in every later job.
#[test]
fn the_sweep_never_deletes_an_input_whose_upload_is_under_way() {
    let s = setup();
    let (db, exec) = open(&s, Arc::new(in_process(&s)), false);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeper = {
        let (exec, stop) = (exec.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                exec.sweep(Duration::ZERO).unwrap();
            }
        })
    };
    // Large enough that reading one for its checksum takes a while.
    let body = vec![7u8; 4 << 20];
    for n in 0..20u64 {
        let name = format!("{:06}.blob", 900_000 + n);
        let path = s.dir.join(&name);
        std::fs::write(&path, &body).unwrap();
        exec.file_added(&path);
        exec.wait_for_uploads();
        let object = rt
            .block_on(s.tier.get(&format!("stores/store1/{name}")))
            .unwrap();
        assert!(object.is_some(), "{name} was uploaded, then swept away");
    }
    stop.store(true, Relaxed);
    sweeper.join().unwrap();
    db.close().unwrap();
}
