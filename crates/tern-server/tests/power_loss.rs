//! Power loss under each `appendfsync` mode, on the engine's simulated file
//! system: the server writes on it, power is cut (only synced bytes and
//! directory entries survive), and a new server starts on what is left.
//! `always` keeps every acknowledged write; `everysec` loses at most about
//! the last second; `no` may lose more, but what survives is always a
//! prefix of what was acknowledged.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use redis::Value;
use tern::io::MemFs;
use tern_server::config::AppendFsync;
use tern_server::StartOptions;

const DATA: &str = "/data";

/// A server on `fs`; a small `write_buffer` makes memtable switches (each
/// syncing the WAL it leaves) frequent.
fn start(
    fs: &std::sync::Arc<MemFs>,
    mode: AppendFsync,
    write_buffer: Option<usize>,
) -> tern_server::ServerHandle {
    let mut cfg = common::test_config(Path::new(DATA));
    cfg.appendfsync = mode;
    if let Some(n) = write_buffer {
        cfg.engine.write_buffer_size = n;
    }
    cfg.metrics_bind = "off".into();
    let opts = StartOptions {
        fs: Some(fs.clone()),
        ..StartOptions::default()
    };
    tern_server::start(cfg, opts).unwrap()
}

fn client(s: &tern_server::ServerHandle) -> redis::Connection {
    redis::Client::open(format!("redis://{}/", s.addr()))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Writes `k0, k1, …` one at a time for `run` and at least `min_writes`,
/// then cuts the power. Returns when each write was acknowledged, the
/// moment of the cut, and the store that survived it.
fn write_then_cut_power(
    mode: AppendFsync,
    run: Duration,
    min_writes: usize,
    write_buffer: Option<usize>,
) -> (Vec<Instant>, Instant, std::sync::Arc<MemFs>) {
    let fs = MemFs::new();
    let server = start(&fs, mode, write_buffer);
    let mut c = client(&server);
    let mut acked = Vec::new();
    let start = Instant::now();
    while start.elapsed() < run || acked.len() < min_writes {
        let i = acked.len();
        let r: Value = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("v{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(r, Value::Okay);
        acked.push(Instant::now());
    }
    let cut = Instant::now();
    let survived = fs.crashed_copy();
    server.shutdown().unwrap();
    (acked, cut, survived)
}

/// How many of `k0..kn` the store holds, checking they form a prefix.
fn surviving_prefix(fs: &std::sync::Arc<MemFs>, mode: AppendFsync, n: usize) -> usize {
    let server = start(fs, mode, None);
    let mut c = client(&server);
    let mut prefix = None;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut mget = redis::cmd("MGET");
        for i in chunk {
            mget.arg(format!("k{i}"));
        }
        let values: Vec<Option<String>> = mget.query(&mut c).unwrap();
        for (&i, v) in chunk.iter().zip(values) {
            match (v, prefix) {
                (Some(v), None) => assert_eq!(v, format!("v{i}")),
                (None, None) => prefix = Some(i),
                (Some(_), Some(p)) => panic!("{mode:?}: k{i} survived but k{p} before it did not"),
                (None, Some(_)) => {}
            }
        }
    }
    server.shutdown().unwrap();
    prefix.unwrap_or(n)
}

#[test]
fn appendfsync_always_keeps_every_acknowledged_write_through_power_loss() {
    let (acked, _, fs) =
        write_then_cut_power(AppendFsync::Always, Duration::from_millis(800), 0, None);
    assert!(acked.len() > 10);
    assert_eq!(
        surviving_prefix(&fs, AppendFsync::Always, acked.len()),
        acked.len()
    );
}

#[test]
fn appendfsync_everysec_loses_at_most_about_the_last_second() {
    let (acked, cut, fs) =
        write_then_cut_power(AppendFsync::Everysec, Duration::from_millis(3000), 0, None);
    let kept = surviving_prefix(&fs, AppendFsync::Everysec, acked.len());
    // The background fsync runs once a second; allow as much again for a
    // loaded machine. Everything acknowledged before that must be there.
    let must_keep = acked.partition_point(|&t| cut.duration_since(t) > Duration::from_secs(2));
    eprintln!(
        "everysec: {} acknowledged, {kept} survived, {must_keep} older than 2 s",
        acked.len()
    );
    assert!(must_keep > 0, "no write old enough to check");
    assert!(
        kept >= must_keep,
        "lost writes acknowledged {:?} before the power cut",
        cut.duration_since(acked[kept])
    );
}

#[test]
fn appendfsync_no_keeps_a_prefix_through_power_loss() {
    // `no` syncs only when a memtable fills: small ones, and enough writes
    // to fill several however slow the machine is, so some writes are
    // durable and the prefix check has something to check.
    let (acked, _, fs) = write_then_cut_power(
        AppendFsync::No,
        Duration::from_millis(800),
        10_000,
        Some(64 << 10),
    );
    let kept = surviving_prefix(&fs, AppendFsync::No, acked.len());
    eprintln!("no: {} acknowledged, {kept} survived", acked.len());
    assert!(kept > 0, "no write survived, so nothing was checked");
}

/// FLUSHALL is durable when acknowledged, whatever `appendfsync` says:
/// once the generation moves, compaction may drop the old one at any
/// moment, so a flush lost to a power cut could leave counts (and an index)
/// for keys that are gone. Power is cut right after the reply, before any
/// sync `everysec` would make.
#[test]
fn flushall_survives_a_power_cut_right_after_its_reply() {
    let fs = MemFs::new();
    let server = start(&fs, AppendFsync::Everysec, None);
    let mut c = client(&server);
    let mut p = redis::pipe();
    for i in 0..500 {
        p.cmd("SET").arg(format!("k{i}")).arg("v").ignore();
    }
    p.query::<()>(&mut c).unwrap();
    server.state().store.db.sync_wal().unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let survived = fs.crashed_copy();
    server.shutdown().unwrap();
    drop(server);

    let server = start(&survived, AppendFsync::Everysec, None);
    let store = &server.state().store;
    let meta = store.meta();
    assert_eq!(store.recount(meta.generation).unwrap(), meta);
    let mut c = client(&server);
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0, "the flush survived");
    server.shutdown().unwrap();
}
