//! The server process's own accounting, read from `/proc/self` (INFO's
//! memory and cpu sections). Elsewhere than Linux the numbers are zero.

/// Resident memory, bytes (`VmRSS`).
pub fn resident_bytes() -> u64 {
    status_kb("VmRSS:") * 1024
}

/// The most resident memory so far, bytes (`VmHWM`).
pub fn peak_resident_bytes() -> u64 {
    status_kb("VmHWM:") * 1024
}

/// A `kB` field of `/proc/self/status`.
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds used.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTimes {
    /// In the kernel, by the process.
    pub sys: f64,
    /// In user space, by the process.
    pub user: f64,
    /// In the kernel, by waited-for children.
    pub children_sys: f64,
    /// In user space, by waited-for children.
    pub children_user: f64,
}

/// Clock ticks per second of `/proc` times (`USER_HZ`, fixed at 100 by the
/// Linux ABI).
const TICKS: f64 = 100.0;

/// The process's CPU times (`/proc/self/stat` fields 14 to 17).
pub fn cpu_times() -> CpuTimes {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return CpuTimes::default();
    };
    // The command name (field 2) may hold spaces; fields after it follow
    // its closing parenthesis.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return CpuTimes::default();
    };
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|x| x.parse::<f64>().unwrap_or(0.0) / TICKS)
        .collect();
    match f.as_slice() {
        [user, sys, cuser, csys] => CpuTimes {
            sys: *sys,
            user: *user,
            children_sys: *csys,
            children_user: *cuser,
        },
        _ => CpuTimes::default(),
    }
}

/// `n` bytes as Redis prints them (`1.50M`, `912.00K`, `100B`).
pub fn human_bytes(n: u64) -> String {
    let units = [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)];
    for (u, size) in units {
        if n >= size {
            return format!("{:.2}{u}", n as f64 / size as f64);
        }
    }
    format!("{n}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_reads_its_own_memory_and_cpu() {
        if cfg!(target_os = "linux") {
            assert!(resident_bytes() > 0);
            assert!(peak_resident_bytes() >= resident_bytes() / 2);
            let spin = std::time::Instant::now();
            while spin.elapsed() < std::time::Duration::from_millis(50) {
                std::hint::black_box(0);
            }
            let t = cpu_times();
            assert!(t.user + t.sys > 0.0, "{t:?}");
        }
        assert_eq!(human_bytes(100), "100B");
        assert_eq!(human_bytes(1536 * 1024), "1.50M");
    }
}
