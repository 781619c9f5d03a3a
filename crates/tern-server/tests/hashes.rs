#![allow(clippy::unwrap_used)]
//! Hashes on the engine: a field is one engine key, so a field read is a
//! point lookup whatever the hash's size, DEL writes one tombstone, and
//! compaction reclaims the fields of a deleted, overwritten or expired
//! hash. Transactions: concurrent WATCH/MULTI/EXEC increments lose nothing.

mod common;

use std::time::{Duration, Instant};

use common::{run, start};
use redis::Value;

fn hlen(c: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("HLEN").arg(key).query(c).unwrap()
}

/// Fills `key` with `n` fields `f{i}` of `value`, 1000 fields per HSET.
fn fill(c: &mut redis::Connection, key: &str, n: usize, value: &str) {
    for chunk in (0..n).step_by(20_000) {
        let mut p = redis::pipe();
        for start in (chunk..(chunk + 20_000).min(n)).step_by(1000) {
            let mut hset = redis::cmd("HSET");
            hset.arg(key);
            for i in start..(start + 1000).min(n) {
                hset.arg(format!("f{i}")).arg(value);
            }
            p.add_command(hset).ignore();
        }
        p.query::<()>(c).unwrap();
    }
}

fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_field_read_is_a_point_lookup_and_del_one_write_whatever_the_hash_size() {
    let n: usize = std::env::var("TERN_BIG_HASH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let t = start();
    let mut c = t.client();
    fill(&mut c, "big", n, "value");
    assert_eq!(hlen(&mut c, "big"), n as i64);
    run(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]).unwrap();
    let db = &t.server.state().store.db;
    db.flush().unwrap();
    let before = db.stats();
    for i in (0..n).step_by(n / 100) {
        let v: Option<String> = redis::cmd("HGET")
            .arg("big")
            .arg(format!("f{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(v.as_deref(), Some("value"));
    }
    let missing: Option<String> = redis::cmd("HGET")
        .arg("big")
        .arg("nope")
        .query(&mut c)
        .unwrap();
    assert_eq!(missing, None);
    let after = db.stats();
    assert!(
        // The HGET of a missing field checks the hash's metadata once more
        // (a field not found counts only if its hash is still the same).
        after.point_reads - before.point_reads <= 2 * 102 + 1,
        "{} point reads for 102 HGETs",
        after.point_reads - before.point_reads
    );
    assert_eq!(after.iterators, before.iterators, "HGET must not iterate");
    // DEL writes the metadata record's tombstone, not one per field.
    let written = db.stats().keys_written;
    assert_eq!(run(&mut c, &["DEL", "big"]).unwrap(), Value::Int(1));
    let wrote = db.stats().keys_written - written;
    assert!(wrote <= 4, "DEL wrote {wrote} keys");
    assert_eq!(hlen(&mut c, "big"), 0);
    let v: Option<String> = redis::cmd("HGET")
        .arg("big")
        .arg("f1")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, None, "a deleted hash's fields are gone at once");
    // A new hash under the same key never sees the old fields.
    run(&mut c, &["HSET", "big", "f2", "new"]).unwrap();
    assert_eq!(hlen(&mut c, "big"), 1);
    let all: Vec<String> = redis::cmd("HGETALL").arg("big").query(&mut c).unwrap();
    assert_eq!(all, ["f2", "new"]);
}

#[test]
fn compaction_reclaims_the_fields_of_deleted_overwritten_and_expired_hashes() {
    let t = start();
    let mut c = t.client();
    let big = "b".repeat(4096);
    for key in ["deleted", "overwritten", "expired", "kept"] {
        fill(&mut c, key, 100, &big);
    }
    run(&mut c, &["PEXPIRE", "expired", "200"]).unwrap();
    let db = &t.server.state().store.db;
    db.flush().unwrap();
    let before = db.stats().blob_live_bytes;
    assert!(before >= 400 * 4096, "fields were separated: {before}");
    assert_eq!(common::member_keys(&t), 400);

    run(&mut c, &["DEL", "deleted"]).unwrap();
    run(&mut c, &["SET", "overwritten", "now a string"]).unwrap();
    // Expired, then deleted by active expiry: its fields are garbage from
    // then on (a PERSIST could still keep an expired hash before that).
    eventually("the hash to expire and be deleted", || {
        t.server.state().store.meta().keys == 2
    });
    db.flush().unwrap();
    db.compact_range(None, None).unwrap();
    let after = db.stats().blob_live_bytes;
    assert!(
        after * 100 <= before * 27,
        "live blob bytes {before} -> {after}: three of four hashes are garbage"
    );
    assert_eq!(
        common::member_keys(&t),
        100,
        "only the kept hash's fields remain"
    );
    assert_eq!(hlen(&mut c, "kept"), 100);
    let v: String = redis::cmd("HGET")
        .arg("kept")
        .arg("f99")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, big);
    // The counts are what a walk of the store finds.
    let store = &t.server.state().store;
    assert_eq!(
        store.recount(store.meta().generation).unwrap(),
        store.meta()
    );
}

#[test]
fn hashes_and_their_versions_survive_a_restart() {
    let t = start();
    let mut c = t.client();
    run(&mut c, &["HSET", "h", "a", "1", "b", "2"]).unwrap();
    run(&mut c, &["DEL", "h"]).unwrap();
    run(&mut c, &["HSET", "h", "c", "3"]).unwrap();
    run(&mut c, &["HSET", "other", "x", "y"]).unwrap();
    drop(c);
    let t = t.restart_with(|_| {});
    let mut c = t.client();
    let all: Vec<String> = redis::cmd("HGETALL").arg("h").query(&mut c).unwrap();
    assert_eq!(all, ["c", "3"]);
    // Versions continue after the restart: a hash deleted and created
    // again never reuses one, so old fields never come back.
    run(&mut c, &["DEL", "h"]).unwrap();
    run(&mut c, &["HSET", "h", "d", "4"]).unwrap();
    let all: Vec<String> = redis::cmd("HGETALL").arg("h").query(&mut c).unwrap();
    assert_eq!(all, ["d", "4"]);
    assert_eq!(
        run(&mut c, &["TYPE", "other"]).unwrap(),
        Value::SimpleString("hash".into())
    );
}

#[test]
fn concurrent_watch_multi_exec_increments_lose_nothing() {
    let t = start();
    let threads = 4;
    let per_thread = 100;
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let mut c = t.client();
            std::thread::spawn(move || {
                let mut retries = 0;
                for _ in 0..per_thread {
                    loop {
                        run(&mut c, &["WATCH", "counter", "h"]).unwrap();
                        let cur: Option<i64> =
                            redis::cmd("GET").arg("counter").query(&mut c).unwrap();
                        let field: Option<i64> =
                            redis::cmd("HGET").arg("h").arg("n").query(&mut c).unwrap();
                        let next = cur.unwrap_or(0) + 1;
                        let r: Option<Vec<Value>> = redis::pipe()
                            .atomic()
                            .cmd("SET")
                            .arg("counter")
                            .arg(next)
                            .cmd("HSET")
                            .arg("h")
                            .arg("n")
                            .arg(next)
                            .query(&mut c)
                            .unwrap();
                        if r.is_some() {
                            // Nothing changed since WATCH, so both reads saw
                            // one state, which every EXEC left consistent.
                            assert_eq!(cur, field, "the two writes of one EXEC are seen together");
                            break;
                        }
                        retries += 1;
                    }
                }
                retries
            })
        })
        .collect();
    let retries: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let mut c = t.client();
    let v: i64 = redis::cmd("GET").arg("counter").query(&mut c).unwrap();
    assert_eq!(v, (threads * per_thread) as i64, "after {retries} retries");
    eprintln!("{retries} transactions retried after a WATCH conflict");
}
