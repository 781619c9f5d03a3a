//! Stress options: what the command line fixes, the rest drawn from the seed
//! within sane bounds, and printed back as one command line that repeats the
//! run.

use std::path::PathBuf;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::{Compression, Options};

/// Command-line options of `tern stress`. Every engine option left out is
/// drawn from the seed; the resolved values are printed as a `tern stress`
/// command line that repeats the run.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StressArgs {
    /// The store's directory (created if missing). Not needed with `--sim`.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The expected-state file. Default: `<dir>.expected`, beside the store.
    #[arg(long)]
    pub expected: Option<PathBuf>,
    /// Seed for the options and the operations. Default: from the clock.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Plain keys in the key space (fixed for an expected-state file).
    #[arg(long, default_value_t = 100_000)]
    pub keys: usize,
    /// Atomic groups of 4 keys, always written in one batch.
    #[arg(long, default_value_t = 1_000)]
    pub groups: usize,
    /// Worker threads.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Seconds to run; 0 runs until killed.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Stop after this many operations (all threads together).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Seconds between full verifications of the store during the run.
    #[arg(long, default_value_t = 5.0)]
    pub verify_every: f64,
    /// Verify the store against the expected state and exit (no writes
    /// other than resolving in-flight marks).
    #[arg(long)]
    pub verify_only: bool,
    /// Seconds between progress lines on standard error.
    #[arg(long, default_value_t = 2.0)]
    pub progress_every: f64,

    /// Crash-loop mode: run this stress command as a child process, kill it
    /// with SIGKILL at a random moment, check and restart it, this many
    /// times; then verify once more.
    #[arg(long, value_name = "KILLS")]
    pub crash_loop: Option<u64>,
    /// `--crash-loop`: shortest run before a kill, milliseconds.
    #[arg(long, default_value_t = 300)]
    pub min_run_ms: u64,
    /// `--crash-loop`: longest run before a kill, milliseconds.
    #[arg(long, default_value_t = 3000)]
    pub max_run_ms: u64,

    /// In-process mode: the store on simulated files with random I/O errors
    /// and simulated power failures, checked after each crash.
    #[arg(long)]
    pub sim: bool,
    /// `--sim`: simulated crashes.
    #[arg(long, default_value_t = 20)]
    pub crashes: u64,
    /// `--sim`: operations between crashes.
    #[arg(long, default_value_t = 2_000)]
    pub ops_per_crash: u64,
    /// `--sim`: probability that an I/O operation fails.
    #[arg(long, default_value_t = 0.0005)]
    pub fault_probability: f64,

    /// Fsync every write (`true`) or hand it to the OS only (`false`).
    #[arg(long)]
    pub sync: Option<bool>,
    /// Memtable size, bytes.
    #[arg(long)]
    pub write_buffer_size: Option<usize>,
    /// Memtables kept before writes stop.
    #[arg(long)]
    pub max_write_buffer_number: Option<usize>,
    /// L0 files that trigger a compaction.
    #[arg(long)]
    pub l0_trigger: Option<usize>,
    /// Base level target size, bytes.
    #[arg(long)]
    pub level_base: Option<u64>,
    /// Compaction output file size, bytes.
    #[arg(long)]
    pub target_file_size: Option<u64>,
    /// Data block size, bytes.
    #[arg(long)]
    pub block_size: Option<usize>,
    /// Bloom bits per key (0: no filters).
    #[arg(long)]
    pub bloom_bits: Option<u32>,
    /// Compression per level, comma separated: none, lz4, zstd.
    #[arg(long)]
    pub compression: Option<String>,
    /// Block cache capacity, bytes (0: none).
    #[arg(long)]
    pub block_cache: Option<usize>,
    /// Manifest size that triggers a rewrite, bytes.
    #[arg(long)]
    pub manifest_size: Option<u64>,
    /// Key-value separation: values of at least this many bytes go to blob
    /// files at flush (`0`: every value), or `off`.
    #[arg(long, value_name = "N|off", value_parser = parse_blob_threshold)]
    pub blob_threshold: Option<BlobThreshold>,
    /// Size at which blob files are cut, bytes (at least 4096).
    #[arg(long)]
    pub blob_file_size: Option<u64>,
    /// Garbage ratio at which a blob file is collected, in (0, 1].
    #[arg(long)]
    pub gc_ratio: Option<f64>,
    /// Background blob garbage collection: `on` or `off`.
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    pub gc: Option<bool>,
    /// Table and blob files kept open (small values make reads reopen
    /// files evicted under them).
    #[arg(long)]
    pub max_open_files: Option<usize>,
}

/// A `--blob-threshold` value: a byte count, or separation off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobThreshold(pub Option<usize>);

/// Parses `--blob-threshold`: a byte count or `off`.
pub fn parse_blob_threshold(s: &str) -> Result<BlobThreshold, String> {
    match s.trim() {
        "off" | "none" => Ok(BlobThreshold(None)),
        n => n
            .parse()
            .map(|n| BlobThreshold(Some(n)))
            .map_err(|_| format!("blob threshold {s:?} is neither a byte count nor off")),
    }
}

/// Parses `on`/`off` (or `true`/`false`).
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.trim() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(format!("{s:?} is neither on nor off")),
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The resolved engine options of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineKnobs {
    /// Fsync each write.
    pub sync: bool,
    /// See [`Options::write_buffer_size`].
    pub write_buffer_size: usize,
    /// See [`Options::max_write_buffer_number`].
    pub max_write_buffer_number: usize,
    /// See [`Options::level0_file_num_compaction_trigger`].
    pub l0_trigger: usize,
    /// See [`Options::max_bytes_for_level_base`].
    pub level_base: u64,
    /// See [`Options::target_file_size`].
    pub target_file_size: u64,
    /// See [`Options::block_size`].
    pub block_size: usize,
    /// See [`Options::bloom_bits_per_key`].
    pub bloom_bits: u32,
    /// See [`Options::compression_per_level`].
    pub compression: Vec<Compression>,
    /// See [`Options::block_cache_capacity`].
    pub block_cache: usize,
    /// See [`Options::max_manifest_file_size`].
    pub manifest_size: u64,
    /// See [`Options::blob_threshold`].
    pub blob_threshold: Option<usize>,
    /// See [`Options::blob_file_size`].
    pub blob_file_size: u64,
    /// See [`Options::gc_garbage_ratio`].
    pub gc_ratio: f64,
    /// See [`Options::enable_gc`].
    pub gc: bool,
    /// See [`Options::max_open_files`].
    pub max_open_files: usize,
}

/// Parses a compression list such as `none,lz4,zstd`.
pub fn parse_compression(s: &str) -> Result<Vec<Compression>, String> {
    s.split(',')
        .map(|c| match c.trim() {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            other => Err(format!("unknown compression {other:?} (none, lz4, zstd)")),
        })
        .collect()
}

fn compression_name(c: Compression) -> &'static str {
    match c {
        Compression::None => "none",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
    }
}

impl EngineKnobs {
    /// Fills what `args` leave open from `rng`.
    pub fn resolve(args: &StressArgs, rng: &mut StdRng) -> Result<EngineKnobs, String> {
        let comp = |rng: &mut StdRng| match rng.gen_range(0..3) {
            0 => Compression::None,
            1 => Compression::Lz4,
            _ => Compression::Zstd,
        };
        // Draw everything first so that fixing one option on the command
        // line does not change the others drawn from the same seed.
        let drawn = EngineKnobs {
            sync: rng.gen_bool(0.5),
            write_buffer_size: rng.gen_range(16..1024) << 10,
            max_write_buffer_number: rng.gen_range(2..5),
            l0_trigger: rng.gen_range(2..6),
            level_base: rng.gen_range(1..16) << 20,
            target_file_size: rng.gen_range(64..2048) << 10,
            block_size: [512, 1024, 4096, 16384][rng.gen_range(0..4)],
            bloom_bits: [0, 5, 10, 10][rng.gen_range(0..4)],
            compression: (0..3).map(|_| comp(rng)).collect(),
            block_cache: [0, 1 << 20, 8 << 20][rng.gen_range(0..3)],
            manifest_size: rng.gen_range(16..4096) << 10,
            // Drawn after the older knobs so those stay what a seed gave
            // before separation existed. Separation is on in most runs; blob
            // files are small so that GC has many to choose from.
            blob_threshold: match rng.gen_range(0..100) {
                0..=14 => None,
                15..=34 => Some(0),
                35..=59 => Some(64),
                60..=84 => Some(512),
                _ => Some(2048),
            },
            blob_file_size: rng.gen_range(64..=4096) << 10,
            gc_ratio: f64::from(rng.gen_range(10..=80u32)) / 100.0,
            gc: rng.gen_bool(0.85),
            // Last, so the knobs above stay what a seed gave before.
            max_open_files: [4, 16, 64, 1 << 16][rng.gen_range(0..4)],
        };
        Ok(EngineKnobs {
            sync: args.sync.unwrap_or(drawn.sync),
            write_buffer_size: args.write_buffer_size.unwrap_or(drawn.write_buffer_size),
            max_write_buffer_number: args
                .max_write_buffer_number
                .unwrap_or(drawn.max_write_buffer_number),
            l0_trigger: args.l0_trigger.unwrap_or(drawn.l0_trigger),
            level_base: args.level_base.unwrap_or(drawn.level_base),
            target_file_size: args.target_file_size.unwrap_or(drawn.target_file_size),
            block_size: args.block_size.unwrap_or(drawn.block_size),
            bloom_bits: args.bloom_bits.unwrap_or(drawn.bloom_bits),
            compression: match &args.compression {
                Some(s) => parse_compression(s)?,
                None => drawn.compression,
            },
            block_cache: args.block_cache.unwrap_or(drawn.block_cache),
            manifest_size: args.manifest_size.unwrap_or(drawn.manifest_size),
            blob_threshold: args.blob_threshold.map_or(drawn.blob_threshold, |t| t.0),
            blob_file_size: args.blob_file_size.unwrap_or(drawn.blob_file_size),
            gc_ratio: args.gc_ratio.unwrap_or(drawn.gc_ratio),
            gc: args.gc.unwrap_or(drawn.gc),
            max_open_files: args.max_open_files.unwrap_or(drawn.max_open_files),
        })
    }

    /// Engine options with these knobs (on the local file system).
    pub fn options(&self) -> Options {
        Options {
            settings: tern::Settings {
                write_buffer_size: self.write_buffer_size,
                max_write_buffer_number: self.max_write_buffer_number,
                level0_file_num_compaction_trigger: self.l0_trigger,
                level0_slowdown_writes_trigger: self.l0_trigger.max(8) * 2,
                level0_stop_writes_trigger: self.l0_trigger.max(8) * 3,
                max_bytes_for_level_base: self.level_base,
                target_file_size: self.target_file_size,
                block_size: self.block_size,
                bloom_bits_per_key: self.bloom_bits,
                compression_per_level: self.compression.clone(),
                block_cache_capacity: self.block_cache,
                max_manifest_file_size: self.manifest_size,
                blob_threshold: self.blob_threshold,
                blob_file_size: self.blob_file_size,
                gc_garbage_ratio: self.gc_ratio,
                enable_gc: self.gc,
                max_open_files: self.max_open_files,
                ..tern::Settings::default()
            },
            ..Options::default()
        }
    }

    /// The knobs as command-line flags.
    pub fn flags(&self) -> String {
        let comp: Vec<&str> = self
            .compression
            .iter()
            .map(|&c| compression_name(c))
            .collect();
        format!(
            "--sync {} --write-buffer-size {} --max-write-buffer-number {} --l0-trigger {} \
             --level-base {} --target-file-size {} --block-size {} --bloom-bits {} \
             --compression {} --block-cache {} --manifest-size {} --blob-threshold {} \
             --blob-file-size {} --gc-ratio {} --gc {} --max-open-files {}",
            self.sync,
            self.write_buffer_size,
            self.max_write_buffer_number,
            self.l0_trigger,
            self.level_base,
            self.target_file_size,
            self.block_size,
            self.bloom_bits,
            comp.join(","),
            self.block_cache,
            self.manifest_size,
            self.blob_threshold
                .map_or_else(|| "off".to_string(), |t| t.to_string()),
            self.blob_file_size,
            self.gc_ratio,
            on_off(self.gc),
            self.max_open_files
        )
    }
}

/// Everything one run needs, resolved.
#[derive(Debug, Clone)]
pub struct StressConfig {
    /// The command line as given.
    pub args: StressArgs,
    /// The seed actually used.
    pub seed: u64,
    /// The engine options drawn for this run.
    pub knobs: EngineKnobs,
}

impl StressConfig {
    /// Resolves `args`: picks a seed if none was given and draws the engine
    /// options it leaves open.
    pub fn resolve(args: StressArgs) -> Result<StressConfig, String> {
        let seed = args.seed.unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            (t ^ u64::from(std::process::id()).rotate_left(32)) % 1_000_000_000
        });
        if args.keys == 0 {
            return Err("--keys must be at least 1".into());
        }
        if args.threads == 0 {
            return Err("--threads must be at least 1".into());
        }
        if !args.sim && args.dir.is_none() {
            return Err("--dir is required (or --sim for an in-process run)".into());
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let knobs = EngineKnobs::resolve(&args, &mut rng)?;
        knobs
            .options()
            .validate()
            .map_err(|e| format!("invalid engine options: {e}"))?;
        Ok(StressConfig { args, seed, knobs })
    }

    /// The expected-state file.
    pub fn expected_path(&self) -> Option<PathBuf> {
        self.args.expected.clone().or_else(|| {
            self.args.dir.as_ref().map(|d| {
                let mut p = d.clone().into_os_string();
                p.push(".expected");
                PathBuf::from(p)
            })
        })
    }

    /// A `tern stress` command line that repeats this run.
    pub fn command_line(&self) -> String {
        let a = &self.args;
        let mut s = format!("tern stress --seed {}", self.seed);
        if a.sim {
            s += &format!(
                " --sim --crashes {} --ops-per-crash {} --fault-probability {}",
                a.crashes, a.ops_per_crash, a.fault_probability
            );
        }
        if let Some(d) = &a.dir {
            s += &format!(" --dir {}", d.display());
        }
        if let Some(e) = &a.expected {
            s += &format!(" --expected {}", e.display());
        }
        s += &format!(
            " --keys {} --groups {} --threads {} --duration {} --verify-every {}",
            a.keys, a.groups, a.threads, a.duration, a.verify_every
        );
        if let Some(k) = a.crash_loop {
            s += &format!(
                " --crash-loop {k} --min-run-ms {} --max-run-ms {}",
                a.min_run_ms, a.max_run_ms
            );
        }
        if let Some(n) = a.ops {
            s += &format!(" --ops {n}");
        }
        if a.verify_only {
            s += " --verify-only";
        }
        s + " " + &self.knobs.flags()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_options_and_overrides_keep_the_rest() {
        let args = StressArgs {
            dir: Some("/tmp/x".into()),
            seed: Some(42),
            keys: 10,
            threads: 1,
            ..Default::default()
        };
        let a = StressConfig::resolve(args.clone()).unwrap();
        let b = StressConfig::resolve(args.clone()).unwrap();
        assert_eq!(a.knobs, b.knobs);
        let c = StressConfig::resolve(StressArgs {
            sync: Some(!a.knobs.sync),
            ..args
        })
        .unwrap();
        assert_eq!(c.knobs.write_buffer_size, a.knobs.write_buffer_size);
        assert_ne!(c.knobs.sync, a.knobs.sync);
        assert!(a.command_line().starts_with("tern stress --seed 42 "));
    }

    #[test]
    fn separation_knobs_parse_draw_and_print() {
        assert_eq!(parse_blob_threshold("off"), Ok(BlobThreshold(None)));
        assert_eq!(parse_blob_threshold("0"), Ok(BlobThreshold(Some(0))));
        assert!(parse_blob_threshold("big").is_err());
        assert_eq!(parse_on_off("on"), Ok(true));
        assert_eq!(parse_on_off("off"), Ok(false));
        let mut on = 0;
        for seed in 0..200 {
            let cfg = StressConfig::resolve(StressArgs {
                dir: Some("/tmp/x".into()),
                seed: Some(seed),
                keys: 10,
                threads: 1,
                ..Default::default()
            })
            .unwrap();
            let k = &cfg.knobs;
            assert!((64 << 10..=4 << 20).contains(&k.blob_file_size));
            assert!((0.1..=0.8).contains(&k.gc_ratio));
            on += usize::from(k.blob_threshold.is_some());
            let line = cfg.command_line();
            let t = k.blob_threshold.map_or("off".into(), |t| t.to_string());
            assert!(line.contains(&format!(" --blob-threshold {t} ")), "{line}");
            assert!(
                line.contains(&format!(" --gc-ratio {} ", k.gc_ratio)),
                "{line}"
            );
        }
        assert!(on > 140, "separation on in only {on} of 200 seeds");
        let fixed = StressConfig::resolve(StressArgs {
            dir: Some("/tmp/x".into()),
            seed: Some(1),
            keys: 10,
            threads: 1,
            blob_threshold: Some(BlobThreshold(None)),
            gc: Some(false),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(fixed.knobs.blob_threshold, None);
        assert!(!fixed.knobs.gc);
        assert!(fixed.command_line().contains(" --gc off "));
        assert!(fixed.command_line().contains(" --max-open-files "));
    }
}
