//! Tern: an ordered key-value store for write-heavy workloads with large values.
//!
//! Tern is a log-structured merge tree: writes go to a write-ahead log and an
//! in-memory skiplist, are flushed to sorted tables, and compacted level by
//! level in the background. Background work is expressed as pure jobs (inputs
//! → outputs) run by an `Executor`, so it can later move out of the process.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod blob;
pub mod cache;
pub mod compaction;
pub mod db;
pub mod error;
pub mod format;
pub mod gc;
pub mod io;
pub mod iter;
pub mod memtable;
pub mod options;
pub mod sst;
pub mod tools;
pub mod version;
pub mod wal;

pub use db::{Db, ReadOptions, Snapshot, Stats};
pub use error::{Error, Result};
pub use format::write_batch::WriteBatch;
pub use iter::DbIterator;
pub use options::{Compression, Options, WriteOptions};
