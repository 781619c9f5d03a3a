//! Tern's offload service: compaction and blob GC jobs that run outside
//! the store's process.
//!
//! A store with offload on hands each job to a [`RemoteExecutor`]. The
//! executor turns the job into a self-contained [`proto::JobSpec`] (input
//! files named in the [`SharedTier`] with sizes and checksums, key ranges,
//! snapshots, output options), so a worker never opens a store: it
//! downloads the inputs, runs the engine's own job code
//! ([`worker::run_job`]), uploads the outputs under
//! `jobs/<job>/<attempt>/` and writes a [`proto::ResultManifest`] last, as
//! the attempt's commit point. The store downloads the outputs, verifies
//! them (checksums, then every entry: order, range, counts) and installs
//! them through its normal path; whenever anything fails or is in doubt it
//! runs the job on its own threads instead. Nothing a worker does can reach
//! the store's files except through that check. Protocol and formats:
//! `docs/offload.md`, `docs/format/offload.md`.

pub mod coordinator;
pub mod coordinators;
pub mod error;
pub mod executor;
pub mod filters;
pub mod local;
pub mod metrics;
pub mod runner;
pub mod shared;
pub mod spec;
pub mod worker;
pub mod worker_daemon;

/// The protocol's messages, generated from `proto/offload.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/tern.offload.v1.rs"));
}

pub use coordinators::Coordinators;
pub use error::{OffloadError, Result};
pub use executor::{OffloadStats, RemoteExecutor, RemoteOptions};
pub use filters::FilterRegistry;
pub use local::{LocalService, LocalServiceOptions};
pub use runner::{GrpcRunner, InProcessRunner, JobRunner};
pub use shared::SharedTier;
