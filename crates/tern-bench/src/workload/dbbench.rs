//! db_bench's benchmarks: `fillseq`, `fillrandom`, `overwrite`,
//! `readrandom`, `readseq`, `seekrandom`, `readwhilewriting` and
//! `mixgraph`, with db_bench's key format (8 big-endian bytes padded with
//! `'0'` to `key_size`) and half-compressible values.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::mixgraph::{MixOp, Mixgraph, MixgraphParams};
use super::value::fill_compressible;
use crate::binding::Binding;
use crate::generator::fnv_hash64;
use crate::measure::OpKind;
use crate::runner::{Ctx, Worker, Workload};
use crate::{Error, Result};

/// The benchmarks `tern bench db` knows.
pub const BENCHMARKS: &[&str] = &[
    "fillseq",
    "fillrandom",
    "overwrite",
    "readrandom",
    "readseq",
    "seekrandom",
    "readwhilewriting",
    "mixgraph",
];

/// db_bench settings shared by every benchmark of one invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct DbBenchConfig {
    /// Keys in the key space (`-num`).
    pub num: u64,
    /// Operations of read benchmarks and mixgraph (`-reads`; 0: `num`).
    pub reads: u64,
    /// Key bytes.
    pub key_size: usize,
    /// Value bytes (mixgraph draws its own).
    pub value_size: usize,
    /// Entries read after each seek (`-seek_nexts`).
    pub seek_nexts: usize,
    /// Client threads.
    pub threads: usize,
    /// RNG seed.
    pub seed: u64,
    /// Mixgraph parameters.
    pub mix: MixgraphParams,
}

/// db_bench's key for id `v`.
pub fn db_bench_key(v: u64, key_size: usize, out: &mut Vec<u8>) {
    out.clear();
    let n = key_size.min(8);
    for i in 0..n {
        out.push((v >> ((n - i - 1) * 8)) as u8);
    }
    out.resize(key_size, b'0');
}

/// Which key ids have been written, for the logical size.
#[derive(Debug)]
pub struct KeySet {
    bits: Vec<AtomicU64>,
    count: AtomicU64,
}

impl KeySet {
    /// An empty set over ids `[0, n)`.
    pub fn new(n: u64) -> Self {
        KeySet {
            bits: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
        }
    }

    /// Adds `id`.
    pub fn insert(&self, id: u64) {
        if let Some(w) = self.bits.get((id / 64) as usize) {
            let bit = 1u64 << (id % 64);
            if w.fetch_or(bit, Ordering::Relaxed) & bit == 0 {
                self.count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Ids present.
    pub fn len(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// State shared by every benchmark of one invocation.
#[derive(Debug)]
pub struct DbBenchState {
    /// Settings.
    pub cfg: DbBenchConfig,
    /// Keys written so far.
    pub written: KeySet,
    /// Sum of the value sizes of mixgraph puts (for their mean).
    mix_value_bytes: AtomicU64,
    mix_puts: AtomicU64,
    mix: Mixgraph,
}

impl DbBenchState {
    /// State for `cfg`.
    pub fn new(cfg: DbBenchConfig) -> Self {
        DbBenchState {
            written: KeySet::new(cfg.num),
            mix: Mixgraph::new(cfg.num as i64, cfg.mix.clone()),
            mix_value_bytes: AtomicU64::new(0),
            mix_puts: AtomicU64::new(0),
            cfg,
        }
    }

    fn mean_value(&self) -> f64 {
        let puts = self.mix_puts.load(Ordering::Relaxed);
        let fixed = self.cfg.value_size as f64;
        if puts == 0 {
            fixed
        } else {
            // Keys first filled at value_size, then rewritten by mixgraph.
            let mix = self.mix_value_bytes.load(Ordering::Relaxed) as f64 / puts as f64;
            let share = (puts as f64 / self.cfg.num.max(1) as f64).min(1.0);
            fixed * (1.0 - share) + mix * share
        }
    }
}

/// One db_bench benchmark as a workload.
pub struct DbBench {
    st: Arc<DbBenchState>,
    name: String,
    ops: u64,
    seq: AtomicU64,
    found: AtomicU64,
    entries: AtomicU64,
    readers_left: Arc<AtomicUsize>,
    start: Instant,
}

impl DbBench {
    /// Benchmark `name` over shared state `st`.
    pub fn new(st: Arc<DbBenchState>, name: &str) -> Result<Self> {
        if !BENCHMARKS.contains(&name) {
            return Err(Error(format!(
                "unknown benchmark {name:?}; known: {}",
                BENCHMARKS.join(",")
            )));
        }
        let reads = if st.cfg.reads == 0 {
            st.cfg.num
        } else {
            st.cfg.reads
        };
        let ops = match name {
            "fillseq" | "fillrandom" | "overwrite" => st.cfg.num,
            _ => reads,
        };
        Ok(DbBench {
            name: name.to_string(),
            ops,
            seq: AtomicU64::new(0),
            found: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            readers_left: Arc::new(AtomicUsize::new(st.cfg.threads.max(1))),
            st,
            start: Instant::now(),
        })
    }

    /// Client threads to start (readwhilewriting adds its writer).
    pub fn threads(&self) -> usize {
        self.st.cfg.threads.max(1) + usize::from(self.name == "readwhilewriting")
    }

    /// Operations expected.
    pub fn ops(&self) -> u64 {
        self.ops
    }
}

impl Workload for Arc<DbBench> {
    fn worker(&self, index: usize, threads: usize) -> Box<dyn Worker> {
        let writer = self.name == "readwhilewriting" && index == threads - 1;
        let clients = if self.name == "readwhilewriting" {
            threads - 1
        } else {
            threads
        }
        .max(1);
        let share = if writer {
            u64::MAX
        } else {
            self.ops / clients as u64 + u64::from((index as u64) < self.ops % clients as u64)
        };
        Box::new(DbBenchWorker {
            b: self.clone(),
            rng: SmallRng::seed_from_u64(self.st.cfg.seed ^ fnv_hash64(index as u64 + 7)),
            left: share,
            writer,
            key: Vec::new(),
            value: vec![
                0u8;
                self.st
                    .cfg
                    .value_size
                    .max(self.st.cfg.mix.max_value_size as usize)
            ],
            cursor: None,
        })
    }

    fn logical_bytes(&self) -> u64 {
        let n = self.st.written.len() as f64;
        (n * (self.st.cfg.key_size as f64 + self.st.mean_value())) as u64
    }

    fn extra(&self) -> Vec<(String, f64)> {
        let mut v = vec![(
            "found".to_string(),
            self.found.load(Ordering::Relaxed) as f64,
        )];
        let e = self.entries.load(Ordering::Relaxed);
        if e > 0 {
            v.push(("entries_read".into(), e as f64));
            v.push((
                "entries_per_sec".into(),
                e as f64 / self.start.elapsed().as_secs_f64().max(1e-9),
            ));
        }
        v
    }
}

struct DbBenchWorker {
    b: Arc<DbBench>,
    rng: SmallRng,
    left: u64,
    writer: bool,
    key: Vec<u8>,
    value: Vec<u8>,
    cursor: Option<Vec<u8>>,
}

impl DbBenchWorker {
    fn put(&mut self, db: &dyn Binding, ctx: &mut Ctx, id: u64, len: usize) {
        let st = &self.b.st;
        db_bench_key(id, st.cfg.key_size, &mut self.key);
        let len = len.min(self.value.len());
        fill_compressible(&mut self.rng, &mut self.value[..len]);
        let (k, v) = (&self.key, &self.value[..len]);
        if ctx.time(OpKind::Insert, || db.put(k, v)).is_some() {
            st.written.insert(id);
        }
    }
}

impl Worker for DbBenchWorker {
    fn step(&mut self, db: &dyn Binding, ctx: &mut Ctx) -> bool {
        let b = self.b.clone();
        let st = &b.st;
        let num = st.cfg.num.max(1);
        if self.writer {
            // readwhilewriting's writer: untimed random puts until readers finish.
            if b.readers_left.load(Ordering::Relaxed) == 0 {
                return false;
            }
            let id = self.rng.gen_range(0..num);
            db_bench_key(id, st.cfg.key_size, &mut self.key);
            let len = st.cfg.value_size;
            fill_compressible(&mut self.rng, &mut self.value[..len]);
            if db.put(&self.key, &self.value[..len]).is_ok() {
                st.written.insert(id);
            }
            return true;
        }
        if self.left == 0 {
            b.readers_left.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        self.left -= 1;
        match b.name.as_str() {
            "fillseq" => {
                let id = b.seq.fetch_add(1, Ordering::Relaxed);
                self.put(db, ctx, id, st.cfg.value_size);
            }
            "fillrandom" | "overwrite" => {
                let id = self.rng.gen_range(0..num);
                self.put(db, ctx, id, st.cfg.value_size);
            }
            "readrandom" | "readwhilewriting" => {
                let id = self.rng.gen_range(0..num);
                db_bench_key(id, st.cfg.key_size, &mut self.key);
                if let Some(Some(_)) = ctx.time(OpKind::Read, || db.read(&self.key).map(Some)) {
                    b.found.fetch_add(1, Ordering::Relaxed);
                }
            }
            "seekrandom" => {
                let id = self.rng.gen_range(0..num);
                db_bench_key(id, st.cfg.key_size, &mut self.key);
                let n = st.cfg.seek_nexts + 1;
                if let Some(got) = ctx.time(OpKind::Scan, || db.scan(&self.key, n, &mut |_, _| {}))
                {
                    if got > 0 {
                        b.found.fetch_add(1, Ordering::Relaxed);
                    }
                    b.entries.fetch_add(got as u64, Ordering::Relaxed);
                }
            }
            "readseq" => {
                // Chunks of 1000 entries, resuming after the last key read.
                let start = self.cursor.take().unwrap_or_default();
                let mut last = Vec::new();
                let got = ctx.time(OpKind::Scan, || {
                    db.scan(&start, 1001, &mut |k, _| {
                        last.clear();
                        last.extend_from_slice(k);
                    })
                });
                let got = got.unwrap_or(0);
                let fresh = if start.is_empty() {
                    got
                } else {
                    got.saturating_sub(1)
                };
                b.entries.fetch_add(fresh as u64, Ordering::Relaxed);
                if got <= 1 && !start.is_empty() || got == 0 {
                    self.left = 0;
                } else {
                    self.cursor = Some(last);
                }
            }
            _ => match st.mix.next(&mut self.rng) {
                MixOp::Get(id) => {
                    db_bench_key(id as u64, st.cfg.key_size, &mut self.key);
                    if let Some(Some(_)) = ctx.time(OpKind::Read, || db.read(&self.key).map(Some)) {
                        b.found.fetch_add(1, Ordering::Relaxed);
                    }
                }
                MixOp::Put(id, len) => {
                    st.mix_puts.fetch_add(1, Ordering::Relaxed);
                    st.mix_value_bytes.fetch_add(len as u64, Ordering::Relaxed);
                    self.put(db, ctx, id as u64, len);
                }
                MixOp::Seek(id, n) => {
                    db_bench_key(id as u64, st.cfg.key_size, &mut self.key);
                    if let Some(got) =
                        ctx.time(OpKind::Scan, || db.scan(&self.key, n, &mut |_, _| {}))
                    {
                        b.entries.fetch_add(got as u64, Ordering::Relaxed);
                    }
                }
            },
        }
        if b.name == "mixgraph" && st.cfg.mix.sine_mix_rate {
            pace(&b, st, ctx);
        }
        true
    }
}

/// Sleeps so the completed operations follow the sine rate (shared by all
/// threads: each thread takes its share of the rate).
fn pace(b: &DbBench, st: &DbBenchState, _ctx: &mut Ctx) {
    let threads = st.cfg.threads.max(1) as f64;
    let t = b.start.elapsed().as_secs_f64();
    let per_thread = st.mix.rate_at(t) / threads;
    let wait = 1.0 / per_thread.max(1e-3);
    if wait > 1e-6 {
        std::thread::sleep(std::time::Duration::from_secs_f64(wait.min(1.0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_big_endian_and_padded() {
        let mut k = Vec::new();
        db_bench_key(0x0102, 16, &mut k);
        assert_eq!(&k[..8], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&k[8..], b"00000000");
        db_bench_key(1, 4, &mut k);
        assert_eq!(k, vec![0, 0, 0, 1]);
        let s = KeySet::new(100);
        s.insert(5);
        s.insert(5);
        s.insert(99);
        s.insert(1000);
        assert_eq!(s.len(), 2);
    }
}
