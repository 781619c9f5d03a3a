#![allow(clippy::unwrap_used)]
//! What monitoring tools and operators use: INFO's memory, cpu, stats and
//! commandstats fields; CONFIG SET of the settings that change at run
//! time (requirepass, maxclients, Redis's encoding knobs, which OBJECT
//! ENCODING follows) and a clear refusal for the others; TIME.

mod common;

use common::{info_field, run, start};
use redis::Value;

fn info(c: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(c).unwrap()
}

#[test]
fn info_reports_memory_cpu_rates_and_per_command_stats() {
    let t = start();
    let mut c = t.client();
    for i in 0..2000 {
        run(&mut c, &["SET", &format!("k{i}"), "v"]).unwrap();
    }
    let _ = run(&mut c, &["INCR", "k0"]);
    let mem = info(&mut c, "memory");
    assert!(info_field(&mem, "used_memory") > 1 << 20, "{mem}");
    assert!(info_field(&mem, "used_memory_peak") >= info_field(&mem, "used_memory") / 2);
    assert!(mem.contains("used_memory_human:"), "{mem}");
    let cpu = info(&mut c, "cpu");
    let user: f64 = cpu
        .lines()
        .find_map(|l| l.strip_prefix("used_cpu_user:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(user > 0.0, "{cpu}");
    assert!(cpu.contains("used_cpu_sys:") && cpu.contains("used_cpu_user_children:"));
    // 2000 commands within the last samples: a rate above zero once the
    // sampler (ten times a second) has seen them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut stats = info(&mut c, "stats");
    while info_field(&stats, "instantaneous_ops_per_sec") == 0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
        stats = info(&mut c, "stats");
    }
    assert!(
        info_field(&stats, "instantaneous_ops_per_sec") > 0,
        "{stats}"
    );
    let cmds = info(&mut c, "commandstats");
    let set = cmds
        .lines()
        .find(|l| l.starts_with("cmdstat_set:"))
        .unwrap_or_else(|| panic!("{cmds}"));
    assert!(set.starts_with("cmdstat_set:calls=2000,usec="), "{set}");
    let incr = cmds
        .lines()
        .find(|l| l.starts_with("cmdstat_incr:"))
        .unwrap();
    assert!(
        incr.ends_with("failed_calls=1"),
        "INCR of 'v' failed: {incr}"
    );
    // Per-command stats come only when asked for, as in Redis.
    let default: String = redis::cmd("INFO").query(&mut c).unwrap();
    assert!(!default.contains("cmdstat_"));
    assert!(default.contains("# Memory") && default.contains("# CPU"));
}

#[test]
fn config_set_changes_the_password_and_client_limit_at_once() {
    let t = start();
    let mut admin = t.client();
    run(&mut admin, &["CONFIG", "SET", "requirepass", "s3cret"]).unwrap();
    let mut late = t.client();
    let err = run(&mut late, &["GET", "k"]).unwrap_err();
    assert!(err.starts_with("NOAUTH"), "{err}");
    assert_eq!(run(&mut late, &["AUTH", "s3cret"]).unwrap(), Value::Okay);
    // The connection that set it stays authenticated, as in Redis.
    assert_eq!(
        run(&mut admin, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    run(&mut admin, &["CONFIG", "SET", "requirepass", ""]).unwrap();
    run(&mut late, &["GET", "k"]).unwrap();
    drop(late);
    // Only `admin` is left once the server has seen the other one go.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while info_field(&info(&mut admin, "clients"), "connected_clients") > 1 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    run(&mut admin, &["CONFIG", "SET", "maxclients", "2"]).unwrap();
    let _second = t.client();
    let refused = common::raw(t.addr(), b"");
    assert_eq!(refused, "-ERR max number of clients reached\r\n");
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxclients")
        .query(&mut admin)
        .unwrap();
    assert_eq!(got, ["maxclients", "2"]);
}

#[test]
fn config_set_refuses_settings_read_at_start_and_accepts_their_current_value() {
    let t = start();
    let mut c = t.client();
    let err = run(&mut c, &["CONFIG", "SET", "appendfsync", "always"]).unwrap_err();
    assert!(
        err.contains("'appendfsync'") && err.contains("restart"),
        "{err}"
    );
    let current: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query(&mut c)
        .unwrap();
    run(&mut c, &["CONFIG", "SET", "appendfsync", &current[1]]).unwrap();
    run(&mut c, &["CONFIG", "SET", "save", ""]).unwrap();
    let err = run(&mut c, &["CONFIG", "SET", "no-such-thing", "1"]).unwrap_err();
    assert!(err.contains("Unknown option"), "{err}");
    // All or nothing: a bad pair leaves the good one unapplied.
    let err = run(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "hash-max-listpack-entries",
            "7",
            "port",
            "1",
        ],
    )
    .unwrap_err();
    assert!(err.contains("'port'"), "{err}");
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hash-max-listpack-entries")
        .query(&mut c)
        .unwrap();
    assert_eq!(got, ["hash-max-listpack-entries", "512"]);
}

#[test]
fn object_encoding_follows_the_encoding_knobs() {
    let t = start();
    let mut c = t.client();
    let enc = |c: &mut redis::Connection, k: &str| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(k)
            .query(c)
            .unwrap()
    };
    run(&mut c, &["SET", "n", "12345"]).unwrap();
    run(&mut c, &["SET", "s", "short"]).unwrap();
    run(&mut c, &["SET", "r", &"x".repeat(100)]).unwrap();
    run(&mut c, &["HSET", "h", "a", "1", "b", "2"]).unwrap();
    run(&mut c, &["SADD", "is", "1", "2"]).unwrap();
    run(&mut c, &["SADD", "ss", "a"]).unwrap();
    run(&mut c, &["ZADD", "z", "1", "a"]).unwrap();
    run(&mut c, &["RPUSH", "l", "a"]).unwrap();
    for (k, e) in [
        ("n", "int"),
        ("s", "embstr"),
        ("r", "raw"),
        ("h", "listpack"),
        ("is", "intset"),
        ("ss", "hashtable"),
        ("z", "listpack"),
        ("l", "quicklist"),
    ] {
        assert_eq!(enc(&mut c, k), e, "{k}");
    }
    // The older name sets the same knob.
    run(&mut c, &["CONFIG", "SET", "hash-max-ziplist-entries", "1"]).unwrap();
    assert_eq!(enc(&mut c, "h"), "hashtable");
    run(&mut c, &["CONFIG", "SET", "zset-max-listpack-value", "0"]).unwrap();
    assert_eq!(enc(&mut c, "z"), "skiplist");
    assert_eq!(
        run(&mut c, &["OBJECT", "ENCODING", "nope"]).unwrap(),
        Value::Nil
    );
    let err = run(
        &mut c,
        &["CONFIG", "SET", "zset-max-listpack-value", "lots"],
    )
    .unwrap_err();
    assert!(err.contains("memory value"), "{err}");
}

#[test]
fn time_is_the_servers_clock() {
    let t = start();
    let mut c = t.client();
    let (secs, micros): (String, String) = redis::cmd("TIME").query(&mut c).unwrap();
    let secs: u64 = secs.parse().unwrap();
    let micros: u32 = micros.parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(now) <= 2 && micros < 1_000_000);
}
