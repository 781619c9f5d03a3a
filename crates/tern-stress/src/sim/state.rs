//! What the simulated store must hold: the state recovered at the start of
//! the epoch, the log of writes acknowledged since, and how much of the log
//! is durable.

use tern::{Db, ReadOptions};

use crate::expected::KeyState;
use crate::keys;

/// One acknowledged (or failed) write: the new states of the slots it set.
#[derive(Debug, Clone)]
pub(super) struct LoggedWrite {
    pub(super) states: Vec<(usize, KeyState)>,
}

/// The state the store must match, per slot.
pub(super) struct Sim {
    pub(super) keys: usize,
    /// The recovered state at the start of the current epoch.
    base: Vec<KeyState>,
    /// Writes acknowledged since then, in commit order.
    pub(super) log: Vec<LoggedWrite>,
    /// `log[..durable]` survives any crash.
    pub(super) durable: usize,
    /// The write whose outcome is unknown (it returned an error).
    pub(super) unknown: Option<LoggedWrite>,
    /// `base` with `log` applied: what reads must see now.
    pub(super) live: Vec<KeyState>,
    /// Highest version used per slot (versions never repeat).
    version: Vec<u64>,
}

impl Sim {
    pub(super) fn new(keys: usize) -> Self {
        Sim {
            keys,
            base: vec![KeyState::ABSENT; keys],
            log: Vec::new(),
            durable: 0,
            unknown: None,
            live: vec![KeyState::ABSENT; keys],
            version: vec![0; keys],
        }
    }

    /// Checks the recovered store against the log; on success starts a new
    /// epoch from what it holds. Returns the number of acknowledged writes
    /// that were lost (all of them after the durable point).
    pub(super) fn recover(&mut self, db: &Db) -> Result<u64, String> {
        let got = read_all(db, self.keys)?;
        let mut state = self.base.clone();
        for w in &self.log[..self.durable] {
            for &(s, st) in &w.states {
                state[s] = st;
            }
        }
        let mut bad: usize = (0..self.keys)
            .filter(|&k| !keys::matches(k, state[k], got[k].as_deref()))
            .count();
        let apply = |state: &mut Vec<KeyState>, bad: &mut usize, w: &LoggedWrite| {
            for &(s, st) in &w.states {
                let before = keys::matches(s, state[s], got[s].as_deref());
                state[s] = st;
                let after = keys::matches(s, st, got[s].as_deref());
                match (before, after) {
                    (true, false) => *bad += 1,
                    (false, true) => *bad -= 1,
                    _ => {}
                }
            }
        };
        let mut best = (bad, self.durable);
        let mut found = (bad == 0).then_some(self.durable);
        let mut p = self.durable;
        while found.is_none() && p < self.log.len() {
            apply(&mut state, &mut bad, &self.log[p]);
            p += 1;
            if bad < best.0 {
                best = (bad, p);
            }
            if bad == 0 {
                found = Some(p);
            }
        }
        if found.is_none() {
            if let Some(u) = self.unknown.clone() {
                apply(&mut state, &mut bad, &u);
                if bad == 0 {
                    found = Some(self.log.len());
                }
            }
        }
        let Some(p) = found else {
            // Describe the closest prefix.
            let mut near = self.base.clone();
            for w in &self.log[..best.1] {
                for &(s, st) in &w.states {
                    near[s] = st;
                }
            }
            let diffs: Vec<String> = (0..self.keys)
                .filter(|&k| !keys::matches(k, near[k], got[k].as_deref()))
                .take(5)
                .map(|k| {
                    format!(
                        "k{k:08} reads {}, expected {}",
                        keys::describe(got[k].as_deref()),
                        keys::describe_state(near[k])
                    )
                })
                .collect();
            return Err(format!(
                "recovered state is no prefix of the acknowledged writes \
                 ({} logged, {} durable); closest prefix {} differs in {} keys: {}",
                self.log.len(),
                self.durable,
                best.1,
                best.0,
                diffs.join("; ")
            ));
        };
        let lost = (self.log.len() - p.min(self.log.len())) as u64;
        // `state` is the matched prefix (or the log plus the unknown
        // write): every key matches it.
        self.base = state;
        self.log.clear();
        self.durable = 0;
        self.unknown = None;
        self.live = self.base.clone();
        Ok(lost)
    }

    pub(super) fn next_state(&mut self, k: usize, exists: bool) -> KeyState {
        self.version[k] += 1;
        KeyState::new(self.version[k], exists)
    }
}

/// Reads the plain keys of slots `lower..upper` (key-number order is key
/// order), forwards or backwards; the other slots read as absent.
pub(super) fn read_range(
    db: &Db,
    keys: usize,
    lower: Option<usize>,
    upper: Option<usize>,
    reverse: bool,
) -> Result<Vec<Option<Vec<u8>>>, String> {
    let mut out = vec![None; keys];
    let mut it = db
        .iter(ReadOptions {
            lower_bound: lower.map(keys::plain_key),
            upper_bound: upper.map(keys::plain_key),
            ..ReadOptions::default()
        })
        .map_err(|e| format!("iterator: {e}"))?;
    if reverse {
        it.seek_to_last();
    } else {
        it.seek_to_first();
    }
    while it.valid() {
        match keys::parse_plain_key(it.key()) {
            Some(k) if k < keys => out[k] = Some(it.value().to_vec()),
            _ => {
                return Err(format!(
                    "unexpected key {}",
                    String::from_utf8_lossy(it.key())
                ))
            }
        }
        if reverse {
            it.prev();
        } else {
            it.next();
        }
    }
    it.status().map_err(|e| format!("iterator: {e}"))?;
    Ok(out)
}

/// Reads every slot of the store: plain keys by one scan.
pub(super) fn read_all(db: &Db, keys: usize) -> Result<Vec<Option<Vec<u8>>>, String> {
    read_range(db, keys, None, None, false)
}
