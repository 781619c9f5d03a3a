//! Where commands run.
//!
//! A connection's tokio task parses requests and writes replies; it never
//! calls into the engine itself, so a stalled engine cannot take the tokio
//! workers (and with them accepts, PING, `/metrics`) hostage:
//!
//! - commands that write run on the [`Committer`], one thread that groups
//!   the writes of every connection into engine commits;
//! - commands that only read run on the [`Readers`] pool;
//! - the rest (PING, CLIENT, CONFIG, HELLO, …) run inline on the task.
//!
//! A connection waits for each run of commands before it starts the next,
//! so its commands take effect in the order it sent them.

pub mod committer;
pub mod readers;
pub mod status;

use std::sync::Arc;

pub use committer::Committer;
pub use readers::Readers;
pub use status::ExecStatus;

use crate::commands::table;

/// Reply bytes after which a job stops and hands back the requests it has
/// not run: the connection writes the replies out first, so one pipeline of
/// large reads cannot pile up its replies in memory.
pub const JOB_REPLY_BYTES: usize = 1 << 20;

/// Where a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// On the connection's task: touches no engine data.
    Inline,
    /// On the read pool.
    Read,
    /// On the committer.
    Write,
}

/// Where the request `args` runs. Unknown commands run inline (they only
/// produce an error).
pub fn classify(args: &[Vec<u8>]) -> Class {
    let Some(idx) = args.first().and_then(|n| table::lookup(n)) else {
        return Class::Inline;
    };
    let spec = &table::COMMANDS[idx];
    if spec.flags.contains(&"write") {
        Class::Write
    } else if spec.flags.contains(&"readonly") || spec.name == "info" {
        // INFO reads the keyspace section from the engine.
        Class::Read
    } else {
        Class::Inline
    }
}

/// Whether read request `args` is tried on the connection's task first,
/// from memory only (see [`crate::commands::Session::cached_only`]): the
/// fast point reads (GET, MGET, EXISTS, STRLEN, TTL, …), not SCAN or KEYS.
pub fn memory_first(args: &[Vec<u8>]) -> bool {
    args.first()
        .and_then(|n| table::lookup(n))
        .is_some_and(|i| table::COMMANDS[i].flags.contains(&"fast"))
}

/// The committer and the read pool.
#[derive(Debug)]
pub struct Exec {
    /// Runs writes.
    pub committer: Committer,
    /// Runs reads.
    pub readers: Readers,
}

impl Exec {
    /// Starts the committer and `read_threads` readers, reporting to
    /// `status`.
    pub fn start(read_threads: usize, status: Arc<ExecStatus>) -> std::io::Result<Exec> {
        Ok(Exec {
            committer: Committer::start(status.clone())?,
            readers: Readers::start(read_threads, status)?,
        })
    }

    /// Finishes queued work and stops every thread.
    pub fn stop(&self) {
        self.committer.stop();
        self.readers.stop();
    }
}
