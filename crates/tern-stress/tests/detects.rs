//! The harness itself: a store that disagrees with the expected state must
//! fail verification, and in-flight writes may go either way.
#![allow(clippy::unwrap_used)]

use tern_stress::expected::{ExpectedState, KeyState};
use tern_stress::{StressArgs, StressConfig};

fn args(dir: &std::path::Path) -> StressArgs {
    StressArgs {
        dir: Some(dir.to_path_buf()),
        seed: Some(3),
        keys: 500,
        groups: 20,
        threads: 3,
        ops: Some(3_000),
        duration: 30.0,
        verify_every: 0.2,
        ..Default::default()
    }
}

fn run(a: StressArgs) -> Result<tern_stress::runner::RunReport, String> {
    let cfg = StressConfig::resolve(a).unwrap();
    let mut out = Vec::new();
    let r = tern_stress::runner::run(&cfg, &mut out);
    eprintln!("{}", String::from_utf8_lossy(&out));
    r
}

#[test]
fn stress_run_then_verify_only_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let r = run(args(&dir)).unwrap();
    assert!(r.ops >= 3_000);
    let r = run(StressArgs {
        verify_only: true,
        ..args(&dir)
    })
    .unwrap();
    assert_eq!(r.pending_at_start, 0);
}

#[test]
fn verification_fails_when_an_acknowledged_write_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    run(args(&dir)).unwrap();
    {
        // Claim a newer acknowledged version of key 7 than the store holds.
        let exp = ExpectedState::open(&tmp.path().join("db.expected"), 520).unwrap();
        let st = exp.next_state(7, true);
        exp.resolve(7, st);
    }
    let err = run(StressArgs {
        verify_only: true,
        ..args(&dir)
    })
    .unwrap_err();
    assert!(err.contains("k00000007"), "{err}");
}

#[test]
fn an_in_flight_write_may_be_absent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    run(args(&dir)).unwrap();
    let exp_path = tmp.path().join("db.expected");
    {
        let exp = ExpectedState::open(&exp_path, 520).unwrap();
        let st = exp.next_state(9, true);
        exp.set_pending(9, st);
    }
    let r = run(StressArgs {
        verify_only: true,
        ..args(&dir)
    })
    .unwrap();
    assert_eq!((r.pending_at_start, r.pending_applied), (1, 0));
    let exp = ExpectedState::open(&exp_path, 520).unwrap();
    assert_eq!(exp.pending(9), None::<KeyState>);
}
