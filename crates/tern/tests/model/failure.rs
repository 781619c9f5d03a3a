//! What happens when a history fails: it is written to a file, shrunk to
//! the operations that still make it fail, and the shrunk one written
//! beside it, each with the command that replays it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tern_ops::{Budget, History, SaveTo};

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

fn replay_line(path: &Path) -> String {
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
/// and three minutes) and saves the result.
///
/// Candidates panic by design, so the panic hook is silenced while they
/// run; that also silences other tests of this binary failing meanwhile
/// (their failure still counts, only the message is lost).
pub fn save_and_shrink(h: &History, name: &str, message: &str) {
    let budget = Budget {
        runs: env_num("TERN_SHRINK_RUNS").unwrap_or(400),
        time: Some(Duration::from_secs(180)),
    };
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let advice = format!(
        "from {name}\nto keep it as a regression, copy it to \
         crates/tern/tests/regressions/<what-it-catches>.history"
    );
    let to = SaveTo {
        dir: &histories_dir(),
        stem: &slug(name),
        replay: &replay_line,
        advice: &advice,
    };
    let out = tern_ops::save_and_shrink(h, message, &to, budget, |candidate| {
        let mut log = Vec::new();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            execute(candidate, &mut log)
        }))
        .map_err(|e| panic_message(e.as_ref()))
    });
    std::panic::set_hook(hook);
    eprintln!("{out}");
}
