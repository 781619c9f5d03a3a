//! Compaction filters: let the application retire or shrink values during
//! compaction (the server uses one to drop the payload of expired keys).

/// What a filter decides for one value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterDecision {
    /// Keep the value.
    Keep,
    /// Retire the value: it is replaced by a tombstone at the same sequence
    /// number, so older versions of the key in deeper levels stay hidden.
    Remove,
    /// Replace the value by these bytes, stored inline at the same sequence
    /// number (a separated value's blob record becomes garbage). Meant for
    /// small stand-ins: a header that outlives its payload.
    Replace(Vec<u8>),
}

/// A value as compaction sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterValue<'a> {
    /// A value stored in the table: all of it.
    Inline(&'a [u8]),
    /// A value separated into a blob file, which compaction does not read:
    /// its first bytes kept beside the reference (`blob_head_size`; shorter
    /// for values written while the setting was smaller) and its length.
    Separated {
        /// The value's first bytes.
        head: &'a [u8],
        /// The whole value's length in bytes.
        size: u32,
    },
}

impl<'a> FilterValue<'a> {
    /// The bytes compaction has: the whole inline value or a separated
    /// value's head.
    pub fn bytes(&self) -> &'a [u8] {
        match *self {
            FilterValue::Inline(v) => v,
            FilterValue::Separated { head, .. } => head,
        }
    }
}

/// How a worker in another process rebuilds a filter: a name it has
/// registered and parameters for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFilter {
    /// The name the worker knows the filter by.
    pub name: String,
    /// Whatever the filter needs to decide as it would here.
    pub params: Vec<u8>,
}

/// Decides, during compaction, whether values are still wanted.
///
/// Called for the newest surviving version of a key in each snapshot stripe,
/// only for values (not tombstones). Must be deterministic for a given input
/// apart from time, cheap, and must never panic.
pub trait CompactionFilter: Send + Sync {
    /// A short stable name, recorded in logs.
    fn name(&self) -> &str;
    /// Decides for `value` of user key `key`, being written to `output_level`.
    fn filter(&self, output_level: usize, key: &[u8], value: FilterValue<'_>) -> FilterDecision;
    /// How to rebuild this filter in another process; `None` (the default)
    /// keeps every job that uses it on the store's own threads.
    fn remote(&self) -> Option<RemoteFilter> {
        None
    }
}
