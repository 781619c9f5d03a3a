use super::*;
use crate::io::MemFs;

fn p(s: &str) -> &Path {
    Path::new(s)
}

fn setup() -> (Arc<MemFs>, Arc<FaultFs>) {
    let mem = MemFs::new();
    mem.create_dir_all(p("db")).unwrap();
    mem.sync_dir(p("")).unwrap();
    let fs = FaultFs::new(mem.clone());
    (mem, fs)
}

fn is_injected(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Other && e.to_string().starts_with("injected fault")
}

#[test]
fn passes_through_without_faults() {
    let (mem, fs) = setup();
    let mut f = fs.create(p("db/a")).unwrap();
    f.append(b"abc").unwrap();
    f.sync().unwrap();
    assert_eq!(f.len(), 3);
    fs.sync_dir(p("db")).unwrap();
    let r = fs.open(p("db/a")).unwrap();
    let mut buf = [0u8; 3];
    r.read_exact_at(0, &mut buf).unwrap();
    assert_eq!(&buf, b"abc");
    fs.rename(p("db/a"), p("db/b")).unwrap();
    assert_eq!(fs.list_dir(p("db")).unwrap(), vec!["b"]);
    assert_eq!(mem.read_all(p("db/b")).unwrap(), b"abc");
    fs.remove_file(p("db/b")).unwrap();
    assert!(!fs.exists(p("db/b")));
    assert_eq!(fs.injected(), 0);
}

#[test]
fn fail_after_lets_n_pass_then_fails_until_clear() {
    let (mem, fs) = setup();
    let mut f = fs.create(p("db/a")).unwrap();
    fs.fail_after(FaultKind::Write, 2);
    f.append(b"1").unwrap();
    f.append(b"2").unwrap();
    let err = f.append(b"3").unwrap_err();
    assert!(is_injected(&err));
    assert_eq!(err.to_string(), "injected fault: write on db/a");
    assert!(f.append(b"4").is_err());
    assert!(f.flush().is_err());
    // Other kinds are unaffected.
    f.sync().unwrap();
    assert_eq!(mem.read_all(p("db/a")).unwrap(), b"12");
    assert_eq!(fs.injected(), 3);
    fs.clear();
    f.append(b"5").unwrap();
    assert_eq!(mem.read_all(p("db/a")).unwrap(), b"125");
    assert_eq!(fs.injected(), 3);
}

#[test]
fn once_fails_a_single_operation() {
    let (_mem, fs) = setup();
    let mut f = fs.create(p("db/a")).unwrap();
    fs.inject(FaultKind::Sync, 1, false);
    f.sync().unwrap();
    assert!(is_injected(&f.sync().unwrap_err()));
    f.sync().unwrap();
    f.sync().unwrap();
    fs.fail_once(FaultKind::Sync);
    assert!(f.sync().is_err());
    f.sync().unwrap();
    assert_eq!(fs.injected(), 2);
}

#[test]
fn failed_sync_leaves_data_unsynced() {
    let (mem, fs) = setup();
    let mut f = fs.create(p("db/a")).unwrap();
    fs.sync_dir(p("db")).unwrap();
    f.append(b"data").unwrap();
    fs.fail_once(FaultKind::Sync);
    assert!(f.sync().is_err());
    mem.crash();
    assert_eq!(mem.read_all(p("db/a")).unwrap(), b"");
}

#[test]
fn torn_failures_leave_partial_effects() {
    let (mem, fs) = setup();
    fs.set_torn_failures(3);
    let (mut partial, mut synced, mut renamed) = (false, false, false);
    for i in 0..64 {
        let name = format!("db/f{i}");
        let mut f = fs.create(p(&name)).unwrap();
        fs.sync_dir(p("db")).unwrap();
        f.append(b"head").unwrap();
        fs.fail_once(FaultKind::Write);
        assert!(f.append(b"0123456789").is_err());
        let now = mem.read_all(p(&name)).unwrap();
        assert!(now.starts_with(b"head") && b"head0123456789".starts_with(&now));
        partial |= now.len() > 4 && now.len() < 14;
        fs.fail_once(FaultKind::Sync);
        assert!(f.sync().is_err());
        synced |= mem.crashed_copy().read_all(p(&name)).unwrap() == now;
        fs.fail_once(FaultKind::Rename);
        let to = format!("db/g{i}");
        assert!(fs.rename(p(&name), p(&to)).is_err());
        renamed |= mem.exists(p(&to));
        assert_ne!(mem.exists(p(&to)), mem.exists(p(&name)));
    }
    assert!(partial && synced && renamed, "failures left traces");
}

#[test]
fn metadata_operations_fail() {
    let (mem, fs) = setup();
    fs.fail_once(FaultKind::Create);
    assert!(fs.create(p("db/a")).is_err());
    assert!(!mem.exists(p("db/a")));
    drop(fs.create(p("db/a")).unwrap());

    fs.fail_once(FaultKind::Rename);
    let err = fs.rename(p("db/a"), p("db/b")).unwrap_err();
    assert_eq!(err.to_string(), "injected fault: rename on db/a -> db/b");
    assert!(mem.exists(p("db/a")));

    fs.fail_once(FaultKind::SyncDir);
    assert!(fs.sync_dir(p("db")).is_err());
    mem.crash();
    assert!(!mem.exists(p("db/a")));

    drop(fs.create(p("db/a")).unwrap());
    fs.fail_once(FaultKind::Remove);
    assert!(fs.remove_file(p("db/a")).is_err());
    assert!(mem.exists(p("db/a")));

    fs.fail_once(FaultKind::Read);
    assert!(fs.read_all(p("db/a")).is_err());
    fs.read_all(p("db/a")).unwrap();
    assert_eq!(fs.injected(), 5);
}

#[test]
fn reads_through_open_handles_fail() {
    let (_mem, fs) = setup();
    let mut f = fs.create(p("db/a")).unwrap();
    f.append(b"abcd").unwrap();
    let r = fs.open(p("db/a")).unwrap();
    let mut buf = [0u8; 2];
    fs.fail_after(FaultKind::Read, 1);
    r.read_exact_at(0, &mut buf).unwrap();
    assert!(is_injected(&r.read_exact_at(2, &mut buf).unwrap_err()));
    assert!(fs.open(p("db/a")).is_err());
    fs.clear();
    r.read_exact_at(2, &mut buf).unwrap();
    assert_eq!(&buf, b"cd");
}

#[test]
fn path_filter_limits_faults() {
    let (_mem, fs) = setup();
    let mut log = fs.create(p("db/000001.log")).unwrap();
    let mut sst = fs.create(p("db/000002.sst")).unwrap();
    fs.only_paths_containing(".log");
    fs.fail_after(FaultKind::Write, 1);
    sst.append(b"x").unwrap();
    log.append(b"x").unwrap();
    sst.append(b"x").unwrap();
    assert!(log.append(b"x").is_err());
    sst.append(b"x").unwrap();
    fs.clear();
    log.append(b"x").unwrap();
}

fn random_pattern(seed: u64) -> Vec<bool> {
    let (_mem, fs) = setup();
    let mut f = fs.create(p("db/a")).unwrap();
    fs.set_random(seed, 0.3, &[FaultKind::Write]);
    let pattern: Vec<bool> = (0..200).map(|_| f.append(b"x").is_err()).collect();
    // Kinds not listed never fail.
    for _ in 0..50 {
        f.sync().unwrap();
    }
    assert_eq!(
        fs.injected(),
        pattern.iter().filter(|&&failed| failed).count() as u64
    );
    pattern
}

#[test]
fn random_faults_are_deterministic() {
    let a = random_pattern(42);
    assert_eq!(a, random_pattern(42));
    assert_ne!(a, random_pattern(43));
    let failures = a.iter().filter(|&&failed| failed).count();
    assert!((30..90).contains(&failures), "{failures} failures");
}

#[test]
fn random_with_no_kinds_means_all_and_rules_take_precedence() {
    let (_mem, fs) = setup();
    fs.set_random(7, 1.0, &[]);
    assert!(fs.create(p("db/a")).is_err());
    assert!(fs.sync_dir(p("db")).is_err());
    fs.inject(FaultKind::Create, 5, false);
    let mut f = fs.create(p("db/a")).unwrap();
    assert!(f.append(b"x").is_err());
    fs.set_random(7, 0.0, &[]);
    f.append(b"x").unwrap();
    fs.clear();
    fs.sync_dir(p("db")).unwrap();
}

#[test]
fn works_as_fs_ref() {
    let (_mem, fs) = setup();
    let shared: FsRef = fs.clone();
    fs.fail_once(FaultKind::Create);
    assert!(shared.create(p("db/a")).is_err());
    assert_eq!(fs.injected(), 1);
}
