//! Leveled compaction, split into deciding and doing:
//! The picker chooses what to compact from a version (pure, cheap), a
//! [`CompactionJob`] turns input tables into output tables (pure apart from
//! file I/O, no access to the store), and an [`Executor`] decides where a job
//! runs. Installing the result is the store's business: one version edit.

mod check;
#[cfg(test)]
mod datadriven_tests;
mod executor;
mod filter;
mod job;
pub(crate) mod picker;
mod retention;
mod split;
pub(crate) mod value_runs;

pub use executor::{run_parts, Executor, LocalExecutor};
pub use filter::{CompactionFilter, FilterDecision, FilterValue, RemoteFilter};
pub use job::{CompactionJob, CompactionOutput, JobContext, KeyRange, MovePressure, ValueMoves};
pub use retention::Retention;
pub(crate) use retention::{Placed, VersionWalk};
pub use split::check_parts;
