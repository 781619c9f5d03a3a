//! `tern bench`: the benchmark harness (crate `tern-bench`).

use std::process::ExitCode;

pub use tern_bench::cli::BenchArgs as Args;

/// Runs `tern bench …`; errors are printed to stderr with exit status 2.
pub fn run(args: Args) -> ExitCode {
    match tern_bench::cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
