//! Stress options: what the command line fixes, the rest drawn from the seed
//! within sane bounds, and printed back as one command line that repeats the
//! run.

use std::path::PathBuf;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tern::{Options, SettingValue, Settings};
use tern_ops::{random_settings, Scale, Weights};

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
    /// `--crash-loop`: start a `tern coordinator` and two `tern worker`s
    /// for the loop (shared tier `<dir>.shared`) and send every run's
    /// compactions and GC jobs to them, local fallback off, so each kill
    /// lands with offloaded jobs in flight.
    #[arg(long)]
    pub offload: bool,
    /// Send compactions and GC jobs to the `tern coordinator` at this URL
    /// (with `--offload-shared`).
    #[arg(long, value_name = "URL", requires = "offload_shared")]
    pub offload_coordinator: Option<String>,
    /// The offload shared tier: `file:///dir` or `s3://bucket/prefix`.
    #[arg(long, value_name = "URL", requires = "offload_coordinator")]
    pub offload_shared: Option<String>,
    /// With offload: run a job locally when offloading it fails (`on`,
    /// the default) or fail it (`off`: the store retries it later, and a
    /// remote failure cannot hide behind a local run).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    pub offload_fallback: Option<bool>,
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
    /// `--sim`: run the operation history in FILE instead of drawing one
    /// (a failed run writes its history, and a shrunk one, for this).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// `--sim`: where a failed run writes its history. Default: the
    /// system's temporary directory.
    #[arg(long, value_name = "DIR")]
    pub history_dir: Option<PathBuf>,
    /// `--sim`: runs spent shrinking a failed history (0: do not shrink).
    #[arg(long, default_value_t = 200)]
    pub shrink_runs: usize,
    /// Operation weights over the defaults, as NAME=N pairs separated by
    /// commas, e.g. `put=500,gc=50`. Names: put, delete, batch,
    /// group_write, get, scan, snapshot, snapshot_read, group_check,
    /// sync_wal, flush, compact, compact_all_gc, gc, reopen, crash (each
    /// mode runs those it supports).
    #[arg(long, value_name = "NAME=N,...")]
    pub weights: Option<String>,

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
    /// Any engine setting by its `tern::Settings` name, applied after the
    /// drawn ones and the flags above (repeatable), e.g.
    /// `--set background_rate_limit=8M`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub settings: Vec<String>,
}

impl StressArgs {
    /// The engine flags given on the command line (not drawn), as
    /// arguments: a crash loop passes them to every child, which draws
    /// the rest from its own seed.
    pub fn engine_flags_given(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut add = |flag: &str, value: Option<String>| {
            if let Some(value) = value {
                v.push(flag.to_string());
                v.push(value);
            }
        };
        fn s<T: std::fmt::Display>(o: Option<T>) -> Option<String> {
            o.map(|x| x.to_string())
        }
        add("--write-buffer-size", s(self.write_buffer_size));
        add("--max-write-buffer-number", s(self.max_write_buffer_number));
        add("--l0-trigger", s(self.l0_trigger));
        add("--level-base", s(self.level_base));
        add("--target-file-size", s(self.target_file_size));
        add("--block-size", s(self.block_size));
        add("--bloom-bits", s(self.bloom_bits));
        add("--compression", self.compression.clone());
        add("--block-cache", s(self.block_cache));
        add("--manifest-size", s(self.manifest_size));
        add(
            "--blob-threshold",
            self.blob_threshold
                .map(|t| t.0.map_or_else(|| "off".to_string(), |n| n.to_string())),
        );
        add("--blob-file-size", s(self.blob_file_size));
        add("--gc-ratio", s(self.gc_ratio));
        add("--gc", self.gc.map(|g| on_off(g).to_string()));
        add("--max-open-files", s(self.max_open_files));
        for pair in &self.settings {
            add("--set", Some(pair.clone()));
        }
        v
    }
}

/// A `--blob-threshold` value: a byte count, or separation off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobThreshold(pub Option<usize>);

/// Parses `--blob-threshold`: a byte count (`512`, `4K`) or `off`, as the
/// engine's `blob_threshold` setting takes it.
pub fn parse_blob_threshold(s: &str) -> Result<BlobThreshold, String> {
    <Option<usize> as SettingValue>::parse_setting(s)
        .map(BlobThreshold)
        .map_err(|why| format!("blob threshold {s:?} {why}"))
}

/// Parses `on`/`off` (or `true`/`false`), as the engine's settings take it.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    bool::parse_setting(s).map_err(|why| format!("{s:?} {why}"))
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
    /// The engine settings: drawn from the seed, then the flags, then
    /// `--set`.
    pub settings: Settings,
}

impl EngineKnobs {
    /// Fills what `args` leave open from `rng`.
    pub fn resolve(args: &StressArgs, rng: &mut StdRng) -> Result<EngineKnobs, String> {
        // The shared draw (`tern_ops::random_settings`), then the flags.
        let sync = rng.gen_bool(0.5);
        let mut d = Settings::default();
        d.set_all(random_settings(rng, Scale::Small))
            .map_err(|e| format!("drawn settings: {e}"))?;
        fn set<T>(v: &mut T, o: Option<T>) {
            if let Some(o) = o {
                *v = o;
            }
        }
        let drawn_buffer = d.write_buffer_size as u64;
        set(&mut d.write_buffer_size, args.write_buffer_size);
        // A drawn tier is a multiple of the drawn memtable size; it keeps
        // that multiple of the given one (a crash loop passes the flag to
        // runs that draw their own tier).
        if let Some(size) = d.memtier_size.as_mut() {
            let multiple = *size / drawn_buffer.max(1);
            *size = multiple.saturating_mul(d.write_buffer_size as u64);
        }
        set(&mut d.max_write_buffer_number, args.max_write_buffer_number);
        set(&mut d.level0_file_num_compaction_trigger, args.l0_trigger);
        set(&mut d.max_bytes_for_level_base, args.level_base);
        set(&mut d.target_file_size, args.target_file_size);
        set(&mut d.block_size, args.block_size);
        set(&mut d.bloom_bits_per_key, args.bloom_bits);
        set(&mut d.block_cache_capacity, args.block_cache);
        set(&mut d.max_manifest_file_size, args.manifest_size);
        set(&mut d.blob_file_size, args.blob_file_size);
        set(&mut d.max_open_files, args.max_open_files);
        if let Some(c) = &args.compression {
            d.set("compression_per_level", c)
                .map_err(|e| format!("--compression: {e}"))?;
        }
        if let Some(t) = args.blob_threshold {
            d.blob_threshold = t.0;
        }
        if let Some(r) = args.gc_ratio {
            d.gc_garbage_ratio = r;
        }
        if let Some(g) = args.gc {
            d.enable_gc = g;
        }
        // Stalls far above the compaction trigger: the harness measures
        // correctness, not stall behaviour.
        let l0 = d.level0_file_num_compaction_trigger;
        d.level0_slowdown_writes_trigger = l0.max(8) * 2;
        d.level0_stop_writes_trigger = l0.max(8) * 3;
        for pair in &args.settings {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("--set {pair:?}: expected NAME=VALUE"))?;
            d.set(name.trim(), value.trim())
                .map_err(|e| format!("--set {pair}: {e}"))?;
        }
        Ok(EngineKnobs {
            sync: args.sync.unwrap_or(sync),
            settings: d,
        })
    }

    /// A store that keeps a durable memory tier opens only with it: a run
    /// (of a crash loop, say) that drew no tier, or another size, takes the
    /// tier file's path and size instead.
    pub fn keep_durable_tier(&mut self, dir: &std::path::Path) {
        let Ok(meta) = std::fs::metadata(dir.join(tern::DEFAULT_MEMTIER_FILE)) else {
            return;
        };
        // Smaller than two of the smallest memtables: a file cut between
        // its creation and its sizing, which never held a table.
        if meta.len() < 2 * tern::MIN_WRITE_BUFFER_SIZE as u64 {
            return;
        }
        let s = &mut self.settings;
        s.memtier_path = Some(tern::DEFAULT_MEMTIER_FILE.to_string());
        s.memtier_size = Some(meta.len());
        // The tier must hold two memtables.
        let most = usize::try_from(meta.len() / 2).unwrap_or(usize::MAX);
        s.write_buffer_size = s.write_buffer_size.min(most);
    }

    /// Engine options with these settings (on the local file system).
    pub fn options(&self) -> Options {
        Options::new(self.settings.clone())
    }

    /// The knobs as command-line flags; `--set` flags follow, as given.
    pub fn flags(&self, set: &[String]) -> String {
        let s = &self.settings;
        let comp: Vec<&str> = s.compression_per_level.iter().map(|c| c.name()).collect();
        let mut line = format!(
            "--sync {} --write-buffer-size {} --max-write-buffer-number {} --l0-trigger {} \
             --level-base {} --target-file-size {} --block-size {} --bloom-bits {} \
             --compression {} --block-cache {} --manifest-size {} --blob-threshold {} \
             --blob-file-size {} --gc-ratio {} --gc {} --max-open-files {}",
            self.sync,
            s.write_buffer_size,
            s.max_write_buffer_number,
            s.level0_file_num_compaction_trigger,
            s.max_bytes_for_level_base,
            s.target_file_size,
            s.block_size,
            s.bloom_bits_per_key,
            comp.join(","),
            s.block_cache_capacity,
            s.max_manifest_file_size,
            s.blob_threshold
                .map_or_else(|| "off".to_string(), |t| t.to_string()),
            s.blob_file_size,
            s.gc_garbage_ratio,
            on_off(s.enable_gc),
            s.max_open_files
        );
        for pair in set {
            line += &format!(" --set {pair}");
        }
        line
    }
}

/// The mode's default weights with `--weights` over them. Refuses weights
/// for operations the mode does not run, and a mix with nothing in it.
fn resolve_weights(args: &StressArgs) -> Result<Weights, String> {
    let mut w = if args.sim {
        Weights::sim()
    } else {
        Weights::stress()
    };
    if let Some(spec) = &args.weights {
        w.apply(spec).map_err(|e| format!("--weights: {e}"))?;
    }
    let (unsupported, why) = if args.sim {
        (
            w.snapshot + w.snapshot_read + w.group_write + w.group_check,
            "--sim runs no snapshot, snapshot_read, group_write or group_check operations",
        )
    } else {
        (
            w.snapshot + w.reopen + w.crash,
            "threads share one store, so snapshot, reopen and crash run only with --sim",
        )
    };
    if unsupported > 0 {
        return Err(format!("--weights: {why}"));
    }
    if w.total() == 0 {
        return Err("--weights: every operation weight is zero".into());
    }
    Ok(w)
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
    /// The operation weights: the mode's defaults with `--weights` over
    /// them, each one an operation the mode runs.
    pub weights: Weights,
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
        let weights = resolve_weights(&args)?;
        let remote = args.offload_coordinator.is_some();
        if args.sim && (args.offload || remote) {
            return Err("--sim runs on simulated files that no worker can read: \
                        drop --offload and --offload-coordinator"
                .into());
        }
        if args.offload && args.crash_loop.is_none() {
            return Err(
                "--offload starts a coordinator and workers for --crash-loop; \
                        for a single run point --offload-coordinator and --offload-shared \
                        at running ones"
                    .into(),
            );
        }
        if args.offload && remote {
            return Err("--offload starts its own coordinator: drop --offload-coordinator".into());
        }
        if !args.sim && args.dir.is_none() {
            return Err("--dir is required (or --sim for an in-process run)".into());
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut knobs = EngineKnobs::resolve(&args, &mut rng)?;
        if let (Some(dir), false) = (&args.dir, args.sim) {
            knobs.keep_durable_tier(dir);
        }
        knobs
            .options()
            .validate()
            .map_err(|e| format!("invalid engine options: {e}"))?;
        Ok(StressConfig {
            args,
            seed,
            knobs,
            weights,
        })
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
        if a.offload {
            s += " --offload";
        }
        if let (Some(c), Some(t)) = (&a.offload_coordinator, &a.offload_shared) {
            s += &format!(" --offload-coordinator {c} --offload-shared {t}");
        }
        if let Some(f) = a.offload_fallback {
            s += &format!(" --offload-fallback {}", on_off(f));
        }
        if let Some(n) = a.ops {
            s += &format!(" --ops {n}");
        }
        if a.verify_only {
            s += " --verify-only";
        }
        if let Some(w) = &a.weights {
            s += &format!(" --weights {w}");
        }
        s + " " + &self.knobs.flags(&a.settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_loop_passes_on_exactly_the_engine_flags_given() {
        let args = StressArgs {
            write_buffer_size: Some(65536),
            blob_threshold: Some(BlobThreshold(None)),
            gc: Some(true),
            settings: vec!["background_rate_limit=8M".into()],
            ..StressArgs::default()
        };
        assert_eq!(
            args.engine_flags_given().join(" "),
            "--write-buffer-size 65536 --blob-threshold off --gc on --set background_rate_limit=8M"
        );
        assert!(StressArgs::default().engine_flags_given().is_empty());
    }

    /// Regression: every run of a crash loop draws its own settings, so a
    /// run without a tier met a store holding a durable one and could not
    /// open it. A store with a tier file keeps it, at the file's size.
    #[test]
    fn a_run_on_a_store_with_a_durable_tier_keeps_it() {
        let tmp = tempfile::tempdir().unwrap();
        let mut knobs =
            EngineKnobs::resolve(&StressArgs::default(), &mut StdRng::seed_from_u64(3)).unwrap();
        knobs.settings.memtier_size = None;
        knobs.settings.write_buffer_size = 4 << 20;
        knobs.keep_durable_tier(tmp.path());
        assert_eq!(
            knobs.settings.memtier_path, None,
            "no tier file, nothing kept"
        );
        std::fs::write(tmp.path().join("MEMTIER"), vec![0u8; 3 << 20]).unwrap();
        knobs.keep_durable_tier(tmp.path());
        let s = &knobs.settings;
        assert_eq!(s.memtier_path.as_deref(), Some("MEMTIER"));
        assert_eq!(s.memtier_size, Some(3 << 20));
        assert!(s.write_buffer_size <= 3 << 19);
        knobs.options().validate().unwrap();
    }

    /// Regression: a crash loop passes `--write-buffer-size` to every
    /// child, and a child that drew a memory tier sized for its drawn
    /// memtables (81920 bytes for 16 KiB ones, at this seed) could not
    /// open with the given 64 KiB ones. The drawn tier keeps its multiple
    /// of the memtable size.
    #[test]
    fn a_drawn_tier_holds_two_of_the_given_memtables() {
        let args = StressArgs {
            write_buffer_size: Some(65536),
            ..StressArgs::default()
        };
        let knobs = EngineKnobs::resolve(&args, &mut StdRng::seed_from_u64(949011447)).unwrap();
        let s = &knobs.settings;
        assert_eq!(s.write_buffer_size, 65536);
        assert_eq!(s.memtier_size, Some(5 * 65536), "the drawn 5x multiple");
        knobs.options().validate().unwrap();
        // A tier given with --set is the caller's: left as given.
        let args = StressArgs {
            write_buffer_size: Some(65536),
            settings: vec!["memtier_size=100000".into()],
            ..StressArgs::default()
        };
        let knobs = EngineKnobs::resolve(&args, &mut StdRng::seed_from_u64(949011447)).unwrap();
        assert_eq!(knobs.settings.memtier_size, Some(100000));
    }

    /// Regression: a run killed between creating the tier file and sizing
    /// it leaves an empty file; the next run took its size (0) for the
    /// tier's and could not open.
    #[test]
    fn a_tier_file_cut_at_creation_is_not_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let args = StressArgs::default();
        let drawn = EngineKnobs::resolve(&args, &mut StdRng::seed_from_u64(3)).unwrap();
        std::fs::write(tmp.path().join("MEMTIER"), b"").unwrap();
        let mut knobs = drawn.clone();
        knobs.keep_durable_tier(tmp.path());
        assert_eq!(knobs, drawn);
        knobs.options().validate().unwrap();
    }

    #[test]
    fn weights_are_checked_for_the_mode_before_the_run() {
        let args = |sim: bool, w: &str| StressArgs {
            sim,
            dir: Some("/tmp/x".into()),
            seed: Some(1),
            keys: 100,
            threads: 1,
            weights: Some(w.into()),
            ..Default::default()
        };
        let cfg = StressConfig::resolve(args(true, "crash=5,put=1")).unwrap();
        assert_eq!((cfg.weights.crash, cfg.weights.put), (5, 1));
        assert_eq!(cfg.weights.get, Weights::sim().get);
        let e = StressConfig::resolve(args(true, "snapshot=1")).unwrap_err();
        assert!(e.contains("--sim runs no snapshot"), "{e}");
        let e = StressConfig::resolve(args(false, "crash=1")).unwrap_err();
        assert!(e.contains("only with --sim"), "{e}");
        let zero = Weights::NAMES
            .iter()
            .map(|n| format!("{n}=0"))
            .collect::<Vec<_>>();
        let e = StressConfig::resolve(args(false, &zero.join(","))).unwrap_err();
        assert!(e.contains("every operation weight is zero"), "{e}");
        let e = StressConfig::resolve(args(false, "put=x")).unwrap_err();
        assert!(e.contains("whole number"), "{e}");
    }

    #[test]
    fn every_drawn_setting_is_one_the_engine_takes() {
        for seed in 0..200 {
            for scale in [Scale::Tiny, Scale::Small] {
                let mut s = Settings::default();
                for (name, value) in random_settings(&mut StdRng::seed_from_u64(seed), scale) {
                    s.set(name, &value)
                        .unwrap_or_else(|e| panic!("seed {seed} {scale:?}: {name} = {value}: {e}"));
                }
            }
        }
    }

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
        assert_eq!(c.knobs.settings, a.knobs.settings);
        assert_ne!(c.knobs.sync, a.knobs.sync);
        assert!(a.command_line().starts_with("tern stress --seed 42 "));
    }

    #[test]
    fn separation_knobs_parse_draw_and_print() {
        assert_eq!(parse_blob_threshold("off"), Ok(BlobThreshold(None)));
        assert_eq!(parse_blob_threshold("0"), Ok(BlobThreshold(Some(0))));
        assert!(parse_blob_threshold("big").is_err());
        assert_eq!(parse_blob_threshold("4K"), Ok(BlobThreshold(Some(4096))));
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
            let k = &cfg.knobs.settings;
            assert!((64 << 10..=4 << 20).contains(&k.blob_file_size));
            assert!((0.1..=0.8).contains(&k.gc_garbage_ratio));
            on += usize::from(k.blob_threshold.is_some());
            let line = cfg.command_line();
            let t = k.blob_threshold.map_or("off".into(), |t| t.to_string());
            assert!(line.contains(&format!(" --blob-threshold {t} ")), "{line}");
            assert!(
                line.contains(&format!(" --gc-ratio {} ", k.gc_garbage_ratio)),
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
        assert_eq!(fixed.knobs.settings.blob_threshold, None);
        assert!(!fixed.knobs.settings.enable_gc);
        assert!(fixed.command_line().contains(" --gc off "));
        assert!(fixed.command_line().contains(" --max-open-files "));
    }

    /// Any engine setting can be set with `--set`, after the drawn ones and
    /// the dedicated flags, and the printed command line repeats the run.
    #[test]
    fn set_flags_apply_last_and_repeat() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: StressArgs,
        }
        let args = StressArgs {
            dir: Some("/tmp/x".into()),
            seed: Some(7),
            keys: 10,
            threads: 1,
            settings: vec![
                "background_rate_limit=8M".into(),
                "level0_slowdown_writes_trigger=100".into(),
                "level0_stop_writes_trigger=200".into(),
            ],
            ..Default::default()
        };
        let cfg = StressConfig::resolve(args.clone()).unwrap();
        let s = &cfg.knobs.settings;
        assert_eq!(s.background_rate_limit, Some(8 << 20));
        assert_eq!(s.level0_slowdown_writes_trigger, 100);
        let line = cfg.command_line();
        assert!(line.contains(" --set background_rate_limit=8M"), "{line}");
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let again = StressConfig::resolve(Cli::try_parse_from(words).unwrap().args).unwrap();
        assert_eq!(again.knobs, cfg.knobs);
        let bad = StressConfig::resolve(StressArgs {
            settings: vec!["write_bufer_size=1M".into()],
            ..args
        });
        assert!(bad.unwrap_err().contains("unknown setting"));
    }
}
