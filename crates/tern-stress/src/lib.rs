//! Reliability harness for Tern.
//!
//! - [`runner`]: `tern stress`, many threads writing and verifying a real
//!   store against an [`expected`] state kept in a memory-mapped file beside
//!   it, so that the state survives a `kill -9` of the process;
//! - [`crash_loop`]: start `tern stress`, kill it with SIGKILL at a random
//!   moment, check, restart and verify, repeatedly;
//! - [`sim`]: the store on simulated files with random I/O errors and
//!   simulated power failures, checked against the durability contract;
//! - [`offload`]: the same with compactions and GC on `tern worker`s;
//! - [`fuzz`]: the decoder harnesses behind the fuzz targets in `fuzz/`.
//!
//! See `docs/reliability.md` for how to run each and what it checks.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod config;
pub mod crash_loop;
pub mod expected;
pub mod fuzz;
pub mod hash_loop;
pub mod keys;
pub mod offload;
pub mod python;
pub mod runner;
pub mod sim;

pub use config::{StressArgs, StressConfig};

pub use tern_ops::ci_summary;
