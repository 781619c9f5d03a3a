//! Output: YCSB-cpp-shaped text, JSON, and a self-contained HTML report.

pub mod html;
pub mod json;
pub mod text;

pub use json::Report;

use std::path::PathBuf;

/// Output options shared by every benchmark.
#[derive(Debug, clap::Args, Clone)]
pub struct OutputArgs {
    /// Write the results as JSON (schema in docs/bench.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML report with charts.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Seconds between status lines when stdout is not a terminal (0: none).
    #[arg(long, default_value_t = 10)]
    pub status_interval: u64,
}
