//! Pure encoding and decoding of every on-disk structure. Nothing here does
//! I/O: functions take and return byte slices, so each decoder can be fuzzed
//! and unit-tested alone. Byte layouts are specified in `docs/format/`.

pub mod blob;
pub mod block;
pub mod bloom;
pub mod checksum;
pub mod coding;
pub mod internal_key;
pub mod log_record;
pub mod table;
pub mod version_edit;
pub mod write_batch;
