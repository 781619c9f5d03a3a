//! Command execution: lookup, arity and authentication checks, then the
//! handler of each command family; plus the grouping of a pipeline's plain
//! writes into one engine batch.

pub mod keys;
pub mod server;
pub mod strings;
pub mod table;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tern::WriteBatch;

use crate::resp::Reply;
use crate::state::{ClientInfo, State};
use crate::store::{Store, StoreError};

/// A command implementation.
pub type Handler = fn(&mut Ctx<'_>, &[Vec<u8>]) -> Reply;

/// SCAN cursors remembered per connection.
const MAX_SCAN_CURSORS: usize = 256;

/// Per-connection state.
#[derive(Debug)]
pub struct Session {
    /// What `CLIENT LIST` shows.
    pub info: Arc<ClientInfo>,
    /// RESP3 after `HELLO 3`.
    pub resp3: bool,
    /// Authenticated (always true without `requirepass`).
    pub authed: bool,
    /// Close the connection after sending the pending replies.
    pub close: bool,
    /// Close without sending the last reply (SHUTDOWN).
    pub silent_close: bool,
    /// SCAN cursors: id → key to resume from.
    scan_cursors: VecDeque<(u64, Vec<u8>)>,
    next_cursor: u64,
}

impl Session {
    /// A new session.
    pub fn new(info: Arc<ClientInfo>, authed: bool) -> Self {
        Session {
            info,
            resp3: false,
            authed,
            close: false,
            silent_close: false,
            scan_cursors: VecDeque::new(),
            next_cursor: 0,
        }
    }

    /// Remembers where a SCAN resumes; returns its cursor id (never 0).
    pub fn save_cursor(&mut self, resume: Vec<u8>) -> u64 {
        // Cursor ids are scrambled so they look like Redis cursors and are
        // not mistaken for counts.
        self.next_cursor += 1;
        let id = (self.next_cursor.wrapping_mul(0x9E37_79B9) & 0x7fff_ffff) | 1;
        if self.scan_cursors.len() >= MAX_SCAN_CURSORS {
            self.scan_cursors.pop_front();
        }
        self.scan_cursors.push_back((id, resume));
        id
    }

    /// The resume key of cursor `id`, if it is known.
    pub fn cursor(&self, id: u64) -> Option<&[u8]> {
        self.scan_cursors
            .iter()
            .rev()
            .find(|(c, _)| *c == id)
            .map(|(_, k)| k.as_slice())
    }
}

/// What a handler sees.
pub struct Ctx<'a> {
    /// Shared state.
    pub state: &'a State,
    /// This connection.
    pub session: &'a mut Session,
}

impl Ctx<'_> {
    /// The store.
    pub fn store(&self) -> &Store {
        &self.state.store
    }
}

/// The reply for a store failure.
pub fn store_error(e: StoreError) -> Reply {
    Reply::err(e.to_string())
}

/// Redis's reply for an unknown command.
pub fn unknown_command(args: &[Vec<u8>]) -> Reply {
    let mut rest = String::new();
    for a in args.iter().skip(1) {
        if rest.len() >= 128 {
            break;
        }
        let room = 128 - rest.len();
        let s = String::from_utf8_lossy(a);
        let s: String = s.chars().take(room).collect();
        rest.push_str(&format!("'{s}' "));
    }
    let name = String::from_utf8_lossy(args.first().map(|a| a.as_slice()).unwrap_or(b""));
    let name: String = name.chars().take(128).collect();
    Reply::err(format!(
        "unknown command '{name}', with args beginning with: {rest}"
    ))
}

/// Redis's reply for a wrong number of arguments.
pub fn wrong_arity(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

/// `ERR syntax error`.
pub fn syntax_error() -> Reply {
    Reply::err("syntax error")
}

/// `ERR value is not an integer or out of range`.
pub fn not_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

/// Parses an integer argument as Redis does.
pub fn int_arg(a: &[u8]) -> Result<i64, Reply> {
    crate::resp::parser::parse_int(a).ok_or_else(not_integer)
}

/// Runs one request and returns its reply.
pub fn execute(state: &State, session: &mut Session, args: &[Vec<u8>]) -> Reply {
    let Some(name) = args.first() else {
        return Reply::err("empty command");
    };
    let Some(idx) = table::lookup(name) else {
        state
            .metrics
            .unknown_commands
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return unknown_command(args);
    };
    let spec = &table::COMMANDS[idx];
    if !table::arity_ok(spec.arity, args.len()) {
        return wrong_arity(spec.name);
    }
    if !session.authed && !spec.flags.contains(&"no_auth") {
        return Reply::Error("NOAUTH Authentication required.".into());
    }
    {
        let mut d = session.info.detail.lock();
        d.last_cmd = spec.name;
        d.last_active = Some(Instant::now());
    }
    let start = Instant::now();
    let reply = (spec.handler)(&mut Ctx { state, session }, args);
    state.metrics.record(idx, start.elapsed(), reply.is_error());
    reply
}

/// Plain writes of a pipeline, gathered to be applied as one engine batch.
///
/// A plain `SET key value` and `MSET` neither read nor return anything
/// that depends on the store, so consecutive ones can be committed together
/// as long as the batch is applied before any other command of the same
/// connection runs. The stripe locks of all keys are held while it is
/// written, as for single writes.
#[derive(Default)]
pub struct WriteGroup {
    batch: Option<WriteBatch>,
    keys: Vec<Vec<u8>>,
    bytes: usize,
    /// Replies owed: (command index, count).
    owed: Vec<usize>,
    started: Option<Instant>,
}

/// Largest group, bytes and keys, before it is committed early.
const GROUP_MAX_BYTES: usize = 1 << 20;
const GROUP_MAX_KEYS: usize = 512;

impl WriteGroup {
    /// Whether nothing is gathered.
    pub fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }

    /// Takes `args` into the group if it is a plain write; returns false if
    /// it must run normally (after [`WriteGroup::commit`]).
    pub fn offer(&mut self, state: &State, session: &Session, args: &[Vec<u8>]) -> bool {
        if !session.authed || args.len() < 3 {
            return false;
        }
        let name = &args[0];
        let plain_set = name.eq_ignore_ascii_case(b"set") && args.len() == 3;
        let mset = name.eq_ignore_ascii_case(b"mset") && args.len() % 2 == 1;
        if !plain_set && !mset {
            return false;
        }
        let pairs = &args[1..];
        if pairs.chunks(2).any(|kv| kv[0].len() > state.max_key_len) {
            return false;
        }
        let Some(idx) = table::lookup(name) else {
            return false;
        };
        let batch = self.batch.get_or_insert_with(WriteBatch::new);
        for kv in pairs.chunks(2) {
            Store::batch_put(batch, &kv[0], &kv[1], None);
            self.bytes += kv[0].len() + kv[1].len() + 16;
            self.keys.push(kv[0].clone());
        }
        self.owed.push(idx);
        self.started.get_or_insert_with(Instant::now);
        true
    }

    /// Whether the group is large enough to commit now.
    pub fn full(&self) -> bool {
        self.bytes >= GROUP_MAX_BYTES || self.keys.len() >= GROUP_MAX_KEYS
    }

    /// Applies the gathered writes and appends the owed replies to `out`.
    pub fn commit(&mut self, state: &State, out: &mut Vec<u8>, resp3: bool) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let result = {
            let _g = state
                .store
                .locks
                .lock_all(self.keys.iter().map(|k| k.as_slice()));
            state.store.write(batch)
        };
        let reply = match result {
            Ok(()) => Reply::Ok,
            Err(e) => store_error(e),
        };
        let took = self.started.take().map(|s| s.elapsed()).unwrap_or_default();
        for idx in self.owed.drain(..) {
            state.metrics.record(idx, took, reply.is_error());
            reply.encode(out, resp3);
        }
        self.keys.clear();
        self.bytes = 0;
    }
}
