#![allow(clippy::unwrap_used)]
//! Sets, lists and sorted sets on the engine: a member read is a point
//! lookup whatever the value's size, DEL is one write, compaction reclaims
//! the members of deleted values and never those of a value created again
//! under the same key, reads racing writes see one state of a value, and a
//! key too long for its members' engine keys is refused without failing
//! the writes committed with it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{run, start};
use redis::Value;

/// How long the compaction filter trusts that a value it looked up is
/// live (and keeps its members), plus a margin.
const FILTER_MEMORY: std::time::Duration = std::time::Duration::from_millis(600);

fn compact(t: &common::TestServer) {
    let db = &t.server.state().store.db;
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
}

#[test]
fn compaction_keeps_the_members_of_a_value_created_again_after_one_was_deleted() {
    let t = start();
    let mut c = t.client();
    run(&mut c, &["HSET", "h", "a", "1", "b", "2"]).unwrap();
    run(&mut c, &["SET", "other", "x"]).unwrap();
    compact(&t);
    // The filter learns that `h` holds nothing (once what it remembers of
    // the live hash has aged out).
    run(&mut c, &["DEL", "h"]).unwrap();
    std::thread::sleep(FILTER_MEMORY);
    compact(&t);
    assert_eq!(common::member_keys(&t), 0);
    // `h` is created again; a later compaction meets its fields.
    run(&mut c, &["HSET", "h", "c", "3", "d", "4"]).unwrap();
    compact(&t);
    let all: Vec<String> = redis::cmd("HGETALL").arg("h").query(&mut c).unwrap();
    assert_eq!(all, ["c", "3", "d", "4"], "the new hash's fields survive");
    // Overwritten by a newer value of another kind and back again.
    run(&mut c, &["DEL", "h"]).unwrap();
    run(&mut c, &["SADD", "h", "m"]).unwrap();
    compact(&t);
    run(&mut c, &["DEL", "h"]).unwrap();
    std::thread::sleep(FILTER_MEMORY);
    compact(&t);
    run(&mut c, &["RPUSH", "h", "x", "y"]).unwrap();
    compact(&t);
    let l: Vec<String> = redis::cmd("LRANGE")
        .arg("h")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(l, ["x", "y"]);
    assert_eq!(common::member_keys(&t), 2);
}

#[test]
fn a_list_key_too_long_for_its_elements_is_refused_and_the_rest_commits() {
    let t = start();
    let mut c = t.client();
    // The longest key a string may have: a list's element keys need more.
    let longest = "k".repeat(t.server.state().max_key_len);
    run(&mut c, &["SET", &longest, "fits"]).unwrap();
    let replies: Vec<Result<Value, String>> = {
        let mut p = redis::pipe();
        p.cmd("SET").arg("before").arg(1);
        p.cmd("RPUSH").arg(&longest[1..]).arg("x");
        p.cmd("SET").arg("after").arg(2);
        use redis::ConnectionLike;
        c.req_packed_commands(&p.get_packed_pipeline(), 0, 3)
            .unwrap()
            .into_iter()
            .map(|v| match v {
                Value::ServerError(e) => Err(common::error_text(e.into())),
                v => Ok(v),
            })
            .collect()
    };
    assert_eq!(replies[0], Ok(Value::Okay));
    let err = replies[1].clone().unwrap_err();
    assert!(err.contains("exceeds the longest member"), "{err}");
    assert_eq!(replies[2], Ok(Value::Okay));
    for (k, v) in [("before", "1"), ("after", "2")] {
        let got: String = redis::cmd("GET").arg(k).query(&mut c).unwrap();
        assert_eq!(got, v);
    }
}

#[test]
fn list_reads_racing_pushes_and_pops_see_one_state_of_the_list() {
    let t = start();
    let mut c = t.client();
    for i in 0..20 {
        run(&mut c, &["RPUSH", "q", &i.to_string()]).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let mut w = t.client();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut next = 20u64;
            while !stop.load(Ordering::Relaxed) {
                // A queue of consecutive numbers, 20 long between commands.
                let mut p = redis::pipe();
                p.atomic()
                    .cmd("RPUSH")
                    .arg("q")
                    .arg(next)
                    .ignore()
                    .cmd("LPOP")
                    .arg("q")
                    .ignore();
                p.query::<()>(&mut w).unwrap();
                next += 1;
            }
            next
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut reads = 0;
    while std::time::Instant::now() < deadline {
        let all: Vec<u64> = redis::cmd("LRANGE")
            .arg("q")
            .arg(0)
            .arg(-1)
            .query(&mut c)
            .unwrap();
        assert_eq!(all.len(), 20, "{all:?}");
        assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "{all:?}");
        // Commands run one after another, so the queue moves on between
        // them, but never backwards and never with a hole.
        let first: u64 = redis::cmd("LINDEX").arg("q").arg(0).query(&mut c).unwrap();
        assert!(first >= all[0], "{first} after {all:?}");
        let last: u64 = redis::cmd("LINDEX").arg("q").arg(-1).query(&mut c).unwrap();
        assert!(last >= first + 19, "{first}..{last}");
        let pos: Option<i64> = redis::cmd("LPOS").arg("q").arg(last).query(&mut c).unwrap();
        assert!(pos.is_none_or(|p| p <= 19), "{pos:?}");
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let pushed = writer.join().unwrap();
    assert!(reads > 10 && pushed > 30, "{reads} reads, {pushed} pushes");
}

#[test]
fn a_big_sorted_set_answers_point_reads_with_point_lookups_and_del_at_once() {
    let n: usize = std::env::var("TERN_BIG_ZSET")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let t = start();
    let mut c = t.client();
    for chunk in (0..n).step_by(20_000) {
        let mut p = redis::pipe();
        for start in (chunk..(chunk + 20_000).min(n)).step_by(1000) {
            let mut z = redis::cmd("ZADD");
            z.arg("big");
            for i in start..(start + 1000).min(n) {
                z.arg(i as f64 * 0.5).arg(format!("m{i}"));
            }
            p.add_command(z).ignore();
        }
        p.query::<()>(&mut c).unwrap();
    }
    assert_eq!(
        run(&mut c, &["ZCARD", "big"]).unwrap(),
        Value::Int(n as i64)
    );
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let db = &t.server.state().store.db;
    db.flush().unwrap();
    let before = db.stats();
    for i in (0..n).step_by(n / 100) {
        let s: f64 = redis::cmd("ZSCORE")
            .arg("big")
            .arg(format!("m{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(s, i as f64 * 0.5);
    }
    let after = db.stats();
    assert!(
        after.point_reads - before.point_reads <= 2 * 101,
        "{} point reads for 100 ZSCOREs",
        after.point_reads - before.point_reads
    );
    assert_eq!(after.iterators, before.iterators, "ZSCORE must not iterate");
    // A score range reads the members in it, not the whole set.
    let top: Vec<String> = redis::cmd("ZREVRANGE")
        .arg("big")
        .arg(0)
        .arg(2)
        .query(&mut c)
        .unwrap();
    assert_eq!(
        top,
        [
            format!("m{}", n - 1),
            format!("m{}", n - 2),
            format!("m{}", n - 3)
        ]
    );
    let some: Vec<String> = redis::cmd("ZRANGEBYSCORE")
        .arg("big")
        .arg("(10")
        .arg(12)
        .query(&mut c)
        .unwrap();
    assert_eq!(some, ["m21", "m22", "m23", "m24"]);
    let written = db.stats().keys_written;
    assert_eq!(run(&mut c, &["DEL", "big"]).unwrap(), Value::Int(1));
    assert!(db.stats().keys_written - written <= 4, "DEL is one write");
    assert_eq!(run(&mut c, &["ZCARD", "big"]).unwrap(), Value::Int(0));
    // Compaction reclaims both the score records and the score index.
    assert_eq!(common::member_keys(&t), 2 * n);
    compact(&t);
    assert_eq!(common::member_keys(&t), 0);
    let store = &t.server.state().store;
    assert_eq!(
        store.recount(store.meta().generation).unwrap(),
        store.meta()
    );
}

#[test]
fn sets_and_lists_of_deleted_or_expired_keys_are_reclaimed_by_compaction() {
    let t = start();
    let mut c = t.client();
    for i in 0..500 {
        let m = i.to_string();
        run(&mut c, &["SADD", "s", &m]).unwrap();
        run(&mut c, &["RPUSH", "l", &m]).unwrap();
        run(&mut c, &["SADD", "kept", &m]).unwrap();
    }
    run(&mut c, &["PEXPIRE", "l", "1"]).unwrap();
    run(&mut c, &["DEL", "s"]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(run(&mut c, &["EXISTS", "l"]).unwrap(), Value::Int(0));
    assert_eq!(common::member_keys(&t), 1500);
    // Active expiry deletes the expired list (its members are garbage from
    // then on, not before).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while t.server.state().store.meta().keys > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "active expiry never deleted l"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    compact(&t);
    assert_eq!(
        common::member_keys(&t),
        500,
        "only the kept set's members remain"
    );
    assert_eq!(run(&mut c, &["SCARD", "kept"]).unwrap(), Value::Int(500));
}

#[test]
fn srandmember_and_hrandfield_with_a_huge_negative_count_are_refused_not_fatal() {
    let t = start();
    let mut c = t.client();
    run(&mut c, &["SADD", "s", "a"]).unwrap();
    run(&mut c, &["HSET", "h", "f", "v"]).unwrap();
    for cmd in [
        vec!["SRANDMEMBER", "s", "-10000000000"],
        vec!["SRANDMEMBER", "s", "-9000000000000000000"],
        vec!["HRANDFIELD", "h", "-1000000000000"],
        vec!["HRANDFIELD", "h", "-4000000000000000000", "WITHVALUES"],
    ] {
        let err = run(&mut c, &cmd).unwrap_err();
        assert!(err.contains("too large"), "{cmd:?}: {err}");
    }
    // Small negative counts still repeat members, as in Redis.
    let picks: Vec<String> = redis::cmd("SRANDMEMBER")
        .arg("s")
        .arg(-5)
        .query(&mut c)
        .unwrap();
    assert_eq!(picks, ["a"; 5]);
    assert_eq!(
        run(&mut c, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
}

#[test]
fn the_members_of_an_expired_value_stay_until_the_value_is_deleted() {
    let t = start();
    let mut c = t.client();
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    for i in 0..50 {
        run(&mut c, &["HSET", "h", &format!("f{i}"), "v"]).unwrap();
    }
    run(&mut c, &["PEXPIRE", "h", "1"]).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(run(&mut c, &["EXISTS", "h"]).unwrap(), Value::Int(0));
    // Expired but not yet deleted: a PERSIST or EXPIRE decided a moment
    // before the expiry may still be on its way to the engine, so the
    // fields must outlive compaction until the key itself is deleted.
    compact(&t);
    assert_eq!(common::member_keys(&t), 50);
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while t.server.state().store.meta().keys > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "active expiry never deleted h"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(FILTER_MEMORY);
    compact(&t);
    assert_eq!(common::member_keys(&t), 0);
}

#[test]
fn lmove_of_a_one_element_list_onto_itself_keeps_its_expiry() {
    let t = start();
    let mut c = t.client();
    run(&mut c, &["RPUSH", "q", "x"]).unwrap();
    run(&mut c, &["EXPIRE", "q", "100"]).unwrap();
    for cmd in [
        vec!["LMOVE", "q", "q", "LEFT", "RIGHT"],
        vec!["RPOPLPUSH", "q", "q"],
    ] {
        assert_eq!(run(&mut c, &cmd).unwrap(), Value::BulkString(b"x".to_vec()));
        let ttl: i64 = redis::cmd("TTL").arg("q").query(&mut c).unwrap();
        assert!(ttl > 90, "{cmd:?} dropped the TTL: {ttl}");
    }
    let l: Vec<String> = redis::cmd("LRANGE")
        .arg("q")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(l, ["x"]);
}

#[test]
fn list_reads_racing_flushes_see_the_list_or_nothing() {
    let t = start();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let mut w = t.client();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(Ordering::Relaxed) {
                run(&mut w, &["RPUSH", "L", "a", "b", "c"]).unwrap();
                run(&mut w, &["FLUSHDB"]).unwrap();
                rounds += 1;
            }
            rounds
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let mut r = t.client();
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
                let mut n = 0;
                while std::time::Instant::now() < deadline {
                    let l = run(&mut r, &["LRANGE", "L", "0", "-1"]).unwrap();
                    let ok = l == Value::Array(vec![])
                        || l == Value::Array(
                            ["a", "b", "c"]
                                .iter()
                                .map(|s| Value::BulkString(s.as_bytes().to_vec()))
                                .collect(),
                        );
                    assert!(ok, "{l:?}");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let reads: usize = readers.into_iter().map(|h| h.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(reads > 10 && rounds > 10, "{reads} reads, {rounds} flushes");
}
