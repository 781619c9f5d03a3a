//! Command execution: lookup, arity and authentication checks, then the
//! handler of each command family. Handlers read through [`Ctx::get`] and
//! write through [`Ctx::put`] and [`Ctx::delete`], which go to the
//! committer's pending batch (see [`crate::exec`]).

pub mod keys;
pub mod server;
pub mod strings;
pub mod table;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::expiry::now_ms;
use crate::keyspace::{decode_value, Entry};
use crate::pending::Pending;
use crate::resp::Reply;
use crate::state::{ClientInfo, State};
use crate::store::{Store, StoreError, StoreResult};

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
    /// Reads must come from memory (the command runs on the connection's
    /// task); one that cannot sets `needs_io` and the command runs again on
    /// the read pool.
    pub cached_only: bool,
    /// Set when a `cached_only` read would have waited on the device.
    pub needs_io: bool,
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
            cached_only: false,
            needs_io: false,
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
    /// The committer's uncommitted writes; `None` off the committer, where
    /// commands must not write.
    pub pending: Option<&'a mut Pending>,
}

impl Ctx<'_> {
    /// The store.
    pub fn store(&self) -> &Store {
        &self.state.store
    }

    /// The live entry of `key`, pending writes included.
    pub fn get(&mut self, key: &[u8]) -> StoreResult<Option<Entry>> {
        self.get_at(key, now_ms())
    }

    /// The entry of `key` as of `now` (unix ms), pending writes included.
    pub fn get_at(&mut self, key: &[u8], now: u64) -> StoreResult<Option<Entry>> {
        if let Some(p) = self.pending.as_deref_mut() {
            if let Some(raw) = p.lookup(key) {
                return Ok(match raw {
                    None => None,
                    Some(raw) => Some(decode_value(raw.to_vec())?).filter(|e| !e.expired(now)),
                });
            }
        }
        if self.session.cached_only {
            let r = self.state.store.get_at_cached(key, now);
            if matches!(r, Err(StoreError::WouldBlock)) {
                self.session.needs_io = true;
            }
            return r;
        }
        self.state.store.get_at(key, now)
    }

    fn pending(&mut self) -> Result<&mut Pending, Reply> {
        self.pending
            .as_deref_mut()
            .ok_or_else(|| Reply::err("internal error: a write command ran outside the committer"))
    }

    /// Sets `key` (committed with the rest of the group).
    pub fn put(&mut self, key: &[u8], value: &[u8], expire_at: Option<u64>) -> Result<(), Reply> {
        self.pending()?.put(key, value, expire_at);
        Ok(())
    }

    /// Removes `key` (committed with the rest of the group).
    pub fn delete(&mut self, key: &[u8]) -> Result<(), Reply> {
        self.pending()?.delete(key);
        Ok(())
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

/// The argument positions that hold keys, per the command table.
fn key_positions(spec: &table::CommandSpec, argc: usize) -> impl Iterator<Item = usize> {
    let first = spec.first_key.max(0) as usize;
    let last = if spec.last_key < 0 {
        argc as i64 + spec.last_key
    } else {
        spec.last_key
    };
    let step = spec.step.max(1) as usize;
    let end = if first == 0 {
        0
    } else {
        (last.max(0) as usize + 1).min(argc)
    };
    (first..end.max(first)).step_by(step)
}

/// Runs one request and returns its reply. Writes go to `pending` (only
/// the committer passes one).
pub fn execute(
    state: &State,
    session: &mut Session,
    args: &[Vec<u8>],
    pending: Option<&mut Pending>,
) -> Reply {
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
    if let Some(k) = key_positions(spec, args.len())
        .map(|i| &args[i])
        .find(|k| k.len() > state.max_key_len)
    {
        // Refused before anything is written: the engine would refuse the
        // whole commit group this write joins.
        return Reply::err(format!(
            "key of {} bytes exceeds the longest key the store accepts ({} bytes)",
            k.len(),
            state.max_key_len
        ));
    }
    {
        let mut d = session.info.detail.lock();
        d.last_cmd = spec.name;
        d.last_active = Some(Instant::now());
    }
    let start = Instant::now();
    let reply = (spec.handler)(
        &mut Ctx {
            state,
            session,
            pending,
        },
        args,
    );
    // A read that stopped for I/O runs again on the read pool, which
    // records it.
    if !session.needs_io {
        state.metrics.record(idx, start.elapsed(), reply.is_error());
    }
    reply
}
