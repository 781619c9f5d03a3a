//! Data-driven tests of the compaction picker: `testdata/picker/*`.
//!
//! Directives: `define` sets the version (its input, in the language of
//! `version::script`) and the options (`base=`, `multiplier=`,
//! `l0_trigger=`, `dynamic=`), printing level targets and scores; `pick`
//! prints the compaction the picker chooses (`pointer=KEY` with
//! `pointer_level=N` sets a round-robin pointer); `range level=N lo= hi=` prints a manual
//! compaction's plan. Regenerate with `REWRITE=1 cargo test -p tern
//! datadriven`.

use std::fmt::Write as _;

use super::picker::{pick, plan_range, CompactionPlan, PickerInput};
use crate::format::internal_key::{make_internal_key, user_key, ValueKind};
use crate::options::{Options, NUM_LEVELS};
use crate::version::{script, LevelTargets, Version};

fn arg<'a>(case: &'a datadriven::TestCase, key: &str) -> Option<&'a str> {
    case.args
        .get(key)
        .and_then(|v| v.first())
        .map(String::as_str)
}

/// A score; a level above the base level that still holds data scores
/// the maximum, so it drains first.
fn score(s: f64) -> String {
    if s == f64::MAX {
        "max".to_string()
    } else {
        format!("{s:.2}")
    }
}

fn plan_line(plan: Option<CompactionPlan>) -> String {
    let Some(p) = plan else {
        return "none\n".to_string();
    };
    let nums = |fs: &[crate::version::FileRef]| {
        fs.iter()
            .map(|f| f.number.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut s = format!(
        "L{} -> L{}: inputs {}",
        p.level,
        p.output_level,
        nums(&p.inputs)
    );
    if !p.output_level_inputs.is_empty() {
        let _ = write!(s, " + {}", nums(&p.output_level_inputs));
    }
    let _ = writeln!(
        s,
        " score={} trivial_move={}",
        score(p.score),
        p.trivial_move
    );
    s
}

#[test]
fn compaction_picker() {
    datadriven::walk("testdata/picker", |f| {
        let mut v = Version::default();
        let mut opts = Options::default();
        f.run(|case| -> String {
            let num = |key: &str, default: u64| {
                arg(case, key).map_or(default, |s| {
                    s.parse()
                        .unwrap_or_else(|_| panic!("{key}={s}: not a whole number"))
                })
            };
            match case.directive.as_str() {
                "define" => {
                    v = match script::version(&case.input) {
                        Ok(v) => v,
                        Err(e) => return format!("parse error: {e}\n"),
                    };
                    opts = Options {
                        settings: crate::Settings {
                            max_bytes_for_level_base: num("base", 10_000),
                            max_bytes_for_level_multiplier: num("multiplier", 10),
                            level0_file_num_compaction_trigger: num("l0_trigger", 4) as usize,
                            dynamic_level_bytes: arg(case, "dynamic") != Some("false"),
                            ..crate::Settings::default()
                        },
                        ..Options::default()
                    };
                    let t = LevelTargets::compute(&v, &opts);
                    let scores = t.scores(&v, &opts);
                    let mut out = script::shape(&v);
                    let _ = writeln!(out, "base level: L{}", t.base_level);
                    for (l, files) in v.levels.iter().enumerate().skip(1) {
                        if t.target_bytes[l] > 0 || !files.is_empty() {
                            let _ = writeln!(
                                out,
                                "L{l}: {} bytes, target {}, score {}",
                                v.level_bytes(l),
                                t.target_bytes[l],
                                score(scores[l])
                            );
                        }
                    }
                    let _ = writeln!(out, "L0 score {}", score(scores[0]));
                    out
                }
                "pick" => {
                    let mut pointers: [Vec<u8>; NUM_LEVELS] = Default::default();
                    if let Some(k) = arg(case, "pointer") {
                        let l = num("pointer_level", 1) as usize;
                        let Some(slot) = pointers.get_mut(l) else {
                            return format!("no level {l}\n");
                        };
                        // The engine keeps the largest key of the last file
                        // compacted: that file's, when one ends at `k`.
                        *slot = v.levels[l]
                            .iter()
                            .find(|f| user_key(&f.largest) == k.as_bytes())
                            .map_or_else(
                                || make_internal_key(k.as_bytes(), 0, ValueKind::Delete),
                                |f| f.largest.clone(),
                            );
                    }
                    plan_line(pick(&PickerInput {
                        version: &v,
                        opts: &opts,
                        compact_pointers: &pointers,
                    }))
                }
                "range" => {
                    let level = num("level", 0) as usize;
                    let lo = arg(case, "lo").map(str::as_bytes);
                    let hi = arg(case, "hi").map(str::as_bytes);
                    plan_line(plan_range(&v, &opts, level, lo, hi))
                }
                other => format!("unknown directive {other}\n"),
            }
        })
    });
}
