//! Chooses blob files to collect: the most garbage first.

use crate::options::Options;
use crate::version::{BlobFileState, Version};

/// Files at or over `gc_garbage_ratio`, most garbage first, within the batch
/// bounds (at least one file when any qualifies).
pub fn pick<'a>(v: &'a Version, opts: &Options) -> Vec<&'a BlobFileState> {
    let mut candidates: Vec<&BlobFileState> = v
        .blob_files
        .values()
        .map(|b| &**b)
        .filter(|b| b.garbage_ratio() >= opts.gc_garbage_ratio)
        .collect();
    candidates.sort_by(|a, b| {
        b.garbage_ratio()
            .total_cmp(&a.garbage_ratio())
            .then(a.meta.number.cmp(&b.meta.number))
    });
    let mut out = Vec::new();
    let mut bytes = 0u64;
    for c in candidates {
        if !out.is_empty()
            && (out.len() >= opts.gc_max_batch_files
                || bytes + c.meta.file_size > opts.gc_max_batch_bytes)
        {
            break;
        }
        bytes += c.meta.file_size;
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::BlobMeta;
    use std::sync::Arc;

    #[test]
    fn most_garbage_first_within_bounds() {
        let mut v = Version::default();
        for (n, dead) in [(1u64, 10u64), (2, 90), (3, 60), (4, 70)] {
            let meta = BlobMeta {
                number: n,
                file_size: 100,
                record_count: 10,
                data_bytes: 100,
            };
            let state = BlobFileState {
                meta,
                dead: Default::default(),
                dead_bytes: dead,
            };
            v.blob_files.insert(n, Arc::new(state));
        }
        let opts = Options {
            settings: crate::Settings {
                gc_max_batch_files: 2,
                ..crate::Settings::default()
            },
            ..Options::default()
        };
        let got: Vec<u64> = pick(&v, &opts).iter().map(|b| b.meta.number).collect();
        assert_eq!(got, vec![2, 4]);
        let opts = Options {
            settings: crate::Settings {
                gc_garbage_ratio: 0.95,
                ..crate::Settings::default()
            },
            ..Options::default()
        };
        assert!(pick(&v, &opts).is_empty());
    }
}
