//! The run summary CI prints and checks.

use std::io::Write;

/// Adds `key value` to the run summary (`TERN_SUMMARY_FILE`, set by
/// `scripts/test.sh`); nothing without it. `scripts/ci_summary.sh` fails a
/// run whose expected counts are missing or zero.
pub fn ci_summary(key: &str, value: u64) {
    let Ok(path) = std::env::var("TERN_SUMMARY_FILE") else {
        return;
    };
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{key} {value}");
    }
}
