//! Trace replay. Two formats:
//!
//! * `twitter` — Twitter's cache-trace CSV (Yang et al., OSDI'20):
//!   `timestamp,key,key_size,value_size,client_id,operation,ttl`. `get`
//!   becomes a read, `add`/`set` a write of `value_size` bytes; other
//!   operations are skipped, TTLs ignored.
//! * `meta` — the Social Graph trace AegonKV saved from mixgraph:
//!   `keyhash,type,value_size` with type 0 get, 1 put, 2 seek (a 10-entry
//!   scan).
//!
//! Keys read before ever being written are preloaded with 512-byte values
//! (the load phase), then the operations replay in file order, spread over
//! the client threads.

use std::collections::HashMap;
use std::io::BufRead;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::value::fill_compressible;
use crate::binding::Binding;
use crate::measure::OpKind;
use crate::runner::{Ctx, Worker, Workload};
use crate::{Error, Result};

/// Bytes of a preloaded value.
pub const PRELOAD_VALUE_SIZE: usize = 512;
/// Entries read by a `meta` seek.
pub const META_SCAN_LEN: usize = 10;

/// Trace file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Twitter cache-trace CSV.
    Twitter,
    /// Social Graph (`keyhash,type,value_size`).
    Meta,
}

impl std::str::FromStr for TraceFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "twitter" => Ok(TraceFormat::Twitter),
            "meta" => Ok(TraceFormat::Meta),
            _ => Err(Error(format!("unknown trace format {s:?} (twitter, meta)"))),
        }
    }
}

/// One replayed operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceOp {
    /// Read a key.
    Get(Vec<u8>),
    /// Write a key with a value of this many bytes.
    Set(Vec<u8>, usize),
    /// Read this many entries from a key on.
    Scan(Vec<u8>, usize),
}

impl TraceOp {
    fn key(&self) -> &[u8] {
        match self {
            TraceOp::Get(k) | TraceOp::Set(k, _) | TraceOp::Scan(k, _) => k,
        }
    }
}

/// Parses one line; `Ok(None)` for a skipped operation or a blank line.
pub fn parse_line(format: TraceFormat, line: &str) -> Result<Option<TraceOp>> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let cols: Vec<&str> = line.split(',').collect();
    let num = |s: &str| -> Result<usize> {
        s.trim()
            .parse()
            .map_err(|_| Error(format!("bad number {s:?} in trace line {line:?}")))
    };
    match format {
        TraceFormat::Twitter => {
            if cols.len() < 7 {
                return Err(Error(format!(
                    "twitter trace line needs 7 columns: {line:?}"
                )));
            }
            let key = cols[1].as_bytes().to_vec();
            match cols[5].trim() {
                "get" | "gets" => Ok(Some(TraceOp::Get(key))),
                "set" | "add" => Ok(Some(TraceOp::Set(key, num(cols[3])?))),
                _ => Ok(None),
            }
        }
        TraceFormat::Meta => {
            if cols.len() < 3 {
                return Err(Error(format!("meta trace line needs 3 columns: {line:?}")));
            }
            let key = cols[0].trim().as_bytes().to_vec();
            match cols[1].trim() {
                "0" => Ok(Some(TraceOp::Get(key))),
                "1" => Ok(Some(TraceOp::Set(key, num(cols[2])?))),
                "2" => Ok(Some(TraceOp::Scan(key, META_SCAN_LEN))),
                t => Err(Error(format!("unknown meta op type {t:?} in {line:?}"))),
            }
        }
    }
}

/// A parsed trace: keys to preload, operations, final logical size.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Keys read before written, in first-seen order.
    pub preload: Vec<Vec<u8>>,
    /// Operations, in file order.
    pub ops: Vec<TraceOp>,
    /// Bytes of keys + values live after the replay.
    pub logical_bytes: u64,
    /// Lines skipped (unsupported operations).
    pub skipped: u64,
}

impl Trace {
    /// Reads a whole trace.
    pub fn read(format: TraceFormat, r: impl BufRead, limit: Option<usize>) -> Result<Trace> {
        let mut t = Trace::default();
        let mut sizes: HashMap<Vec<u8>, usize> = HashMap::new();
        for line in r.lines() {
            let line = line?;
            match parse_line(format, &line)? {
                None => t.skipped += u64::from(!line.trim().is_empty()),
                Some(op) => {
                    match &op {
                        TraceOp::Get(k) | TraceOp::Scan(k, _) => {
                            if !sizes.contains_key(k) && matches!(op, TraceOp::Get(_)) {
                                sizes.insert(k.clone(), PRELOAD_VALUE_SIZE);
                                t.preload.push(k.clone());
                            }
                        }
                        TraceOp::Set(k, n) => {
                            sizes.insert(k.clone(), *n);
                        }
                    }
                    t.ops.push(op);
                    if limit.is_some_and(|l| t.ops.len() >= l) {
                        break;
                    }
                }
            }
        }
        t.logical_bytes = sizes.iter().map(|(k, v)| (k.len() + v) as u64).sum();
        Ok(t)
    }

    /// Operations per kind: (gets, sets, scans).
    pub fn mix(&self) -> (usize, usize, usize) {
        let mut m = (0, 0, 0);
        for op in &self.ops {
            match op {
                TraceOp::Get(_) => m.0 += 1,
                TraceOp::Set(..) => m.1 += 1,
                TraceOp::Scan(..) => m.2 += 1,
            }
        }
        m
    }
}

/// A trace phase: preload (`load`) or replay (`run`).
#[derive(Debug)]
pub struct TraceReplay {
    trace: Arc<Trace>,
    load: bool,
    next: AtomicUsize,
}

impl TraceReplay {
    /// The preload (`load = true`) or replay phase of `trace`.
    pub fn new(trace: Arc<Trace>, load: bool) -> Self {
        TraceReplay {
            trace,
            load,
            next: AtomicUsize::new(0),
        }
    }

    /// Operations in this phase.
    pub fn len(&self) -> usize {
        if self.load {
            self.trace.preload.len()
        } else {
            self.trace.ops.len()
        }
    }

    /// True when the phase has nothing to do.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Workload for Arc<TraceReplay> {
    fn worker(&self, index: usize, _threads: usize) -> Box<dyn Worker> {
        Box::new(TraceWorker {
            t: self.clone(),
            rng: SmallRng::seed_from_u64(index as u64 + 99),
            value: Vec::new(),
        })
    }

    fn logical_bytes(&self) -> u64 {
        if self.load {
            self.trace
                .preload
                .iter()
                .map(|k| (k.len() + PRELOAD_VALUE_SIZE) as u64)
                .sum()
        } else {
            self.trace.logical_bytes
        }
    }
}

struct TraceWorker {
    t: Arc<TraceReplay>,
    rng: SmallRng,
    value: Vec<u8>,
}

impl Worker for TraceWorker {
    fn step(&mut self, db: &dyn Binding, ctx: &mut Ctx) -> bool {
        let i = self.t.next.fetch_add(1, Ordering::Relaxed);
        let tr = &self.t.trace;
        if self.t.load {
            let Some(k) = tr.preload.get(i) else {
                return false;
            };
            self.value.resize(PRELOAD_VALUE_SIZE, 0);
            fill_compressible(&mut self.rng, &mut self.value);
            let v = &self.value;
            ctx.time(OpKind::Insert, || db.put(k, v));
            return true;
        }
        let Some(op) = tr.ops.get(i) else {
            return false;
        };
        let key = op.key();
        match op {
            TraceOp::Get(_) => {
                ctx.time(OpKind::Read, || db.read(key).map(|_| ()));
            }
            TraceOp::Set(_, n) => {
                self.value.resize(*n, 0);
                fill_compressible(&mut self.rng, &mut self.value);
                let v = &self.value;
                ctx.time(OpKind::Insert, || db.put(key, v));
            }
            TraceOp::Scan(_, n) => {
                ctx.time(OpKind::Scan, || db.scan(key, *n, &mut |_, _| {}));
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_twitter_lines() {
        let l = "0,KeyA,41,80,3,set,0";
        assert_eq!(
            parse_line(TraceFormat::Twitter, l).unwrap(),
            Some(TraceOp::Set(b"KeyA".to_vec(), 80))
        );
        assert_eq!(
            parse_line(TraceFormat::Twitter, "1,KeyA,41,0,3,get,0").unwrap(),
            Some(TraceOp::Get(b"KeyA".to_vec()))
        );
        assert_eq!(
            parse_line(TraceFormat::Twitter, "1,K,41,0,3,delete,0").unwrap(),
            None
        );
        assert!(parse_line(TraceFormat::Twitter, "1,K,41").is_err());
        assert!(parse_line(TraceFormat::Meta, "5,9,1").is_err());
    }
}
