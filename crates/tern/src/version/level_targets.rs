//! Level size targets and compaction scores.
//!
//! With dynamic level sizes (RocksDB's `level_compaction_dynamic_level_bytes`)
//! the last level's actual size anchors the targets: each level above holds
//! `1/multiplier` of the one below, and L0 compacts straight into the *base
//! level*, the highest level whose target still exceeds nothing more than
//! `max_bytes_for_level_base`. A small store therefore has only L0 and the
//! last level, and write amplification stays near `multiplier × levels used`.

use super::Version;
use crate::options::{Options, NUM_LEVELS};

/// Size targets for one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelTargets {
    /// Level that L0 compacts into.
    pub base_level: usize,
    /// Target bytes per level (index 0 unused; levels above the base are 0).
    pub target_bytes: [u64; NUM_LEVELS],
}

impl LevelTargets {
    /// Computes targets for `v`.
    pub fn compute(v: &Version, opts: &Options) -> Self {
        let base = opts.max_bytes_for_level_base.max(1);
        let mult = opts.max_bytes_for_level_multiplier.max(2);
        let mut target_bytes = [0u64; NUM_LEVELS];
        if !opts.dynamic_level_bytes {
            let mut t = base;
            for slot in target_bytes.iter_mut().skip(1) {
                *slot = t;
                t = t.saturating_mul(mult);
            }
            return LevelTargets {
                base_level: 1,
                target_bytes,
            };
        }
        let last = NUM_LEVELS - 1;
        let largest = (1..NUM_LEVELS).map(|l| v.level_bytes(l)).max().unwrap_or(0);
        let mut t = largest.max(base);
        let mut base_level = last;
        target_bytes[last] = t;
        while base_level > 1 && t > base {
            t /= mult;
            base_level -= 1;
            target_bytes[base_level] = t.max(1);
        }
        LevelTargets {
            base_level,
            target_bytes,
        }
    }

    /// Compaction score of each level; `>= 1.0` means the level needs work.
    /// The last level never compacts out.
    pub fn scores(&self, v: &Version, opts: &Options) -> [f64; NUM_LEVELS] {
        let mut s = [0.0; NUM_LEVELS];
        s[0] = v.levels[0].len() as f64 / opts.level0_file_num_compaction_trigger as f64;
        for (level, score) in s.iter_mut().enumerate().take(NUM_LEVELS - 1).skip(1) {
            let bytes = v.level_bytes(level);
            if bytes == 0 {
                continue;
            }
            // A level above the base level should be empty: drain it.
            let target = self.target_bytes[level];
            *score = if level < self.base_level || target == 0 {
                f64::MAX
            } else {
                bytes as f64 / target as f64
            };
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::FileMeta;
    use std::sync::Arc;

    #[test]
    fn small_store_uses_last_level_as_base() {
        let opts = Options::default();
        let v = Version::default();
        let t = LevelTargets::compute(&v, &opts);
        assert_eq!(t.base_level, NUM_LEVELS - 1);
        let mut v = Version::default();
        v.levels[6].push(Arc::new(FileMeta {
            number: 1,
            file_size: opts.max_bytes_for_level_base * 25,
            ..Default::default()
        }));
        let t = LevelTargets::compute(&v, &opts);
        assert_eq!(t.base_level, 4);
        assert!(t.target_bytes[4] <= opts.max_bytes_for_level_base);
        assert!(t.target_bytes[5] > opts.max_bytes_for_level_base);
    }
}
