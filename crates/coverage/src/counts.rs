//! Exact execution counts of one module's code, in the module's link-time
//! address space (what `addr2line -e PATH` reads).
//!
//! A block is straight-line code: it is entered only at its start and,
//! once entered, runs to its end (blocks are split after calls), so every
//! instruction of a block was executed exactly [`Block::count`] times.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

/// The counts of one module (an executable or a shared library).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleCoverage {
    /// The module's file as it was mapped.
    pub path: PathBuf,
    /// Its GNU build id, when the file has one.
    pub build_id: Option<Vec<u8>>,
    /// Basic blocks, sorted by start, disjoint.
    pub blocks: Vec<Block>,
    /// Conditional branches, sorted by address.
    pub branches: Vec<Branch>,
    /// Blocks that could not be counted (reported, never hidden).
    pub uncounted: u64,
    /// The file itself, open, when the planner opened it (through
    /// `/proc/PID/map_files`, device and inode checked against the
    /// mapping): what the counts are placed through after the process is
    /// gone, so that `path` is not opened again (a library reached
    /// through its soname link, `libz.so.1 -> libz.so.1.2.13`, would be a
    /// symbolic link there, which profdev does not follow).
    pub file: Option<OpenFile>,
}

/// A module's file held open, shared by every copy of its counts. Two
/// are equal when they are the same file (device and inode), as two runs'
/// counts of one module are.
#[derive(Clone, Debug)]
pub struct OpenFile {
    file: Arc<File>,
    /// Device and inode (0, 0 when fstat failed).
    id: (u64, u64),
}

impl PartialEq for OpenFile {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for OpenFile {}

impl OpenFile {
    /// Hold `file`.
    pub fn new(file: File) -> OpenFile {
        use std::os::unix::fs::MetadataExt;
        let id = file.metadata().map_or((0, 0), |m| (m.dev(), m.ino()));
        OpenFile {
            file: Arc::new(file),
            id,
        }
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The path the kernel gives the open file (`/proc/self/fd/N`): the
    /// file a link led to. None when it was removed since.
    pub fn real_path(&self) -> Option<PathBuf> {
        use std::os::fd::AsRawFd;
        let p = std::fs::read_link(format!("/proc/self/fd/{}", self.file.as_raw_fd())).ok()?;
        let removed = p.as_os_str().as_encoded_bytes().ends_with(b" (deleted)");
        (!removed && p.is_absolute()).then_some(p)
    }
}

impl ModuleCoverage {
    /// The path that names the module's file without a final symbolic
    /// link: `path` itself, or where the link at `path` led when the file
    /// was opened (what a `.prf` header records, to be opened again
    /// later).
    pub fn file_path(&self) -> PathBuf {
        let link = std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.file_type().is_symlink());
        match &self.file {
            Some(f) if link => f.real_path().unwrap_or_else(|| self.path.clone()),
            _ => self.path.clone(),
        }
    }
}

/// One basic block and how often it ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Address of its first instruction.
    pub start: u64,
    /// Address just past its last instruction.
    pub end: u64,
    /// Start addresses of its instructions, ascending; the first is `start`
    /// (a view of the plan's buffer, [`crate::insns`]).
    pub insns: crate::insns::Insns,
    /// Times the block was entered.
    pub count: u64,
}

/// One conditional jump and how its executions went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Branch {
    /// Address of the conditional jump instruction.
    pub addr: u64,
    /// Times it jumped.
    pub taken: u64,
    /// Times it fell through.
    pub not_taken: u64,
}
