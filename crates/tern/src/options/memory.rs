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

/// A number of bytes, or the text [`Settings::set`](super::Settings::set)
/// takes (`"memory"`, `"4G"`).
impl<'de> serde::Deserialize<'de> for BytesOrMemory {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Form {
            Number(u64),
            Text(String),
        }
        match Form::deserialize(d)? {
            Form::Number(n) => Ok(BytesOrMemory::Bytes(n)),
            Form::Text(t) => <BytesOrMemory as super::SettingValue>::parse_setting(&t)
                .map_err(|why| serde::de::Error::custom(format!("{t:?} {why}"))),
        }
    }
}

/// The memory this process may use, bytes: the smallest of its memory
/// cgroups' limits and the machine's RAM on Linux; `u64::MAX` where
/// neither can be read (other systems). Read once: a process rarely
/// changes cgroup or limit, and callers ask on every compaction.
pub fn process_memory() -> u64 {
    static MEMORY: OnceLock<u64> = OnceLock::new();
    *MEMORY.get_or_init(|| {
        let ram = read(Path::new("/proc/meminfo")).and_then(|t| mem_total(&t));
        let cgroup = read(Path::new("/proc/self/cgroup"))
            .and_then(|t| cgroup_limit(&t, Path::new("/sys/fs/cgroup")));
        match (ram, cgroup) {
            (Some(r), Some(c)) => r.min(c),
            (r, c) => r.or(c).unwrap_or(u64::MAX),
        }
    })
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The number after `name` on the line of `text` that starts with it
/// (`/proc/meminfo`, a v1 `memory.stat`: `name value [unit]`).
fn field(text: &str, name: &str) -> Option<u64> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `MemTotal` of `/proc/meminfo`, bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    field(meminfo, "MemTotal:")?.checked_mul(1024)
}

/// The limit of the memory cgroup `/proc/self/cgroup` names, with its
/// ancestors' (a parent's limit binds its children too), under the cgroup
/// mount `root`; `None` without one. In a container that shares the host's
/// cgroup namespace the file names a path of the host's (`/docker/<id>`)
/// while the container sees its own cgroup at the mount's root: where the
/// named path does not exist, the root is the process's cgroup.
fn cgroup_limit(self_cgroup: &str, root: &Path) -> Option<u64> {
    let mut v2 = None;
    for line in self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            // v1: the kernel folds the ancestors' limits into this line.
            let mount = root.join("memory");
            let dir = existing_or_root(&mount, path);
            return read(&dir.join("memory.stat")).and_then(|t| v1_limit(&t));
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    let mut dir = existing_or_root(root, &v2?);
    let mut limit: Option<u64> = None;
    loop {
        if let Some(l) = read(&dir.join("memory.max")).and_then(|t| v2_limit(&t)) {
            limit = Some(limit.map_or(l, |m| m.min(l)));
        }
        if dir.as_path() == root || !dir.pop() || !dir.starts_with(root) {
            break;
        }
    }
    limit
}

/// `path` (as `/proc/self/cgroup` names it) under `mount`, or `mount`
/// itself where that does not exist.
fn existing_or_root(mount: &Path, path: &str) -> std::path::PathBuf {
    let dir = mount.join(path.trim_start_matches('/'));
    if dir.is_dir() {
        dir
    } else {
        mount.to_path_buf()
    }
}

/// `hierarchical_memory_limit` of a v1 `memory.stat`; `None` when
/// unlimited (the kernel writes a number near `i64::MAX` for that).
fn v1_limit(stat: &str) -> Option<u64> {
    field(stat, "hierarchical_memory_limit").filter(|&n| n < 1 << 62)
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
        let root = tempfile::tempdir().unwrap();
        assert_eq!(cgroup_limit("3:cpu,cpuacct:/x\n", root.path()), None);
        assert_eq!(cgroup_limit("", root.path()), None);
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn v1_reads_the_named_cgroup_or_the_mount_root_in_a_container() {
        let root = tempfile::tempdir().unwrap();
        let stat = |n: u64| format!("cache 0\nhierarchical_memory_limit {n}\n");
        write(&root.path().join("memory/memory.stat"), &stat(1 << 30));
        write(
            &root.path().join("memory/bench/memory.stat"),
            &stat(1 << 29),
        );
        let own = "12:memory:/bench\n4:cpu:/\n";
        assert_eq!(cgroup_limit(own, root.path()), Some(1 << 29));
        // A container's view: the host's path, the container's cgroup at the root.
        let host = "12:memory:/docker/0123abcd\n";
        assert_eq!(cgroup_limit(host, root.path()), Some(1 << 30));
    }

    #[test]
    fn v2_takes_the_tightest_limit_up_to_the_root() {
        let root = tempfile::tempdir().unwrap();
        write(&root.path().join("a/memory.max"), "2147483648\n");
        write(&root.path().join("a/b/memory.max"), "max\n");
        write(&root.path().join("a/b/c/memory.max"), "4294967296\n");
        assert_eq!(cgroup_limit("0::/a/b/c\n", root.path()), Some(2 << 30));
        assert_eq!(cgroup_limit("0::/a/b\n", root.path()), Some(2 << 30));
        // A namespaced view of a path the mount does not show: the root.
        assert_eq!(cgroup_limit("0::/elsewhere\n", root.path()), None);
        write(&root.path().join("memory.max"), "1073741824\n");
        assert_eq!(cgroup_limit("0::/elsewhere\n", root.path()), Some(1 << 30));
    }

    #[test]
    fn this_process_has_some_memory() {
        assert!(process_memory() > 0);
    }

    #[test]
    fn the_value_reads_back_from_numbers_and_text() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Wrap {
            v: BytesOrMemory,
        }
        let read = |t: &str| toml::from_str::<Wrap>(t).map(|w| w.v);
        assert_eq!(read("v = \"memory\"").unwrap(), BytesOrMemory::Memory);
        assert_eq!(read("v = \"4G\"").unwrap(), BytesOrMemory::Bytes(4 << 30));
        assert_eq!(read("v = 4096").unwrap(), BytesOrMemory::Bytes(4096));
        for v in [BytesOrMemory::Memory, BytesOrMemory::Bytes(7)] {
            let text = toml::to_string(&Wrap { v }).unwrap();
            assert_eq!(read(&text).unwrap(), v, "{text}");
        }
        assert!(read("v = \"lots\"").is_err());
    }
}
