//! The one random draw of engine settings the harnesses share.
//!
//! Settings come out as `(name, value)` text pairs in the language
//! `tern::Settings::set` parses, so a history file lists them readably and
//! this crate needs no engine types.

use rand::rngs::StdRng;
use rand::Rng;

/// How large the drawn sizes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Kilobyte memtables, tables and blob files: flushes, compactions,
    /// manifest rolls and GC within a few hundred operations (the model
    /// test, `tern stress --sim`).
    Tiny,
    /// Memtables up to a megabyte and tables up to two: a store that grows
    /// several levels in a stress run of seconds (`tern stress`).
    Small,
}

fn pick<T: Copy>(rng: &mut StdRng, of: &[T]) -> T {
    of[rng.gen_range(0..of.len())]
}

fn compression(rng: &mut StdRng) -> String {
    (0..3)
        .map(|_| pick(rng, &["none", "lz4", "zstd"]))
        .collect::<Vec<_>>()
        .join(",")
}

/// Draws engine settings at `scale`: sizes, level shape, block format,
/// filters, compression per level, cache and open-file limits, manifest
/// rolls, key-value separation and GC. Stall triggers sit far above the
/// compaction trigger: the harnesses check correctness, not stalls.
pub fn random_settings(rng: &mut StdRng, scale: Scale) -> Vec<(&'static str, String)> {
    let mut s: Vec<(&'static str, String)> = Vec::new();
    let mut put = |name: &'static str, value: String| s.push((name, value));
    match scale {
        Scale::Tiny => {
            put(
                "write_buffer_size",
                rng.gen_range(4096..32768u32).to_string(),
            );
            put(
                "max_write_buffer_number",
                rng.gen_range(2..4u32).to_string(),
            );
            put(
                "level0_file_num_compaction_trigger",
                rng.gen_range(1..4u32).to_string(),
            );
            put("level0_slowdown_writes_trigger", "8".into());
            put("level0_stop_writes_trigger", "12".into());
            put(
                "max_bytes_for_level_base",
                (rng.gen_range(16..64u64) << 10).to_string(),
            );
            put(
                "max_bytes_for_level_multiplier",
                rng.gen_range(2..5u32).to_string(),
            );
            put("dynamic_level_bytes", rng.gen_bool(0.7).to_string());
            put(
                "target_file_size",
                (rng.gen_range(2..16u64) << 10).to_string(),
            );
            put("block_size", rng.gen_range(128..4096u32).to_string());
            put(
                "block_restart_interval",
                rng.gen_range(1..17u32).to_string(),
            );
            put(
                "bloom_bits_per_key",
                pick(rng, &[10, 10, 10, 0]).to_string(),
            );
            put("compression_per_level", compression(rng));
            put(
                "block_cache_capacity",
                pick(rng, &[0, 16 << 10, 1 << 20]).to_string(),
            );
            put(
                "max_manifest_file_size",
                (rng.gen_range(1..64u64) << 10).to_string(),
            );
            put(
                "blob_threshold",
                pick(rng, &["off", "0", "32", "512"]).to_string(),
            );
            put("blob_file_size", rng.gen_range(4096..32768u32).to_string());
            put(
                "gc_garbage_ratio",
                format!("{:.3}", rng.gen_range(0.05..0.9)),
            );
            put("gc_max_batch_files", rng.gen_range(1..4u32).to_string());
            put(
                "gc_space_amp_limit",
                pick(rng, &["off", "1.05", "1.25", "2"]).to_string(),
            );
            // Few open files: reads reopen files the cache closed under them.
            put("max_open_files", pick(rng, &[2, 8, 1000]).to_string());
            put("blob_head_size", pick(rng, &[0, 0, 4, 40]).to_string());
            put("max_subcompactions", pick(rng, &[1, 1, 2, 4]).to_string());
            put(
                "sorted_value_runs",
                pick(rng, &["off", "off", "1", "3"]).to_string(),
            );
        }
        Scale::Small => {
            put(
                "write_buffer_size",
                (rng.gen_range(16..1024u32) << 10).to_string(),
            );
            put(
                "max_write_buffer_number",
                rng.gen_range(2..5u32).to_string(),
            );
            // The stall triggers stay the defaults (or the caller's): far
            // above this compaction trigger.
            let l0 = rng.gen_range(2..6u32);
            put("level0_file_num_compaction_trigger", l0.to_string());
            put(
                "max_bytes_for_level_base",
                (rng.gen_range(1..16u64) << 20).to_string(),
            );
            put(
                "target_file_size",
                (rng.gen_range(64..2048u64) << 10).to_string(),
            );
            put(
                "block_size",
                pick(rng, &[512, 1024, 4096, 16384]).to_string(),
            );
            put("bloom_bits_per_key", pick(rng, &[0, 5, 10, 10]).to_string());
            put("compression_per_level", compression(rng));
            put(
                "block_cache_capacity",
                pick(rng, &[0, 1 << 20, 8 << 20]).to_string(),
            );
            put(
                "max_manifest_file_size",
                (rng.gen_range(16..4096u64) << 10).to_string(),
            );
            // Separation is on in most runs; blob files are small so that
            // GC has many to choose from.
            put(
                "blob_threshold",
                pick(
                    rng,
                    &[
                        "off", "off", "off", "0", "0", "0", "0", "64", "64", "64", "64", "64",
                        "512", "512", "512", "512", "512", "2048", "2048", "2048",
                    ],
                )
                .to_string(),
            );
            put(
                "blob_file_size",
                (rng.gen_range(64..=4096u64) << 10).to_string(),
            );
            put(
                "gc_garbage_ratio",
                format!("{:.2}", f64::from(rng.gen_range(10..=80u32)) / 100.0),
            );
            put("enable_gc", rng.gen_bool(0.85).to_string());
            put(
                "gc_space_amp_limit",
                pick(rng, &["off", "1.1", "1.25", "1.5"]).to_string(),
            );
            put(
                "max_open_files",
                pick(rng, &[4, 16, 64, 1 << 16]).to_string(),
            );
            put("max_subcompactions", pick(rng, &[1, 1, 2, 4]).to_string());
            put(
                "sorted_value_runs",
                pick(rng, &["off", "off", "1", "3"]).to_string(),
            );
        }
    }
    // A memory tier in a third of the runs, a few memtables large, so
    // copy-ins, merges and copy-outs all happen; durable (a file in the
    // store's directory) in half of them.
    if rng.gen_bool(1.0 / 3.0) {
        let buffer: u64 = s
            .iter()
            .find(|(n, _)| *n == "write_buffer_size")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(64 << 10);
        s.push((
            "memtier_size",
            (buffer * rng.gen_range(3..10u64)).to_string(),
        ));
        s.push(("memtier_levels", rng.gen_range(1..4u32).to_string()));
        s.push(("memtier_level_tables", rng.gen_range(2..5u32).to_string()));
        if rng.gen_bool(0.5) {
            s.push(("memtier_path", "MEMTIER".to_string()));
        }
    }
    // Waiting writers poll in a third of the runs (off by default), so the
    // polling path meets crashes and faults too. Drawn last: the draws
    // above stay what they were for each seed.
    s.push((
        "write_thread_max_yield_usec",
        pick(rng, &["0", "0", "50"]).to_string(),
    ));
    // Runs start once values pass a threshold, by default the process's
    // memory, which these stores never reach: mostly from the start, now
    // and then part way through a run, now and then never. Drawn after
    // the rest for the same reason.
    s.push((
        "sorted_value_runs_above",
        pick(rng, &["0", "0", "64K", "memory"]).to_string(),
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn same_seed_same_settings_and_both_scales_vary() {
        for scale in [Scale::Tiny, Scale::Small] {
            let a = random_settings(&mut StdRng::seed_from_u64(3), scale);
            let b = random_settings(&mut StdRng::seed_from_u64(3), scale);
            assert_eq!(a, b);
            let distinct: std::collections::BTreeSet<_> = (0..50)
                .map(|s| random_settings(&mut StdRng::seed_from_u64(s), scale))
                .collect();
            assert!(
                distinct.len() > 45,
                "{scale:?}: {} distinct",
                distinct.len()
            );
            let names: std::collections::BTreeSet<_> = a.iter().map(|(n, _)| n).collect();
            assert_eq!(names.len(), a.len(), "{scale:?}: a setting drawn twice");
        }
    }
}
