//! An in-memory [`FileSystem`] that can simulate power loss.
//!
//! Every file is a node holding its current bytes and the bytes as of its
//! last successful `sync`. Two namespaces map paths to nodes: the live one
//! that operations see, and the durable one that only [`FileSystem::sync_dir`]
//! updates (for the entries directly in that directory). [`MemFs::crash`]
//! throws away everything that was not made durable, following the contract
//! in [`super`].
//!
//! A crash can also keep part of what was never synced, as a real page
//! cache does ([`CrashMode`]): a random prefix of each file's unsynced
//! bytes, or its unsynced pages independently and out of order (a page
//! written back after a later one was lost reads as zeros).
//!
//! Directory entries can survive a crash without a directory sync too:
//! [`CrashMode::UnsyncedEntries`] replays a random subset of the creates,
//! renames and removes made since the last sync, in order. POSIX promises
//! nothing about unsynced entries, so any subset may reach the disk; only
//! a rename stays atomic (the target names the old file or the new one).
//!
//! A directory made by `create_dir_all` is durable once its parent is
//! synced; a crash before that loses it with everything in it.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{splitmix64, FileLock, FileSync, FileSystem, RandomAccessFile, WritableFile};
pub use crash::CrashMode;
use crash::{surviving_dirs, surviving_files};
use files::{MemLock, MemRandom, MemWritable};

mod crash;
mod files;
mod mapped;

#[derive(Default)]
struct NodeData {
    data: Vec<u8>,
    synced: Vec<u8>,
    /// False while `synced` is a prefix of `data`, so `sync` only copies the
    /// new tail instead of the whole file.
    diverged: bool,
}

impl NodeData {
    fn sync(&mut self) {
        if !self.diverged && self.synced.len() <= self.data.len() {
            let start = self.synced.len();
            self.synced.extend_from_slice(&self.data[start..]);
        } else {
            self.synced.clone_from(&self.data);
            self.diverged = false;
        }
    }
}

type Node = Arc<Mutex<NodeData>>;

fn new_node() -> Node {
    Arc::new(Mutex::new(NodeData::default()))
}

/// A change to the namespace not yet made durable by a directory sync.
enum DirOp {
    Link(PathBuf, Node),
    Unlink(PathBuf),
    Rename { from: PathBuf, to: PathBuf },
}

impl DirOp {
    fn touches(&self, dir: &Path) -> bool {
        match self {
            DirOp::Link(p, _) | DirOp::Unlink(p) => in_dir(p, dir),
            DirOp::Rename { from, to } => in_dir(from, dir) || in_dir(to, dir),
        }
    }

    fn apply(&self, namespace: &mut HashMap<PathBuf, Node>) {
        match self {
            DirOp::Link(p, node) => {
                namespace.insert(p.clone(), node.clone());
            }
            DirOp::Unlink(p) => {
                namespace.remove(p);
            }
            DirOp::Rename { from, to } => {
                if let Some(node) = namespace.remove(from) {
                    namespace.insert(to.clone(), node);
                }
            }
        }
    }
}

#[derive(Default)]
struct State {
    live: HashMap<PathBuf, Node>,
    durable: HashMap<PathBuf, Node>,
    /// Namespace changes since the directory they touch was last synced,
    /// oldest first: `durable` with all of them applied is `live`.
    pending: Vec<DirOp>,
    dirs: HashSet<PathBuf>,
    /// Directories whose entry in their parent was synced.
    durable_dirs: HashSet<PathBuf>,
    /// Held locks: path → id of the guard that holds it.
    locks: HashMap<PathBuf, u64>,
}

impl State {
    fn dir_exists(&self, dir: &Path) -> bool {
        is_root(dir) || self.dirs.contains(dir)
    }

    /// Whether `path` and every directory above it survive a crash.
    fn durable_path(&self, path: &Path) -> bool {
        path.ancestors()
            .skip(1)
            .all(|d| is_root(d) || self.durable_dirs.contains(d))
    }

    fn check_parent(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(parent) if !self.dir_exists(parent) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("parent directory of {} does not exist", path.display()),
            )),
            _ => Ok(()),
        }
    }

    /// The file at `path`, made (its entry not durable until the directory
    /// is synced) if missing, and whether it existed.
    fn open_for_write(&mut self, path: &Path) -> io::Result<(Node, bool)> {
        self.check_parent(path)?;
        if self.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is a directory", path.display()),
            ));
        }
        if let Some(node) = self.live.get(path) {
            return Ok((node.clone(), true));
        }
        let node = new_node();
        self.live.insert(path.to_path_buf(), node.clone());
        self.pending
            .push(DirOp::Link(path.to_path_buf(), node.clone()));
        Ok((node, false))
    }

    fn node(&self, path: &Path) -> io::Result<&Node> {
        self.live.get(path).ok_or_else(|| not_found(path))
    }
}

fn is_root(dir: &Path) -> bool {
    dir.as_os_str().is_empty() || dir.parent().is_none()
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} does not exist", path.display()),
    )
}

fn in_dir(path: &Path, dir: &Path) -> bool {
    path.parent() == Some(dir)
}

/// In-memory files with crash simulation, for tests.
pub struct MemFs {
    state: Arc<Mutex<State>>,
    next_lock_id: AtomicU64,
    /// Random-access handles not yet dropped (what descriptors would be).
    open_readers: Arc<AtomicU64>,
}

impl Default for MemFs {
    fn default() -> Self {
        MemFs {
            state: Arc::new(Mutex::new(State::default())),
            next_lock_id: AtomicU64::new(1),
            open_readers: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl fmt::Debug for MemFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("MemFs")
            .field("files", &state.live.len())
            .field("dirs", &state.dirs.len())
            .finish()
    }
}

impl MemFs {
    /// An empty shared file system.
    pub fn new() -> Arc<MemFs> {
        Arc::new(MemFs::default())
    }

    /// Random-access handles opened and not yet dropped: the descriptors a
    /// real file system would hold for readers.
    pub fn open_readers(&self) -> u64 {
        self.open_readers.load(Ordering::Relaxed)
    }

    /// Simulates power loss: the namespace reverts to its durable entries,
    /// every file to its last synced bytes (never synced: empty), and all
    /// locks are released. Handles opened before the crash keep pointing at
    /// the old nodes, so their writes and syncs no longer reach any file.
    pub fn crash(&self) {
        let mut state = self.state.lock();
        let durable = surviving_files(&state, CrashMode::SyncedOnly, 0);
        state.live = durable.clone();
        state.durable = durable;
        state.dirs = surviving_dirs(&state, CrashMode::SyncedOnly);
        state.durable_dirs = state.dirs.clone();
        state.pending.clear();
        state.locks.clear();
    }

    /// A new, independent file system holding what would survive a crash now.
    /// Unlike [`MemFs::crash`] this leaves `self` untouched, so code still
    /// running against the old one cannot disturb the copy at all.
    pub fn crashed_copy(&self) -> Arc<MemFs> {
        self.crashed_copy_with(CrashMode::SyncedOnly, 0)
    }

    /// A new, independent file system holding what survives a crash now in
    /// `mode`, with the random choices drawn from `seed`. Like
    /// [`MemFs::crashed_copy`] (which is `CrashMode::SyncedOnly`), `self` is
    /// left untouched.
    pub fn crashed_copy_with(&self, mode: CrashMode, seed: u64) -> Arc<MemFs> {
        let state = self.state.lock();
        let files = surviving_files(&state, mode, seed);
        let copy = MemFs::default();
        {
            let mut new_state = copy.state.lock();
            new_state.live = files.clone();
            new_state.durable = files;
            new_state.dirs = surviving_dirs(&state, mode);
            new_state.durable_dirs = new_state.dirs.clone();
        }
        Arc::new(copy)
    }

    /// Overwrites `len` bytes of `path` from `offset` with zeros, in both the
    /// current and the synced contents (a lost page, not an unsynced write).
    pub fn zero_range(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        self.damage(path, offset, len, |b| b.fill(0))
    }

    /// XORs the byte at `offset` of `path` with `xor`, in both the current
    /// and the synced contents (a damaged disk, not an unsynced write).
    pub fn corrupt_byte(&self, path: &Path, offset: u64, xor: u8) -> io::Result<()> {
        self.damage(path, offset, 1, |b| b[0] ^= xor)
    }

    /// Replaces the contents of `path` with what `f` makes of them, as
    /// they stand on disk (current and synced alike): a file damaged or
    /// hand-crafted by a test, which a crash does not undo.
    pub fn rewrite(&self, path: &Path, f: impl FnOnce(&mut Vec<u8>)) -> io::Result<()> {
        let state = self.state.lock();
        let mut node = state.node(path)?.lock();
        f(&mut node.data);
        node.synced = node.data.clone();
        Ok(())
    }

    /// Applies `f` to `len` bytes of `path` from `offset`, in the current
    /// contents and in whatever part of them is synced: damage on the disk,
    /// which a crash does not undo.
    fn damage(&self, path: &Path, offset: u64, len: u64, f: impl Fn(&mut [u8])) -> io::Result<()> {
        let state = self.state.lock();
        let mut node = state.node(path)?.lock();
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        let end = usize::try_from(offset.saturating_add(len)).unwrap_or(usize::MAX);
        if end > node.data.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("range {offset}+{len} is past the end of {}", path.display()),
            ));
        }
        f(&mut node.data[start..end]);
        let synced_end = end.min(node.synced.len());
        if start < synced_end {
            f(&mut node.synced[start..synced_end]);
        }
        Ok(())
    }

    /// Cuts `path` to at most `len` bytes, in both the current and the synced
    /// contents (a torn tail left on disk).
    pub fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let state = self.state.lock();
        let mut node = state.node(path)?.lock();
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        node.data.truncate(len);
        node.synced.truncate(len);
        Ok(())
    }

    /// Paths of all files, sorted.
    pub fn file_names(&self) -> Vec<PathBuf> {
        let state = self.state.lock();
        let mut names: Vec<PathBuf> = state.live.keys().cloned().collect();
        names.sort();
        names
    }
}

impl FileSystem for MemFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        for dir in path.ancestors() {
            if is_root(dir) {
                break;
            }
            if state.live.contains_key(dir) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} is a file", dir.display()),
                ));
            }
            state.dirs.insert(dir.to_path_buf());
        }
        Ok(())
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let (node, existed) = self.state.lock().open_for_write(path)?;
        if existed {
            // O_TRUNC on an existing file: same node, the cut is not durable
            // until the next sync.
            let mut data = node.lock();
            data.data.clear();
            data.diverged = true;
        }
        Ok(Box::new(MemWritable { node, len: 0 }))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let state = self.state.lock();
        let node = state.node(path)?.clone();
        let len = node.lock().data.len() as u64;
        self.open_readers.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(MemRandom {
            node,
            len,
            open_readers: self.open_readers.clone(),
        }))
    }

    fn map_file(&self, path: &Path, len: u64) -> io::Result<Arc<dyn super::MappedFile>> {
        mapped::MemMapped::open(self, path, len).map(|m| Arc::new(m) as Arc<dyn super::MappedFile>)
    }

    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = self.state.lock();
        let data = state.node(path)?.lock().data.clone();
        Ok(data)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        if state.dirs.contains(from) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("renaming directory {} is not supported", from.display()),
            ));
        }
        state.node(from)?;
        state.check_parent(to)?;
        if state.dirs.contains(to) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is a directory", to.display()),
            ));
        }
        if let Some(node) = state.live.remove(from) {
            state.live.insert(to.to_path_buf(), node);
            state.pending.push(DirOp::Rename {
                from: from.to_path_buf(),
                to: to.to_path_buf(),
            });
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        state.live.remove(path).ok_or_else(|| not_found(path))?;
        state.pending.push(DirOp::Unlink(path.to_path_buf()));
        Ok(())
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let state = self.state.lock();
        if !state.dir_exists(path) {
            return Err(not_found(path));
        }
        let names = state
            .live
            .keys()
            .chain(state.dirs.iter())
            .filter(|p| in_dir(p, path))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        let state = self.state.lock();
        state.live.contains_key(path) || state.dir_exists(path)
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        let state = self.state.lock();
        let len = state.node(path)?.lock().data.len() as u64;
        Ok(len)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state.lock();
        if !state.dir_exists(path) {
            return Err(not_found(path));
        }
        let State {
            live,
            durable,
            pending,
            dirs: state_dirs,
            durable_dirs,
            ..
        } = &mut *state;
        pending.retain(|op| !op.touches(path));
        durable.retain(|p, _| !in_dir(p, path));
        for d in state_dirs.iter() {
            if in_dir(d, path) {
                durable_dirs.insert(d.clone());
            }
        }
        for (p, node) in live.iter() {
            if in_dir(p, path) {
                durable.insert(p.clone(), node.clone());
            }
        }
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let mut state = self.state.lock();
        if state.locks.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is already locked", path.display()),
            ));
        }
        if !state.live.contains_key(path) {
            state.check_parent(path)?;
            let node = new_node();
            state.live.insert(path.to_path_buf(), node.clone());
            state.pending.push(DirOp::Link(path.to_path_buf(), node));
        }
        let id = self.next_lock_id.fetch_add(1, Ordering::Relaxed);
        state.locks.insert(path.to_path_buf(), id);
        Ok(Box::new(MemLock {
            state: self.state.clone(),
            path: path.to_path_buf(),
            id,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
