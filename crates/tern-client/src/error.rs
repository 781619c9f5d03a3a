//! Client errors.

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The connection failed or closed; the command may or may not have
    /// run.
    Io(String),
    /// The server sent bytes that are not RESP.
    Protocol(String),
    /// Redirects or retries did not settle within the attempt limit.
    Exhausted(String),
    /// The cluster could not be reached or described.
    Cluster(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(m) => write!(f, "connection: {m}"),
            Error::Protocol(m) => write!(f, "protocol: {m}"),
            Error::Exhausted(m) => write!(f, "gave up after retries: {m}"),
            Error::Cluster(m) => write!(f, "cluster: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}
