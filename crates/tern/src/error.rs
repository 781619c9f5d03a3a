//! The one error type of the engine.
//!
//! Every fallible public operation returns [`Result`]. Bad input from a caller
//! is an [`Error::InvalidArgument`], never a panic; a checksum or structure
//! mismatch on disk is an [`Error::Corruption`] naming the file and the byte
//! offset where the damaged unit starts.

use std::path::PathBuf;

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Tern.
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
        /// Byte offset of the damaged unit (block, record, footer) in the file.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The caller passed something the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The database was closed; open it again to continue.
    #[error("the database is closed")]
    Closed,
    /// An earlier write or sync failed, so the database refuses further writes
    /// until it is reopened (the on-disk state after a failed fsync is unknown).
    #[error(
        "the database refuses writes after an earlier I/O failure ({0}); reopen it to recover"
    )]
    Poisoned(String),
    /// Another process holds the database lock, or a resource is temporarily busy.
    #[error("busy: {0}")]
    Busy(String),
    /// A job run by another process (an offload worker) failed, or its
    /// result failed the store's checks, and the executor was told not to
    /// run it here instead. Nothing was installed: the store's data is as
    /// before, and the job is retried later.
    #[error("offloaded job failed: {0}")]
    Remote(String),
    /// An invariant of the engine does not hold in memory (not on disk):
    /// a bug in Tern.
    #[error("internal error, a bug in Tern (please report it): {0}")]
    Internal(String),
}

impl Error {
    /// An equal error (an `io::Error` is not `Clone`: its kind and message
    /// are kept), for iterators that report one error on every call.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io { path, source } => Error::io(
                path.clone(),
                std::io::Error::new(source.kind(), source.to_string()),
            ),
            Error::Corruption {
                file,
                offset,
                reason,
            } => Error::corruption(file.clone(), *offset, reason.clone()),
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::Closed => Error::Closed,
            Error::Poisoned(m) => Error::Poisoned(m.clone()),
            Error::Busy(m) => Error::Busy(m.clone()),
            Error::Remote(m) => Error::Remote(m.clone()),
            Error::Internal(m) => Error::Internal(m.clone()),
        }
    }

    /// Builds an [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Corruption`].
    pub fn corruption(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}

/// Error returned by the pure decoders in [`crate::format`]: they know the
/// offset inside the buffer they were given but not the file, so callers turn
/// it into [`Error::Corruption`] with [`DecodeError::in_file`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (at byte {offset})")]
pub struct DecodeError {
    /// Offset within the decoded buffer.
    pub offset: u64,
    /// What was wrong.
    pub reason: String,
}

impl DecodeError {
    /// A decode error at `offset` in the buffer.
    pub fn new(offset: usize, reason: impl Into<String>) -> Self {
        DecodeError {
            offset: offset as u64,
            reason: reason.into(),
        }
    }

    /// Converts to [`Error::Corruption`], adding `base` (the buffer's offset
    /// within `file`) to the offset.
    pub fn in_file(self, file: impl Into<PathBuf>, base: u64) -> Error {
        Error::corruption(file, base + self.offset, self.reason)
    }
}

/// Adds a path to a `std::io::Result`.
pub trait IoContext<T> {
    /// Maps the error to [`Error::Io`] for `path`.
    fn ctx(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
