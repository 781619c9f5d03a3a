//! The one random-operation generator the harnesses share.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::op::{Entry, Op, Recovery, ScanBounds, Target};
use crate::weights::Weights;

/// What a run draws: the operation weights plus the shape of each
/// operation. Every field has a named constructor default
/// ([`Profile::model`], [`Profile::sim`], [`Profile::stress`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// How often each operation is drawn.
    pub weights: Weights,
    /// Plain keys: key numbers are `0..keys`.
    pub keys: u32,
    /// Atomic groups: group numbers are `0..groups` (0: none are written).
    pub groups: u32,
    /// Entries in a batch, `min..=max`.
    pub batch_len: (u32, u32),
    /// Chance that a batch entry is a delete.
    pub batch_delete: f64,
    /// Chance that a batch also writes a group.
    pub batch_group: f64,
    /// Chance that a write is synced.
    pub sync: f64,
    /// Chance that a write meets an armed I/O fault ([`Op::Fault`]).
    pub write_fault: f64,
    /// Chance that a WAL sync, flush, compaction or GC meets one.
    pub maintenance_fault: f64,
    /// Fault kinds the executor arms (indices `0..fault_kinds`).
    pub fault_kinds: u8,
    /// Largest `skip` of an armed fault (exclusive).
    pub fault_skip: u32,
    /// Crash modes the executor simulates (indices `0..crash_modes`).
    pub crash_modes: u8,
    /// Snapshots held at most before [`Op::Snapshot`] draws release them.
    pub snapshots: u32,
    /// Chance that an epoch's writes all skip the WAL.
    pub no_wal: f64,
    /// Chance that a reopen flips the level-size mode.
    pub flip_dynamic: f64,
    /// Chance that a compaction covers every key.
    pub compact_all: f64,
    /// Chance that an epoch runs with random I/O faults, and their rate
    /// per million calls ([`Op::Faults`]).
    pub random_faults: (f64, u32),
    /// Chance that random faults leave part of their effect (torn).
    pub torn: f64,
}

impl Profile {
    /// The model test: 400 keys in four shapes, every operation, armed
    /// faults and crashes in every mode.
    pub fn model(fault_kinds: u8, crash_modes: u8) -> Profile {
        Profile {
            weights: Weights::model(),
            keys: 400,
            groups: 8,
            batch_len: (1, 7),
            batch_delete: 0.3,
            batch_group: 0.1,
            sync: 0.2,
            write_fault: 0.02,
            maintenance_fault: 0.1,
            fault_kinds,
            fault_skip: 6,
            crash_modes,
            snapshots: 3,
            no_wal: 0.0,
            flip_dynamic: 0.3,
            compact_all: 0.3,
            random_faults: (0.0, 0),
            torn: 0.0,
        }
    }

    /// `tern stress --sim` on `keys` keys with random faults at `per_million`.
    pub fn sim(keys: u32, per_million: u32, crash_modes: u8) -> Profile {
        Profile {
            weights: Weights::sim(),
            keys,
            groups: 0,
            batch_len: (2, 7),
            batch_delete: 0.2,
            batch_group: 0.0,
            sync: 0.02,
            write_fault: 0.0,
            maintenance_fault: 0.0,
            fault_kinds: 0,
            fault_skip: 1,
            crash_modes,
            snapshots: 0,
            no_wal: 0.1,
            flip_dynamic: 0.0,
            compact_all: 0.0,
            random_faults: (0.7, per_million),
            torn: 1.0,
        }
    }

    /// `tern stress` on `keys` keys and `groups` groups.
    pub fn stress(keys: u32, groups: u32) -> Profile {
        Profile {
            weights: Weights::stress(),
            keys,
            groups,
            batch_len: (2, 8),
            batch_delete: 0.2,
            batch_group: if groups > 0 { 0.3 } else { 0.0 },
            sync: 0.0,
            write_fault: 0.0,
            maintenance_fault: 0.0,
            fault_kinds: 0,
            fault_skip: 1,
            crash_modes: 0,
            snapshots: 0,
            no_wal: 0.0,
            flip_dynamic: 0.0,
            compact_all: 0.0,
            random_faults: (0.0, 0),
            torn: 0.0,
        }
    }
}

/// Draws operations from a [`Profile`] with a seeded generator: the same
/// seed and profile give the same stream.
pub struct Generator {
    profile: Profile,
    rng: StdRng,
    /// Cumulative weights in [`Weights::NAMES`] order.
    cumulative: Vec<u64>,
    /// Snapshots the executor holds, as far as the stream tells.
    held: u32,
}

impl Generator {
    /// A generator of `profile` seeded with `seed`.
    pub fn new(mut profile: Profile, seed: u64) -> Generator {
        if profile.groups == 0 {
            // No groups to write or check: those draws go to the others.
            profile.weights.group_write = 0;
            profile.weights.group_check = 0;
        }
        let mut sum = 0;
        let cumulative = profile
            .weights
            .values()
            .iter()
            .map(|&w| {
                sum += u64::from(w);
                sum
            })
            .collect();
        Generator {
            profile,
            rng: StdRng::seed_from_u64(seed),
            cumulative,
            held: 0,
        }
    }

    /// Draws one operation (preceded by the [`Op::Fault`] it meets, and
    /// followed by what starts the next epoch when it ends one) and appends
    /// it to `out`. Nothing is drawn when every weight is zero.
    pub fn next_into(&mut self, out: &mut Vec<Op>) {
        let Some(&total) = self.cumulative.last() else {
            return;
        };
        if total == 0 {
            return;
        }
        let r = self.rng.gen_range(0..total);
        let which = self.cumulative.partition_point(|&c| c <= r);
        let name = Weights::NAMES.get(which).copied().unwrap_or("get");
        self.draw(name, out);
    }

    /// The next `n` operations (more than `n` when faults or epoch starts
    /// come with them).
    pub fn take(&mut self, n: usize) -> Vec<Op> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let before = out.len();
            self.next_into(&mut out);
            if out.len() == before {
                break;
            }
        }
        out
    }

    fn key(&mut self) -> u32 {
        self.rng.gen_range(0..self.profile.keys.max(1))
    }

    fn bound(&mut self) -> Option<u32> {
        self.rng.gen_bool(0.4).then(|| self.key())
    }

    fn scan_bounds(&mut self) -> ScanBounds {
        let (lower, upper) = (self.bound(), self.bound());
        ScanBounds {
            lower,
            upper,
            reverse: self.rng.gen_bool(0.5),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p.min(1.0))
    }

    fn draw(&mut self, name: &str, out: &mut Vec<Op>) {
        let p = self.profile;
        match name {
            "put" | "delete" => {
                let target = Target::Key(self.key());
                let sync = self.chance(p.sync);
                self.write(
                    vec![Entry {
                        target,
                        put: name == "put",
                    }],
                    sync,
                    out,
                );
            }
            "batch" => {
                let n = self
                    .rng
                    .gen_range(p.batch_len.0..=p.batch_len.1.max(p.batch_len.0));
                let mut entries: Vec<Entry> = (0..n)
                    .map(|_| Entry {
                        target: Target::Key(self.key()),
                        put: !self.chance(p.batch_delete),
                    })
                    .collect();
                if p.groups > 0 && self.chance(p.batch_group) {
                    entries.push(Entry {
                        target: Target::Group(self.rng.gen_range(0..p.groups)),
                        put: !self.chance(p.batch_delete),
                    });
                }
                let sync = self.chance(p.sync);
                self.write(entries, sync, out);
            }
            "group_write" => {
                let target = Target::Group(self.rng.gen_range(0..p.groups));
                let put = !self.chance(0.15);
                let sync = self.chance(p.sync);
                self.write(vec![Entry { target, put }], sync, out);
            }
            "get" => out.push(Op::Get { key: self.key() }),
            "scan" => {
                let bounds = self.scan_bounds();
                out.push(Op::Scan { bounds });
            }
            "snapshot" => {
                if self.held < p.snapshots.max(1) {
                    self.held += 1;
                    out.push(Op::Snapshot);
                } else {
                    let index = self.rng.gen_range(0..self.held);
                    self.held -= 1;
                    out.push(Op::Release { index });
                }
            }
            "snapshot_read" => {
                let index = self.rng.gen_range(0..p.snapshots.max(1));
                let key = self.key();
                let bounds = self.scan_bounds();
                out.push(Op::SnapshotRead { index, key, bounds });
            }
            "group_check" => out.push(Op::GroupCheck {
                group: self.rng.gen_range(0..p.groups),
            }),
            "sync_wal" => self.maintenance(Op::SyncWal, out),
            "flush" => self.maintenance(Op::Flush, out),
            "compact" => {
                let range = if self.chance(p.compact_all) {
                    None
                } else {
                    let (a, b) = (self.key(), self.key());
                    Some((a.min(b), a.max(b)))
                };
                self.maintenance(Op::Compact { range }, out);
            }
            "compact_all_gc" => {
                out.push(Op::Compact { range: None });
                out.push(Op::Gc);
            }
            "gc" => self.maintenance(Op::Gc, out),
            "reopen" => {
                let op = self.epoch_end(true);
                out.push(op);
                out.extend(self.epoch_start());
            }
            "crash" => {
                let op = self.epoch_end(false);
                out.push(op);
                out.extend(self.epoch_start());
            }
            // Every name in `Weights::NAMES` has an arm above (a test
            // draws each); reads are the harmless answer to anything else.
            _ => out.push(Op::Get { key: self.key() }),
        }
    }

    fn write(&mut self, entries: Vec<Entry>, sync: bool, out: &mut Vec<Op>) {
        let chance = self.profile.write_fault;
        self.maybe_fault(chance, out);
        out.push(Op::Write { entries, sync });
    }

    fn maintenance(&mut self, op: Op, out: &mut Vec<Op>) {
        let chance = self.profile.maintenance_fault;
        self.maybe_fault(chance, out);
        out.push(op);
    }

    fn maybe_fault(&mut self, chance: f64, out: &mut Vec<Op>) {
        if self.profile.fault_kinds == 0 || !self.chance(chance) {
            return;
        }
        let kind = self.rng.gen_range(0..self.profile.fault_kinds);
        let skip = self.rng.gen_range(0..self.profile.fault_skip.max(1));
        let then = if self.profile.crash_modes > 0 && self.rng.gen_bool(0.5) {
            Recovery::Crash {
                mode: self.rng.gen_range(0..self.profile.crash_modes),
                seed: self.rng.gen(),
            }
        } else {
            Recovery::Restart
        };
        // A failed operation may restart the store, dropping its snapshots.
        self.held = 0;
        out.push(Op::Fault { kind, skip, then });
    }

    /// Whether an epoch skips the WAL, at the profile's `no_wal` chance
    /// (drawn for each epoch that follows an end, and by a harness for its
    /// first epoch).
    pub fn draw_no_wal(&mut self) -> bool {
        self.chance(self.profile.no_wal)
    }

    /// The operation that ends an epoch: a clean reopen when `clean` (or
    /// when the profile simulates no crash modes), else a crash.
    pub fn epoch_end(&mut self, clean: bool) -> Op {
        self.held = 0;
        let no_wal = self.draw_no_wal();
        if clean || self.profile.crash_modes == 0 {
            Op::Reopen {
                no_wal,
                flip_dynamic: self.chance(self.profile.flip_dynamic),
            }
        } else {
            Op::Crash {
                mode: self.rng.gen_range(0..self.profile.crash_modes),
                seed: self.rng.gen(),
                no_wal,
            }
        }
    }

    /// What starts an epoch: random I/O faults, in the profile's share of
    /// epochs.
    pub fn epoch_start(&mut self) -> Option<Op> {
        let (chance, per_million) = self.profile.random_faults;
        if per_million == 0 || !self.chance(chance) {
            return None;
        }
        let seed = self.rng.gen();
        Some(Op::Faults {
            seed,
            per_million,
            torn: self.chance(self.profile.torn),
        })
    }

    /// A value in `0..n` from the stream's generator, for choices the
    /// harness makes between operations (e.g. whether a cycle closes
    /// cleanly).
    pub fn below(&mut self, n: u32) -> u32 {
        self.rng.gen_range(0..n.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_zero_weights_never_drawn() {
        let mut p = Profile::model(5, 5);
        p.weights.crash = 0;
        p.weights.gc = 0;
        let a = Generator::new(p, 7).take(3000);
        let b = Generator::new(p, 7).take(3000);
        assert_eq!(a, b);
        assert!(!a.iter().any(|op| matches!(op, Op::Crash { .. } | Op::Gc)));
        let names: std::collections::BTreeSet<&str> = a.iter().map(|o| o.name()).collect();
        for want in [
            "write",
            "get",
            "scan",
            "snapshot",
            "release",
            "snapshot-read",
        ] {
            assert!(names.contains(want), "{want} never drawn: {names:?}");
        }
        assert!(
            names.contains("fault") && names.contains("reopen"),
            "{names:?}"
        );
        let c = Generator::new(p, 8).take(3000);
        assert_ne!(a, c);
    }

    #[test]
    fn draws_follow_the_weights() {
        let mut p = Profile::sim(100, 0, 5);
        p.weights = Weights {
            put: 3,
            get: 1,
            ..Weights::default()
        };
        let ops = Generator::new(p, 1).take(8000);
        let writes = ops.iter().filter(|o| o.name() == "write").count();
        assert!((5600..6400).contains(&writes), "{writes} writes of 8000");
        assert!(ops.iter().all(|o| match o {
            Op::Write { entries, .. } => entries.iter().all(|e| match e.target {
                Target::Key(k) => k < 100,
                Target::Group(_) => false,
            }),
            Op::Get { key } => *key < 100,
            _ => false,
        }));
    }

    #[test]
    fn all_zero_weights_draw_nothing() {
        let mut p = Profile::stress(10, 0);
        p.weights = Weights::default();
        assert!(Generator::new(p, 1).take(10).is_empty());
    }

    #[test]
    fn every_weight_name_draws_its_own_operation() {
        for name in Weights::NAMES {
            let mut p = Profile::model(5, 5);
            p.weights = Weights::default();
            p.weights.set(name, 1).unwrap();
            p.sync = 0.0;
            let ops = Generator::new(p, 3).take(20);
            let gets = ops.iter().filter(|o| matches!(o, Op::Get { .. })).count();
            if *name == "get" {
                assert_eq!(gets, ops.len());
            } else {
                assert_eq!(gets, 0, "{name} fell through to reads: {ops:?}");
            }
        }
    }

    #[test]
    fn without_groups_no_group_operation_is_drawn() {
        let mut p = Profile::stress(10, 0);
        p.weights = Weights {
            group_write: 5,
            group_check: 5,
            put: 1,
            ..Weights::default()
        };
        let ops = Generator::new(p, 2).take(500);
        assert!(!ops.is_empty());
        assert!(ops.iter().all(|o| matches!(o, Op::Write { entries, .. }
            if entries.iter().all(|e| matches!(e.target, Target::Key(_))))));
    }
}
