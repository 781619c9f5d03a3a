//! The `tern` command-line tool.
//!
//! Each subcommand lives in its own module with an `Args` struct (clap
//! derive) and a `run(args) -> Result<ExitCode, Failure>` function; adding
//! one means adding a module and a variant of [`Command`].

use std::fmt;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod check;
mod cluster;
mod inspect;
mod offload;
mod serve;
mod stress;

/// mimalloc instead of glibc's malloc: `tern serve` allocates and frees a
/// few small buffers per request on every worker thread, and glibc's
/// arena consolidation and chunk unlinking took ~8% of a pipelined
/// server's samples. Only Rust's allocations move; RocksDB's C++ ones in
/// `tern bench` stay on the system allocator (see `docs/bench.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit status for a failure of the tool itself (bad input, unreadable
/// store), as opposed to a check that found problems.
const EXIT_FAILURE: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "tern",
    version,
    about = "Tern: look inside a store, verify it, stress it, benchmark it",
    long_about = "Tools for Tern stores.\n\n\
        `inspect` shows what a store holds (the manifest, the LSM shape, single \
        tables, WALs, blob files); `check` verifies every checksum and \
        cross-reference. Both only read: they never open the store for writing \
        and can run on a copy or on a store that refuses to open. `stress` runs \
        a store under load against an expected state, with kill -9 loops and \
        fault injection; `bench` runs the field's workloads against Tern and \
        its peers.",
    after_help = "Examples:\n  \
        tern inspect /var/lib/tern/db\n  \
        tern inspect /var/lib/tern/db --sst 12 --limit 20\n  \
        tern check /var/lib/tern/db\n  \
        tern bench ycsb -P workloads/workloada -p recordcount=100000 --load --run\n\n\
        Run `tern help <COMMAND>` for the options of one command."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show the manifest, the LSM shape, a table, a WAL or every manifest edit.
    Inspect(inspect::Args),
    /// Verify every checksum and cross-reference of a store (read only).
    Check(check::Args),
    /// Stress a store against an expected state (threads, kill -9 loops, faults).
    Stress(stress::Args),
    /// Benchmark Tern and its peers (YCSB, db_bench workloads, traces).
    Bench(bench::Args),
    /// Serve the store over the Redis protocol (RESP2/RESP3).
    Serve(serve::Args),
    /// Create a cluster of `tern serve --cluster` nodes, add nodes, show its status.
    Cluster(cluster::Args),
    /// Run the offload control plane, or show its status.
    Coordinator(offload::CoordinatorArgs),
    /// Run compaction and GC jobs for stores, over a shared tier.
    Worker(offload::WorkerArgs),
}

/// Why a command could not do its job: what failed, and what to try.
#[derive(Debug)]
pub struct Failure {
    what: String,
    hint: Option<String>,
    /// The reader went away (a closed pipe): stop without a message.
    silent: bool,
}

impl Failure {
    /// A failure described by `what`.
    pub fn new(what: impl Into<String>) -> Self {
        Failure {
            what: what.into(),
            hint: None,
            silent: false,
        }
    }

    /// Adds advice on what to do about it.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error: {}", self.what)?;
        if let Some(h) = &self.hint {
            write!(f, "\nhint: {h}")?;
        }
        Ok(())
    }
}

impl From<std::io::Error> for Failure {
    /// A failed write to standard output.
    fn from(e: std::io::Error) -> Self {
        let mut f = Failure::new(format!("cannot write the output: {e}"));
        f.silent = e.kind() == std::io::ErrorKind::BrokenPipe;
        f
    }
}

/// What is logged unless `RUST_LOG` says otherwise: warnings from
/// everything, and what the services do (a worker's jobs, a server's
/// one-off migrations).
const DEFAULT_LOG: &str = "warn,tern_offload=info,tern_server=info";

/// Sends `tracing` events to standard error, filtered by `RUST_LOG` (for
/// example `RUST_LOG=debug`) or [`DEFAULT_LOG`].
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Check(args) => check::run(args),
        Command::Stress(args) => stress::run(args),
        Command::Bench(args) => Ok(bench::run(args)),
        Command::Serve(args) => serve::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Coordinator(args) => offload::coordinator(args),
        Command::Worker(args) => offload::worker(args),
    };
    match result {
        Ok(code) => code,
        Err(failure) if failure.silent => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{failure}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}
