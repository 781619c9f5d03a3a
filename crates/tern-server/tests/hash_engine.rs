//! `tern serve --engine hash`: acknowledged writes survive power loss under
//! `appendfsync always` and a restart under `everysec`; SCAN, DBSIZE,
//! FLUSHDB and expiry.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;

use redis::Commands;
use tern::io::MemFs;
use tern_server::config::HashConfig;
use tern_server::{AppendFsync, Config, EngineKind, StartOptions};

fn config(dir: &std::path::Path, fsync: AppendFsync) -> Config {
    Config {
        port: Some(0),
        dir: dir.to_path_buf(),
        metrics_bind: "off".into(),
        appendfsync: fsync,
        engine_kind: EngineKind::Hash,
        hash: HashConfig {
            memory: "256K".into(),
            page_bits: 16,
            index_bits: 8,
            segment_bits: 20,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn client(server: &tern_server::hash::HashServerHandle) -> redis::Connection {
    redis::Client::open(format!("redis://{}/", server.addr()))
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn acknowledged_writes_survive_power_loss_with_appendfsync_always() {
    let fs = MemFs::new();
    let opts = StartOptions {
        fs: Some(fs.clone()),
        ..Default::default()
    };
    let dir = std::path::Path::new("/data");
    let fs_after;
    {
        let server =
            tern_server::hash::start(config(dir, AppendFsync::Always), opts.clone()).unwrap();
        let mut c = client(&server);
        for i in 0..300 {
            let _: () = c
                .set(format!("k{i}"), format!("v{i}-{}", "x".repeat(i % 50)))
                .unwrap();
            let _: i64 = c.incr("counter", 1).unwrap();
        }
        // Pipelined writes are acknowledged together.
        let mut p = redis::pipe();
        for i in 0..200 {
            p.set(format!("p{i}"), i).ignore();
        }
        let _: () = p.query(&mut c).unwrap();
        // Power fails right after the last reply: what the server did not
        // make durable by then is gone.
        let after = fs.crashed_copy();
        drop(c);
        fs_after = after;
    }
    let opts = StartOptions {
        fs: Some(fs_after),
        ..Default::default()
    };
    let server = tern_server::hash::start(config(dir, AppendFsync::Always), opts).unwrap();
    let mut c = client(&server);
    for i in 0..300 {
        let v: String = c.get(format!("k{i}")).unwrap();
        assert_eq!(v, format!("v{i}-{}", "x".repeat(i % 50)));
    }
    for i in 0..200 {
        let v: i64 = c.get(format!("p{i}")).unwrap();
        assert_eq!(v, i);
    }
    let n: i64 = c.get("counter").unwrap();
    assert_eq!(n, 300);
}

#[test]
fn a_shutdown_keeps_everything_for_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    {
        let server = tern_server::hash::start(
            config(tmp.path(), AppendFsync::Everysec),
            StartOptions::default(),
        )
        .unwrap();
        let mut c = client(&server);
        for i in 0..2000 {
            let _: () = c.set(format!("key:{i}"), vec![b'v'; 300]).unwrap();
        }
        let _: () = redis::cmd("SHUTDOWN").query(&mut c).unwrap_or(());
        server.wait().unwrap();
    }
    let server = tern_server::hash::start(
        config(tmp.path(), AppendFsync::Everysec),
        StartOptions::default(),
    )
    .unwrap();
    let mut c = client(&server);
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 2000);
    let v: Vec<u8> = c.get("key:1999").unwrap();
    assert_eq!(v.len(), 300);
}

#[test]
fn scan_dbsize_flushdb_and_expiry() {
    let tmp = tempfile::tempdir().unwrap();
    let server = tern_server::hash::start(
        config(tmp.path(), AppendFsync::Everysec),
        StartOptions::default(),
    )
    .unwrap();
    let mut c = client(&server);
    for i in 0..3000 {
        let _: () = c.set(format!("s{i}"), vec![b'x'; 100]).unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("short")
        .arg("lived")
        .arg("PX")
        .arg(50)
        .query(&mut c)
        .unwrap();
    let stats = server.store().stats();
    assert!(stats.head > 64, "part of the log is on disk: {stats:?}");
    // SCAN pages through every key once.
    let mut seen = HashSet::new();
    let mut cursor = 0u64;
    let mut pages = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(100)
            .query(&mut c)
            .unwrap();
        for k in keys {
            assert!(seen.insert(k.clone()), "{k} returned twice");
        }
        pages += 1;
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    assert!(pages > 3);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let live: Vec<String> = (0..3000).map(|i| format!("s{i}")).collect();
    assert!(live.iter().all(|k| seen.contains(k)));
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 3000, "the expired key is not counted");
    let gone: Option<String> = c.get("short").unwrap();
    assert_eq!(gone, None);
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn an_expiry_that_overflows_is_refused_and_the_key_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let server = tern_server::hash::start(
        config(tmp.path(), AppendFsync::Everysec),
        StartOptions::default(),
    )
    .unwrap();
    let mut c = client(&server);
    let _: () = c.set("k", "kept").unwrap();
    for (unit, n) in [
        ("EX", "9223372036854775"),
        ("PX", "9223372036854775807"),
        ("EX", "0"),
    ] {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .arg(unit)
            .arg(n)
            .query(&mut c);
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("invalid expire time in 'set' command"),
            "{unit} {n}: {e}"
        );
        let r: redis::RedisResult<()> = redis::cmd("GETEX").arg("k").arg(unit).arg(n).query(&mut c);
        assert!(r.unwrap_err().to_string().contains("invalid expire time"));
    }
    let v: String = c.get("k").unwrap();
    assert_eq!(v, "kept");
    // The engine threads are all still there.
    for _ in 0..64 {
        let _: () = c.set("k", "again").unwrap();
    }
}
