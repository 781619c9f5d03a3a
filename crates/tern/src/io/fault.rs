//! A [`FileSystem`] wrapper that injects I/O errors, for testing how the
//! engine reacts to failed writes, syncs, reads and metadata operations.
//!
//! Faults are checked before the wrapped operation runs, so by default a
//! failed operation has no effect on the inner file system (a failed `sync`
//! leaves the data unsynced). Real failures are less tidy: with
//! [`FaultFs::set_torn_failures`] a failed append first writes a random
//! prefix of its data, and a failed sync, create, rename, remove or
//! directory sync may have taken effect before reporting the error.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{
    splitmix64, FileLock, FileSync, FileSystem, FsRef, MappedFile, RandomAccessFile, WritableFile,
};

/// The kinds of operation a fault can be injected into.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum FaultKind {
    /// [`WritableFile::append`] and [`WritableFile::flush`].
    Write,
    /// [`WritableFile::sync`] and [`MappedFile::flush_range`].
    Sync,
    /// [`FileSystem::open`], [`FileSystem::read_all`] and
    /// [`RandomAccessFile::read_exact_at`].
    Read,
    /// [`FileSystem::create`] and [`FileSystem::map_file`].
    Create,
    /// [`FileSystem::rename`].
    Rename,
    /// [`FileSystem::remove_file`].
    Remove,
    /// [`FileSystem::sync_dir`].
    SyncDir,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Write,
        FaultKind::Sync,
        FaultKind::Read,
        FaultKind::Create,
        FaultKind::Rename,
        FaultKind::Remove,
        FaultKind::SyncDir,
    ];
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            FaultKind::Write => "write",
            FaultKind::Sync => "sync",
            FaultKind::Read => "read",
            FaultKind::Create => "create",
            FaultKind::Rename => "rename",
            FaultKind::Remove => "remove",
            FaultKind::SyncDir => "sync_dir",
        };
        f.write_str(name)
    }
}

#[derive(Debug)]
struct Rule {
    /// Matching operations still allowed to succeed before the fault fires.
    pass: u64,
    /// Keep failing after the first fault (until `clear`).
    persistent: bool,
}

#[derive(Debug)]
struct Random {
    state: u64,
    probability: f64,
    kinds: Vec<FaultKind>,
}

impl Random {
    fn hit(&mut self) -> bool {
        // 53 random bits as a float in [0, 1).
        let x = (splitmix64(&mut self.state) >> 11) as f64 / (1u64 << 53) as f64;
        x < self.probability
    }
}

#[derive(Debug, Default)]
struct Faults {
    rules: HashMap<FaultKind, Rule>,
    random: Option<Random>,
    path_filter: Option<String>,
    injected: u64,
    /// How long every file sync takes on top of the inner one (a slow disk).
    sync_delay: std::time::Duration,
    /// Generator for what a failed operation left behind; `None`: nothing.
    torn: Option<u64>,
    /// Reads act as if nothing were in memory: every
    /// [`RandomAccessFile::read_cached_at`] answers that it would wait.
    uncached: bool,
    /// Read hints ([`RandomAccessFile::prefetch`]) passed on so far.
    prefetches: u64,
    /// Syncs that have begun a [`FaultFs::set_sync_delay`] wait so far.
    delayed_syncs: u64,
}

impl Faults {
    /// Decides whether this operation fails. `paths` are the paths it touches;
    /// with a path filter set, only operations on a matching path count.
    fn check(&mut self, kind: FaultKind, paths: &[&Path]) -> io::Result<()> {
        if let Some(filter) = &self.path_filter {
            if !paths
                .iter()
                .any(|p| p.to_string_lossy().contains(filter.as_str()))
            {
                return Ok(());
            }
        }
        let fire = match self.rules.get_mut(&kind) {
            Some(rule) if rule.pass > 0 => {
                rule.pass -= 1;
                false
            }
            Some(rule) => {
                if !rule.persistent {
                    self.rules.remove(&kind);
                }
                true
            }
            None => match &mut self.random {
                Some(random) if random.kinds.contains(&kind) => random.hit(),
                _ => false,
            },
        };
        if !fire {
            return Ok(());
        }
        self.injected += 1;
        let on = paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" -> ");
        Err(io::Error::other(format!("injected fault: {kind} on {on}")))
    }

    /// With torn failures on, a random number deciding what a failed
    /// operation left behind.
    fn torn_draw(&mut self) -> Option<u64> {
        self.torn.as_mut().map(splitmix64)
    }
}

type Shared = Arc<Mutex<Faults>>;

/// Wraps another file system and makes chosen operations fail.
///
/// Handles created through it (writable and random-access files) share its
/// fault state, so faults set later also reach files opened earlier.
pub struct FaultFs {
    inner: FsRef,
    faults: Shared,
}

impl fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultFs")
            .field("faults", &*self.faults.lock())
            .finish_non_exhaustive()
    }
}

impl FaultFs {
    /// Wraps `inner`; no faults are injected until asked for.
    pub fn new(inner: FsRef) -> Arc<FaultFs> {
        Arc::new(FaultFs {
            inner,
            faults: Arc::new(Mutex::new(Faults::default())),
        })
    }

    /// The wrapped file system.
    pub fn inner(&self) -> &FsRef {
        &self.inner
    }

    /// Lets `after` operations of `kind` succeed, then fails the next one;
    /// with `persistent`, every later one fails too until [`FaultFs::clear`].
    /// Replaces any earlier rule for `kind`.
    pub fn inject(&self, kind: FaultKind, after: u64, persistent: bool) {
        self.faults.lock().rules.insert(
            kind,
            Rule {
                pass: after,
                persistent,
            },
        );
    }

    /// The `(n+1)`-th operation of `kind` from now and every later one fail.
    pub fn fail_after(&self, kind: FaultKind, n: u64) {
        self.inject(kind, n, true);
    }

    /// The next operation of `kind` fails, later ones succeed.
    pub fn fail_once(&self, kind: FaultKind) {
        self.inject(kind, 0, false);
    }

    /// Fails each operation of the given kinds with `probability`, drawn from
    /// a generator seeded with `seed` (the same sequence of operations gives
    /// the same faults). An empty `kinds` means every kind. Rules set with
    /// [`FaultFs::inject`] take precedence for their kind.
    pub fn set_random(&self, seed: u64, probability: f64, kinds: &[FaultKind]) {
        let kinds = if kinds.is_empty() {
            FaultKind::ALL.to_vec()
        } else {
            kinds.to_vec()
        };
        self.faults.lock().random = Some(Random {
            state: seed,
            probability,
            kinds,
        });
    }

    /// Only operations on a path containing `s` can fail (and count towards
    /// [`FaultFs::inject`]'s `after`); for example `".log"`.
    pub fn only_paths_containing(&self, s: &str) {
        self.faults.lock().path_filter = Some(s.to_owned());
    }

    /// Makes every file sync take `delay` longer, like a slow disk, so that
    /// tests can make writers pile up behind an fsync.
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.faults.lock().sync_delay = delay;
    }

    /// Makes failed operations leave traces, with the random choices drawn
    /// from `seed`: a failed append writes a random prefix of its data
    /// (possibly none, possibly all) before failing, and a failed sync,
    /// create, rename, remove or directory sync takes effect half of the
    /// time before reporting the error. Stays on across [`FaultFs::clear`].
    pub fn set_torn_failures(&self, seed: u64) {
        self.faults.lock().torn = Some(seed);
    }

    /// Makes reads act as if the page cache held nothing (a store larger
    /// than memory): reads that must not wait for the device say they would.
    pub fn set_uncached(&self, uncached: bool) {
        self.faults.lock().uncached = uncached;
    }

    /// How many syncs have begun waiting out the delay of
    /// [`FaultFs::set_sync_delay`]: lets a test act once a slow sync is
    /// under way.
    pub fn delayed_syncs(&self) -> u64 {
        self.faults.lock().delayed_syncs
    }

    /// How many read hints were passed on to the inner file system.
    pub fn prefetches(&self) -> u64 {
        self.faults.lock().prefetches
    }

    /// Removes all rules, random faults and the path filter. The count of
    /// injected faults is kept.
    pub fn clear(&self) {
        let mut faults = self.faults.lock();
        faults.rules.clear();
        faults.random = None;
        faults.path_filter = None;
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u64 {
        self.faults.lock().injected
    }

    fn check(&self, kind: FaultKind, paths: &[&Path]) -> io::Result<()> {
        self.faults.lock().check(kind, paths)
    }

    /// Runs `op` unless a fault fires; a fault with torn failures on runs it
    /// half of the time anyway, then reports the fault.
    fn guarded<T>(
        &self,
        kind: FaultKind,
        paths: &[&Path],
        op: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        match self.check(kind, paths) {
            Ok(()) => op(),
            Err(e) => {
                if self.faults.lock().torn_draw().is_some_and(|r| r % 2 == 0) {
                    let _ = op();
                }
                Err(e)
            }
        }
    }
}

struct FaultWritable {
    inner: Box<dyn WritableFile>,
    path: PathBuf,
    faults: Shared,
}

impl FaultWritable {
    fn check(&self, kind: FaultKind) -> io::Result<()> {
        self.faults.lock().check(kind, &[&self.path])
    }
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if let Err(e) = self.check(FaultKind::Write) {
            if let Some(r) = self.faults.lock().torn_draw() {
                let keep = (r % (data.len() as u64 + 1)) as usize;
                let _ = self.inner.append(&data[..keep]);
            }
            return Err(e);
        }
        self.inner.append(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.check(FaultKind::Write)?;
        self.inner.flush()
    }

    fn sync(&mut self) -> io::Result<()> {
        let inner = &mut self.inner;
        faulty_sync(&self.faults, &self.path, || inner.sync())
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn sync_handle(&self) -> io::Result<Arc<dyn FileSync>> {
        Ok(Arc::new(FaultSync {
            inner: self.inner.sync_handle()?,
            path: self.path.clone(),
            faults: self.faults.clone(),
        }))
    }
}

/// A sync subject to the same faults and delay as [`WritableFile::sync`]:
/// a failed one may still have synced (torn), as after a real `EIO`.
fn faulty_sync(
    faults: &Shared,
    path: &Path,
    sync: impl FnOnce() -> io::Result<()>,
) -> io::Result<()> {
    // A slow disk is slow for syncs that then fail too, so a failing sync
    // can overlap others.
    let delay = {
        let mut f = faults.lock();
        if !f.sync_delay.is_zero() {
            f.delayed_syncs += 1;
        }
        f.sync_delay
    };
    if !delay.is_zero() {
        std::thread::sleep(delay);
    }
    // Bound first: the guard must be gone before the branch locks again.
    let checked = faults.lock().check(FaultKind::Sync, &[path]);
    if let Err(e) = checked {
        if faults.lock().torn_draw().is_some_and(|r| r % 2 == 0) {
            let _ = sync();
        }
        return Err(e);
    }
    sync()
}

struct FaultSync {
    inner: Arc<dyn FileSync>,
    path: PathBuf,
    faults: Shared,
}

impl FileSync for FaultSync {
    fn sync_data(&self) -> io::Result<()> {
        faulty_sync(&self.faults, &self.path, || self.inner.sync_data())
    }

    fn start_writeback(&self) -> io::Result<()> {
        faulty_sync(&self.faults, &self.path, || self.inner.start_writeback())
    }
}

struct FaultRandom {
    inner: Arc<dyn RandomAccessFile>,
    path: PathBuf,
    faults: Shared,
}

impl RandomAccessFile for FaultRandom {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.faults.lock().check(FaultKind::Read, &[&self.path])?;
        self.inner.read_exact_at(offset, buf)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_cached_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
        let uncached = {
            let mut faults = self.faults.lock();
            faults.check(FaultKind::Read, &[&self.path])?;
            faults.uncached
        };
        if uncached {
            return Ok(false);
        }
        self.inner.read_cached_at(offset, buf)
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.faults.lock().prefetches += 1;
        self.inner.prefetch(offset, len);
    }
}

impl FileSystem for FaultFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let inner = self.guarded(FaultKind::Create, &[path], || self.inner.create(path))?;
        Ok(Box::new(FaultWritable {
            inner,
            path: path.to_path_buf(),
            faults: self.faults.clone(),
        }))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.check(FaultKind::Read, &[path])?;
        let inner = self.inner.open(path)?;
        Ok(Arc::new(FaultRandom {
            inner,
            path: path.to_path_buf(),
            faults: self.faults.clone(),
        }))
    }

    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.check(FaultKind::Read, &[path])?;
        self.inner.read_all(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.guarded(FaultKind::Rename, &[from, to], || {
            self.inner.rename(from, to)
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.guarded(FaultKind::Remove, &[path], || self.inner.remove_file(path))
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn file_size(&self, path: &Path) -> io::Result<u64> {
        self.inner.file_size(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.guarded(FaultKind::SyncDir, &[path], || self.inner.sync_dir(path))
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }

    fn map_file(&self, path: &Path, len: u64) -> io::Result<Arc<dyn MappedFile>> {
        let inner = self.guarded(FaultKind::Create, &[path], || {
            self.inner.map_file(path, len)
        })?;
        Ok(Arc::new(FaultMapped {
            inner,
            path: path.to_path_buf(),
            faults: self.faults.clone(),
        }))
    }
}

/// A mapped file whose flushes fail like syncs.
struct FaultMapped {
    inner: Arc<dyn MappedFile>,
    path: PathBuf,
    faults: Shared,
}

impl MappedFile for FaultMapped {
    fn as_ptr(&self) -> *mut u8 {
        self.inner.as_ptr()
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn flush_range(&self, offset: usize, len: usize) -> io::Result<()> {
        faulty_sync(&self.faults, &self.path, || {
            self.inner.flush_range(offset, len)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
