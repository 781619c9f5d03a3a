//! Tern's benchmark harness: YCSB core workloads, db_bench's workloads
//! (mixgraph included), trace replay, and one [`binding::Binding`] trait over
//! Tern, RocksDB, BlobDB, fjall and any Redis-protocol server, so every
//! engine runs the same operations in the same process.
//!
//! Results are the five metrics of AegonKV's evaluation: throughput, tail
//! latency per operation, space on disk over time (and space
//! amplification), compaction I/O, and write-stall time. They are printed
//! as YCSB-cpp's closing lines, written as JSON, and drawn in an HTML report.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod binding;
pub mod cli;
pub mod compare;
pub mod error;
pub mod generator;
pub mod measure;
pub mod phases;
pub mod props;
pub mod report;
pub mod runner;
pub mod workload;

pub use error::{Error, Result};
