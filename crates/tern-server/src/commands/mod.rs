//! Command execution: lookup, arity and authentication checks, then the
//! handler of each command family. Handlers read through [`Ctx::get`] and
//! write through [`Ctx::put`] and [`Ctx::delete`], which go to the
//! committer's pending batch (see [`crate::exec`]).

pub mod bits;
pub mod cluster;
pub mod composite;
pub mod config;
pub mod dump;
pub mod hashes;
pub mod info;
pub mod ingest;
pub mod keys;
pub mod lcs;
pub mod lists;
pub mod migrate;
pub mod multi;
pub mod object;
pub mod rename;
pub mod server;
pub mod sets;
pub mod strings;
pub mod table;
pub mod zsets;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

pub use table::{arity_ok, lookup, CommandSpec, COMMANDS};

use crate::expiry::now_ms;
use crate::keyspace::{live_entry, Entry, Kind};
use crate::pending::{Known, Pending};
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
    /// SCAN cursors: id → key to resume from.
    scan_cursors: VecDeque<(u64, Vec<u8>)>,
    next_cursor: u64,
    /// After MULTI: the commands queued for EXEC.
    pub multi: Option<Vec<Vec<Vec<u8>>>>,
    /// A command was refused while queuing: EXEC aborts.
    pub multi_failed: bool,
    /// Keys this connection WATCHes.
    pub watched: Vec<crate::watch::Watched>,
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
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
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

    /// A SCAN-family reply: the cursor to resume from `next` (`0`: the
    /// iteration is over) and this page's `items`.
    pub fn scan_reply(&mut self, next: Option<Vec<u8>>, items: Vec<Reply>) -> Reply {
        let cursor = match next {
            Some(resume) => self.save_cursor(resume),
            None => 0,
        };
        Reply::Array(vec![Reply::text(cursor.to_string()), Reply::Array(items)])
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

/// What a command may do with the store, by where it runs (see
/// [`crate::exec`]).
pub enum Access<'a> {
    /// On the committer: reads see the pending writes, writes join them.
    Write(&'a mut Pending),
    /// On the read pool: reads may wait on the device; no writes.
    Read {
        /// The view of the job's read-ahead, which its point reads share.
        view: Option<&'a tern::ReadAhead<'a>>,
    },
    /// On the connection's task: reads only from memory. A read that would
    /// wait on the device fails the command, which then runs on the pool.
    MemoryOnly {
        /// A separated value the pool would copy out of its blob file's
        /// mapping counts as waiting too: worth it for a batch of reads,
        /// which shares one hand-over to the pool and there saves each
        /// value's system call ([`tern::Db::get_if_cached_unless_mapped`]).
        defer_mapped: bool,
        /// The view of the batch's read-ahead, which its reads share.
        view: Option<&'a tern::ReadAhead<'a>>,
    },
}

/// What a handler sees.
pub struct Ctx<'a> {
    /// Shared state.
    pub state: &'a State,
    /// This connection.
    pub session: &'a mut Session,
    access: Access<'a>,
    /// Unix milliseconds when the command started: expiry is judged by it.
    now_ms: u64,
    /// Set when a [`Access::MemoryOnly`] read would have waited.
    needs_io: bool,
    /// On the read pool, the state of the store every read of a composite
    /// value sees: taken before its metadata is read, so the metadata and
    /// the members agree however the value changes meanwhile.
    snapshot: Option<tern::Snapshot>,
    /// On the read pool, the composite values read from the snapshot, by
    /// key: their version and the generation it was read in.
    read_versions: Vec<(Vec<u8>, u32, u64)>,
    /// Keys this command found and missed (recorded once it completes).
    pub hits: u64,
    /// See `hits`.
    pub misses: u64,
}

impl Ctx<'_> {
    /// The store.
    pub fn store(&self) -> &Store {
        &self.state.store
    }

    /// The live entry of `key`, pending writes included.
    pub fn get(&mut self, key: &[u8]) -> StoreResult<Option<Entry>> {
        self.get_at(key, self.now_ms)
    }

    /// Unix milliseconds when the command started, which expiry is judged
    /// by (as Redis judges a command by the time it started).
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The entry of `key` as of `now` (unix ms), pending writes included.
    pub fn get_at(&mut self, key: &[u8], now: u64) -> StoreResult<Option<Entry>> {
        match &mut self.access {
            // The key's state first: it answers absent keys and integers
            // without the pending writes' ordered overlay, which costs a
            // tree insert per write once built (INCR runs read every key).
            Access::Write(p) => match p.known(key) {
                Some(Known::Absent) => Ok(None),
                Some(Known::Int(_, Some(t))) if t <= now => Ok(None),
                Some(Known::Int(v, expire_at)) => Ok(Some(Entry {
                    kind: Kind::String,
                    value: v.to_string().into_bytes().into(),
                    expire_at,
                })),
                None => match p.lookup(key) {
                    Some(None) => Ok(None),
                    Some(Some(raw)) => Ok(live_entry(raw.to_vec(), now)?),
                    None => self.state.store.get_at(key, now),
                },
            },
            Access::Read { view } => {
                self.state
                    .store
                    .get_in(key, now, self.snapshot.as_ref(), *view)
            }
            Access::MemoryOnly { defer_mapped, view } => {
                let r = self
                    .state
                    .store
                    .get_at_cached(key, now, *defer_mapped, *view);
                self.needs_io |= matches!(r, Err(StoreError::WouldBlock));
                r
            }
        }
    }

    /// The committer's pending writes; an error reply off the committer.
    /// A command that writes to the engine itself (FLUSHDB) asks for it
    /// too, to be sure it runs where no other write can interleave.
    pub fn pending(&mut self) -> Result<&mut Pending, Reply> {
        match &mut self.access {
            Access::Write(p) => Ok(p),
            _ => Err(Reply::err(
                "internal error: a write command ran outside the committer",
            )),
        }
    }

    /// Sets `key` (committed with the rest of the group). An expiry that
    /// has already passed deletes the key instead, as Redis does, so it is
    /// neither stored nor counted.
    pub fn put(&mut self, key: &[u8], value: &[u8], expire_at: Option<u64>) -> Result<(), Reply> {
        self.put_kind(key, Kind::String, value, expire_at)
    }

    /// Sets `key` to a value of `kind` (the string, or a composite's
    /// metadata), as [`Ctx::put`] does.
    pub fn put_kind(
        &mut self,
        key: &[u8],
        kind: Kind,
        payload: &[u8],
        expire_at: Option<u64>,
    ) -> Result<(), Reply> {
        if expire_at.is_some_and(|t| t <= self.now_ms) {
            return self.delete(key);
        }
        let store = &self.state.store;
        self.pending()?
            .put(store, key, kind, payload, expire_at)
            .map_err(store_error)
    }

    /// The live string of `key`: `WRONGTYPE` if it holds another kind.
    pub fn get_string(&mut self, key: &[u8]) -> Result<Option<Entry>, Reply> {
        match self.get(key).map_err(store_error)? {
            Some(e) if e.kind != Kind::String => Err(wrong_type()),
            e => Ok(e),
        }
    }

    /// Removes `key` (committed with the rest of the group).
    pub fn delete(&mut self, key: &[u8]) -> Result<(), Reply> {
        let store = &self.state.store;
        self.pending()?
            .delete(store, key)
            .map(drop)
            .map_err(store_error)
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

/// Redis's reply for a command on a key of another type.
pub fn wrong_type() -> Reply {
    Reply::Error("WRONGTYPE Operation against a key holding the wrong kind of value".into())
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

/// Whether a command names keys (at fixed positions, or after a count of
/// them: `movablekeys`).
pub(crate) fn has_keys(spec: &table::CommandSpec) -> bool {
    spec.first_key != 0 || spec.flags.contains(&"movablekeys")
}

/// The argument positions that hold keys, per the command table (and, for
/// a command with `numkeys`, per that count).
pub(crate) fn key_positions(
    spec: &table::CommandSpec,
    args: &[Vec<u8>],
) -> std::iter::StepBy<std::ops::Range<usize>> {
    let argc = args.len();
    if spec.flags.contains(&"movablekeys") {
        // `numkeys key [key ...]` from the second argument on.
        let n = args
            .get(1)
            .and_then(|a| crate::resp::parser::parse_int(a))
            .filter(|&n| n > 0)
            .map_or(0, |n| n as usize);
        let end = 2usize.saturating_add(n).min(argc);
        return (2.min(end)..end).step_by(1);
    }
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

/// Times a read of composite values is tried before it gives up (see
/// [`Ctx::reads_still_hold`]).
const READ_TRIES: usize = 4;

/// The clock of a run of commands that execute back to back (a pipeline):
/// each command starts where the one before it ended, so timing a command
/// costs one clock read instead of two, and its wall-clock time (which
/// expiry is judged by) is the run's start plus the monotonic time since,
/// instead of a third read. Under pipelined point reads the clock reads
/// were a twentieth of the server's time.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    base: Instant,
    base_wall_ms: u64,
    last: Instant,
}

impl RunClock {
    /// A clock whose first command starts now.
    pub fn start() -> RunClock {
        let base = Instant::now();
        RunClock {
            base,
            base_wall_ms: now_ms(),
            last: base,
        }
    }

    /// The next command starts now rather than where the last one ended
    /// (after work between commands that no command should be charged for,
    /// such as a commit).
    pub fn restart(&mut self) {
        self.last = Instant::now();
    }

    /// Unix milliseconds at `t`, as the run's start plus the time since.
    fn wall_ms_at(&self, t: Instant) -> u64 {
        let since = t.saturating_duration_since(self.base).as_millis();
        self.base_wall_ms
            .saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    }
}

/// Runs one request with `access` (the committer passes its pending
/// writes, the read pool [`Access::Read`]) and returns its reply.
pub fn execute(
    state: &State,
    session: &mut Session,
    args: &[Vec<u8>],
    access: Access<'_>,
) -> Reply {
    run(state, session, args, access, &mut RunClock::start()).0
}

/// [`execute`] as the next command of a run timed by `clock`.
pub fn execute_in_run(
    state: &State,
    session: &mut Session,
    args: &[Vec<u8>],
    access: Access<'_>,
    clock: &mut RunClock,
) -> Reply {
    run(state, session, args, access, clock).0
}

/// Runs one read request from memory only, as the next command of a run
/// timed by `clock`; `None` if it would have waited on the device (it has
/// then changed nothing and recorded nothing).
pub fn execute_from_memory(
    state: &State,
    session: &mut Session,
    args: &[Vec<u8>],
    clock: &mut RunClock,
    defer_mapped: bool,
    view: Option<&tern::ReadAhead<'_>>,
) -> Option<Reply> {
    let access = Access::MemoryOnly { defer_mapped, view };
    let (reply, needs_io) = run(state, session, args, access, clock);
    (!needs_io).then_some(reply)
}

fn run(
    state: &State,
    session: &mut Session,
    args: &[Vec<u8>],
    access: Access<'_>,
    clock: &mut RunClock,
) -> (Reply, bool) {
    let Some(name) = args.first() else {
        return (Reply::err("empty command"), false);
    };
    let Some(idx) = table::lookup(name) else {
        state
            .metrics
            .unknown_commands
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        session.multi_failed |= session.multi.is_some();
        return (unknown_command(args), false);
    };
    let spec = &table::COMMANDS[idx];
    if !table::arity_ok(spec.arity, args.len()) {
        session.multi_failed |= session.multi.is_some();
        return (wrong_arity(spec.name), false);
    }
    if !session.authed && !spec.flags.contains(&"no_auth") {
        return (
            Reply::Error("NOAUTH Authentication required.".into()),
            false,
        );
    }
    if let Some(k) = key_positions(spec, args)
        .map(|i| &args[i])
        .find(|k| k.len() > state.max_key_len)
    {
        // Refused before anything is written: the engine would refuse the
        // whole commit group this write joins.
        let reply = Reply::err(format!(
            "key of {} bytes exceeds the longest key the store accepts ({} bytes)",
            k.len(),
            state.max_key_len
        ));
        session.multi_failed |= session.multi.is_some();
        return (reply, false);
    }
    if let (Access::Write(_), Some(node), None) = (&access, &state.cluster, &session.multi) {
        // A write to a slot whose bulk copy is being ingested waits (the
        // client retries): the ingest's counts must not change under it.
        if node
            .ingests
            .holds_any(key_positions(spec, args).map(|i| args[i].as_slice()))
        {
            return (crate::cluster::ingest::held_reply(), false);
        }
    }
    if let Some(queue) = &mut session.multi {
        if !multi::runs_in_multi(spec.name) {
            if multi::refused_in_multi(spec.name) {
                session.multi_failed = true;
                let reply = Reply::err(format!(
                    "{} cannot run inside MULTI on this server; send it outside the transaction",
                    spec.name.to_uppercase()
                ));
                return (reply, false);
            }
            if let Some(err) = multi::queue_error(spec.name, args) {
                session.multi_failed = true;
                return (err, false);
            }
            queue.push(args.to_vec());
            return (Reply::Simple("QUEUED".into()), false);
        }
    }
    let start = clock.last;
    {
        let mut d = session.info.detail.lock();
        d.last_cmd = spec.name;
        d.last_active = Some(start);
    }
    let mut ctx = Ctx {
        state,
        session,
        access,
        now_ms: clock.wall_ms_at(start),
        needs_io: false,
        snapshot: None,
        read_versions: Vec::new(),
        hits: 0,
        misses: 0,
    };
    let mut reply = (spec.handler)(&mut ctx, args);
    let mut tries = 1;
    while !ctx.reads_still_hold() {
        // A composite value read from a snapshot was deleted or replaced
        // since: compaction may have dropped members the snapshot still
        // showed, so the reply may mix two states. Read again.
        if tries == READ_TRIES {
            reply = Reply::err("the value kept changing while it was read; retry");
            break;
        }
        ctx.restart_reads();
        reply = (spec.handler)(&mut ctx, args);
        tries += 1;
    }
    if ctx.needs_io {
        // Runs again on the read pool, which records it.
        return (reply, true);
    }
    state.metrics.keyspace(ctx.hits, ctx.misses);
    let end = Instant::now();
    clock.last = end;
    state
        .metrics
        .record(idx, end.saturating_duration_since(start), reply.is_error());
    (reply, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_clock_follows_the_wall_clock_from_the_runs_start() {
        let mut clock = RunClock::start();
        let first = clock.wall_ms_at(clock.last);
        assert!(first.abs_diff(now_ms()) <= 1_000, "{first} vs {}", now_ms());
        std::thread::sleep(std::time::Duration::from_millis(30));
        clock.restart();
        // A command that starts later in the run is judged by a later time,
        // and not by a clock read of its own.
        let later = clock.wall_ms_at(clock.last);
        assert!(later >= first + 30, "{later} should be 30 ms past {first}");
        assert!(later <= now_ms() + 1, "{later} is ahead of the wall clock");
    }
}
