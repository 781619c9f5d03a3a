//! Cutting a failing history down to the operations that matter.

use std::time::{Duration, Instant};

use crate::op::Op;

/// How much [`shrink`] may spend: candidate runs, and optionally time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Candidates executed at most.
    pub runs: usize,
    /// Wall-clock time at most (a candidate already running finishes).
    pub time: Option<Duration>,
}

/// What kind of failure `message` reports, without the numbers and
/// parenthesized context (steps, seeds, operations) that change as a
/// history shrinks: a shrink keeps a candidate only if it fails the same
/// way, so it cannot drift to a different bug.
pub(crate) fn failure_signature(message: &str) -> String {
    let mut out = String::new();
    let mut depth = 0u32;
    for c in message.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ if depth > 0 || c.is_ascii_digit() => {}
            _ => out.push(c),
        }
    }
    let words: Vec<&str> = out.split_whitespace().collect();
    words.join(" ").chars().take(120).collect()
}

/// What [`shrink`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShrinkReport {
    /// Operations before.
    pub from: usize,
    /// Operations after.
    pub to: usize,
    /// Candidate histories executed.
    pub runs: usize,
    /// True when the budget (runs or time) ran out before no smaller
    /// candidate failed.
    pub out_of_budget: bool,
}

/// Shrinks `ops`, a history for which `fails` returns true, to a shorter or
/// simpler one for which it still does, executing at most `budget.runs`
/// candidates and spending at most `budget.time`.
///
/// First whole chunks are removed, halving the chunk size down to one
/// operation (delta debugging); then each remaining operation is replaced
/// by its [`Op::simpler`] forms (fewer batch entries, no sync, unbounded
/// reads, lighter recoveries). Executors must accept any
/// subsequence: snapshot indices are taken modulo the snapshots held, and
/// keys are always in range.
pub fn shrink(
    mut ops: Vec<Op>,
    budget: Budget,
    mut fails: impl FnMut(&[Op]) -> bool,
) -> (Vec<Op>, ShrinkReport) {
    let from = ops.len();
    let mut runs = 0;
    let deadline = budget.time.map(|t| Instant::now() + t);
    let mut try_it = |candidate: &[Op], runs: &mut usize| -> Option<bool> {
        if *runs >= budget.runs || deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        *runs += 1;
        Some(fails(candidate))
    };
    let mut out_of_budget = false;
    'outer: loop {
        let before = ops.len();
        let mut chunk = ops.len().div_ceil(2).max(1);
        loop {
            let mut i = 0;
            while i < ops.len() && ops.len() > 1 {
                let end = (i + chunk).min(ops.len());
                let mut candidate = ops[..i].to_vec();
                candidate.extend_from_slice(&ops[end..]);
                match try_it(&candidate, &mut runs) {
                    None => {
                        out_of_budget = true;
                        break 'outer;
                    }
                    Some(true) => ops = candidate,
                    Some(false) => i += chunk,
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
        if ops.len() == before {
            break;
        }
    }
    if !out_of_budget {
        'simplify: for i in 0..ops.len() {
            let mut progress = true;
            while progress {
                progress = false;
                for simpler in ops[i].simpler() {
                    let mut candidate = ops.clone();
                    candidate[i] = simpler;
                    match try_it(&candidate, &mut runs) {
                        None => {
                            out_of_budget = true;
                            break 'simplify;
                        }
                        Some(true) => {
                            ops = candidate;
                            progress = true;
                            break;
                        }
                        Some(false) => {}
                    }
                }
            }
        }
    }
    let to = ops.len();
    (
        ops,
        ShrinkReport {
            from,
            to,
            runs,
            out_of_budget,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{Entry, Target};
    use crate::{Generator, Profile};

    fn writes_key(op: &Op, key: u32) -> bool {
        matches!(op, Op::Write { entries, .. }
            if entries.iter().any(|e| e.target == Target::Key(key) && e.put))
    }

    #[test]
    fn shrinks_to_the_operations_that_make_it_fail() {
        // "Fails" when key 3 is written and later a flush and then a read
        // of key 3 follow: three operations among thousands.
        let fails = |ops: &[Op]| {
            let w = ops.iter().position(|o| writes_key(o, 3));
            let f = w.and_then(|w| ops[w..].iter().position(|o| *o == Op::Flush).map(|f| w + f));
            f.is_some_and(|f| ops[f..].contains(&Op::Get { key: 3 }))
        };
        let mut p = Profile::model(5, 5);
        p.keys = 10;
        let ops = Generator::new(p, 9).take(3000);
        let generated = ops.len();
        assert!(fails(&ops));
        let budget = Budget {
            runs: 10_000,
            time: None,
        };
        let (small, report) = shrink(ops, budget, fails);
        assert!(fails(&small));
        assert!(!report.out_of_budget);
        assert_eq!(small.len(), 3, "{small:?}");
        assert_eq!(
            small[0],
            Op::Write {
                entries: vec![Entry {
                    target: Target::Key(3),
                    put: true
                }],
                sync: false
            },
            "the batch is cut to its one entry that matters, unsynced"
        );
        assert_eq!(&small[1..], &[Op::Flush, Op::Get { key: 3 }]);
        assert_eq!(report.from, generated);
    }

    #[test]
    fn failure_signatures_ignore_steps_and_operations() {
        let a = failure_signature(
            "step 12 (crash mode=3 seed=99 no_wal=0): state after crash matches none of the 3 states (vs latest: missing [[1]], extra [])",
        );
        let b = failure_signature(
            "step 2 (crash mode=0 seed=7 no_wal=0): state after crash matches none of the 1 states (vs latest: missing [], extra [[2]])",
        );
        assert_eq!(a, b);
        assert_eq!(a, "step : state after crash matches none of the states");
        assert_ne!(a, failure_signature("step 2 (get key=1): get"));
    }

    #[test]
    fn the_budget_bounds_the_runs() {
        let ops = Generator::new(Profile::model(5, 5), 1).take(1000);
        let mut runs = 0;
        let budget = Budget {
            runs: 25,
            time: None,
        };
        let (small, report) = shrink(ops.clone(), budget, |c| {
            runs += 1;
            c.len() > 10
        });
        assert_eq!(runs, 25);
        assert!(report.out_of_budget && small.len() > 10 && small.len() < ops.len());
        let no_time = Budget {
            runs: 1000,
            time: Some(Duration::ZERO),
        };
        let (same, report) = shrink(ops.clone(), no_time, |_| true);
        assert!(report.out_of_budget && report.runs == 0 && same == ops);
    }
}
