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

use super::{splitmix64, FileLock, FileSystem, RandomAccessFile, WritableFile};

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
const PAGE: usize = 4096;

/// The bytes of `node` that survive a crash in `mode`.
fn surviving_bytes(node: &NodeData, mode: CrashMode, rng: &mut u64) -> Vec<u8> {
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

/// The directories that survive a crash in `mode`: all of them after a
/// process crash, else those whose entries up to the root were synced.
fn surviving_dirs(state: &State, mode: CrashMode) -> HashSet<PathBuf> {
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
fn surviving_files(state: &State, mode: CrashMode, seed: u64) -> HashMap<PathBuf, Node> {
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

struct MemWritable {
    node: Node,
    len: u64,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.node.lock().data.extend_from_slice(data);
        self.len += data.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.node.lock().sync();
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

struct MemRandom {
    node: Node,
    len: u64,
    open_readers: Arc<AtomicU64>,
}

impl Drop for MemRandom {
    fn drop(&mut self) {
        self.open_readers.fetch_sub(1, Ordering::Relaxed);
    }
}

fn eof(offset: u64, n: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("read of {n} bytes at {offset} is past the end of the file"),
    )
}

impl RandomAccessFile for MemRandom {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&end| end <= self.len)
            .ok_or_else(|| eof(offset, buf.len()))?;
        let node = self.node.lock();
        // The file may have been truncated since it was opened.
        let (start, end) = (offset as usize, end as usize);
        let src = node
            .data
            .get(start..end)
            .ok_or_else(|| eof(offset, buf.len()))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

struct MemLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
    id: u64,
}

impl FileLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut state = self.state.lock();
        // After a crash the lock may already belong to someone else.
        if state.locks.get(&self.path) == Some(&self.id) {
            state.locks.remove(&self.path);
        }
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
        let mut state = self.state.lock();
        state.check_parent(path)?;
        if state.dirs.contains(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is a directory", path.display()),
            ));
        }
        let node = match state.live.get(path) {
            // O_TRUNC on an existing file: same node, the cut is not durable
            // until the next sync.
            Some(node) => {
                let mut data = node.lock();
                data.data.clear();
                data.diverged = true;
                node.clone()
            }
            None => {
                let node = new_node();
                state.live.insert(path.to_path_buf(), node.clone());
                state
                    .pending
                    .push(DirOp::Link(path.to_path_buf(), node.clone()));
                node
            }
        };
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
mod tests {
    use super::*;

    fn p(s: &str) -> &Path {
        Path::new(s)
    }

    fn setup() -> Arc<MemFs> {
        let fs = MemFs::new();
        fs.create_dir_all(p("db")).unwrap();
        fs.sync_dir(p("")).unwrap();
        fs
    }

    fn write(fs: &MemFs, path: &str, data: &[u8], sync: bool) -> Box<dyn WritableFile> {
        let mut f = fs.create(p(path)).unwrap();
        f.append(data).unwrap();
        f.flush().unwrap();
        if sync {
            f.sync().unwrap();
        }
        f
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn crash_modes_keep_what_they_promise() {
        let synced: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8 + 1).collect();
        let unsynced: Vec<u8> = (0..20000u32).map(|i| (i % 241) as u8 + 1).collect();
        let fs = setup();
        let mut f = write(&fs, "db/a", &synced, true);
        fs.sync_dir(p("db")).unwrap();
        f.append(&unsynced).unwrap();
        let _g = write(&fs, "db/not-in-dir", b"x", true);
        let all: Vec<u8> = [synced.clone(), unsynced.clone()].concat();
        let mut saw_hole = false;
        let mut saw_partial = false;
        for seed in 0..64 {
            for mode in CrashMode::ALL {
                let c = fs.crashed_copy_with(mode, seed);
                let got = c.read_all(p("db/a")).unwrap();
                assert!(got.len() >= synced.len() && got.len() <= all.len());
                assert_eq!(
                    got[..synced.len()],
                    synced[..],
                    "{mode:?}: synced bytes kept"
                );
                if mode != CrashMode::UnsyncedEntries {
                    assert_eq!(
                        c.exists(p("db/not-in-dir")),
                        mode == CrashMode::KeepAll,
                        "{mode:?}: unsynced directory entry"
                    );
                }
                match mode {
                    CrashMode::SyncedOnly => assert_eq!(got, synced),
                    CrashMode::KeepAll => assert_eq!(got, all),
                    CrashMode::UnsyncedPrefix | CrashMode::UnsyncedEntries => {
                        assert_eq!(got[..], all[..got.len()])
                    }
                    CrashMode::UnsyncedPages => {
                        for (i, (&b, &want)) in got.iter().zip(&all).enumerate() {
                            assert!(b == want || b == 0, "byte {i}");
                        }
                        saw_hole |= got.contains(&0);
                        saw_partial |= got.len() > synced.len() && got.len() < all.len();
                        // Whole pages survive or not.
                        assert!(
                            got.len() == all.len()
                                || got.len() % PAGE == 0
                                || got.len() == synced.len()
                        );
                    }
                }
            }
        }
        assert!(saw_hole && saw_partial, "out-of-order pages were simulated");
    }

    #[test]
    fn unsynced_entries_survive_as_any_subset() {
        let fs = setup();
        let _d = write(&fs, "db/d", b"d", true);
        fs.sync_dir(p("db")).unwrap();
        let _a = write(&fs, "db/a", b"a", true);
        fs.rename(p("db/a"), p("db/b")).unwrap();
        let _c = write(&fs, "db/c", b"c", true);
        fs.remove_file(p("db/d")).unwrap();
        // Create a, rename a -> b, create c, remove d: any subset, except
        // that the rename needs the create before it (a, b or neither).
        let mut outcomes = Vec::new();
        for first in [None, Some("a"), Some("b")] {
            for c in [false, true] {
                for d in [false, true] {
                    let mut names: Vec<String> = first.iter().map(|s| s.to_string()).collect();
                    names.extend(c.then(|| "c".to_string()));
                    names.extend(d.then(|| "d".to_string()));
                    outcomes.push(names);
                }
            }
        }
        let mut seen = vec![false; outcomes.len()];
        for seed in 0..400 {
            let c = fs.crashed_copy_with(CrashMode::UnsyncedEntries, seed);
            let names = sorted(c.list_dir(p("db")).unwrap());
            let i = outcomes
                .iter()
                .position(|want| names == *want)
                .unwrap_or_else(|| panic!("seed {seed}: {names:?} is no subset of the operations"));
            seen[i] = true;
            if names.contains(&"b".to_string()) {
                assert_eq!(
                    c.read_all(p("db/b")).unwrap(),
                    b"a",
                    "renamed file keeps its node"
                );
            }
        }
        assert!(seen.iter().all(|&s| s), "every outcome occurs: {seen:?}");
        // A directory sync makes them all durable.
        fs.sync_dir(p("db")).unwrap();
        let c = fs.crashed_copy_with(CrashMode::UnsyncedEntries, 7);
        assert_eq!(sorted(c.list_dir(p("db")).unwrap()), ["b", "c"]);
    }

    #[test]
    fn crash_drops_unsynced_bytes() {
        let fs = setup();
        let mut f = write(&fs, "db/a", b"hello", true);
        fs.sync_dir(p("db")).unwrap();
        f.append(b" world").unwrap();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"hello world");
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"hello");
        assert_eq!(fs.file_size(p("db/a")).unwrap(), 5);
    }

    #[test]
    fn never_synced_file_is_empty_after_crash() {
        let fs = setup();
        let _f = write(&fs, "db/a", b"data", false);
        fs.sync_dir(p("db")).unwrap();
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"");
    }

    #[test]
    fn synced_data_and_entry_survive() {
        let fs = setup();
        let mut f = write(&fs, "db/a", b"one", true);
        f.append(b"two").unwrap();
        f.sync().unwrap();
        fs.sync_dir(p("db")).unwrap();
        drop(f);
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"onetwo");
        // A second crash changes nothing.
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"onetwo");
    }

    #[test]
    fn created_file_without_dir_sync_disappears() {
        let fs = setup();
        let _f = write(&fs, "db/a", b"data", true);
        assert!(fs.exists(p("db/a")));
        fs.crash();
        assert!(!fs.exists(p("db/a")));
        assert!(fs.list_dir(p("db")).unwrap().is_empty());
    }

    #[test]
    fn rename_without_dir_sync_is_reverted() {
        let fs = setup();
        write(&fs, "db/tmp", b"new", true);
        write(&fs, "db/CURRENT", b"old", true);
        fs.sync_dir(p("db")).unwrap();
        fs.rename(p("db/tmp"), p("db/CURRENT")).unwrap();
        assert_eq!(fs.read_all(p("db/CURRENT")).unwrap(), b"new");
        assert!(!fs.exists(p("db/tmp")));
        fs.crash();
        assert_eq!(fs.read_all(p("db/CURRENT")).unwrap(), b"old");
        assert_eq!(fs.read_all(p("db/tmp")).unwrap(), b"new");
    }

    #[test]
    fn rename_with_dir_sync_sticks() {
        let fs = setup();
        write(&fs, "db/tmp", b"new", true);
        write(&fs, "db/CURRENT", b"old", true);
        fs.sync_dir(p("db")).unwrap();
        fs.rename(p("db/tmp"), p("db/CURRENT")).unwrap();
        fs.sync_dir(p("db")).unwrap();
        fs.crash();
        assert_eq!(fs.read_all(p("db/CURRENT")).unwrap(), b"new");
        assert!(!fs.exists(p("db/tmp")));
        assert_eq!(sorted(fs.list_dir(p("db")).unwrap()), vec!["CURRENT"]);
    }

    #[test]
    fn remove_needs_dir_sync() {
        let fs = setup();
        write(&fs, "db/a", b"a", true);
        write(&fs, "db/b", b"b", true);
        fs.sync_dir(p("db")).unwrap();
        fs.remove_file(p("db/a")).unwrap();
        fs.remove_file(p("db/b")).unwrap();
        assert!(!fs.exists(p("db/a")));
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"a");
        fs.remove_file(p("db/a")).unwrap();
        fs.sync_dir(p("db")).unwrap();
        fs.crash();
        assert!(!fs.exists(p("db/a")));
        assert!(fs.exists(p("db/b")));
    }

    #[test]
    fn sync_dir_only_covers_that_directory() {
        let fs = setup();
        fs.create_dir_all(p("db/sub")).unwrap();
        write(&fs, "db/a", b"a", true);
        write(&fs, "db/sub/b", b"b", true);
        fs.sync_dir(p("db")).unwrap();
        fs.crash();
        assert!(fs.exists(p("db/a")));
        assert!(!fs.exists(p("db/sub/b")));
        assert_eq!(sorted(fs.list_dir(p("db")).unwrap()), vec!["a", "sub"]);
    }

    #[test]
    fn new_directory_needs_its_parent_synced() {
        let fs = setup();
        fs.create_dir_all(p("db/new/deep")).unwrap();
        write(&fs, "db/new/deep/a", b"a", true);
        fs.sync_dir(p("db/new/deep")).unwrap();
        let lost = fs.crashed_copy();
        assert!(!lost.exists(p("db/new")) && !lost.exists(p("db/new/deep/a")));
        assert!(fs
            .crashed_copy_with(CrashMode::KeepAll, 0)
            .exists(p("db/new/deep/a")));
        fs.sync_dir(p("db")).unwrap();
        let half = fs.crashed_copy();
        assert!(half.exists(p("db/new")) && !half.exists(p("db/new/deep")));
        fs.sync_dir(p("db/new")).unwrap();
        fs.crash();
        assert_eq!(fs.read_all(p("db/new/deep/a")).unwrap(), b"a");
    }

    #[test]
    fn create_dir_all_durable_syncs_every_new_parent() {
        let fs = MemFs::new();
        crate::io::create_dir_all_durable(fs.as_ref(), p("top/mid/leaf")).unwrap();
        crate::io::create_dir_all_durable(fs.as_ref(), p("/abs/leaf")).unwrap();
        fs.crash();
        assert!(fs.exists(p("top/mid/leaf")) && fs.exists(p("/abs/leaf")));
    }

    #[test]
    fn stale_handles_cannot_touch_post_crash_state() {
        let fs = setup();
        let mut f = write(&fs, "db/a", b"kept", true);
        fs.sync_dir(p("db")).unwrap();
        fs.crash();
        f.append(b"stale").unwrap();
        f.sync().unwrap();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"kept");
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"kept");
    }

    #[test]
    fn crashed_copy_leaves_original_alone() {
        let fs = setup();
        let mut f = write(&fs, "db/a", b"kept", true);
        fs.sync_dir(p("db")).unwrap();
        f.append(b"more").unwrap();
        let copy = fs.crashed_copy();
        assert_eq!(copy.read_all(p("db/a")).unwrap(), b"kept");
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"keptmore");
        f.sync().unwrap();
        fs.remove_file(p("db/a")).unwrap();
        assert_eq!(copy.read_all(p("db/a")).unwrap(), b"kept");
        assert_eq!(copy.list_dir(p("db")).unwrap(), vec!["a"]);
    }

    #[test]
    fn recreate_truncates_but_old_contents_survive_crash_until_synced() {
        let fs = setup();
        write(&fs, "db/a", b"old", true);
        fs.sync_dir(p("db")).unwrap();
        let mut f = write(&fs, "db/a", b"x", false);
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"x");
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"old");
        drop(f);
        f = write(&fs, "db/a", b"y", true);
        drop(f);
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"y");
    }

    #[test]
    fn readers_see_appended_data_and_keep_open_length() {
        let fs = setup();
        let mut f = write(&fs, "db/a", b"0123456789", false);
        let r = fs.open(p("db/a")).unwrap();
        assert_eq!(r.len(), 10);
        f.append(b"abc").unwrap();
        let mut buf = [0u8; 4];
        r.read_exact_at(6, &mut buf).unwrap();
        assert_eq!(&buf, b"6789");
        let err = r.read_exact_at(8, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let err = r.read_exact_at(u64::MAX, &mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        let r2 = fs.open(p("db/a")).unwrap();
        assert_eq!(r2.len(), 13);
        r2.read_exact_at(9, &mut buf).unwrap();
        assert_eq!(&buf, b"9abc");
        assert_eq!(f.len(), 13);
    }

    #[test]
    fn missing_paths_are_not_found() {
        let fs = setup();
        let kind = |r: io::Result<()>| r.unwrap_err().kind();
        assert_eq!(
            fs.open(p("db/x")).err().map(|e| e.kind()),
            Some(io::ErrorKind::NotFound)
        );
        assert_eq!(
            fs.read_all(p("db/x")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(kind(fs.remove_file(p("db/x"))), io::ErrorKind::NotFound);
        assert_eq!(
            kind(fs.rename(p("db/x"), p("db/y"))),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            fs.list_dir(p("nope")).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(kind(fs.sync_dir(p("nope"))), io::ErrorKind::NotFound);
        assert_eq!(
            fs.create(p("nope/a")).err().map(|e| e.kind()),
            Some(io::ErrorKind::NotFound)
        );
        // Files at the top level need no directory.
        write(&fs, "top", b"t", false);
        assert!(fs.exists(p("top")));
    }

    #[test]
    fn list_dir_returns_direct_children() {
        let fs = MemFs::new();
        fs.create_dir_all(p("/tmp/db/sub")).unwrap();
        write(&fs, "/tmp/db/000001.log", b"", false);
        write(&fs, "/tmp/db/sub/deep", b"", false);
        assert_eq!(
            sorted(fs.list_dir(p("/tmp/db")).unwrap()),
            vec!["000001.log", "sub"]
        );
        assert_eq!(fs.list_dir(p("/tmp/db/")).unwrap().len(), 2);
        assert_eq!(fs.list_dir(p("/tmp")).unwrap(), vec!["db"]);
        assert!(fs.exists(p("/tmp/db")));
        assert_eq!(
            fs.file_names(),
            vec![
                PathBuf::from("/tmp/db/000001.log"),
                PathBuf::from("/tmp/db/sub/deep")
            ]
        );
    }

    #[test]
    fn lock_is_exclusive_until_dropped_or_crash() {
        let fs = setup();
        let l1 = fs.lock(p("db/LOCK")).unwrap();
        let err = fs.lock(p("db/LOCK")).err().map(|e| e.kind());
        assert_eq!(err, Some(io::ErrorKind::WouldBlock));
        assert!(fs.exists(p("db/LOCK")));
        let other = fs.lock(p("db/OTHER")).unwrap();
        drop(l1);
        let l2 = fs.lock(p("db/LOCK")).unwrap();
        fs.crash();
        let l3 = fs.lock(p("db/LOCK")).unwrap();
        // Dropping a pre-crash guard must not release the new holder.
        drop(l2);
        drop(other);
        assert!(fs.lock(p("db/LOCK")).is_err());
        drop(l3);
        fs.lock(p("db/LOCK")).unwrap();
    }

    #[test]
    fn corrupt_and_truncate_hit_durable_contents() {
        let fs = setup();
        write(&fs, "db/a", b"abcdef", true);
        fs.sync_dir(p("db")).unwrap();
        fs.corrupt_byte(p("db/a"), 1, 0x01).unwrap();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"accdef");
        fs.truncate(p("db/a"), 4).unwrap();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"accd");
        fs.crash();
        assert_eq!(fs.read_all(p("db/a")).unwrap(), b"accd");
        assert!(fs.corrupt_byte(p("db/a"), 4, 1).is_err());
        assert!(fs.truncate(p("db/x"), 0).is_err());
    }

    #[test]
    fn concurrent_appends_and_syncs() {
        let fs = setup();
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    let path = format!("db/{t}");
                    let mut f = fs.create(p(&path)).unwrap();
                    for i in 0..1000u32 {
                        f.append(&i.to_le_bytes()).unwrap();
                        if i % 10 == 0 {
                            f.sync().unwrap();
                        }
                    }
                    f.sync().unwrap();
                    fs.sync_dir(p("db")).unwrap();
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        fs.crash();
        for t in 0..4 {
            assert_eq!(fs.file_size(p(&format!("db/{t}"))).unwrap(), 4000);
        }
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<MemFs>();
        let _: crate::io::FsRef = MemFs::new();
    }
}
