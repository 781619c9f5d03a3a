//! Chooses the next compaction from a version. Pure: no I/O, no locks.

use super::super::version::{file_overlaps, FileRef, LevelTargets, Version};
use crate::format::internal_key::{self, user_key};
use crate::options::{Options, NUM_LEVELS};

/// Borrowed state the picker reads.
pub struct PickerInput<'a> {
    /// The version to pick from.
    pub version: &'a Version,
    /// Store options.
    pub opts: &'a Options,
    /// Per level, the largest key of the last compaction (round robin).
    pub compact_pointers: &'a [Vec<u8>; NUM_LEVELS],
}

/// A chosen compaction.
#[derive(Debug, Clone)]
pub struct CompactionPlan {
    /// Level the inputs come from.
    pub level: usize,
    /// Level the outputs go to.
    pub output_level: usize,
    /// Files taken from `level`.
    pub inputs: Vec<FileRef>,
    /// Overlapping files taken from `output_level`.
    pub output_level_inputs: Vec<FileRef>,
    /// The single input can move down without being rewritten.
    pub trivial_move: bool,
    /// Score that triggered it (manual compactions: 0).
    pub score: f64,
}

impl CompactionPlan {
    fn new(
        v: &Version,
        level: usize,
        output_level: usize,
        inputs: Vec<FileRef>,
        score: f64,
    ) -> Self {
        let (lo, hi) = user_range(&inputs);
        let output_level_inputs = if output_level == level {
            Vec::new()
        } else {
            v.overlapping(output_level, lo.as_deref(), hi.as_deref())
        };
        let trivial_move =
            inputs.len() == 1 && output_level_inputs.is_empty() && output_level != level;
        CompactionPlan {
            level,
            output_level,
            inputs,
            output_level_inputs,
            trivial_move,
            score,
        }
    }

    /// Every input file.
    pub fn all_inputs(&self) -> impl Iterator<Item = &FileRef> {
        self.inputs.iter().chain(self.output_level_inputs.iter())
    }
}

/// Smallest and largest user key over `files`.
pub fn user_range(files: &[FileRef]) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let lo = files
        .iter()
        .map(|f| user_key(&f.smallest))
        .min()
        .map(<[u8]>::to_vec);
    let hi = files
        .iter()
        .map(|f| user_key(&f.largest))
        .max()
        .map(<[u8]>::to_vec);
    (lo, hi)
}

/// Where L0 compacts to: the base level, unless a shallower level still
/// holds data (after the dynamic base level moved down). L0 must never pass
/// a level with older data, or a newer version (or tombstone) would end up
/// below an older one.
pub fn l0_output_level(v: &Version, base_level: usize) -> usize {
    (1..base_level)
        .find(|&l| !v.levels[l].is_empty())
        .unwrap_or(base_level)
}

/// The compaction with the highest score `>= 1`, if any.
pub fn pick(input: &PickerInput<'_>) -> Option<CompactionPlan> {
    let v = input.version;
    let targets = LevelTargets::compute(v, input.opts);
    let scores = targets.scores(v, input.opts);
    let (level, score) = scores
        .iter()
        .copied()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    if score < 1.0 {
        return None;
    }
    if level == 0 {
        // All of L0: its files overlap, and taking a subset could push an
        // older version below a newer one.
        let inputs = v.levels[0].clone();
        let output = l0_output_level(v, targets.base_level);
        return Some(CompactionPlan::new(v, 0, output, inputs, score));
    }
    let files = &v.levels[level];
    let pointer = &input.compact_pointers[level];
    let file = files
        .iter()
        .find(|f| pointer.is_empty() || internal_key::compare(&f.largest, pointer).is_gt())
        .or_else(|| files.first())?
        .clone();
    Some(CompactionPlan::new(v, level, level + 1, vec![file], score))
}

/// For a store that is not writing: all of L0 into its output level, if
/// `hidden` bytes of blob garbage that L0's entries shadow
/// (`Stats::blob_hidden_garbage_bytes`) make it worth compacting before
/// L0's trigger. GC frees only garbage compaction has marked, so hidden
/// garbage can hold the blob files over the idle bound
/// (`gc::picker::idle_limit`) with nothing for GC to free. Revealing it
/// costs one L0 compaction: worth it once the hidden garbage is at least
/// the bytes that compaction writes. A writing store never does this: with
/// large values that was about one compaction of the whole base level per
/// flush, a fifth of the update throughput for no less disk
/// (`docs/engine.md`).
pub fn pick_reveal(v: &Version, opts: &Options, hidden: u64) -> Option<CompactionPlan> {
    // With GC off nothing frees what the compaction reveals: every flush
    // that hid more would compact L0 for nothing.
    let limit = crate::gc::picker::idle_limit(opts).filter(|_| opts.enable_gc)?;
    if hidden == 0 || v.levels[0].is_empty() || v.blob_space_excess(limit, hidden) == 0 {
        return None;
    }
    let output = l0_output_level(v, LevelTargets::compute(v, opts).base_level);
    let plan = CompactionPlan::new(v, 0, output, v.levels[0].clone(), 1.0);
    let cost: u64 = plan.all_inputs().map(|f| f.file_size).sum();
    (hidden >= cost).then_some(plan)
}

/// A manual compaction of `[lo, hi]` (None = unbounded) out of `level`, or
/// None when the level holds nothing in range.
pub fn plan_range(
    v: &Version,
    opts: &Options,
    level: usize,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
) -> Option<CompactionPlan> {
    if level >= NUM_LEVELS {
        return None;
    }
    // The last level is compacted in place: its files are rewritten to drop
    // what no snapshot needs and to point blob refs at their current files.
    if level == NUM_LEVELS - 1 {
        let inputs = v.overlapping(level, lo, hi);
        return (!inputs.is_empty()).then(|| CompactionPlan::new(v, level, level, inputs, 0.0));
    }
    let inputs = if level == 0 {
        let any = v.levels[0].iter().any(|f| file_overlaps(f, lo, hi));
        if any {
            v.levels[0].clone()
        } else {
            Vec::new()
        }
    } else {
        v.overlapping(level, lo, hi)
    };
    if inputs.is_empty() {
        return None;
    }
    let output_level = if level == 0 {
        l0_output_level(v, LevelTargets::compute(v, opts).base_level)
    } else {
        level + 1
    };
    let mut plan = CompactionPlan::new(v, level, output_level, inputs, 0.0);
    // A manual compaction rewrites, so tombstones and old versions go away.
    plan.trivial_move = plan.trivial_move && level != 0 && output_level + 1 < NUM_LEVELS;
    Some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::internal_key::{make_internal_key, ValueKind};
    use crate::version::FileMeta;
    use std::sync::Arc;

    fn file(n: u64, lo: &str, hi: &str, size: u64) -> FileRef {
        Arc::new(FileMeta {
            number: n,
            file_size: size,
            smallest: make_internal_key(lo.as_bytes(), n * 10, ValueKind::Value),
            largest: make_internal_key(hi.as_bytes(), n * 10 + 1, ValueKind::Value),
            largest_seq: n * 10 + 1,
            ..Default::default()
        })
    }

    #[test]
    fn l0_trigger_picks_all_l0_into_base() {
        let opts = Options::default();
        let mut v = Version::default();
        for i in 0..4 {
            v.levels[0].push(file(i + 1, "a", "m", 1000));
        }
        v.levels[6].push(file(9, "c", "d", 1000));
        v.levels[6].push(file(10, "x", "z", 1000));
        let ptrs: [Vec<u8>; NUM_LEVELS] = Default::default();
        let plan = pick(&PickerInput {
            version: &v,
            opts: &opts,
            compact_pointers: &ptrs,
        })
        .unwrap();
        assert_eq!(plan.level, 0);
        assert_eq!(plan.output_level, 6);
        assert_eq!(plan.inputs.len(), 4);
        assert_eq!(plan.output_level_inputs.len(), 1);
        assert!(!plan.trivial_move);
    }

    /// Regression: with the dynamic base level below a level that still
    /// holds older data, L0 went straight to the base level.
    #[test]
    fn l0_never_compacts_past_a_shallower_non_empty_level() {
        let opts = Options::default();
        let mut v = Version::default();
        for i in 0..4 {
            v.levels[0].push(file(i + 1, "a", "m", 1000));
        }
        v.levels[2].push(file(8, "a", "z", 1000));
        v.levels[6].push(file(9, "c", "d", 1000));
        assert_eq!(LevelTargets::compute(&v, &opts).base_level, 6);
        let plan = plan_range(&v, &opts, 0, None, None).unwrap();
        assert_eq!(plan.output_level, 2);
        assert_eq!(plan.output_level_inputs.len(), 1);
        let ptrs: [Vec<u8>; NUM_LEVELS] = Default::default();
        let input = PickerInput {
            version: &v,
            opts: &opts,
            compact_pointers: &ptrs,
        };
        let mut v0 = v.clone();
        // Only L0 over its trigger (L2 drained already): straight to the base.
        v0.levels[2].clear();
        let plan = pick(&PickerInput {
            version: &v0,
            ..input
        })
        .unwrap();
        assert_eq!((plan.level, plan.output_level), (0, 6));
        assert_eq!(l0_output_level(&v, 6), 2);
    }

    #[test]
    fn nothing_to_do_below_trigger_and_trivial_move() {
        let opts = Options::default();
        let mut v = Version::default();
        v.levels[0].push(file(1, "a", "b", 10));
        let ptrs: [Vec<u8>; NUM_LEVELS] = Default::default();
        assert!(pick(&PickerInput {
            version: &v,
            opts: &opts,
            compact_pointers: &ptrs,
        })
        .is_none());
        let plan = plan_range(&v, &opts, 0, None, None).unwrap();
        assert!(!plan.trivial_move, "manual compaction of L0 rewrites");
        v.levels[3].push(file(2, "a", "b", 10));
        let plan = plan_range(&v, &opts, 3, None, None).unwrap();
        assert!(plan.trivial_move);
    }

    /// L0 of two small files over one base-level file, and 100 KB of blob
    /// records of which `dead` are marked dead.
    fn separated_version(dead: u64) -> Version {
        let mut v = Version::default();
        v.levels[0].push(file(1, "a", "m", 1000));
        v.levels[0].push(file(2, "b", "n", 1000));
        v.levels[6].push(file(3, "a", "z", 10_000));
        let meta = crate::version::BlobMeta {
            number: 4,
            file_size: 100_000,
            record_count: 100,
            data_bytes: 100_000,
            run_keys: None,
        };
        v.blob_files.insert(
            4,
            Arc::new(crate::version::BlobFileState {
                meta,
                dead: Default::default(),
                dead_bytes: dead,
            }),
        );
        v
    }

    #[test]
    fn l0_compacts_early_when_the_garbage_it_hides_is_worth_revealing() {
        let ptrs: [Vec<u8>; NUM_LEVELS] = Default::default();
        let opts = Options::default();
        let v = separated_version(10_000);
        // Two L0 files under a trigger of four: nothing to do on its own,
        // however much garbage they hide (a writing store never reveals).
        let writing = pick(&PickerInput {
            version: &v,
            opts: &opts,
            compact_pointers: &ptrs,
        });
        assert!(writing.is_none());
        assert!(pick_reveal(&v, &opts, 0).is_none());
        // 20 KB hidden: 100 / (100 - 10 - 20) = 1.43 is over the 1.25 limit,
        // and revealing it writes 12 KB (L0 and the base file).
        let plan = pick_reveal(&v, &opts, 20_000).expect("L0 should compact");
        assert_eq!((plan.level, plan.output_level), (0, 6));
        assert_eq!((plan.inputs.len(), plan.output_level_inputs.len()), (2, 1));
        assert_eq!(plan.score, 1.0);
        // 11 KB hidden is over the limit too (1.27), but less than the
        // compaction would write: GC copies instead.
        assert!(pick_reveal(&v, &opts, 11_000).is_none());
        // Under the idle limit (1.1) with the hidden garbage counted:
        // nothing (100 / 95 = 1.05).
        assert!(pick_reveal(&separated_version(0), &opts, 5_000).is_none());
        // Over it, with no garbage marked: 100 / 85 = 1.18, under the
        // writing store's 1.25 but over the idle store's bound.
        assert!(pick_reveal(&separated_version(0), &opts, 15_000).is_some());
        // Without a limit hidden garbage never triggers a compaction.
        let unlimited = Options {
            settings: crate::Settings {
                gc_space_amp_limit: None,
                gc_idle_space_amp_limit: None,
                ..crate::Settings::default()
            },
            ..Options::default()
        };
        assert!(pick_reveal(&v, &unlimited, 20_000).is_none());
    }

    /// Regression: with GC off, the marked garbage never goes, so the store
    /// stays over the limit and every flush that hid more compacted L0
    /// early, though nothing would free what that revealed.
    #[test]
    fn l0_is_not_compacted_early_with_gc_off() {
        let opts = Options {
            settings: crate::Settings {
                enable_gc: false,
                ..crate::Settings::default()
            },
            ..Options::default()
        };
        // 100 / 70 = 1.43 from marked garbage alone, and 20 KB more hidden.
        let v = separated_version(30_000);
        let plan = pick_reveal(&v, &opts, 20_000);
        assert!(plan.is_none(), "{plan:?}");
    }
}
