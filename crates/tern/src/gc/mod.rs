//! Blob garbage collection without LSM lookups or write-back.
//!
//! A [`GcJob`] is a pure function of blob files and their dead-ordinal sets:
//! it copies the live records of its inputs, in order, into new blob files
//! cut near `blob_file_size`, and reports the lineage (per input: the output
//! it went to, its base ordinal there and the dead set it used). It holds no handle to the store, so it can run on a
//! background thread, in another process, or on another machine. The store
//! installs the result with one version edit; refs to the retired inputs are
//! translated through the lineage on read.

mod job;
pub(crate) mod picker;

pub use job::{GcContext, GcInput, GcJob, GcOutput, GcOutputFile};
