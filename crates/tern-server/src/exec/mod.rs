//! Where commands run.
//!
//! A connection's tokio task parses requests and writes replies; it never
//! calls into the engine itself, so a stalled engine cannot take the tokio
//! workers (and with them accepts, PING, `/metrics`) hostage:
//!
//! - commands that write run on the [`Committer`], one thread that groups
//!   the writes of every connection into engine commits;
//! - fast point reads (GET, MGET, …) are answered on the task when the
//!   engine can answer from memory ([`Class::PointRead`]); they and the
//!   other reads run on the [`Readers`] pool otherwise;
//! - the rest (PING, CLIENT, CONFIG, HELLO, …) run inline on the task.
//!
//! A connection waits for each run of commands before it starts the next,
//! so its commands take effect in the order it sent them.

pub mod committer;
pub mod readers;
pub mod status;

use std::collections::VecDeque;
use std::sync::Arc;

pub use committer::Committer;
pub use readers::Readers;
pub use status::ExecStatus;

use crate::commands::table;
use crate::resp::Reply;

/// Reply bytes after which a job stops and hands back the requests it has
/// not run: the connection writes the replies out first, so one pipeline of
/// large reads cannot pile up its replies in memory.
pub const JOB_REPLY_BYTES: usize = 1 << 20;

/// Where a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// On the connection's task: touches no engine data.
    Inline,
    /// A fast point read (GET, MGET, EXISTS, STRLEN, TTL, …): first on the
    /// connection's task from memory only, on the read pool if it would
    /// wait on the device.
    PointRead,
    /// On the read pool (SCAN, KEYS, RANDOMKEY, …).
    Read,
    /// On the committer.
    Write,
}

impl Class {
    /// Whether the read pool runs it (a point read that needs the device
    /// included).
    pub fn reads(self) -> bool {
        matches!(self, Class::PointRead | Class::Read)
    }
}

/// A parsed request and where it runs.
#[derive(Debug)]
pub struct Request {
    /// Where it runs.
    pub class: Class,
    /// The command name and its arguments.
    pub args: Vec<Vec<u8>>,
    /// Its index in the command table, if known.
    pub cmd: Option<usize>,
    /// The reply it gets instead of running (a cluster redirect).
    pub redirect: Option<Reply>,
}

impl Request {
    /// Whether it may read in the view its run of reads shares
    /// ([`crate::store::Store::read_ahead`]): every point read but WATCH,
    /// which records what it read for EXEC to compare with and so must
    /// read the latest state.
    pub fn shares_view(&self) -> bool {
        self.cmd.is_none_or(|i| table::COMMANDS[i].name != "watch")
    }

    /// Classifies `args`. Unknown commands run inline (they only produce an
    /// error).
    pub fn new(args: Vec<Vec<u8>>) -> Request {
        let cmd = args.first().and_then(|n| table::lookup(n));
        Request {
            class: classify(cmd, &args),
            args,
            cmd,
            redirect: None,
        }
    }

    /// Forgets a routing decision (the request is routed again).
    pub fn reset_route(&mut self) {
        self.redirect = None;
        self.class = classify(self.cmd, &self.args);
    }
}

/// Where the command at `cmd` in the table, called with `args`, runs.
fn classify(cmd: Option<usize>, args: &[Vec<u8>]) -> Class {
    let Some(i) = cmd else {
        return Class::Inline;
    };
    match CLASSES.get(i).copied().flatten() {
        Some(class) => class,
        // The two CLUSTER subcommands that walk the store.
        None => match args.get(1).map(|a| a.to_ascii_lowercase()) {
            Some(a) if a == b"countkeysinslot" || a == b"getkeysinslot" => Class::Read,
            _ => Class::Inline,
        },
    }
}

/// Where each command of the table runs, from its flags, worked out once
/// rather than per request; `None` where it depends on the arguments.
static CLASSES: std::sync::LazyLock<Vec<Option<Class>>> = std::sync::LazyLock::new(|| {
    table::COMMANDS
        .iter()
        .map(|s| {
            let flag = |f: &str| s.flags.contains(&f);
            Some(match s.name {
                "cluster" => return None,
                // EXEC runs its queue where writes run; WATCH reads the
                // keys' expiry.
                "exec" => Class::Write,
                "watch" => Class::PointRead,
                _ if flag("write") => Class::Write,
                _ if flag("readonly") && flag("fast") => Class::PointRead,
                _ if flag("readonly") => Class::Read,
                _ => Class::Inline,
            })
        })
        .collect()
});

/// Runs requests from the front of `run` while `one` answers them, until
/// their replies reach [`JOB_REPLY_BYTES`]; the request `one` declines
/// (`None`) stays at the front, as do those not reached. The requests run
/// go to `ran`.
pub fn run_bounded(
    run: &mut VecDeque<Request>,
    mut one: impl FnMut(&Request) -> Option<Reply>,
    ran: &mut Vec<Request>,
) -> Vec<Reply> {
    let mut replies = Vec::new();
    let mut bytes = 0;
    while bytes < JOB_REPLY_BYTES {
        let Some(reply) = run.front().and_then(&mut one) else {
            break;
        };
        ran.extend(run.pop_front());
        bytes += reply.size_hint();
        replies.push(reply);
    }
    replies
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

#[cfg(test)]
mod tests {
    use super::*;

    fn req(args: &[&str]) -> Request {
        Request::new(args.iter().map(|a| a.as_bytes().to_vec()).collect())
    }

    fn class_of(args: &[&str]) -> Class {
        req(args).class
    }

    #[test]
    fn watch_reads_the_latest_state_not_a_shared_view() {
        assert!(!req(&["WATCH", "k"]).shares_view());
        assert!(!req(&["watch", "k", "j"]).shares_view());
        assert!(req(&["GET", "k"]).shares_view());
        assert!(req(&["MGET", "k", "j"]).shares_view());
    }

    #[test]
    fn commands_run_where_their_flags_say() {
        assert_eq!(class_of(&["GET", "k"]), Class::PointRead);
        assert_eq!(class_of(&["get", "k"]), Class::PointRead);
        assert_eq!(class_of(&["SET", "k", "v"]), Class::Write);
        assert_eq!(class_of(&["INCR", "k"]), Class::Write);
        assert_eq!(class_of(&["KEYS", "*"]), Class::Read);
        assert_eq!(class_of(&["PING"]), Class::Inline);
        assert_eq!(class_of(&["EXEC"]), Class::Write);
        assert_eq!(class_of(&["WATCH", "k"]), Class::PointRead);
        assert_eq!(class_of(&["NOSUCHCOMMAND"]), Class::Inline);
        // CLUSTER by its subcommand.
        assert_eq!(class_of(&["CLUSTER", "COUNTKEYSINSLOT", "1"]), Class::Read);
        assert_eq!(
            class_of(&["cluster", "getkeysinslot", "1", "2"]),
            Class::Read
        );
        assert_eq!(class_of(&["CLUSTER", "INFO"]), Class::Inline);
        assert_eq!(class_of(&["CLUSTER"]), Class::Inline);
    }
}
