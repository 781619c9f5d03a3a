//! Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH.
//!
//! After MULTI a connection's commands are checked (known command, arity)
//! and queued instead of run ([`super::run`]). EXEC runs on the committer
//! and runs the queue there in one go, so its writes join one engine batch
//! with nothing from other connections between them: they commit together
//! or not at all, and reads see all of them or none. As in Redis, a queued
//! command that was refused (unknown, wrong arity) aborts the transaction
//! at EXEC, while a command that fails as it runs (WRONGTYPE, not an
//! integer) fails alone. WATCH makes EXEC fail (a nil reply) when a watched
//! key was changed, flushed or expired since ([`crate::watch`]).

use super::{execute, strings::tri, Access, Ctx};
use crate::expiry::now_ms;
use crate::resp::Reply;

/// MULTI
pub fn multi(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    if ctx.session.multi.is_some() {
        return Reply::err("MULTI calls can not be nested");
    }
    ctx.session.multi = Some(Vec::new());
    ctx.session.multi_failed = false;
    Reply::Ok
}

/// DISCARD
pub fn discard(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    if ctx.session.multi.take().is_none() {
        return Reply::err("DISCARD without MULTI");
    }
    unwatch_all(ctx);
    Reply::Ok
}

/// WATCH key [key ...]
pub fn watch(ctx: &mut Ctx<'_>, args: &[Vec<u8>]) -> Reply {
    if ctx.session.multi.is_some() {
        return Reply::err("WATCH inside MULTI is not allowed");
    }
    for key in &args[1..] {
        if ctx.session.watched.iter().any(|w| &w.key == key) {
            continue;
        }
        // Only a key live now can "expire since WATCH".
        let expire_at = tri!(ctx.get(key).map_err(super::store_error)).and_then(|e| e.expire_at);
        let w = ctx.store().watches.watch(key, expire_at);
        ctx.session.watched.push(w);
    }
    Reply::Ok
}

/// UNWATCH
pub fn unwatch(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    unwatch_all(ctx);
    Reply::Ok
}

/// Forgets this connection's watches.
pub fn unwatch_all(ctx: &mut Ctx<'_>) {
    let store = &ctx.state.store;
    for w in ctx.session.watched.drain(..) {
        store.watches.unwatch(&w.key);
    }
}

/// EXEC
pub fn exec(ctx: &mut Ctx<'_>, _args: &[Vec<u8>]) -> Reply {
    let Some(queue) = ctx.session.multi.take() else {
        return Reply::err("EXEC without MULTI");
    };
    if ctx.session.multi_failed {
        unwatch_all(ctx);
        return Reply::Error("EXECABORT Transaction discarded because of previous errors.".into());
    }
    // Runs on the committer: the writes pending before it are ordered
    // before it, so a watched key among them changed too.
    let now = now_ms();
    let changed = {
        let store = &ctx.state.store;
        let watched = std::mem::take(&mut ctx.session.watched);
        let pending = tri!(ctx.pending());
        let changed = watched
            .iter()
            .any(|w| pending.writes_key(&w.key) || !store.watches.unchanged(w, now));
        ctx.session.watched = watched;
        changed
    };
    unwatch_all(ctx);
    if changed {
        return Reply::NilArray;
    }
    if let Some(refused) = cluster_refusal(ctx, &queue) {
        return refused;
    }
    let mut replies = Vec::with_capacity(queue.len());
    for args in queue {
        let state = ctx.state;
        let reply = match &mut ctx.access {
            Access::Write(p) => execute(state, ctx.session, &args, Access::Write(p)),
            _ => Reply::err("internal error: EXEC ran outside the committer"),
        };
        replies.push(reply);
    }
    Reply::Array(replies)
}

/// Commands that run at once inside MULTI instead of being queued.
pub fn runs_in_multi(name: &str) -> bool {
    matches!(name, "multi" | "exec" | "discard" | "watch" | "quit")
}

/// Commands refused inside MULTI: they write to the engine outside the
/// commit group EXEC's writes join.
pub fn refused_in_multi(name: &str) -> bool {
    matches!(name, "flushdb" | "flushall")
}

/// Subcommands (with their Redis arity) of the container commands, which
/// Redis checks as it queues them.
fn subcommands(name: &str) -> &'static [(&'static str, i64)] {
    match name {
        "config" => &[
            ("get", -3),
            ("set", -4),
            ("resetstat", 2),
            ("rewrite", 2),
            ("help", 2),
        ],
        "client" => &[
            ("id", 2),
            ("getname", 2),
            ("setname", 3),
            ("setinfo", 4),
            ("info", 2),
            ("list", -2),
            ("kill", -3),
            ("pause", -3),
            ("unpause", 2),
            ("reply", 3),
            ("no-evict", 3),
            ("no-touch", 3),
            ("tracking", -3),
            ("caching", 3),
            ("getredir", 2),
            ("trackinginfo", 2),
            ("unblock", -3),
            ("help", 2),
        ],
        "command" => &[
            ("count", 2),
            ("info", -2),
            ("docs", -2),
            ("list", -2),
            ("getkeys", -3),
            ("getkeysandflags", -3),
            ("help", 2),
        ],
        _ => &[],
    }
}

/// The error a container command gets as it is queued: an unknown
/// subcommand, or a wrong number of arguments for it.
pub fn queue_error(name: &str, args: &[Vec<u8>]) -> Option<Reply> {
    let subs = subcommands(name);
    let sub = args.get(1).filter(|_| !subs.is_empty())?;
    let lower = String::from_utf8_lossy(sub).to_ascii_lowercase();
    match subs.iter().find(|(s, _)| *s == lower) {
        None => Some(super::server::unknown_subcommand(sub, &name.to_uppercase())),
        Some((s, arity)) if !super::arity_ok(*arity, args.len()) => {
            Some(super::wrong_arity(&format!("{name}|{s}")))
        }
        Some(_) => None,
    }
}

/// In cluster mode, why the queued commands cannot run here now: their keys
/// must all be in one slot this node serves, as at EXEC (the slot may have
/// moved since they were queued).
fn cluster_refusal(ctx: &Ctx<'_>, queue: &[Vec<Vec<u8>>]) -> Option<Reply> {
    let node = ctx.state.cluster.as_ref()?;
    let mut keys: Vec<&[u8]> = Vec::new();
    for args in queue {
        let spec = args
            .first()
            .and_then(|n| super::lookup(n))
            .map(|i| &super::COMMANDS[i])?;
        keys.extend(super::key_positions(spec, args).map(|i| args[i].as_slice()));
    }
    if node.ingests.holds_any(keys.iter().copied()) {
        return Some(crate::cluster::ingest::held_reply());
    }
    let view = node.view();
    match view.route(keys) {
        crate::cluster::view::Route::Here => None,
        crate::cluster::view::Route::Pull { .. } => Some(Reply::Error(
            "TRYAGAIN the transaction's slot is moving to this node; retry".into(),
        )),
        route => view.refusal(route),
    }
}
