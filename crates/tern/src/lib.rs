//! Tern: an ordered key-value store for write-heavy workloads with large values.
//!
//! Tern is a log-structured merge tree: writes go to a write-ahead log and an
//! in-memory skiplist, are flushed to sorted tables, and compacted level by
//! level in the background. Background work is expressed as pure jobs (inputs
//! → outputs) run by an `Executor`, so it can later move out of the process.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod blob;
mod cache;
pub mod compaction;
mod db;
mod error;
mod format;
pub mod gc;
pub mod hint;
pub mod ingest;
pub mod io;
mod iter;
mod memtable;
mod memtier;
mod options;
mod sst;
pub mod striped;
pub mod tools;
mod version;
mod wal;

#[doc(hidden)]
pub mod internals {
    //! The engine's building blocks (file formats, table and blob readers,
    //! logs, the memtable), reachable for the engine's own fuzz harnesses,
    //! micro-benchmarks and format tests only. Not part of the API: nothing
    //! here is stable, and applications must not use it.
    #![allow(missing_docs)]
    pub mod blob {
        pub use crate::blob::*;
    }
    pub mod format {
        pub mod blob {
            pub use crate::format::blob::*;
        }
        pub mod block {
            pub use crate::format::block::*;
        }
        pub mod bloom {
            pub use crate::format::bloom::*;
        }
        pub mod checksum {
            pub use crate::format::checksum::*;
        }
        pub mod internal_key {
            pub use crate::format::internal_key::*;
        }
        pub mod log_record {
            pub use crate::format::log_record::*;
        }
        pub mod table {
            pub use crate::format::table::*;
        }
        pub mod version_edit {
            pub use crate::format::version_edit::*;
        }
        pub mod write_batch {
            pub use crate::format::write_batch::*;
        }
    }
    pub mod iter {
        pub use crate::iter::*;
    }
    pub mod memtable {
        pub use crate::memtable::*;
    }
    pub mod memtier {
        pub use crate::memtier::fuzzing::{arena_image, exercise_restore};
        pub use crate::memtier::memory::check_header;
        pub use crate::memtier::scan;
    }
    pub mod sst {
        pub use crate::sst::*;
    }
    pub mod version {
        pub use crate::version::{replay_manifest, OnProblem, Replayed};
    }
    pub mod wal {
        pub use crate::wal::*;
    }
}

pub use db::read_ahead::{ReadAhead, READ_AHEAD_KEYS};
pub use db::{
    BlobFileStats, Db, IngestReport, LevelStats, ReadOptions, Snapshot, Stats, ValueHead,
};
pub use error::{Error, Result};
/// What compaction and GC jobs read and report (see [`compaction`] and
/// [`gc`]): table and blob file records, table options, GC lineage.
pub use format::blob::LineageEntry;
pub use format::internal_key::ValueKind;
pub use format::write_batch::WriteBatch;
pub use iter::DbIterator;
pub use memtier::DEFAULT_MEMTIER_FILE;
pub use options::{
    process_memory, BytesOrMemory, Compression, CpuPriority, Options, SettingValue, Settings,
    WriteOptions,
};
pub use options::{MIN_WRITE_BUFFER_SIZE, NUM_LEVELS};
pub use sst::TableOptions;
pub use version::{BlobMeta, FileMeta, Relocation, Relocations};
/// The names of a store's table (`NNNNNN.sst`) and blob (`NNNNNN.blob`)
/// files.
pub use wal::{blob_file_name, table_file_name};
