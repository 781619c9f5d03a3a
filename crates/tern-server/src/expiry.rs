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
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use tern::compaction::{CompactionFilter, FilterDecision, FilterValue, RemoteFilter};

use crate::keyspace::{decode_header, dropped_value, generation_of, Layout, NS_EXPIRES, NS_KEYS};
use crate::members::{metadata_key, parse_member_key, NS_MEMBERS};

/// The current time, unix milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Answers the compaction filter's one question about a member key: is the
/// composite value it belongs to still live, and of which version.
pub trait MetaLookup: Send + Sync {
    /// The version of the live composite value whose metadata record is
    /// engine key `meta_key`, and the first version not yet handed out
    /// when it was read; `None` if the store could not tell.
    fn live_version(&self, meta_key: &[u8]) -> Option<Liveness>;
}

/// What a store said of one composite key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// The live value's version; `None` if there is none (deleted,
    /// expired, or of another kind).
    pub live: Option<u64>,
    /// Every version below this had been handed out, and any value that
    /// got one committed, before `live` was read (the store reads its
    /// version counter first). A member of a lower version that is not
    /// `live` is garbage for good, since versions are never reused; one of
    /// this version or above may belong to a value created since.
    pub next: u64,
}

/// Where the filter finds [`MetaLookup`]: set once the store is open (the
/// filter is made before it).
pub type LookupSlot = Arc<OnceLock<Weak<dyn MetaLookup>>>;

/// Reclaims expired values, flushed generations and the members of deleted
/// or overwritten composite values during compaction.
#[derive(Debug, Default)]
pub struct ExpiryFilter {
    /// The store's current generation (shared with [`crate::store::Store`]).
    pub generation: Arc<AtomicU32>,
    /// How Redis keys map to engine keys.
    pub layout: Layout,
    /// Finds the live version of a member key's value. Without it (an
    /// offload worker), members are kept unless their generation is gone.
    pub lookup: LookupSlot,
    /// The last metadata record looked up and what it said: a value's
    /// members sort together, so one lookup serves them all. The answer
    /// holds for members of versions below its `next`; a member of a newer
    /// version is looked up again. A "live" answer goes stale when the
    /// value is deleted, which would keep its members as long as it is
    /// remembered: it is trusted for [`CACHE_FOR`] only.
    last: Mutex<Option<(Vec<u8>, Liveness, std::time::Instant)>>,
}

impl std::fmt::Debug for dyn MetaLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetaLookup")
    }
}

/// How long [`ExpiryFilter`] trusts what it last looked up: long enough to
/// serve the members of one value met in one compaction, short enough that
/// the next compaction looks again.
const CACHE_FOR: std::time::Duration = std::time::Duration::from_millis(500);

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
            ..ExpiryFilter::default()
        }))
    }

    /// A filter for a store of `layout` whose generation is `generation`.
    pub fn new(generation: Arc<AtomicU32>, layout: Layout) -> ExpiryFilter {
        ExpiryFilter {
            generation,
            layout,
            ..ExpiryFilter::default()
        }
    }

    /// Whether member key `key` still belongs to a live value.
    fn member_decision(&self, key: &[u8]) -> FilterDecision {
        let Some(m) = parse_member_key(self.layout, key) else {
            return FilterDecision::Keep;
        };
        let current = self.generation.load(Ordering::Acquire);
        if m.generation < current {
            return FilterDecision::Remove;
        }
        if m.generation > current {
            return FilterDecision::Keep;
        }
        let Some(lookup) = self.lookup.get().and_then(Weak::upgrade) else {
            return FilterDecision::Keep;
        };
        let meta = metadata_key(self.layout, &m);
        let cached = {
            let last = self.last.lock();
            last.as_ref()
                .filter(|(k, l, at)| *k == meta && m.version < l.next && at.elapsed() < CACHE_FOR)
                .map(|(_, l, _)| *l)
        };
        let said = match cached {
            Some(l) => l,
            None => match lookup.live_version(&meta) {
                Some(l) => {
                    *self.last.lock() = Some((meta, l, std::time::Instant::now()));
                    l
                }
                None => return FilterDecision::Keep,
            },
        };
        if said.live == Some(m.version) || m.version >= said.next {
            FilterDecision::Keep
        } else {
            FilterDecision::Remove
        }
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
        if tag == Some(NS_MEMBERS) {
            return self.member_decision(key);
        }
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
            // A composite value's metadata keeps its payload (16 or 24
            // bytes): its version tells whose members are garbage.
            Ok(Some(h)) if !h.dropped && !h.kind.is_composite() => match h.expire_at {
                Some(t) if t <= now_ms() => FilterDecision::Replace(dropped_value(h.kind, t)),
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
    use crate::keyspace::{encode_value, engine_key, expiry_key, Kind};

    fn decide(f: &ExpiryFilter, key: &[u8], value: &[u8]) -> FilterDecision {
        f.filter(1, key, FilterValue::Inline(value))
    }

    #[test]
    fn expired_values_lose_their_payload_but_keep_their_key() {
        let f = ExpiryFilter::default();
        let k = engine_key(0, b"a");
        assert_eq!(
            decide(&f, &k, &encode_value(b"v", Some(1))),
            FilterDecision::Replace(dropped_value(Kind::String, 1))
        );
        assert_eq!(
            decide(&f, &k, &dropped_value(Kind::String, 1)),
            FilterDecision::Keep
        );
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
            FilterDecision::Replace(dropped_value(Kind::String, 1))
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

    /// Answers as a store whose key `h` holds the value of `live`.
    struct FakeStore {
        live: Mutex<Option<u64>>,
    }

    impl MetaLookup for FakeStore {
        fn live_version(&self, _meta_key: &[u8]) -> Option<Liveness> {
            let live = *self.live.lock();
            Some(Liveness {
                live,
                next: live.map_or(6, |v| v + 1),
            })
        }
    }

    #[test]
    fn a_cached_lookup_never_removes_the_members_of_a_value_created_after_it() {
        let fake = Arc::new(FakeStore {
            live: Mutex::new(None),
        });
        let store: Arc<dyn MetaLookup> = fake.clone();
        let f = ExpiryFilter::default();
        f.lookup.set(Arc::downgrade(&store)).ok();
        let member =
            |version| crate::members::member_key(Layout::Plain, 0, b"h", version, b"field");
        // `h` was deleted: its version 5 members are garbage.
        assert_eq!(decide(&f, &member(5), b"v"), FilterDecision::Remove);
        // `h` is created again (version 6); a later compaction meets its
        // members while the filter still remembers the deleted value.
        *fake.live.lock() = Some(6);
        assert_eq!(decide(&f, &member(6), b"v"), FilterDecision::Keep);
        assert_eq!(decide(&f, &member(5), b"v"), FilterDecision::Remove);
        // Replaced by a newer value again: version 7 is live now.
        *fake.live.lock() = Some(7);
        assert_eq!(decide(&f, &member(7), b"v"), FilterDecision::Keep);
        assert_eq!(decide(&f, &member(6), b"v"), FilterDecision::Remove);
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
