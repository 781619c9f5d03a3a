//! Moving data between stores as whole files: an [`ExportWriter`] writes
//! sorted pairs as tables and blob files under numbers the receiving store
//! reserved, [`check_files`] checks them there, and
//! [`crate::Db::ingest_behind`] adds them below all of that store's data.

mod check;
mod export;

pub use check::{check_files, for_each_entry, CheckedFiles};
pub use export::{ExportOptions, ExportWriter, ExportedFile, ExportedKind};
