//! CONFIG GET, SET, RESETSTAT and HELP. The settings Tern can change while
//! it runs ([`crate::tunables`]) are set at once; the others are read at
//! start, so setting one to another value gets an error naming it and
//! saying where to change it (setting it to its current value is accepted,
//! as scripts that set defaults do).

use super::server::{help, unknown_subcommand};
use super::{wrong_arity, Ctx};
use crate::glob::glob_match;
use crate::resp::Reply;
use crate::state::State;
use crate::tunables::knob;

/// Every setting CONFIG GET reports, with its value.
fn config_params(state: &State) -> Vec<(&'static str, String)> {
    let c = &state.config;
    let t = &state.tunables;
    let mut params = vec![
        ("bind", c.bind.clone()),
        ("port", state.port.to_string()),
        ("dir", c.dir.display().to_string()),
        ("requirepass", t.requirepass()),
        ("appendonly", "yes".into()),
        ("appendfsync", c.appendfsync.as_str().into()),
        ("save", String::new()),
        ("maxclients", t.maxclients().to_string()),
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
    ];
    params.extend(t.knobs());
    params
}

/// Applies one `CONFIG SET` pair, or says why it cannot.
enum Change {
    MaxClients(usize),
    RequirePass(String),
    Knob(String, i64),
    Same,
}

fn failed(name: &str, why: &str) -> Reply {
    Reply::err(format!(
        "CONFIG SET failed (possibly related to argument '{name}') - {why}"
    ))
}

/// What setting `name` to `value` would do.
fn plan(state: &State, name: &str, value: &[u8]) -> Result<Change, Reply> {
    let text = String::from_utf8_lossy(value).to_string();
    let int = || {
        text.parse::<i64>()
            .map_err(|_| failed(name, "argument couldn't be parsed into an integer"))
    };
    let in_range = |lo: i64, hi: i64, kind: crate::tunables::KnobKind| {
        let n = match kind {
            crate::tunables::KnobKind::Int => int()?,
            crate::tunables::KnobKind::Memory => crate::tunables::parse_memory(&text)
                .ok_or_else(|| failed(name, "argument must be a memory value"))?,
        };
        if n < lo || n > hi {
            return Err(failed(
                name,
                &format!("argument must be between {lo} and {hi} inclusive"),
            ));
        }
        Ok(n)
    };
    if let Some((lo, hi, kind)) = crate::tunables::Tunables::knob_range(name) {
        return Ok(Change::Knob(name.to_string(), in_range(lo, hi, kind)?));
    }
    match name {
        "maxclients" => Ok(Change::MaxClients(
            in_range(1, u32::MAX as i64, crate::tunables::KnobKind::Int)? as usize,
        )),
        "requirepass" if state.cluster.is_some() => Err(failed(
            name,
            "cluster nodes authenticate to each other with it: set it in every node's configuration file and restart them",
        )),
        "requirepass" => Ok(Change::RequirePass(text)),
        _ => match config_params(state).into_iter().find(|(n, _)| *n == name) {
            Some((_, current)) if current.as_bytes() == value => Ok(Change::Same),
            Some(_) => Err(failed(
                name,
                "tern serve reads it at start: set it in the configuration file (or with its flag) and restart the server",
            )),
            None => Err(Reply::err(format!(
                "Unknown option or number of arguments for CONFIG SET - '{name}'"
            ))),
        },
    }
}

/// CONFIG GET parameter [parameter ...] | SET parameter value [parameter
/// value ...] | RESETSTAT | HELP
pub fn config(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    let sub = args[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"get" => {
            if args.len() < 3 {
                return wrong_arity("config|get");
            }
            let mut out = Vec::new();
            for (name, value) in config_params(ctx.state) {
                if args[2..]
                    .iter()
                    .any(|p| glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
                {
                    out.push((Reply::text(name), Reply::text(value)));
                }
            }
            Reply::Map(out)
        }
        b"set" => {
            if args.len() < 4 || args.len() % 2 != 0 {
                return wrong_arity("config|set");
            }
            // Every pair is checked before any is applied: all or nothing.
            let mut changes = Vec::new();
            let mut seen = Vec::new();
            for pair in args[2..].chunks(2) {
                let name = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                let canonical = knob(&name).map_or(name.clone(), str::to_string);
                if seen.contains(&canonical) {
                    return Reply::err(format!(
                        "CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"
                    ));
                }
                seen.push(canonical);
                match plan(ctx.state, &name, &pair[1]) {
                    Ok(c) => changes.push(c),
                    Err(e) => return e,
                }
            }
            let t = &ctx.state.tunables;
            for c in changes {
                match c {
                    Change::MaxClients(n) => t.set_maxclients(n),
                    Change::RequirePass(p) => t.set_requirepass(&p),
                    Change::Knob(name, v) => t.set_knob(&name, v),
                    Change::Same => {}
                }
            }
            Reply::Ok
        }
        b"resetstat" => Reply::Ok,
        b"help" => help(&[
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>: maxclients, requirepass and",
            "    Redis's encoding knobs (*-max-listpack-*, *-max-intset-*, *-max-ziplist-*)",
            "    change at once; the rest are read at start (edit the configuration file).",
            "RESETSTAT",
            "    Accepted for compatibility; statistics are not reset.",
            "HELP",
            "    Print this help.",
        ]),
        _ => unknown_subcommand(&args[1], "CONFIG"),
    }
}
