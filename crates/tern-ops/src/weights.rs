//! How often each kind of operation is drawn, by name.

macro_rules! weights {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Relative frequencies of the operations a [`crate::Generator`]
        /// draws: each weight over their sum. A zero weight never draws
        /// that operation.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct Weights {
            $($(#[doc = $doc])* pub $name: u32,)*
        }

        impl Weights {
            /// Every weight's name, in drawing order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name),)*];

            /// The weights in [`Weights::NAMES`] order.
            pub fn values(&self) -> Vec<u32> {
                vec![$(self.$name,)*]
            }

            /// Sets one weight by name.
            pub fn set(&mut self, name: &str, value: u32) -> Result<(), String> {
                match name {
                    $(stringify!($name) => self.$name = value,)*
                    _ => {
                        return Err(format!(
                            "unknown operation weight {name:?}; known: {}",
                            Self::NAMES.join(", ")
                        ))
                    }
                }
                Ok(())
            }
        }
    };
}

weights! {
    /// A write of one key.
    put,
    /// A delete of one key.
    delete,
    /// A batch of several puts and deletes (sometimes with a group).
    batch,
    /// A write of one atomic group.
    group_write,
    /// A point read.
    get,
    /// A bounded or full iteration, forwards or backwards.
    scan,
    /// Take a snapshot (or release one, once enough are held).
    snapshot,
    /// A read through a held snapshot.
    snapshot_read,
    /// A read of every member of a group at one snapshot.
    group_check,
    /// A WAL sync.
    sync_wal,
    /// A flush.
    flush,
    /// A range compaction (sometimes of everything).
    compact,
    /// A compaction of everything, then GC: drops overwritten references,
    /// then relocates what is left, so values move along lineage chains.
    compact_all_gc,
    /// Blob garbage collection.
    gc,
    /// A clean close and open.
    reopen,
    /// A simulated power failure and open.
    crash,
}

impl Weights {
    /// Applies `name=value` pairs separated by commas, as `tern stress
    /// --weights` takes them.
    pub fn apply(&mut self, spec: &str) -> Result<(), String> {
        for pair in spec.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("weight {pair:?}: expected NAME=VALUE"))?;
            let value = value
                .trim()
                .parse()
                .map_err(|_| format!("weight {pair:?}: the value is not a whole number"))?;
            self.set(name.trim(), value)?;
        }
        Ok(())
    }

    /// The sum of all weights.
    pub fn total(&self) -> u64 {
        self.values().iter().map(|&w| u64::from(w)).sum()
    }

    /// The single-threaded model test: every kind of operation; a clean
    /// restart about one step in 40, a power failure one in 17.
    pub fn model() -> Weights {
        Weights {
            put: 300,
            delete: 100,
            batch: 70,
            group_write: 10,
            get: 150,
            scan: 100,
            snapshot: 50,
            snapshot_read: 40,
            group_check: 10,
            sync_wal: 10,
            flush: 40,
            compact: 30,
            compact_all_gc: 0,
            gc: 25,
            reopen: 25,
            crash: 60,
        }
    }

    /// The model test with a small key space and everything separated:
    /// frequent compaction and GC so values move through lineage chains.
    pub fn model_gc_heavy() -> Weights {
        Weights {
            compact_all_gc: 40,
            ..Weights::model()
        }
    }

    /// `tern stress --sim`: writes and reads between crashes the harness
    /// places itself (epoch ends are not drawn).
    pub fn sim() -> Weights {
        Weights {
            put: 440,
            delete: 110,
            batch: 150,
            get: 220,
            scan: 50,
            flush: 10,
            compact: 10,
            gc: 10,
            ..Weights::default()
        }
    }

    /// `tern stress`: many threads on one store; no restarts (the crash
    /// loop kills the whole process instead).
    pub fn stress() -> Weights {
        Weights {
            put: 350,
            delete: 100,
            batch: 100,
            group_write: 80,
            get: 170,
            group_check: 60,
            scan: 70,
            snapshot_read: 66,
            flush: 2,
            gc: 1,
            compact: 1,
            ..Weights::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_are_set_by_name_and_unknown_names_are_refused() {
        let mut w = Weights::sim();
        w.apply("put=1, crash=7,").unwrap();
        assert_eq!((w.put, w.crash), (1, 7));
        let err = w.apply("explode=3").unwrap_err();
        assert!(err.contains("known: put, delete"), "{err}");
        assert!(w.apply("put").unwrap_err().contains("NAME=VALUE"));
        assert!(w.apply("put=-1").unwrap_err().contains("whole number"));
    }
}
