//! The `tern` command-line tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;

#[derive(Parser, Debug)]
#[command(name = "tern", version, about = "Tools for Tern stores")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Benchmark Tern and its peers (YCSB, db_bench workloads, traces).
    Bench(bench::Args),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Bench(args) => bench::run(args),
    }
}
