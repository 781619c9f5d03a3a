//! The bulk copy of a slot migration as whole files: the source exports a
//! part of the slots' values as table and blob files (`TERN.EXPORT` for
//! strings, `TERN.EXPORTCOMPOSITES` for hashes, sets, sorted sets and
//! lists under versions the target reserved), written under file numbers
//! the target reserved, and
//! the target ingests them behind its own data (`tern::Db::ingest_behind`):
//! no WAL, memtable, flush or compaction on the way in.
//!
//! Ingested entries sit below every version the target wrote, so a key a
//! client wrote here wins by itself. What the engine cannot know is kept
//! exact here, in three steps:
//!
//! 1. `TERN.INGESTBEGIN` (on the committer) *holds* the part's slots:
//!    until step 3, writes to them answer `-TRYAGAIN` (clients retry), so
//!    nothing changes under the accounting. It counts each key of the part
//!    that has no import marker (nothing of it was ever written here) as
//!    stored; for each key with a marker that is absent here (deleted
//!    here), it writes a tombstone again, since compaction may have
//!    dropped the old one; each key without a marker of which the engine
//!    still holds an older version of this node's own (a tombstone of the
//!    cleanup in handoff, a leftover) is written again on top from the
//!    file; and it writes an *intent* record. All in one commit.
//! 2. The target ingests the files.
//! 3. `TERN.INGESTEND` writes the expiry index entries of the counted keys
//!    and deletes the intent (or, if step 2 failed, takes the counts back),
//!    and releases the slots.
//!
//! A crash between 1 and 3 leaves the intent: the next open recounts the
//! keyspace and rebuilds the expiry index of the intent's slots
//! ([`crate::store::Store::open`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use tern::ingest::{ExportedFile, ExportedKind};

use crate::keyspace::Layout;

/// Bytes of string values one exported part carries (one `TERN.EXPORT`
/// reply) by default (`migrate-part-kb`).
pub const PART_BYTES: u64 = 8 << 20;
/// File numbers a target reserves for one part (a table and a blob file
/// usually; more when the source's files are small).
pub const PART_FILE_NUMBERS: u64 = 64;
/// Composite value versions a target reserves for one part of hashes,
/// sets, sorted sets and lists (the source stops before a slot that would
/// need more).
pub const PART_VERSIONS: u64 = 1 << 20;
/// Where a target stages received files, under the engine's directory.
pub const STAGING_DIR: &str = "ingest-staging";

/// A part received and checked, waiting for `TERN.INGESTBEGIN`.
#[derive(Debug, Clone, Default)]
pub struct Part {
    /// The slots it holds keys of (inclusive): those its ingest holds.
    pub slots: (u16, u16),
    /// Its Redis keys and their expiries, from the checked files.
    pub records: Vec<(Vec<u8>, Option<u64>)>,
    /// Keys of the part of which the engine holds a version (a tombstone
    /// or a value: hidden under it, the ingested version would not be
    /// seen), with their stored values from the files; those without an
    /// import marker are written again on top.
    pub rewrite: Vec<(Vec<u8>, Vec<u8>)>,
    /// The keys `TERN.INGESTBEGIN` counted (nothing of them here before).
    pub counted: Vec<(Vec<u8>, Option<u64>)>,
    /// The keys `TERN.INGESTBEGIN` found hidden under an older version of
    /// this node's own: `TERN.INGESTEND ok` writes them again on top, once
    /// the files (a composite's members) are in.
    pub rewrites: Vec<(Vec<u8>, Vec<u8>)>,
}

/// This node's ingests: parts in flight, the slots they hold, counters.
#[derive(Debug, Default)]
pub struct Ingests {
    next_id: AtomicU64,
    parts: Mutex<HashMap<u64, Part>>,
    held: Mutex<Vec<(u64, (u16, u16))>>,
    /// Files ingested.
    pub files: AtomicU64,
    /// Bytes of those files.
    pub bytes: AtomicU64,
    /// Keys they brought that were not here yet.
    pub keys: AtomicU64,
    /// Bytes of string values per part (`migrate-part-kb`; 0: [`PART_BYTES`]).
    pub part_bytes: AtomicU64,
    /// First versions of ranges reserved for parts not yet ingested: no
    /// value is committed under them yet, though the version counter is
    /// past them (see [`Ingests::version_floor`]).
    unsettled_versions: Mutex<Vec<u64>>,
}

impl Ingests {
    /// Bytes of string values a part carries.
    pub fn part_bytes(&self) -> u64 {
        match self.part_bytes.load(Relaxed) {
            0 => PART_BYTES,
            n => n,
        }
    }

    /// Notes versions from `base` on as reserved for a part on its way.
    pub fn reserve_versions(&self, base: u64) {
        self.unsettled_versions.lock().push(base);
    }

    /// Forgets one reservation from `base` (its part is in, or given up).
    pub fn settle_versions(&self, base: u64) {
        let mut v = self.unsettled_versions.lock();
        if let Some(i) = v.iter().position(|&b| b == base) {
            v.swap_remove(i);
        }
    }

    /// The lowest version reserved for a part not yet ingested, if any.
    /// The compaction filter must not take a member of that version or
    /// above for garbage: its metadata may not be in the store yet.
    pub fn version_floor(&self) -> Option<u64> {
        self.unsettled_versions.lock().iter().copied().min()
    }

    /// Registers a checked part; returns its id.
    pub fn register(&self, part: Part) -> u64 {
        let id = self.next_id.fetch_add(1, Relaxed) + 1;
        self.parts.lock().insert(id, part);
        id
    }

    /// Runs `f` on part `id`, if registered.
    pub fn with_part<T>(&self, id: u64, f: impl FnOnce(&mut Part) -> T) -> Option<T> {
        self.parts.lock().get_mut(&id).map(f)
    }

    /// Forgets part `id`.
    pub fn forget(&self, id: u64) -> Option<Part> {
        self.parts.lock().remove(&id)
    }

    /// Holds slots `range` for part `id` (writes to them answer
    /// `-TRYAGAIN`); again for the same part changes nothing.
    pub fn hold(&self, id: u64, range: (u16, u16)) {
        let mut held = self.held.lock();
        if !held.iter().any(|&(i, _)| i == id) {
            held.push((id, range));
        }
    }

    /// Releases part `id`'s hold, if it has one.
    pub fn release(&self, id: u64) {
        self.held.lock().retain(|&(i, _)| i != id);
    }

    /// Whether a write to `slot` must wait for an ingest.
    pub fn holds(&self, slot: u16) -> bool {
        self.held
            .lock()
            .iter()
            .any(|&(_, (a, b))| (a..=b).contains(&slot))
    }

    /// Whether any of `keys` is in a held slot.
    pub fn holds_any<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) -> bool {
        let held = self.held.lock();
        if held.is_empty() {
            return false;
        }
        keys.into_iter().any(|k| {
            let s = crate::cluster::slot::key_slot(k);
            held.iter().any(|&(_, (a, b))| (a..=b).contains(&s))
        })
    }
}

/// The reply a write to a held slot gets.
pub fn held_reply() -> crate::resp::Reply {
    crate::resp::Reply::Error(
        "TRYAGAIN the key's slot is taking in a bulk copy from its previous owner; retry".into(),
    )
}

/// The exported file named `name` (`NNNNNN.sst` or `NNNNNN.blob`, as
/// `TERN.EXPORT` sends them), or `None` for any other name.
pub fn parse_file_name(name: &[u8]) -> Option<ExportedFile> {
    let name = std::str::from_utf8(name).ok()?;
    let (digits, kind) = if let Some(d) = name.strip_suffix(".sst") {
        (d, ExportedKind::Table)
    } else {
        (name.strip_suffix(".blob")?, ExportedKind::Blob)
    };
    if digits.is_empty() || digits.len() > 20 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let number = digits.parse().ok()?;
    let f = ExportedFile { kind, number };
    // Only the canonical spelling: the name is joined to a directory.
    (f.file_name() == name).then_some(f)
}

/// Writes a received part's files to `dir` (synced), checks them whole,
/// with every key in slots `slots` of the store's generation (string
/// values only, or with `composites` hashes, sets, sorted sets and lists
/// and their members), and reads the Redis keys and expiries they hold.
/// Blocking.
pub fn stage_and_check(
    store: &crate::store::Store,
    dir: &Path,
    files: Vec<(ExportedFile, Vec<u8>)>,
    list: &[ExportedFile],
    slots: (u16, u16),
    composites: bool,
) -> Result<Staged, String> {
    let db = &store.db;
    let fs = db.file_system();
    let io = |what: &str, e: std::io::Error| format!("staging {what}: {e}");
    fs.create_dir_all(dir)
        .map_err(|e| io(&dir.display().to_string(), e))?;
    for (f, bytes) in files {
        let path = dir.join(f.file_name());
        let mut w = fs.create(&path).map_err(|e| io(&f.file_name(), e))?;
        w.append(&bytes).map_err(|e| io(&f.file_name(), e))?;
        w.sync().map_err(|e| io(&f.file_name(), e))?;
    }
    fs.sync_dir(dir).map_err(|e| io("the directory", e))?;
    let gen = store.generation();
    let range = tern::compaction::KeyRange {
        start: Some(Layout::slot_bounds(gen, slots.0).0),
        end: Some(Layout::slot_bounds(gen, slots.1).1),
    };
    // Composites come with member keys (`'f'`), checked one by one below.
    let mut span: Option<(u16, u16)> = None;
    let range = if composites {
        tern::compaction::KeyRange::default()
    } else {
        range
    };
    let checked = db
        .check_ingest(dir, list, &range)
        .map_err(|e| format!("a bulk copy file failed its check: {e}"))?;
    let prefix = Layout::Slotted.prefix_len();
    let mut records = Vec::new();
    let mut rewrite = Vec::new();
    for f in list.iter().filter(|f| f.kind == ExportedKind::Table) {
        // Anything the engine holds of a key hides the file's version.
        // Without an import marker that is something of an earlier time
        // here (a tombstone of the cleanup, a leftover); such a version is
        // never added later (writes leave markers), only compacted away, so
        // this finds every key the check at TERN.INGESTBEGIN needs. Their
        // whole values are read, to be written again on top.
        let hidden = |k: &[u8]| -> tern::Result<bool> {
            let string_or_meta = k.first() == Some(&crate::keyspace::NS_KEYS);
            Ok(string_or_meta && (db.holds_tombstone(k)? || db.get_head(k)?.is_some()))
        };
        // Composite metadata is read whole (it is small, but a store may
        // separate values of any size).
        let whole = |k: &[u8]| -> tern::Result<bool> {
            Ok((composites && k.first() == Some(&crate::keyspace::NS_KEYS)) || hidden(k)?)
        };
        tern::ingest::for_each_entry(fs, dir, f, whole, |k, v, head| {
            let bad = |why: &str| tern::Error::corruption(dir.join(f.file_name()), 0, why);
            let in_slots = |key: &[u8]| {
                let s = crate::cluster::slot::key_slot(key);
                (slots.0..=slots.1).contains(&s)
            };
            if composites && k.first() == Some(&crate::members::NS_MEMBERS) {
                let m = crate::members::parse_member_key(Layout::Slotted, k)
                    .ok_or_else(|| bad("a malformed member key"))?;
                let slot = k.get(prefix - 2..prefix);
                if m.generation != gen
                    || !in_slots(m.key)
                    || slot != Some(&crate::cluster::slot::key_slot(m.key).to_be_bytes()[..])
                {
                    return Err(bad("a member key outside the slots or the generation"));
                }
                return Ok(());
            }
            let (Some(slot), Some(key)) = (k.get(prefix - 2..prefix), k.get(prefix..)) else {
                return Err(bad("a key too short for the slotted layout"));
            };
            if k.get(..prefix - 2) != Some(&Layout::Slotted.key(gen, b"")[..prefix - 2])
                || crate::cluster::slot::key_slot(key).to_be_bytes() != slot
                || !in_slots(key)
            {
                return Err(bad("a key outside the slots or the generation"));
            }
            let h = crate::keyspace::decode_header(v, head)
                .map_err(|e| bad(&e.0))?
                .ok_or_else(|| bad("a value head too short for its header"))?;
            let s = crate::cluster::slot::key_slot(key);
            span = Some(span.map_or((s, s), |(a, b)| (a.min(s), b.max(s))));
            if h.kind.is_composite() != composites {
                return Err(bad(
                    "a bulk copy file holds a value of another kind than asked",
                ));
            }
            if composites {
                let e = crate::keyspace::decode_value(v.to_vec()).map_err(|e| bad(&e.0))?;
                crate::members::Composite::decode(h.kind, &e.value).map_err(|e| bad(&e.0))?;
            }
            if !head && hidden(k)? {
                rewrite.push((key.to_vec(), v.to_vec()));
            }
            records.push((key.to_vec(), h.expire_at));
            Ok(())
        })
        .map_err(|e| format!("reading a bulk copy file: {e}"))?;
    }
    Ok(Staged {
        checked,
        records,
        rewrite,
        span: span.unwrap_or(slots),
    })
}

/// A part staged and checked ([`stage_and_check`]).
#[derive(Debug)]
pub struct Staged {
    /// What the engine's check found.
    pub checked: tern::ingest::CheckedFiles,
    /// Redis keys and expiries ([`Part::records`]).
    pub records: Vec<(Vec<u8>, Option<u64>)>,
    /// Keys a tombstone hides ([`Part::rewrite`]).
    pub rewrite: Vec<(Vec<u8>, Vec<u8>)>,
    /// The slots its keys are in, first to last: what the ingest holds.
    pub span: (u16, u16),
}

/// The key ranges of slots `slots` in generation `gen` whose tombstones
/// must outlive an ingest of a part of them (string or metadata records,
/// and with `composites` member keys): `[lo, hi]`.
pub fn protected_ranges(gen: u32, slots: (u16, u16), composites: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = vec![(
        Layout::slot_bounds(gen, slots.0).0,
        Layout::slot_bounds(gen, slots.1).1,
    )];
    if composites {
        let members = |(lo, hi): (Vec<u8>, Vec<u8>)| {
            let to_members = |mut k: Vec<u8>| {
                if let Some(t) = k.first_mut() {
                    if *t == crate::keyspace::NS_KEYS {
                        *t = crate::members::NS_MEMBERS;
                    }
                }
                k
            };
            (to_members(lo), to_members(hi))
        };
        out.push(members((
            Layout::slot_bounds(gen, slots.0).0,
            Layout::slot_bounds(gen, slots.1).1,
        )));
    }
    out
}

/// The staging directory of part `id` under the engine directory `dir`.
pub fn staging_dir(dir: &Path, id: u64) -> PathBuf {
    dir.join(STAGING_DIR).join(id.to_string())
}

/// Removes what earlier runs left staged (parts never ingested).
pub fn clear_staging(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir.join(STAGING_DIR));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    use super::*;
    use crate::config::AppendFsync;
    use crate::key_cache::KeyCache;
    use crate::keyspace::{encode_ingest_intent, encode_value, ingest_intent_key, Kind};
    use crate::pending::Pending;
    use crate::store::Store;

    fn open(fs: &Arc<tern::io::MemFs>) -> Store {
        open_with(fs, tern::Settings::default())
    }

    fn open_with(fs: &Arc<tern::io::MemFs>, settings: tern::Settings) -> Store {
        let opts = tern::Options {
            fs: fs.clone(),
            settings,
            ..tern::Options::default()
        };
        let db = tern::Db::open("/db", opts).unwrap();
        Store::open(
            db,
            AppendFsync::Always,
            Arc::new(AtomicU32::new(0)),
            1024,
            Layout::Slotted,
        )
        .unwrap()
    }

    /// What `TERN.INGESTBEGIN` commits for key `c` (expiring at `t`) of
    /// slots 0..=16383, after `a` (expiring) and `b` were written.
    fn begin_then_stop(fs: &Arc<tern::io::MemFs>, t: u64) -> Store {
        let s = open(fs);
        let mut p = Pending::new(s.layout(), s.meta(), KeyCache::default());
        p.put(&s, b"a", Kind::String, b"1", Some(t)).unwrap();
        p.put(&s, b"b", Kind::String, b"2", None).unwrap();
        p.count_ingested(b"c", Some(t), true);
        p.put_raw(&ingest_intent_key(7), &encode_ingest_intent(0, 16383));
        let (batch, meta) = p.take();
        s.commit(batch, meta).unwrap();
        assert_eq!((s.meta().keys, s.meta().expires), (3, 2));
        s
    }

    /// Regression: composite metadata a store keeps in a blob file (any
    /// value can be, with a low `blob_threshold`) was refused at staging,
    /// so the copy retried forever; and each value must come under the
    /// version reserved for it, members and metadata alike.
    #[test]
    fn composites_travel_as_files_under_the_versions_reserved_for_them() {
        use crate::members::{member_key, Composite};
        let src = open_with(
            &tern::io::MemFs::new(),
            tern::Settings {
                blob_threshold: Some(1),
                blob_head_size: 16,
                ..tern::Settings::default()
            },
        );
        let mut p = Pending::new(src.layout(), src.meta(), KeyCache::default());
        let gen = src.generation();
        for key in [&b"h1"[..], b"h2", b"h3"] {
            let v = p.new_version();
            let c = Composite {
                version: v,
                size: 2,
                head: None,
            };
            p.put(&src, key, Kind::Hash, &c.encode(), None).unwrap();
            for f in [&b"f1"[..], b"f2"] {
                let mk = member_key(Layout::Slotted, gen, key, v, f);
                p.put_member(key, mk, &[key, f].concat());
            }
        }
        let (batch, meta) = p.take();
        src.commit(batch, meta).unwrap();

        let dst_fs = tern::io::MemFs::new();
        let dst = open(&dst_fs);
        let numbers = dst.db.reserve_file_numbers(PART_FILE_NUMBERS);
        let out: tern::io::FsRef = tern::io::MemFs::new();
        let dir = Path::new("/export");
        out.create_dir_all(dir).unwrap();
        let mut w = tern::ingest::ExportWriter::new(
            out.clone(),
            dir,
            numbers.clone(),
            src.db.export_options(),
        );
        let (next, n) = src
            .export_composites((0, 16383), dst.generation(), 1000..2000, &mut w, 1 << 20)
            .unwrap();
        assert_eq!((next, n), (None, 3));
        let list = w.finish().unwrap();
        let files: Vec<_> = list
            .iter()
            .map(|f| (*f, out.read_all(&dir.join(f.file_name())).unwrap()))
            .collect();
        let staging = Path::new("/db").join(STAGING_DIR).join("1");
        let staged = stage_and_check(&dst, &staging, files, &list, (0, 16383), true).unwrap();
        assert_eq!(staged.records.len(), 3);
        dst.db
            .ingest_checked(&staging, &list, staged.checked)
            .unwrap();
        // Each value has a version of its own from the reserved range, and
        // its members came under it.
        let mut versions = Vec::new();
        for key in [&b"h1"[..], b"h2", b"h3"] {
            let raw = dst
                .db
                .get(&dst.layout().key(dst.generation(), key))
                .unwrap()
                .unwrap();
            let e = crate::keyspace::decode_value(raw).unwrap();
            let c = Composite::decode(e.kind, &e.value).unwrap();
            versions.push(c.version);
            for f in [&b"f1"[..], b"f2"] {
                let mk = member_key(Layout::Slotted, dst.generation(), key, c.version, f);
                assert_eq!(dst.db.get(&mk).unwrap(), Some([key, f].concat()));
            }
        }
        versions.sort_unstable();
        assert_eq!(versions, [1000, 1001, 1002]);
    }

    #[test]
    fn an_ingest_stopped_before_its_files_went_in_is_recounted_at_open() {
        let fs = tern::io::MemFs::new();
        let t = crate::expiry::now_ms() + 3_600_000;
        drop(begin_then_stop(&fs, t));
        let s = open(&fs);
        assert_eq!((s.meta().keys, s.meta().expires), (2, 1));
        assert_eq!(s.recount(s.generation()).unwrap(), s.meta());
        assert!(s.db.get(&ingest_intent_key(7)).unwrap().is_none());
    }

    #[test]
    fn an_ingest_stopped_after_its_files_went_in_gets_counts_and_expiry_entries() {
        let fs = tern::io::MemFs::new();
        let t = crate::expiry::now_ms() + 3_600_000;
        let s = begin_then_stop(&fs, t);
        // The file's record of `c`, as the ingest leaves it: no index entry.
        let k = s.layout().key(s.generation(), b"c");
        s.db.put(&k, &encode_value(b"3", Some(t))).unwrap();
        drop(s);
        let s = open(&fs);
        assert_eq!((s.meta().keys, s.meta().expires), (3, 2));
        let due = s.due_expiries(s.generation(), 0, t, 10).unwrap();
        let mut keys: Vec<_> = due.into_iter().map(|(_, k)| k).collect();
        keys.sort();
        assert_eq!(keys, [b"a".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn only_canonical_file_names_parse() {
        assert_eq!(
            parse_file_name(b"000042.sst"),
            Some(ExportedFile {
                kind: ExportedKind::Table,
                number: 42
            })
        );
        assert_eq!(
            parse_file_name(b"000007.blob").map(|f| f.kind),
            Some(ExportedKind::Blob)
        );
        for bad in [
            &b"../000042.sst"[..],
            b"42.sst",
            b"000042.SST",
            b".sst",
            b"000042.wal",
            b"00000x.blob",
            b"/etc/passwd",
            b"\xff.sst",
        ] {
            assert_eq!(
                parse_file_name(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn holds_cover_their_slots_until_released() {
        let i = Ingests::default();
        assert!(!i.holds(5));
        i.hold(1, (3, 9));
        i.hold(2, (3, 9));
        i.hold(2, (3, 9));
        assert!(i.holds(3) && i.holds(9) && !i.holds(10));
        i.release(1);
        assert!(i.holds(5), "the other part's hold remains");
        i.release(1);
        assert!(i.holds(5), "releasing twice takes nothing else");
        i.release(2);
        assert!(!i.holds(5));
    }
}
