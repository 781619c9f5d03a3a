//! Connection and server commands: PING, ECHO, HELLO, AUTH, SELECT, TIME,
//! CLIENT, DEBUG, QUIT, SHUTDOWN (INFO and CONFIG have their own modules).

use std::sync::atomic::Ordering::Relaxed;

use super::{int_arg, syntax_error, wrong_arity, Ctx};
use crate::resp::Reply;
use crate::state::ClientInfo;

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
    let required = ctx.state.tunables.requirepass();
    let required = required.as_bytes();
    let ok = user == b"default" && (required.is_empty() || same_secret(pass, required));
    if ok {
        ctx.session.authed = true;
    }
    ok
}

pub(crate) fn wrongpass() -> Reply {
    Reply::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
}

/// AUTH [username] password
pub fn auth(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if args.len() > 3 {
        return syntax_error();
    }
    let (user, pass): (&[u8], &[u8]) = if args.len() == 2 {
        if ctx.state.tunables.requirepass().is_empty() {
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

pub(crate) fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

pub(crate) fn bad_client_name() -> Reply {
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

/// TIME
pub fn time(_ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Reply::Array(vec![
        Reply::text(now.as_secs().to_string()),
        Reply::text(now.subsec_micros().to_string()),
    ])
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
