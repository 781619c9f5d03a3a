//! Runs the built `tern` binary against real stores.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tern::{Db, Options, WriteBatch, WriteOptions};

fn tern(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A closed store with tables in more than one level and a key holding a
/// non-printable byte.
fn make_store(dir: &Path) {
    let opts = Options {
        settings: tern::Settings {
            write_buffer_size: 32 << 10,
            target_file_size: 16 << 10,
            max_bytes_for_level_base: 64 << 10,
            ..tern::Settings::default()
        },
        ..Options::default()
    };
    let db = Db::open(dir, opts).unwrap();
    for i in 0..3000u32 {
        db.put(format!("key{i:06}").as_bytes(), &[b'v'; 40])
            .unwrap();
    }
    db.compact_range(None, None).unwrap();
    let mut b = WriteBatch::new();
    b.put(b"bin\x01key", b"value\n").delete(b"key000003");
    db.write(b, WriteOptions::synced()).unwrap();
    db.close().unwrap();
}

fn tables(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    v.sort();
    v
}

#[test]
fn help_teaches_each_command() {
    let o = tern(&["--help"]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("inspect") && t.contains("check") && t.contains("Examples"),
        "{t}"
    );
    for cmd in ["inspect", "check"] {
        let o = tern(&[cmd, "--help"]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            text(&o).contains(&format!("tern {cmd} /var/lib/tern/db")),
            "{}",
            text(&o)
        );
    }
}

#[test]
fn inspect_shows_summary_table_wal_and_manifest() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    let d = dir.path().to_str().unwrap();

    let o = tern(&["inspect", d]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in [
        "manifest",
        "log number",
        "next file",
        "last sequence",
        "L0",
        "key000000",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }

    let first = tables(dir.path()).remove(0);
    let o = tern(&[
        "inspect",
        d,
        "--sst",
        first.to_str().unwrap(),
        "--limit",
        "3",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("entries") && t.contains("more entries"), "{t}");
    assert_eq!(t.lines().filter(|l| l.contains(" len=")).count(), 3, "{t}");

    let o = tern(&["inspect", d, "--manifest"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("edit at offset") && t.contains("add    L"),
        "{t}"
    );
}

#[test]
fn inspect_wal_escapes_keys() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A WAL that was never flushed: copy the live one while the store is
    // open (the batch is synced, so the copy holds it).
    let store = d.join("store");
    let db = Db::open(&store, Options::default()).unwrap();
    let mut b = WriteBatch::new();
    b.put(b"bin\x01key", b"v").delete(b"old");
    db.write(b, WriteOptions::synced()).unwrap();
    // The one holding the batch (the store may have an empty one ready for
    // its next memtable switch).
    let wal = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    std::fs::copy(&wal, d.join("000007.log")).unwrap();
    drop(db);
    let o = tern(&["inspect", d.to_str().unwrap(), "--wal", "7"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("count 2"), "{t}");
    assert!(t.contains("bin\\x01key"), "{t}");
    assert!(t.contains("delete  old"), "{t}");
}

#[test]
fn check_passes_a_good_store_and_names_damage() {
    let dir = tempfile::tempdir().unwrap();
    make_store(dir.path());
    let d = dir.path().to_str().unwrap();
    let o = tern(&["check", d]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("OK: 0 problems"), "{}", text(&o));

    // Flip a byte in the middle of the largest table: inside a data block.
    let victim = tables(dir.path())
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut data = std::fs::read(&victim).unwrap();
    let mid = data.len() / 3;
    data[mid] ^= 0x55;
    std::fs::write(&victim, &data).unwrap();

    let o = tern(&["check", d]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    let line = t
        .lines()
        .find(|l| l.starts_with(victim.to_str().unwrap()))
        .unwrap_or_else(|| panic!("no line names {}:\n{t}", victim.display()));
    let offset: u64 = line
        .split(": offset ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(offset <= mid as u64 && mid as u64 - offset < 8192, "{line}");
    assert!(t.contains("CORRUPT: 1 problem"), "{t}");

    let o = tern(&["check", "--quiet", d]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!text(&o).contains("warning:"));
}

#[test]
fn failures_exit_2_with_a_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for args in [
        vec!["check", d],
        vec!["inspect", d],
        vec!["inspect", d, "--sst", "99"],
        vec!["check", "/nonexistent/tern/store"],
    ] {
        let o = tern(&args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.starts_with("error: "), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{args:?}: {t}");
    }
    let o = tern(&["inspect", d, "--sst", "1", "--wal", "2"]);
    assert_eq!(o.status.code(), Some(2));
}

/// A closed store whose values all live in blob files, with a GC pass
/// behind it (so lineage exists).
fn make_blob_store(dir: &Path) {
    let opts = Options {
        settings: tern::Settings {
            blob_threshold: Some(0),
            enable_gc: false,
            write_buffer_size: 1 << 20,
            ..tern::Settings::default()
        },
        ..Options::default()
    };
    let db = Db::open(dir, opts).unwrap();
    for i in 0..500u32 {
        db.put(format!("key{i:06}").as_bytes(), &[b'v'; 50])
            .unwrap();
    }
    db.flush().unwrap();
    for i in 0..400u32 {
        db.put(format!("key{i:06}").as_bytes(), b"second\x01value")
            .unwrap();
    }
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    assert!(db.collect_garbage().unwrap() > 0);
    db.close().unwrap();
}

fn blob_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "blob"))
        .collect();
    v.sort();
    v
}

#[test]
fn inspect_and_check_blob_files() {
    let dir = tempfile::tempdir().unwrap();
    make_blob_store(dir.path());
    let d = dir.path().to_str().unwrap();

    let o = tern(&["inspect", d]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in [
        "blob file",
        "garbage",
        "ratio",
        "total 2",
        "lineage",
        " -> ",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }

    // The GC output: the newest blob file, with a lineage block.
    let gc = blob_files(dir.path()).pop().unwrap();
    let number = gc
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_start_matches('0');
    let o = tern(&["inspect", d, "--blob", number, "--limit", "2"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("records") && t.contains("index offset"), "{t}");
    assert!(t.contains("lineage        1 retired files"), "{t}");
    assert_eq!(t.lines().filter(|l| l.contains(" len=")).count(), 2, "{t}");
    assert!(t.contains("#0 offset 16: key000400 seq=401 len=50"), "{t}");
    assert!(t.contains("more records"), "{t}");
    let o = tern(&["inspect", d, "--blob", gc.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("more records"), "{}", text(&o));

    let o = tern(&["inspect", d, "--manifest"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("add    blob") && t.contains("retire blob"),
        "{t}"
    );

    let o = tern(&["check", d]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(
        t.contains("blob files (") && t.contains("OK: 0 problems"),
        "{t}"
    );

    // Flip a byte in the key of the GC output's first record.
    let mut data = std::fs::read(&gc).unwrap();
    data[16 + 12 + 2] ^= 0x20;
    std::fs::write(&gc, &data).unwrap();
    let o = tern(&["check", d]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.lines()
            .any(|l| l.starts_with(&format!("{}: offset 16: ", gc.display()))),
        "{t}"
    );
    let o = tern(&["inspect", d, "--blob", gc.to_str().unwrap(), "--limit", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("#0 offset 16: damaged"), "{}", text(&o));
}
