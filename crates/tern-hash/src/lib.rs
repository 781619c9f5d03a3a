//! Tern's hash engine: a FASTER-style store for point operations.
//!
//! A latch-free hash index maps each key's hash (bucket and tag) to the
//! newest record of a chain in a **hybrid log**. The log's tail pages are in
//! memory: the newest, mutable part takes updates in place; the older,
//! read-only part is updated by copying the record to the tail; below that
//! the log is on disk, in segment files. Epoch protection (`crossbeam-epoch`)
//! moves the boundaries without stopping anyone: a page is flushed only once
//! no update in place can still be running on it, and its memory reused
//! only once no reader can still be looking at it.
//!
//! ```no_run
//! # fn main() -> tern_hash::Result<()> {
//! let store = tern_hash::HashStore::open("/tmp/sessions", tern_hash::HashOptions::default())?;
//! let mut session = store.session();
//! session.upsert(b"user:1", b"alice")?;
//! let n = session.rmw(b"visits", |old| {
//!     let n: u64 = old.and_then(|v| std::str::from_utf8(v).ok()?.parse().ok()).unwrap_or(0);
//!     Some((n + 1).to_string().into_bytes())
//! })?;
//! assert_eq!(n.as_deref(), Some(&b"1"[..]));
//! store.checkpoint()?; // everything above is now durable
//! # Ok(()) }
//! ```
//!
//! Durability is by checkpoint: a crash loses what was written after the
//! last completed one (see `docs/engine.md`, "Hash engine", and the file
//! formats in `docs/format/hash.md`).

mod checkpoint;
mod compaction;
mod error;
pub mod fuzzing;
mod index;
mod keys;
mod log;
mod options;
pub mod record;
mod session;
mod store;

pub use checkpoint::{CheckpointMeta, CHECKPOINT_FILE};
pub use compaction::Compacted;
pub use error::{Error, Result};
pub use log::segments::{parse_segment_file_name, segment_file_name};
pub use options::HashOptions;
pub use session::{Session, Update};
pub use store::{HashStats, HashStore};
