//! The hash engine's error type.

use std::path::PathBuf;

/// Result alias of the hash engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the hash engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory the call was about.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Stored data failed a checksum or structural check.
    #[error("corruption in {file} at offset {offset}: {reason}")]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damaged record or header in the file.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The caller passed something the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Every bucket of the hash index and its overflow area is taken.
    #[error(
        "the hash index is full ({buckets} buckets): open the store with a larger `index_bits`"
    )]
    IndexFull {
        /// Buckets in the main table.
        buckets: u64,
    },
    /// An earlier write to the log failed; the store takes no more writes.
    /// Reopen it to recover from its last checkpoint.
    #[error("the store stopped after a failed log write: {0}")]
    Stopped(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
