//! `tern check DIR`: verify a store without opening it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use tern::io::{FsRef, PosixFs};
use tern::tools::check::check_store_with_tier;

use tern::tools::show;

use crate::Failure;

/// Exit status when the store has problems.
const EXIT_PROBLEMS: u8 = 1;

#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  \
    tern check /var/lib/tern/db\n\n\
    Reads CURRENT, every manifest record, every table block, every blob record \
    and every live WAL record, and cross-checks the manifest against the tables \
    and blob files (including each blob reference, through GC lineage), and the \
    tables of a durable memory tier against its file. Prints each \
    problem as `<file>: offset <n>: <reason>`.\n\n\
    Run it on a closed store or on a copy: a running store deletes files while \
    the check reads them, which shows up as missing tables.\n\n\
    Exit status: 0 when no problem was found (warnings allowed), 1 when the \
    store has problems, 2 when the check could not run.")]
pub struct Args {
    /// The store's directory.
    dir: PathBuf,
    /// Print only problems and the summary line (no warnings, no statistics).
    #[arg(short, long)]
    quiet: bool,
    /// The durable memory tier's file, as the store's `memtier_path`
    /// setting names it (relative to DIR). Only read when the manifest
    /// names tables in it.
    #[arg(long, value_name = "PATH", default_value = tern::DEFAULT_MEMTIER_FILE)]
    memtier_path: PathBuf,
}

/// Runs the check and prints its report.
pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let fs: FsRef = Arc::new(PosixFs);
    let report = check_store_with_tier(&args.dir, fs, &args.memtier_path).map_err(|e| {
        Failure::new(format!("cannot check {}: {e}", args.dir.display()))
            .hint("pass the directory of a Tern store (the one holding CURRENT)")
    })?;
    let mut out = std::io::stdout().lock();
    for p in &report.problems {
        writeln!(out, "{p}")?;
    }
    if !args.quiet {
        for w in &report.warnings {
            writeln!(out, "warning: {w}")?;
        }
        if let Some(n) = report.manifest_number {
            writeln!(
                out,
                "checked MANIFEST-{n:06} ({} edits), {} tables ({} blocks, {} entries), \
                 {} blob files ({} records, {} references), {} WALs ({} records), {} read",
                report.manifest_records_checked,
                report.tables_checked,
                report.blocks_checked,
                report.entries_checked,
                report.blob_files_checked,
                report.blob_records_checked,
                report.blob_refs_checked,
                report.wals_checked,
                report.wal_records_checked,
                show::bytes(report.bytes_checked)
            )?;
            if report.tier_tables_checked > 0 {
                writeln!(
                    out,
                    "checked {} memory tier tables ({} entries)",
                    report.tier_tables_checked, report.tier_entries_checked
                )?;
            }
        }
    }
    let verdict = if report.is_ok() { "OK" } else { "CORRUPT" };
    writeln!(
        out,
        "{verdict}: {} problem{}, {} warning{} in {}",
        report.problems.len(),
        plural(report.problems.len()),
        report.warnings.len(),
        plural(report.warnings.len()),
        args.dir.display()
    )?;
    Ok(if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_PROBLEMS)
    })
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
