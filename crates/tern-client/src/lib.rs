//! `tern-client`: a Rust client for Tern clusters, and for any Redis
//! Cluster.
//!
//! - [`Connection`]: one pipelined RESP connection. Requests from any
//!   number of tasks are queued, written together, and answered in order;
//!   several batches are in flight at once.
//! - [`ClusterClient`]: routes each command by its key's slot over a slot
//!   map read with `CLUSTER SLOTS`, sends a batch as one pipeline per
//!   node, follows `-MOVED` (updating the map) and `-ASK`, and retries
//!   `-TRYAGAIN` and `-CLUSTERDOWN` with backoff.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tern_client::Error> {
//! let c = tern_client::ClusterClient::connect(&["127.0.0.1:7001"]).await?;
//! c.execute(vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]).await?;
//! let replies = c.batch(vec![
//!     vec![b"GET".to_vec(), b"k".to_vec()],
//!     vec![b"INCR".to_vec(), b"n".to_vec()],
//! ]).await?;
//! # Ok(()) }
//! ```
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod cluster;
mod connection;
mod error;
pub mod reply;
pub mod slot;

pub use cluster::ClusterClient;
pub use connection::Connection;
pub use error::Error;
pub use reply::Reply;

/// A command: its name and arguments.
pub type Cmd = Vec<Vec<u8>>;

/// Result of a client call.
pub type Result<T> = std::result::Result<T, Error>;
