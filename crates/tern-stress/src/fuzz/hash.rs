//! The hash engine's decoders: a log record, a log segment read back by
//! recovery, and the checkpoint file.

/// One hash-log record (see `tern_hash::fuzzing::record`).
pub fn hash_record(data: &[u8]) {
    tern_hash::fuzzing::record(data);
}

/// A hash-log segment recovered from (see `tern_hash::fuzzing::log`).
pub fn hash_log(data: &[u8]) {
    tern_hash::fuzzing::log(data);
}

/// A hash store's checkpoint file.
pub fn hash_checkpoint(data: &[u8]) {
    tern_hash::fuzzing::checkpoint(data);
}
