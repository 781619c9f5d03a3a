//! Connection and server commands: PING, ECHO, HELLO, AUTH, SELECT, INFO,
//! CONFIG, CLIENT, COMMAND, QUIT, SHUTDOWN.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use super::strings::tri;
use super::{int_arg, syntax_error, wrong_arity, Ctx};
use crate::glob::glob_match;
use crate::metrics::{engine_counters, engine_gauges};
use crate::resp::Reply;
use crate::state::{ClientInfo, State};

/// The Redis version the server reports (the command set it follows).
pub const REDIS_VERSION: &str = "7.0.15";

/// DEBUG SET-ACTIVE-EXPIRE 0|1: turns active expiry off or on, as Redis
/// does for tests. Expired keys stay absent to every command either way.
pub fn debug(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    match (sub.as_slice(), args.get(2).map(|a| a.as_slice())) {
        (b"set-active-expire", Some(v @ (b"0" | b"1"))) if args.len() == 3 => {
            ctx.state.active_expire.store(v == b"1", Relaxed);
            Reply::Ok
        }
        (b"set-active-expire", _) => syntax_error(),
        _ => Reply::err(format!(
            "DEBUG {} is not supported; tern serve has DEBUG SET-ACTIVE-EXPIRE only",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

/// PING [message]
pub fn ping(_ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match args.len() {
        1 => Reply::Simple("PONG".into()),
        2 => Reply::Bulk(args[1].clone()),
        _ => wrong_arity("ping"),
    }
}

/// ECHO message
pub fn echo(_ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    Reply::Bulk(args[1].clone())
}

/// Compares without an early exit, so timing does not reveal the password.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks a username/password pair; on success marks the session.
fn authenticate(ctx: &mut Ctx<'_>, user: &[u8], pass: &[u8]) -> bool {
    let required = ctx.state.config.requirepass.as_bytes();
    let ok = user == b"default" && (required.is_empty() || same_secret(pass, required));
    if ok {
        ctx.session.authed = true;
    }
    ok
}

fn wrongpass() -> Reply {
    Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
}

/// AUTH [username] password
pub fn auth(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() > 3 {
        return syntax_error();
    }
    let (user, pass): (&[u8], &[u8]) = if args.len() == 2 {
        if ctx.state.config.requirepass.is_empty() {
            return Reply::err("AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
        }
        (b"default", &args[1])
    } else {
        (&args[1], &args[2])
    };
    if authenticate(ctx, user, pass) {
        Reply::Ok
    } else {
        wrongpass()
    }
}

fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

fn bad_client_name() -> Reply {
    Reply::err("Client names cannot contain spaces, newlines or special characters.")
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]]
pub fn hello(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let mut ver = if ctx.session.resp3 { 3 } else { 2 };
    if args.len() >= 2 {
        let Ok(v) = int_arg(&args[1]) else {
            return Reply::err("Protocol version is not an integer or out of range");
        };
        if !(2..=3).contains(&v) {
            return Reply::Error("NOPROTO unsupported protocol version".into());
        }
        ver = v;
    }
    let mut creds = None;
    let mut name = None;
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
        if !authenticate(ctx, u, p) {
            return wrongpass();
        }
    }
    if !ctx.session.authed {
        return Reply::Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time".into());
    }
    if let Some(n) = name {
        ctx.session.info.detail.lock().name = n;
    }
    ctx.session.resp3 = ver == 3;
    ctx.session.info.detail.lock().resp = ver as u8;
    Reply::Map(vec![
        (Reply::text("server"), Reply::text("redis")),
        (Reply::text("version"), Reply::text(REDIS_VERSION)),
        (Reply::text("proto"), Reply::Int(ver)),
        (Reply::text("id"), Reply::Int(ctx.session.info.id as i64)),
        (
            Reply::text("mode"),
            Reply::text(if ctx.state.cluster.is_some() {
                "cluster"
            } else {
                "standalone"
            }),
        ),
        (Reply::text("role"), Reply::text("master")),
        (Reply::text("modules"), Reply::Array(Vec::new())),
    ])
}

/// SELECT index (only database 0 exists)
pub fn select(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    match int_arg(&args[1]) {
        Ok(0) => Reply::Ok,
        Ok(_) if ctx.state.cluster.is_some() => Reply::err("SELECT is not allowed in cluster mode"),
        Ok(_) => Reply::err("DB index is out of range"),
        Err(e) => e,
    }
}

/// QUIT
pub fn quit(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    ctx.session.close = true;
    Reply::Ok
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE]
///
/// Flushes the engine and stops the server; the connection closes without
/// a reply, as in Redis.
pub fn shutdown(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    for a in &args[1..] {
        let a = a.to_ascii_uppercase();
        if !matches!(a.as_slice(), b"NOSAVE" | b"SAVE" | b"NOW" | b"FORCE") {
            return syntax_error();
        }
    }
    ctx.state.request_shutdown();
    ctx.session.close = true;
    ctx.session.silent_close = true;
    Reply::Ok
}

/// The configuration parameters CONFIG GET knows, with their values.
fn config_params(state: &State) -> Vec<(&'static str, String)> {
    let c = &state.config;
    vec![
        ("bind", c.bind.clone()),
        ("port", state.port.to_string()),
        ("dir", c.dir.display().to_string()),
        ("requirepass", c.requirepass.clone()),
        ("appendonly", "yes".into()),
        ("appendfsync", c.appendfsync.as_str().into()),
        ("save", String::new()),
        ("maxclients", c.maxclients.to_string()),
        ("timeout", c.timeout.to_string()),
        ("proto-max-bulk-len", c.proto_max_bulk_len.to_string()),
        (
            "client-query-buffer-limit",
            c.client_query_buffer_limit.to_string(),
        ),
        ("maxmemory-clients", c.maxmemory_clients.to_string()),
        ("databases", "1".into()),
        ("maxmemory", "0".into()),
        ("maxmemory-policy", "noeviction".into()),
        ("tcp-keepalive", "0".into()),
        ("io-threads", c.threads.to_string()),
    ]
}

/// CONFIG GET parameter [parameter ...] | SET | RESETSTAT | HELP
pub fn config(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"get" => {
            if args.len() < 3 {
                return wrong_arity("config|get");
            }
            let mut out = Vec::new();
            for (name, value) in config_params(ctx.state) {
                if args[2..].iter().any(|p| glob_match(&p.to_ascii_lowercase(), name.as_bytes())) {
                    out.push((Reply::text(name), Reply::text(value)));
                }
            }
            Reply::Map(out)
        }
        b"set" => Reply::err(
            "CONFIG SET is not supported: edit the configuration file (or the flags) and restart the server",
        ),
        b"resetstat" => Reply::Ok,
        b"help" => help(&[
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "RESETSTAT",
            "    Accepted for compatibility; statistics are not reset.",
            "HELP",
            "    Print this help.",
        ]),
        _ => unknown_subcommand(&args[1], "CONFIG"),
    }
}

pub(crate) fn help(lines: &[&str]) -> Reply {
    Reply::Array(lines.iter().map(|l| Reply::Simple((*l).into())).collect())
}

pub(crate) fn unknown_subcommand(sub: &[u8], cmd: &str) -> Reply {
    Reply::err(format!(
        "unknown subcommand '{}'. Try {cmd} HELP.",
        String::from_utf8_lossy(sub)
    ))
}

/// One `CLIENT LIST` line.
fn client_line(c: &ClientInfo) -> String {
    let d = c.detail.lock();
    let idle = d.last_active.map_or(0, |t| t.elapsed().as_secs());
    format!(
        "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user=default redir=-1 resp={} lib-name={} lib-ver={}\n",
        c.id,
        c.addr,
        c.laddr,
        String::from_utf8_lossy(&d.name),
        c.created.elapsed().as_secs(),
        idle,
        if d.last_cmd.is_empty() { "NULL" } else { d.last_cmd },
        d.resp.max(2),
        String::from_utf8_lossy(&d.lib_name),
        String::from_utf8_lossy(&d.lib_ver),
    )
}

/// CLIENT ID | SETNAME | GETNAME | LIST | INFO | SETINFO | HELP
pub fn client(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    let arity = |n: usize, name: &str| {
        if args.len() == n {
            None
        } else {
            Some(wrong_arity(&format!("client|{name}")))
        }
    };
    match sub.as_slice() {
        b"id" => arity(2, "id").unwrap_or(Reply::Int(ctx.session.info.id as i64)),
        b"getname" => arity(2, "getname").unwrap_or_else(|| {
            let d = ctx.session.info.detail.lock();
            if d.name.is_empty() {
                Reply::Nil
            } else {
                Reply::Bulk(d.name.clone())
            }
        }),
        b"setname" => {
            if let Some(e) = arity(3, "setname") {
                return e;
            }
            if !valid_client_name(&args[2]) {
                return bad_client_name();
            }
            ctx.session.info.detail.lock().name = args[2].clone();
            Reply::Ok
        }
        b"setinfo" => {
            if let Some(e) = arity(4, "setinfo") {
                return e;
            }
            let attr = args[2].to_ascii_lowercase();
            let mut d = ctx.session.info.detail.lock();
            match attr.as_slice() {
                b"lib-name" => d.lib_name = args[3].clone(),
                b"lib-ver" => d.lib_ver = args[3].clone(),
                _ => {
                    return Reply::err(format!(
                        "Unrecognized option '{}'",
                        String::from_utf8_lossy(&args[2])
                    ))
                }
            }
            Reply::Ok
        }
        b"info" => {
            arity(2, "info").unwrap_or_else(|| Reply::Verbatim(client_line(&ctx.session.info)))
        }
        b"list" => {
            let clients: Vec<_> = ctx.state.clients.lock().values().cloned().collect();
            let mut s = String::new();
            for c in clients {
                s.push_str(&client_line(&c));
            }
            Reply::Verbatim(s)
        }
        b"help" => help(&[
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "LIST",
            "    Return information about client connections.",
            "SETINFO <option> <value>",
            "    Set client meta attr (LIB-NAME, LIB-VER).",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "HELP",
            "    Print this help.",
        ]),
        _ => unknown_subcommand(&args[1], "CLIENT"),
    }
}

/// The sections INFO shows by default and with `all`.
const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "persistence",
    "stats",
    "cluster",
    "keyspace",
    "tern",
];

/// INFO [section ...]
pub fn info(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let wanted: Vec<String> = args[1..]
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let everything = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| matches!(w.as_str(), "all" | "everything" | "default"));
    let mut out = String::new();
    for &section in SECTIONS {
        if everything || wanted.iter().any(|w| w == section) {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            tri!(info_section(ctx, section, &mut out));
        }
    }
    Reply::Verbatim(out)
}

fn info_section(ctx: &Ctx<'_>, section: &str, out: &mut String) -> Result<(), Reply> {
    let st = ctx.state;
    let m = &st.metrics;
    let mut title = section.to_string();
    title[..1].make_ascii_uppercase();
    let _ = write!(out, "# {title}\r\n");
    let mut kv = |k: &str, v: String| {
        let _ = write!(out, "{k}:{v}\r\n");
    };
    match section {
        "server" => {
            let up = st.started.elapsed().as_secs();
            kv("redis_version", REDIS_VERSION.into());
            kv("tern_version", env!("CARGO_PKG_VERSION").into());
            let mode = if st.cluster.is_some() {
                "cluster"
            } else {
                "standalone"
            };
            kv("redis_mode", mode.into());
            kv("os", std::env::consts::OS.into());
            kv("arch_bits", (usize::BITS).to_string());
            kv("process_id", std::process::id().to_string());
            kv("tcp_port", st.port.to_string());
            kv("uptime_in_seconds", up.to_string());
            kv("uptime_in_days", (up / 86400).to_string());
            kv("config_file", st.config_file.clone());
        }
        "clients" => {
            kv("connected_clients", st.connected().to_string());
            kv("maxclients", st.config.maxclients.to_string());
            kv(
                "client_recent_max_input_buffer",
                st.buffered.load(Relaxed).to_string(),
            );
            kv("blocked_clients", "0".into());
        }
        "persistence" => {
            kv("loading", "0".into());
            kv("aof_enabled", "1".into());
            kv("appendfsync", st.config.appendfsync.as_str().into());
            // `err` once the engine refuses writes (see engine_background_error).
            let failed = st.store.db.stats().background_error.is_some();
            kv(
                "aof_last_write_status",
                if failed { "err" } else { "ok" }.into(),
            );
            kv("rdb_changes_since_last_save", "0".into());
        }
        "stats" => {
            kv(
                "total_connections_received",
                m.connections_total.load(Relaxed).to_string(),
            );
            kv("total_commands_processed", m.total_commands().to_string());
            kv(
                "rejected_connections",
                m.rejected_connections.load(Relaxed).to_string(),
            );
            kv("expired_keys", m.expired_keys.load(Relaxed).to_string());
            kv("evicted_keys", "0".into());
            kv("keyspace_hits", m.keyspace_hits.load(Relaxed).to_string());
            kv(
                "keyspace_misses",
                m.keyspace_misses.load(Relaxed).to_string(),
            );
            kv(
                "total_error_replies",
                m.commands
                    .iter()
                    .map(|c| c.errors.load(Relaxed))
                    .sum::<u64>()
                    .to_string(),
            );
            kv(
                "unexpected_error_replies",
                m.protocol_errors.load(Relaxed).to_string(),
            );
        }
        "cluster" => {
            kv(
                "cluster_enabled",
                u8::from(st.cluster.is_some()).to_string(),
            );
        }
        "keyspace" => {
            // Counts the committer keeps exact: no walk of the store.
            let m = st.store.meta();
            if m.keys > 0 {
                let avg_ttl = m.avg_ttl(crate::expiry::now_ms());
                kv(
                    "db0",
                    format!("keys={},expires={},avg_ttl={avg_ttl}", m.keys, m.expires),
                );
            }
        }
        "tern" => {
            // A commit that takes long is a stalled engine (or disk): the
            // writes queued behind it wait, reads and everything else go on.
            let c = &st.exec;
            kv("write_queue_jobs", c.write_queue.load(Relaxed).to_string());
            kv(
                "write_commit_in_progress_ms",
                (c.busy_micros() / 1000).to_string(),
            );
            kv(
                "write_longest_commit_ms",
                (c.longest_group_micros.load(Relaxed) / 1000).to_string(),
            );
            kv("write_commits", c.commits.load(Relaxed).to_string());
            kv("read_queue_jobs", c.read_queue.load(Relaxed).to_string());
            if let Some(o) = &st.offload {
                for (name, _, v) in o.stats().counters() {
                    kv(&format!("offload_{name}"), v.to_string());
                }
            }
            let e = st.store.db.stats();
            for (name, _, v) in engine_counters(&e).into_iter().chain(engine_gauges(&e)) {
                kv(
                    &format!("engine_{}", name.trim_end_matches("_total")),
                    v.to_string(),
                );
            }
            for (i, l) in e.levels.iter().enumerate() {
                if l.files > 0 {
                    kv(
                        &format!("engine_level{i}"),
                        format!("files={},bytes={}", l.files, l.bytes),
                    );
                }
            }
            kv(
                "engine_write_amplification",
                format!("{:.2}", e.write_amplification()),
            );
            // Why the engine refuses writes, on one line; `none` while it accepts them.
            let cause = e.background_error.as_deref().unwrap_or("none");
            kv("engine_background_error", cause.replace(['\r', '\n'], " "));
        }
        _ => {}
    }
    Ok(())
}
