//! The kill -9 crash loop of the hash engine (`tern stress --engine hash`).
//!
//! A child process runs writer threads on a hash store and takes
//! checkpoints, printing after each one how many operations every thread had
//! completed when it began. The parent kills the child with SIGKILL at a
//! random moment, opens the store itself and checks the hash engine's
//! contract: of each thread's operations, the store holds a prefix, and
//! that prefix includes every operation completed before the last
//! checkpoint the child reported. Then it starts the next child on the
//! recovered store.
//!
//! Each thread writes its own keys, and its operations come from a seeded
//! generator, so the parent replays a run's operations without the child
//! having to log them. Values name their key, run and operation.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tern_hash::{HashOptions, HashStore};

/// What to run and how often to kill it.
#[derive(Debug, Clone)]
pub struct HashLoopConfig {
    /// The `tern` binary.
    pub program: PathBuf,
    /// The store's directory.
    pub dir: PathBuf,
    /// How many times to kill the child.
    pub kills: u64,
    /// Writer threads per child.
    pub threads: usize,
    /// Keys per thread.
    pub keys: usize,
    /// Each child is killed after a delay drawn from this range, ms.
    pub run_ms: (u64, u64),
    /// Seed of the delays and the runs' operations.
    pub seed: u64,
}

/// What a crash loop did.
#[derive(Debug, Clone, Default)]
pub struct HashLoopReport {
    /// Children killed.
    pub kills: u64,
    /// Operations the verified prefixes held, over all runs.
    pub ops: u64,
    /// Checkpoints the children reported.
    pub checkpoints: u64,
    /// Operations that completed after a child's last checkpoint and came
    /// back anyway (a later checkpoint was under way) or did not.
    pub beyond_checkpoint: u64,
}

/// The options every run opens the store with: small pages and segments,
/// so the log spills to disk and compaction deletes files within seconds.
pub fn store_options() -> HashOptions {
    HashOptions {
        page_bits: 14,
        memory_pages: 16,
        mutable_pages: 8,
        segment_bits: 18,
        index_bits: 10,
        checkpoint_interval: None,
        log_size_limit: None,
    }
}

/// One operation of a thread: which key, and whether it deletes.
#[derive(Clone, Copy, Debug)]
struct Op {
    key: usize,
    delete: bool,
    len: usize,
}

fn ops_of(seed: u64, run: u64, thread: usize, keys: usize) -> impl Iterator<Item = Op> {
    let mut rng = SmallRng::seed_from_u64(seed ^ (run << 20) ^ (thread as u64) << 8);
    std::iter::from_fn(move || {
        Some(Op {
            key: rng.gen_range(0..keys),
            delete: rng.gen_range(0..10) == 0,
            len: rng.gen_range(0..600),
        })
    })
}

fn key_name(thread: usize, key: usize) -> Vec<u8> {
    format!("t{thread}k{key}").into_bytes()
}

/// A key's value: its name, the run and the operation's index in the run.
fn value(thread: usize, op: &Op, run: u64, index: u64) -> Vec<u8> {
    let mut v = format!("t{thread}k{}#{run}:{index}#", op.key).into_bytes();
    v.resize(op.len.max(v.len()), b'.');
    v
}

/// (run, index) of a value, checking it names `key`.
fn parse_value(key: &[u8], v: &[u8]) -> Result<(u64, u64), String> {
    let text = String::from_utf8_lossy(v);
    let mut parts = text.split('#');
    let name = parts.next().unwrap_or_default();
    if name.as_bytes() != key {
        return Err(format!(
            "key {} holds a value of {name}",
            String::from_utf8_lossy(key)
        ));
    }
    let stamp = parts.next().unwrap_or_default();
    let (run, index) = stamp
        .split_once(':')
        .and_then(|(r, i)| Some((r.parse().ok()?, i.parse().ok()?)))
        .ok_or_else(|| format!("key {name} holds a value without a stamp: {text:.60}"))?;
    Ok((run, index))
}

/// The child: writes until killed, checkpointing every few milliseconds
/// and now and then compacting the log.
pub fn child(dir: &Path, run: u64, seed: u64, threads: usize, keys: usize) -> Result<(), String> {
    let store = HashStore::open(dir, store_options()).map_err(|e| e.to_string())?;
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let mut out = std::io::stdout();
    writeln!(out, "ready").map_err(|e| e.to_string())?;
    for t in 0..threads {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut s = store.session();
            for (i, op) in ops_of(seed, run, t, keys).enumerate() {
                let key = key_name(t, op.key);
                let r = if op.delete {
                    s.delete(&key)
                } else {
                    s.upsert(&key, &value(t, &op, run, i as u64))
                };
                if let Err(e) = r {
                    eprintln!("thread {t}: {e}");
                    std::process::exit(3);
                }
                done[t].store(i as u64 + 1, Ordering::Release);
            }
        });
    }
    let mut rng = SmallRng::seed_from_u64(seed ^ run);
    for n in 1u64.. {
        std::thread::sleep(Duration::from_millis(rng.gen_range(2..20)));
        let before: Vec<u64> = done.iter().map(|d| d.load(Ordering::Acquire)).collect();
        store.checkpoint().map_err(|e| e.to_string())?;
        let line: Vec<String> = before.iter().map(u64::to_string).collect();
        writeln!(out, "checkpoint {}", line.join(" ")).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
        if n % 8 == 0 {
            let head = store.stats().head;
            store.compact(head).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Runs the loop.
pub fn run(cfg: &HashLoopConfig, log: &mut dyn Write) -> Result<HashLoopReport, String> {
    let mut report = HashLoopReport::default();
    let mut rng = SmallRng::seed_from_u64(cfg.seed);
    // Every key's state as verified after the last run: (run, index) of
    // its value, or absent.
    let mut state: HashMap<Vec<u8>, (u64, u64)> = HashMap::new();
    if cfg.dir.exists() {
        return Err(format!(
            "{} exists: the loop starts from an empty store (remove it first)",
            cfg.dir.display()
        ));
    }
    for run in 1..=cfg.kills {
        let seed = rng.gen::<u64>();
        let mut child = Command::new(&cfg.program)
            .args(["stress", "--engine", "hash", "--hash-child-run"])
            .arg(run.to_string())
            .arg("--dir")
            .arg(&cfg.dir)
            .args(["--seed", &seed.to_string()])
            .args(["--threads", &cfg.threads.to_string()])
            .args(["--keys", &cfg.keys.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", cfg.program.display()))?;
        let stdout = child.stdout.take().ok_or("no child stdout")?;
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        let wait = rng.gen_range(cfg.run_ms.0..=cfg.run_ms.1);
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(wait));
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("run {run}: the child exited early ({status})"));
        }
        child.kill().map_err(|e| format!("kill: {e}"))?;
        let _ = child.wait();
        report.kills += 1;
        let lines = reader.join().map_err(|_| "reader panicked")?;
        if !lines.iter().any(|l| l == "ready") {
            writeln!(
                log,
                "run {run}: killed after {wait} ms, before the store opened"
            )
            .ok();
        }
        let must: Vec<u64> = lines
            .iter()
            .rev()
            .find_map(|l| l.strip_prefix("checkpoint "))
            .map(|l| l.split(' ').filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_else(|| vec![0; cfg.threads]);
        let checkpoints = lines
            .iter()
            .filter(|l| l.starts_with("checkpoint "))
            .count() as u64;
        report.checkpoints += checkpoints;
        let prefixes = verify(cfg, run, seed, &must, &mut state)?;
        let held: u64 = prefixes.iter().sum();
        let guaranteed: u64 = must.iter().sum();
        report.ops += held;
        report.beyond_checkpoint += held - guaranteed.min(held);
        writeln!(
            log,
            "run {run}: killed after {} ms, {checkpoints} checkpoints; store holds {held} operations ({guaranteed} guaranteed)",
            start.elapsed().as_millis()
        )
        .ok();
    }
    Ok(report)
}

/// Opens the store and checks each thread's keys against a prefix of the
/// run's operations of at least `must[t]`; updates `state`. Returns each
/// thread's prefix length.
fn verify(
    cfg: &HashLoopConfig,
    run: u64,
    seed: u64,
    must: &[u64],
    state: &mut HashMap<Vec<u8>, (u64, u64)>,
) -> Result<Vec<u64>, String> {
    let store = HashStore::open(&cfg.dir, store_options())
        .map_err(|e| format!("run {run}: reopening the store: {e}"))?;
    let mut s = store.session();
    let mut prefixes = Vec::new();
    for t in 0..cfg.threads {
        let mut got: HashMap<usize, Option<(u64, u64)>> = HashMap::new();
        let mut longest = 0u64;
        for k in 0..cfg.keys {
            let name = key_name(t, k);
            let v = s.get(&name).map_err(|e| {
                format!("run {run}: reading {}: {e}", String::from_utf8_lossy(&name))
            })?;
            let stamp = v.map(|v| parse_value(&name, &v)).transpose()?;
            if let Some((r, i)) = stamp {
                if r == run {
                    longest = longest.max(i + 1);
                } else if r > run {
                    return Err(format!("run {run}: a value from run {r}"));
                }
            }
            got.insert(k, stamp);
        }
        // The expected state after a prefix of p operations, grown one
        // operation at a time; `wrong` counts keys that differ from the
        // store.
        let base = |k: usize| state.get(&key_name(t, k)).copied();
        let mut expect: Vec<Option<(u64, u64)>> = (0..cfg.keys).map(base).collect();
        let mut wrong = (0..cfg.keys).filter(|&k| expect[k] != got[&k]).count();
        let lo = must.get(t).copied().unwrap_or(0).max(longest);
        // Operations past the longest one seen can only be deletes of keys
        // already absent or overwritten ones, so a short search suffices.
        let hi = lo + 4 * cfg.keys as u64 + 64;
        let mut found = None;
        for (p, op) in ops_of(seed, run, t, cfg.keys)
            .enumerate()
            .take(hi as usize + 1)
        {
            let p = p as u64;
            if p >= lo && wrong == 0 {
                found = Some(p);
                break;
            }
            let now = (!op.delete).then_some((run, p));
            let before = expect[op.key];
            expect[op.key] = now;
            let g = got[&op.key];
            wrong = wrong + usize::from(now != g) - usize::from(before != g);
        }
        let Some(p) = found else {
            let diffs: Vec<String> = (0..cfg.keys)
                .filter(|&k| base(k) != got[&k])
                .take(5)
                .map(|k| format!("t{t}k{k}: {:?} (was {:?})", got[&k], base(k)))
                .collect();
            return Err(format!(
                "run {run} (seed {seed}): thread {t}'s keys are no prefix of its operations of at least {lo} (checkpoint guaranteed {}); e.g. {}",
                must.get(t).copied().unwrap_or(0),
                diffs.join(", ")
            ));
        };
        for (k, v) in got {
            match v {
                Some(stamp) => state.insert(key_name(t, k), stamp),
                None => state.remove(&key_name(t, k)),
            };
        }
        prefixes.push(p);
    }
    Ok(prefixes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_their_key_and_stamp() {
        let op = Op {
            key: 3,
            delete: false,
            len: 40,
        };
        let v = value(1, &op, 7, 99);
        assert_eq!(parse_value(b"t1k3", &v), Ok((7, 99)));
        assert!(parse_value(b"t1k4", &v).is_err());
        let a: Vec<_> = ops_of(5, 2, 1, 10).take(20).map(|o| o.key).collect();
        let b: Vec<_> = ops_of(5, 2, 1, 10).take(20).map(|o| o.key).collect();
        assert_eq!(a, b, "a run's operations replay");
    }
}
