//! One operation of a history, and its one-line text form.
//!
//! Everything random about an operation is in it (keys, bounds, the fault
//! armed, the crash mode and its seed), so executing a history twice does
//! the same thing, up to the timing of the store's background threads.

use std::fmt;
use std::str::FromStr;

/// Where a scan goes: optional bounds (`lower` inclusive, `upper`
/// exclusive, in key-number order where the executor's keys allow), and
/// which way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanBounds {
    /// Lower bound.
    pub lower: Option<u32>,
    /// Upper bound.
    pub upper: Option<u32>,
    /// Iterate from the end.
    pub reverse: bool,
}

impl ScanBounds {
    /// Whether either bound is set.
    pub fn is_bounded(&self) -> bool {
        self.lower.is_some() || self.upper.is_some()
    }

    /// The same direction over the whole key space (a shrinking step).
    pub fn unbounded(&self) -> ScanBounds {
        ScanBounds {
            reverse: self.reverse,
            ..ScanBounds::default()
        }
    }

    fn parse(f: &Fields<'_>) -> Result<ScanBounds, String> {
        Ok(ScanBounds {
            lower: f.bound("lower")?,
            upper: f.bound("upper")?,
            reverse: f.flag("reverse")?,
        })
    }
}

impl fmt::Display for ScanBounds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "lower={} upper={} reverse={}",
            bound(&self.lower),
            bound(&self.upper),
            u8::from(self.reverse)
        )
    }
}

/// What a write entry touches: key number `n` (each executor maps it to a
/// key of its own shape) or atomic group `n` (several keys always written
/// together with one value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// A plain key.
    Key(u32),
    /// An atomic group.
    Group(u32),
}

/// One entry of a write: a put (of a value the executor derives from the
/// key and the operation's position) or a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The key or group written.
    pub target: Target,
    /// A put; false for a delete.
    pub put: bool,
}

/// How an executor gets the store back after an operation that met an
/// armed fault failed and left the store unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Drop the store and open it on the files as the process left them.
    Restart,
    /// Simulate a power failure in crash mode `mode` (an index into the
    /// executor's list of modes) drawn with `seed`, then open.
    Crash {
        /// Index of the crash mode.
        mode: u8,
        /// Seed for what the crash keeps.
        seed: u64,
    },
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// One atomic write: a put, a delete or a batch.
    Write {
        /// What it writes, in order (a later entry for the same target wins).
        entries: Vec<Entry>,
        /// Synced before it is acknowledged.
        sync: bool,
    },
    /// A point read, checked.
    Get {
        /// The key read.
        key: u32,
    },
    /// An iteration, checked.
    Scan {
        /// Where and which way it goes.
        bounds: ScanBounds,
    },
    /// Take a snapshot and remember what it must show.
    Snapshot,
    /// Release held snapshot `index` (modulo the number held; nothing when
    /// none is held).
    Release {
        /// Which snapshot.
        index: u32,
    },
    /// A point read of `key` and a scan through held snapshot `index`
    /// (modulo the number held; executors without held snapshots take one
    /// for the read), checked against what the snapshot must show.
    SnapshotRead {
        /// Which snapshot.
        index: u32,
        /// The key read.
        key: u32,
        /// Where and which way the scan goes.
        bounds: ScanBounds,
    },
    /// Read every member of group `group` at one snapshot: all or none
    /// must be there, with one value.
    GroupCheck {
        /// The group.
        group: u32,
    },
    /// Sync the write-ahead log.
    SyncWal,
    /// Flush the memtables.
    Flush,
    /// Compact a key range (both ends inclusive), or everything.
    Compact {
        /// The range; none compacts everything.
        range: Option<(u32, u32)>,
    },
    /// Run blob garbage collection now.
    Gc,
    /// Arm one I/O fault for the next operation: fault kind `kind` (an
    /// index into the executor's list) on the call after `skip` calls that
    /// would meet it; `then` says how to get the store back if it fails.
    Fault {
        /// Index of the fault kind.
        kind: u8,
        /// Calls of that kind to let through first.
        skip: u32,
        /// What to do if the operation fails.
        then: Recovery,
    },
    /// From here to the end of the epoch, each I/O call fails with
    /// probability `per_million` / 1 000 000, drawn from `seed`; a failed
    /// call may leave part of its effect when `torn` (0 turns faults off).
    Faults {
        /// Seed of the fault stream.
        seed: u64,
        /// Failure probability per I/O call, in millionths.
        per_million: u32,
        /// Failed calls may leave part of their effect.
        torn: bool,
    },
    /// Close the store cleanly and open it again: a new epoch whose writes
    /// skip the WAL when `no_wal`. `flip_dynamic` toggles the level-size
    /// mode, so the base level moves while shallower levels hold data.
    Reopen {
        /// Writes of the next epoch skip the WAL.
        no_wal: bool,
        /// Toggle `dynamic_level_bytes` first.
        flip_dynamic: bool,
    },
    /// Simulate a power failure in crash mode `mode` drawn with `seed`,
    /// then open: a new epoch, as for [`Op::Reopen`].
    Crash {
        /// Index of the crash mode.
        mode: u8,
        /// Seed for what the crash keeps.
        seed: u64,
        /// Writes of the next epoch skip the WAL.
        no_wal: bool,
    },
}

impl Op {
    /// The operation's name, the first word of its text form.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Write { .. } => "write",
            Op::Get { .. } => "get",
            Op::Scan { .. } => "scan",
            Op::Snapshot => "snapshot",
            Op::Release { .. } => "release",
            Op::SnapshotRead { .. } => "snapshot-read",
            Op::GroupCheck { .. } => "group-check",
            Op::SyncWal => "sync-wal",
            Op::Flush => "flush",
            Op::Compact { .. } => "compact",
            Op::Gc => "gc",
            Op::Fault { .. } => "fault",
            Op::Faults { .. } => "faults",
            Op::Reopen { .. } => "reopen",
            Op::Crash { .. } => "crash",
        }
    }

    /// Whether it ends an epoch (the store is closed or crashed and opened
    /// again).
    pub fn ends_epoch(&self) -> bool {
        matches!(self, Op::Reopen { .. } | Op::Crash { .. })
    }

    /// Simpler versions of this operation, simplest first, for [`crate::shrink`].
    pub fn simpler(&self) -> Vec<Op> {
        let mut out = Vec::new();
        match self {
            Op::Write { entries, sync } => {
                if *sync {
                    out.push(Op::Write {
                        entries: entries.clone(),
                        sync: false,
                    });
                }
                if entries.len() > 1 {
                    for i in 0..entries.len() {
                        let mut fewer = entries.clone();
                        fewer.remove(i);
                        out.push(Op::Write {
                            entries: fewer,
                            sync: *sync,
                        });
                    }
                }
            }
            Op::Scan { bounds } if bounds.is_bounded() => out.push(Op::Scan {
                bounds: bounds.unbounded(),
            }),
            Op::SnapshotRead { index, key, bounds } if bounds.is_bounded() => {
                out.push(Op::SnapshotRead {
                    index: *index,
                    key: *key,
                    bounds: bounds.unbounded(),
                })
            }
            Op::Compact { range: Some(_) } => out.push(Op::Compact { range: None }),
            Op::Fault {
                kind,
                skip,
                then: Recovery::Crash { .. },
            } => out.push(Op::Fault {
                kind: *kind,
                skip: *skip,
                then: Recovery::Restart,
            }),
            Op::Reopen {
                no_wal,
                flip_dynamic: true,
            } => out.push(Op::Reopen {
                no_wal: *no_wal,
                flip_dynamic: false,
            }),
            Op::Crash { mode, seed, no_wal } if *mode != 0 => out.push(Op::Crash {
                mode: 0,
                seed: *seed,
                no_wal: *no_wal,
            }),
            _ => {}
        }
        out
    }
}

fn bound(b: &Option<u32>) -> String {
    b.map_or_else(|| "-".to_string(), |k| k.to_string())
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Key(k) => write!(f, "k{k}"),
            Target::Group(g) => write!(f, "g{g}"),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = |v: bool| u8::from(v);
        write!(f, "{}", self.name())?;
        match self {
            Op::Write { entries, sync } => {
                write!(f, " sync={}", b(*sync))?;
                for e in entries {
                    write!(f, " {}{}", if e.put { '+' } else { '-' }, e.target)?;
                }
                Ok(())
            }
            Op::Get { key } => write!(f, " key={key}"),
            Op::Scan { bounds } => write!(f, " {bounds}"),
            Op::Snapshot | Op::SyncWal | Op::Flush | Op::Gc => Ok(()),
            Op::Release { index } => write!(f, " index={index}"),
            Op::SnapshotRead { index, key, bounds } => {
                write!(f, " index={index} key={key} {bounds}")
            }
            Op::GroupCheck { group } => write!(f, " group={group}"),
            Op::Compact { range } => match range {
                Some((lo, hi)) => write!(f, " from={lo} to={hi}"),
                None => write!(f, " all"),
            },
            Op::Fault { kind, skip, then } => {
                write!(f, " kind={kind} skip={skip}")?;
                match then {
                    Recovery::Restart => write!(f, " then=restart"),
                    Recovery::Crash { mode, seed } => {
                        write!(f, " then=crash mode={mode} seed={seed}")
                    }
                }
            }
            Op::Faults {
                seed,
                per_million,
                torn,
            } => write!(
                f,
                " per_million={per_million} seed={seed} torn={}",
                b(*torn)
            ),
            Op::Reopen {
                no_wal,
                flip_dynamic,
            } => write!(
                f,
                " no_wal={} flip_dynamic={}",
                b(*no_wal),
                b(*flip_dynamic)
            ),
            Op::Crash { mode, seed, no_wal } => {
                write!(f, " mode={mode} seed={seed} no_wal={}", b(*no_wal))
            }
        }
    }
}

/// The `name=value` words after an operation's name.
struct Fields<'a> {
    words: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn get(&self, name: &str) -> Result<&'a str, String> {
        self.words
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("missing {name}="))
    }

    fn num<T: FromStr>(&self, name: &str) -> Result<T, String> {
        let v = self.get(name)?;
        v.parse()
            .map_err(|_| format!("{name}={v}: not a number in range"))
    }

    fn flag(&self, name: &str) -> Result<bool, String> {
        match self.get(name)? {
            "0" => Ok(false),
            "1" => Ok(true),
            v => Err(format!("{name}={v}: expected 0 or 1")),
        }
    }

    fn bound(&self, name: &str) -> Result<Option<u32>, String> {
        match self.get(name)? {
            "-" => Ok(None),
            _ => self.num(name).map(Some),
        }
    }
}

fn parse_entry(word: &str) -> Result<Entry, String> {
    let put = match word.as_bytes().first() {
        Some(b'+') => true,
        Some(b'-') => false,
        _ => {
            return Err(format!(
                "write entry {word:?}: expected +k<n>, -k<n>, +g<n> or -g<n>"
            ))
        }
    };
    let rest = &word[1..];
    let num = |s: &str| {
        s.parse::<u32>()
            .map_err(|_| format!("write entry {word:?}: bad number"))
    };
    let target = if let Some(n) = rest.strip_prefix('k') {
        Target::Key(num(n)?)
    } else if let Some(n) = rest.strip_prefix('g') {
        Target::Group(num(n)?)
    } else {
        return Err(format!("write entry {word:?}: expected k<n> or g<n>"));
    };
    Ok(Entry { target, put })
}

impl FromStr for Op {
    type Err = String;

    /// Parses the text form [`Display`](fmt::Display) writes.
    fn from_str(line: &str) -> Result<Op, String> {
        let mut words = line.split_whitespace();
        let name = words.next().ok_or("empty operation")?;
        let rest: Vec<&str> = words.collect();
        let mut entries = Vec::new();
        let mut fields = Fields { words: Vec::new() };
        for w in &rest {
            if name == "write" && (w.starts_with('+') || w.starts_with('-')) {
                entries.push(parse_entry(w)?);
            } else if let Some((n, v)) = w.split_once('=') {
                fields.words.push((n, v));
            } else {
                fields.words.push((w, ""));
            }
        }
        let f = &fields;
        let op = match name {
            "write" => Op::Write {
                entries,
                sync: f.flag("sync")?,
            },
            "get" => Op::Get { key: f.num("key")? },
            "scan" => Op::Scan {
                bounds: ScanBounds::parse(f)?,
            },
            "snapshot" => Op::Snapshot,
            "release" => Op::Release {
                index: f.num("index")?,
            },
            "snapshot-read" => Op::SnapshotRead {
                index: f.num("index")?,
                key: f.num("key")?,
                bounds: ScanBounds::parse(f)?,
            },
            "group-check" => Op::GroupCheck {
                group: f.num("group")?,
            },
            "sync-wal" => Op::SyncWal,
            "flush" => Op::Flush,
            "compact" => Op::Compact {
                range: if f.get("all").is_ok() {
                    None
                } else {
                    Some((f.num("from")?, f.num("to")?))
                },
            },
            "gc" => Op::Gc,
            "fault" => Op::Fault {
                kind: f.num("kind")?,
                skip: f.num("skip")?,
                then: match f.get("then")? {
                    "restart" => Recovery::Restart,
                    "crash" => Recovery::Crash {
                        mode: f.num("mode")?,
                        seed: f.num("seed")?,
                    },
                    v => return Err(format!("then={v}: expected restart or crash")),
                },
            },
            "faults" => Op::Faults {
                seed: f.num("seed")?,
                per_million: f.num("per_million")?,
                torn: f.flag("torn")?,
            },
            "reopen" => Op::Reopen {
                no_wal: f.flag("no_wal")?,
                flip_dynamic: f.flag("flip_dynamic")?,
            },
            "crash" => Op::Crash {
                mode: f.num("mode")?,
                seed: f.num("seed")?,
                no_wal: f.flag("no_wal")?,
            },
            other => return Err(format!("unknown operation {other:?}")),
        };
        // Refuse words the operation does not use (`flush now`, `get key=3
        // x=1`): a history means exactly what it says.
        let canon = op.to_string();
        let mut want: Vec<&str> = canon.split_whitespace().collect();
        let mut got: Vec<&str> = line.split_whitespace().collect();
        want.sort_unstable();
        got.sort_unstable();
        if want != got {
            let extra: Vec<&&str> = got.iter().filter(|w| !want.contains(w)).collect();
            return Err(format!(
                "unexpected {extra:?} in {line:?} (the operation reads as `{canon}`)"
            ));
        }
        Ok(op)
    }
}

#[cfg(test)]
mod tests;
