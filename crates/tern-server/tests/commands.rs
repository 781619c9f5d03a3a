#![allow(clippy::unwrap_used)]
//! Every supported command through the `redis` crate, checking replies and
//! error texts against Redis's.

mod common;

use common::{run, start};
use redis::{Commands, Value};

fn s(v: &str) -> Value {
    Value::BulkString(v.as_bytes().to_vec())
}

fn err_of(con: &mut redis::Connection, args: &[&str]) -> String {
    run(con, args).unwrap_err()
}

#[test]
fn get_set_and_options() {
    let t = start();
    let mut c = t.client();
    assert_eq!(run(&mut c, &["GET", "k"]), Ok(Value::Nil));
    assert_eq!(run(&mut c, &["SET", "k", "v"]), Ok(Value::Okay));
    assert_eq!(run(&mut c, &["GET", "k"]), Ok(s("v")));
    assert_eq!(run(&mut c, &["SET", "k", "w", "NX"]), Ok(Value::Nil));
    assert_eq!(run(&mut c, &["SET", "k", "w", "XX", "GET"]), Ok(s("v")));
    assert_eq!(run(&mut c, &["SET", "new", "w", "XX"]), Ok(Value::Nil));
    assert_eq!(
        run(&mut c, &["SET", "new", "1", "NX", "GET"]),
        Ok(Value::Nil)
    );
    assert_eq!(run(&mut c, &["GET", "new"]), Ok(s("1")));
    assert_eq!(
        run(&mut c, &["SET", "k", "x", "EX", "100"]),
        Ok(Value::Okay)
    );
    let ttl: i64 = c.ttl("k").unwrap();
    assert!((99..=100).contains(&ttl));
    assert_eq!(run(&mut c, &["SET", "k", "y", "KEEPTTL"]), Ok(Value::Okay));
    assert!(c.ttl::<_, i64>("k").unwrap() > 90);
    assert_eq!(run(&mut c, &["SET", "k", "z"]), Ok(Value::Okay));
    assert_eq!(c.ttl::<_, i64>("k").unwrap(), -1);
    assert_eq!(
        run(&mut c, &["SET", "k", "z", "PX", "100000"]),
        Ok(Value::Okay)
    );
    assert!(c.pttl::<_, i64>("k").unwrap() > 99_000);
    let at = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1000)
        .to_string();
    assert_eq!(
        run(&mut c, &["SET", "k", "z", "EXAT", &at]),
        Ok(Value::Okay)
    );
    assert!(c.ttl::<_, i64>("k").unwrap() > 990);
    let atms = format!("{}000", at);
    assert_eq!(
        run(&mut c, &["SET", "k", "z", "PXAT", &atms]),
        Ok(Value::Okay)
    );
    assert!(c.ttl::<_, i64>("k").unwrap() > 990);
    assert_eq!(
        err_of(&mut c, &["SET", "k", "v", "NX", "XX"]),
        "ERR syntax error"
    );
    assert_eq!(
        err_of(&mut c, &["SET", "k", "v", "EX", "1", "PX", "1"]),
        "ERR syntax error"
    );
    assert_eq!(
        err_of(&mut c, &["SET", "k", "v", "EX", "0"]),
        "ERR invalid expire time in 'set' command"
    );
    assert_eq!(
        err_of(&mut c, &["SET", "k", "v", "EX", "x"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err_of(&mut c, &["SET", "k"]),
        "ERR wrong number of arguments for 'set' command"
    );
    assert_eq!(run(&mut c, &["SET", "", "empty key"]), Ok(Value::Okay));
    assert_eq!(run(&mut c, &["GET", ""]), Ok(s("empty key")));
}

#[test]
fn set_variants() {
    let t = start();
    let mut c = t.client();
    assert_eq!(run(&mut c, &["SETNX", "a", "1"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut c, &["SETNX", "a", "2"]), Ok(Value::Int(0)));
    assert_eq!(run(&mut c, &["SETEX", "b", "100", "v"]), Ok(Value::Okay));
    assert!(c.ttl::<_, i64>("b").unwrap() > 90);
    assert_eq!(
        err_of(&mut c, &["SETEX", "b", "-1", "v"]),
        "ERR invalid expire time in 'setex' command"
    );
    assert_eq!(
        run(&mut c, &["PSETEX", "b", "100000", "w"]),
        Ok(Value::Okay)
    );
    assert!(c.pttl::<_, i64>("b").unwrap() > 90_000);
    assert_eq!(
        err_of(&mut c, &["PSETEX", "b", "0", "v"]),
        "ERR invalid expire time in 'psetex' command"
    );
    assert_eq!(run(&mut c, &["GETSET", "b", "x"]), Ok(s("w")));
    assert_eq!(c.ttl::<_, i64>("b").unwrap(), -1, "GETSET clears the TTL");
    assert_eq!(run(&mut c, &["GETSET", "nokey", "x"]), Ok(Value::Nil));
    assert_eq!(run(&mut c, &["GETDEL", "b"]), Ok(s("x")));
    assert_eq!(run(&mut c, &["GETDEL", "b"]), Ok(Value::Nil));
    assert_eq!(run(&mut c, &["GETEX", "a", "EX", "100"]), Ok(s("1")));
    assert!(c.ttl::<_, i64>("a").unwrap() > 90);
    assert_eq!(run(&mut c, &["GETEX", "a"]), Ok(s("1")));
    assert!(c.ttl::<_, i64>("a").unwrap() > 90);
    assert_eq!(run(&mut c, &["GETEX", "a", "PERSIST"]), Ok(s("1")));
    assert_eq!(c.ttl::<_, i64>("a").unwrap(), -1);
    assert_eq!(run(&mut c, &["GETEX", "a", "PXAT", "1"]), Ok(s("1")));
    assert_eq!(run(&mut c, &["EXISTS", "a"]), Ok(Value::Int(0)));
    assert_eq!(
        run(&mut c, &["GETEX", "a", "KEEPTTL"]).unwrap_err(),
        "ERR syntax error"
    );
    assert_eq!(run(&mut c, &["MSET", "x", "1", "y", "2"]), Ok(Value::Okay));
    assert_eq!(
        run(&mut c, &["MGET", "x", "nope", "y"]),
        Ok(Value::Array(vec![s("1"), Value::Nil, s("2")]))
    );
    assert_eq!(
        err_of(&mut c, &["MSET", "x", "1", "y"]),
        "ERR wrong number of arguments for 'mset' command"
    );
    assert_eq!(
        run(&mut c, &["MSETNX", "x", "9", "z", "9"]),
        Ok(Value::Int(0))
    );
    assert_eq!(run(&mut c, &["GET", "z"]), Ok(Value::Nil));
    assert_eq!(
        run(&mut c, &["MSETNX", "z", "9", "w", "9"]),
        Ok(Value::Int(1))
    );
    assert_eq!(run(&mut c, &["GET", "w"]), Ok(s("9")));
}

#[test]
fn counters() {
    let t = start();
    let mut c = t.client();
    assert_eq!(run(&mut c, &["INCR", "n"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut c, &["INCRBY", "n", "10"]), Ok(Value::Int(11)));
    assert_eq!(run(&mut c, &["DECR", "n"]), Ok(Value::Int(10)));
    assert_eq!(run(&mut c, &["DECRBY", "n", "20"]), Ok(Value::Int(-10)));
    assert_eq!(run(&mut c, &["GET", "n"]), Ok(s("-10")));
    c.set::<_, _, ()>("big", i64::MAX).unwrap();
    assert_eq!(
        err_of(&mut c, &["INCR", "big"]),
        "ERR increment or decrement would overflow"
    );
    assert_eq!(
        err_of(&mut c, &["DECRBY", "n", "-9223372036854775808"]),
        "ERR decrement would overflow"
    );
    c.set::<_, _, ()>("s", "abc").unwrap();
    assert_eq!(
        err_of(&mut c, &["INCR", "s"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        err_of(&mut c, &["INCRBY", "n", "1.5"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(run(&mut c, &["INCRBYFLOAT", "f", "10.5"]), Ok(s("10.5")));
    assert_eq!(run(&mut c, &["INCRBYFLOAT", "f", "0.1"]), Ok(s("10.6")));
    assert_eq!(run(&mut c, &["INCRBYFLOAT", "f", "-10.6"]), Ok(s("0")));
    assert_eq!(
        err_of(&mut c, &["INCRBYFLOAT", "s", "1"]),
        "ERR value is not a valid float"
    );
    assert_eq!(
        err_of(&mut c, &["INCRBYFLOAT", "f", "x"]),
        "ERR value is not a valid float"
    );
    assert_eq!(
        err_of(&mut c, &["INCRBYFLOAT", "f", "inf"]),
        "ERR increment would produce NaN or Infinity"
    );
    // INCR keeps the TTL.
    assert_eq!(
        run(&mut c, &["SET", "t", "1", "EX", "100"]),
        Ok(Value::Okay)
    );
    assert_eq!(run(&mut c, &["INCR", "t"]), Ok(Value::Int(2)));
    assert!(c.ttl::<_, i64>("t").unwrap() > 90);
}

/// The committer remembers the integers it wrote and INCR reads them
/// from there: a remembered value must still expire, give way to a value
/// of another kind or form, and come back from the store after a restart.
#[test]
fn counters_the_committer_remembers() {
    let t = start();
    let mut c = t.client();
    assert_eq!(run(&mut c, &["SET", "n", "5"]), Ok(Value::Okay));
    assert_eq!(run(&mut c, &["INCR", "n"]), Ok(Value::Int(6)));
    // The deadline is set from the command's start; the sleep outlasts it
    // however slowly the commands run.
    assert_eq!(run(&mut c, &["PEXPIRE", "n", "200"]), Ok(Value::Int(1)));
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(run(&mut c, &["INCR", "n"]), Ok(Value::Int(1)), "expired");
    assert!(c.ttl::<_, i64>("n").unwrap() == -1);
    // Another form of a number is not an integer to Redis.
    assert_eq!(run(&mut c, &["SET", "z", "07"]), Ok(Value::Okay));
    assert_eq!(
        err_of(&mut c, &["INCR", "z"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(run(&mut c, &["SET", "z", "7"]), Ok(Value::Okay));
    assert_eq!(run(&mut c, &["INCR", "z"]), Ok(Value::Int(8)));
    assert_eq!(run(&mut c, &["APPEND", "z", "x"]), Ok(Value::Int(2)));
    assert_eq!(run(&mut c, &["GET", "z"]), Ok(s("8x")));
    assert_eq!(
        err_of(&mut c, &["INCR", "z"]),
        "ERR value is not an integer or out of range"
    );
    // Replaced by another kind, then deleted.
    assert_eq!(run(&mut c, &["INCR", "h"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut c, &["DEL", "h"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut c, &["HSET", "h", "f", "1"]), Ok(Value::Int(1)));
    assert!(err_of(&mut c, &["INCR", "h"]).starts_with("WRONGTYPE"));
    // In one pipeline, each INCR sees the one before it.
    let mut pipe = redis::pipe();
    for _ in 0..100 {
        pipe.cmd("INCR").arg("p");
    }
    let got: Vec<i64> = pipe.query(&mut c).unwrap();
    assert_eq!(got, (1..=100).collect::<Vec<_>>());
    let t = t.restart_with(|_| {});
    let mut c = t.client();
    assert_eq!(run(&mut c, &["INCR", "p"]), Ok(Value::Int(101)));
    assert_eq!(run(&mut c, &["GET", "n"]), Ok(s("1")));
}

#[test]
fn string_ranges() {
    let t = start();
    let mut c = t.client();
    assert_eq!(run(&mut c, &["APPEND", "a", "Hello"]), Ok(Value::Int(5)));
    assert_eq!(run(&mut c, &["APPEND", "a", " World"]), Ok(Value::Int(11)));
    assert_eq!(run(&mut c, &["STRLEN", "a"]), Ok(Value::Int(11)));
    assert_eq!(run(&mut c, &["STRLEN", "none"]), Ok(Value::Int(0)));
    assert_eq!(run(&mut c, &["GETRANGE", "a", "0", "4"]), Ok(s("Hello")));
    assert_eq!(run(&mut c, &["GETRANGE", "a", "-5", "-1"]), Ok(s("World")));
    assert_eq!(run(&mut c, &["GETRANGE", "a", "5", "1"]), Ok(s("")));
    assert_eq!(
        run(&mut c, &["GETRANGE", "a", "0", "100"]),
        Ok(s("Hello World"))
    );
    assert_eq!(run(&mut c, &["GETRANGE", "none", "0", "1"]), Ok(s("")));
    assert_eq!(
        run(&mut c, &["SETRANGE", "a", "6", "Redis"]),
        Ok(Value::Int(11))
    );
    assert_eq!(run(&mut c, &["GET", "a"]), Ok(s("Hello Redis")));
    assert_eq!(run(&mut c, &["SETRANGE", "p", "3", "x"]), Ok(Value::Int(4)));
    assert_eq!(
        run(&mut c, &["GET", "p"]),
        Ok(Value::BulkString(b"\0\0\0x".to_vec()))
    );
    assert_eq!(run(&mut c, &["SETRANGE", "q", "3", ""]), Ok(Value::Int(0)));
    assert_eq!(run(&mut c, &["EXISTS", "q"]), Ok(Value::Int(0)));
    assert_eq!(
        err_of(&mut c, &["SETRANGE", "a", "-1", "x"]),
        "ERR offset is out of range"
    );
    assert_eq!(
        err_of(&mut c, &["SETRANGE", "a", "600000000", "x"]),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    );
    assert_eq!(run(&mut c, &["SUBSTR", "a", "0", "4"]), Ok(s("Hello")));
}

#[test]
fn keyspace_and_expiry() {
    let t = start();
    let mut c = t.client();
    for k in ["a", "b", "c"] {
        c.set::<_, _, ()>(k, "1").unwrap();
    }
    assert_eq!(run(&mut c, &["EXISTS", "a", "a", "zz"]), Ok(Value::Int(2)));
    assert_eq!(run(&mut c, &["DEL", "a", "zz", "a"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut c, &["UNLINK", "b"]), Ok(Value::Int(1)));
    assert_eq!(
        run(&mut c, &["TYPE", "c"]),
        Ok(Value::SimpleString("string".into()))
    );
    assert_eq!(
        run(&mut c, &["TYPE", "a"]),
        Ok(Value::SimpleString("none".into()))
    );
    assert_eq!(run(&mut c, &["TTL", "a"]), Ok(Value::Int(-2)));
    assert_eq!(run(&mut c, &["TTL", "c"]), Ok(Value::Int(-1)));
    assert_eq!(run(&mut c, &["EXPIRE", "c", "100"]), Ok(Value::Int(1)));
    // 99 once half a second passed between the two (a loaded machine).
    let ttl = run(&mut c, &["TTL", "c"]);
    assert!(matches!(ttl, Ok(Value::Int(99..=100))), "TTL {ttl:?}");
    assert_eq!(run(&mut c, &["EXPIRE", "c", "50", "GT"]), Ok(Value::Int(0)));
    assert_eq!(run(&mut c, &["EXPIRE", "c", "50", "LT"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut c, &["EXPIRE", "c", "50", "NX"]), Ok(Value::Int(0)));
    assert_eq!(run(&mut c, &["EXPIRE", "c", "60", "XX"]), Ok(Value::Int(1)));
    assert_eq!(
        err_of(&mut c, &["EXPIRE", "c", "60", "NX", "XX"]),
        "ERR NX and XX, GT or LT options at the same time are not compatible"
    );
    assert_eq!(
        err_of(&mut c, &["EXPIRE", "c", "60", "FOO"]),
        "ERR Unsupported option FOO"
    );
    assert_eq!(run(&mut c, &["EXPIRE", "missing", "60"]), Ok(Value::Int(0)));
    assert_eq!(run(&mut c, &["PEXPIRE", "c", "100000"]), Ok(Value::Int(1)));
    assert!(matches!(run(&mut c, &["PTTL", "c"]), Ok(Value::Int(n)) if n > 99_000));
    let at = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 500)
        .to_string();
    assert_eq!(run(&mut c, &["EXPIREAT", "c", &at]), Ok(Value::Int(1)));
    assert_eq!(
        run(&mut c, &["EXPIRETIME", "c"]),
        Ok(Value::Int(at.parse().unwrap()))
    );
    let pat = (at.parse::<u64>().unwrap() * 1000 + 250).to_string();
    assert_eq!(run(&mut c, &["PEXPIREAT", "c", &pat]), Ok(Value::Int(1)));
    assert_eq!(
        run(&mut c, &["PEXPIRETIME", "c"]),
        Ok(Value::Int(pat.parse().unwrap()))
    );
    assert_eq!(
        run(&mut c, &["EXPIRETIME", "c"]),
        Ok(Value::Int(at.parse().unwrap()))
    );
    assert_eq!(run(&mut c, &["PEXPIRETIME", "missing"]), Ok(Value::Int(-2)));
    assert_eq!(
        run(&mut c, &["PEXPIREAT", "missing", &pat]),
        Ok(Value::Int(0))
    );
    assert_eq!(run(&mut c, &["PERSIST", "c"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut c, &["PEXPIRETIME", "c"]), Ok(Value::Int(-1)));
    assert_eq!(run(&mut c, &["PERSIST", "c"]), Ok(Value::Int(0)));
    assert_eq!(run(&mut c, &["EXPIRE", "c", "-1"]), Ok(Value::Int(1)));
    assert_eq!(run(&mut c, &["EXISTS", "c"]), Ok(Value::Int(0)));
    // Expiry is enforced on read.
    assert_eq!(
        run(&mut c, &["SET", "short", "v", "PX", "50"]),
        Ok(Value::Okay)
    );
    std::thread::sleep(std::time::Duration::from_millis(120));
    assert_eq!(run(&mut c, &["GET", "short"]), Ok(Value::Nil));
    // DBSIZE counts an expired key until active expiry deletes it, as
    // Redis does; that happens within a few of its 100 ms cycles.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while run(&mut c, &["DBSIZE"]) != Ok(Value::Int(0)) {
        assert!(
            std::time::Instant::now() < deadline,
            "active expiry never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(run(&mut c, &["SETNX", "short", "again"]), Ok(Value::Int(1)));
}

#[test]
fn scan_keys_dbsize_flush_randomkey() {
    let t = start();
    let mut c = t.client();
    assert_eq!(run(&mut c, &["RANDOMKEY"]), Ok(Value::Nil));
    for i in 0..250 {
        c.set::<_, _, ()>(format!("user:{i}"), i).unwrap();
    }
    c.set::<_, _, ()>("other", 1).unwrap();
    assert_eq!(run(&mut c, &["DBSIZE"]), Ok(Value::Int(251)));
    let mut keys: Vec<String> = c.keys("user:1*").unwrap();
    keys.sort();
    assert_eq!(keys.len(), 1 + 10 + 100);
    // A full SCAN returns every key exactly once.
    let mut cursor = "0".to_string();
    let mut seen = std::collections::BTreeSet::new();
    let mut rounds = 0;
    loop {
        let (next, batch): (String, Vec<String>) = redis::cmd("SCAN")
            .arg(&cursor)
            .arg("MATCH")
            .arg("user:*")
            .arg("COUNT")
            .arg(20)
            .query(&mut c)
            .unwrap();
        for k in batch {
            assert!(seen.insert(k));
        }
        rounds += 1;
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen.len(), 250);
    assert!(rounds > 5);
    let all: Vec<String> = c.scan().unwrap().collect();
    assert_eq!(all.len(), 251);
    assert_eq!(err_of(&mut c, &["SCAN", "abc"]), "ERR invalid cursor");
    assert_eq!(
        err_of(&mut c, &["SCAN", "0", "COUNT", "0"]),
        "ERR syntax error"
    );
    let r: (String, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("TYPE")
        .arg("hash")
        .query(&mut c)
        .unwrap();
    assert!(r.1.is_empty());
    let k: String = redis::cmd("RANDOMKEY").query(&mut c).unwrap();
    assert!(k.starts_with("user:") || k == "other");
    assert_eq!(run(&mut c, &["FLUSHDB", "ASYNC"]), Ok(Value::Okay));
    assert_eq!(run(&mut c, &["DBSIZE"]), Ok(Value::Int(0)));
    c.set::<_, _, ()>("x", 1).unwrap();
    assert_eq!(run(&mut c, &["FLUSHALL"]), Ok(Value::Okay));
    assert_eq!(run(&mut c, &["KEYS", "*"]), Ok(Value::Array(vec![])));
    assert_eq!(err_of(&mut c, &["FLUSHDB", "NOW"]), "ERR syntax error");
}

#[test]
fn connection_and_server_commands() {
    let t = start();
    let mut c = t.client();
    assert_eq!(
        run(&mut c, &["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
    assert_eq!(run(&mut c, &["PING", "hi"]), Ok(s("hi")));
    assert_eq!(run(&mut c, &["ECHO", "x y"]), Ok(s("x y")));
    assert_eq!(run(&mut c, &["SELECT", "0"]), Ok(Value::Okay));
    assert_eq!(
        err_of(&mut c, &["SELECT", "1"]),
        "ERR DB index is out of range"
    );
    assert_eq!(
        err_of(&mut c, &["AUTH", "pw"]),
        "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
    );
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for section in [
        "# Server",
        "# Clients",
        "# Stats",
        "# Keyspace",
        "# Tern",
        "redis_version:",
        "engine_wal_bytes_written:",
    ] {
        assert!(info.contains(section), "INFO lacks {section}: {info}");
    }
    let ks: String = redis::cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert!(!ks.contains("# Server"));
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendf*")
        .query(&mut c)
        .unwrap();
    assert_eq!(cfg, vec!["appendfsync".to_string(), "everysec".into()]);
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .arg("appendonly")
        .query(&mut c)
        .unwrap();
    assert_eq!(cfg.len(), 4);
    assert!(err_of(&mut c, &["CONFIG", "FOO"]).starts_with("ERR unknown subcommand 'FOO'"));
    assert_eq!(run(&mut c, &["CLIENT", "GETNAME"]), Ok(Value::Nil));
    assert_eq!(
        run(&mut c, &["CLIENT", "SETNAME", "worker-1"]),
        Ok(Value::Okay)
    );
    assert_eq!(run(&mut c, &["CLIENT", "GETNAME"]), Ok(s("worker-1")));
    assert_eq!(
        err_of(&mut c, &["CLIENT", "SETNAME", "a b"]),
        "ERR Client names cannot contain spaces, newlines or special characters."
    );
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
    assert!(
        list.contains(&format!("id={id} ")) && list.contains("name=worker-1"),
        "{list}"
    );
    assert!(
        list.contains("lib-name=redis-rs"),
        "CLIENT SETINFO from the client is recorded: {list}"
    );
    let n: i64 = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    assert!(n >= 50);
    let info = run(&mut c, &["COMMAND", "INFO", "get", "nosuch"]).unwrap();
    let Value::Array(items) = info else { panic!() };
    assert_eq!(items[1], Value::Nil);
    let Value::Array(get) = &items[0] else {
        panic!()
    };
    assert_eq!(get[0], s("get"));
    assert_eq!(get[1], Value::Int(2));
    let docs = run(&mut c, &["COMMAND", "DOCS", "set"]).unwrap();
    assert!(matches!(docs, Value::Array(ref v) if v.len() == 2));
    let all = run(&mut c, &["COMMAND"]).unwrap();
    assert!(matches!(all, Value::Array(ref v) if v.len() as i64 == n));
    assert_eq!(
        err_of(&mut c, &["NOSUCH", "a", "b"]),
        "ERR unknown command 'NOSUCH', with args beginning with: 'a' 'b' "
    );
    assert_eq!(run(&mut c, &["QUIT"]), Ok(Value::Okay));
    assert!(
        run(&mut c, &["PING"]).is_err(),
        "QUIT closes the connection"
    );
}

#[test]
fn shutdown_command_stops_and_flushes() {
    let t = start();
    let dir = t.dir.path().to_path_buf();
    let mut c = t.client();
    c.set::<_, _, ()>("durable", "yes").unwrap();
    let _ = run(&mut c, &["SHUTDOWN"]);
    let common::TestServer { server, dir: _keep } = t;
    server.wait().unwrap();
    drop(server);
    let db = tern::Db::open(&dir, tern::Options::default()).unwrap();
    let v = db
        .get(&tern_server::keyspace::engine_key(0, b"durable"))
        .unwrap()
        .unwrap();
    assert_eq!(
        &tern_server::keyspace::decode_value(v).unwrap().value[..],
        b"yes"
    );
}
