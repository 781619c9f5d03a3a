//! Compactions split into key-range parts (`max_subcompactions`) keep
//! exactly what whole compactions keep, and a part that fails or
//! misreports leaves nothing behind.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{files_ending, key, scan_at, small_opts, DIR};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::compaction::{CompactionJob, CompactionOutput, Executor, JobContext};
use tern::io::MemFs;
use tern::{Db, Options};

fn opts(fs: Arc<MemFs>, parts: usize) -> Options {
    let mut o = small_opts(fs);
    o.settings.max_subcompactions = parts;
    o.settings.target_file_size = 8 << 10;
    o.settings.blob_threshold = Some(200);
    o.settings.blob_file_size = 64 << 10;
    o
}

fn check(fs: &Arc<MemFs>) {
    let report = tern::tools::check::check_store(Path::new(DIR), fs.clone()).unwrap();
    assert!(report.is_ok(), "{report:?}");
}

/// Applies one seeded history of puts (inline and separated), deletes and
/// a snapshot to a store; returns the model of the latest state and of the
/// snapshot.
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn history(db: &Db, seed: u64) -> (Model, Model, tern::Snapshot) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Model::new();
    let mut at_snapshot = None;
    for round in 0..6u32 {
        for _ in 0..700 {
            let k = key(rng.gen_range(0..1500));
            if rng.gen_bool(0.15) {
                db.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let len = if rng.gen_bool(0.5) { 40 } else { 400 };
                let mut v = format!("{round}-{}-", rng.gen::<u32>()).into_bytes();
                v.resize(len, b'v');
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        db.flush().unwrap();
        if round == 3 {
            at_snapshot = Some((db.snapshot().unwrap(), model.clone()));
        }
    }
    let (snap, snap_model) = at_snapshot.unwrap();
    (model, snap_model, snap)
}

#[test]
fn split_compactions_keep_what_whole_ones_keep() {
    for seed in 0..3u64 {
        let split_fs = MemFs::new();
        let split = Db::open(DIR, opts(split_fs.clone(), 4)).unwrap();
        let (model, snap_model, snap) = history(&split, seed);
        split.compact_range(None, None).unwrap();
        let stats = split.stats();
        assert!(
            stats.subcompactions >= 2,
            "seed {seed}: no compaction was split ({} parts)",
            stats.subcompactions
        );
        assert_eq!(stats.remote_compactions, 0, "seed {seed}");
        let latest: Vec<_> = model.clone().into_iter().collect();
        assert_eq!(scan_at(&split, None), latest, "seed {seed}: latest");
        let at_snap: Vec<_> = snap_model.into_iter().collect();
        assert_eq!(
            scan_at(&split, Some(&snap)),
            at_snap,
            "seed {seed}: snapshot"
        );

        // The same history compacted whole holds the same tables' worth.
        let whole_fs = MemFs::new();
        let whole = Db::open(DIR, opts(whole_fs.clone(), 1)).unwrap();
        let (_, _, whole_snap) = history(&whole, seed);
        whole.compact_range(None, None).unwrap();
        assert_eq!(whole.stats().subcompactions, 0);
        // The same blob records are known dead: no part lost or invented
        // a dead mark.
        assert_eq!(
            whole.stats().blob_live_bytes,
            split.stats().blob_live_bytes,
            "seed {seed}"
        );
        assert_eq!(scan_at(&whole, None), scan_at(&split, None));
        assert_eq!(
            scan_at(&whole, Some(&whole_snap)),
            scan_at(&split, Some(&snap))
        );
        drop((snap, whole_snap));
        whole.close().unwrap();

        split.close().unwrap();
        check(&split_fs);
        let reopened = Db::open(DIR, opts(split_fs.clone(), 4)).unwrap();
        assert_eq!(scan_at(&reopened, None), latest, "seed {seed}: reopened");
        reopened.close().unwrap();
    }
}

/// Runs the parts one by one, then checks each part's output as its own
/// and as its neighbour's, recording the answers.
#[derive(Default)]
struct PartsExecutor {
    split_runs: AtomicUsize,
    answers: Mutex<Vec<(&'static str, bool)>>,
}

impl Executor for PartsExecutor {
    fn execute(&self, job: &CompactionJob, ctx: &JobContext) -> tern::Result<CompactionOutput> {
        job.run(ctx)
    }

    fn execute_parts(
        &self,
        parts: &[CompactionJob],
        ctx: &JobContext,
    ) -> tern::Result<Vec<CompactionOutput>> {
        self.split_runs.fetch_add(1, Ordering::SeqCst);
        let outs = parts
            .iter()
            .map(|p| self.execute(p, ctx))
            .collect::<tern::Result<Vec<_>>>()?;
        let mut answers = self.answers.lock().unwrap();
        for (i, (p, o)) in parts.iter().zip(&outs).enumerate() {
            answers.push(("honest part", p.check_output(ctx, o).is_ok()));
            if let Some(next) = parts.get(i + 1).filter(|_| !o.files.is_empty()) {
                answers.push((
                    "part checked as its neighbour",
                    next.check_output(ctx, o).is_ok(),
                ));
            }
        }
        Ok(outs)
    }
}

/// Every blob ref (file, ordinal) in tables `numbers` of `dir`, as stored.
fn refs_in(ctx: &JobContext, dir: &Path, numbers: &[u64]) -> Vec<(u64, u32)> {
    use tern::internals::format::blob::BlobRef;
    use tern::internals::format::internal_key::parse;
    use tern::internals::iter::InternalIterator;
    let mut out = Vec::new();
    for &n in numbers {
        let path = dir.join(tern::table_file_name(n));
        let table = tern::internals::sst::Table::open(&ctx.fs, &path, n, None).unwrap();
        let mut it = table.iter();
        it.seek_to_first();
        while it.valid() {
            if parse(it.key()).unwrap().kind == tern::ValueKind::BlobRef {
                let (r, _) = BlobRef::decode_with_head(it.value()).unwrap();
                out.push((r.file, r.ordinal));
            }
            it.next();
        }
    }
    out
}

/// The first blob record an output table of `out` refers to.
fn a_kept_ref(ctx: &JobContext, dir: &Path, out: &CompactionOutput) -> Option<(u64, u32)> {
    let numbers: Vec<u64> = out.files.iter().map(|f| f.number).collect();
    refs_in(ctx, dir, &numbers).into_iter().next()
}

/// A record part 1 keeps, at an address GC has moved it from (as an input
/// table still stores it).
fn a_moved_kept_ref(
    ctx: &JobContext,
    parts: &[CompactionJob],
    outs: &[CompactionOutput],
) -> Option<(u64, u32)> {
    let p = &parts[1];
    let out_numbers: Vec<u64> = outs[1].files.iter().map(|f| f.number).collect();
    let kept: std::collections::BTreeSet<(u64, u32)> = refs_in(ctx, &p.dir, &out_numbers)
        .into_iter()
        .map(|(f, o)| p.current_home(f, o))
        .collect();
    let in_numbers: Vec<u64> = p.inputs.iter().map(|f| f.number).collect();
    refs_in(ctx, &p.dir, &in_numbers)
        .into_iter()
        .find(|&(f, o)| !p.live_blobs.contains(&f) && kept.contains(&p.current_home(f, o)))
}

/// Runs the parts, then asks `check_parts` about the honest outputs and
/// about two lies no part's own check can see: a record one part calls
/// dead that the next part keeps, and entries a part claims to have read
/// and dropped.
#[derive(Default)]
struct CrossCheck(Mutex<Vec<(&'static str, bool)>>);

impl Executor for CrossCheck {
    fn execute_parts(
        &self,
        parts: &[CompactionJob],
        ctx: &JobContext,
    ) -> tern::Result<Vec<CompactionOutput>> {
        let outs = tern::compaction::run_parts(self, parts, ctx)?;
        let mut answers = self.0.lock().unwrap();
        answers.push((
            "honest",
            tern::compaction::check_parts(parts, &outs, ctx).is_ok(),
        ));
        if let Some((file, ordinal)) = a_kept_ref(ctx, &parts[1].dir, &outs[1]) {
            let mut lie = outs.clone();
            lie[0].dead_refs.push((file, ordinal, 100));
            answers.push((
                "own check passes",
                parts[0].check_output(ctx, &lie[0]).is_ok(),
            ));
            answers.push((
                "dead in one part, kept by another",
                tern::compaction::check_parts(parts, &lie, ctx).is_ok(),
            ));
        }
        if let Some((file, ordinal)) = a_moved_kept_ref(ctx, parts, &outs) {
            let mut lie = outs.clone();
            lie[0].dead_refs.push((file, ordinal, 100));
            answers.push((
                "dead at its old home, kept by another",
                tern::compaction::check_parts(parts, &lie, ctx).is_ok(),
            ));
        }
        let mut lie = outs.clone();
        lie[0].entries_read += 1;
        lie[0].entries_dropped += 1;
        answers.push((
            "own check passes",
            parts[0].check_output(ctx, &lie[0]).is_ok(),
        ));
        answers.push((
            "miscounted",
            tern::compaction::check_parts(parts, &lie, ctx).is_ok(),
        ));
        Ok(outs)
    }
}

#[test]
fn check_parts_refuses_what_no_part_can_see_alone() {
    let fs = MemFs::new();
    let exec = Arc::new(CrossCheck::default());
    let mut o = opts(fs.clone(), 3);
    o.settings.blob_threshold = Some(0);
    let db = Db::open_with_executor(DIR, o, Some(exec.clone())).unwrap();
    let (model, _, snap) = history(&db, 3);
    db.compact_range(None, None).unwrap();
    let answers = exec.0.lock().unwrap().clone();
    assert!(
        answers
            .iter()
            .any(|(w, _)| *w == "dead in one part, kept by another"),
        "no split with refs in a second part: {answers:?}"
    );
    for (what, accepted) in answers {
        let honest = what == "honest" || what == "own check passes";
        assert_eq!(accepted, honest, "{what}");
    }
    drop(snap);
    assert_eq!(scan_at(&db, None), model.into_iter().collect::<Vec<_>>());
    db.close().unwrap();
    check(&fs);
}

/// The same, after GC moved records: a lie that names a record by the
/// address an input still stores must be caught at its current home.
#[test]
fn check_parts_follows_records_gc_moved() {
    let mut found = false;
    for seed in 0..8u64 {
        let fs = MemFs::new();
        let exec = Arc::new(CrossCheck::default());
        let mut o = opts(fs.clone(), 3);
        o.settings.blob_threshold = Some(0);
        o.settings.gc_garbage_ratio = 0.1;
        let db = Db::open_with_executor(DIR, o, Some(exec.clone())).unwrap();
        let (model, _, snap) = history(&db, seed);
        drop(snap);
        db.compact_range(None, Some(b"key000700")).unwrap();
        db.collect_garbage().unwrap();
        exec.0.lock().unwrap().clear();
        db.compact_range(None, None).unwrap();
        let answers = exec.0.lock().unwrap().clone();
        for (what, accepted) in &answers {
            let honest = *what == "honest" || *what == "own check passes";
            assert_eq!(*accepted, honest, "seed {seed}: {what}");
        }
        found |= answers
            .iter()
            .any(|(w, _)| *w == "dead at its old home, kept by another");
        assert_eq!(scan_at(&db, None), model.into_iter().collect::<Vec<_>>());
        db.close().unwrap();
        check(&fs);
        if found {
            break;
        }
    }
    assert!(
        found,
        "no seed split a compaction over records GC had moved"
    );
}

#[test]
fn a_part_outside_its_range_is_refused() {
    let fs = MemFs::new();
    let exec = Arc::new(PartsExecutor::default());
    let db = Db::open_with_executor(DIR, opts(fs.clone(), 3), Some(exec.clone())).unwrap();
    let (model, _, snap) = history(&db, 7);
    db.compact_range(None, None).unwrap();
    assert!(
        exec.split_runs.load(Ordering::SeqCst) > 0,
        "nothing was split"
    );
    let answers = exec.answers.lock().unwrap().clone();
    assert!(answers
        .iter()
        .any(|(w, _)| *w == "part checked as its neighbour"));
    for (what, accepted) in answers {
        assert_eq!(accepted, what == "honest part", "{what}");
    }
    drop(snap);
    assert_eq!(scan_at(&db, None), model.into_iter().collect::<Vec<_>>());
    db.close().unwrap();
    check(&fs);
}

/// Runs parts through the default `execute_parts`; while `fail` is set,
/// every part but the first fails. Records the tables parts made (not
/// whole jobs, which succeed and are installed).
#[derive(Default)]
struct FailingParts {
    fail: AtomicBool,
    parts_run: AtomicUsize,
    made: Mutex<Vec<u64>>,
}

impl Executor for FailingParts {
    fn execute(&self, job: &CompactionJob, ctx: &JobContext) -> tern::Result<CompactionOutput> {
        if !job.range.is_unbounded() {
            self.parts_run.fetch_add(1, Ordering::SeqCst);
        }
        if self.fail.load(Ordering::SeqCst) && job.range.start.is_some() {
            return Err(tern::Error::Internal("injected part failure".into()));
        }
        let out = job.run(ctx)?;
        if !job.range.is_unbounded() {
            self.made
                .lock()
                .unwrap()
                .extend(out.files.iter().map(|f| f.number));
        }
        Ok(out)
    }
}

#[test]
fn a_failed_part_leaves_no_output_and_the_store_goes_on() {
    let fs = MemFs::new();
    let exec = Arc::new(FailingParts::default());
    // Only the compaction asked for runs: a background one finishing while
    // the failure is switched on would leave tables of its own.
    let mut o = opts(fs.clone(), 3);
    o.settings.disable_auto_compactions = true;
    let db = Db::open_with_executor(DIR, o, Some(exec.clone())).unwrap();
    let (model, _, snap) = history(&db, 11);
    exec.made.lock().unwrap().clear();
    exec.fail.store(true, Ordering::SeqCst);
    assert!(db.compact_range(None, None).is_err());
    assert!(
        exec.parts_run.load(Ordering::SeqCst) > 0,
        "nothing was split"
    );
    // The first part's outputs went with the failure.
    let made = std::mem::take(&mut *exec.made.lock().unwrap());
    assert!(!made.is_empty(), "the first part made no table");
    let tables = files_ending(&fs, DIR, ".sst");
    let left: Vec<_> = made
        .iter()
        .filter(|n| tables.contains(&Path::new(DIR).join(tern::table_file_name(**n))))
        .collect();
    assert!(
        left.is_empty(),
        "outputs of a failed split left behind: {left:?}"
    );
    exec.fail.store(false, Ordering::SeqCst);
    db.compact_range(None, None).unwrap();
    drop(snap);
    assert_eq!(scan_at(&db, None), model.into_iter().collect::<Vec<_>>());
    db.close().unwrap();
    check(&fs);
}

/// Splits the first large job by hand, runs its parts, and records what
/// merging them answered: honest, with a part lost, with a part twice.
#[derive(Default)]
struct MergeProbe(Mutex<Vec<(&'static str, bool)>>);

impl Executor for MergeProbe {
    fn execute(&self, job: &CompactionJob, ctx: &JobContext) -> tern::Result<CompactionOutput> {
        let parts = job.split(&ctx.fs, 3, 8 << 10)?;
        check_split(job, &parts);
        if parts.len() > 1 && self.0.lock().unwrap().is_empty() {
            let outs: Vec<CompactionOutput> = parts
                .iter()
                .map(|p| p.run(ctx))
                .collect::<tern::Result<_>>()?;
            let mut answers = self.0.lock().unwrap();
            answers.push(("honest", job.merge_parts(outs.clone()).is_ok()));
            let mut lost = outs.clone();
            lost.remove(1);
            answers.push(("lost", job.merge_parts(lost).is_ok()));
            let mut twice = outs.clone();
            twice.insert(1, outs[0].clone());
            answers.push(("twice", job.merge_parts(twice).is_ok()));
            for o in &outs {
                o.remove_files(&job.dir, &ctx.fs);
            }
        }
        job.run(ctx)
    }
}

/// Parts cover the job's range in order, each range rising strictly, and
/// each part keeps every input its range overlaps.
fn check_split(job: &CompactionJob, parts: &[CompactionJob]) {
    use tern::internals::format::internal_key::user_key;
    assert!(!parts.is_empty() && parts.len() <= 3);
    assert_eq!(parts[0].range.start, job.range.start);
    assert_eq!(parts.last().unwrap().range.end, job.range.end);
    for pair in parts.windows(2) {
        assert_eq!(
            pair[0].range.end, pair[1].range.start,
            "parts must be adjacent"
        );
    }
    for p in parts {
        if let (Some(s), Some(e)) = (&p.range.start, &p.range.end) {
            assert!(s < e, "an empty part {:?}", p.range);
        }
        for f in &job.inputs {
            let overlaps = p
                .range
                .overlaps(user_key(&f.smallest), user_key(&f.largest));
            let kept = p.inputs.iter().any(|g| g.number == f.number);
            assert_eq!(overlaps, kept, "input {} in part {:?}", f.number, p.range);
        }
    }
}

#[test]
fn merging_parts_refuses_a_lost_or_repeated_part() {
    let fs = MemFs::new();
    let probe = Arc::new(MergeProbe::default());
    let db = Db::open_with_executor(DIR, opts(fs.clone(), 1), Some(probe.clone())).unwrap();
    let (model, _, snap) = history(&db, 5);
    db.compact_range(None, None).unwrap();
    let answers = probe.0.lock().unwrap().clone();
    assert_eq!(
        answers,
        vec![("honest", true), ("lost", false), ("twice", false)]
    );
    drop(snap);
    assert_eq!(scan_at(&db, None), model.into_iter().collect::<Vec<_>>());
    db.close().unwrap();
    check(&fs);
}
