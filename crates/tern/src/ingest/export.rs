//! Writing sorted key-value pairs as table and blob files that another
//! store ingests whole ([`crate::Db::ingest_behind`]).

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::blob::BlobWriter;
use crate::error::{Error, IoContext, Result};
use crate::format::internal_key::{self, ValueKind};
use crate::io::FsRef;
use crate::sst::{TableBuilder, TableOptions};
use crate::wal::{blob_file_name, table_file_name};

/// What an exported file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportedKind {
    /// A sorted table (`NNNNNN.sst`).
    Table,
    /// A blob file of separated values (`NNNNNN.blob`).
    Blob,
}

/// One file an [`ExportWriter`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportedFile {
    /// Table or blob file.
    pub kind: ExportedKind,
    /// Its number, from the range the writer was given.
    pub number: u64,
}

impl ExportedFile {
    /// The file's name in a directory.
    pub fn file_name(&self) -> String {
        match self.kind {
            ExportedKind::Table => table_file_name(self.number),
            ExportedKind::Blob => blob_file_name(self.number),
        }
    }
}

/// How an [`ExportWriter`] lays out its files; [`crate::Db::export_options`]
/// gives the store's own.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Format of the tables.
    pub table: TableOptions,
    /// Values of at least this many bytes go to blob files (`None`: all
    /// inline).
    pub blob_threshold: Option<usize>,
    /// Bytes of a separated value kept beside its reference.
    pub blob_head_size: usize,
    /// A blob file is closed once it reaches this size.
    pub blob_file_size: u64,
    /// A table is closed once it reaches about this size.
    pub target_file_size: u64,
}

/// Writes strictly increasing keys and their values as tables with every
/// entry at sequence number 0, separating large values into blob files,
/// under file numbers the receiving store reserved
/// ([`crate::Db::reserve_file_numbers`]), so the files need no rewriting
/// to join it.
pub struct ExportWriter {
    fs: FsRef,
    dir: PathBuf,
    numbers: Range<u64>,
    opts: ExportOptions,
    table: Option<OpenTable>,
    blob: Option<BlobWriter>,
    files: Vec<ExportedFile>,
    last_key: Option<Vec<u8>>,
    bytes: u64,
    scratch: Vec<u8>,
}

struct OpenTable {
    number: u64,
    builder: TableBuilder,
    blob_files: BTreeSet<u64>,
}

impl std::fmt::Debug for ExportWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportWriter")
            .field("dir", &self.dir)
            .field("numbers", &self.numbers)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ExportWriter {
    /// A writer creating files in `dir` (which must exist) on `fs`, numbered
    /// from `numbers`.
    pub fn new(fs: FsRef, dir: &Path, numbers: Range<u64>, opts: ExportOptions) -> Self {
        ExportWriter {
            fs,
            dir: dir.to_path_buf(),
            numbers,
            opts,
            table: None,
            blob: None,
            files: Vec::new(),
            last_key: None,
            bytes: 0,
            scratch: Vec::new(),
        }
    }

    fn next_number(&mut self) -> Result<u64> {
        self.numbers.next().ok_or_else(|| {
            Error::InvalidArgument(
                "the export needs more file numbers than were reserved for it".into(),
            )
        })
    }

    /// Appends `key` → `value`. Keys must strictly increase.
    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.last_key.as_deref().is_some_and(|last| last >= key) {
            return Err(Error::InvalidArgument(
                "exported keys must strictly increase".into(),
            ));
        }
        if self
            .table
            .as_ref()
            .is_some_and(|t| t.builder.estimated_size() >= self.opts.target_file_size)
        {
            self.close_table()?;
        }
        if self.table.is_none() {
            let number = self.next_number()?;
            let path = self.dir.join(table_file_name(number));
            let file = self.fs.create(&path).ctx(&path)?;
            self.table = Some(OpenTable {
                number,
                builder: TableBuilder::new(file, path, self.opts.table.clone()),
                blob_files: BTreeSet::new(),
            });
        }
        let separate = self.opts.blob_threshold.is_some_and(|t| value.len() >= t);
        self.scratch.clear();
        if separate {
            if self
                .blob
                .as_ref()
                .is_some_and(|b| b.len() >= self.opts.blob_file_size)
            {
                self.close_blob()?;
            }
            if self.blob.is_none() {
                let number = self.next_number()?;
                let path = self.dir.join(blob_file_name(number));
                let file = self.fs.create(&path).ctx(&path)?;
                self.blob = Some(BlobWriter::new(file, path, number)?);
            }
            let Some(blob) = self.blob.as_mut() else {
                return Err(Error::Internal("export blob writer missing".into()));
            };
            let r = blob.add(key, 0, value)?;
            internal_key::append_internal_key(&mut self.scratch, key, 0, ValueKind::BlobRef as u8);
            let head = &value[..self.opts.blob_head_size.min(value.len())];
            let Some(t) = self.table.as_mut() else {
                return Err(Error::Internal("export table writer missing".into()));
            };
            t.builder.add(&self.scratch, &r.encode_with_head(head))?;
            if t.blob_files.insert(r.file) {
                t.builder.add_blob_file(r.file);
            }
        } else {
            internal_key::append_internal_key(&mut self.scratch, key, 0, ValueKind::Value as u8);
            let Some(t) = self.table.as_mut() else {
                return Err(Error::Internal("export table writer missing".into()));
            };
            t.builder.add(&self.scratch, value)?;
        }
        self.bytes += (key.len() + value.len()) as u64;
        self.last_key = Some(key.to_vec());
        Ok(())
    }

    /// Ends the current table: keys added from now on go to a new one (to
    /// keep tables of distant key ranges apart, so neither spans the keys
    /// between them).
    pub fn cut(&mut self) -> Result<()> {
        self.close_table()
    }

    /// Key and value bytes added so far.
    pub fn bytes_added(&self) -> u64 {
        self.bytes
    }

    fn close_table(&mut self) -> Result<()> {
        if let Some(t) = self.table.take() {
            t.builder.finish()?;
            self.files.push(ExportedFile {
                kind: ExportedKind::Table,
                number: t.number,
            });
        }
        Ok(())
    }

    fn close_blob(&mut self) -> Result<()> {
        if let Some(b) = self.blob.take() {
            let n = b.finish(&[])?.meta.number;
            self.files.push(ExportedFile {
                kind: ExportedKind::Blob,
                number: n,
            });
        }
        Ok(())
    }

    /// Finishes and syncs every file; returns them, tables in key order.
    pub fn finish(mut self) -> Result<Vec<ExportedFile>> {
        self.close_blob()?;
        self.close_table()?;
        Ok(self.files)
    }
}
