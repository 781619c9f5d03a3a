//! Fixed-width prefixes of an index block's restart keys, kept beside an
//! open table so that a seek narrows its binary search in one flat array.
//!
//! A table's index has one entry per data block (a 64 MiB table of 4 KiB
//! blocks has about 16,000), and every entry is a restart point. Searching
//! it directly costs one restart-array read and one entry decode at a
//! scattered offset per step: about 14 cache misses per lookup, the largest
//! single cost of a point read from a big table. Here each restart key's
//! user key is reduced to the 8 bytes that follow the prefix all of them
//! share, as a big-endian `u64`; a seek binary-searches those (8 bytes a
//! block, contiguous, the upper steps shared by every lookup and so in
//! cache) and compares whole keys only among the restarts whose prefix
//! equals the target's, usually one or two.
//!
//! Correctness rests on one property: the map from user key to prefix is
//! monotone (`a <= b` implies `p(a) <= p(b)`) for every key, inside the
//! table's range or not. Restart keys whose prefix is below the target's
//! are therefore below the target, and those whose prefix is above it are
//! above it. Nothing is stored on disk.

use crate::error::DecodeError;
use crate::format::block::{common_prefix_len, Block};
use crate::format::coding::prefix_u64 as window;
use crate::format::internal_key::user_key;

/// The prefixes of one index block's restart keys.
#[derive(Debug)]
pub(crate) struct IndexPrefixes {
    /// Bytes every restart key's user key starts with.
    common: Box<[u8]>,
    /// One per restart point, in restart order (non-decreasing).
    prefixes: Box<[u64]>,
}

impl IndexPrefixes {
    /// Prefixes for `index`'s restart keys; `None` for an empty index.
    pub(crate) fn build(index: &Block) -> Result<Option<IndexPrefixes>, DecodeError> {
        if index.is_empty() {
            return Ok(None);
        }
        let n = index.num_restarts();
        // Keys are sorted, so a prefix the first and the next-to-last share
        // is shared by every key but the last. The last is skipped because
        // it is usually a short separator above the table's last key ("l"
        // for a table ending at "key99"), which shares nothing; it maps to
        // `u64::MAX` like any key above the shared prefix.
        let first = user_key(index.restart_key(0)?);
        let near_last = user_key(index.restart_key(n.saturating_sub(2))?);
        let shared = common_prefix_len(first, near_last);
        let mut p = IndexPrefixes {
            common: first[..shared].into(),
            prefixes: Box::default(),
        };
        let mut prefixes = Vec::with_capacity(n);
        for i in 0..n {
            prefixes.push(p.prefix_of(user_key(index.restart_key(i)?)));
        }
        p.prefixes = prefixes.into_boxed_slice();
        Ok(Some(p))
    }

    /// Bytes held.
    pub(crate) fn size(&self) -> usize {
        self.common.len() + 8 * self.prefixes.len()
    }

    /// The prefix of any user key, monotone in the key.
    fn prefix_of(&self, ukey: &[u8]) -> u64 {
        let c = self.common.len();
        match ukey[..c.min(ukey.len())].cmp(&self.common) {
            // Below every restart key (a proper prefix of `common` too).
            std::cmp::Ordering::Less => 0,
            std::cmp::Ordering::Greater => u64::MAX,
            std::cmp::Ordering::Equal => window(&ukey[c..]),
        }
    }

    /// The range of restart indices (`first..=last`) that holds the last
    /// restart whose key is below the internal key `target`, in the form
    /// [`BlockIter::seek_between`](crate::format::block::BlockIter::seek_between)
    /// takes.
    pub(crate) fn seek_range(&self, target: &[u8]) -> (usize, usize) {
        let p = self.prefix_of(user_key(target));
        // Restarts before `lo` are below the target; those from `hi` on are
        // above it. Those from `lo` are at or above `p`, so the ones up to
        // `hi` equal it: usually none or one, stepped over one by one.
        let xs = &self.prefixes;
        let lo = lower_bound(xs, p);
        let mut hi = lo
            + xs[lo..]
                .iter()
                .take(EQUAL_STEPS)
                .take_while(|&&x| x == p)
                .count();
        if hi - lo == EQUAL_STEPS {
            hi += xs[hi..].partition_point(|&x| x == p);
        }
        (lo.saturating_sub(1), hi.saturating_sub(1))
    }
}

/// Restarts sharing the target's prefix that a seek steps over one by one
/// before it searches for the end of them.
const EQUAL_STEPS: usize = 8;

/// The first index of `xs` (sorted) whose value is at least `p`: what
/// `xs.partition_point(|&x| x < p)` returns. Each step halves the range
/// without a branch and first asks for the two entries the next step may
/// read, so the cache misses of consecutive steps overlap: a large table's
/// index (16,000 entries, 128 KB) misses on most of its lower steps.
fn lower_bound(xs: &[u64], p: u64) -> usize {
    if xs.is_empty() {
        return 0;
    }
    let mut base = 0;
    let mut len = xs.len();
    while len > 1 {
        let half = len / 2;
        len -= half;
        if len > 1 {
            // The next step reads one of these two.
            crate::hint::prefetch_read(&xs[base + len / 2 - 1]);
            crate::hint::prefetch_read(&xs[base + half + len / 2 - 1]);
        }
        if xs[base + half - 1] < p {
            base += half;
        }
    }
    base + usize::from(xs[base] < p)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::block::{BlockBuilder, BlockIter};
    use crate::format::internal_key;

    fn ikey(user: &[u8], seq: u64) -> Vec<u8> {
        let mut k = user.to_vec();
        k.extend_from_slice(&((seq << 8) | 1).to_le_bytes());
        k
    }

    /// An index-like block (every entry a restart point) over `users`.
    fn index_of(users: &[Vec<u8>]) -> Block {
        let mut b = BlockBuilder::new(1);
        for (i, u) in users.iter().enumerate() {
            b.add(&ikey(u, 7), &(i as u32).to_le_bytes());
        }
        Block::new(b.finish().to_vec()).unwrap()
    }

    /// Seeks `target` with and without the prefixes and checks both land
    /// on the same entry.
    fn check(block: &std::sync::Arc<Block>, p: &IndexPrefixes, target: &[u8]) {
        let mut plain = BlockIter::new(block.clone(), internal_key::compare);
        plain.seek(target);
        let mut fast = BlockIter::new(block.clone(), internal_key::compare);
        let (first, last) = p.seek_range(target);
        fast.seek_between(target, first, last);
        assert_eq!(plain.valid(), fast.valid(), "target {target:?}");
        if plain.valid() {
            assert_eq!(plain.key(), fast.key(), "target {target:?}");
        }
    }

    #[test]
    fn narrowed_seeks_land_where_full_seeks_do() {
        // Keys sharing a long prefix, keys differing past 8 bytes of it,
        // keys that are prefixes of others and duplicates of a window.
        let mut users: Vec<Vec<u8>> = Vec::new();
        for i in 0..300u32 {
            users.push(format!("user{:06}", i * 7).into_bytes());
            users.push(format!("user{:06}-0123456789{}", i * 7, i % 3).into_bytes());
        }
        users.push(b"user".to_vec());
        users.push(b"user\0".to_vec());
        users.push(b"user\xff\xff\xff\xff\xff\xff\xff\xff\xff".to_vec());
        users.sort();
        users.dedup();
        let block = std::sync::Arc::new(index_of(&users));
        let p = IndexPrefixes::build(&block).unwrap().unwrap();
        assert_eq!(p.common.as_ref(), b"user");
        let mut targets: Vec<Vec<u8>> = Vec::new();
        for u in &users {
            for seq in [0, 7, 100] {
                targets.push(ikey(u, seq));
            }
            let mut longer = u.clone();
            longer.push(0);
            targets.push(ikey(&longer, 7));
            let mut shorter = u.clone();
            shorter.pop();
            targets.push(ikey(&shorter, 7));
        }
        for t in [
            &b""[..],
            b"a",
            b"use",
            b"usez",
            b"user",
            b"zzz",
            b"user\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ] {
            targets.push(ikey(t, 7));
        }
        for t in &targets {
            check(&block, &p, t);
        }
    }

    #[test]
    fn a_short_last_separator_does_not_empty_the_shared_prefix() {
        // A table's last index key is a short successor of its last key.
        let mut users: Vec<Vec<u8>> = (0..100u32)
            .map(|i| format!("key{:08}", i * 999_983).into_bytes())
            .collect();
        users.push(b"l".to_vec());
        let block = std::sync::Arc::new(index_of(&users));
        let p = IndexPrefixes::build(&block).unwrap().unwrap();
        assert_eq!(p.common.as_ref(), b"key");
        for u in &users {
            for t in [
                u.clone(),
                [u.as_slice(), b"0"].concat(),
                u[..u.len() - 1].to_vec(),
            ] {
                check(&block, &p, &ikey(&t, 7));
            }
        }
        for t in [&b"k"[..], b"kez", b"l", b"l\0", b"m"] {
            check(&block, &p, &ikey(t, 7));
        }
    }

    #[test]
    fn one_entry_and_no_shared_prefix() {
        for users in [
            vec![b"k".to_vec()],
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()],
            vec![Vec::new(), b"\0".to_vec(), b"\0\0".to_vec()],
        ] {
            let block = std::sync::Arc::new(index_of(&users));
            let p = IndexPrefixes::build(&block).unwrap().unwrap();
            for t in [&b""[..], b"\0", b"a", b"b", b"bb", b"k", b"z"] {
                for seq in [0, 7, 9] {
                    check(&block, &p, &ikey(t, seq));
                }
            }
        }
    }

    #[test]
    fn lower_bound_is_partition_point() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for n in 0..70 {
            for _ in 0..20 {
                let mut xs: Vec<u64> = (0..n).map(|_| rng.gen_range(0..40)).collect();
                xs.sort();
                for p in 0..42 {
                    assert_eq!(
                        lower_bound(&xs, p),
                        xs.partition_point(|&x| x < p),
                        "{xs:?} {p}"
                    );
                }
            }
        }
        let all_equal = vec![5u64; 1000];
        for p in [4, 5, 6] {
            assert_eq!(
                lower_bound(&all_equal, p),
                all_equal.partition_point(|&x| x < p)
            );
        }
    }

    #[test]
    fn many_restarts_sharing_the_target_prefix() {
        // More restarts than a seek steps over share 8 bytes past the
        // common prefix, with different tails.
        let users: Vec<Vec<u8>> = (0..40u32)
            .map(|i| format!("x-A12345678-{i:04}").into_bytes())
            .chain((0..5u32).map(|i| format!("x-B12345678-{i:04}").into_bytes()))
            .collect();
        let block = std::sync::Arc::new(index_of(&users));
        let p = IndexPrefixes::build(&block).unwrap().unwrap();
        assert_eq!(p.common.as_ref(), b"x-");
        assert_eq!(p.prefixes[..40].iter().min(), p.prefixes[..40].iter().max());
        for u in &users {
            for t in [u.clone(), [u.as_slice(), b"0"].concat()] {
                check(&block, &p, &ikey(&t, 7));
            }
        }
    }

    #[test]
    fn an_empty_index_has_no_prefixes() {
        let block = Block::new(BlockBuilder::new(1).finish().to_vec()).unwrap();
        assert!(IndexPrefixes::build(&block).unwrap().is_none());
    }
}
