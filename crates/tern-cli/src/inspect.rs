//! `tern inspect DIR`: show what a store holds, reading only.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use tern::io::{FsRef, PosixFs};
use tern::tools::dump::{self, DumpError, FileKind};

use crate::Failure;

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    tern inspect /var/lib/tern/db                       # manifest summary and LSM shape\n  \
    tern inspect /var/lib/tern/db --sst 12 --limit 20   # properties and first 20 entries of 000012.sst\n  \
    tern inspect /var/lib/tern/db --sst ./copy/000012.sst\n  \
    tern inspect /var/lib/tern/db --wal 15              # the write batches in 000015.log\n  \
    tern inspect /var/lib/tern/db --blob 9 --limit 20   # footer, lineage and first 20 records of 000009.blob\n  \
    tern inspect /var/lib/tern/db --manifest            # every version edit of the live manifest\n\n\
    Keys and values are printed with non-printable bytes escaped as \\xNN.")]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// Show one table: its properties and entries. A file number (looked up
    /// in DIR) or a path to a `.sst` file.
    #[arg(long, value_name = "NUMBER|PATH", conflicts_with_all = ["wal", "manifest", "blob"])]
    sst: Option<String>,
    /// Show one write-ahead log: its records and the keys they write. A file
    /// number (looked up in DIR) or a path to a `.log` file.
    #[arg(long, value_name = "NUMBER|PATH", conflicts_with_all = ["manifest", "blob"])]
    wal: Option<String>,
    /// Show one blob file: its footer, lineage and records. A file number
    /// (looked up in DIR) or a path to a `.blob` file.
    #[arg(long, value_name = "NUMBER|PATH", conflicts_with = "manifest")]
    blob: Option<String>,
    /// Show every version edit of the live manifest.
    #[arg(long)]
    manifest: bool,
    /// With --sst, --wal or --blob: stop after this many entries or records.
    #[arg(long, value_name = "N")]
    limit: Option<u64>,
}

/// Prints what `args` asks for.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let fs: FsRef = Arc::new(PosixFs);
    let mut out = std::io::stdout().lock();
    let limit = args.limit.unwrap_or(u64::MAX);
    let locate = |spec: &str, kind| {
        dump::locate(&args.dir, spec, kind).map_err(|e| Failure::new(e.to_string()))
    };
    if let Some(spec) = &args.sst {
        let (path, number) = locate(spec, FileKind::Table)?;
        dump::table(&fs, &path, number, limit, &mut out)
            .map_err(|e| file_failure("table", &path, e))?;
    } else if let Some(spec) = &args.blob {
        let (path, number) = locate(spec, FileKind::Blob)?;
        dump::blob_file(&fs, &path, number, limit, &mut out)
            .map_err(|e| file_failure("blob file", &path, e))?;
    } else if let Some(spec) = &args.wal {
        let (path, _) = locate(spec, FileKind::Wal)?;
        dump::wal(&fs, &path, limit, &mut out).map_err(|e| file_failure("WAL", &path, e))?;
    } else if args.manifest {
        dump::manifest(&fs, &args.dir, &mut out).map_err(|e| store_failure(&args.dir, e))?;
    } else {
        dump::summary(&fs, &args.dir, &mut out).map_err(|e| store_failure(&args.dir, e))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A failure reading one file, with a hint of what to do.
fn file_failure(what: &str, path: &Path, e: DumpError) -> Failure {
    let dir = path.parent().unwrap_or(Path::new("."));
    let what = format!("{what} {}", path.display());
    failure(&what, dir, "check the path and that you may read it", e)
}

/// A failure reading the store in `dir`, with a hint of what to do.
fn store_failure(dir: &Path, e: DumpError) -> Failure {
    let what = format!("the store in {}", dir.display());
    let otherwise = "pass the directory of a Tern store (the one holding CURRENT)";
    failure(&what, dir, otherwise, e)
}

/// "cannot read `what`": damage points at `tern check dir`, any other
/// error gets the hint `otherwise`; a failed write of the output is
/// reported as such.
fn failure(what: &str, dir: &Path, otherwise: &str, e: DumpError) -> Failure {
    let e = match e {
        DumpError::Read(e) => e,
        DumpError::Write(e) => return e.into(),
    };
    let f = Failure::new(format!("cannot read {what}: {e}"));
    if e.is_corruption() {
        f.hint(format!(
            "the store is damaged; `tern check {}` lists every problem",
            dir.display()
        ))
    } else {
        f.hint(otherwise)
    }
}
