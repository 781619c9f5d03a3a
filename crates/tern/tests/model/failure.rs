//! What happens when a history fails: it is written to a file, shrunk to
//! the operations that still make it fail, and the shrunk one written
//! beside it, each with the command that replays it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tern_ops::{failure_signature, shrink, History};

use crate::env_num;
use crate::executor::execute;

/// Where failing histories go: `target/tmp/model-histories/`.
fn histories_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("model-histories")
}

/// A file name from a run's name (`seed 7 (…)` → `seed-7`).
fn slug(name: &str) -> String {
    let head = name.split(" (").next().unwrap_or(name);
    let s: String = head
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s.trim_matches('-').chars().take(80).collect()
}

fn replay_line(path: &std::path::Path) -> String {
    format!(
        "replay: TERN_MODEL_REPLAY={} cargo test -p tern --test model model_based",
        path.display()
    )
}

/// The text of a panic.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "a panic without a message".to_string()
    }
}

/// Saves `h`, which just failed with `message`, shrinks it to a history
/// that fails the same way (at most `TERN_SHRINK_RUNS` runs, default 400,
/// and about three minutes) and saves the result.
///
/// Candidates panic by design, so the panic hook is silenced while they
/// run; that also silences other tests of this binary failing meanwhile
/// (their failure still counts, only the message is lost).
pub fn save_and_shrink(h: &History, name: &str, message: &str) {
    let dir = histories_dir();
    let path = dir.join(format!("{}.history", slug(name)));
    match h.write(&path, &format!("failed: {name}\n{}", replay_line(&path))) {
        Ok(()) => eprintln!(
            "history written to {}\n{}",
            path.display(),
            replay_line(&path)
        ),
        Err(e) => {
            eprintln!("{e}");
            return;
        }
    }
    let max_runs = env_num("TERN_SHRINK_RUNS").unwrap_or(400);
    if max_runs == 0 {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    let want = failure_signature(message);
    let mut timed_out = false;
    // Candidates panic by design; keep their messages off the output.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let (ops, report) = shrink(h.ops.clone(), max_runs, |ops| {
        if Instant::now() > deadline {
            timed_out = true;
            return false;
        }
        let candidate = History {
            ops: ops.to_vec(),
            ..h.clone()
        };
        let mut log = Vec::new();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            execute(&candidate, &mut log)
        })) {
            Ok(()) => false,
            Err(e) => failure_signature(&panic_message(e.as_ref())) == want,
        }
    });
    std::panic::set_hook(hook);
    let shrunk = History { ops, ..h.clone() };
    let out = dir.join(format!("{}.shrunk.history", slug(name)));
    let note = format!(
        "failed: {name}, shrunk from {} to {} operations in {} runs{}\n{}\n\
         to keep it as a regression, copy it to crates/tern/tests/regressions/<what-it-catches>.history",
        report.from,
        report.to,
        report.runs,
        if report.out_of_budget || timed_out { " (budget spent: may shrink further)" } else { "" },
        replay_line(&out)
    );
    match shrunk.write(&out, &note) {
        Ok(()) => eprintln!(
            "shrunk history ({} of {} operations) written to {}\n{}",
            report.to,
            report.from,
            out.display(),
            replay_line(&out)
        ),
        Err(e) => eprintln!("{e}"),
    }
}
