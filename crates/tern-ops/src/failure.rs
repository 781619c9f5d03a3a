//! What a harness does with a failed history: write it, shrink it to one
//! that fails the same way, and write that beside it, each with the line
//! that replays it.

use std::path::Path;

use crate::history::History;
use crate::shrink::{failure_signature, shrink, Budget};

/// Where a failed history goes and what its comments say.
pub struct SaveTo<'a> {
    /// The directory (created if missing).
    pub dir: &'a Path,
    /// The file name stem: `<stem>.history` and `<stem>.shrunk.history`.
    pub stem: &'a str,
    /// The command that replays a file.
    pub replay: &'a dyn Fn(&Path) -> String,
    /// Added to the shrunk file's comment (e.g. how to keep it).
    pub advice: &'a str,
}

/// Writes `h`, which failed with `error`, to `<dir>/<stem>.history`; then,
/// unless `budget.runs` is 0, shrinks it to a history that fails the same
/// way (the same message once numbers and parenthesized context are taken
/// out) and writes that to
/// `<dir>/<stem>.shrunk.history`. `run` executes a candidate (`Err` with
/// its failure message when it fails). Returns lines for the person: where
/// the files are and how to replay them (or why they could not be
/// written).
pub fn save_and_shrink(
    h: &History,
    error: &str,
    to: &SaveTo<'_>,
    budget: Budget,
    mut run: impl FnMut(&History) -> Result<(), String>,
) -> String {
    let (dir, stem, replay, advice) = (to.dir, to.stem, to.replay, to.advice);
    let path = dir.join(format!("{stem}.history"));
    if let Err(e) = h.write(&path, &format!("failed: {error}\n{}", replay(&path))) {
        return format!("could not save the history: {e}");
    }
    let mut out = format!("history written to {}; {}", path.display(), replay(&path));
    if budget.runs == 0 {
        return out;
    }
    let want = failure_signature(error);
    let (ops, report) = shrink(h.ops.clone(), budget, |ops| {
        let candidate = History {
            ops: ops.to_vec(),
            ..h.clone()
        };
        run(&candidate).is_err_and(|e| failure_signature(&e) == want)
    });
    let shrunk = History { ops, ..h.clone() };
    let spath = dir.join(format!("{stem}.shrunk.history"));
    let note = format!(
        "failed: {error}\nshrunk from {} to {} operations in {} runs{}\n{}{}",
        report.from,
        report.to,
        report.runs,
        if report.out_of_budget {
            " (budget spent: may shrink further)"
        } else {
            ""
        },
        replay(&spath),
        if advice.is_empty() {
            String::new()
        } else {
            format!("\n{advice}")
        }
    );
    match shrunk.write(&spath, &note) {
        Ok(()) => {
            out += &format!(
                "\nshrunk history ({} of {} operations) written to {}; {}",
                report.to,
                report.from,
                spath.display(),
                replay(&spath)
            );
        }
        Err(e) => out += &format!("\ncould not save the shrunk history: {e}"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::Op;
    use crate::{Generator, Profile};

    #[test]
    fn a_failure_is_saved_shrunk_and_replayable() {
        let dir = std::env::temp_dir().join(format!("tern-ops-failure-{}", std::process::id()));
        let h = History {
            harness: "model".into(),
            seed: 3,
            keys: 10,
            ops: Generator::new(Profile::model(5, 5), 3).take(300),
            ..History::default()
        };
        // "Fails" whenever a flush runs, with a message naming its step.
        let run = |c: &History| match c.ops.iter().position(|o| *o == Op::Flush) {
            Some(i) => Err(format!("step {i}: flush lost data")),
            None => Ok(()),
        };
        let error = run(&h).unwrap_err();
        let budget = Budget {
            runs: 500,
            time: None,
        };
        let replay = |p: &Path| format!("replay: X={}", p.display());
        let to = SaveTo {
            dir: &dir,
            stem: "seed-3",
            replay: &replay,
            advice: "keep it",
        };
        let out = save_and_shrink(&h, &error, &to, budget, run);
        assert!(
            out.contains("shrunk history (1 of 300 operations)"),
            "{out}"
        );
        assert_eq!(History::read(&dir.join("seed-3.history")).unwrap(), h);
        let shrunk = History::read(&dir.join("seed-3.shrunk.history")).unwrap();
        assert_eq!(shrunk.ops, vec![Op::Flush]);
        let text = std::fs::read_to_string(dir.join("seed-3.shrunk.history")).unwrap();
        assert!(
            text.contains("# keep it") && text.contains("# replay: X="),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
