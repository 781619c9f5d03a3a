//! Expiry: the clock, and the compaction filter that drops expired keys.
//!
//! Expiry is stored inside each value (see [`crate::keyspace`]). Reads treat
//! an expired value as absent; compaction retires it through
//! [`ExpiryFilter`], so expired keys cost disk space only until their data is
//! next compacted. Nothing deletes them eagerly.

use std::time::{SystemTime, UNIX_EPOCH};

use tern::compaction::{CompactionFilter, FilterDecision, FilterValue};

use crate::keyspace::{decode_expiry, NS_STRINGS};

/// The current time, unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Retires expired Redis values during compaction.
#[derive(Debug, Default)]
pub struct ExpiryFilter;

impl CompactionFilter for ExpiryFilter {
    fn name(&self) -> &str {
        "tern-server.expiry"
    }

    fn filter(&self, _output_level: usize, key: &[u8], value: FilterValue<'_>) -> FilterDecision {
        if key.first() != Some(&NS_STRINGS) {
            return FilterDecision::Keep;
        }
        match decode_expiry(value.bytes()) {
            Ok(Some(t)) if t <= now_ms() => FilterDecision::Remove,
            _ => FilterDecision::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::{encode_value, engine_key};

    #[test]
    fn removes_only_expired_strings() {
        let f = ExpiryFilter;
        let k = engine_key(b"a");
        assert_eq!(
            f.filter(1, &k, FilterValue::Inline(&encode_value(b"v", Some(1)))),
            FilterDecision::Remove
        );
        assert_eq!(
            f.filter(1, &k, FilterValue::Inline(&encode_value(b"v", None))),
            FilterDecision::Keep
        );
        let later = now_ms() + 60_000;
        assert_eq!(
            f.filter(1, &k, FilterValue::Inline(&encode_value(b"v", Some(later)))),
            FilterDecision::Keep
        );
        assert_eq!(
            f.filter(1, b"mx", FilterValue::Inline(&encode_value(b"v", Some(1)))),
            FilterDecision::Keep
        );
    }
}
