//! The objects table: every ELF file mapped by any process of a stream,
//! each held once, shared by every device and command.
//!
//! An [`Object`] is made when its first MMAP record arrives
//! ([`Objects::for_mapping`]): the file is opened then, through
//! `/proc/PID/map_files/START-END` (exactly the mapped file) while the
//! process lives, else by path without following a final link and checked
//! against the device and inode the kernel reported. The descriptor is
//! kept, so everything loaded later — the load layout, the call frame
//! information for unwinding, the symbols and DWARF lines — comes from the
//! file that was mapped, even after it is replaced at its path or
//! unlinked. Each part is loaded lazily, once, on first use.
//!
//! **Identity.** An object is keyed by device and inode, the file's
//! version (modification time and size) and the build id the kernel
//! reported, if any. While the descriptor is held the inode cannot be
//! reused, so a later mapping of the same device and inode is the same
//! object unless the file was rewritten in place (its version moved on).
//! A file rebuilt at the same path (new inode, or same inode rewritten) is
//! a new object, so both builds symbolize correctly. A build id the kernel
//! reported that the file does not carry makes every load fail ("replaced
//! after it was mapped").
//!
//! **No SIGBUS.** Files that only root can write are memory-mapped; any
//! other file is read (see `elf::ElfBytes`), since its owner could
//! truncate it under a mapping and kill the reader.
//!
//! **Sharing.** [`Objects`] is a cheap handle (clone it to share one table
//! between tasks tables and threads). The table holds objects weakly: an
//! object lives while a mapping of some [`crate::Tasks`] (or a device's
//! record) holds it, and its descriptor is closed with it.
//!
//! **Opened at once.** A table is a value, made by whoever builds a
//! server or a command and handed to what reads its records (the
//! devices, through `DevContext`; a command's tasks tables). Its
//! [`Objects::mapping_hook`] goes to the live source factory
//! (`profdev_sample::PerfFactory::with_mapping_hook`): the source hands
//! each MMAP record to [`Objects::prefetch`] the moment it decodes it,
//! before the per-CPU merge holds it back, so the file is opened through
//! `/proc/PID/map_files` while the process most likely still runs. The
//! prefetched object is kept (at most [`PREFETCH_KEPT`] of them, each for
//! at most [`PREFETCH_SECS`] s) until a tasks table of the same table
//! observes the record and takes it. Two tables share nothing: there is
//! no process-wide table or hook.
//!
//! ```
//! use profdev_symbolize::objects::Objects;
//! let objects = Objects::new();
//! let exe = std::env::current_exe().unwrap();
//! let o = objects.open_path(exe.to_str().unwrap()).unwrap();
//! assert!(o.layout().is_ok());
//! let again = objects.open_path(exe.to_str().unwrap()).unwrap();
//! assert_eq!(o.id(), again.id());
//! ```

use crate::elf::{ElfLayout, ElfObject};
use crate::open::{open_object, MappedRange};
use crate::unwind::UnwindInfo;
use profdev_core::FileId;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// What tells two objects apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// Device (major, minor) and inode of the opened file.
    pub file: Option<(u32, u32, u64)>,
    /// Modification time (ns since the epoch) and size when opened.
    pub version: Option<(i128, u64)>,
    /// The build id the kernel reported for the mapping, if it did.
    pub claimed_build_id: Option<Vec<u8>>,
}

/// Where an object's bytes come from.
enum Source {
    /// The descriptor opened when the mapping was reported.
    File(File),
    /// Bytes given directly (the vDSO image; tests and fuzzing).
    Bytes(Arc<[u8]>),
    /// Nothing to read, with the reason.
    Missing(String),
}

/// One ELF object, as mapped.
pub struct Object {
    id: u64,
    path: String,
    key: ObjectKey,
    source: Source,
    layout: OnceLock<Result<Arc<ElfLayout>, String>>,
    unwind: OnceLock<Option<Arc<UnwindInfo>>>,
    symbols: OnceLock<Result<Arc<ElfObject>, String>>,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("id", &self.id)
            .field("path", &self.path)
            .field("key", &self.key)
            .finish()
    }
}

impl Object {
    /// A number unique among the objects of every table of this process
    /// (so objects of two tables never share an id as a cache key).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The path the kernel reported (the file may since have moved).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The last path component.
    pub fn basename(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// Its identity.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// The file as mapped, if it could be opened.
    pub fn file(&self) -> Option<&File> {
        match &self.source {
            Source::File(f) => Some(f),
            _ => None,
        }
    }

    /// The object's bytes (read or mapped), checked against the build id
    /// the kernel reported.
    fn with_bytes<T>(&self, parse: impl FnOnce(&[u8]) -> Result<T, String>) -> Result<T, String> {
        let path = Path::new(&self.path);
        let bytes;
        let data: &[u8] = match &self.source {
            Source::File(f) => {
                bytes = crate::elf::file_bytes(f, path).map_err(|e| e.to_string())?;
                &bytes
            }
            Source::Bytes(b) => b,
            Source::Missing(why) => return Err(why.clone()),
        };
        if let Some(claimed) = &self.key.claimed_build_id {
            let layout = ElfLayout::parse(data, path).map_err(|e| e.to_string())?;
            if layout
                .build_id()
                .is_some_and(|have| have != claimed.as_slice())
            {
                return Err(format!("{} was replaced after it was mapped", self.path));
            }
        }
        parse(data)
    }

    /// The load layout (program headers, build id), loaded on first use.
    pub fn layout(&self) -> Result<Arc<ElfLayout>, String> {
        self.layout
            .get_or_init(|| {
                self.with_bytes(|b| {
                    ElfLayout::parse(b, Path::new(&self.path))
                        .map(Arc::new)
                        .map_err(|e| e.to_string())
                })
            })
            .clone()
    }

    /// Symbols and DWARF (or the detached debug file's), loaded on first
    /// use.
    pub fn symbols(&self) -> Result<Arc<ElfObject>, String> {
        self.symbols
            .get_or_init(|| {
                let path = Path::new(&self.path);
                let elf = match &self.source {
                    Source::File(f) => {
                        // Check the claimed build id on the same bytes.
                        let elf = ElfObject::from_file(f, path).map_err(|e| e.to_string())?;
                        if let (Some(claimed), Some(have)) =
                            (&self.key.claimed_build_id, elf.build_id())
                        {
                            if claimed.as_slice() != have {
                                return Err(format!(
                                    "{} was replaced after it was mapped",
                                    self.path
                                ));
                            }
                        }
                        elf
                    }
                    _ => {
                        self.with_bytes(|b| ElfObject::parse(b, path).map_err(|e| e.to_string()))?
                    }
                };
                Ok(Arc::new(elf.with_separate_debug_info()))
            })
            .clone()
    }

    /// What the unwinder needs (`.eh_frame` and friends), on first use.
    pub(crate) fn unwind_info(&self) -> Option<Arc<UnwindInfo>> {
        self.unwind
            .get_or_init(|| {
                self.with_bytes(|b| UnwindInfo::parse(b).ok_or_else(String::new))
                    .ok()
                    .map(Arc::new)
            })
            .clone()
    }

    /// The current version of the kept file, to tell whether it was
    /// rewritten in place since it was opened.
    fn still_current(&self) -> bool {
        match &self.source {
            Source::File(f) => f.metadata().ok().map(|m| version(&m)) == self.key.version,
            _ => true,
        }
    }
}

/// Most prefetched objects kept for a tasks table to take.
pub const PREFETCH_KEPT: usize = 4096;

/// How long a prefetched object is kept for a tasks table to take.
pub const PREFETCH_SECS: u64 = 30;

/// Reads an object's bytes by path instead of opening it (tests, fuzzing).
pub type Loader = dyn Fn(&str) -> Option<Vec<u8>> + Send + Sync;

#[derive(Default)]
struct Table {
    by_key: HashMap<ObjectKey, Weak<Object>>,
    /// The latest object per device and inode, to find it again without
    /// opening the file.
    by_inode: HashMap<(u32, u32, u64), Weak<Object>>,
    vdso: Option<Arc<Object>>,
    opened: u64,
    failed: u64,
    /// Objects opened by [`Objects::prefetch`], kept until taken.
    prefetched: std::collections::VecDeque<(std::time::Instant, Arc<Object>)>,
}

/// Counts of the objects table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectStats {
    /// Objects alive now.
    pub live: usize,
    /// Files opened (one per distinct object).
    pub opened: u64,
    /// Mappings whose file could not be opened or was not the mapped one.
    pub failed: u64,
}

/// The shared objects table (a handle: clones share it).
#[derive(Clone, Default)]
pub struct Objects {
    table: Arc<Mutex<Table>>,
    loader: Option<Arc<Loader>>,
}

impl fmt::Debug for Objects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Objects")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Objects {
    /// A table that opens the files the kernel reported. Raises the soft
    /// limit on open descriptors to the hard limit, since each object
    /// keeps its file open.
    pub fn new() -> Self {
        raise_nofile_limit();
        Objects::default()
    }

    /// A table that gets every object's bytes from `load` by path
    /// (`None`: unreadable), for tests and fuzzing. Identity is then the
    /// path and the claimed build id.
    pub fn with_loader(load: impl Fn(&str) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        Objects {
            table: Arc::default(),
            loader: Some(Arc::new(load)),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts so far.
    pub fn stats(&self) -> ObjectStats {
        let t = self.table();
        ObjectStats {
            live: t.by_key.values().filter(|w| w.strong_count() > 0).count(),
            opened: t.opened,
            failed: t.failed,
        }
    }

    fn insert(&self, t: &mut Table, path: &str, key: ObjectKey, source: Source) -> Arc<Object> {
        let o = Arc::new(Object {
            id: next_object_id(),
            path: path.to_string(),
            key: key.clone(),
            source,
            layout: OnceLock::new(),
            unwind: OnceLock::new(),
            symbols: OnceLock::new(),
        });
        // Drop dead entries now and then, so the maps stay the size of
        // what is alive.
        if t.by_key.len() >= 64 && t.by_key.len().is_power_of_two() {
            t.by_key.retain(|_, w| w.strong_count() > 0);
            t.by_inode.retain(|_, w| w.strong_count() > 0);
        }
        if let Some(f) = key.file {
            t.by_inode.insert(f, Arc::downgrade(&o));
        }
        t.by_key.insert(key, Arc::downgrade(&o));
        o
    }

    /// The object a mapping maps: `[vdso]` is this process's own vDSO
    /// image (the same on every 64-bit process of this kernel); a path
    /// starting with `/` is opened as the module doc describes. Anything
    /// else (`//anon`, `[heap]`, `[stack]`…) has no object.
    pub fn for_mapping(
        &self,
        pid: u32,
        range: std::ops::Range<u64>,
        path: &str,
        file: Option<FileId>,
        build_id: Option<&[u8]>,
    ) -> Result<Arc<Object>, String> {
        if path == "[vdso]" {
            return Ok(self.vdso());
        }
        if !path.starts_with('/') || path.starts_with("//") {
            return Err(format!("{path} is not a file"));
        }
        let claimed = build_id.filter(|b| !b.is_empty()).map(<[u8]>::to_vec);
        if let Some(load) = &self.loader {
            let key = ObjectKey {
                file: None,
                version: None,
                claimed_build_id: claimed,
            };
            let mut t = self.table();
            let key = ObjectKey {
                // The path stands for the inode.
                file: Some((0, 0, fxhash(path))),
                ..key
            };
            if let Some(o) = t.by_key.get(&key).and_then(Weak::upgrade) {
                return Ok(o);
            }
            let source = match load(path) {
                Some(b) => Source::Bytes(b.into()),
                None => Source::Missing(format!("cannot read {path}")),
            };
            return Ok(self.insert(&mut t, path, key, source));
        }
        // Known already: the same inode, held open and not rewritten since.
        if let Some(f) = file {
            let inode = (f.major, f.minor, f.ino);
            let known = self.table().by_inode.get(&inode).and_then(Weak::upgrade);
            if let Some(o) = known.filter(|o| o.key.claimed_build_id == claimed) {
                if o.still_current() {
                    return Ok(o);
                }
            }
        }
        let at = MappedRange {
            pid,
            start: range.start,
            end: range.end,
        };
        let opened = open_object(Path::new(path), Some(at)).map_err(|e| e.to_string());
        let (handle, meta) = match opened.and_then(|(f, _)| {
            let meta = f
                .metadata()
                .map_err(|e| format!("cannot stat {path}: {e}"))?;
            Ok((f, meta))
        }) {
            Ok(x) => x,
            Err(e) => {
                self.table().failed += 1;
                return Err(e);
            }
        };
        let have = inode_of(&meta);
        if let Some(f) = file {
            // A reported device of 0 (some file systems) says nothing.
            if f.major != 0 && (f.major, f.minor, f.ino) != have {
                self.table().failed += 1;
                return Err(format!("{path} was replaced after it was mapped"));
            }
        }
        let key = ObjectKey {
            file: Some(have),
            version: Some(version(&meta)),
            claimed_build_id: claimed,
        };
        let mut t = self.table();
        if let Some(o) = t.by_key.get(&key).and_then(Weak::upgrade) {
            return Ok(o);
        }
        t.opened += 1;
        Ok(self.insert(&mut t, path, key, Source::File(handle)))
    }

    /// An object for a file named by the user (a command line, a module
    /// directory's path): opened now by path, following no final link.
    pub fn open_path(&self, path: &str) -> Result<Arc<Object>, String> {
        if let Some(load) = &self.loader {
            let _ = load;
            return self.for_mapping(0, 0..0, path, None, None);
        }
        let (f, _) = open_object(Path::new(path), None).map_err(|e| e.to_string())?;
        let meta = f
            .metadata()
            .map_err(|e| format!("cannot stat {path}: {e}"))?;
        let key = ObjectKey {
            file: Some(inode_of(&meta)),
            version: Some(version(&meta)),
            claimed_build_id: None,
        };
        let mut t = self.table();
        if let Some(o) = t.by_key.get(&key).and_then(Weak::upgrade) {
            return Ok(o);
        }
        t.opened += 1;
        Ok(self.insert(&mut t, path, key, Source::File(f)))
    }

    /// The hook a live source calls with each MMAP record as it decodes
    /// it: [`Objects::prefetch`] into this table.
    ///
    /// ```
    /// use profdev_symbolize::Objects;
    /// let objects = Objects::new();
    /// let hook = objects.mapping_hook(); // for PerfFactory::with_mapping_hook
    /// # drop(hook);
    /// ```
    pub fn mapping_hook(&self) -> profdev_core::MappingHook {
        let objects = self.clone();
        profdev_core::MappingHook::new(move |r| objects.prefetch(r))
    }

    /// Open the object of an MMAP record now and keep it for a while, so
    /// that the tasks table that observes the record later finds it even
    /// if the process has exited and its file was deleted meanwhile.
    pub fn prefetch(&self, record: &profdev_core::Record) {
        let profdev_core::Record::Mmap {
            pid,
            addr,
            len,
            path,
            file,
            build_id,
            ..
        } = record
        else {
            return;
        };
        if !path.starts_with('/') || path.starts_with("//") {
            return;
        }
        let end = addr.saturating_add(*len);
        let Ok(object) = self.for_mapping(*pid, *addr..end, path, *file, build_id.as_deref())
        else {
            return;
        };
        let now = std::time::Instant::now();
        let mut t = self.table();
        while t.prefetched.len() >= PREFETCH_KEPT
            || t.prefetched
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at).as_secs() >= PREFETCH_SECS)
        {
            t.prefetched.pop_front();
        }
        t.prefetched.push_back((now, object));
    }

    /// This process's vDSO, as an object.
    pub fn vdso(&self) -> Arc<Object> {
        let mut t = self.table();
        if let Some(o) = &t.vdso {
            return o.clone();
        }
        let source = match own_vdso() {
            Some(b) => Source::Bytes(b.into()),
            None => Source::Missing("no vDSO in /proc/self/maps".into()),
        };
        let key = ObjectKey {
            file: None,
            version: None,
            claimed_build_id: None,
        };
        let o = Arc::new(Object {
            id: next_object_id(),
            path: "[vdso]".into(),
            key,
            source,
            layout: OnceLock::new(),
            unwind: OnceLock::new(),
            symbols: OnceLock::new(),
        });
        t.vdso = Some(o.clone());
        o
    }
}

/// A fresh object id: a counter of the process, only so ids are unique
/// across tables (it holds no object and no mapping).
fn next_object_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn inode_of(meta: &std::fs::Metadata) -> (u32, u32, u64) {
    use std::os::unix::fs::MetadataExt;
    let (major, minor) = split_dev(meta.dev());
    (major, minor, meta.ino())
}

fn version(meta: &std::fs::Metadata) -> (i128, u64) {
    use std::os::unix::fs::MetadataExt;
    (
        i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
        meta.size(),
    )
}

/// glibc's `major()` and `minor()` of a `st_dev`.
pub fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// A stable 64-bit hash of a path (FNV-1a), standing for an inode when
/// objects come from a loader.
fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Raise the soft limit on open files to the hard limit (each object keeps
/// its file open; the default soft limit of 1024 is low for a system-wide
/// session).
fn raise_nofile_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit with a valid struct pointer.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    });
}

/// A copy of this process's vDSO image, found in /proc/self/maps.
pub(crate) fn own_vdso() -> Option<Vec<u8>> {
    let maps = crate::maps::read_self().ok()?;
    let vdso = maps.iter().find(|m| m.path == "[vdso]")?;
    let start = usize::try_from(vdso.start).ok()?;
    let end = usize::try_from(vdso.end).ok()?;
    if start == 0 || end <= start || end - start > 1 << 20 {
        return None;
    }
    // SAFETY: the kernel maps the vDSO readable at this range for the whole
    // life of the process and never unmaps or changes it.
    let image = unsafe { std::slice::from_raw_parts(start as *const u8, end - start) };
    image.starts_with(b"\x7fELF").then(|| image.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn id_of(path: &Path) -> FileId {
        let m = std::fs::metadata(path).unwrap();
        let (major, minor) = split_dev(m.dev());
        FileId {
            major,
            minor,
            ino: m.ino(),
            ino_generation: 0,
        }
    }

    /// The file replaced at its path after the mapping: the object still
    /// reads the one that was mapped (the descriptor was kept).
    #[test]
    fn an_object_outlives_its_path() {
        let d = tempfile::tempdir().unwrap();
        let prog = d.path().join("prog");
        std::fs::copy(std::env::current_exe().unwrap(), &prog).unwrap();
        let path = prog.to_str().unwrap();
        let objects = Objects::new();
        let o = objects
            .for_mapping(0, 0..0, path, Some(id_of(&prog)), None)
            .unwrap();
        let bid = o.layout().unwrap().build_id().unwrap().to_vec();
        std::fs::remove_file(&prog).unwrap();
        std::fs::write(&prog, b"not elf any more").unwrap();
        let elf = o.symbols().unwrap();
        assert_eq!(elf.build_id(), Some(&bid[..]));
        assert!(!elf.symbols().is_empty());
        // A new mapping of the new file is a new object, which fails.
        let e = objects
            .for_mapping(0, 0..0, path, Some(id_of(&prog)), None)
            .unwrap();
        assert_ne!(e.id(), o.id());
        assert!(e.layout().is_err());
        // A mapping of the old inode, reported after the path changed: the
        // same object, found without opening the path.
        let again = objects
            .for_mapping(
                0,
                0..0,
                path,
                o.key().file.map(|(a, b, c)| FileId {
                    major: a,
                    minor: b,
                    ino: c,
                    ino_generation: 0,
                }),
                None,
            )
            .unwrap();
        assert_eq!(again.id(), o.id());
        assert_eq!(objects.stats().opened, 2);
    }

    /// A rewrite in place (same inode, later version) is a new object; the
    /// same file mapped twice is one.
    #[test]
    fn versions_and_sharing() {
        let d = tempfile::tempdir().unwrap();
        let prog = d.path().join("prog");
        std::fs::copy(std::env::current_exe().unwrap(), &prog).unwrap();
        let path = prog.to_str().unwrap();
        let objects = Objects::new();
        let a = objects
            .for_mapping(0, 0..0, path, Some(id_of(&prog)), None)
            .unwrap();
        let b = objects
            .for_mapping(0, 0..0, path, Some(id_of(&prog)), None)
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let later = std::fs::metadata(&prog).unwrap().modified().unwrap()
            + std::time::Duration::from_secs(1);
        File::options()
            .write(true)
            .open(&prog)
            .unwrap()
            .set_modified(later)
            .unwrap();
        let c = objects
            .for_mapping(0, 0..0, path, Some(id_of(&prog)), None)
            .unwrap();
        assert_ne!(a.id(), c.id());
        // A mapping reported with a device and inode that are not the
        // file's: refused.
        let mut wrong = id_of(&prog);
        wrong.ino += 1;
        assert!(objects
            .for_mapping(0, 0..0, path, Some(wrong), None)
            .unwrap_err()
            .contains("replaced after it was mapped"));
        // A claimed build id the file does not carry: every load fails.
        let x = objects
            .for_mapping(0, 0..0, path, None, Some(&[7; 20]))
            .unwrap();
        assert!(x
            .layout()
            .unwrap_err()
            .contains("replaced after it was mapped"));
        assert!(x.symbols().is_err());
        assert!(x.unwind_info().is_none());
        drop((a, b, c, x));
        assert_eq!(objects.stats().live, 0);
    }

    /// A prefetched object is kept for the tasks table that observes the
    /// record later, even once the file is deleted.
    #[test]
    fn prefetch_keeps_the_object_for_the_later_observer() {
        let d = tempfile::tempdir().unwrap();
        let prog = d.path().join("prog");
        std::fs::copy(std::env::current_exe().unwrap(), &prog).unwrap();
        let objects = Objects::new();
        let record = profdev_core::Record::Mmap {
            pid: u32::MAX,
            tid: u32::MAX,
            addr: 0x1000,
            len: 0x1000,
            pgoff: 0,
            path: prog.to_str().unwrap().into(),
            file: Some(id_of(&prog)),
            build_id: None,
            time: 5,
        };
        objects.prefetch(&record);
        std::fs::remove_file(&prog).unwrap();
        assert_eq!(objects.stats().live, 1, "kept by the prefetch");
        let mut tasks = crate::Tasks::with_objects(objects.clone());
        tasks.observe(&record);
        let m = tasks
            .lookup(u32::MAX, profdev_core::ProcessVa(0x1800))
            .unwrap();
        let o = m.object.as_ref().expect("the prefetched object");
        assert!(o.layout().is_ok(), "read through the kept descriptor");
        assert_eq!(objects.stats().opened, 1);
        // Not a file: nothing prefetched.
        objects.prefetch(&profdev_core::Record::Mmap {
            pid: 1,
            tid: 1,
            addr: 0x1000,
            len: 0x1000,
            pgoff: 0,
            path: "//anon".into(),
            file: None,
            build_id: None,
            time: 6,
        });
        assert_eq!(objects.stats().opened, 1);
    }

    /// Two tables built independently share nothing: what one's mapping
    /// hook prefetched, the other neither holds nor finds, and the same
    /// file is a different object (with a different id) in each. No
    /// process-wide table or hook remains.
    #[test]
    fn two_tables_share_nothing() {
        let d = tempfile::tempdir().unwrap();
        let prog = d.path().join("prog");
        std::fs::copy(std::env::current_exe().unwrap(), &prog).unwrap();
        let record = profdev_core::Record::Mmap {
            pid: u32::MAX,
            tid: u32::MAX,
            addr: 0x1000,
            len: 0x1000,
            pgoff: 0,
            path: prog.to_str().unwrap().into(),
            file: Some(id_of(&prog)),
            build_id: None,
            time: 5,
        };
        let (a, b) = (Objects::new(), Objects::new());
        a.mapping_hook().reported(&record);
        assert_eq!((a.stats().opened, a.stats().live), (1, 1));
        assert_eq!(b.stats(), ObjectStats::default(), "b saw a's prefetch");
        // Deleted now: a still has the file it opened at the mapping, b
        // has nothing to open.
        std::fs::remove_file(&prog).unwrap();
        let observe = |objects: &Objects| {
            let mut tasks = crate::Tasks::with_objects(objects.clone());
            tasks.observe(&record);
            tasks
                .lookup(u32::MAX, profdev_core::ProcessVa(0x1800))
                .and_then(|m| m.object.clone())
        };
        let from_a = observe(&a).expect("a's prefetched object");
        assert!(observe(&b).is_none(), "b found a's object");
        assert_eq!(b.stats().failed, 1);
        // The same file opened by both: two objects, two ids.
        let exe = std::env::current_exe().unwrap();
        let (oa, ob) = (
            a.open_path(exe.to_str().unwrap()).unwrap(),
            b.open_path(exe.to_str().unwrap()).unwrap(),
        );
        assert!(!Arc::ptr_eq(&oa, &ob));
        assert_ne!(oa.id(), ob.id());
        assert_ne!(from_a.id(), ob.id());
    }

    /// A file anyone may write is read, not mapped; a root-only one may be
    /// mapped.
    #[test]
    fn only_root_only_files_are_mapped() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let meta = |mode| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
            std::fs::metadata(&f).unwrap()
        };
        let root = rustix_uid() == 0;
        assert_eq!(crate::elf::only_root_writes(&meta(0o644)), root);
        assert!(!crate::elf::only_root_writes(&meta(0o666)));
        assert!(!crate::elf::only_root_writes(&meta(0o664)));
    }

    fn rustix_uid() -> u32 {
        // SAFETY: getuid has no preconditions.
        unsafe { libc::getuid() }
    }
}
