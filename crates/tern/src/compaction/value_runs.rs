//! Which sorted value runs a compaction into the last level merges
//! (`Settings::sorted_value_runs`).
//!
//! A compaction that moves values into a new run must keep the runs under
//! each of its keys within the limit. Merging every run under its keys
//! once the limit is reached rewrites the oldest, densest runs, those
//! holding most of the values, again and again as the store grows. Here
//! runs merge only where the limit needs it, the sparsest first: young
//! runs that hold few values for their span of keys merge with each other,
//! while a large run stays where it is.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::format::block::common_prefix_len;

/// A sorted run's part under a compaction's keys.
#[derive(Debug, Clone)]
pub(crate) struct RunPart<'a> {
    /// The run's blob file.
    pub file: u64,
    /// The run's first and last key, clipped to the compaction's keys.
    pub first: &'a [u8],
    /// See `first`.
    pub last: &'a [u8],
    /// Live bytes per unit of key space over the whole run ([`densities`]).
    pub density: f64,
}

/// The runs among `parts` whose values move into the new run so that no
/// key is under more than `keep_at_most` of the runs left: walking the keys
/// in order, wherever a run starts and too many are under that key, the
/// sparsest of them (on a tie, the higher file number) until few enough
/// are. A greedy walk, cheap rather than minimal: a run it merges early
/// may turn out not to be needed once a later one merges too (one that
/// spans both pile-ups). `O(n log n)`: a job into a large last level names
/// hundreds of runs.
pub(crate) fn runs_to_merge(parts: &[RunPart<'_>], keep_at_most: usize) -> BTreeSet<u64> {
    // Starts sort before ends at the same key: closed spans touching there
    // share it.
    let mut events: Vec<(&[u8], bool, usize)> = Vec::with_capacity(2 * parts.len());
    for (i, p) in parts.iter().enumerate() {
        events.push((p.first, false, i));
        events.push((p.last, true, i));
    }
    events.sort_unstable();
    // Densities are finite and not negative: their bits order as they do.
    let rank = |i: usize| (parts[i].density.to_bits(), Reverse(parts[i].file), i);
    let mut under = BTreeSet::new();
    let mut merged = BTreeSet::new();
    for (_, end, i) in events {
        if end {
            under.remove(&rank(i));
            continue;
        }
        under.insert(rank(i));
        while under.len() > keep_at_most {
            match under.pop_first() {
                Some((_, _, sparsest)) => merged.insert(parts[sparsest].file),
                None => break,
            };
        }
    }
    merged
}

/// A whole sorted run: its key span and live bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunSpan<'a> {
    /// The run's first key.
    pub first: &'a [u8],
    /// The run's last key.
    pub last: &'a [u8],
    /// Bytes of its records that are not dead.
    pub live_bytes: u64,
}

/// Live bytes per unit of key space of each run in `spans`, comparable
/// among the runs of one call.
/// Keys are placed on a line by the bytes after the prefix all of them
/// share, each byte position counted in the radix of the bytes seen there
/// (decimal digits in base 10, not 256, so that the places of numbered
/// keys are spaced as their numbers are). A run too narrow to measure that
/// way counts as one unit wide.
pub(crate) fn densities(spans: &[RunSpan<'_>]) -> Vec<f64> {
    let keys = || spans.iter().flat_map(|s| [s.first, s.last]);
    let prefix = keys()
        .reduce(|p, k| &p[..common_prefix_len(p, k)])
        .map_or(0, <[u8]>::len);
    // Per byte position past the prefix: the least byte seen and the
    // radix, for as many positions as an f64 counts exactly.
    let mut digits: Vec<(u8, f64)> = Vec::new();
    let mut span = 1.0f64;
    for i in prefix.. {
        let seen = keys().filter_map(|k| k.get(i).copied());
        let (lo, hi) = seen.fold((u8::MAX, 0u8), |(lo, hi), b| (lo.min(b), hi.max(b)));
        if lo > hi {
            break; // no key is this long
        }
        let radix = f64::from(hi - lo) + 1.0;
        if span * radix > (1u64 << 52) as f64 {
            break;
        }
        span *= radix;
        digits.push((lo, radix));
    }
    let place = |key: &[u8]| {
        digits
            .iter()
            .enumerate()
            .fold(0.0, |at, (n, &(lo, radix))| {
                // A missing byte counts as the least one seen.
                let b = key.get(prefix + n).copied().unwrap_or(lo).max(lo);
                at * radix + f64::from(b - lo)
            })
    };
    spans
        .iter()
        .map(|s| {
            let width = (place(s.last) - place(s.first)).max(1.0);
            s.live_bytes as f64 / width
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(file: u64, first: &'static str, last: &'static str, density: f64) -> RunPart<'static> {
        RunPart {
            file,
            first: first.as_bytes(),
            last: last.as_bytes(),
            density,
        }
    }

    #[test]
    fn nothing_merges_within_the_limit() {
        let parts = [part(1, "a", "m", 1.0), part(2, "c", "z", 1.0)];
        assert!(runs_to_merge(&parts, 2).is_empty());
        assert!(runs_to_merge(&[], 0).is_empty());
    }

    #[test]
    fn the_limit_merges_the_sparsest_runs_where_too_many_share_a_key() {
        // One dense old run under everything, three sparse young ones.
        let parts = [
            part(1, "a", "z", 100.0),
            part(5, "a", "h", 3.0),
            part(6, "b", "k", 2.0),
            part(7, "c", "y", 1.0),
        ];
        assert_eq!(runs_to_merge(&parts, 3), BTreeSet::from([7]));
        assert_eq!(runs_to_merge(&parts, 2), BTreeSet::from([6, 7]));
        // The dense run goes last.
        assert_eq!(runs_to_merge(&parts, 1), BTreeSet::from([5, 6, 7]));
        assert_eq!(runs_to_merge(&parts, 0), BTreeSet::from([1, 5, 6, 7]));
    }

    #[test]
    fn the_limit_leaves_a_sparse_run_away_from_the_pile_up() {
        // "a".."b" is under one run only; the pile-up is at "x".
        let parts = [
            part(1, "a", "b", 0.1),
            part(2, "w", "z", 5.0),
            part(3, "x", "z", 4.0),
            part(4, "x", "y", 6.0),
        ];
        assert_eq!(runs_to_merge(&parts, 2), BTreeSet::from([3]));
    }

    #[test]
    fn ties_merge_the_higher_file_number() {
        let parts = [part(3, "a", "z", 1.0), part(9, "a", "z", 1.0)];
        assert_eq!(runs_to_merge(&parts, 1), BTreeSet::from([9]));
    }

    #[test]
    fn touching_runs_share_their_end_key() {
        let parts = [part(1, "a", "m", 1.0), part(2, "m", "z", 2.0)];
        assert_eq!(runs_to_merge(&parts, 1), BTreeSet::from([1]));
    }

    #[test]
    fn density_is_live_bytes_over_the_span_past_the_shared_prefix() {
        let span = |first: &'static str, last: &'static str, live_bytes| RunSpan {
            first: first.as_bytes(),
            last: last.as_bytes(),
            live_bytes,
        };
        let spans = [
            span("user1000", "user1999", 1000),
            span("user1000", "user1099", 1000),
            span("user1000", "user1000", 7),
        ];
        let d = densities(&spans);
        // The same bytes over a tenth of the keys: ten times as dense
        // (within the rounding of the places).
        assert!((d[1] / d[0] - 10.0).abs() < 0.2, "{d:?}");
        // One key wide counts as one unit.
        assert_eq!(d[2], 7.0);
        assert!(densities(&[]).is_empty());
    }
}
