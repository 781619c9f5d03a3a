//! A short kill -9 crash loop of `tern stress`, in both sync modes: after
//! every SIGKILL the store must pass `tern check` and hold every
//! acknowledged write (plus or minus the writes in flight).
//! `TERN_CRASH_KILLS=<n>` sets the kills per sync mode (default 10).
#![allow(clippy::unwrap_used)]

use std::process::Command;

fn crash_loop(sync: bool) {
    let kills = std::env::var("TERN_CRASH_KILLS").unwrap_or_else(|_| "10".into());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .arg("stress")
        .arg("--dir")
        .arg(&dir)
        .args(["--crash-loop", &kills, "--sync", &sync.to_string()])
        .args(["--keys", "5000", "--groups", "200", "--threads", "3"])
        .args(["--min-run-ms", "150", "--max-run-ms", "900"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "crash loop failed:\n{text}");
    assert!(text.contains("crash loop passed"), "{text}");
    // "crash-loop: N kills, ..." is the loop's last line.
    let kills: u64 = text
        .lines()
        .filter_map(|l| l.strip_prefix("crash-loop: "))
        .filter_map(|l| l.split(" kills,").next()?.parse().ok())
        .next_back()
        .unwrap_or(0);
    tern_stress::ci_summary(&format!("crash_loop_kills_sync_{sync}"), kills);
    let batches: u64 = text
        .lines()
        .filter(|l| l.starts_with("crash-loop: ") && l.ends_with(": OK"))
        .filter_map(|l| {
            l.split(" in-flight batches whole")
                .next()?
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
        .next_back()
        .unwrap_or(0);
    // Printed, not required: a kill lands mid-batch about once in seven,
    // so a short loop can catch none.
    tern_stress::ci_summary("crash_loop_batches_in_flight", batches);
}

#[test]
fn crash_loop_sync_true() {
    crash_loop(true);
}

#[test]
fn crash_loop_sync_false() {
    crash_loop(false);
}
