//! Short kill -9 crash loops of `tern stress`: in both sync modes, and
//! with compactions and GC offloaded to workers. After every SIGKILL the
//! store must pass `tern check` and hold every acknowledged write (plus or
//! minus the writes in flight). `TERN_CRASH_KILLS=<n>` sets the kills per
//! loop (default 10, 8 with offload).
#![allow(clippy::unwrap_used)]

use std::process::Command;

/// Runs `tern stress --crash-loop` with `flags` on a fresh store; returns
/// its output, which must end in a passed loop.
fn run_loop(default_kills: &str, flags: &[&str]) -> String {
    let mut args = vec!["--keys", "5000", "--groups", "200", "--threads", "3"];
    args.extend_from_slice(flags);
    run_stress(default_kills, &args)
}

/// Runs `tern stress --dir <fresh> --crash-loop <kills> <args>` and checks
/// that its loop passed; returns its output.
fn run_stress(default_kills: &str, args: &[&str]) -> String {
    let kills = std::env::var("TERN_CRASH_KILLS").unwrap_or_else(|_| default_kills.into());
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .arg("stress")
        .arg("--dir")
        .arg(tmp.path().join("db"))
        .args(["--crash-loop", &kills])
        .args(args)
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
    text
}

/// The number just before `marker` in the last line that has it.
fn number_before(text: &str, marker: &str) -> u64 {
    text.lines()
        .rfind(|l| l.contains(marker))
        .and_then(|l| {
            let before = l.split(marker).next()?.rsplit([' ', '(']).next()?;
            before.parse().ok()
        })
        .unwrap_or_else(|| panic!("no number before {marker:?} in:\n{text}"))
}

fn crash_loop(sync: bool) {
    let text = run_loop(
        "10",
        &[
            "--sync",
            &sync.to_string(),
            "--min-run-ms",
            "150",
            "--max-run-ms",
            "900",
        ],
    );
    tern_stress::ci_summary(
        &format!("crash_loop_kills_sync_{sync}"),
        number_before(&text, " kills,"),
    );
    // Printed, not required: a kill lands mid-batch about once in seven,
    // so a short loop can catch none.
    tern_stress::ci_summary(
        "crash_loop_batches_in_flight",
        number_before(&text, " in-flight batches whole"),
    );
}

#[test]
fn crash_loop_sync_true() {
    crash_loop(true);
}

#[test]
fn crash_loop_sync_false() {
    crash_loop(false);
}

/// The loop with compactions and GC on two `tern worker`s (local fallback
/// off): every store killed with jobs in flight must come back whole,
/// whatever the workers deliver after the kill.
#[test]
fn crash_loop_with_offloaded_jobs_in_flight() {
    let text = run_loop(
        "8",
        &[
            "--offload",
            "--sync",
            "true",
            "--min-run-ms",
            "300",
            "--max-run-ms",
            "1200",
            // Small memtables and every value separated: many flushes,
            // compactions and GC jobs per run.
            "--write-buffer-size",
            "65536",
            "--l0-trigger",
            "2",
            "--blob-threshold",
            "0",
            "--gc",
            "on",
            "--gc-ratio",
            "0.2",
        ],
    );
    let offloaded = number_before(&text, " offloaded jobs");
    let in_flight = number_before(&text, " kills with jobs in flight");
    assert!(offloaded > 0, "no job ran on a worker:\n{text}");
    assert!(
        in_flight > 0,
        "no kill found a job on a worker, so the loop tested nothing offload-specific:\n{text}"
    );
    tern_stress::ci_summary("crash_loop_offload_kills_with_jobs_in_flight", in_flight);
}

/// The hash engine's loop: each kill is followed by a check that every
/// thread's writes come back as a prefix of its operations covering the
/// last checkpoint the child reported.
#[test]
fn hash_engine_crash_loop() {
    let text = run_stress(
        "10",
        &[
            "--engine",
            "hash",
            "--keys",
            "300",
            "--threads",
            "3",
            "--min-run-ms",
            "150",
            "--max-run-ms",
            "700",
        ],
    );
    assert!(text.contains("hash crash loop passed"), "{text}");
    tern_stress::ci_summary("hash_crash_loop_kills", number_before(&text, " kills,"));
    assert!(number_before(&text, " checkpoints,") > 0, "{text}");
}
