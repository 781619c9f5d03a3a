//! Settings `CONFIG SET` changes while the server runs: `maxclients`,
//! `requirepass`, and Redis's in-memory encoding knobs
//! (`hash-max-listpack-entries` and the like). The knobs mean nothing to an
//! LSM, which stores every value one way; they are kept, echoed by `CONFIG
//! GET`, and used by `OBJECT ENCODING` to name the encoding Redis would
//! pick, so tools and scripts that set them keep working.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use parking_lot::{Mutex, RwLock};

/// The Redis encoding thresholds OBJECT ENCODING applies (CONFIG SET
/// accepts and records them).
#[derive(Debug, Clone, Copy)]
pub struct EncodingLimits {
    /// `hash-max-listpack-entries`.
    pub hash_entries: u64,
    /// `hash-max-listpack-value`.
    pub hash_value: u64,
    /// `set-max-intset-entries`.
    pub set_intset_entries: u64,
    /// `zset-max-listpack-entries`.
    pub zset_entries: u64,
    /// `zset-max-listpack-value`.
    pub zset_value: u64,
}

impl Default for EncodingLimits {
    fn default() -> Self {
        EncodingLimits {
            hash_entries: 512,
            hash_value: 64,
            set_intset_entries: 512,
            zset_entries: 128,
            zset_value: 64,
        }
    }
}

/// How a knob's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnobKind {
    /// An integer.
    Int,
    /// A byte count, optionally with a unit (`64`, `4kb`, `1m`).
    Memory,
}

/// The encoding knobs: name, Redis 7.0 default, the range Redis accepts,
/// and how the value is written.
pub const KNOBS: &[(&str, i64, i64, i64, KnobKind)] = &[
    ("hash-max-listpack-entries", 512, 0, i64::MAX, KnobKind::Int),
    ("hash-max-listpack-value", 64, 0, i64::MAX, KnobKind::Memory),
    ("set-max-intset-entries", 512, 0, i64::MAX, KnobKind::Int),
    ("set-max-listpack-entries", 128, 0, i64::MAX, KnobKind::Int),
    ("set-max-listpack-value", 64, 0, i64::MAX, KnobKind::Memory),
    ("zset-max-listpack-entries", 128, 0, i64::MAX, KnobKind::Int),
    ("zset-max-listpack-value", 64, 0, i64::MAX, KnobKind::Memory),
    (
        "list-max-listpack-size",
        -2,
        i32::MIN as i64,
        i32::MAX as i64,
        KnobKind::Int,
    ),
    ("list-compress-depth", 0, 0, i32::MAX as i64, KnobKind::Int),
    ("stream-node-max-bytes", 4096, 0, i64::MAX, KnobKind::Memory),
    ("stream-node-max-entries", 100, 0, i64::MAX, KnobKind::Int),
    ("hll-sparse-max-bytes", 3000, 0, i64::MAX, KnobKind::Memory),
];

/// Parses a byte count as Redis does (`memtoull`): digits, then an
/// optional unit `b`, `k`, `kb`, `m`, `mb`, `g` or `gb`, any case.
pub fn parse_memory(s: &str) -> Option<i64> {
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return None;
    }
    let mul: i64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    digits.parse::<i64>().ok()?.checked_mul(mul)
}

/// Older names of knobs (Redis keeps both).
pub const ALIASES: &[(&str, &str)] = &[
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
];

/// The knob `name` (or alias) stands for, if it is one.
pub fn knob(name: &str) -> Option<&'static str> {
    KNOBS
        .iter()
        .map(|(k, ..)| *k)
        .find(|k| *k == name)
        .or_else(|| ALIASES.iter().find(|(a, _)| *a == name).map(|(_, k)| *k))
}

/// Settings that may change at run time.
#[derive(Debug)]
pub struct Tunables {
    maxclients: AtomicUsize,
    requirepass: RwLock<String>,
    knobs: Mutex<BTreeMap<&'static str, i64>>,
}

impl Tunables {
    /// The settings as the configuration file gave them.
    pub fn new(maxclients: usize, requirepass: &str) -> Self {
        Tunables {
            maxclients: AtomicUsize::new(maxclients),
            requirepass: RwLock::new(requirepass.to_string()),
            knobs: Mutex::new(KNOBS.iter().map(|(k, v, ..)| (*k, *v)).collect()),
        }
    }

    /// Connections accepted at most.
    pub fn maxclients(&self) -> usize {
        self.maxclients.load(Relaxed)
    }

    /// Sets `maxclients` (open connections beyond it stay open).
    pub fn set_maxclients(&self, n: usize) {
        self.maxclients.store(n, Relaxed);
    }

    /// The password clients authenticate with (empty: none).
    pub fn requirepass(&self) -> String {
        self.requirepass.read().clone()
    }

    /// Sets the password; connections already authenticated stay so, as in
    /// Redis.
    pub fn set_requirepass(&self, pw: &str) {
        *self.requirepass.write() = pw.to_string();
    }

    /// The value of knob `name` (or alias).
    pub fn knob(&self, name: &str) -> Option<i64> {
        knob(name).and_then(|k| self.knobs.lock().get(k).copied())
    }

    /// The values knob `name` (or alias) accepts, and how they are
    /// written.
    pub fn knob_range(name: &str) -> Option<(i64, i64, KnobKind)> {
        let k = knob(name)?;
        KNOBS
            .iter()
            .find(|(n, ..)| *n == k)
            .map(|(_, _, lo, hi, kind)| (*lo, *hi, *kind))
    }

    /// Sets knob `name` (or alias) to `v`.
    pub fn set_knob(&self, name: &str, v: i64) {
        if let Some(k) = knob(name) {
            self.knobs.lock().insert(k, v);
        }
    }

    /// Every knob and alias with its value, for `CONFIG GET`.
    pub fn knobs(&self) -> Vec<(&'static str, String)> {
        let knobs = self.knobs.lock();
        KNOBS
            .iter()
            .map(|(k, ..)| *k)
            .chain(ALIASES.iter().map(|(a, _)| *a))
            .filter_map(|name| {
                let k = knob(name)?;
                Some((name, knobs.get(k)?.to_string()))
            })
            .collect()
    }

    /// The thresholds `OBJECT ENCODING` applies.
    pub fn encoding_limits(&self) -> EncodingLimits {
        let d = EncodingLimits::default();
        let get = |name: &str, dflt: u64| {
            self.knob(name)
                .map_or(dflt, |v| u64::try_from(v).unwrap_or(0))
        };
        EncodingLimits {
            hash_entries: get("hash-max-listpack-entries", d.hash_entries),
            hash_value: get("hash-max-listpack-value", d.hash_value),
            set_intset_entries: get("set-max-intset-entries", d.set_intset_entries),
            zset_entries: get("zset-max-listpack-entries", d.zset_entries),
            zset_value: get("zset-max-listpack-value", d.zset_value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_share_their_knob() {
        let t = Tunables::new(10, "");
        assert_eq!(t.knob("hash-max-ziplist-entries"), Some(512));
        assert_eq!(
            Tunables::knob_range("list-max-ziplist-size"),
            Some((i32::MIN as i64, i32::MAX as i64, KnobKind::Int))
        );
        assert_eq!(parse_memory("4kb"), Some(4096));
        assert_eq!(parse_memory("1M"), Some(1_000_000));
        assert_eq!(parse_memory("64"), Some(64));
        assert_eq!(parse_memory("-1"), None);
        assert_eq!(parse_memory("x"), None);
        t.set_knob("hash-max-ziplist-entries", 7);
        assert_eq!(t.knob("hash-max-listpack-entries"), Some(7));
        assert_eq!(t.encoding_limits().hash_entries, 7);
        assert_eq!(t.knob("no-such-knob"), None);
        let all = t.knobs();
        assert!(all.contains(&("hash-max-ziplist-entries", "7".to_string())));
        assert_eq!(all.len(), KNOBS.len() + ALIASES.len());
    }
}
