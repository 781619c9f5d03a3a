//! The text form: every operation reads back as written; bad lines are
//! refused with what is wrong.
use super::*;

#[test]
fn every_operation_reads_back_as_written() {
    let ops = [
        Op::Write {
            entries: vec![
                Entry {
                    target: Target::Key(12),
                    put: true,
                },
                Entry {
                    target: Target::Group(3),
                    put: false,
                },
            ],
            sync: true,
        },
        Op::Write {
            entries: vec![],
            sync: false,
        },
        Op::Get { key: 7 },
        Op::Scan {
            bounds: ScanBounds {
                lower: Some(1),
                upper: None,
                reverse: true,
            },
        },
        Op::Snapshot,
        Op::Release { index: 2 },
        Op::SnapshotRead {
            index: 1,
            key: 9,
            bounds: ScanBounds {
                lower: None,
                upper: Some(30),
                reverse: false,
            },
        },
        Op::GroupCheck { group: 4 },
        Op::SyncWal,
        Op::Flush,
        Op::Compact {
            range: Some((3, 9)),
        },
        Op::Compact { range: None },
        Op::Gc,
        Op::Fault {
            kind: 2,
            skip: 5,
            then: Recovery::Restart,
        },
        Op::Fault {
            kind: 0,
            skip: 0,
            then: Recovery::Crash {
                mode: 3,
                seed: u64::MAX,
            },
        },
        Op::Faults {
            seed: 11,
            per_million: 2000,
            torn: true,
        },
        Op::Reopen {
            no_wal: true,
            flip_dynamic: false,
        },
        Op::Crash {
            mode: 4,
            seed: 99,
            no_wal: false,
        },
    ];
    for op in ops {
        let text = op.to_string();
        assert_eq!(text.parse::<Op>(), Ok(op), "{text}");
    }
}

#[test]
fn bad_lines_name_what_is_wrong() {
    for (line, want) in [
        ("", "empty"),
        ("explode", "unknown operation"),
        ("get", "missing key="),
        ("get key=x", "not a number"),
        ("write sync=2 +k1", "expected 0 or 1"),
        ("write sync=0 +x1", "expected k<n> or g<n>"),
        (
            "fault kind=1 skip=0 then=later",
            "expected restart or crash",
        ),
        ("crash mode=300 seed=1 no_wal=0", "not a number in range"),
        ("flush now", "unexpected [\"now\"]"),
        ("get key=3 x=1", "unexpected [\"x=1\"]"),
        ("compact all from=1 to=2", "unexpected"),
        ("get key=03", "reads as `get key=3`"),
    ] {
        let err = line.parse::<Op>().expect_err(line);
        assert!(err.contains(want), "{line:?}: {err}");
    }
}

#[test]
fn snapshot_reads_simplify_to_unbounded_scans_like_scans() {
    let bounded = Op::SnapshotRead {
        index: 2,
        key: 5,
        bounds: ScanBounds {
            lower: Some(1),
            upper: None,
            reverse: true,
        },
    };
    assert_eq!(
        bounded.simpler(),
        [Op::SnapshotRead {
            index: 2,
            key: 5,
            bounds: ScanBounds {
                lower: None,
                upper: None,
                reverse: true,
            },
        }]
    );
    let unbounded = &bounded.simpler()[0];
    assert!(unbounded.simpler().is_empty());
}
