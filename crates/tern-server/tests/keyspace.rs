//! The keyspace the committer keeps: exact counts that DBSIZE and INFO read
//! without touching the store, active expiry through the expiry index,
//! compaction reclaiming expired values of any size, FLUSHDB as one write,
//! and the move of a format 1 store.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{info_field, start, start_with};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

fn run(c: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(c)
}

/// The text of INFO line `name`, if present.
fn info_line(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

fn dbsize(c: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).unwrap()
}

/// INFO `section`; the default sections for "".
fn info(c: &mut redis::Connection, section: &str) -> String {
    let mut cmd = redis::cmd("INFO");
    if !section.is_empty() {
        cmd.arg(section);
    }
    cmd.query(c).unwrap()
}

/// Polls until `f` holds (active expiry runs every 100 ms).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn dbsize_and_info_with_a_million_keys_do_no_engine_reads() {
    let t = start();
    let mut c = t.client();
    let n = 1_000_000usize;
    let per_cmd = 1000;
    // One pipeline per 20 MSETs of 1000 keys; every tenth key gets an expiry.
    for chunk in (0..n).step_by(per_cmd * 20) {
        let mut p = redis::pipe();
        for start in (chunk..(chunk + per_cmd * 20).min(n)).step_by(per_cmd) {
            let mut mset = redis::cmd("MSET");
            for i in start..start + per_cmd {
                mset.arg(format!("key:{i}")).arg("v");
            }
            p.add_command(mset).ignore();
        }
        p.query::<()>(&mut c).unwrap();
    }
    let mut p = redis::pipe();
    for i in (0..n).step_by(10) {
        p.cmd("PEXPIRE")
            .arg(format!("key:{i}"))
            .arg(3_600_000)
            .ignore();
    }
    p.query::<()>(&mut c).unwrap();

    // Nothing else reads the engine while we look.
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let db = &t.server.state().store.db;
    let before = db.stats();
    for _ in 0..100 {
        assert_eq!(dbsize(&mut c), n as i64);
    }
    for section in ["", "keyspace", "all", "everything"] {
        let text = info(&mut c, section);
        let line = info_line(&text, "db0").unwrap_or_default();
        assert!(
            line.starts_with("keys=1000000,expires=100000,avg_ttl="),
            "{line}"
        );
    }
    let after = db.stats();
    assert_eq!(
        (after.point_reads, after.iterators),
        (before.point_reads, before.iterators),
        "DBSIZE and INFO must not read the store"
    );
    // The counts are what a walk of the store finds.
    let store = &t.server.state().store;
    let meta = store.meta();
    assert_eq!(store.recount(meta.generation).unwrap(), meta);
}

/// Active expiry walked the expiry index ten times a second even when no
/// key had an expiry; each walk opened an engine iterator, which orders
/// every write since the last one into the memtable's list on the
/// committer's thread, the thread every write waits for.
#[test]
fn active_expiry_opens_no_iterator_while_no_key_has_an_expiry() {
    let t = start();
    let mut c = t.client();
    for i in 0..1000 {
        run(&mut c, &["SET", &format!("key:{i}"), "v"]).unwrap();
    }
    let db = &t.server.state().store.db;
    let before = db.stats().iterators;
    // Several 100 ms cycles.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        db.stats().iterators,
        before,
        "an expiry cycle with no key to expire opened an iterator"
    );
    // With a key that expires, cycles walk the index again and delete it.
    run(&mut c, &["SET", "short", "v", "PX", "50"]).unwrap();
    eventually("the key with an expiry to be deleted", || {
        let text = info(&mut c, "keyspace");
        info_line(&text, "db0").is_some_and(|l| l.starts_with("keys=1000,expires=0,"))
    });
    assert!(db.stats().iterators > before);
}

/// Redis key → expiry (unix ms), of every key stored, expired or not.
type Model = BTreeMap<String, Option<u64>>;

/// Checks the counts against the model and against a walk of the store.
fn check_counts(t: &common::TestServer, c: &mut redis::Connection, model: &Model, ctx: &str) {
    let expires = model.values().filter(|e| e.is_some()).count();
    assert_eq!(dbsize(c), model.len() as i64, "{ctx}: DBSIZE");
    let text = info(c, "keyspace");
    match info_line(&text, "db0") {
        None => assert!(model.is_empty(), "{ctx}: no db0 line"),
        Some(line) => assert!(
            line.starts_with(&format!("keys={},expires={expires},", model.len())),
            "{ctx}: {line}"
        ),
    }
    let store = &t.server.state().store;
    let meta = store.meta();
    assert_eq!(store.recount(meta.generation).unwrap(), meta, "{ctx}: walk");
}

#[test]
fn counts_stay_exact_through_overwrites_deletes_expiry_flushes_and_restarts() {
    let seed: u64 = std::env::var("TERN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (rerun with TERN_SEED={seed})");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = start_with(|c| c.engine.write_buffer_size = 64 << 10);
    let mut c = t.client();
    // Active expiry off: an expired key stays counted until deleted, so
    // the model knows exactly what is stored.
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let mut model = Model::new();
    let far = 4_000_000_000_000u64;
    for round in 0..12 {
        let mut p = redis::pipe();
        for _ in 0..400 {
            let k = format!("k{}", rng.gen_range(0..300));
            let big = rng.gen_bool(0.3);
            let v = if big { "x".repeat(700) } else { "v".into() };
            match rng.gen_range(0..10) {
                0..=2 => {
                    p.cmd("SET").arg(&k).arg(&v).ignore();
                    model.insert(k, None);
                }
                3 => {
                    let at = far + rng.gen_range(0..1000);
                    p.cmd("SET").arg(&k).arg(&v).arg("PXAT").arg(at).ignore();
                    model.insert(k, Some(at));
                }
                4 => {
                    // Already expired when set: Redis deletes the key.
                    p.cmd("SET").arg(&k).arg(&v).arg("PXAT").arg(1).ignore();
                    model.remove(&k);
                }
                5 => {
                    p.cmd("DEL").arg(&k).ignore();
                    model.remove(&k);
                }
                6 => {
                    let at = far + rng.gen_range(0..1000);
                    p.cmd("PEXPIREAT").arg(&k).arg(at).ignore();
                    if let Some(e) = model.get_mut(&k) {
                        *e = Some(at);
                    }
                }
                7 => {
                    p.cmd("PERSIST").arg(&k).ignore();
                    if let Some(e) = model.get_mut(&k) {
                        *e = None;
                    }
                }
                8 => {
                    p.cmd("APPEND").arg(&k).arg("a").ignore();
                    model.entry(k).or_insert(None);
                }
                _ => {
                    let k2 = format!("k{}", rng.gen_range(0..300));
                    p.cmd("MSET").arg(&k).arg("m").arg(&k2).arg(&v).ignore();
                    model.insert(k, None);
                    model.insert(k2, None);
                }
            }
        }
        p.query::<()>(&mut c).unwrap();
        check_counts(&t, &mut c, &model, &format!("round {round}"));
        match round % 4 {
            1 => {
                t.server.state().store.db.compact_range(None, None).unwrap();
                check_counts(&t, &mut c, &model, &format!("round {round} compacted"));
            }
            2 => {
                t = t.restart_with(|c| c.engine.write_buffer_size = 64 << 10);
                c = t.client();
                run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
                check_counts(&t, &mut c, &model, &format!("round {round} restarted"));
            }
            3 if round == 7 => {
                run(&mut c, &["FLUSHALL"]).unwrap();
                model.clear();
                check_counts(&t, &mut c, &model, &format!("round {round} flushed"));
            }
            _ => {}
        }
    }
    // Keys expiring soon, then active expiry deletes exactly those.
    let soon = expiry_now() + 300;
    let mut p = redis::pipe();
    for (i, (k, e)) in model.iter_mut().enumerate() {
        if i % 3 == 0 {
            p.cmd("PEXPIREAT").arg(k).arg(soon).ignore();
            *e = Some(soon);
        }
    }
    p.query::<()>(&mut c).unwrap();
    check_counts(&t, &mut c, &model, "before expiry");
    std::thread::sleep(Duration::from_millis(400));
    // Expired keys count until deleted, but no command sees them.
    check_counts(&t, &mut c, &model, "expired, not yet deleted");
    let gone: Vec<String> = model
        .iter()
        .filter(|(_, e)| **e == Some(soon))
        .map(|(k, _)| k.clone())
        .collect();
    for k in &gone {
        assert_eq!(run(&mut c, &["EXISTS", k]).unwrap(), Value::Int(0), "{k}");
    }
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]).unwrap();
    for k in &gone {
        model.remove(k);
    }
    eventually("active expiry", || dbsize(&mut c) == model.len() as i64);
    check_counts(&t, &mut c, &model, "after active expiry");
    let expired = info_field(&info(&mut c, "stats"), "expired_keys");
    assert_eq!(expired, gone.len() as u64);
}

fn expiry_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn expired_separated_values_are_reclaimed_by_compaction() {
    let t = start();
    let mut c = t.client();
    // Compaction alone must reclaim them: active expiry is off.
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let big = "b".repeat(4096);
    let mut p = redis::pipe();
    for i in 0..200 {
        p.cmd("SET")
            .arg(format!("gone{i}"))
            .arg(&big)
            .arg("PX")
            .arg(300)
            .ignore();
        p.cmd("SET").arg(format!("kept{i}")).arg(&big).ignore();
    }
    p.query::<()>(&mut c).unwrap();
    let db = &t.server.state().store.db;
    db.flush().unwrap();
    let before = db.stats().blob_live_bytes;
    assert!(before >= 400 * 4096, "values were separated: {before}");
    std::thread::sleep(Duration::from_millis(400));
    db.compact_range(None, None).unwrap();
    let after = db.stats().blob_live_bytes;
    assert!(
        after * 100 <= before * 52,
        "live blob bytes {before} -> {after}: the expired half should be garbage"
    );
    // The keys are still counted (nothing deleted them), never seen.
    assert_eq!(dbsize(&mut c), 400);
    assert_eq!(run(&mut c, &["GET", "gone7"]).unwrap(), Value::Nil);
    assert_eq!(
        run(&mut c, &["GET", "kept7"]).unwrap(),
        Value::BulkString(big.clone().into_bytes())
    );
    let keys: Vec<String> = redis::cmd("KEYS").arg("gone*").query(&mut c).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]).unwrap();
    eventually("active expiry", || dbsize(&mut c) == 200);
    // A key set again after its payload was dropped is whole again.
    run(&mut c, &["SET", "gone7", "back"]).unwrap();
    assert_eq!(
        run(&mut c, &["GET", "gone7"]).unwrap(),
        Value::BulkString(b"back".to_vec())
    );
    assert_eq!(dbsize(&mut c), 201);
}

#[test]
fn flushall_is_one_write_and_compaction_drops_the_old_generation() {
    let t = start();
    let mut c = t.client();
    // Active expiry walks the expiry index ten times a second while any key
    // has a deadline; off, so that the only walk this could count is
    // FLUSHALL's own.
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let big = "f".repeat(2048);
    let mut p = redis::pipe();
    for i in 0..2000 {
        p.cmd("SET").arg(format!("k{i}")).arg(&big).ignore();
        if i % 2 == 0 {
            p.cmd("PEXPIRE")
                .arg(format!("k{i}"))
                .arg(3_600_000)
                .ignore();
        }
    }
    p.query::<()>(&mut c).unwrap();
    let db = &t.server.state().store.db;
    db.flush().unwrap();
    let keys_written = db.stats().keys_written;
    let iterators = db.stats().iterators;
    run(&mut c, &["FLUSHALL"]).unwrap();
    let st = db.stats();
    assert_eq!(
        st.keys_written - keys_written,
        1,
        "FLUSHALL writes one record"
    );
    assert_eq!(st.iterators, iterators, "FLUSHALL walks nothing");
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(run(&mut c, &["GET", "k1"]).unwrap(), Value::Nil);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert!(keys.is_empty());
    run(&mut c, &["SET", "after", "1"]).unwrap();
    db.compact_range(None, None).unwrap();
    let st = db.stats();
    assert!(
        st.blob_live_bytes < 2048 && st.sst_bytes < 64 << 10,
        "the old generation is gone: {} live blob bytes, {} table bytes",
        st.blob_live_bytes,
        st.sst_bytes
    );
    let t = t.restart_with(|_| {});
    let mut c = t.client();
    assert_eq!(dbsize(&mut c), 1);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert_eq!(keys, vec!["after".to_string()]);
}

#[test]
fn a_format_1_store_is_moved_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = tern::Db::open(dir.path(), tern::Options::default()).unwrap();
        // Format 1: 's' ‖ key → version 1, flags, [expiry], payload.
        let v1 = |payload: &str, expiry: Option<u64>| {
            let mut v = vec![1u8, u8::from(expiry.is_some())];
            if let Some(t) = expiry {
                v.extend_from_slice(&t.to_be_bytes());
            }
            v.extend_from_slice(payload.as_bytes());
            v
        };
        for i in 0..2500 {
            db.put(format!("sold{i}").as_bytes(), &v1("value", None))
                .unwrap();
        }
        db.put(b"sttl", &v1("t", Some(4_000_000_000_000))).unwrap();
        db.put(b"sexpired", &v1("t", Some(1))).unwrap();
        db.close().unwrap();
    }
    let server = tern_server::start(
        common::test_config(dir.path()),
        tern_server::StartOptions::default(),
    )
    .unwrap();
    let t = common::TestServer { server, dir };
    let mut c = t.client();
    assert_eq!(
        run(&mut c, &["GET", "old2499"]).unwrap(),
        Value::BulkString(b"value".to_vec())
    );
    assert_eq!(
        run(&mut c, &["PEXPIRETIME", "ttl"]).unwrap(),
        Value::Int(4_000_000_000_000)
    );
    assert_eq!(run(&mut c, &["GET", "expired"]).unwrap(), Value::Nil);
    // The expired key was counted and indexed, so active expiry removes it.
    eventually("active expiry", || dbsize(&mut c) == 2501);
    let store = &t.server.state().store;
    let meta = store.meta();
    assert_eq!(store.recount(meta.generation).unwrap(), meta);
    assert_eq!(meta.expires, 1);
}

#[test]
fn the_longest_accepted_key_takes_an_expiry_without_failing_its_group() {
    let t = start();
    let mut c = t.client();
    let max = t.server.state().max_key_len;
    let longest = "k".repeat(max);
    let too_long = "k".repeat(max + 1);
    // One pipeline, so the writes share a commit group.
    let resp = |args: &[&str]| {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        out
    };
    let input = [
        resp(&["SET", "a", "1"]),
        resp(&["SET", &longest, "v", "PX", "3600000"]),
        resp(&["SET", &too_long, "v"]),
        resp(&["SET", "b", "2"]),
    ]
    .concat();
    let out = common::raw(t.addr(), input.as_bytes());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], "+OK");
    assert_eq!(lines[1], "+OK", "the longest key, with its index entry");
    assert!(lines[2].starts_with("-ERR key of"), "{}", lines[2]);
    assert_eq!(lines[3], "+OK");
    assert_eq!(
        run(&mut c, &["GET", &longest]).unwrap(),
        Value::BulkString(b"v".to_vec())
    );
    assert_eq!(dbsize(&mut c), 3);
}

#[test]
fn writes_after_flushall_in_one_pipeline_land_in_the_new_generation() {
    let t = start();
    let mut c = t.client();
    let replies: Vec<Value> = redis::pipe()
        .cmd("SET")
        .arg("a")
        .arg("1")
        .cmd("SET")
        .arg("gone")
        .arg("x")
        .cmd("FLUSHALL")
        .cmd("SET")
        .arg("b")
        .arg("2")
        .cmd("INCR")
        .arg("a")
        .cmd("PEXPIRE")
        .arg("b")
        .arg(3_600_000)
        .query(&mut c)
        .unwrap();
    assert_eq!(replies[4], Value::Int(1), "INCR sees the flush");
    assert_eq!(dbsize(&mut c), 2);
    assert_eq!(run(&mut c, &["GET", "gone"]).unwrap(), Value::Nil);
    let store = &t.server.state().store;
    let meta = store.meta();
    assert_eq!((meta.generation, meta.keys, meta.expires), (1, 2, 1));
    assert_eq!(store.recount(meta.generation).unwrap(), meta);
}
