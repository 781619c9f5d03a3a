//! Expiry: the clock, and the compaction filter that reclaims what expired
//! keys and flushed generations hold.
//!
//! Expiry lives in each value's header, which the engine keeps beside a
//! separated value's reference (see [`crate::keyspace`]), so compaction
//! reads it for values of any size. Reads treat an expired value as
//! absent; the committer's active expiry deletes expired keys through the
//! expiry index (see [`crate::exec`]); compaction meanwhile replaces an
//! expired value by its header alone ([`crate::keyspace::dropped_value`]),
//! so its payload's space (blob bytes included) is reclaimed even before
//! active expiry reaches it. The key itself stays until deleted, so the
//! committer's counts never change behind its back.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tern::compaction::{CompactionFilter, FilterDecision, FilterValue, RemoteFilter};

use crate::keyspace::{decode_header, dropped_value, generation_of, NS_EXPIRES, NS_KEYS};

/// The current time, unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Reclaims expired values and flushed generations during compaction.
#[derive(Debug, Default)]
pub struct ExpiryFilter {
    /// The store's current generation (shared with [`crate::store::Store`]).
    pub generation: Arc<AtomicU32>,
}

/// The name offload workers know [`ExpiryFilter`] by.
pub const EXPIRY_FILTER: &str = "tern-server.expiry";

impl ExpiryFilter {
    /// Rebuilds the filter a store sent ([`CompactionFilter::remote`]): its
    /// generation as 4 little-endian bytes. A FLUSHDB while the job runs
    /// leaves the job on the older generation, which only keeps more than
    /// needed until the next compaction.
    pub fn from_remote(params: &[u8]) -> Result<Arc<dyn CompactionFilter>, String> {
        let g: [u8; 4] = params
            .try_into()
            .map_err(|_| format!("{EXPIRY_FILTER} takes 4 bytes, got {}", params.len()))?;
        Ok(Arc::new(ExpiryFilter {
            generation: Arc::new(AtomicU32::new(u32::from_le_bytes(g))),
        }))
    }
}

impl CompactionFilter for ExpiryFilter {
    fn name(&self) -> &str {
        EXPIRY_FILTER
    }

    fn remote(&self) -> Option<RemoteFilter> {
        Some(RemoteFilter {
            name: EXPIRY_FILTER.into(),
            params: self
                .generation
                .load(Ordering::Acquire)
                .to_le_bytes()
                .to_vec(),
        })
    }

    fn filter(&self, _output_level: usize, key: &[u8], value: FilterValue<'_>) -> FilterDecision {
        let tag = key.first().copied();
        if tag != Some(NS_KEYS) && tag != Some(NS_EXPIRES) {
            return FilterDecision::Keep;
        }
        // FLUSHDB left older generations behind: nothing reads them.
        if generation_of(key).is_some_and(|g| g < self.generation.load(Ordering::Acquire)) {
            return FilterDecision::Remove;
        }
        if tag != Some(NS_KEYS) {
            return FilterDecision::Keep;
        }
        let partial = matches!(value, FilterValue::Separated { .. });
        match decode_header(value.bytes(), partial) {
            Ok(Some(h)) if !h.dropped => match h.expire_at {
                Some(t) if t <= now_ms() => FilterDecision::Replace(dropped_value(t)),
                _ => FilterDecision::Keep,
            },
            // Already a stand-in, too short a head, or unreadable: keep.
            _ => FilterDecision::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::{encode_value, engine_key, expiry_key};

    fn decide(f: &ExpiryFilter, key: &[u8], value: &[u8]) -> FilterDecision {
        f.filter(1, key, FilterValue::Inline(value))
    }

    #[test]
    fn expired_values_lose_their_payload_but_keep_their_key() {
        let f = ExpiryFilter::default();
        let k = engine_key(0, b"a");
        assert_eq!(
            decide(&f, &k, &encode_value(b"v", Some(1))),
            FilterDecision::Replace(dropped_value(1))
        );
        assert_eq!(decide(&f, &k, &dropped_value(1)), FilterDecision::Keep);
        assert_eq!(
            decide(&f, &k, &encode_value(b"v", None)),
            FilterDecision::Keep
        );
        let later = now_ms() + 60_000;
        assert_eq!(
            decide(&f, &k, &encode_value(b"v", Some(later))),
            FilterDecision::Keep
        );
        assert_eq!(
            decide(&f, b"mkeyspace", &encode_value(b"v", Some(1))),
            FilterDecision::Keep
        );
        // A separated value is judged by its head.
        let v = encode_value(&[7u8; 600], Some(1));
        assert_eq!(
            f.filter(
                1,
                &k,
                FilterValue::Separated {
                    head: &v[..10],
                    size: 602
                }
            ),
            FilterDecision::Replace(dropped_value(1))
        );
        assert_eq!(
            f.filter(
                1,
                &k,
                FilterValue::Separated {
                    head: &v[..4],
                    size: 602
                }
            ),
            FilterDecision::Keep,
            "too short a head to tell"
        );
    }

    #[test]
    fn older_generations_are_removed() {
        let f = ExpiryFilter::default();
        f.generation.store(2, Ordering::Release);
        let v = encode_value(b"v", None);
        assert_eq!(decide(&f, &engine_key(1, b"a"), &v), FilterDecision::Remove);
        assert_eq!(
            decide(&f, &expiry_key(1, 5, b"a"), b""),
            FilterDecision::Remove
        );
        assert_eq!(decide(&f, &engine_key(2, b"a"), &v), FilterDecision::Keep);
        assert_eq!(
            decide(&f, &expiry_key(2, u64::MAX, b"a"), b""),
            FilterDecision::Keep
        );
    }
}
