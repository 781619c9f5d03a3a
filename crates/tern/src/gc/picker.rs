//! Chooses blob files to collect: the most garbage first.

use crate::options::Options;
use crate::version::{BlobFileState, Version};

/// Files to collect, most garbage first, within the batch bounds (at least
/// one file when any qualifies): every file at or over `gc_garbage_ratio`,
/// and, while the blob files are over `gc_space_amp_limit`, files under the
/// ratio too until what they free brings the store back under the limit.
pub fn pick<'a>(v: &'a Version, opts: &Options) -> Vec<&'a BlobFileState> {
    pick_under(v, opts, opts.gc_space_amp_limit)
}

/// [`pick`] for a store that has stopped writing: the lower of
/// `gc_idle_space_amp_limit` and `gc_space_amp_limit` bounds the blob
/// files instead.
pub fn pick_idle<'a>(v: &'a Version, opts: &Options) -> Vec<&'a BlobFileState> {
    pick_under(v, opts, idle_limit(opts))
}

/// The bound on the blob files' bytes over their live bytes for a store
/// that is not writing: the lower of `gc_idle_space_amp_limit` and
/// `gc_space_amp_limit`, either when the other is off.
pub fn idle_limit(opts: &Options) -> Option<f64> {
    match (opts.gc_idle_space_amp_limit, opts.gc_space_amp_limit) {
        (Some(idle), Some(busy)) => Some(idle.min(busy)),
        (idle, busy) => idle.or(busy),
    }
}

/// Where an idle store starts collecting: once its blob files hold half
/// again the garbage [`idle_limit`] allows (1.15 at 1.1), or are halfway
/// from it to `gc_space_amp_limit` if that is nearer; it then works them
/// down to the idle limit. The gap keeps a store that takes a few writes
/// between idle spells from copying after each: every pass frees a part
/// of the bound's allowance at least, from files that had the time to
/// gather it. The start stays under the busy limit, which a writing store
/// keeps, so an idle bound near that one still acts.
pub fn idle_start(opts: &Options) -> Option<f64> {
    let limit = idle_limit(opts)?;
    let start = limit + (limit - 1.0) / 2.0;
    Some(opts.gc_space_amp_limit.map_or(start, |busy| {
        start.min(limit + (busy - limit).max(0.0) / 2.0)
    }))
}

/// [`pick`] with the bound on the blob files' bytes over their live bytes
/// given.
fn pick_under<'a>(v: &'a Version, opts: &Options, limit: Option<f64>) -> Vec<&'a BlobFileState> {
    // Bytes GC must free to bring total/live under the limit. Some file
    // then holds more than the floor's share of garbage: if every file held
    // less, so would the whole. Garbage compaction has not marked yet does
    // not count: GC cannot free it. A writing store leaves it to L0's
    // trigger; an idle one compacts L0 early to reveal it when that is
    // worth its bytes (`compaction::picker::pick_reveal`).
    let (mut excess, floor) = match limit {
        Some(limit) => (v.blob_space_excess(limit, 0), 1.0 - 1.0 / limit),
        None => (0, f64::INFINITY),
    };
    let floor = if excess > 0 { floor } else { f64::INFINITY };
    let mut candidates: Vec<&BlobFileState> = v
        .blob_files
        .values()
        .map(|b| &**b)
        .filter(|b| b.dead_bytes > 0)
        .filter(|b| {
            let r = b.garbage_ratio();
            r >= opts.gc_garbage_ratio || r >= floor
        })
        .collect();
    candidates.sort_by(|a, b| {
        b.garbage_ratio()
            .total_cmp(&a.garbage_ratio())
            .then(a.meta.number.cmp(&b.meta.number))
    });
    let mut out = Vec::new();
    let mut bytes = 0u64;
    for c in candidates {
        let over_ratio = c.garbage_ratio() >= opts.gc_garbage_ratio;
        if !over_ratio && excess == 0 {
            // Sorted by ratio: no later file is over it either.
            break;
        }
        if !out.is_empty()
            && (out.len() >= opts.gc_max_batch_files
                || bytes + c.meta.file_size > opts.gc_max_batch_bytes)
        {
            break;
        }
        bytes += c.meta.file_size;
        excess = excess.saturating_sub(c.dead_bytes.min(c.meta.data_bytes));
        out.push(c);
    }
    // Sorted runs copied in key order make an output that is a sorted run
    // again, when their ranges do not overlap.
    if out.iter().all(|b| b.meta.run_keys.is_some()) {
        out.sort_by(|a, b| a.meta.run_keys.cmp(&b.meta.run_keys));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::BlobMeta;
    use std::sync::Arc;

    /// A version with one 100-byte file per `(number, dead bytes)`.
    fn version(files: &[(u64, u64)]) -> Version {
        let mut v = Version::default();
        for &(n, dead) in files {
            let meta = BlobMeta {
                number: n,
                file_size: 100,
                record_count: 10,
                data_bytes: 100,
                run_keys: None,
            };
            let state = BlobFileState {
                meta,
                dead: Default::default(),
                dead_bytes: dead,
            };
            v.blob_files.insert(n, Arc::new(state));
        }
        v
    }

    fn opts(ratio: f64, limit: Option<f64>, batch: usize) -> Options {
        Options {
            settings: crate::Settings {
                gc_garbage_ratio: ratio,
                gc_space_amp_limit: limit,
                gc_max_batch_files: batch,
                ..crate::Settings::default()
            },
            ..Options::default()
        }
    }

    fn picked(v: &Version, o: &Options) -> Vec<u64> {
        pick(v, o).iter().map(|b| b.meta.number).collect()
    }

    #[test]
    fn most_garbage_first_within_bounds() {
        let v = version(&[(1, 10), (2, 90), (3, 60), (4, 70)]);
        assert_eq!(picked(&v, &opts(0.5, None, 2)), vec![2, 4]);
        assert_eq!(picked(&v, &opts(0.5, None, 8)), vec![2, 4, 3]);
        assert!(picked(&v, &opts(0.95, None, 8)).is_empty());
    }

    #[test]
    fn over_the_space_limit_files_under_the_ratio_are_collected_until_back_under_it() {
        // 400 bytes, 120 dead: 400/280 = 1.43 over a 1.25 limit; freeing
        // 400 - 1.25 * 280 = 50 bytes takes the 40 and one 30 (most garbage
        // first, the lower number on ties), not the 20.
        let v = version(&[(1, 20), (2, 40), (3, 30), (4, 30)]);
        assert_eq!(picked(&v, &opts(0.5, Some(1.25), 8)), vec![2, 3]);
        // The batch bounds still apply.
        assert_eq!(picked(&v, &opts(0.5, Some(1.25), 1)), vec![2]);
        // Without the limit nothing reaches the ratio.
        assert!(picked(&v, &opts(0.5, None, 8)).is_empty());
        // Under the limit only the ratio counts: 400/350 = 1.14.
        let v = version(&[(1, 10), (2, 20), (3, 10), (4, 10)]);
        assert!(picked(&v, &opts(0.5, Some(1.25), 8)).is_empty());
        assert_eq!(picked(&v, &opts(0.2, Some(1.25), 8)), vec![2]);
        // A tighter limit: 300/243 = 1.23 is over 1.2, and freeing
        // 300 - 1.2 * 243 = 8.4 bytes takes one file.
        let v = version(&[(1, 19), (2, 19), (3, 19)]);
        assert_eq!(picked(&v, &opts(0.5, Some(1.2), 8)), vec![1]);
    }

    #[test]
    fn an_idle_store_is_collected_down_to_the_idle_limit_and_no_further() {
        // Garbage spread thinly, as updates spread over every file leave
        // it: 400/340 = 1.18, under 1.25, and no file holds the fifth it
        // needs there.
        let v = version(&[(1, 15), (2, 15), (3, 15), (4, 15)]);
        let mut o = opts(0.5, Some(1.25), 8);
        o.settings.gc_idle_space_amp_limit = Some(1.1);
        assert!(picked(&v, &o).is_empty());
        // Idle, 1.1 takes files of at least a eleventh of garbage until
        // 400 - 1.1 * 340 = 26 bytes are freed: two of 15.
        let idle: Vec<u64> = pick_idle(&v, &o).iter().map(|b| b.meta.number).collect();
        assert_eq!(idle, vec![1, 2]);
        // A store already under the idle bound is left alone: 400/368.
        let under = version(&[(1, 8), (2, 8), (3, 8), (4, 8)]);
        assert!(pick_idle(&under, &o).is_empty());
        // Over it, a file under the bound's share (1 - 1/1.1, 9.1%) stays
        // even while the rest cannot free enough: 400/333 = 1.2, excess
        // 400 - 1.1 * 333 = 33.7; the 8s are skipped.
        let mixed = version(&[(1, 8), (2, 30), (3, 8), (4, 21)]);
        let idle: Vec<u64> = pick_idle(&mixed, &o)
            .iter()
            .map(|b| b.meta.number)
            .collect();
        assert_eq!(idle, vec![2, 4]);
        // An idle limit above the busy one changes nothing, and off is off.
        o.settings.gc_idle_space_amp_limit = Some(1.5);
        assert!(pick_idle(&v, &o).is_empty());
        o.settings.gc_idle_space_amp_limit = None;
        assert!(pick_idle(&v, &o).is_empty());
    }

    #[test]
    fn an_idle_store_starts_collecting_at_half_again_the_garbage_its_bound_allows() {
        let mut o = opts(0.5, Some(1.25), 8);
        o.settings.gc_idle_space_amp_limit = Some(1.1);
        let start = idle_start(&o).unwrap();
        assert!((start - 1.15).abs() < 1e-9, "{start}");
        // Halfway to a busy bound nearer than that is where it starts
        // instead, so the busy bound a writing store keeps never hides it.
        o.settings.gc_space_amp_limit = Some(1.12);
        let start = idle_start(&o).unwrap();
        assert!((start - 1.11).abs() < 1e-9, "{start}");
        o.settings.gc_idle_space_amp_limit = Some(1.2);
        o.settings.gc_space_amp_limit = Some(1.25);
        let start = idle_start(&o).unwrap();
        assert!((start - 1.225).abs() < 1e-9, "{start}");
        o.settings.gc_idle_space_amp_limit = Some(1.1);
        // Without a busy bound, from the idle one alone; without either,
        // never.
        o.settings.gc_space_amp_limit = None;
        let start = idle_start(&o).unwrap();
        assert!((start - 1.15).abs() < 1e-9, "{start}");
        o.settings.gc_idle_space_amp_limit = None;
        assert_eq!(idle_start(&o), None);
        // With the idle bound off, a busy one alone is both.
        o.settings.gc_space_amp_limit = Some(1.25);
        assert_eq!(idle_start(&o), Some(1.25));
    }

    #[test]
    fn sorted_runs_are_collected_in_key_order() {
        let mut v = version(&[(1, 90), (2, 60), (3, 70)]);
        let mut mark = |n: u64, first: &[u8], last: &[u8]| {
            let mut state = (*v.blob_files[&n]).clone();
            state.meta.run_keys = Some((first.to_vec(), last.to_vec()));
            v.blob_files.insert(n, Arc::new(state));
        };
        mark(1, b"m", b"z");
        mark(2, b"a", b"f");
        mark(3, b"g", b"l");
        assert_eq!(picked(&v, &opts(0.5, None, 8)), vec![2, 3, 1]);
        // With one file that is no run, most garbage first as ever.
        let mut v = v.clone();
        let mut plain = (*v.blob_files[&3]).clone();
        plain.meta.run_keys = None;
        v.blob_files.insert(3, Arc::new(plain));
        assert_eq!(picked(&v, &opts(0.5, None, 8)), vec![1, 3, 2]);
    }
}
