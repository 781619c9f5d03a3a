//! The memory this process may use: the tightest memory-cgroup limit over
//! it (v1 or v2), or the machine's RAM without one. Settings that depend on
//! whether the store fits in memory (`Settings::sorted_value_runs_above`)
//! compare against it: the page cache a store's files live in is charged to
//! the same cgroup.

use std::path::Path;
use std::sync::OnceLock;

/// A number of bytes, or the memory the process may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BytesOrMemory {
    /// The memory the process may use ([`process_memory`]).
    Memory,
    /// This many bytes.
    Bytes(u64),
}

impl BytesOrMemory {
    /// The number of bytes this stands for now.
    pub fn bytes(self) -> u64 {
        match self {
            BytesOrMemory::Memory => process_memory(),
            BytesOrMemory::Bytes(n) => n,
        }
    }
}

impl serde::Serialize for BytesOrMemory {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BytesOrMemory::Memory => s.serialize_str("memory"),
            BytesOrMemory::Bytes(n) => s.serialize_u64(*n),
        }
    }
}

/// Only the number form: the text forms (`"memory"`, `"4G"`) go through
/// the settings' parser.
impl<'de> serde::Deserialize<'de> for BytesOrMemory {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        u64::deserialize(d).map(BytesOrMemory::Bytes)
    }
}

/// The memory this process may use, bytes: the smallest memory-cgroup limit
/// over it, else the machine's RAM; `u64::MAX` where neither can be read
/// (not Linux). Read once: a process rarely changes cgroup, and callers ask
/// on every compaction.
pub fn process_memory() -> u64 {
    static MEMORY: OnceLock<u64> = OnceLock::new();
    *MEMORY.get_or_init(|| {
        let ram = read(Path::new("/proc/meminfo")).and_then(|t| mem_total(&t));
        let cgroup = read(Path::new("/proc/self/cgroup")).and_then(|t| cgroup_limit(&t));
        match (ram, cgroup) {
            (Some(r), Some(c)) => r.min(c),
            (r, c) => r.or(c).unwrap_or(u64::MAX),
        }
    })
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// `MemTotal` of `/proc/meminfo`, bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The limit of the memory cgroup `/proc/self/cgroup` names, with its
/// ancestors' (a parent's limit binds its children too); `None` without
/// one.
fn cgroup_limit(self_cgroup: &str) -> Option<u64> {
    let mut v2 = None;
    for line in self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            // v1: the kernel folds the ancestors' limits into this line.
            let dir = Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/'));
            return read(&dir.join("memory.stat")).and_then(|t| v1_limit(&t));
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    let path = v2?;
    let mut dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let mut limit: Option<u64> = None;
    loop {
        if let Some(l) = read(&dir.join("memory.max")).and_then(|t| v2_limit(&t)) {
            limit = Some(limit.map_or(l, |m| m.min(l)));
        }
        if dir == Path::new("/sys/fs/cgroup") || !dir.pop() {
            break;
        }
    }
    limit
}

/// `hierarchical_memory_limit` of a v1 `memory.stat`; `None` when
/// unlimited (the kernel writes a number near `i64::MAX` for that).
fn v1_limit(stat: &str) -> Option<u64> {
    let line = stat
        .lines()
        .find(|l| l.starts_with("hierarchical_memory_limit "))?;
    let n: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    (n < 1 << 62).then_some(n)
}

/// A v2 `memory.max`: a number, or `max` for none.
fn v2_limit(max: &str) -> Option<u64> {
    max.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ram_from_meminfo() {
        let m = "MemTotal:       24576000 kB\nMemFree:        1 kB\n";
        assert_eq!(mem_total(m), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn v1_limits_are_hierarchical_and_unlimited_is_none() {
        let limited = "cache 1\nhierarchical_memory_limit 2684354560\ntotal_rss 0\n";
        assert_eq!(v1_limit(limited), Some(2_684_354_560));
        let unlimited = "hierarchical_memory_limit 9223372036854771712\n";
        assert_eq!(v1_limit(unlimited), None);
    }

    #[test]
    fn v2_max_is_none() {
        assert_eq!(v2_limit("max\n"), None);
        assert_eq!(v2_limit("1073741824\n"), Some(1 << 30));
    }

    #[test]
    fn a_cgroup_file_without_memory_names_no_limit() {
        assert_eq!(cgroup_limit("3:cpu,cpuacct:/x\n"), None);
        assert_eq!(cgroup_limit(""), None);
    }

    #[test]
    fn this_process_has_some_memory() {
        let m = process_memory();
        assert!(m > 0);
        if cfg!(target_os = "linux") {
            assert!(m < u64::MAX, "Linux always has /proc/meminfo");
        }
    }
}
