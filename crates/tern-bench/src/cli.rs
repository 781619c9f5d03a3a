//! Command-line arguments of `tern bench` and what each subcommand runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::binding;
use crate::compare::{self, CompareArgs};
use crate::phases::{phase, run_and_print, ycsb_phases};
use crate::props::Properties;
use crate::report::{html, OutputArgs, Report};
use crate::workload::dbbench::{DbBench, DbBenchConfig, DbBenchState};
use crate::workload::mixgraph::MixgraphParams;
use crate::workload::trace::{Trace, TraceFormat, TraceReplay};
use crate::workload::tracegen;
use crate::{Error, Result};

/// `tern bench`: benchmark Tern and its peers with the field's workloads.
#[derive(Debug, Args)]
#[command(
    about = "Benchmark Tern and its peers: YCSB, db_bench workloads, trace replay",
    long_about = "Benchmark Tern and its peers with the workloads of the field.\n\n\
        Every run prints YCSB-cpp's closing lines and the five metrics: throughput, \
        latency per operation (avg, p90, p99, p99.9, p99.99, max), space on disk and \
        space amplification, compaction I/O, and write-stall time. --json writes them \
        for scripts, --report draws them as a self-contained HTML page.\n\n\
        Bindings (--db): tern, rocksdb and rocksdb-blob (build with --features rocksdb), \
        fjall (--features fjall), resp://HOST:PORT (any Redis-protocol server), \
        resp-cluster://HOST:PORT,... (a Redis Cluster or Tern cluster, through tern-client).",
    after_help = "Examples:\n  \
        tern bench ycsb -P workloads/workloada -p recordcount=100000 -p operationcount=100000 --load --run --db tern\n  \
        tern bench ycsb -P workloads/workloadc -p threadcount=4 -p tern.write_buffer_size=32M --load --run --db tern --json a.json --report a.html\n  \
        tern bench ycsb -P workloads/workloada --load --run --db resp://127.0.0.1:6379\n  \
        tern bench ycsb -P workloads/workloada --load --run --db resp-cluster://127.0.0.1:7001\n  \
        tern bench db --benchmarks=fillrandom,readrandom,mixgraph --num=1000000 --db tern\n  \
        tern bench gen-trace --format twitter --cluster 51 --ops 1000000 -o c51.csv\n  \
        tern bench trace --format twitter c51.csv --db tern\n  \
        tern bench compare --bindings tern,rocksdb,rocksdb-blob,fjall -w load,a,b,c,f,e -p recordcount=1000000"
)]
pub struct BenchArgs {
    /// What to run.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// The `tern bench` subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// YCSB core workloads from property files (load and/or run phase).
    Ycsb(YcsbArgs),
    /// db_bench's benchmarks: fillseq, fillrandom, overwrite, readrandom,
    /// readseq, seekrandom, readwhilewriting, mixgraph.
    Db(Box<DbArgs>),
    /// Replay a Twitter cache trace or a Social Graph trace.
    Trace(TraceArgs),
    /// Write a synthetic trace with a Twitter cluster's statistics or mixgraph's.
    GenTrace(GenTraceArgs),
    /// Run YCSB load and workloads against several bindings, each on a fresh
    /// directory, and print a table of ratios against the first.
    Compare(CompareArgs),
}

/// `tern bench ycsb`.
#[derive(Debug, Args)]
pub struct YcsbArgs {
    /// Property file(s), YCSB's format; later files win.
    #[arg(short = 'P', value_name = "FILE")]
    pub property_files: Vec<PathBuf>,
    /// Property override `name=value` (e.g. recordcount=100000,
    /// threadcount=4, tern.write_buffer_size=64M).
    #[arg(short = 'p', value_name = "NAME=VALUE")]
    pub props: Vec<String>,
    /// Run the load phase (insert recordcount records).
    #[arg(long)]
    pub load: bool,
    /// Run the transaction phase (operationcount operations).
    #[arg(long)]
    pub run: bool,
    /// Binding: tern, rocksdb, rocksdb-blob, fjall, resp://HOST:PORT or resp-cluster://HOST:PORT,....
    #[arg(long, default_value = "tern")]
    pub db: String,
    /// Data directory of embedded bindings.
    #[arg(long, default_value = "tern-bench-data")]
    pub dir: PathBuf,
    /// Delete the data directory before loading.
    #[arg(long)]
    pub fresh: bool,
    /// Output options.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `tern bench db` (flags named as db_bench's).
#[derive(Debug, Args)]
pub struct DbArgs {
    /// Comma-separated benchmarks, run in order on the same store.
    #[arg(long, default_value = "fillrandom,readrandom")]
    pub benchmarks: String,
    /// Keys in the key space.
    #[arg(long, default_value_t = 1_000_000)]
    pub num: u64,
    /// Operations of read benchmarks and mixgraph (0: --num).
    #[arg(long, default_value_t = 0)]
    pub reads: u64,
    /// Key bytes.
    #[arg(long = "key_size", default_value_t = 16)]
    pub key_size: usize,
    /// Value bytes (fills; mixgraph draws its own sizes).
    #[arg(long = "value_size", default_value_t = 100)]
    pub value_size: usize,
    /// Entries read after each seek of seekrandom.
    #[arg(long = "seek_nexts", default_value_t = 0)]
    pub seek_nexts: usize,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Stop each benchmark after this many seconds (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub duration: u64,
    /// RNG seed.
    #[arg(long, default_value_t = 301)]
    pub seed: u64,
    /// Binding: tern, rocksdb, rocksdb-blob, fjall, resp://HOST:PORT or resp-cluster://HOST:PORT,....
    #[arg(long, default_value = "tern")]
    pub db: String,
    /// Data directory of embedded bindings.
    #[arg(long, default_value = "tern-bench-data")]
    pub dir: PathBuf,
    /// Delete the data directory first.
    #[arg(long)]
    pub fresh: bool,
    /// Engine option `name=value` (e.g. tern.write_buffer_size=64M).
    #[arg(short = 'p', value_name = "NAME=VALUE")]
    pub props: Vec<String>,
    /// Mixgraph parameters.
    #[command(flatten)]
    pub mix: MixArgs,
    /// Output options.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// db_bench's mixgraph flags; defaults are the Social Graph parameters.
#[derive(Debug, Args, Clone)]
pub struct MixArgs {
    /// Key-range probability a·e^(b·i) + c·e^(d·i): a.
    #[arg(
        long = "keyrange_dist_a",
        default_value_t = 14.18,
        allow_negative_numbers = true
    )]
    pub keyrange_dist_a: f64,
    /// … b.
    #[arg(long = "keyrange_dist_b", default_value_t = -2.917, allow_negative_numbers = true)]
    pub keyrange_dist_b: f64,
    /// … c.
    #[arg(
        long = "keyrange_dist_c",
        default_value_t = 0.0164,
        allow_negative_numbers = true
    )]
    pub keyrange_dist_c: f64,
    /// … d.
    #[arg(long = "keyrange_dist_d", default_value_t = -0.08082, allow_negative_numbers = true)]
    pub keyrange_dist_d: f64,
    /// Number of key ranges.
    #[arg(long = "keyrange_num", default_value_t = 30)]
    pub keyrange_num: i64,
    /// Key distribution inside a range, a (0: uniform).
    #[arg(long = "key_dist_a", default_value_t = 0.0)]
    pub key_dist_a: f64,
    /// Key distribution inside a range, b (0: uniform).
    #[arg(long = "key_dist_b", default_value_t = 0.0)]
    pub key_dist_b: f64,
    /// Value-size Pareto θ.
    #[arg(long = "value_theta", default_value_t = 0.0)]
    pub value_theta: f64,
    /// Value-size Pareto k.
    #[arg(long = "value_k", default_value_t = 0.923)]
    pub value_k: f64,
    /// Value-size Pareto σ.
    #[arg(long = "value_sigma", default_value_t = 226.409)]
    pub value_sigma: f64,
    /// Scan-length Pareto θ.
    #[arg(long = "iter_theta", default_value_t = 0.0)]
    pub iter_theta: f64,
    /// Scan-length Pareto k.
    #[arg(long = "iter_k", default_value_t = 2.517)]
    pub iter_k: f64,
    /// Scan-length Pareto σ.
    #[arg(long = "iter_sigma", default_value_t = 14.236)]
    pub iter_sigma: f64,
    /// Share of gets.
    #[arg(long = "mix_get_ratio", default_value_t = 0.55)]
    pub mix_get_ratio: f64,
    /// Share of puts.
    #[arg(long = "mix_put_ratio", default_value_t = 0.44)]
    pub mix_put_ratio: f64,
    /// Share of seeks.
    #[arg(long = "mix_seek_ratio", default_value_t = 0.01)]
    pub mix_seek_ratio: f64,
    /// Values above this wrap around (db_bench: modulo).
    #[arg(long = "mix_max_value_size", default_value_t = 1024)]
    pub mix_max_value_size: i64,
    /// Scan lengths wrap at this.
    #[arg(long = "mix_max_scan_len", default_value_t = 10_000)]
    pub mix_max_scan_len: i64,
    /// Pace requests by the sine rate.
    #[arg(long = "sine_mix_rate", default_value_t = false)]
    pub sine_mix_rate: bool,
    /// Sine amplitude, ops/s.
    #[arg(long = "sine_a", default_value_t = 1000.0)]
    pub sine_a: f64,
    /// Sine frequency, radians per second.
    #[arg(long = "sine_b", default_value_t = 0.000073)]
    pub sine_b: f64,
    /// Sine phase.
    #[arg(long = "sine_c", default_value_t = 0.0)]
    pub sine_c: f64,
    /// Sine offset, ops/s.
    #[arg(long = "sine_d", default_value_t = 80_000.0)]
    pub sine_d: f64,
    /// How often the rate is recomputed.
    #[arg(long = "sine_mix_rate_interval_milliseconds", default_value_t = 5000)]
    pub sine_interval_ms: u64,
}

impl MixArgs {
    fn params(&self) -> MixgraphParams {
        MixgraphParams {
            keyrange_dist_a: self.keyrange_dist_a,
            keyrange_dist_b: self.keyrange_dist_b,
            keyrange_dist_c: self.keyrange_dist_c,
            keyrange_dist_d: self.keyrange_dist_d,
            keyrange_num: self.keyrange_num,
            key_dist_a: self.key_dist_a,
            key_dist_b: self.key_dist_b,
            value_theta: self.value_theta,
            value_k: self.value_k,
            value_sigma: self.value_sigma,
            iter_theta: self.iter_theta,
            iter_k: self.iter_k,
            iter_sigma: self.iter_sigma,
            get_ratio: self.mix_get_ratio,
            put_ratio: self.mix_put_ratio,
            seek_ratio: self.mix_seek_ratio,
            max_value_size: self.mix_max_value_size,
            max_scan_len: self.mix_max_scan_len,
            sine_mix_rate: self.sine_mix_rate,
            sine_a: self.sine_a,
            sine_b: self.sine_b,
            sine_c: self.sine_c,
            sine_d: self.sine_d,
            sine_interval_ms: self.sine_interval_ms,
        }
    }
}

/// `tern bench trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// `twitter` (cache-trace CSV) or `meta` (keyhash,type,value_size).
    #[arg(long)]
    pub format: String,
    /// The trace file.
    pub file: PathBuf,
    /// Replay at most this many operations.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Binding.
    #[arg(long, default_value = "tern")]
    pub db: String,
    /// Data directory of embedded bindings (emptied first).
    #[arg(long, default_value = "tern-bench-data")]
    pub dir: PathBuf,
    /// Engine option `name=value`.
    #[arg(short = 'p', value_name = "NAME=VALUE")]
    pub props: Vec<String>,
    /// Output options.
    #[command(flatten)]
    pub out: OutputArgs,
}

/// `tern bench gen-trace`.
#[derive(Debug, Args)]
pub struct GenTraceArgs {
    /// `twitter` or `meta`.
    #[arg(long)]
    pub format: String,
    /// Twitter cluster: 39, 19 or 51.
    #[arg(long, default_value_t = 39)]
    pub cluster: u32,
    /// Lines to write.
    #[arg(long, default_value_t = 1_000_000)]
    pub ops: u64,
    /// Distinct keys to draw from.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// RNG seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file.
    #[arg(short = 'o', long)]
    pub output: PathBuf,
}

/// Runs a `tern bench` command, printing results to stdout.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.command {
        BenchCommand::Ycsb(a) => run_ycsb(a).map(|_| ()),
        BenchCommand::Db(a) => run_db(*a).map(|_| ()),
        BenchCommand::Trace(a) => run_trace(a).map(|_| ()),
        BenchCommand::GenTrace(a) => gen_trace(a),
        BenchCommand::Compare(a) => compare::run(a),
    }
}

fn props_from(files: &[PathBuf], pairs: &[String]) -> Result<Properties> {
    let mut p = Properties::new();
    for f in files {
        p.merge_file(f)?;
    }
    for pair in pairs {
        p.set_pair(pair)?;
    }
    Ok(p)
}

fn prepare_dir(dir: &Path, wipe: bool) -> Result<()> {
    if wipe && dir.exists() {
        std::fs::remove_dir_all(dir)
            .map_err(|e| Error(format!("cannot remove {}: {e}", dir.display())))?;
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Error(format!("cannot create {}: {e}", dir.display())))?;
    Ok(())
}

fn finish(report: &Report, out: &OutputArgs) -> Result<()> {
    if let Some(p) = &out.json {
        report.write_json(p)?;
    }
    if let Some(p) = &out.report {
        html::write(std::slice::from_ref(report), p)?;
    }
    Ok(())
}

fn props_map(p: &Properties) -> BTreeMap<String, String> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `tern bench ycsb`.
pub fn run_ycsb(a: YcsbArgs) -> Result<Report> {
    let props = props_from(&a.property_files, &a.props)?;
    if !a.load && !a.run {
        return Err(Error::msg("nothing to do: pass --load, --run or both"));
    }
    if !a.db.starts_with("resp://") && !a.db.starts_with("resp-cluster://") {
        prepare_dir(&a.dir, a.fresh)?;
    }
    let db = binding::open(&a.db, &a.dir, &props)?;
    let name = a
        .property_files
        .last()
        .and_then(|p| p.file_name())
        .map_or("ycsb".to_string(), |f| f.to_string_lossy().to_string());
    let mut report = Report::new(&name, db.name(), props_map(&props));
    ycsb_phases(
        &db,
        &props,
        a.load,
        a.run,
        a.out.status_interval,
        &mut report,
        true,
    )?;
    db.close()?;
    finish(&report, &a.out)?;
    Ok(report)
}

/// `tern bench db`.
pub fn run_db(a: DbArgs) -> Result<Report> {
    let props = props_from(&[], &a.props)?;
    if !a.db.starts_with("resp://") && !a.db.starts_with("resp-cluster://") {
        prepare_dir(&a.dir, a.fresh)?;
    }
    let db = binding::open(&a.db, &a.dir, &props)?;
    let cfg = DbBenchConfig {
        num: a.num,
        reads: a.reads,
        key_size: a.key_size.max(1),
        value_size: a.value_size,
        seek_nexts: a.seek_nexts,
        threads: a.threads.max(1),
        seed: a.seed,
        mix: a.mix.params(),
    };
    let mut flags = props_map(&props);
    flags.insert("benchmarks".into(), a.benchmarks.clone());
    flags.insert("num".into(), a.num.to_string());
    flags.insert("reads".into(), a.reads.to_string());
    flags.insert("key_size".into(), a.key_size.to_string());
    flags.insert("value_size".into(), a.value_size.to_string());
    flags.insert("threads".into(), a.threads.to_string());
    let st = Arc::new(DbBenchState::new(cfg));
    let mut report = Report::new(&a.benchmarks, db.name(), flags);
    for name in a
        .benchmarks
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let b = Arc::new(DbBench::new(st.clone(), name)?);
        let mut spec = phase(name, b.threads(), b.ops(), a.out.status_interval, false);
        if a.duration > 0 {
            spec.max_duration = Some(Duration::from_secs(a.duration));
        }
        println!("== {name}");
        run_and_print(&db, Arc::new(b), &spec, &mut report, true)?;
    }
    db.close()?;
    finish(&report, &a.out)?;
    Ok(report)
}

/// `tern bench trace`.
pub fn run_trace(a: TraceArgs) -> Result<Report> {
    let format: TraceFormat = a.format.parse()?;
    let f = std::fs::File::open(&a.file)
        .map_err(|e| Error(format!("cannot open {}: {e}", a.file.display())))?;
    let trace = Arc::new(Trace::read(format, std::io::BufReader::new(f), a.limit)?);
    let (g, s, sc) = trace.mix();
    println!(
        "trace {}: {} operations (get {g}, set {s}, scan {sc}), {} skipped, {} keys to preload",
        a.file.display(),
        trace.ops.len(),
        trace.skipped,
        trace.preload.len()
    );
    let props = props_from(&[], &a.props)?;
    if !a.db.starts_with("resp://") && !a.db.starts_with("resp-cluster://") {
        prepare_dir(&a.dir, true)?;
    }
    let db = binding::open(&a.db, &a.dir, &props)?;
    let mut report = Report::new(&a.format, db.name(), props_map(&props));
    let load = Arc::new(TraceReplay::new(trace.clone(), true));
    let spec = phase(
        "Load",
        a.threads,
        load.len() as u64,
        a.out.status_interval,
        false,
    );
    run_and_print(&db, Arc::new(load), &spec, &mut report, true)?;
    let run = Arc::new(TraceReplay::new(trace, false));
    let spec = phase(
        "Run",
        a.threads,
        run.len() as u64,
        a.out.status_interval,
        false,
    );
    run_and_print(&db, Arc::new(run), &spec, &mut report, true)?;
    db.close()?;
    finish(&report, &a.out)?;
    Ok(report)
}

fn gen_trace(a: GenTraceArgs) -> Result<()> {
    let f = std::fs::File::create(&a.output)
        .map_err(|e| Error(format!("cannot create {}: {e}", a.output.display())))?;
    let mut w = std::io::BufWriter::new(f);
    match a.format.parse::<TraceFormat>()? {
        TraceFormat::Twitter => {
            tracegen::write_twitter(&mut w, tracegen::cluster(a.cluster)?, a.ops, a.keys, a.seed)?
        }
        TraceFormat::Meta => {
            tracegen::write_meta(&mut w, MixgraphParams::default(), a.ops, a.keys, a.seed)?
        }
    }
    std::io::Write::flush(&mut w)?;
    println!("wrote {} lines to {}", a.ops, a.output.display());
    Ok(())
}
