use super::crash::PAGE;
use super::*;

fn p(s: &str) -> &Path {
    Path::new(s)
}

fn setup() -> Arc<MemFs> {
    let fs = MemFs::new();
    fs.create_dir_all(p("db")).unwrap();
    fs.sync_dir(p("")).unwrap();
    fs
}

fn write(fs: &MemFs, path: &str, data: &[u8], sync: bool) -> Box<dyn WritableFile> {
    let mut f = fs.create(p(path)).unwrap();
    f.append(data).unwrap();
    f.flush().unwrap();
    if sync {
        f.sync().unwrap();
    }
    f
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn crash_modes_keep_what_they_promise() {
    let synced: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8 + 1).collect();
    let unsynced: Vec<u8> = (0..20000u32).map(|i| (i % 241) as u8 + 1).collect();
    let fs = setup();
    let mut f = write(&fs, "db/a", &synced, true);
    fs.sync_dir(p("db")).unwrap();
    f.append(&unsynced).unwrap();
    let _g = write(&fs, "db/not-in-dir", b"x", true);
    let all: Vec<u8> = [synced.clone(), unsynced.clone()].concat();
    let mut saw_hole = false;
    let mut saw_partial = false;
    for seed in 0..64 {
        for mode in CrashMode::ALL {
            let c = fs.crashed_copy_with(mode, seed);
            let got = c.read_all(p("db/a")).unwrap();
            assert!(got.len() >= synced.len() && got.len() <= all.len());
            assert_eq!(
                got[..synced.len()],
                synced[..],
                "{mode:?}: synced bytes kept"
            );
            if mode != CrashMode::UnsyncedEntries {
                assert_eq!(
                    c.exists(p("db/not-in-dir")),
                    mode == CrashMode::KeepAll,
                    "{mode:?}: unsynced directory entry"
                );
            }
            match mode {
                CrashMode::SyncedOnly => assert_eq!(got, synced),
                CrashMode::KeepAll => assert_eq!(got, all),
                CrashMode::UnsyncedPrefix | CrashMode::UnsyncedEntries => {
                    assert_eq!(got[..], all[..got.len()])
                }
                CrashMode::UnsyncedPages => {
                    for (i, (&b, &want)) in got.iter().zip(&all).enumerate() {
                        assert!(b == want || b == 0, "byte {i}");
                    }
                    saw_hole |= got.contains(&0);
                    saw_partial |= got.len() > synced.len() && got.len() < all.len();
                    // Whole pages survive or not.
                    assert!(
                        got.len() == all.len()
                            || got.len() % PAGE == 0
                            || got.len() == synced.len()
                    );
                }
            }
        }
    }
    assert!(saw_hole && saw_partial, "out-of-order pages were simulated");
}

#[test]
fn unsynced_entries_survive_as_any_subset() {
    let fs = setup();
    let _d = write(&fs, "db/d", b"d", true);
    fs.sync_dir(p("db")).unwrap();
    let _a = write(&fs, "db/a", b"a", true);
    fs.rename(p("db/a"), p("db/b")).unwrap();
    let _c = write(&fs, "db/c", b"c", true);
    fs.remove_file(p("db/d")).unwrap();
    // Create a, rename a -> b, create c, remove d: any subset, except
    // that the rename needs the create before it (a, b or neither).
    let mut outcomes = Vec::new();
    for first in [None, Some("a"), Some("b")] {
        for c in [false, true] {
            for d in [false, true] {
                let mut names: Vec<String> = first.iter().map(|s| s.to_string()).collect();
                names.extend(c.then(|| "c".to_string()));
                names.extend(d.then(|| "d".to_string()));
                outcomes.push(names);
            }
        }
    }
    let mut seen = vec![false; outcomes.len()];
    for seed in 0..400 {
        let c = fs.crashed_copy_with(CrashMode::UnsyncedEntries, seed);
        let names = sorted(c.list_dir(p("db")).unwrap());
        let i = outcomes
            .iter()
            .position(|want| names == *want)
            .unwrap_or_else(|| panic!("seed {seed}: {names:?} is no subset of the operations"));
        seen[i] = true;
        if names.contains(&"b".to_string()) {
            assert_eq!(
                c.read_all(p("db/b")).unwrap(),
                b"a",
                "renamed file keeps its node"
            );
        }
    }
    assert!(seen.iter().all(|&s| s), "every outcome occurs: {seen:?}");
    // A directory sync makes them all durable.
    fs.sync_dir(p("db")).unwrap();
    let c = fs.crashed_copy_with(CrashMode::UnsyncedEntries, 7);
    assert_eq!(sorted(c.list_dir(p("db")).unwrap()), ["b", "c"]);
}

#[test]
fn crash_drops_unsynced_bytes() {
    let fs = setup();
    let mut f = write(&fs, "db/a", b"hello", true);
    fs.sync_dir(p("db")).unwrap();
    f.append(b" world").unwrap();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"hello world");
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"hello");
    assert_eq!(fs.file_size(p("db/a")).unwrap(), 5);
}

#[test]
fn never_synced_file_is_empty_after_crash() {
    let fs = setup();
    let _f = write(&fs, "db/a", b"data", false);
    fs.sync_dir(p("db")).unwrap();
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"");
}

#[test]
fn synced_data_and_entry_survive() {
    let fs = setup();
    let mut f = write(&fs, "db/a", b"one", true);
    f.append(b"two").unwrap();
    f.sync().unwrap();
    fs.sync_dir(p("db")).unwrap();
    drop(f);
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"onetwo");
    // A second crash changes nothing.
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"onetwo");
}

#[test]
fn created_file_without_dir_sync_disappears() {
    let fs = setup();
    let _f = write(&fs, "db/a", b"data", true);
    assert!(fs.exists(p("db/a")));
    fs.crash();
    assert!(!fs.exists(p("db/a")));
    assert!(fs.list_dir(p("db")).unwrap().is_empty());
}

#[test]
fn rename_without_dir_sync_is_reverted() {
    let fs = setup();
    write(&fs, "db/tmp", b"new", true);
    write(&fs, "db/CURRENT", b"old", true);
    fs.sync_dir(p("db")).unwrap();
    fs.rename(p("db/tmp"), p("db/CURRENT")).unwrap();
    assert_eq!(fs.read_all(p("db/CURRENT")).unwrap(), b"new");
    assert!(!fs.exists(p("db/tmp")));
    fs.crash();
    assert_eq!(fs.read_all(p("db/CURRENT")).unwrap(), b"old");
    assert_eq!(fs.read_all(p("db/tmp")).unwrap(), b"new");
}

#[test]
fn rename_with_dir_sync_sticks() {
    let fs = setup();
    write(&fs, "db/tmp", b"new", true);
    write(&fs, "db/CURRENT", b"old", true);
    fs.sync_dir(p("db")).unwrap();
    fs.rename(p("db/tmp"), p("db/CURRENT")).unwrap();
    fs.sync_dir(p("db")).unwrap();
    fs.crash();
    assert_eq!(fs.read_all(p("db/CURRENT")).unwrap(), b"new");
    assert!(!fs.exists(p("db/tmp")));
    assert_eq!(sorted(fs.list_dir(p("db")).unwrap()), vec!["CURRENT"]);
}

#[test]
fn remove_needs_dir_sync() {
    let fs = setup();
    write(&fs, "db/a", b"a", true);
    write(&fs, "db/b", b"b", true);
    fs.sync_dir(p("db")).unwrap();
    fs.remove_file(p("db/a")).unwrap();
    fs.remove_file(p("db/b")).unwrap();
    assert!(!fs.exists(p("db/a")));
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"a");
    fs.remove_file(p("db/a")).unwrap();
    fs.sync_dir(p("db")).unwrap();
    fs.crash();
    assert!(!fs.exists(p("db/a")));
    assert!(fs.exists(p("db/b")));
}

#[test]
fn sync_dir_only_covers_that_directory() {
    let fs = setup();
    fs.create_dir_all(p("db/sub")).unwrap();
    write(&fs, "db/a", b"a", true);
    write(&fs, "db/sub/b", b"b", true);
    fs.sync_dir(p("db")).unwrap();
    fs.crash();
    assert!(fs.exists(p("db/a")));
    assert!(!fs.exists(p("db/sub/b")));
    assert_eq!(sorted(fs.list_dir(p("db")).unwrap()), vec!["a", "sub"]);
}

#[test]
fn new_directory_needs_its_parent_synced() {
    let fs = setup();
    fs.create_dir_all(p("db/new/deep")).unwrap();
    write(&fs, "db/new/deep/a", b"a", true);
    fs.sync_dir(p("db/new/deep")).unwrap();
    let lost = fs.crashed_copy();
    assert!(!lost.exists(p("db/new")) && !lost.exists(p("db/new/deep/a")));
    assert!(fs
        .crashed_copy_with(CrashMode::KeepAll, 0)
        .exists(p("db/new/deep/a")));
    fs.sync_dir(p("db")).unwrap();
    let half = fs.crashed_copy();
    assert!(half.exists(p("db/new")) && !half.exists(p("db/new/deep")));
    fs.sync_dir(p("db/new")).unwrap();
    fs.crash();
    assert_eq!(fs.read_all(p("db/new/deep/a")).unwrap(), b"a");
}

#[test]
fn create_dir_all_durable_syncs_every_new_parent() {
    let fs = MemFs::new();
    crate::io::create_dir_all_durable(fs.as_ref(), p("top/mid/leaf")).unwrap();
    crate::io::create_dir_all_durable(fs.as_ref(), p("/abs/leaf")).unwrap();
    fs.crash();
    assert!(fs.exists(p("top/mid/leaf")) && fs.exists(p("/abs/leaf")));
}

#[test]
fn stale_handles_cannot_touch_post_crash_state() {
    let fs = setup();
    let mut f = write(&fs, "db/a", b"kept", true);
    fs.sync_dir(p("db")).unwrap();
    fs.crash();
    f.append(b"stale").unwrap();
    f.sync().unwrap();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"kept");
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"kept");
}

#[test]
fn crashed_copy_leaves_original_alone() {
    let fs = setup();
    let mut f = write(&fs, "db/a", b"kept", true);
    fs.sync_dir(p("db")).unwrap();
    f.append(b"more").unwrap();
    let copy = fs.crashed_copy();
    assert_eq!(copy.read_all(p("db/a")).unwrap(), b"kept");
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"keptmore");
    f.sync().unwrap();
    fs.remove_file(p("db/a")).unwrap();
    assert_eq!(copy.read_all(p("db/a")).unwrap(), b"kept");
    assert_eq!(copy.list_dir(p("db")).unwrap(), vec!["a"]);
}

#[test]
fn recreate_truncates_but_old_contents_survive_crash_until_synced() {
    let fs = setup();
    write(&fs, "db/a", b"old", true);
    fs.sync_dir(p("db")).unwrap();
    let mut f = write(&fs, "db/a", b"x", false);
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"x");
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"old");
    drop(f);
    f = write(&fs, "db/a", b"y", true);
    drop(f);
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"y");
}

#[test]
fn readers_see_appended_data_and_keep_open_length() {
    let fs = setup();
    let mut f = write(&fs, "db/a", b"0123456789", false);
    let r = fs.open(p("db/a")).unwrap();
    assert_eq!(r.len(), 10);
    f.append(b"abc").unwrap();
    let mut buf = [0u8; 4];
    r.read_exact_at(6, &mut buf).unwrap();
    assert_eq!(&buf, b"6789");
    let err = r.read_exact_at(8, &mut buf).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    let err = r.read_exact_at(u64::MAX, &mut buf).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    let r2 = fs.open(p("db/a")).unwrap();
    assert_eq!(r2.len(), 13);
    r2.read_exact_at(9, &mut buf).unwrap();
    assert_eq!(&buf, b"9abc");
    assert_eq!(f.len(), 13);
}

#[test]
fn missing_paths_are_not_found() {
    let fs = setup();
    let kind = |r: io::Result<()>| r.unwrap_err().kind();
    assert_eq!(
        fs.open(p("db/x")).err().map(|e| e.kind()),
        Some(io::ErrorKind::NotFound)
    );
    assert_eq!(
        fs.read_all(p("db/x")).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(kind(fs.remove_file(p("db/x"))), io::ErrorKind::NotFound);
    assert_eq!(
        kind(fs.rename(p("db/x"), p("db/y"))),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        fs.list_dir(p("nope")).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(kind(fs.sync_dir(p("nope"))), io::ErrorKind::NotFound);
    assert_eq!(
        fs.create(p("nope/a")).err().map(|e| e.kind()),
        Some(io::ErrorKind::NotFound)
    );
    // Files at the top level need no directory.
    write(&fs, "top", b"t", false);
    assert!(fs.exists(p("top")));
}

#[test]
fn list_dir_returns_direct_children() {
    let fs = MemFs::new();
    fs.create_dir_all(p("/tmp/db/sub")).unwrap();
    write(&fs, "/tmp/db/000001.log", b"", false);
    write(&fs, "/tmp/db/sub/deep", b"", false);
    assert_eq!(
        sorted(fs.list_dir(p("/tmp/db")).unwrap()),
        vec!["000001.log", "sub"]
    );
    assert_eq!(fs.list_dir(p("/tmp/db/")).unwrap().len(), 2);
    assert_eq!(fs.list_dir(p("/tmp")).unwrap(), vec!["db"]);
    assert!(fs.exists(p("/tmp/db")));
    assert_eq!(
        fs.file_names(),
        vec![
            PathBuf::from("/tmp/db/000001.log"),
            PathBuf::from("/tmp/db/sub/deep")
        ]
    );
}

#[test]
fn lock_is_exclusive_until_dropped_or_crash() {
    let fs = setup();
    let l1 = fs.lock(p("db/LOCK")).unwrap();
    let err = fs.lock(p("db/LOCK")).err().map(|e| e.kind());
    assert_eq!(err, Some(io::ErrorKind::WouldBlock));
    assert!(fs.exists(p("db/LOCK")));
    let other = fs.lock(p("db/OTHER")).unwrap();
    drop(l1);
    let l2 = fs.lock(p("db/LOCK")).unwrap();
    fs.crash();
    let l3 = fs.lock(p("db/LOCK")).unwrap();
    // Dropping a pre-crash guard must not release the new holder.
    drop(l2);
    drop(other);
    assert!(fs.lock(p("db/LOCK")).is_err());
    drop(l3);
    fs.lock(p("db/LOCK")).unwrap();
}

#[test]
fn corrupt_and_truncate_hit_durable_contents() {
    let fs = setup();
    write(&fs, "db/a", b"abcdef", true);
    fs.sync_dir(p("db")).unwrap();
    fs.corrupt_byte(p("db/a"), 1, 0x01).unwrap();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"accdef");
    fs.truncate(p("db/a"), 4).unwrap();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"accd");
    fs.crash();
    assert_eq!(fs.read_all(p("db/a")).unwrap(), b"accd");
    assert!(fs.corrupt_byte(p("db/a"), 4, 1).is_err());
    assert!(fs.truncate(p("db/x"), 0).is_err());
}

#[test]
fn concurrent_appends_and_syncs() {
    let fs = setup();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let path = format!("db/{t}");
                let mut f = fs.create(p(&path)).unwrap();
                for i in 0..1000u32 {
                    f.append(&i.to_le_bytes()).unwrap();
                    if i % 10 == 0 {
                        f.sync().unwrap();
                    }
                }
                f.sync().unwrap();
                fs.sync_dir(p("db")).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    fs.crash();
    for t in 0..4 {
        assert_eq!(fs.file_size(p(&format!("db/{t}"))).unwrap(), 4000);
    }
}

#[test]
fn is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<MemFs>();
    let _: crate::io::FsRef = MemFs::new();
}

#[test]
fn a_sync_handle_makes_the_writers_bytes_survive_a_crash() {
    let fs = setup();
    let mut f = write(&fs, "db/a", b"first", true);
    fs.sync_dir(p("db")).unwrap();
    let handle = f.sync_handle().unwrap();
    f.append(b"-second").unwrap();
    f.flush().unwrap();
    let after_crash = || {
        fs.crashed_copy_with(CrashMode::SyncedOnly, 0)
            .read_all(p("db/a"))
            .unwrap()
    };
    handle.start_writeback().unwrap();
    assert_eq!(
        after_crash(),
        b"first",
        "starting writeback promises nothing"
    );
    handle.sync_data().unwrap();
    assert_eq!(
        after_crash(),
        b"first-second",
        "a sync through the handle covers what the writer appended"
    );
}
