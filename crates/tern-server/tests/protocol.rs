#![allow(clippy::unwrap_used)]
//! Protocol behaviour: pipelining, RESP3, authentication, limits, bad
//! input, concurrency, restarts and the metrics endpoint.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{raw, run, start, start_with};
use redis::Value;

fn s(v: &str) -> Value {
    Value::BulkString(v.as_bytes().to_vec())
}

#[test]
fn pipelines_keep_order_across_grouped_writes() {
    let t = start();
    let mut c = t.client();
    let mut p = redis::pipe();
    for i in 0..1000 {
        p.cmd("SET").arg(format!("k{i}")).arg(i);
        if i % 100 == 0 {
            p.cmd("GET").arg(format!("k{i}"));
            p.cmd("INCR").arg(format!("k{i}"));
        }
    }
    p.cmd("MSET").arg("a").arg("1").arg("b").arg("2");
    p.cmd("MGET").arg("a").arg("b").arg("k999");
    let out: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(out.len(), 1000 + 20 + 2);
    assert_eq!(
        out[1],
        s("0"),
        "a read sees the write before it in the pipeline"
    );
    assert_eq!(out[2], Value::Int(1));
    assert_eq!(
        out.last().unwrap(),
        &Value::Array(vec![s("1"), s("2"), s("999")])
    );
    assert_eq!(run(&mut c, &["DBSIZE"]), Ok(Value::Int(1002)));
    assert_eq!(run(&mut c, &["GET", "k100"]), Ok(s("101")));
}

#[test]
fn raw_pipeline_and_inline_commands() {
    let t = start();
    let out = raw(
        t.addr(),
        b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\nPING\r\nget a\r\n*1\r\n$4\r\nPING\r\nECHO \"x y\"\r\n",
    );
    assert_eq!(out, "+OK\r\n+PONG\r\n$1\r\n1\r\n+PONG\r\n$3\r\nx y\r\n");
}

#[test]
fn resp3_through_hello() {
    let t = start();
    let mut c = redis::Client::open(format!("redis://{}/?protocol=resp3", t.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(run(&mut c, &["GET", "missing"]), Ok(Value::Nil));
    let hello = run(&mut c, &["HELLO", "3"]).unwrap();
    let Value::Map(m) = hello else {
        panic!("HELLO 3 replies with a map, got {hello:?}")
    };
    assert!(m.contains(&(s("proto"), Value::Int(3))));
    let cfg = run(&mut c, &["CONFIG", "GET", "port"]).unwrap();
    assert!(matches!(cfg, Value::Map(_)), "{cfg:?}");
    let info = run(&mut c, &["INFO", "server"]).unwrap();
    assert!(matches!(info, Value::VerbatimString { .. }), "{info:?}");
    let out = raw(t.addr(), b"HELLO 3\r\nGET nope\r\nHELLO 2\r\nGET nope\r\n");
    assert!(out.starts_with("%7\r\n"), "{out}");
    assert!(
        out.contains("_\r\n*14\r\n") && out.ends_with("$-1\r\n"),
        "{out}"
    );
    assert_eq!(
        raw(t.addr(), b"HELLO 4\r\n"),
        "-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(
        raw(t.addr(), b"HELLO x\r\n"),
        "-ERR Protocol version is not an integer or out of range\r\n"
    );
}

#[test]
fn authentication() {
    let t = start_with(|c| c.requirepass = "s3cret".into());
    assert_eq!(
        raw(t.addr(), b"GET a\r\nAUTH wrong\r\nAUTH s3cret\r\nSET a 1\r\nGET a\r\n"),
        "-NOAUTH Authentication required.\r\n-WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n+OK\r\n$1\r\n1\r\n"
    );
    // Unauthenticated connections get small limits, as in Redis.
    let big = format!("*2\r\n$4\r\nECHO\r\n$20000\r\n{}\r\n", "x".repeat(20000));
    assert_eq!(
        raw(t.addr(), big.as_bytes()),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    let c = redis::Client::open(format!("redis://:wrong@{}/", t.addr())).unwrap();
    assert!(c.get_connection().is_err());
    let mut c = redis::Client::open(format!("redis://:s3cret@{}/", t.addr()))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(
        run(&mut c, &["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
    let mut c3 = redis::Client::open(format!(
        "redis://default:s3cret@{}/?protocol=resp3",
        t.addr()
    ))
    .unwrap()
    .get_connection()
    .unwrap();
    assert_eq!(run(&mut c3, &["GET", "a"]), Ok(s("1")));
    assert!(raw(t.addr(), b"HELLO 3\r\n").starts_with("-NOAUTH HELLO must be called"));
    assert!(raw(
        t.addr(),
        b"HELLO 3 AUTH default s3cret SETNAME me\r\nCLIENT GETNAME\r\n"
    )
    .ends_with("$2\r\nme\r\n"));
}

#[test]
fn malformed_requests_close_only_that_connection() {
    let t = start();
    let mut good = t.client();
    for (input, reply) in [
        (
            &b"*1\r\n:5\r\n"[..],
            "-ERR Protocol error: expected '$', got ':'\r\n",
        ),
        (
            b"*x\r\n",
            "-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n$-5\r\n",
            "-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"set a \"b\r\n",
            "-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
        (
            b"PING\r\n*1\r\n$4\r\nPINGxx",
            "+PONG\r\n-ERR Protocol error: expected CRLF after bulk string\r\n",
        ),
    ] {
        assert_eq!(raw(t.addr(), input), reply, "{input:?}");
    }
    let junk: Vec<u8> = (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect();
    let _ = raw(t.addr(), &junk);
    assert_eq!(
        run(&mut good, &["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
}

#[test]
fn limits_give_clear_errors() {
    let t = start_with(|c| {
        c.proto_max_bulk_len = 4096;
        c.max_args = 16;
        c.maxclients = 3;
        c.client_query_buffer_limit = 1 << 20;
    });
    let big = format!(
        "*3\r\n$3\r\nSET\r\n$1\r\na\r\n$5000\r\n{}\r\n",
        "x".repeat(5000)
    );
    assert_eq!(
        raw(t.addr(), big.as_bytes()),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
    assert_eq!(
        raw(t.addr(), b"*17\r\n"),
        "-ERR Protocol error: invalid multibulk length\r\n"
    );
    let long_inline = vec![b'a'; 70 * 1024];
    assert_eq!(
        raw(t.addr(), &long_inline),
        "-ERR Protocol error: too big inline request\r\n"
    );
    // maxclients: the fourth connection is refused with Redis's error. The
    // connections above are closed, but the server may not have counted
    // them out yet: one still counted would refuse the third client.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while t.server.state().connected() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "closed connections stay counted"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let c1 = t.client();
    let c2 = t.client();
    let c3 = t.client();
    std::thread::sleep(Duration::from_millis(100));
    let mut s4 = TcpStream::connect(t.addr()).unwrap();
    s4.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = String::new();
    let _ = s4.read_to_string(&mut buf);
    assert_eq!(buf, "-ERR max number of clients reached\r\n");
    drop((c1, c2, c3));
    std::thread::sleep(Duration::from_millis(200));
    let mut again = t.client();
    assert_eq!(
        run(&mut again, &["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
}

/// A flood of small complete requests (3 MiB in all, more than the query
/// buffer limit, which is per request), pipelined while replies are read:
/// every one is answered, in order, across read-chunk boundaries.
#[test]
fn pipelined_flood_is_answered_in_full_and_in_order() {
    let t = start_with(|c| c.client_query_buffer_limit = 1 << 20);
    const FLOOD: usize = 20_000;
    let mut flood = Vec::new();
    for _ in 0..FLOOD {
        flood.extend_from_slice(b"*16\r\n");
        for _ in 0..16 {
            flood.extend_from_slice(b"$4\r\nabcd\r\n");
        }
    }
    flood.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    assert!(flood.len() > 1 << 20);
    let conn = TcpStream::connect(t.addr()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = conn.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&flood));
    let mut replies = std::io::BufReader::new(conn);
    let mut line = String::new();
    for i in 0..FLOOD {
        line.clear();
        std::io::BufRead::read_line(&mut replies, &mut line).unwrap();
        assert!(
            line.starts_with("-ERR unknown command 'abcd'"),
            "reply {i} of the flood: {line:?}"
        );
    }
    line.clear();
    std::io::BufRead::read_line(&mut replies, &mut line).unwrap();
    assert_eq!(line, "+PONG\r\n", "the request after the flood");
    sender.join().unwrap().unwrap();
    drop(replies);
}

/// The start of an MSET announcing `announced` arguments after its name,
/// with `pairs` key and 600 kB value pairs of them.
fn mset_of_large_values(announced: usize, pairs: usize) -> Vec<u8> {
    let mut req = format!("*{}\r\n$4\r\nMSET\r\n", announced + 1).into_bytes();
    for _ in 0..pairs {
        req.extend_from_slice(b"$1\r\nk\r\n$600000\r\n");
        req.extend(std::iter::repeat_n(b'v', 600_000));
        req.extend_from_slice(b"\r\n");
    }
    req
}

#[test]
fn query_buffer_limit_closes_flooding_client() {
    let t = start_with(|c| {
        c.client_query_buffer_limit = 1 << 20;
        c.proto_max_bulk_len = 1 << 20;
    });
    // One request whose arguments add up to more than the buffer limit.
    let out = raw(t.addr(), &mset_of_large_values(4, 2));
    assert_eq!(
        out,
        "-ERR Protocol error: request exceeds client-query-buffer-limit (1048576 bytes); send smaller requests or raise the limit\r\n"
    );
}

#[test]
fn idle_clients_are_closed_after_timeout() {
    let t = start_with(|c| c.timeout = 1);
    let mut s = TcpStream::connect(t.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = Vec::new();
    let start = std::time::Instant::now();
    let n = s.read_to_end(&mut buf).unwrap();
    assert_eq!(n, 0);
    assert!(start.elapsed() >= Duration::from_millis(900));
}

#[test]
fn read_modify_write_is_atomic_across_connections() {
    let t = start();
    let url = t.url();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..250 {
                    run(&mut c, &["INCR", "counter"]).unwrap();
                    run(
                        &mut c,
                        &["APPEND", "log", if i % 2 == 0 { "a" } else { "b" }],
                    )
                    .unwrap();
                    // Plain SETs of other keys interleave with the RMW commands.
                    run(&mut c, &["SET", &format!("side{i}"), "x"]).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let mut c = t.client();
    assert_eq!(run(&mut c, &["GET", "counter"]), Ok(s("1000")));
    assert_eq!(run(&mut c, &["STRLEN", "log"]), Ok(Value::Int(1000)));
}

#[test]
fn restart_serves_acknowledged_data() {
    for fsync in [
        tern_server::AppendFsync::Always,
        tern_server::AppendFsync::Everysec,
        tern_server::AppendFsync::No,
    ] {
        let t = start_with(|c| c.appendfsync = fsync);
        let mut c = t.client();
        let mut p = redis::pipe();
        for i in 0..500 {
            p.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
        }
        p.cmd("SET")
            .arg("exp")
            .arg("v")
            .arg("EX")
            .arg(1000)
            .ignore();
        p.query::<()>(&mut c).unwrap();
        drop(c);
        let t = t.restart_with(|c| c.appendfsync = fsync);
        let mut c = t.client();
        assert_eq!(run(&mut c, &["DBSIZE"]), Ok(Value::Int(501)), "{fsync:?}");
        assert_eq!(run(&mut c, &["GET", "k499"]), Ok(s("499")));
        assert!(matches!(run(&mut c, &["TTL", "exp"]), Ok(Value::Int(n)) if n > 990));
    }
}

#[test]
fn metrics_endpoint_reports_commands_and_engine() {
    let t = start();
    let mut c = t.client();
    run(&mut c, &["SET", "a", "1"]).unwrap();
    run(&mut c, &["GET", "a"]).unwrap();
    let addr = t.server.metrics_addr().unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    for needle in [
        "tern_commands_total{cmd=\"get\"} 1",
        "tern_command_duration_seconds_bucket{cmd=\"get\",le=\"+Inf\"} 1",
        "tern_connected_clients 1",
        "tern_engine_wal_bytes_written_total",
        "tern_engine_level_files{level=\"0\"}",
        "tern_keyspace_hits_total 1",
    ] {
        assert!(body.contains(needle), "metrics lack {needle}:\n{body}");
    }
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 404"));
}

/// A pipeline of reads of separated values in blob files (which go to the
/// read pool, to be copied out of the files' mappings), of values in the
/// memtable and of absent keys, with writes between them: every reply is
/// the value its read should see, in order.
#[test]
fn pipelined_reads_of_separated_values_answer_in_order() {
    let t = start();
    let mut c = t.client();
    let mut model: std::collections::HashMap<String, String> = (0..40)
        .map(|i| (format!("big{i}"), format!("{i:0>1024}")))
        .collect();
    for (k, v) in &model {
        run(&mut c, &["SET", k, v]).unwrap();
    }
    t.server.state().store.db.flush().unwrap();
    run(&mut c, &["SET", "small", "s"]).unwrap();
    model.insert("small".into(), "s".into());
    let mut p = redis::pipe();
    let mut want = Vec::new();
    let get = |p: &mut redis::Pipeline,
               want: &mut Vec<Value>,
               k: &str,
               model: &std::collections::HashMap<String, String>| {
        p.cmd("GET").arg(k);
        want.push(model.get(k).map_or(Value::Nil, |v| s(v)));
    };
    for i in 0..40 {
        get(&mut p, &mut want, &format!("big{i}"), &model);
        if i % 13 == 12 {
            get(&mut p, &mut want, "small", &model);
            get(&mut p, &mut want, "absent", &model);
            // A write between the reads: the next read of this key sees it.
            let next = format!("big{}", i + 1);
            p.cmd("SET").arg(&next).arg("new");
            want.push(Value::Okay);
            model.insert(next, "new".into());
        }
    }
    let out: Vec<Value> = p.query(&mut c).unwrap();
    assert_eq!(out.len(), want.len());
    for (n, (o, w)) in out.iter().zip(&want).enumerate() {
        assert_eq!(o, w, "reply {n}");
    }
}

/// A pipeline of large values grows the client's reads (so it runs as few
/// jobs); once the client goes quiet its buffer is given back, and every
/// client's buffer counts in INFO's total.
#[test]
fn a_quiet_clients_grown_buffer_is_given_back() {
    let t = start();
    let mut c = t.client();
    let mut admin = t.client();
    let mut buffered = || {
        let info: String = redis::cmd("INFO").arg("clients").query(&mut admin).unwrap();
        common::info_field(&info, "client_recent_max_input_buffer")
    };
    let value = "v".repeat(16 * 1024);
    let mut p = redis::pipe();
    for i in 0..64 {
        p.cmd("SET").arg(format!("k{i}")).arg(&value);
    }
    let out: Vec<Value> = p.query(&mut c).unwrap();
    assert!(out.iter().all(|v| *v == Value::Okay));
    // The server charges the grown buffer once the pipeline has run.
    let mut grown = 0;
    for _ in 0..50 {
        grown = buffered();
        if grown > 128 << 10 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        grown > 128 << 10,
        "a 1 MiB pipeline's reads grew to {grown} bytes in all"
    );
    std::thread::sleep(Duration::from_millis(2500));
    let after = buffered();
    assert!(
        after <= 64 << 10,
        "{after} bytes still buffered after a quiet 2.5 s"
    );
    assert_eq!(run(&mut c, &["STRLEN", "k63"]), Ok(Value::Int(16 * 1024)));
}

/// The arguments of a request still arriving count against
/// `maxmemory-clients`, not only the buffer it is read into: a client that
/// sends most of a large request and stops holds that memory too.
#[test]
fn partly_received_request_counts_against_maxmemory_clients() {
    let t = start_with(|c| {
        c.client_query_buffer_limit = 64 << 20;
        c.proto_max_bulk_len = 1 << 20;
        c.maxmemory_clients = 2 << 20;
    });
    // Eight of the ten arguments announced after MSET, four of them
    // values of 600 kB, then nothing.
    let req = mset_of_large_values(10, 4);
    let mut s = TcpStream::connect(t.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The server may close before it has read everything.
    let _ = s.write_all(&req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.starts_with("-ERR client input buffers exceed maxmemory-clients"),
        "the client holding 2.4 MB of a request past a 2 MiB limit was not closed: {out:?}"
    );
    // Others are still served.
    let mut c = t.client();
    assert_eq!(
        run(&mut c, &["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
}

/// Large values go to the socket from their own buffers, in one `writev`
/// with the replies around them: pipelined GETs and MGETs of values just
/// under, at and far over that size, with and without an expiry, from the
/// memtable and from blob files, read by a client slow enough that writes
/// stop part-way, come back byte for byte and in order.
#[test]
fn large_values_reach_a_slow_reader_whole_and_in_order() {
    let t = start();
    let mut c = t.client();
    let sizes = [4095usize, 4096, 4097, 70_000, 300_000];
    let val = |seed: usize, n: usize| -> Vec<u8> {
        (0..n).map(|j| b'a' + ((seed * 7 + j) % 26) as u8).collect()
    };
    let set = |c: &mut redis::Connection, k: String, v: Vec<u8>, ex: bool| {
        let mut cmd = redis::cmd("SET");
        cmd.arg(k).arg(v);
        if ex {
            cmd.arg("EX").arg(1000);
        }
        cmd.query::<()>(c).unwrap();
    };
    for (i, &n) in sizes.iter().enumerate() {
        set(&mut c, format!("old{i}"), val(i, n), false);
        set(&mut c, format!("exp{i}"), val(i + 10, n), true);
    }
    t.server.state().store.db.flush().unwrap();
    for (i, &n) in sizes.iter().enumerate() {
        set(&mut c, format!("new{i}"), val(i + 20, n), false);
    }
    let mut req = Vec::new();
    let mut want = Vec::new();
    let cmd = |req: &mut Vec<u8>, args: &[&str]| {
        req.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
    };
    let bulk = |want: &mut Vec<u8>, v: &[u8]| {
        want.extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
        want.extend_from_slice(v);
        want.extend_from_slice(b"\r\n");
    };
    for _ in 0..6 {
        for (i, &n) in sizes.iter().enumerate() {
            for (prefix, seed) in [("old", i), ("exp", i + 10), ("new", i + 20)] {
                cmd(&mut req, &["GET", &format!("{prefix}{i}")]);
                bulk(&mut want, &val(seed, n));
            }
            cmd(&mut req, &["PING"]);
            want.extend_from_slice(b"+PONG\r\n");
        }
        cmd(&mut req, &["MGET", "old0", "absent", "new4", "exp3"]);
        want.extend_from_slice(b"*4\r\n");
        bulk(&mut want, &val(0, sizes[0]));
        want.extend_from_slice(b"$-1\r\n");
        bulk(&mut want, &val(24, sizes[4]));
        bulk(&mut want, &val(13, sizes[3]));
    }
    let mut s = TcpStream::connect(t.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&req).unwrap();
    // Let the server fill the socket's buffers and wait on them.
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::with_capacity(want.len());
    let mut buf = vec![0u8; 64 << 10];
    while got.len() < want.len() {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed after {} of {} bytes", got.len(), want.len());
        got.extend_from_slice(&buf[..n]);
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Some(at) = got.iter().zip(&want).position(|(g, w)| g != w) {
        panic!("replies differ at byte {at} of {}", want.len());
    }
    assert_eq!(got.len(), want.len(), "more bytes than the replies");
    // Nothing follows them.
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    match s.read(&mut buf) {
        Ok(n) => panic!("{n} bytes after the replies"),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
}
