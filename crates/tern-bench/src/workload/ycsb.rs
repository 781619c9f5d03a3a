//! YCSB's core workload: properties, key naming, operation choice, and the
//! load and run phases.
//!
//! Properties understood (YCSB's names and defaults): `recordcount` (1000),
//! `operationcount` (1000), `fieldcount` (10), `fieldlength` (100),
//! `fieldlengthdistribution` (constant|uniform|zipfian), `readproportion`
//! (0.95), `updateproportion` (0.05), `insertproportion` (0),
//! `scanproportion` (0), `readmodifywriteproportion` (0),
//! `deleteproportion` (0), `requestdistribution` (uniform|zipfian|latest|
//! sequential), `zipfianconstant` (0.99), `minscanlength` (1),
//! `maxscanlength` (1000), `scanlengthdistribution` (uniform|zipfian),
//! `insertorder` (hashed|ordered), `insertstart` (0), `insertcount`,
//! `zeropadding` (1), `writeallfields` (false), `threadcount` (1).
//!
//! A row is stored as one value holding all fields. An update with
//! `writeallfields=false` reads the row, replaces one field and writes it
//! back (as YCSB-cpp's RocksDB binding does); with `true` it writes a new
//! row blindly. Read-modify-write is timed as one operation, so operation
//! counts add up to `operationcount`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::value::{decode_row, encode_row, fill_printable, push_field};
use crate::binding::Binding;
use crate::generator::{
    fnv_hash64, AcknowledgedCounter, Constant, NumberGen, ScrambledZipfian, SkewedLatest, Uniform,
    Zipfian,
};
use crate::measure::OpKind;
use crate::props::Properties;
use crate::runner::{Ctx, Worker, Workload};
use crate::{Error, Result};

/// The operation mix and shape of a YCSB core workload.
#[derive(Debug, Clone, PartialEq)]
pub struct YcsbConfig {
    /// Records loaded.
    pub record_count: u64,
    /// Operations in the run phase.
    pub operation_count: u64,
    /// Fields per record.
    pub field_count: usize,
    /// Field length (maximum for non-constant distributions).
    pub field_length: u64,
    /// `constant`, `uniform` or `zipfian`.
    pub field_length_distribution: String,
    /// Proportions: read, update, insert, scan, read-modify-write, delete.
    pub proportions: [f64; 6],
    /// `uniform`, `zipfian`, `latest` or `sequential`.
    pub request_distribution: String,
    /// Zipfian constant (0.99).
    pub zipfian_constant: f64,
    /// Shortest scan.
    pub min_scan_length: u64,
    /// Longest scan.
    pub max_scan_length: u64,
    /// `uniform` or `zipfian`.
    pub scan_length_distribution: String,
    /// Keys are hashed (true, YCSB's default) or in insertion order.
    pub hashed_inserts: bool,
    /// First key number this client loads.
    pub insert_start: u64,
    /// Keys this client loads.
    pub insert_count: u64,
    /// Minimum digits in a key number.
    pub zero_padding: usize,
    /// Updates write every field (blind put) instead of one (read-modify-write).
    pub write_all_fields: bool,
    /// Client threads.
    pub thread_count: usize,
    /// Seed of the per-thread generators.
    pub seed: u64,
    /// Operations per second over all threads (`target`; YCSB's `-target`);
    /// `None` (0, the default): unthrottled.
    pub target: Option<f64>,
}

impl YcsbConfig {
    /// Reads the configuration from properties, with YCSB's defaults.
    pub fn from_props(p: &Properties) -> Result<Self> {
        let record_count = p.parse_or("recordcount", 1000u64)?;
        let insert_start = p.parse_or("insertstart", 0u64)?;
        let c = YcsbConfig {
            record_count,
            operation_count: p.parse_or("operationcount", 1000u64)?,
            field_count: p.parse_or("fieldcount", 10usize)?,
            field_length: p.parse_or("fieldlength", 100u64)?,
            field_length_distribution: p.get_or("fieldlengthdistribution", "constant").to_string(),
            proportions: [
                p.parse_or("readproportion", 0.95)?,
                p.parse_or("updateproportion", 0.05)?,
                p.parse_or("insertproportion", 0.0)?,
                p.parse_or("scanproportion", 0.0)?,
                p.parse_or("readmodifywriteproportion", 0.0)?,
                p.parse_or("deleteproportion", 0.0)?,
            ],
            request_distribution: p.get_or("requestdistribution", "uniform").to_string(),
            zipfian_constant: p.parse_or(
                "zipfianconstant",
                p.parse_or("zipfian_const", crate::generator::zipfian::ZIPFIAN_CONSTANT)?,
            )?,
            min_scan_length: p.parse_or("minscanlength", 1u64)?,
            max_scan_length: p.parse_or("maxscanlength", 1000u64)?,
            scan_length_distribution: p.get_or("scanlengthdistribution", "uniform").to_string(),
            hashed_inserts: p.get_or("insertorder", "hashed") != "ordered",
            insert_start,
            insert_count: p.parse_or("insertcount", record_count.saturating_sub(insert_start))?,
            zero_padding: p.parse_or("zeropadding", 1usize)?,
            write_all_fields: p.parse_or("writeallfields", false)?,
            thread_count: p.parse_or("threadcount", 1usize)?,
            seed: p.parse_or("seed", 0x7e57_u64)?,
            target: match p.parse_or("target", 0.0f64)? {
                t if !t.is_finite() || t < 0.0 => {
                    return Err(Error(format!(
                        "target must be a number of operations per second (0: unthrottled), not {t}"
                    )))
                }
                t => (t > 0.0).then_some(t),
            },
        };
        if c.proportions.iter().any(|x| *x < 0.0) || c.proportions.iter().sum::<f64>() <= 0.0 {
            return Err(Error::msg(
                "operation proportions must be >= 0 and not all zero",
            ));
        }
        match c.request_distribution.as_str() {
            "uniform" | "zipfian" | "latest" | "sequential" => {}
            d => return Err(Error(format!("unknown requestdistribution {d:?}"))),
        }
        if c.field_count == 0 {
            return Err(Error::msg("fieldcount must be at least 1"));
        }
        Ok(c)
    }

    /// The key name of record number `n`: `user` + (hashed) number, zero padded.
    pub fn key(&self, n: u64) -> String {
        let n = if self.hashed_inserts {
            fnv_hash64(n)
        } else {
            n
        };
        format!("user{:0width$}", n, width = self.zero_padding)
    }

    /// Bytes of an encoded row with every field at full length.
    pub fn row_bytes(&self) -> u64 {
        let names: u64 = (0..self.field_count)
            .map(|i| format!("field{i}").len() as u64)
            .sum();
        names + self.field_count as u64 * (8 + self.field_length)
    }

    /// Mean key length over the first keys (for logical size).
    fn mean_key_len(&self) -> f64 {
        let n = self.record_count.clamp(1, 1000);
        (0..n).map(|i| self.key(i).len() as f64).sum::<f64>() / n as f64
    }
}

/// Shared state of one YCSB workload (both phases).
pub struct Ycsb {
    cfg: YcsbConfig,
    /// Next key number for the load phase.
    load_seq: AtomicU64,
    load_end: u64,
    /// Insert sequence of the run phase.
    inserts: Arc<AcknowledgedCounter>,
    key_chooser: Box<dyn NumberGen>,
    field_len: Box<dyn NumberGen>,
    /// `field0`, `field1`, …: named once, not per row.
    field_names: Vec<String>,
    scan_len: Box<dyn NumberGen>,
    loaded: AtomicU64,
    inserted: AtomicU64,
    deleted: AtomicU64,
    run_phase: bool,
    key_len: f64,
}

impl std::fmt::Debug for Ycsb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ycsb")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Ycsb {
    /// A workload for `cfg`; `run_phase` selects transactions (run) or
    /// inserts (load).
    pub fn new(cfg: YcsbConfig, run_phase: bool) -> Result<Self> {
        let inserts = Arc::new(AcknowledgedCounter::new(cfg.record_count));
        let expected_new = (cfg.operation_count as f64 * cfg.proportions[2] * 2.0) as u64;
        let last = cfg.record_count.max(1) - 1;
        let key_chooser: Box<dyn NumberGen> = match cfg.request_distribution.as_str() {
            "uniform" => Box::new(Uniform::new(cfg.insert_start, last)),
            "zipfian" => Box::new(ScrambledZipfian::with_constant(
                cfg.insert_start,
                cfg.insert_start + cfg.insert_count.max(1) - 1 + expected_new,
                cfg.zipfian_constant,
            )),
            "latest" => Box::new(SkewedLatest::new(inserts.clone())),
            _ => Box::new(Uniform::new(cfg.insert_start, last)),
        };
        let field_len: Box<dyn NumberGen> = match cfg.field_length_distribution.as_str() {
            "constant" => Box::new(Constant(cfg.field_length)),
            "uniform" => Box::new(Uniform::new(1, cfg.field_length)),
            "zipfian" => Box::new(Zipfian::new(1, cfg.field_length, cfg.zipfian_constant)),
            d => return Err(Error(format!("unknown fieldlengthdistribution {d:?}"))),
        };
        let scan_len: Box<dyn NumberGen> = match cfg.scan_length_distribution.as_str() {
            "uniform" => Box::new(Uniform::new(cfg.min_scan_length, cfg.max_scan_length)),
            "zipfian" => Box::new(Zipfian::new(
                cfg.min_scan_length,
                cfg.max_scan_length,
                cfg.zipfian_constant,
            )),
            d => return Err(Error(format!("unknown scanlengthdistribution {d:?}"))),
        };
        let field_names = (0..cfg.field_count).map(|i| format!("field{i}")).collect();
        Ok(Ycsb {
            load_seq: AtomicU64::new(cfg.insert_start),
            load_end: cfg.insert_start + cfg.insert_count,
            key_len: cfg.mean_key_len(),
            cfg,
            inserts,
            key_chooser,
            field_len,
            field_names,
            scan_len,
            loaded: AtomicU64::new(0),
            inserted: AtomicU64::new(0),
            deleted: AtomicU64::new(0),
            run_phase,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &YcsbConfig {
        &self.cfg
    }

    /// Operations this phase performs in total.
    pub fn phase_ops(&self) -> u64 {
        if self.run_phase {
            self.cfg.operation_count
        } else {
            self.cfg.insert_count
        }
    }

    /// Records present after a load of this configuration (for a run-only
    /// invocation on an existing store).
    pub fn assume_loaded(&self) {
        self.loaded.store(self.cfg.insert_count, Ordering::Relaxed);
    }

    fn next_key_num(&self, rng: &mut SmallRng) -> u64 {
        if self.cfg.request_distribution == "sequential" {
            return self.cfg.insert_start + rng.gen_range(0..self.cfg.insert_count.max(1));
        }
        loop {
            let k = self.key_chooser.next(rng);
            if k <= self.inserts.last() {
                return k;
            }
        }
    }

    /// A whole row, written straight into `out`.
    fn build_row(&self, rng: &mut SmallRng, out: &mut Vec<u8>) {
        out.clear();
        for name in &self.field_names {
            let len = self.field_len.next(rng) as usize;
            push_field(out, name, len, |v| fill_printable(rng, v));
        }
    }

    fn update_one_field(&self, rng: &mut SmallRng, old: &[u8], out: &mut Vec<u8>) {
        let mut fields = decode_row(old).unwrap_or_default();
        let i = rng.gen_range(0..self.cfg.field_count);
        let mut v = vec![0u8; self.field_len.next(rng) as usize];
        fill_printable(rng, &mut v);
        let name = format!("field{i}");
        match fields.iter_mut().find(|(n, _)| *n == name) {
            Some(f) => f.1 = v,
            None => fields.push((name, v)),
        }
        encode_row(out, &fields);
    }

    fn choose_op(&self, rng: &mut SmallRng) -> OpKind {
        let p = &self.cfg.proportions;
        let total: f64 = p.iter().sum();
        let mut u = rng.gen::<f64>() * total;
        let kinds = [
            OpKind::Read,
            OpKind::Update,
            OpKind::Insert,
            OpKind::Scan,
            OpKind::ReadModifyWrite,
            OpKind::Delete,
        ];
        for (k, w) in kinds.iter().zip(p) {
            if u < *w {
                return *k;
            }
            u -= w;
        }
        OpKind::Read
    }
}

impl Workload for Arc<Ycsb> {
    fn worker(&self, index: usize, threads: usize) -> Box<dyn Worker> {
        let total = self.phase_ops();
        let share = total / threads as u64 + u64::from((index as u64) < total % threads as u64);
        Box::new(YcsbWorker {
            w: self.clone(),
            rng: SmallRng::seed_from_u64(self.cfg.seed ^ fnv_hash64(index as u64 + 1)),
            left: share,
            row: Vec::new(),
        })
    }

    fn logical_bytes(&self) -> u64 {
        let rows = (self.loaded.load(Ordering::Relaxed) + self.inserted.load(Ordering::Relaxed))
            .saturating_sub(self.deleted.load(Ordering::Relaxed));
        (rows as f64 * (self.key_len + self.cfg.row_bytes() as f64)) as u64
    }
}

struct YcsbWorker {
    w: Arc<Ycsb>,
    rng: SmallRng,
    left: u64,
    row: Vec<u8>,
}

impl Worker for YcsbWorker {
    fn step(&mut self, db: &dyn Binding, ctx: &mut Ctx) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        let w = self.w.clone();
        if !w.run_phase {
            let n = w.load_seq.fetch_add(1, Ordering::Relaxed);
            if n >= w.load_end {
                return false;
            }
            let key = w.cfg.key(n);
            w.build_row(&mut self.rng, &mut self.row);
            if ctx
                .time(OpKind::Insert, || db.put(key.as_bytes(), &self.row))
                .is_some()
            {
                w.loaded.fetch_add(1, Ordering::Relaxed);
            }
            return true;
        }
        match w.choose_op(&mut self.rng) {
            OpKind::Read => {
                let key = w.cfg.key(w.next_key_num(&mut self.rng));
                ctx.time(OpKind::Read, || db.read(key.as_bytes()));
            }
            OpKind::Update => {
                let key = w.cfg.key(w.next_key_num(&mut self.rng));
                let rng = &mut self.rng;
                let row = &mut self.row;
                ctx.time(OpKind::Update, || {
                    if w.cfg.write_all_fields {
                        w.build_row(rng, row);
                    } else {
                        let old = db.read(key.as_bytes())?.unwrap_or_default();
                        w.update_one_field(rng, &old, row);
                    }
                    db.put(key.as_bytes(), row)
                });
            }
            OpKind::Insert => {
                let n = w.inserts.next_value();
                let key = w.cfg.key(n);
                w.build_row(&mut self.rng, &mut self.row);
                let ok = ctx.time(OpKind::Insert, || db.put(key.as_bytes(), &self.row));
                w.inserts.acknowledge(n);
                if ok.is_some() {
                    w.inserted.fetch_add(1, Ordering::Relaxed);
                }
            }
            OpKind::Scan => {
                let key = w.cfg.key(w.next_key_num(&mut self.rng));
                let len = w.scan_len.next(&mut self.rng) as usize;
                ctx.time(OpKind::Scan, || {
                    db.scan(key.as_bytes(), len, &mut |_, _| {})
                });
            }
            OpKind::ReadModifyWrite => {
                let key = w.cfg.key(w.next_key_num(&mut self.rng));
                let rng = &mut self.rng;
                let row = &mut self.row;
                ctx.time(OpKind::ReadModifyWrite, || {
                    let old = db.read(key.as_bytes())?;
                    if w.cfg.write_all_fields {
                        w.build_row(rng, row);
                    } else {
                        w.update_one_field(rng, old.as_deref().unwrap_or_default(), row);
                    }
                    db.put(key.as_bytes(), row)
                });
            }
            OpKind::Delete => {
                let key = w.cfg.key(w.next_key_num(&mut self.rng));
                if ctx
                    .time(OpKind::Delete, || db.delete(key.as_bytes()))
                    .is_some()
                {
                    w.deleted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_properties_with_overrides() {
        let mut p = Properties::parse(
            "recordcount=1000\noperationcount=1000\nreadproportion=0.5\nupdateproportion=0.5\nrequestdistribution=zipfian\n",
        )
        .unwrap();
        p.set_pair("recordcount=5000").unwrap();
        let c = YcsbConfig::from_props(&p).unwrap();
        assert_eq!(c.record_count, 5000);
        assert_eq!(c.insert_count, 5000);
        assert_eq!(c.proportions, [0.5, 0.5, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(c.field_count, 10);
        assert_eq!(c.row_bytes(), 10 * 108 + 60);
        assert!(c.key(1).starts_with("user"));
        assert_ne!(c.key(1), c.key(2));
        p.set("requestdistribution", "bogus");
        assert!(YcsbConfig::from_props(&p).is_err());
    }

    #[test]
    fn rows_are_built_in_place_in_the_row_format() {
        let mut p = Properties::new();
        p.set("fieldcount", "3");
        p.set("fieldlength", "33");
        let y = Ycsb::new(YcsbConfig::from_props(&p).unwrap(), true).unwrap();
        let mut rng = SmallRng::seed_from_u64(5);
        let mut row = b"left over".to_vec();
        y.build_row(&mut rng, &mut row);
        let fields = decode_row(&row).expect("a row decodes");
        let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["field0", "field1", "field2"]);
        for (_, v) in &fields {
            assert_eq!(v.len(), 33);
            assert!(v.iter().all(|b| (b' '..=b'~').contains(b)), "{v:?}");
        }
        let first = row.clone();
        y.build_row(&mut rng, &mut row);
        assert_eq!(row.len(), first.len());
        assert_ne!(row, first, "each row draws new bytes");
    }

    #[test]
    fn operation_mix_follows_proportions() {
        let mut p = Properties::new();
        p.set("readproportion", "0.5");
        p.set("updateproportion", "0.3");
        p.set("scanproportion", "0.2");
        let y = Ycsb::new(YcsbConfig::from_props(&p).unwrap(), true).unwrap();
        let mut rng = SmallRng::seed_from_u64(3);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            *counts.entry(y.choose_op(&mut rng)).or_insert(0u32) += 1;
        }
        let share = |k| counts.get(&k).copied().unwrap_or(0) as f64 / 100_000.0;
        assert!((share(OpKind::Read) - 0.5).abs() < 0.01);
        assert!((share(OpKind::Update) - 0.3).abs() < 0.01);
        assert!((share(OpKind::Scan) - 0.2).abs() < 0.01);
    }
}
