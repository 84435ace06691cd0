//! Files as data: qids, directory entries and channels.

use crate::dev::Dev;
use crate::error::DevError;
use std::any::Any;

/// A file's identity within its device. `path` is chosen by the device and
/// unique within it; the top bit marks directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Qid(u64);

const DIR_BIT: u64 = 1 << 63;

impl Qid {
    /// The device's top directory.
    pub const ROOT: Qid = Qid(DIR_BIT);

    /// A plain file numbered `n` (n < 2^63).
    pub const fn file(n: u64) -> Qid {
        Qid(n & !DIR_BIT)
    }

    /// A directory numbered `n` (n < 2^63, n != 0: 0 is the root).
    pub const fn dir(n: u64) -> Qid {
        Qid(n | DIR_BIT)
    }

    /// True for directories.
    pub const fn is_dir(self) -> bool {
        self.0 & DIR_BIT != 0
    }

    /// The number without the directory bit.
    pub const fn number(self) -> u64 {
        self.0 & !DIR_BIT
    }

    /// The raw value (stable while the file exists), for inode numbering.
    pub const fn raw(self) -> u64 {
        self.0
    }
}

/// One entry of a directory: name, qid, permission bits, length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// File name.
    pub name: String,
    /// Identity.
    pub qid: Qid,
    /// Permission bits (0o600 and the like); the owner is whoever mounted.
    pub perm: u16,
    /// Length in bytes (0 for directories and control files).
    pub length: u64,
}

impl DirEntry {
    /// A file entry.
    pub fn file(name: &str, qid: Qid, perm: u16, length: u64) -> Self {
        DirEntry {
            name: name.to_string(),
            qid,
            perm,
            length,
        }
    }

    /// A directory entry.
    pub fn dir(name: &str, qid: Qid, perm: u16) -> Self {
        DirEntry {
            name: name.to_string(),
            qid,
            perm,
            length: 0,
        }
    }
}

/// How a file was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only.
    Read,
    /// Write only.
    Write,
    /// Read and write.
    ReadWrite,
}

impl OpenMode {
    /// True if the mode allows reading.
    pub fn readable(self) -> bool {
        matches!(self, OpenMode::Read | OpenMode::ReadWrite)
    }

    /// True if the mode allows writing.
    pub fn writable(self) -> bool {
        matches!(self, OpenMode::Write | OpenMode::ReadWrite)
    }
}

/// An open file: the qid, the mode, and the device's per-open state
/// (a snapshot, a session, a read cursor).
pub struct Chan {
    /// Which file.
    pub qid: Qid,
    /// How it was opened.
    pub mode: OpenMode,
    /// Per-open state owned by the device.
    pub aux: Option<Box<dyn Any + Send>>,
    /// The open file has no position, like a pipe or SVR4's `/dev/prf`:
    /// every read(2) and write(2) starts at offset 0 (a large one reaches
    /// the device in pieces at increasing offsets), and lseek and pread
    /// fail (the server opens it FOPEN_STREAM). False unless the device's
    /// `open` sets it.
    pub stream: bool,
    /// Who made the request being served: the file server sets it before
    /// every read, write and ioctl (the FUSE request's uid, gid and pid),
    /// so a control message that names a process can be checked with
    /// [`crate::access::ptrace_may_attach`]. `None` when a device is driven
    /// directly, in process: the caller acts as itself.
    pub cred: Option<crate::access::Cred>,
}

impl Chan {
    /// A channel with no per-open state.
    pub fn new(qid: Qid, mode: OpenMode) -> Self {
        Chan {
            qid,
            mode,
            aux: None,
            stream: false,
            cred: None,
        }
    }

    /// The per-open state, if it is a `T`.
    pub fn aux_mut<T: 'static>(&mut self) -> Option<&mut T> {
        self.aux.as_mut().and_then(|a| a.downcast_mut::<T>())
    }
}

impl std::fmt::Debug for Chan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chan")
            .field("qid", &self.qid)
            .field("mode", &self.mode)
            .field("aux", &self.aux.is_some())
            .finish()
    }
}

/// Find `target` below `dir` by walking the device's tree.
pub fn find<D: Dev + ?Sized>(dev: &D, dir: Qid, target: Qid) -> Result<DirEntry, DevError> {
    if target == Qid::ROOT {
        return Ok(DirEntry::dir(".", Qid::ROOT, 0o500));
    }
    for entry in dev.gen(dir)? {
        if entry.qid == target {
            return Ok(entry);
        }
        if entry.qid.is_dir() {
            if let Ok(found) = find(dev, entry.qid, target) {
                return Ok(found);
            }
        }
    }
    Err(DevError::NotFound)
}

/// Look `name` up in directory `dir`.
pub fn walk<D: Dev + ?Sized>(dev: &D, dir: Qid, name: &str) -> Result<DirEntry, DevError> {
    dev.gen(dir)?
        .into_iter()
        .find(|e| e.name == name)
        .ok_or(DevError::NotFound)
}

/// The part of `data` a read of `count` bytes at `offset` returns.
pub fn read_slice(data: &[u8], offset: u64, count: u32) -> Vec<u8> {
    let len = data.len() as u64;
    if offset >= len {
        return Vec::new();
    }
    let end = offset.saturating_add(u64::from(count)).min(len);
    data[offset as usize..end as usize].to_vec()
}
