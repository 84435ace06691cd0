//! Which module a sample is in: the tasks table, the mapped files opened and
//! identified, and the memo of what each mapping resolved to.
//!
//! Everything here may read files (ELF headers, `stat`, `/proc`), so it runs
//! under its own lock, never under the device's: a reader of the device's
//! files waits for no I/O.

use super::ctl::Wanted;
use profdev_core::{CpuMode, FileId, ProcessVa, Record, Sample};
use profdev_symbolize::{ElfLayout, Mapping, Tasks};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file's modification time (ns since the epoch) and size.
type Version = (i128, u64);

/// A module's identity: its file, not its path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleKey {
    /// Device and inode (generation ignored), as the kernel reported them,
    /// else from `stat`.
    pub file: Option<(u32, u32, u64)>,
    /// The GNU build id, from the mapping record or the file.
    pub build_id: Option<Vec<u8>>,
    /// Modification time (ns since the epoch) and size, only when there is
    /// no build id to tell versions apart.
    pub version: Option<(i128, u64)>,
}

/// What a mapping resolved to.
#[derive(Clone, Debug)]
struct Module {
    /// The number of its [`ModuleKey`], the same for every mapping of the
    /// same file.
    id: u32,
    layout: Arc<ElfLayout>,
    /// (mtime ns, size) of the path when resolved, to notice in-place
    /// rewrites at the next mapping.
    stat: Option<Version>,
}

/// Memo key: a mapping's file as the record described it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct MapKey {
    path: String,
    file: Option<FileId>,
    build_id: Option<Vec<u8>>,
}

/// What became of one user-mode sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// In no file-backed ELF mapping, or its file could not be read.
    Unresolved,
    /// In a module nobody wants, that has no record.
    NotWanted,
    /// At file address `pc` of module `module`. `origin` (name and path)
    /// is given the first time a wanted module is hit: the device makes
    /// its record then.
    Hit {
        module: u32,
        pc: u64,
        origin: Option<Box<(String, String)>>,
    },
}

/// The tasks and modules of one device, and what it has resolved.
pub(super) struct Resolver {
    tasks: Tasks,
    memo: HashMap<MapKey, Result<Module, String>>,
    ids: HashMap<ModuleKey, u32>,
    /// Modules whose record the device has (or is given an origin for).
    recorded: HashSet<u32>,
    exited: Vec<u32>,
    exiting: Vec<u32>,
}

impl Resolver {
    pub(super) fn new() -> Self {
        Resolver {
            tasks: Tasks::new(),
            memo: HashMap::new(),
            ids: HashMap::new(),
            recorded: HashSet::new(),
            exited: Vec::new(),
            exiting: Vec::new(),
        }
    }

    /// A new session describes every task afresh.
    pub(super) fn new_session(&mut self) {
        self.tasks = Tasks::new();
        self.exited.clear();
        self.exiting.clear();
    }

    /// Resolve a batch: one outcome per user-mode sample, in order.
    pub(super) fn batch(&mut self, records: &[Record], wanted: &[Wanted]) -> Vec<Outcome> {
        let mut out = Vec::new();
        for r in records {
            match r {
                Record::Sample(s) => {
                    if let Some(o) = self.sample(s, wanted) {
                        out.push(o);
                    }
                }
                Record::Mmap { path, .. } => {
                    self.revalidate(path);
                    self.tasks.observe(r);
                }
                Record::Exit { pid, tid, .. } if pid == tid => {
                    self.tasks.observe(r);
                    self.exiting.push(*pid);
                }
                _ => self.tasks.observe(r),
            }
        }
        // Forget processes that exited a whole batch ago: a sample of theirs
        // can trail their exit by a little across batches, not by a batch.
        for pid in std::mem::take(&mut self.exited) {
            if self.tasks.has_exited(pid) {
                self.tasks.forget(pid);
            }
        }
        self.exited = std::mem::take(&mut self.exiting);
        out
    }

    /// A new mapping of `path`: forget what we resolved for it if the file
    /// was rewritten in place since.
    fn revalidate(&mut self, path: &str) {
        if !self.memo.keys().any(|k| k.path == path) {
            return;
        }
        let now = stat_version(Path::new(path));
        self.memo.retain(|k, v| {
            k.path != path || matches!(v, Ok(m) if m.stat == now) || v.is_err() && now.is_none()
        });
    }

    fn sample(&mut self, s: &Sample, wanted: &[Wanted]) -> Option<Outcome> {
        if s.mode == CpuMode::Kernel || s.is_idle() {
            return None;
        }
        let va = ProcessVa(s.ip);
        let Some(m) = self.tasks.lookup(s.pid, va).filter(|m| m.is_file()) else {
            return Some(Outcome::Unresolved);
        };
        let key = MapKey {
            path: m.path.clone(),
            file: m.file,
            build_id: m.build_id.clone(),
        };
        let module = match self.memo.get(&key) {
            Some(resolved) => resolved,
            None => {
                if !wants(wanted, m) {
                    return Some(Outcome::NotWanted);
                }
                let resolved = resolve(s.pid, m).map(|(key, layout, stat)| {
                    let next = self.ids.len() as u32;
                    Module {
                        id: *self.ids.entry(key).or_insert(next),
                        layout: Arc::new(layout),
                        stat,
                    }
                });
                self.memo.entry(key).or_insert(resolved)
            }
        };
        let Ok(module) = module else {
            return Some(Outcome::Unresolved);
        };
        let Some(pc) = module.layout.file_addr_of_offset(m.file_offset(va)) else {
            return Some(Outcome::Unresolved);
        };
        let origin = if self.recorded.contains(&module.id) || !wants(wanted, m) {
            None
        } else {
            self.recorded.insert(module.id);
            Some(Box::new((m.basename().to_string(), m.path.clone())))
        };
        Some(Outcome::Hit {
            module: module.id,
            pc: pc.0,
            origin,
        })
    }
}

/// True if `m` is in the list (an empty list wants everything).
fn wants(wanted: &[Wanted], m: &Mapping) -> bool {
    wanted.is_empty()
        || wanted.iter().any(|w| {
            w.raw == m.path || w.raw == m.basename() || w.canonical.as_deref() == Some(&m.path)
        })
}

/// Open the mapped file: exactly the mapped one through /proc while the
/// process lives, else the path.
fn resolve(pid: u32, m: &Mapping) -> Result<(ModuleKey, ElfLayout, Option<Version>), String> {
    let map_file = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
    let path = Path::new(&m.path);
    let (layout, stat) = match ElfLayout::open(&map_file) {
        Ok(layout) => (layout, stat_version(path)),
        Err(_) => {
            let layout = ElfLayout::open(path).map_err(|e| e.to_string())?;
            let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", m.path))?;
            if let Some(f) = m.file {
                let (major, minor) = split_dev(std::os::unix::fs::MetadataExt::dev(&meta));
                let ino = std::os::unix::fs::MetadataExt::ino(&meta);
                if major != 0 && (major, minor, ino) != (f.major, f.minor, f.ino) {
                    return Err(format!("{} was replaced after it was mapped", m.path));
                }
            }
            if let (Some(want), Some(have)) = (&m.build_id, layout.build_id()) {
                if want.as_slice() != have {
                    return Err(format!("{} was replaced after it was mapped", m.path));
                }
            }
            (layout, stat_version(path))
        }
    };
    let file = match m.file {
        Some(f) => Some((f.major, f.minor, f.ino)),
        None => std::fs::metadata(path).ok().map(|meta| {
            let (major, minor) = split_dev(std::os::unix::fs::MetadataExt::dev(&meta));
            (major, minor, std::os::unix::fs::MetadataExt::ino(&meta))
        }),
    };
    let build_id = m
        .build_id
        .clone()
        .or_else(|| layout.build_id().map(<[u8]>::to_vec));
    let version = if build_id.is_none() { stat } else { None };
    let key = ModuleKey {
        file,
        build_id,
        version,
    };
    Ok((key, layout, stat))
}

/// glibc's `major()` and `minor()` of a `st_dev`.
pub(super) fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

fn stat_version(path: &Path) -> Option<Version> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((
        i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        meta.size(),
    ))
}
