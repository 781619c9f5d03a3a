//! Blob files: values separated from the LSM at flush (see
//! `docs/format/blob.md`). A [`BlobWriter`] appends records in key order; a
//! [`BlobReader`] reads one record by offset or ordinal, verifying its
//! checksum and that it holds the version (key and sequence number) asking
//! for it.

mod cache;
mod reader;
pub mod residency;
mod resolver;
mod scan;
mod writer;

pub use cache::BlobCache;
pub use reader::{BlobEntry, BlobReader, ExpectedRecord};
pub use resolver::{resolve_cached_in, resolve_in, BlobResolver};
pub use scan::{Located, ScanResolver};
pub use writer::{BlobWriter, FinishedBlob};
