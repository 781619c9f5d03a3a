//! Compaction filters: let the application retire values during compaction
//! (the server uses one to drop expired keys).

/// What a filter decides for one value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterDecision {
    /// Keep the value.
    Keep,
    /// Retire the value: it is replaced by a tombstone at the same sequence
    /// number, so older versions of the key in deeper levels stay hidden.
    Remove,
}

/// Decides, during compaction, whether values are still wanted.
///
/// Called for the newest surviving version of a key in each snapshot stripe,
/// only for plain values (not tombstones). Must be deterministic for a given
/// input apart from time, cheap, and must never panic.
pub trait CompactionFilter: Send + Sync {
    /// A short stable name, recorded in logs.
    fn name(&self) -> &str;
    /// Decides for `value` of user key `key`, being written to `output_level`.
    fn filter(&self, output_level: usize, key: &[u8], value: &[u8]) -> FilterDecision;
}
