//! Measures large composite values on `tern serve`: a hash of N fields and
//! a sorted set of N members (N = 1,000,000 unless given), against a
//! 10-member one of each, through a real client.
//!
//! ```sh
//! cargo run --release -p tern-server --example big_composites [N] [value bytes]
//! ```
//!
//! Prints, as a Markdown table: the time to fill each; HGET and ZSCORE
//! latency (p50, p99, p99.9 over random members) on the big value and on
//! the small one; the engine's point reads per command; how long DEL of the
//! big value takes; and the store's bytes (tables and blob files) before
//! DEL, after it, and after compaction and blob GC.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Runs `cmd` `n` times with random members below `size` and returns the
/// sorted latencies.
fn latencies(
    c: &mut redis::Connection,
    cmd: &str,
    key: &str,
    size: usize,
    n: usize,
) -> Vec<Duration> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let m = format!("m{}", rng.gen_range(0..size));
        let t = Instant::now();
        let v: Option<String> = redis::cmd(cmd).arg(key).arg(&m).query(c).expect("read");
        out.push(t.elapsed());
        assert!(v.is_some(), "{cmd} {key} {m} found nothing");
    }
    out.sort();
    out
}

/// Bytes of the store's tables and blob files.
fn disk(db: &tern::Db) -> (u64, u64) {
    let s = db.stats();
    (s.sst_bytes, s.blob_bytes)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let vlen: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let dir = tempfile::tempdir().expect("temp dir");
    let config = tern_server::Config {
        port: Some(0),
        dir: dir.path().to_path_buf(),
        metrics_bind: "off".into(),
        ..tern_server::Config::default()
    };
    let server = tern_server::start(config, tern_server::StartOptions::default()).expect("start");
    let url = format!("redis://{}/", server.addr());
    let mut c = redis::Client::open(url)
        .expect("url")
        .get_connection()
        .expect("connect");
    let value = "v".repeat(vlen);
    let mut rows: Vec<(String, String)> = Vec::new();

    let t = Instant::now();
    for chunk in (0..n).step_by(50_000) {
        let mut p = redis::pipe();
        for start in (chunk..(chunk + 50_000).min(n)).step_by(1000) {
            let mut h = redis::cmd("HSET");
            h.arg("big");
            let mut z = redis::cmd("ZADD");
            z.arg("bigz");
            for i in start..(start + 1000).min(n) {
                h.arg(format!("m{i}")).arg(&value);
                z.arg(i as f64).arg(format!("m{i}"));
            }
            p.add_command(h).ignore().add_command(z).ignore();
        }
        p.query::<()>(&mut c).expect("fill");
    }
    rows.push((
        format!("fill {n} fields + {n} members ({vlen} B values)"),
        format!("{:.1} s", t.elapsed().as_secs_f64()),
    ));
    for i in 0..10 {
        redis::cmd("HSET")
            .arg("small")
            .arg(format!("m{i}"))
            .arg(&value)
            .query::<()>(&mut c)
            .expect("small");
        redis::cmd("ZADD")
            .arg("smallz")
            .arg(i)
            .arg(format!("m{i}"))
            .query::<()>(&mut c)
            .expect("small");
    }
    let db = &server.state().store.db;
    db.flush().expect("flush");
    db.wait_for_background().expect("background");

    let reads = 20_000;
    for (cmd, big, small) in [("HGET", "big", "small"), ("ZSCORE", "bigz", "smallz")] {
        let before = db.stats().point_reads;
        let l_big = latencies(&mut c, cmd, big, n, reads);
        let per = (db.stats().point_reads - before) as f64 / reads as f64;
        let l_small = latencies(&mut c, cmd, small, 10, reads);
        for (what, l) in [
            (format!("{cmd} on {n}"), &l_big),
            (format!("{cmd} on 10"), &l_small),
        ] {
            rows.push((
                format!("{what}: p50 / p99 / p99.9"),
                format!(
                    "{} / {} / {}",
                    micros(percentile(l, 0.5)),
                    micros(percentile(l, 0.99)),
                    micros(percentile(l, 0.999))
                ),
            ));
        }
        rows.push((
            format!("engine point reads per {cmd} on {n}"),
            format!("{per:.2}"),
        ));
    }

    let (sst0, blob0) = disk(db);
    for key in ["big", "bigz"] {
        let t = Instant::now();
        let deleted: i64 = redis::cmd("DEL").arg(key).query(&mut c).expect("del");
        assert_eq!(deleted, 1);
        rows.push((format!("DEL {key}"), micros(t.elapsed())));
    }
    db.flush().expect("flush");
    let (sst1, blob1) = disk(db);
    let t = Instant::now();
    db.compact_range(None, None).expect("compact");
    db.collect_garbage().expect("gc");
    db.wait_for_background().expect("background");
    let reclaim = t.elapsed();
    let (sst2, blob2) = disk(db);
    rows.push((
        "tables + blob files before DEL".into(),
        format!("{} + {}", mib(sst0), mib(blob0)),
    ));
    rows.push((
        "after DEL (before compaction)".into(),
        format!("{} + {}", mib(sst1), mib(blob1)),
    ));
    rows.push((
        format!("after compaction and GC ({:.1} s)", reclaim.as_secs_f64()),
        format!("{} + {}", mib(sst2), mib(blob2)),
    ));
    let hlen: i64 = redis::cmd("HLEN").arg("small").query(&mut c).expect("hlen");
    assert_eq!(hlen, 10, "the small hash survives");

    println!("| measure | value |\n|---|---|");
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
    server.shutdown().expect("shutdown");
}
