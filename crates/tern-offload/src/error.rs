//! Offload errors.

use std::path::PathBuf;

/// Why an offloaded job did not produce a result the store can install.
#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    /// The shared tier refused or failed a request.
    #[error("shared tier: {0}")]
    Shared(#[from] object_store::Error),
    /// A local file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The engine failed running or checking a job.
    #[error("{0}")]
    Engine(#[from] tern::Error),
    /// A spec, result or object is not what it must be (bad checksum,
    /// missing field, unknown filter, a number the job did not reserve).
    #[error("{0}")]
    Invalid(String),
    /// A message did not decode.
    #[error("bad offload message: {0}")]
    Decode(#[from] prost::DecodeError),
    /// The shared tier's URL or options are wrong.
    #[error("shared tier {url}: {why}; use file:///path or s3://bucket (see docs/offload.md)")]
    Url {
        /// The URL given.
        url: String,
        /// Why it does not work.
        why: String,
    },
    /// No result came within the deadline.
    #[error("no result within {0:?}")]
    Timeout(std::time::Duration),
}

/// Offload results.
pub type Result<T> = std::result::Result<T, OffloadError>;

/// Wraps an I/O error with its path.
pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> OffloadError {
    let path = path.into();
    move |source| OffloadError::Io { path, source }
}
