//! Synthetic traces in the Twitter and Social Graph formats, since the real
//! ones cannot be downloaded here. Twitter clusters follow Yang et al.'s
//! statistics (mean key and value size, get/set mix, zipf α of key
//! popularity); Social Graph traces come from the mixgraph generator.

use std::io::Write;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::mixgraph::{MixOp, Mixgraph, MixgraphParams};
use crate::generator::{fnv_hash64, NumberGen, ZipfTable};
use crate::{Error, Result};

/// A Twitter cluster's statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cluster {
    /// Cluster number.
    pub id: u32,
    /// Key bytes.
    pub key_size: usize,
    /// Mean value bytes.
    pub value_size: usize,
    /// Share of gets (the rest are sets).
    pub get_ratio: f64,
    /// Zipf exponent of key popularity.
    pub alpha: f64,
}

/// Clusters 39, 19 and 51 (WORKLOADS.md).
pub const CLUSTERS: [Cluster; 3] = [
    Cluster {
        id: 39,
        key_size: 41,
        value_size: 80,
        get_ratio: 0.06,
        alpha: 0.0,
    },
    Cluster {
        id: 19,
        key_size: 42,
        value_size: 101,
        get_ratio: 0.75,
        alpha: 0.735,
    },
    Cluster {
        id: 51,
        key_size: 44,
        value_size: 221,
        get_ratio: 0.90,
        alpha: 1.97,
    },
];

/// The cluster with number `id`.
pub fn cluster(id: u32) -> Result<Cluster> {
    CLUSTERS
        .iter()
        .copied()
        .find(|c| c.id == id)
        .ok_or_else(|| Error(format!("unknown cluster {id} (39, 19, 51)")))
}

/// An anonymized key of exactly `len` characters for key id `id`.
pub fn anon_key(id: u64, len: usize) -> String {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::with_capacity(len);
    let mut h = fnv_hash64(id);
    let mut round = 0;
    while s.len() < len {
        if h == 0 {
            round += 1;
            h = fnv_hash64(id ^ (round << 40));
        }
        s.push(ALPHA[(h % 64) as usize] as char);
        h /= 64;
    }
    s
}

/// Writes `ops` lines of a Twitter-format trace over `keys` keys.
pub fn write_twitter(
    out: &mut dyn Write,
    c: Cluster,
    ops: u64,
    keys: u64,
    seed: u64,
) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let pop = ZipfTable::new(keys, c.alpha);
    for i in 0..ops {
        // Popularity rank → scattered key id, so hot keys are not adjacent.
        let id = fnv_hash64(pop.next(&mut rng)) % (keys * 16).max(1);
        let key = anon_key(id, c.key_size);
        let get = rng.gen::<f64>() < c.get_ratio;
        let vs = if get {
            0
        } else {
            // Sizes spread ±25% around the cluster's mean.
            let lo = c.value_size * 3 / 4;
            rng.gen_range(lo..=c.value_size * 2 - lo)
        };
        let client = rng.gen_range(0..16);
        let op = if get { "get" } else { "set" };
        let ttl = if get { 0 } else { 86_400 };
        writeln!(
            out,
            "{},{key},{},{vs},{client},{op},{ttl}",
            i / 1000,
            c.key_size
        )?;
    }
    Ok(())
}

/// Writes `ops` lines of a Social Graph trace from mixgraph over `keys` keys.
pub fn write_meta(
    out: &mut dyn Write,
    params: MixgraphParams,
    ops: u64,
    keys: u64,
    seed: u64,
) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let m = Mixgraph::new(keys as i64, params);
    for _ in 0..ops {
        let (k, t, v) = match m.next(&mut rng) {
            MixOp::Get(k) => (k, 0, 0),
            MixOp::Put(k, v) => (k, 1, v),
            MixOp::Seek(k, _) => (k, 2, 0),
        };
        writeln!(out, "{},{t},{v}", fnv_hash64(k as u64))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::trace::{Trace, TraceFormat};

    #[test]
    fn generated_twitter_trace_has_cluster_statistics() {
        let c = cluster(19).unwrap();
        let mut buf = Vec::new();
        write_twitter(&mut buf, c, 20_000, 5_000, 1).unwrap();
        let t = Trace::read(TraceFormat::Twitter, &buf[..], None).unwrap();
        let (g, s, _) = t.mix();
        assert_eq!(g + s, 20_000);
        assert!((g as f64 / 20_000.0 - 0.75).abs() < 0.02);
        let first = String::from_utf8_lossy(&buf[..200]).to_string();
        assert_eq!(
            first
                .lines()
                .next()
                .unwrap()
                .split(',')
                .nth(1)
                .unwrap()
                .len(),
            42
        );
        let mut meta = Vec::new();
        write_meta(&mut meta, MixgraphParams::default(), 1000, 10_000, 2).unwrap();
        let t = Trace::read(TraceFormat::Meta, &meta[..], None).unwrap();
        assert_eq!(t.ops.len(), 1000);
    }
}
