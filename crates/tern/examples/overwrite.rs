//! Overwrite-heavy workload: blob GC on vs off vs values kept inline.
//!
//! `cargo run --release -p tern --example overwrite -- [WRITES]` writes
//! 1 KiB incompressible values over WRITES/4 keys (75% of writes to a tenth
//! of the keys), with a 16 MiB memtable, and prints throughput, put latency
//! percentiles, space amplification and background bytes for each setup.
#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Instant;

fn run(name: &str, opts: tern::Options, n: u64, keys: u64) {
    let dir = std::env::temp_dir().join(format!("tern-overwrite-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    let db = tern::Db::open(&dir, opts).unwrap();
    let mut lat = Vec::with_capacity(n as usize);
    let mut x = 88172645463325252u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut value = vec![0u8; 1024];
    let start = Instant::now();
    for _ in 0..n {
        let r = next();
        let k = if r % 4 != 0 {
            (r >> 3) % (keys / 10)
        } else {
            (r >> 3) % keys
        };
        for chunk in value.chunks_mut(8) {
            chunk.copy_from_slice(&next().to_le_bytes()[..chunk.len()]);
        }
        let t = Instant::now();
        db.put(format!("user{k:012}").as_bytes(), &value).unwrap();
        lat.push(t.elapsed().as_micros() as u64);
    }
    let elapsed = start.elapsed();
    db.wait_for_background().unwrap();
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    let st = db.stats();
    println!(
        "{name:8} {:>7.0} ops/s  p99 {:>5} us  p99.9 {:>6} us  space-amp {:.2}  disk {:>4} MiB  gc-write {:>4} MiB  compaction-write {:>4} MiB  stall {} us",
        n as f64 / elapsed.as_secs_f64(),
        pct(0.99),
        pct(0.999),
        st.space_amplification(),
        st.disk_bytes() >> 20,
        st.gc_bytes_written >> 20,
        st.compaction_bytes_written >> 20,
        st.stall_micros
    );
    db.close().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(400_000);
    let keys = n / 4;
    let base = tern::Options::new(tern::Settings {
        write_buffer_size: 16 << 20,
        blob_file_size: 16 << 20,
        ..Default::default()
    });
    run("gc-on", base.clone(), n, keys);
    run(
        "gc-off",
        base.clone().tune(|s| s.enable_gc = false),
        n,
        keys,
    );
    run("inline", base.tune(|s| s.blob_threshold = None), n, keys);
}
