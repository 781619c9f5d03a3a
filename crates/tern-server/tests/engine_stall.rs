//! A stalled engine must not freeze the server: with every fsync taking
//! seconds, writes wait, while PING, reads, INFO and `/metrics` keep
//! answering and INFO shows the stall.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use redis::Value;
use tern::io::{FaultFs, MemFs};
use tern_server::config::AppendFsync;
use tern_server::StartOptions;

/// Runs `f` on its own thread and fails the test unless it finishes within
/// `limit` (a hung server must fail the test, not hang it).
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| {
        panic!("{what} did not answer within {limit:?} while writes were stalled")
    })
}

fn metrics(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_stalled_fsync_holds_writes_but_not_pings_reads_info_or_metrics() {
    let fault = FaultFs::new(MemFs::new());
    let mut cfg = common::test_config(Path::new("/data"));
    cfg.appendfsync = AppendFsync::Always;
    // Two tokio workers: before writes left them, two stalled writers
    // were enough to freeze everything.
    cfg.threads = 2;
    let server = tern_server::start(
        cfg,
        StartOptions {
            fs: Some(fault.clone()),
            ..StartOptions::default()
        },
    )
    .unwrap();
    let url = format!("redis://{}/", server.addr());
    let client = || {
        redis::Client::open(url.clone())
            .unwrap()
            .get_connection()
            .unwrap()
    };
    let mut c = client();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("before")
        .query(&mut c)
        .unwrap();

    fault.set_sync_delay(Duration::from_secs(4));
    let writers: Vec<_> = (0..8)
        .map(|i| {
            let mut w = client();
            std::thread::spawn(move || {
                let _: () = redis::cmd("SET")
                    .arg(format!("w{i}"))
                    .arg("x")
                    .query(&mut w)
                    .unwrap();
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        writers.iter().all(|w| !w.is_finished()),
        "a write finished although every fsync takes 4 s"
    );

    let limit = Duration::from_millis(1500);
    let mut probe = client();
    let (pong, got, info, probe) = within("PING, GET and INFO", limit, move || {
        let pong: String = redis::cmd("PING").query(&mut probe).unwrap();
        let got: Option<String> = redis::cmd("GET").arg("k").query(&mut probe).unwrap();
        let info: String = redis::cmd("INFO").arg("tern").query(&mut probe).unwrap();
        (pong, got, info, probe)
    });
    assert_eq!(pong, "PONG");
    assert_eq!(got.as_deref(), Some("before"));
    assert!(
        common::info_field(&info, "write_commit_in_progress_ms") >= 300,
        "INFO does not show the stalled commit:\n{info}"
    );
    let maddr = server.metrics_addr().unwrap();
    let body = within("/metrics", limit, move || metrics(maddr));
    let stalled: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("tern_write_commit_in_progress_seconds "))
        .expect("no commit gauge in /metrics")
        .parse()
        .unwrap();
    assert!(
        stalled >= 0.3,
        "/metrics does not show the stall ({stalled} s)"
    );
    // A new connection is accepted and served.
    within("a new connection", limit, move || {
        let mut fresh = redis::Client::open(url).unwrap().get_connection().unwrap();
        let v: Value = redis::cmd("PING").query(&mut fresh).unwrap();
        assert_eq!(v, Value::SimpleString("PONG".into()));
    });
    drop(probe);

    fault.set_sync_delay(Duration::ZERO);
    for w in writers {
        w.join().unwrap();
    }
    for i in 0..8 {
        let v: Option<String> = redis::cmd("GET")
            .arg(format!("w{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(v.as_deref(), Some("x"));
    }
    server.shutdown().unwrap();
}

#[test]
fn reads_that_need_the_device_run_on_the_pool_and_count_once() {
    // After a restart nothing is open or cached, and the file system says
    // every no-wait read would wait: reads of "a" cannot be answered from
    // memory and go to the read pool. An MGET that found "b" in memory
    // before it stopped at "a" is answered, and its keys counted, once.
    let fault = FaultFs::new(MemFs::new());
    let start = || {
        let mut cfg = common::test_config(Path::new("/data"));
        cfg.metrics_bind = "off".into();
        tern_server::start(
            cfg,
            StartOptions {
                fs: Some(fault.clone()),
                ..StartOptions::default()
            },
        )
        .unwrap()
    };
    let big = "v".repeat(4096);
    let server = start();
    let mut c = redis::Client::open(format!("redis://{}/", server.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SET").arg("a").arg(&big).query(&mut c).unwrap();
    server.shutdown().unwrap();
    drop(server);

    fault.set_uncached(true);
    let server = start();
    let mut c = redis::Client::open(format!("redis://{}/", server.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    // In the memtable: an MGET finds it from memory before it reaches "a".
    let _: () = redis::cmd("SET")
        .arg("b")
        .arg("small")
        .query(&mut c)
        .unwrap();
    let both: Vec<Option<String>> = redis::cmd("MGET")
        .arg("b")
        .arg("a")
        .arg("missing")
        .query(&mut c)
        .unwrap();
    let a: String = redis::cmd("GET").arg("a").query(&mut c).unwrap();
    assert_eq!(a, big);
    assert_eq!(both, vec![Some("small".into()), Some(big), None]);
    let info: String = redis::cmd("INFO").arg("stats").query(&mut c).unwrap();
    assert_eq!(common::info_field(&info, "keyspace_hits"), 3);
    assert_eq!(common::info_field(&info, "keyspace_misses"), 1);
    server.shutdown().unwrap();
}
