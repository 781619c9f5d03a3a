//! What a simulated crash keeps: the modes, and the surviving bytes,
//! directories and files they select.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use super::*;

/// What survives of unsynced data in a simulated crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Exactly the synced bytes and directory entries (the harshest loss).
    SyncedOnly,
    /// Everything written, as after a process crash with the OS still up.
    KeepAll,
    /// Durable directory entries; each file keeps its synced bytes plus a
    /// random prefix of the bytes written after them.
    UnsyncedPrefix,
    /// Durable directory entries; each unsynced page (4 KiB, aligned in the
    /// file) of each file survives or not independently. The file ends
    /// after its last surviving page; lost pages before it read as zeros.
    UnsyncedPages,
    /// The durable directory entries plus a random subset of the creates,
    /// renames and removes made since, applied in the order they were made
    /// (a rename whose source is not there does nothing); each file keeps
    /// its synced bytes plus a random prefix of the rest. A file whose name
    /// was never synced may be there (possibly empty), one removed may come
    /// back, and a later change may survive an earlier one that did not.
    UnsyncedEntries,
}

impl CrashMode {
    /// Every mode.
    pub const ALL: [CrashMode; 5] = [
        CrashMode::SyncedOnly,
        CrashMode::KeepAll,
        CrashMode::UnsyncedPrefix,
        CrashMode::UnsyncedPages,
        CrashMode::UnsyncedEntries,
    ];
}

/// Page size for [`CrashMode::UnsyncedPages`].
pub(super) const PAGE: usize = 4096;

/// The bytes of `node` that survive a crash in `mode`.
pub(super) fn surviving_bytes(node: &NodeData, mode: CrashMode, rng: &mut u64) -> Vec<u8> {
    let extra_from = node.synced.len();
    // A file cut by O_TRUNC and not synced since: only the synced bytes.
    let appended = !node.diverged && node.data.len() > extra_from;
    match mode {
        CrashMode::KeepAll => node.data.clone(),
        CrashMode::SyncedOnly => node.synced.clone(),
        _ if !appended => node.synced.clone(),
        CrashMode::UnsyncedPrefix | CrashMode::UnsyncedEntries => {
            let extra = node.data.len() - extra_from;
            let keep = (splitmix64(rng) % (extra as u64 + 1)) as usize;
            node.data[..extra_from + keep].to_vec()
        }
        CrashMode::UnsyncedPages => {
            let mut out = node.synced.clone();
            let mut end = extra_from;
            let mut page_start = extra_from - extra_from % PAGE;
            while page_start < node.data.len() {
                let page_end = (page_start + PAGE).min(node.data.len());
                let from = page_start.max(extra_from);
                if splitmix64(rng) % 2 == 0 {
                    out.resize(from, 0);
                    out.extend_from_slice(&node.data[from..page_end]);
                    end = page_end;
                }
                page_start = page_end;
            }
            out.truncate(end);
            out
        }
    }
}

/// The directories that survive a crash in `mode`: all of them after a
/// process crash, else those whose entries up to the root were synced.
pub(super) fn surviving_dirs(state: &State, mode: CrashMode) -> HashSet<PathBuf> {
    state
        .dirs
        .iter()
        .filter(|d| {
            mode == CrashMode::KeepAll || (state.durable_dirs.contains(*d) && state.durable_path(d))
        })
        .cloned()
        .collect()
}

/// Fresh nodes holding what of each file survives a crash in `mode` (the
/// random choices drawn from `seed`): the durable entries, or every live one
/// for [`CrashMode::KeepAll`]. A node reachable under two paths stays shared,
/// like a hard link.
pub(super) fn surviving_files(state: &State, mode: CrashMode, seed: u64) -> HashMap<PathBuf, Node> {
    let mut rng = seed;
    let replayed;
    let namespace = match mode {
        CrashMode::KeepAll => &state.live,
        CrashMode::UnsyncedEntries => {
            let mut ns = state.durable.clone();
            for op in &state.pending {
                if splitmix64(&mut rng) % 2 == 0 {
                    op.apply(&mut ns);
                }
            }
            replayed = ns;
            &replayed
        }
        _ => &state.durable,
    };
    // Sorted, so the same seed gives the same outcome. A file in a
    // directory that is lost goes with it.
    let mut paths: Vec<&PathBuf> = namespace
        .keys()
        .filter(|p| mode == CrashMode::KeepAll || state.durable_path(p))
        .collect();
    paths.sort();
    let mut fresh: HashMap<*const Mutex<NodeData>, Node> = HashMap::new();
    let mut out = HashMap::with_capacity(paths.len());
    for path in paths {
        let node = &namespace[path];
        let copy = fresh
            .entry(Arc::as_ptr(node))
            .or_insert_with(|| {
                let data = surviving_bytes(&node.lock(), mode, &mut rng);
                Arc::new(Mutex::new(NodeData {
                    synced: data.clone(),
                    data,
                    diverged: false,
                }))
            })
            .clone();
        out.insert(path.clone(), copy);
    }
    out
}
