//! The shared tier on an S3 server (`moto_server`, started here): the same
//! offloaded compactions and GC as on a local directory.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use tern_offload::SharedTier;

struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `moto_server` on a free port and creates bucket `tern`; `None`
/// (in a run declared partial) if it is not installed.
fn moto() -> Option<(Moto, u16)> {
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

#[test]
fn compaction_and_gc_through_an_s3_tier() {
    let Some((_moto, port)) = moto() else { return };
    let options: Vec<(String, String)> = [
        ("aws_endpoint", format!("http://127.0.0.1:{port}")),
        ("aws_allow_http", "true".into()),
        ("aws_access_key_id", "test".into()),
        ("aws_secret_access_key", "test".into()),
        ("aws_region", "us-east-1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let s = setup_with(|_| SharedTier::open("s3://tern/offload", &options).unwrap());
    let (db, exec) = open(&s, Arc::new(in_process(&s)), false);
    let model = churn(&db);
    compact_and_collect(&db).unwrap();
    db.wait_for_background().unwrap();
    let st = exec.stats();
    assert!(st.remote_compactions.load(Relaxed) > 0, "{st:?}");
    assert!(st.remote_gcs.load(Relaxed) > 0, "{st:?}");
    assert_eq!(st.local_jobs.load(Relaxed), 0);
    assert_matches(&db, &model);
    db.close().unwrap();
    drop(db);
    check_clean(&s.dir);
    // The inputs really are in the bucket.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stored = rt.block_on(s.tier.list("stores/store1")).unwrap();
    assert!(!stored.is_empty(), "nothing uploaded to the bucket");
}
