//! The process's own I/O counters (`/proc/self/io`), read the same way for
//! every engine: bytes passed to `read`/`write` system calls by any thread,
//! foreground or background. They make write amplification comparable
//! across engines without trusting each engine's own statistics (which may
//! cost time to collect, or miss files such as logs).

use serde::Serialize;

/// Cumulative I/O of this process.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct ProcIo {
    /// Bytes read through system calls (`rchar`; page-cache hits included).
    pub read: u64,
    /// Bytes written through system calls (`wchar`).
    pub written: u64,
    /// Bytes fetched from the storage device (`read_bytes`).
    pub device_read: u64,
    /// Bytes sent towards the storage device (`write_bytes`).
    pub device_written: u64,
}

impl ProcIo {
    /// The counters now, or `None` where `/proc/self/io` is not readable.
    pub fn sample() -> Option<ProcIo> {
        std::fs::read_to_string("/proc/self/io")
            .ok()
            .and_then(|t| Self::parse(&t))
    }

    /// Parses the text of `/proc/<pid>/io`.
    pub fn parse(text: &str) -> Option<ProcIo> {
        let field = |name: &str| {
            text.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().parse::<u64>().ok())?
            })
        };
        Some(ProcIo {
            read: field("rchar")?,
            written: field("wchar")?,
            device_read: field("read_bytes").unwrap_or(0),
            device_written: field("write_bytes").unwrap_or(0),
        })
    }

    /// Counts accumulated since `base`.
    pub fn since(&self, base: &ProcIo) -> ProcIo {
        ProcIo {
            read: self.read.saturating_sub(base.read),
            written: self.written.saturating_sub(base.written),
            device_read: self.device_read.saturating_sub(base.device_read),
            device_written: self.device_written.saturating_sub(base.device_written),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_io_and_subtracts() {
        let t = "rchar: 300\nwchar: 5000\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        let a = ProcIo::parse(t).unwrap();
        assert_eq!(
            a,
            ProcIo {
                read: 300,
                written: 5000,
                device_read: 4096,
                device_written: 8192
            }
        );
        let b = ProcIo {
            read: 100,
            written: 1000,
            device_read: 0,
            device_written: 4096,
        };
        assert_eq!(a.since(&b).written, 4000);
        assert_eq!(ProcIo::parse("rchar: 1\n"), None, "wchar missing");
    }

    #[test]
    fn own_writes_show_up() {
        let Some(before) = ProcIo::sample() else {
            return; // not Linux
        };
        let dir = std::env::temp_dir().join(format!("tern-proc-io-{}", std::process::id()));
        std::fs::write(&dir, vec![7u8; 1 << 20]).unwrap();
        let after = ProcIo::sample().unwrap();
        let _ = std::fs::remove_file(&dir);
        assert!(after.since(&before).written >= 1 << 20);
    }
}
