//! Manual and automatic compaction keep newer data above older data.
#![allow(clippy::unwrap_used)]

mod common;

use common::{key, small_opts, value, DIR};
use tern::io::MemFs;
use tern::Db;

/// Regression: `compact_range` sent L0 straight to the dynamic base level
/// even while a shallower level still held older data, so a tombstone was
/// dropped at the last level while the value it deleted survived above it.
#[test]
fn compact_range_never_pushes_l0_below_a_shallower_non_empty_level() {
    let fs = MemFs::new();
    let fixed = small_opts(fs.clone()).tune(|s| {
        s.dynamic_level_bytes = false;
        s.level0_file_num_compaction_trigger = 1;
    });
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
    let dynamic = fixed.tune(|s| {
        s.dynamic_level_bytes = true;
        // Nothing drains L1 in the background: only the manual compaction
        // below shapes the tree.
        s.disable_auto_compactions = true;
    });
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

/// Regression: with automatic compaction off, L0 reached the stop trigger
/// and every write, flush and even `compact_range` (which flushes first)
/// waited forever for a compaction that could never come. As in RocksDB,
/// the L0 triggers do not stall writes when automatic compaction is off.
#[test]
fn disabled_auto_compaction_never_stalls_writes_on_l0() {
    let opts = small_opts(MemFs::new()).tune(|s| {
        s.disable_auto_compactions = true;
        s.level0_file_num_compaction_trigger = 1;
        s.level0_slowdown_writes_trigger = 2;
        s.level0_stop_writes_trigger = 3;
    });
    let db = std::sync::Arc::new(Db::open(DIR, opts).unwrap());
    let worker = {
        let db = db.clone();
        std::thread::spawn(move || {
            for round in 0..8 {
                for i in 0..100 {
                    db.put(&key(i), &value(i, round)).unwrap();
                }
                db.flush().unwrap();
            }
            db.put(b"unflushed", b"x").unwrap();
            db.compact_range(None, None).unwrap();
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !worker.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "writes stalled on L0 with automatic compaction off"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    worker.join().unwrap();
    assert_eq!(db.stats().levels[0].files, 0);
    assert_eq!(db.get(&key(5)).unwrap(), Some(value(5, 7)));
}

/// The first blob reference in table `number` of `dir`.
fn first_blob_ref(
    ctx: &tern::compaction::JobContext,
    dir: &std::path::Path,
    number: u64,
) -> Option<(u64, u32)> {
    use tern::internals::format::blob::BlobRef;
    use tern::internals::format::internal_key::parse;
    use tern::internals::iter::InternalIterator;
    let path = dir.join(tern::table_file_name(number));
    let table = tern::internals::sst::Table::open(&ctx.fs, &path, number, None).unwrap();
    let mut it = table.iter();
    it.seek_to_first();
    while it.valid() {
        if parse(it.key()).unwrap().kind == tern::ValueKind::BlobRef {
            let (r, _) = BlobRef::decode_with_head(it.value()).unwrap();
            return Some((r.file, r.ordinal));
        }
        it.next();
    }
    None
}

/// Runs each compaction locally, then asks `check_output` about the honest
/// result and about copies that misreport it; records what it answered.
struct CheckingExecutor {
    answers: std::sync::Mutex<Vec<(&'static str, bool)>>,
}

impl tern::compaction::Executor for CheckingExecutor {
    fn execute(
        &self,
        job: &tern::compaction::CompactionJob,
        ctx: &tern::compaction::JobContext,
    ) -> tern::Result<tern::compaction::CompactionOutput> {
        let out = job.run(ctx)?;
        let mut answers = self.answers.lock().unwrap();
        answers.push(("honest", job.check_output(ctx, &out).is_ok()));
        if let Some(first) = out.files.first() {
            let lie = |what: &'static str, f: &dyn Fn(&mut tern::FileMeta)| {
                let mut bad = out.clone();
                f(&mut bad.files[0]);
                (what, job.check_output(ctx, &bad).is_ok())
            };
            answers.push(lie("count", &|m| m.num_entries += 1));
            answers.push(lie("deletions", &|m| m.num_deletions += 1));
            answers.push(lie("size", &|m| m.file_size += 1));
            answers.push(lie("smallest", &|m| {
                m.smallest = out.files[0].largest.clone()
            }));
            answers.push(lie("blob files", &|m| m.blob_files.push(999_999)));
            let mut overlap = out.clone();
            overlap.files.push(first.clone());
            answers.push(("overlap", job.check_output(ctx, &overlap).is_ok()));
            let mut dead = out.clone();
            dead.dead_refs.push((999_999, 0, 10));
            answers.push(("dead ref", job.check_output(ctx, &dead).is_ok()));
            answers.push(lie("sequence range", &|m| m.largest_seq += 1));
            let mut none = out.clone();
            none.files.clear();
            answers.push(("no outputs", job.check_output(ctx, &none).is_ok()));
            let mut dropped = out.clone();
            dropped.entries_dropped += 1;
            answers.push(("dropped count", job.check_output(ctx, &dropped).is_ok()));
            if let Some((file, ordinal)) = first_blob_ref(ctx, &job.dir, first.number) {
                let mut kept = out.clone();
                kept.dead_refs.push((file, ordinal, 10));
                answers.push(("dead ref kept", job.check_output(ctx, &kept).is_ok()));
            }
        }
        Ok(out)
    }
}

#[test]
fn check_output_accepts_a_true_result_and_refuses_every_misreport() {
    let fs = MemFs::new();
    let exec = std::sync::Arc::new(CheckingExecutor {
        answers: std::sync::Mutex::new(Vec::new()),
    });
    let db = Db::open_with_executor(DIR, small_opts(fs), Some(exec.clone())).unwrap();
    for round in 0..2 {
        for i in 0..400 {
            db.put(&key(i), &value(i, round)).unwrap();
        }
        db.flush().unwrap();
    }
    db.compact_range(None, None).unwrap();
    let answers = exec.answers.lock().unwrap();
    assert!(
        answers.iter().any(|(w, _)| *w == "count"),
        "no compaction with outputs ran"
    );
    for (what, accepted) in answers.iter() {
        assert_eq!(
            *accepted,
            *what == "honest",
            "check_output on the {what} case"
        );
    }
}
