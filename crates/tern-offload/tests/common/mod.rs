//! Helpers shared by the offload tests: a store, its tier and executor,
//! a workload that makes every job kind run, and an S3 server for a tier.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern::compaction::Executor;
use tern::io::PosixFs;
use tern::{Db, Options};
use tern_offload::{
    FilterRegistry, InProcessRunner, JobRunner, RemoteExecutor, RemoteOptions, SharedTier,
};

pub fn opts() -> Options {
    Options {
        settings: tern::Settings {
            write_buffer_size: 64 << 10,
            target_file_size: 32 << 10,
            max_bytes_for_level_base: 256 << 10,
            block_size: 1 << 10,
            blob_file_size: 64 << 10,
            ..tern::Settings::default()
        },
        ..Options::default()
    }
}

pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Three rounds of overwrites of 600 keys with 600-byte (separated) values,
/// then a compaction of everything and GC: every job kind runs.
pub fn churn(db: &Db) -> Model {
    let mut model = Model::new();
    for round in 0..3u32 {
        for i in 0..600u32 {
            let k = format!("key{i:06}").into_bytes();
            let mut v = format!("value-{i}-round-{round}-").into_bytes();
            v.resize(600, b'a' + (round % 26) as u8);
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        db.flush().unwrap();
    }
    for i in (0..600u32).step_by(3) {
        let k = format!("key{i:06}").into_bytes();
        db.delete(&k).unwrap();
        model.remove(&k);
    }
    db.flush().unwrap();
    model
}

pub fn compact_and_collect(db: &Db) -> tern::Result<usize> {
    db.compact_range(None, None)?;
    db.collect_garbage()
}

pub fn assert_matches(db: &Db, model: &Model) {
    let mut it = db.iter(tern::ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut seen = Model::new();
    while it.valid() {
        seen.insert(it.key().to_vec(), it.value().to_vec());
        it.next();
    }
    it.status().unwrap();
    assert_eq!(seen.len(), model.len(), "key count");
    assert!(seen == *model, "the store's contents differ from the model");
}

pub fn check_clean(dir: &Path) {
    let report = tern::tools::check::check_store(dir, Arc::new(PosixFs)).unwrap();
    assert!(
        report.problems.is_empty(),
        "tern check: {:?}",
        report.problems
    );
}

/// A store, its tier and its executor.
pub struct Setup {
    pub _tmp: tempfile::TempDir,
    pub dir: std::path::PathBuf,
    pub tier: SharedTier,
    pub scratch: std::path::PathBuf,
}

/// A store directory, scratch space and a tier on a local directory.
pub fn setup() -> Setup {
    setup_with(|tmp| {
        let url = format!("file://{}", tmp.join("tier").display());
        SharedTier::open(&url, &[]).unwrap()
    })
}

/// A store directory and scratch space, with the tier `tier` makes.
pub fn setup_with(tier: impl FnOnce(&Path) -> SharedTier) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let tier = tier(tmp.path());
    Setup {
        dir: tmp.path().join("db"),
        scratch: tmp.path().join("scratch"),
        tier,
        _tmp: tmp,
    }
}

pub fn open(s: &Setup, runner: Arc<dyn JobRunner>, fallback: bool) -> (Db, Arc<RemoteExecutor>) {
    open_with(s, runner, fallback, opts())
}

pub fn open_with(
    s: &Setup,
    runner: Arc<dyn JobRunner>,
    fallback: bool,
    opts: Options,
) -> (Db, Arc<RemoteExecutor>) {
    let mut ro = RemoteOptions::new("store1");
    ro.fallback = fallback;
    ro.deadline = Duration::from_secs(30);
    let exec =
        Arc::new(RemoteExecutor::new(s.tier.clone(), runner, ro, Arc::new(PosixFs)).unwrap());
    let db = Db::open_with_executor(&s.dir, opts, Some(exec.clone() as Arc<dyn Executor>)).unwrap();
    (db, exec)
}

pub fn in_process(s: &Setup) -> InProcessRunner {
    InProcessRunner::new(s.tier.clone(), s.scratch.clone(), FilterRegistry::new())
}

/// A `moto_server` (an S3 server on loopback) started by [`moto`]; killed
/// when dropped, frozen or not.
pub struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Moto {
    /// Sends it `sig` (`-STOP` freezes it: connections are still accepted
    /// by the kernel, but no request is answered until `-CONT`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} moto_server failed");
    }
}

/// Starts `moto_server` on a free port and creates bucket `tern`; `None`
/// (in a run declared partial) if it is not installed.
pub fn moto() -> Option<(Moto, u16)> {
    let installed = Command::new("moto_server")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        assert!(
            std::env::var("TERN_PARTIAL").is_ok_and(|v| v == "1"),
            "moto_server is not on PATH, so the S3 tier cannot be tested; install it \
             (pip install 'moto[server]'), run scripts/test.sh, or set TERN_PARTIAL=1 to skip \
             it knowingly"
        );
        eprintln!("SKIPPED (TERN_PARTIAL=1): moto_server is not on PATH");
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let moto = Moto(child);
    let start = Instant::now();
    loop {
        // moto accepts an unsigned bucket creation.
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let req = format!(
                "PUT /tern HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            s.write_all(req.as_bytes()).unwrap();
            let mut reply = String::new();
            let _ = s.read_to_string(&mut reply);
            assert!(
                reply.starts_with("HTTP/1.1 200"),
                "creating the bucket: {reply}"
            );
            return Some((moto, port));
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "moto_server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The S3 settings of a tier in the bucket [`moto`] made on `port`, as the
/// `AWS_*` environment variables `SharedTier::open` reads (what a `tern
/// worker` process is given).
pub fn moto_env(port: u16) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT", format!("http://127.0.0.1:{port}")),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_ACCESS_KEY_ID", "test".into()),
        ("AWS_SECRET_ACCESS_KEY", "test".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The same settings as options of `SharedTier::open` (the variables'
/// names in lower case).
pub fn moto_options(port: u16) -> Vec<(String, String)> {
    moto_env(port)
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect()
}

/// A store directory and scratch space, with the tier
/// `s3://tern/offload` on the moto_server at `port`.
pub fn setup_s3(port: u16) -> Setup {
    setup_with(|_| SharedTier::open("s3://tern/offload", &moto_options(port)).unwrap())
}
