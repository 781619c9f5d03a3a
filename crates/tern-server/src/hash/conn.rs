//! One connection of a hash-engine server: parse, run (connection commands
//! here, engine commands on the engine threads), reply.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::commands::{is_engine_command, ENGINE_COMMANDS};
use super::Shared;
use crate::commands::server::{bad_client_name, valid_client_name, wrongpass};
use crate::resp::parser::UNAUTHENTICATED_LIMITS;
use crate::resp::{Limits, Parser, Reply};

/// Most requests parsed ahead of running them.
const MAX_BATCH: usize = 1024;
/// Reply bytes that are written out before the rest of a pipeline runs.
const OUT_FLUSH: usize = 1 << 20;
const READ_CHUNK: usize = 16 * 1024;

/// Per-connection state the connection commands change.
struct Conn {
    id: u64,
    resp3: bool,
    authed: bool,
    name: Vec<u8>,
    close: bool,
    /// Close without a reply (a successful SHUTDOWN, as in Redis).
    silent: bool,
}

/// Connection commands and their arity.
const CONNECTION_COMMANDS: &[(&str, i32)] = &[
    ("QUIT", -1),
    ("SELECT", 2),
    ("HELLO", -1),
    ("AUTH", -2),
    ("CLIENT", -2),
    ("COMMAND", -1),
    ("CONFIG", -2),
    ("INFO", -1),
    ("SHUTDOWN", -1),
];

fn arity(name: &str) -> Option<i32> {
    CONNECTION_COMMANDS
        .iter()
        .chain(ENGINE_COMMANDS)
        .find(|(n, _)| *n == name)
        .map(|(_, a)| *a)
}

/// Serves one connection until it closes or the server stops.
pub async fn serve(mut sock: TcpStream, shared: &Arc<Shared>) {
    let cfg = &shared.config;
    let limits = Limits {
        max_bulk_len: cfg.proto_max_bulk_len,
        max_args: cfg.max_args,
        max_request_len: cfg.client_query_buffer_limit,
    };
    let authed = cfg.requirepass.is_empty();
    let mut conn = Conn {
        id: shared.next_id.fetch_add(1, Ordering::Relaxed),
        resp3: false,
        authed,
        name: Vec::new(),
        close: false,
        silent: false,
    };
    let mut parser = Parser::new(if authed {
        limits
    } else {
        UNAUTHENTICATED_LIMITS
    });
    let mut inbuf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut out: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut stop = shared.shutdown.subscribe();
    let idle = (cfg.timeout > 0).then(|| Duration::from_secs(cfg.timeout));
    loop {
        let mut start = 0;
        loop {
            let mut requests = Vec::new();
            let mut bad = None;
            while requests.len() < MAX_BATCH && (conn.authed || requests.is_empty()) {
                match parser.parse(&inbuf[start..]) {
                    Ok(step) => {
                        start += step.consumed;
                        match step.request {
                            Some(args) => requests.push(args),
                            None if step.consumed == 0 => break,
                            None => {}
                        }
                    }
                    Err(e) => {
                        bad = Some(format!("ERR Protocol error: {e}"));
                        break;
                    }
                }
            }
            if requests.is_empty() && bad.is_none() {
                break;
            }
            let was_authed = conn.authed;
            if !run(shared, &mut conn, requests, &mut out, &mut sock).await {
                return;
            }
            if conn.authed && !was_authed {
                parser.set_limits(limits);
            }
            if let Some(msg) = bad {
                Reply::Error(msg).encode(&mut out, conn.resp3);
                conn.close = true;
            }
            if conn.close {
                let _ = sock.write_all(&out).await;
                let _ = sock.shutdown().await;
                return;
            }
        }
        if !write_out(shared, &mut sock, &mut out).await {
            return;
        }
        inbuf.drain(..start);
        if inbuf.is_empty() && inbuf.capacity() > 4 * READ_CHUNK {
            inbuf.shrink_to(READ_CHUNK);
        }
        if parser.held() + inbuf.len() > cfg.client_query_buffer_limit {
            let _ = sock
                .write_all(b"-ERR request exceeds client-query-buffer-limit; send smaller requests or raise the limit\r\n")
                .await;
            return;
        }
        if inbuf.capacity() - inbuf.len() < READ_CHUNK {
            inbuf.reserve(READ_CHUNK);
        }
        let read = sock.read_buf(&mut inbuf);
        let n = tokio::select! {
            r = async {
                match idle {
                    Some(d) => tokio::time::timeout(d, read).await.unwrap_or(Ok(0)),
                    None => read.await,
                }
            } => r,
            _ = stop.changed() => return,
        };
        match n {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Runs `requests` in order, appending replies to `out`; `false` if the
/// connection must close at once. Consecutive engine commands go to the
/// engine as one job, which runs before anything after it.
async fn run(
    shared: &Arc<Shared>,
    conn: &mut Conn,
    requests: Vec<Vec<Vec<u8>>>,
    out: &mut Vec<u8>,
    sock: &mut TcpStream,
) -> bool {
    shared
        .commands
        .fetch_add(requests.len() as u64, Ordering::Relaxed);
    let mut batch: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    for args in requests {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let refused = check(conn, &name, &args);
        if refused.is_none() && is_engine_command(&name) {
            batch.push((name, args));
            continue;
        }
        if !run_batch(shared, conn, &mut batch, out, sock).await {
            return false;
        }
        match refused {
            Some(r) => r.encode(out, conn.resp3),
            None => {
                let r = connection_command(shared, conn, &name, &args);
                if !conn.silent {
                    r.encode(out, conn.resp3);
                }
            }
        }
        if conn.close {
            return true;
        }
        if out.len() >= OUT_FLUSH && !write_out(shared, sock, out).await {
            return false;
        }
    }
    run_batch(shared, conn, &mut batch, out, sock).await
}

/// Runs the engine commands gathered in `batch` and encodes their replies,
/// writing them out between the pieces a large batch is run in; `false` if
/// the client went away.
async fn run_batch(
    shared: &Shared,
    conn: &Conn,
    batch: &mut Vec<(String, Vec<Vec<u8>>)>,
    out: &mut Vec<u8>,
    sock: &mut TcpStream,
) -> bool {
    let mut todo = std::mem::take(batch);
    while !todo.is_empty() {
        let n = todo.len();
        let Some(done) = shared.engine.run(todo).await else {
            for _ in 0..n {
                Reply::err("the server is stopping").encode(out, conn.resp3);
            }
            return true;
        };
        for r in &done.replies {
            r.encode(out, conn.resp3);
        }
        todo = done.rest;
        if out.len() >= OUT_FLUSH && !write_out(shared, sock, out).await {
            return false;
        }
    }
    true
}

/// Writes `out` to the client and empties it; `false` if the client went
/// away or stalled longer than `stall-timeout`.
async fn write_out(shared: &Shared, sock: &mut TcpStream, out: &mut Vec<u8>) -> bool {
    if out.is_empty() {
        return true;
    }
    let write = sock.write_all(out);
    let ok = match shared.config.stall_timeout {
        0 => write.await.is_ok(),
        s => matches!(
            tokio::time::timeout(Duration::from_secs(s), write).await,
            Ok(Ok(()))
        ),
    };
    out.clear();
    if out.capacity() > OUT_FLUSH * 2 {
        out.shrink_to(READ_CHUNK);
    }
    ok
}

/// An error reply if the command is unknown, has the wrong arity, or the
/// connection is not authenticated.
fn check(conn: &Conn, name: &str, args: &[Vec<u8>]) -> Option<Reply> {
    if !conn.authed && !matches!(name, "AUTH" | "HELLO" | "QUIT") {
        return Some(Reply::Error("NOAUTH Authentication required.".into()));
    }
    let Some(a) = arity(name) else {
        return Some(crate::commands::unknown_command(args));
    };
    let n = args.len() as i32;
    if (a > 0 && n != a) || (a < 0 && n < -a) {
        return Some(crate::commands::wrong_arity(&name.to_ascii_lowercase()));
    }
    None
}

/// Checks a user and password; `true` authenticates the connection.
fn authenticate(shared: &Shared, conn: &mut Conn, user: &[u8], pass: &[u8]) -> bool {
    let required = shared.config.requirepass.as_bytes();
    let ok = user == b"default" && (required.is_empty() || pass == required);
    conn.authed |= ok;
    ok
}

fn connection_command(
    shared: &Arc<Shared>,
    conn: &mut Conn,
    name: &str,
    args: &[Vec<u8>],
) -> Reply {
    let arg = |i: usize| {
        args.get(i)
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
    };
    match name {
        "QUIT" => {
            conn.close = true;
            Reply::Ok
        }
        "SELECT" => match crate::resp::parser::parse_int(&args[1]) {
            Some(0) => Reply::Ok,
            Some(_) => Reply::err("DB index is out of range"),
            None => Reply::err("value is not an integer or out of range"),
        },
        "AUTH" => {
            let (user, pass): (&[u8], &[u8]) = match args.len() {
                2 if shared.config.requirepass.is_empty() => {
                    return Reply::err("AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
                }
                2 => (b"default", &args[1]),
                3 => (&args[1], &args[2]),
                _ => return Reply::err("syntax error"),
            };
            if authenticate(shared, conn, user, pass) {
                Reply::Ok
            } else {
                wrongpass()
            }
        }
        "HELLO" => hello(shared, conn, args),
        "CLIENT" => match arg(1).as_deref() {
            Some("SETNAME") if args.len() == 3 => {
                if !valid_client_name(&args[2]) {
                    return bad_client_name();
                }
                conn.name = args[2].clone();
                Reply::Ok
            }
            Some("SETNAME") => crate::commands::wrong_arity("client|setname"),
            Some("GETNAME") => {
                if conn.name.is_empty() {
                    Reply::Nil
                } else {
                    Reply::Bulk(conn.name.clone())
                }
            }
            Some("ID") => Reply::Int(conn.id as i64),
            Some("SETINFO") => Reply::Ok,
            Some(other) => Reply::err(format!("unknown subcommand '{other}' on the hash engine. Try CLIENT SETNAME, GETNAME, ID or SETINFO.")),
            None => Reply::err("syntax error"),
        },
        "COMMAND" => match arg(1).as_deref() {
            None => Reply::Array(Vec::new()),
            Some("COUNT") => Reply::Int((CONNECTION_COMMANDS.len() + ENGINE_COMMANDS.len()) as i64),
            Some("DOCS") => Reply::Map(Vec::new()),
            Some(_) => Reply::Array(Vec::new()),
        },
        "CONFIG" => match arg(1).as_deref() {
            Some("GET") if args.len() >= 3 => config_get(shared, &args[2..]),
            Some("GET") => crate::commands::wrong_arity("config|get"),
            Some("RESETSTAT") => Reply::Ok,
            _ => Reply::err("CONFIG SET is not supported on the hash engine; restart with a different configuration"),
        },
        "INFO" => Reply::Verbatim(info(shared, args.get(1))),
        "SHUTDOWN" => {
            if arg(1).as_deref() != Some("NOSAVE") {
                if let Err(e) = shared.store.checkpoint() {
                    return Reply::err(format!("the shutdown checkpoint failed: {e}"));
                }
            }
            shared.request_shutdown();
            conn.close = true;
            conn.silent = true;
            Reply::Ok
        }
        other => Reply::err(format!("unknown command '{other}'")),
    }
}

fn hello(shared: &Arc<Shared>, conn: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let mut resp3 = conn.resp3;
    if let Some(v) = args.get(1) {
        match crate::resp::parser::parse_int(v) {
            None => return Reply::err("Protocol version is not an integer or out of range"),
            Some(2) => resp3 = false,
            Some(3) => resp3 = true,
            Some(_) => return Reply::Error("NOPROTO unsupported protocol version".into()),
        }
    }
    let (mut creds, mut name) = (None, None);
    let mut j = 2;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args[j].to_ascii_uppercase();
        if opt == b"AUTH" && more >= 2 {
            creds = Some((&args[j + 1], &args[j + 2]));
            j += 3;
        } else if opt == b"SETNAME" && more >= 1 {
            if !valid_client_name(&args[j + 1]) {
                return bad_client_name();
            }
            name = Some(args[j + 1].clone());
            j += 2;
        } else {
            return Reply::err(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(&args[j])
            ));
        }
    }
    if let Some((u, p)) = creds {
        if !authenticate(shared, conn, u, p) {
            return wrongpass();
        }
    }
    if !conn.authed {
        return Reply::Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into());
    }
    if let Some(n) = name {
        conn.name = n;
    }
    conn.resp3 = resp3;
    let s = |v: &str| Reply::Bulk(v.as_bytes().to_vec());
    Reply::Map(vec![
        (s("server"), s("redis")),
        (s("version"), s("7.0.15")),
        (s("proto"), Reply::Int(if conn.resp3 { 3 } else { 2 })),
        (s("id"), Reply::Int(conn.id as i64)),
        (s("mode"), s("standalone")),
        (s("role"), s("master")),
        (s("modules"), Reply::Array(Vec::new())),
    ])
}

fn config_get(shared: &Shared, patterns: &[Vec<u8>]) -> Reply {
    let c = &shared.config;
    let known: Vec<(&str, String)> = vec![
        ("appendfsync", c.appendfsync.as_str().into()),
        ("appendonly", "yes".into()),
        ("save", String::new()),
        ("databases", "1".into()),
        ("maxclients", c.maxclients.to_string()),
        ("maxmemory", "0".into()),
        ("timeout", c.timeout.to_string()),
        ("port", shared.port.to_string()),
        ("bind", c.bind.clone()),
        ("dir", c.dir.display().to_string()),
        ("proto-max-bulk-len", c.proto_max_bulk_len.to_string()),
    ];
    let mut out = Vec::new();
    for (k, v) in known {
        if patterns
            .iter()
            .any(|p| crate::glob::glob_match(&p.to_ascii_lowercase(), k.as_bytes()))
        {
            out.push((
                Reply::Bulk(k.as_bytes().to_vec()),
                Reply::Bulk(v.into_bytes()),
            ));
        }
    }
    Reply::Map(out)
}

fn info(shared: &Shared, section: Option<&Vec<u8>>) -> String {
    let want = section.map(|s| String::from_utf8_lossy(s).to_ascii_lowercase());
    let show = |name: &str| {
        want.as_deref()
            .is_none_or(|w| w == name || w == "all" || w == "everything" || w == "default")
    };
    let mut s = String::new();
    if show("server") {
        s += &format!(
            "# Server\r\nredis_version:7.0.15\r\ntern_engine:hash\r\nredis_mode:standalone\r\nos:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
            std::env::consts::OS,
            std::process::id(),
            shared.port,
            shared.started.elapsed().as_secs()
        );
    }
    if show("clients") {
        s += &format!(
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            shared.connected.load(Ordering::Relaxed),
            shared.config.maxclients
        );
    }
    if show("stats") {
        s += &format!(
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\r\n",
            shared.connections.load(Ordering::Relaxed),
            shared.commands.load(Ordering::Relaxed)
        );
    }
    if show("persistence") {
        let st = shared.store.stats();
        s += &format!(
            "# Persistence\r\nloading:0\r\naof_enabled:1\r\ntern_checkpoints:{}\r\ntern_checkpoint_end:{}\r\n\r\n",
            st.checkpoints, st.checkpoint_end
        );
    }
    if show("tern") {
        let st = shared.store.stats();
        s += &format!(
            "# Tern\r\nengine:hash\r\nlog_begin:{}\r\nlog_head:{}\r\nlog_read_only:{}\r\nlog_flushed:{}\r\nlog_tail:{}\r\nin_place_updates:{}\r\nappended_records:{}\r\ndisk_reads:{}\r\nretries:{}\r\nlog_compactions:{}\r\nindex_bytes:{}\r\n\r\n",
            st.begin,
            st.head,
            st.read_only,
            st.flushed,
            st.tail,
            st.in_place_updates,
            st.appended,
            st.disk_reads,
            st.retries,
            st.compactions,
            st.index_bytes
        );
    }
    s
}
