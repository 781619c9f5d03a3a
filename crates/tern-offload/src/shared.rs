//! The shared tier: where stores put their immutable files and workers put
//! their outputs, through `object_store` (a local directory or S3).
//!
//! Layout under the URL's path (`docs/format/offload.md`):
//! `stores/<store>/NNNNNN.{sst,blob}` for inputs, uploaded once each;
//! `jobs/<job>/<attempt>/…` for one attempt's outputs, with
//! `result.pb` written last and create-only.
//!
//! A `file://` tier on the same file system as the files going in or out
//! takes and gives them as hard links instead of copies: every file in it
//! is immutable (`object_store` replaces an object by renaming a new file
//! over it, never by writing into it), so a shared inode is never changed
//! under anyone. Sizes and checksums are still taken and checked by
//! reading.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::{Path as ObjPath, PathPart};
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, WriteMultipart};

use crate::error::{io_err, OffloadError, Result};
use crate::proto::FileRef;

/// Files up to this size go up in one request; larger ones in parts.
const SINGLE_PUT_MAX: usize = 8 << 20;
/// Bytes read from a local file at a time.
const CHUNK: usize = 1 << 20;

/// Fails unless `size` and `crc` are what `r` says.
pub fn check_ref(r: &FileRef, size: u64, crc: u32) -> Result<()> {
    if size != r.size || crc != r.crc32c {
        return Err(OffloadError::Invalid(format!(
            "{} in the shared tier is {size} bytes with CRC-32C {crc:08x}; expected {} bytes with {:08x}",
            r.path, r.size, r.crc32c
        )));
    }
    Ok(())
}

/// A handle on the shared tier.
#[derive(Debug, Clone)]
pub struct SharedTier {
    store: Arc<dyn ObjectStore>,
    root: ObjPath,
    url: String,
    /// The directory of a `file://` tier.
    local_root: Option<std::path::PathBuf>,
}

/// Names temporary links apart.
static NEXT_LINK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// One object listed.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Its path relative to the tier's root.
    pub path: String,
    /// When it was last written.
    pub last_modified: std::time::SystemTime,
}

impl SharedTier {
    /// Opens the tier at `url`: `file:///dir` (created if missing) or
    /// `s3://bucket/prefix`. S3 settings come from `options` (keys as
    /// `object_store`'s S3 builder names them: `aws_endpoint`,
    /// `aws_allow_http`, `aws_region`, …) and from `AWS_*` variables in the
    /// environment.
    pub fn open(url: &str, options: &[(String, String)]) -> Result<SharedTier> {
        let bad = |why: String| OffloadError::Url {
            url: url.to_string(),
            why,
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let mut local_root = None;
        if parsed.scheme() == "file" {
            let dir = parsed
                .to_file_path()
                .map_err(|()| bad("not a local path".into()))?;
            std::fs::create_dir_all(&dir).map_err(|e| bad(format!("cannot create it: {e}")))?;
            local_root = Some(dir);
        }
        let mut opts: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect();
        opts.extend(options.iter().cloned());
        let (store, root) =
            object_store::parse_url_opts(&parsed, opts).map_err(|e| bad(e.to_string()))?;
        Ok(SharedTier {
            store: Arc::from(store),
            root,
            url: url.to_string(),
            local_root,
        })
    }

    /// Where the object `rel` lives on this machine's file system, for a
    /// `file://` tier (the file may not exist). `None` for a path with `.`
    /// or `..` in it: paths come from workers' results, and must not name
    /// a file outside the tier.
    pub fn local_file(&self, rel: &str) -> Option<std::path::PathBuf> {
        let root = self.local_root.as_ref()?;
        if rel.split('/').any(|s| s == "." || s == "..") {
            return None;
        }
        Some(
            rel.split('/')
                .filter(|s| !s.is_empty())
                .fold(root.clone(), |p, s| p.join(s)),
        )
    }

    /// Puts `local` at `rel` as a hard link, replacing any object there;
    /// `false` if the tier is not local or the link cannot be made (another
    /// device).
    fn link_up(&self, local: &std::path::Path, rel: &str) -> bool {
        let Some(target) = self.local_file(rel) else {
            return false;
        };
        let Some(parent) = target.parent() else {
            return false;
        };
        let n = NEXT_LINK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = parent.join(format!(".link-{}-{n}", std::process::id()));
        let linked = std::fs::create_dir_all(parent)
            .and_then(|()| std::fs::hard_link(local, &tmp))
            .and_then(|()| std::fs::rename(&tmp, &target));
        // Renaming a link over another link to the same file does nothing
        // (POSIX), leaving `tmp`; after a failure it may be left too.
        let _ = std::fs::remove_file(&tmp);
        linked.is_ok()
    }

    /// Size and CRC-32C of the local file `path`, adding what is read to
    /// `progress`.
    pub(crate) async fn checksum(
        path: &std::path::Path,
        progress: Option<&std::sync::atomic::AtomicU64>,
    ) -> Result<(u64, u32)> {
        use tokio::io::AsyncReadExt;
        let mut file = tokio::fs::File::open(path).await.map_err(io_err(path))?;
        let mut buf = vec![0u8; CHUNK];
        let (mut size, mut crc) = (0u64, 0u32);
        loop {
            let n = file.read(&mut buf).await.map_err(io_err(path))?;
            if n == 0 {
                return Ok((size, crc));
            }
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            size += n as u64;
            if let Some(p) = progress {
                p.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Makes the object `r` names appear at the local path `to` (a hard
    /// link where it can, else a copy) and checks its size and checksum;
    /// not synced (for scratch space). On an error `to` may exist and
    /// must be thrown away.
    pub async fn download_to(
        &self,
        r: &FileRef,
        to: &std::path::Path,
        progress: &std::sync::atomic::AtomicU64,
    ) -> Result<()> {
        let linked = self
            .local_file(&r.path)
            .is_some_and(|src| std::fs::hard_link(src, to).is_ok());
        if linked {
            let (size, crc) = Self::checksum(to, Some(progress)).await?;
            check_ref(r, size, crc)?;
        } else {
            use std::io::Write;
            // Never open an existing path: it may be a link to an object,
            // which is a store's live file.
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(to)
                .map_err(io_err(to))?;
            self.download(r, |chunk| {
                progress.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                file.write_all(chunk).map_err(io_err(to))
            })
            .await?;
        }
        Ok(())
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The object path of `rel` (slash-separated, relative to the root).
    fn path(&self, rel: &str) -> ObjPath {
        self.root
            .parts()
            .chain(rel.split('/').filter(|s| !s.is_empty()).map(PathPart::from))
            .collect()
    }

    /// Uploads the local file `local` to `rel`, replacing any object there,
    /// and returns its reference (size and CRC-32C of what was read). Adds
    /// the bytes sent to `progress` as it goes.
    pub async fn upload(
        &self,
        local: &std::path::Path,
        rel: &str,
        progress: Option<&std::sync::atomic::AtomicU64>,
    ) -> Result<FileRef> {
        let count = |n: usize| {
            if let Some(p) = progress {
                p.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            }
        };
        if self.link_up(local, rel) {
            // The link is the object; what it holds is the file's bytes.
            let (size, crc32c) = Self::checksum(local, progress).await?;
            return Ok(FileRef {
                path: rel.to_string(),
                size,
                crc32c,
            });
        }
        use tokio::io::AsyncReadExt;
        let mut file = tokio::fs::File::open(local).await.map_err(io_err(local))?;
        let path = self.path(rel);
        let mut crc = 0u32;
        let mut size = 0u64;
        let mut first = Vec::with_capacity(CHUNK);
        // Read up to SINGLE_PUT_MAX + 1 bytes to decide how to send it.
        loop {
            let n = (&mut file)
                .take((SINGLE_PUT_MAX + 1 - first.len()) as u64)
                .read_to_end(&mut first)
                .await
                .map_err(io_err(local))?;
            if n == 0 || first.len() > SINGLE_PUT_MAX {
                break;
            }
        }
        crc = crc32c::crc32c_append(crc, &first);
        size += first.len() as u64;
        count(first.len());
        if first.len() <= SINGLE_PUT_MAX {
            self.store
                .put(&path, PutPayload::from(Bytes::from(first)))
                .await?;
        } else {
            let upload = self.store.put_multipart(&path).await?;
            let mut w = WriteMultipart::new(upload);
            w.write(&first);
            let mut buf = vec![0u8; CHUNK];
            loop {
                let n = file.read(&mut buf).await.map_err(io_err(local))?;
                if n == 0 {
                    break;
                }
                crc = crc32c::crc32c_append(crc, &buf[..n]);
                size += n as u64;
                count(n);
                w.wait_for_capacity(4).await?;
                w.write(&buf[..n]);
            }
            w.finish().await?;
        }
        Ok(FileRef {
            path: rel.to_string(),
            size,
            crc32c: crc,
        })
    }

    /// Streams the object `r` names into `sink`, checking its size and
    /// checksum as it goes; fails on any difference (the sink has then
    /// seen bytes that must be thrown away).
    pub async fn download(
        &self,
        r: &FileRef,
        mut sink: impl FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let got = self.store.get(&self.path(&r.path)).await?;
        let mut stream = got.into_stream();
        let mut crc = 0u32;
        let mut size = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            size += chunk.len() as u64;
            if size > r.size {
                return Err(OffloadError::Invalid(format!(
                    "{} in the shared tier is longer than the {} bytes expected",
                    r.path, r.size
                )));
            }
            crc = crc32c::crc32c_append(crc, &chunk);
            sink(&chunk)?;
        }
        check_ref(r, size, crc)
    }

    /// Writes `bytes` to `rel` only if nothing is there yet; `Ok(false)` if
    /// something was.
    pub async fn put_new(&self, rel: &str, bytes: Vec<u8>) -> Result<bool> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&self.path(rel), PutPayload::from(Bytes::from(bytes)), opts)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes `bytes` to `rel`, replacing whatever is there.
    pub async fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(&self.path(rel), PutPayload::from(Bytes::from(bytes)))
            .await?;
        Ok(())
    }

    /// The object at `rel`; `None` if there is none.
    pub async fn get(&self, rel: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.path(rel)).await {
            Ok(r) => Ok(Some(r.bytes().await?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the object at `rel` (nothing there is not an error).
    pub async fn delete(&self, rel: &str) -> Result<()> {
        match self.store.delete(&self.path(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every object under `prefix` (a directory-like path), recursively.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        let root_parts = self.root.parts().count();
        let p = self.path(prefix);
        let mut stream = self.store.list(Some(&p));
        let mut out = Vec::new();
        while let Some(meta) = stream.next().await {
            let meta = match meta {
                Ok(m) => m,
                Err(object_store::Error::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let rel: Vec<String> = meta
                .location
                .parts()
                .skip(root_parts)
                .map(|p| p.as_ref().to_string())
                .collect();
            out.push(Listed {
                path: rel.join("/"),
                last_modified: meta.last_modified.into(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::AtomicU64;

    use super::*;

    fn ino(p: &std::path::Path) -> u64 {
        std::fs::metadata(p).unwrap().ino()
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A local tier in `d`, holding `bytes` uploaded from the store file
    /// `d/<name>` as `stores/s/<name>`: the tier, the file, its reference.
    fn uploaded(
        d: &std::path::Path,
        rt: &tokio::runtime::Runtime,
        name: &str,
        bytes: &[u8],
    ) -> (SharedTier, std::path::PathBuf, FileRef) {
        let tier = SharedTier::open(&format!("file://{}", d.join("tier").display()), &[]).unwrap();
        let src = d.join(name);
        std::fs::write(&src, bytes).unwrap();
        let r = rt
            .block_on(tier.upload(&src, &format!("stores/s/{name}"), None))
            .unwrap();
        (tier, src, r)
    }

    #[test]
    fn a_worker_named_path_never_leaves_a_local_tier() {
        let d = tempfile::tempdir().unwrap();
        let tier = SharedTier::open(&format!("file://{}", d.path().display()), &[]).unwrap();
        assert!(tier.local_file("jobs/j/1/000001.sst").is_some());
        for bad in ["jobs/../../etc/passwd", "../x", "jobs/./x", "jobs/j/1/.."] {
            assert_eq!(tier.local_file(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_download_onto_an_existing_link_never_truncates_the_object() {
        let d = tempfile::tempdir().unwrap();
        let rt = rt();
        let (tier, src, r) = uploaded(d.path(), &rt, "000009.sst", b"a store's live table");
        let progress = AtomicU64::new(0);
        let to = d.path().join("input.sst");
        rt.block_on(tier.download_to(&r, &to, &progress)).unwrap();
        // The same input named twice in a spec: the second download must
        // not open the first one's link for writing.
        let _ = rt.block_on(tier.download_to(&r, &to, &progress));
        assert_eq!(std::fs::read(&src).unwrap(), b"a store's live table");
        assert_eq!(std::fs::read(&to).unwrap(), b"a store's live table");
    }

    #[test]
    fn a_local_tier_links_files_in_and_out_and_still_checks_them() {
        let d = tempfile::tempdir().unwrap();
        let rt = rt();
        let (tier, src, r) = uploaded(d.path(), &rt, "000007.sst", b"immutable table bytes");
        assert_eq!(r.size, 21);
        assert_eq!(r.crc32c, crc32c::crc32c(b"immutable table bytes"));
        let obj = tier.local_file(&r.path).unwrap();
        assert_eq!(ino(&obj), ino(&src), "uploaded as a link, not a copy");
        // Again (two uploaders raced): nothing is left behind.
        rt.block_on(tier.upload(&src, "stores/s/000007.sst", None))
            .unwrap();
        let listed = rt.block_on(tier.list("stores/s")).unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");

        // The store deletes its file: the object stays whole.
        std::fs::remove_file(&src).unwrap();
        let got = rt.block_on(tier.get(&r.path)).unwrap().unwrap();
        assert_eq!(&got[..], b"immutable table bytes");

        let progress = AtomicU64::new(0);
        let out = d.path().join("in.sst");
        rt.block_on(tier.download_to(&r, &out, &progress)).unwrap();
        assert_eq!(ino(&out), ino(&obj), "downloaded as a link");
        assert_eq!(progress.load(std::sync::atomic::Ordering::Relaxed), 21);

        // Replacing the object makes a new file: the link keeps the old bytes.
        rt.block_on(tier.put(&r.path, b"other".to_vec())).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"immutable table bytes");

        // A reference that does not match what is there is refused.
        let bad = FileRef {
            crc32c: r.crc32c ^ 1,
            ..r.clone()
        };
        let e = rt
            .block_on(tier.download_to(&bad, &d.path().join("bad.sst"), &progress))
            .unwrap_err();
        assert!(e.to_string().contains("CRC-32C"), "{e}");
    }
}
