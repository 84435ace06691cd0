//! The module files mprof symbolizes through, opened once per profdev
//! process and shared ([`open`]): the scan of system code before the run,
//! the tables after it and the stacks of `--folded`, `--pprof` and
//! `--peak` read one object, and its DWARF is parsed once. Where the time
//! goes otherwise idle it is spent ahead: the C library's and the dynamic
//! loader's debug information (the largest a run meets, and met by every
//! run: 50 ms for glibc's, compressed) loads while CMD runs
//! ([`prefetch`]), and the modules of a report are symbolized several at
//! once, each on its own thread ([`warm`]), before the tables are laid
//! out one module after the other as before. Nothing shown changes: an
//! object is used again only while its file is the one opened (device,
//! inode, size and modification time), else it is opened anew.

use profdev_core::FileAddr;
use profdev_symbolize::{ElfError, ElfObject};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A file's identity when it was opened: device, inode, size and
/// modification time (seconds, nanoseconds).
type Stamp = (u64, u64, u64, i64, i64);

/// The identity of the file at `path` (not followed).
fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// One path's object, if opened, and the file's identity then.
type Slot = Arc<Mutex<Option<(Stamp, Arc<ElfObject>)>>>;

/// The objects opened, by the path they were opened at.
fn cache() -> &'static Mutex<HashMap<PathBuf, Slot>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Slot>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The object at `path` with its detached debug information
/// (`ElfObject::open`, then `with_separate_debug_info`): the one opened
/// before while the file is the same, else opened now. Two threads
/// asking for one path at once open it once: the second waits. Errors
/// are not kept (the next call tries again).
pub fn open(path: &Path) -> Result<Arc<ElfObject>, ElfError> {
    let slot = {
        let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
        cache.entry(path.to_path_buf()).or_default().clone()
    };
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    // Taken before the open: a file replaced in between is opened again
    // at the next call.
    let now = stamp(path);
    if let (Some((then, obj)), Some(now)) = (slot.as_ref(), now) {
        if *then == now {
            return Ok(obj.clone());
        }
    }
    let obj = Arc::new(ElfObject::open(path)?.with_separate_debug_info());
    *slot = now.map(|now| (now, obj.clone()));
    Ok(obj)
}

/// The modules whose debug information nearly every run needs, for
/// [`prefetch`]: the C library and the dynamic loader profdev itself runs
/// with (those of nearly every program of the system; another's are
/// merely not ready), by their real paths.
pub fn likely_modules() -> Vec<PathBuf> {
    let Ok(maps) = profdev_symbolize::maps::read_file(Path::new("/proc/self/maps")) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = Vec::new();
    for m in maps.iter().filter(|m| m.is_file()) {
        let path = Path::new(m.file_path());
        let likely = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("ld-linux"));
        if let Some(real) = likely.then(|| std::fs::canonicalize(path).ok()).flatten() {
            if !out.contains(&real) {
                out.push(real);
            }
        }
    }
    out
}

/// Open [`likely_modules`] and load their DWARF on a thread of their
/// own, while the caller goes on (to run CMD): the report then finds them
/// ready ([`open`]).
pub fn prefetch() {
    let spawned = std::thread::Builder::new()
        .name("mprof-prefetch".into())
        .spawn(move || {
            for m in likely_modules() {
                if let Ok(obj) = open(&m) {
                    obj.load_debug_info();
                }
            }
        });
    // No thread: the report opens them itself.
    drop(spawned);
}

/// Open each module of `modules` (a path, and the return addresses to
/// symbolize there) and look up what a report asks of its addresses
/// (each call's frames, and its function's frames and declaration),
/// several modules at once (one thread each, as many as there are CPUs,
/// the most addresses first): the lookups that follow find the objects
/// open and their DWARF parsed.
pub fn warm(modules: &[(PathBuf, Vec<u64>)]) {
    let mut order: Vec<&(PathBuf, Vec<u64>)> = modules.iter().collect();
    order.sort_by_key(|(_, pcs)| std::cmp::Reverse(pcs.len()));
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(order.len());
    if threads < 2 {
        return; // the lookups themselves open and parse, once
    }
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                while let Some((path, pcs)) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let Ok(obj) = open(path) else {
                        continue;
                    };
                    for &p in pcs {
                        let pc = FileAddr(p.saturating_sub(1));
                        obj.frames(pc);
                        if let Some(addr) = obj.symbol(pc).map(|(s, _)| s.addr) {
                            obj.frames(FileAddr(addr));
                            obj.function_decl(FileAddr(addr));
                        }
                    }
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_opened_once_while_its_file_stays_the_same() {
        let Some(t) = ["/bin/true", "/usr/bin/true"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.is_file())
        else {
            eprintln!("skipped: no true(1) to copy");
            return;
        };
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("prog");
        std::fs::copy(t, &f).unwrap();
        let a = open(&f).unwrap();
        let b = open(&f).unwrap();
        assert!(
            Arc::ptr_eq(&a, &b),
            "the second open takes the first object"
        );
        // Replaced (another inode at the path): opened anew.
        let g = d.path().join("new");
        std::fs::copy(t, &g).unwrap();
        std::fs::rename(&g, &f).unwrap();
        let c = open(&f).unwrap();
        assert!(!Arc::ptr_eq(&a, &c), "a replaced file is read again");
        assert!(Arc::ptr_eq(&c, &open(&f).unwrap()));
        // Gone: an error, and nothing kept.
        std::fs::remove_file(&f).unwrap();
        assert!(open(&f).is_err());
    }

    #[test]
    fn the_likely_modules_are_this_programs_c_library_and_loader() {
        let likely = likely_modules();
        let names: Vec<_> = likely.iter().filter_map(|m| m.file_name()).collect();
        assert!(
            names
                .iter()
                .any(|n| n.to_string_lossy().starts_with("libc.so")),
            "{likely:?}"
        );
        assert!(likely.iter().all(|m| m.is_absolute() && m.is_file()));
    }
}
