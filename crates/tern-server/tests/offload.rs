//! `tern serve` with `[offload]`: its compactions, expiry filter included,
//! run on a worker through a coordinator (both in this process, over gRPC
//! and a shared directory), and every key reads back.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use tern_offload::coordinator::Limits;
use tern_offload::worker_daemon::WorkerOptions;
use tern_offload::{FilterRegistry, SharedTier};
use tern_server::config::OffloadConfig;
use tern_server::expiry::{ExpiryFilter, EXPIRY_FILTER};

/// Starts a coordinator and one worker on a runtime of their own; returns
/// the coordinator's URL and the runtime (dropping it stops both).
fn offload_service(tier_url: &str, scratch: &std::path::Path) -> (String, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(tern_offload::coordinator::serve(
        listener,
        Limits::default(),
        None,
        std::future::pending(),
    ));
    let mut filters = FilterRegistry::new();
    filters.register(EXPIRY_FILTER, ExpiryFilter::from_remote);
    let opts = WorkerOptions {
        coordinator: url.clone(),
        name: "test-worker".into(),
        slots: 2,
        scratch: scratch.to_path_buf(),
        poll_every: Duration::from_millis(50),
        grace: Duration::from_secs(5),
        commit_delay: Duration::ZERO,
    };
    let tier = SharedTier::open(tier_url, &[]).unwrap();
    rt.spawn(tern_offload::worker_daemon::run(
        opts,
        tier,
        filters,
        std::future::pending(),
    ));
    (url, rt)
}

#[test]
fn compactions_with_the_expiry_filter_run_on_a_worker() {
    let tmp = tempfile::tempdir().unwrap();
    let tier_url = format!("file://{}", tmp.path().join("tier").display());
    let (coordinator, _rt) = offload_service(&tier_url, &tmp.path().join("scratch"));
    let t = common::start_with(|c| {
        c.engine.write_buffer_size = 64 << 10;
        c.engine.target_file_size = 64 << 10;
        c.engine.max_bytes_for_level_base = 256 << 10;
        c.offload = Some(OffloadConfig {
            coordinator: coordinator.clone(),
            shared: tier_url.clone(),
            store_id: None,
            fallback: false,
            deadline_secs: 60,
        });
    });
    let mut c = t.client();
    // Overwrites of separated values, a third of them with an expiry far
    // off: compactions run with the server's filter, and must keep them.
    let value = |i: usize, round: usize| format!("{i}-{round}-{}", "v".repeat(700));
    for round in 0..4 {
        let mut p = redis::pipe();
        for i in 0..600 {
            p.cmd("SET").arg(format!("key{i}")).arg(value(i, round));
            if i % 3 == 0 {
                p.arg("EX").arg(3600);
            }
            p.ignore();
        }
        p.query::<()>(&mut c).unwrap();
    }
    let info =
        |c: &mut redis::Connection| -> String { redis::cmd("INFO").arg("tern").query(c).unwrap() };
    let start = std::time::Instant::now();
    while common::info_field(&info(&mut c), "offload_remote_compactions") == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no compaction ran remotely: {}",
            info(&mut c)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = info(&mut c);
    assert_eq!(
        common::info_field(&text, "offload_fallback_unsupported"),
        0,
        "{text}"
    );
    assert_eq!(common::info_field(&text, "offload_local_jobs"), 0, "{text}");
    for i in 0..600 {
        let got: String = redis::cmd("GET")
            .arg(format!("key{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(got, value(i, 3));
    }
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 600);
    // The same counters for Prometheus.
    let mut http = std::net::TcpStream::connect(t.server.metrics_addr().unwrap()).unwrap();
    use std::io::{Read, Write};
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    let line = body
        .lines()
        .find(|l| l.starts_with("tern_offload_remote_compactions_total "))
        .unwrap_or_else(|| panic!("no offload counters in /metrics"));
    assert_ne!(line, "tern_offload_remote_compactions_total 0");
}
