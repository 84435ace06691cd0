//! Launch mode: run a command with the coverage runtime preloaded and
//! collect exact block counts.
//!
//! **The runtime** (`c/covrt.c`, built by `build.rs` into
//! `libprofdev_cov.so`, embedded as [`RUNTIME`]) is written to a private
//! 0700 directory and preloaded (`LD_PRELOAD`). At start, and after every
//! `dlopen`, it asks the [`Server`] (a unix socket in that directory,
//! `PROFDEV_COV_SOCK`; one connection per module, so a forked child gets
//! its own replies) for each module it has not covered yet; profdev plans
//! the module once per file ([`crate::plan`], cached by device and inode,
//! and on disk by content: [`crate::cache`]),
//! encodes its trampolines for the area the runtime mapped
//! ([`crate::encode`]; once per distance between area and module, reused
//! by every later load at that distance), and the runtime writes the
//! patches. Threads created
//! with `pthread_create` get their own counter array; a forked child
//! reports what it ran after the fork; an image that `exec`s reports
//! before, and the new image is covered afresh; reports are files in the
//! directory's `out/` (`PROFDEV_COV_OUT`).
//!
//! **The protocol** (one connection per module, lines in ASCII, numbers
//! in hex unless said otherwise):
//!
//! ```text
//! runtime: MOD <pid dec> <dev dec> <ino dec> <bias> <lo> <hi> <path>
//! profdev: SKIP                       (not selected)
//!        | SIZE <area bytes> <counters> [<offset>]
//! runtime: AT <area address> <first counter>
//! profdev: CODE <code bytes> <patches> <module id>
//!          then the code, then 24 bytes per patch (u64 address, u64
//!          entry, u32 kind, u32 length, little-endian)
//! runtime: DONE <patches skipped>, then `S <address>` per skipped patch
//! ```
//!
//! `<offset>`, when present, is the distance (area address minus bias,
//! modulo 2^64) of an area this module's code was already encoded for: a
//! runtime that can map its area at `bias + offset` gets that encoding
//! copied (its counters moved to the first counter it chose, its patches
//! to its bias and area: [`crate::encode::Encoded::code_for`]) instead of
//! a new one. The code sent is always for the area and first counter the
//! runtime named.
//!
//! The runtime's counter indices start at
//! [`crate::encode::RESERVED_SLOTS`]: the slots below are its own (the
//! recorder's address, the thread's table of call targets).
//!
//! **Call targets** ([`Server::set_call_targets`], what `profdev gmon
//! --exact` turns on): the encodings record the target of every indirect
//! call and possible tail jump (see [`crate::encode`]'s "Call targets").
//! The runtime keeps, per thread, a table of (site, target) -> count (no
//! atomics: each thread writes its own; a report sums every thread's,
//! those of threads that exited included). A forked child reports only
//! what it recorded after the fork, an image that execs what it recorded
//! before, as for the counters. At report time the runtime resolves each
//! target against the modules mapped then (`dl_iterate_phdr`): the module
//! mapped from a file that holds it, and its link-time address (the
//! runtime, not the server, resolves: a forked child sends no `MOD` for
//! the modules it inherited, and its own map is what its calls went to;
//! a library unloaded before the report leaves its targets outside every
//! module). The
//! [`Server`] sums the records of every report per (module, site,
//! target) ([`Server::call_targets`]).
//!
//! **Reports** (`cov.PID.SEQ`, one per process image): `profdev-coverage
//! 1`, `pid N`, `traps N`, then per module `M <id dec> <first counter dec>
//! <counters dec>` followed by `<index> <count>` lines for the counters
//! not zero; then, with call targets, one line per (site, target) of this
//! image: `I <module id dec> <block> <count> <link-time target> <path>`
//! (the target in the module mapped from `path`, an absolute path, last
//! on the line) or `I <module id dec> <block> <count> <run-time target>`
//! (outside every module mapped from a file: the vDSO, JIT code), the site
//! being the last instruction of block `<block>` of module `<module id>`;
//! `ilost <n>` when records were lost (a recording interrupted by a signal
//! handler that records too, or a thread's table of 2^19 pairs full); and
//! `end`.
//!
//! **Attach entry** (for `startcp PID`): the injector dlopens the runtime
//! in the stopped process (every thread stopped), and calls
//! `int profdev_cov_attach(const char *config, const uint64_t *pcs,
//! uint64_t npcs, uint64_t *gs_out, uint64_t nthreads)`, where `config` is
//! `"<socket path>\n<report dir>\n"` of a [`Server`] (see
//! [`Server::attach_config`]), `pcs` the stopped threads' program
//! counters (a patch whose bytes would hold one is skipped and its block
//! reported uncounted), and `gs_out` an array of `nthreads` that receives
//! one counter array per thread: before resuming thread `i` the injector
//! must set its GS base to `gs_out[i]` (PTRACE_SETREGS `gs_base`, or
//! arch_prctl(ARCH_SET_GS) called in the thread); a thread resumed without
//! it faults at its first count. The calling thread gets its own array.
//! It returns 0, or -1 when the runtime could not start (nothing patched).
//! `void profdev_cov_flush(void)` writes a report of the counts so far
//! (later reports hold only what ran after it); a report is also written
//! at exit. Threads created after attach inherit their creator's array
//! (GS is copied by clone): their counts are kept but may race.
//!
//! **Bounds.** The server may run as root (the device's `startcp`,
//! `profdev cprof -p`) for a process of another user, who chooses what
//! that process maps and writes into `out/`. So:
//!
//! * A module is read only as far as its ELF headers name
//!   ([`crate::image`]); a file that is not an x86-64 ELF object is
//!   refused from its first 64 bytes. For a process of a user other than
//!   root and profdev's own (the connection's SO_PEERCRED uid; in
//!   [`Server::preplan`] the process's; and every request of a run opened
//!   to such a user by [`Server::share_with`]) a module that such a user
//!   can have written ([`crate::image::Limits::for_file`]) is planned only
//!   when its executable sections hold at most
//!   [`crate::image::FOREIGN_CODE`] (4 MiB) and what is read of it is at
//!   most [`crate::image::FOREIGN_READ`] (16 MiB): at most about 200 MB
//!   of memory while it is planned. A run plans at most
//!   [`FOREIGN_RUN_CODE`] (64 MiB) of code for such processes in all,
//!   system libraries included (the code is counted from the headers,
//!   before it is read), and such modules are planned one at a time in a
//!   profdev process, so that their memory peaks do not add up. A module
//!   beyond a bound is not counted, and a note says why. A 768 MiB sparse
//!   file mapped executable, plain or as an ELF's executable segment,
//!   costs the server a few KiB of reading.
//! * Such a process gets at most [`FOREIGN_ENCODINGS`] (8) encodings of a
//!   module, one per distance between module and area (its loads at the
//!   distance offered share one), each kept for the run; a load asking
//!   for another is not counted. At most [`MAX_FOREIGN_CONNS`] (256) of
//!   their connections are served at once in a profdev process (more are
//!   closed), each given up after 300 s of silence. A run keeps at most
//!   1000 notes.
//! * Such a user's modules are kept in that user's own cache
//!   ([`Cache::for_user`]: `UID/` in the cache directory, 256 MiB), so
//!   they neither fill nor evict root's.
//! * A report larger than the run's modules could make it (a header, per
//!   load served an `M` line and a 24-byte line per counter, within the
//!   runtime's own bounds of 4096 loads and 2^23 counters per process;
//!   1 GiB with call targets) is refused from its size before anything
//!   is read, with a note; at most [`MAX_REPORTS`] (10,000) reports are
//!   read per run, the others are named in a note.
//!
//! **The private directory** (`profdev-cov.XXXXXX` in the temporary
//! directory, `$TMPDIR` or `/tmp`) is created 0700 and belongs to the
//! user profdev runs as; [`Server::share_with`] opens it to the attached
//! process's user (0711, see there). The server holds a lock on it
//! (`flock`) while it lives, and removes it when it ends. A directory
//! left behind (profdev killed, or a process still running patched after
//! its run: it keeps writing its reports there) is removed by the next
//! run of the same user ([`sweep`], at every [`Server::new`]) once no
//! live process maps its runtime. (Bug: a process whose maps profdev
//! cannot read, one holding capabilities profdev lacks, is taken to map
//! none: profdev could neither have attached to it nor preloaded into it.)

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::arcs::{CallTarget, Target};
use crate::cache::{Cache, Key};
use crate::counts::{Block, Branch, ModuleCoverage};
use crate::encode::{encode_with, Encoded};
use crate::plan::{How, Plan};

/// The runtime, a shared object for `LD_PRELOAD` (or dlopen, attach mode).
pub const RUNTIME: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libprofdev_cov.so"));

/// A report with call targets larger than this is refused (see
/// [`report_bound`] for one without).
const MAX_REPORT: u64 = 1 << 30;

/// Reports read per run (the `cov.*` files of `out/`); more are ignored,
/// with a note.
pub const MAX_REPORTS: usize = 10_000;

/// Encodings kept per module (distinct areas) for processes of other
/// users (see "Bounds").
pub const FOREIGN_ENCODINGS: usize = 8;

/// Code planned per run for processes of other users (see "Bounds").
pub const FOREIGN_RUN_CODE: u64 = 64 << 20;

/// The runtime's bounds (`c/covrt.c`): modules per process, counters per
/// process.
const RT_MAXMOD: u64 = 4096;
const RT_CAP: u64 = 1 << 23;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The private directory or the socket could not be made.
    #[error("cannot set up coverage: {0}")]
    Setup(std::io::Error),
    /// The command could not be started.
    #[error("cannot run {cmd}: {err}")]
    Spawn { cmd: String, err: std::io::Error },
}

/// An encoding: the bias and area it was made for, and the result.
type Cached = (u64, u64, Arc<Encoded>);

/// The distance from a load's bias to its area, what an encoding is
/// reusable for.
fn offset_of(bias: u64, area: u64) -> u64 {
    area.wrapping_sub(bias)
}

/// One planned module, shared by the processes that map it.
struct Entry {
    path: PathBuf,
    plan: Arc<Plan>,
    /// Its key in the on-disk cache, when there is one.
    key: Option<Key>,
    /// The encoding the cache kept (for an area at that offset from the
    /// bias; its patches in link-time addresses, its area at the offset),
    /// until a load uses it.
    disk: Option<(u64, Arc<Encoded>)>,
    /// Whether the cache holds an encoding of this module (none is
    /// stored then).
    stored: bool,
    /// The cache it is kept in: profdev's user's, or that of the user
    /// it was planned for ([`Cache::for_user`]).
    cache: Option<Arc<Cache>>,
    /// Loads served code (each may write its counters in a report).
    loads: u64,
    /// Blocks left uncounted by an encoding failure or a skipped patch.
    lost: BTreeSet<usize>,
    /// Encodings by the area's offset from the bias ([`offset_of`]): the
    /// bias and area each was made for, and the result.
    encoded: HashMap<u64, Cached>,
}

#[derive(Default)]
struct State {
    select: Vec<String>,
    /// What the trampolines do beyond counting (call targets).
    options: crate::encode::Options,
    entries: Vec<Entry>,
    by_file: HashMap<(u64, u64), usize>,
    notes: Vec<String>,
    /// Encodings made, loads served a copy of one, and loads served the
    /// on-disk cache's.
    made: u64,
    reused: u64,
    from_disk: u64,
    /// The on-disk cache of plans and encodings.
    cache: Option<Arc<Cache>>,
    /// The caches of other users' modules, by uid (None: it could not
    /// be opened).
    user_caches: HashMap<u32, Option<Arc<Cache>>>,
    /// The user the run's directory is open to ([`Server::share_with`]).
    shared: Option<u32>,
    /// Code planned so far for processes of other users.
    foreign_code: u64,
    /// Cache files being written.
    storing: Arc<(Mutex<usize>, std::sync::Condvar)>,
}

/// Connections of other users' processes served at once, in a profdev
/// process; more are closed at once (their modules are not counted).
pub const MAX_FOREIGN_CONNS: usize = 256;

/// How long a connection of another user's process may stay silent
/// while the server waits for its next line.
const CLIENT_SILENCE: std::time::Duration = std::time::Duration::from_secs(300);

static FOREIGN_CONNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One of [`MAX_FOREIGN_CONNS`], given back on drop.
struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        FOREIGN_CONNS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Notes kept per run; later ones are dropped (a process of another
/// user could otherwise grow the list without end).
const MAX_NOTES: usize = 1000;

impl State {
    /// Keep note `n` (once), up to [`MAX_NOTES`].
    fn note(&mut self, n: String) {
        if self.notes.len() < MAX_NOTES && !self.notes.contains(&n) {
            self.notes.push(n);
            if self.notes.len() == MAX_NOTES {
                self.notes.push(format!(
                    "more than {MAX_NOTES} notes; the others were dropped"
                ));
            }
        }
    }
}

/// The planning server and the private directory a run's processes
/// report to.
pub struct Server {
    dir: tempfile::TempDir,
    /// The directory, open and locked (`flock`) while the server lives:
    /// [`sweep`] leaves it alone.
    _lock: std::fs::File,
    state: Arc<Mutex<State>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The private directories' names start so (in the temporary directory).
pub const DIR_PREFIX: &str = "profdev-cov.";

/// The runtime's name in a private directory.
const RUNTIME_NAME: &str = "libprofdev_cov.so";

/// Remove the private directories (`profdev-cov.*` in `tmp`) that earlier
/// runs of this user left (a run killed, or an attached process that
/// outlived its run) and nothing uses any more: owned by the effective
/// user, not locked by a live server, and whose runtime no live process
/// maps (every process's `/proc/PID/maps` is read). A directory with
/// neither its runtime nor `out/` (a run being set up) is removed only
/// when it was last changed a minute ago or more. Returns how many were
/// removed.
pub fn sweep(tmp: &Path) -> usize {
    use std::os::fd::AsRawFd;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    // As the processes' maps name it.
    let Ok(tmp) = tmp.canonicalize() else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return 0;
    };
    let mut stale: Vec<(PathBuf, std::fs::File)> = Vec::new();
    for e in entries.flatten() {
        if !e
            .file_name()
            .as_encoded_bytes()
            .starts_with(DIR_PREFIX.as_bytes())
        {
            continue;
        }
        let path = e.path();
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !m.is_dir() || m.uid() != me {
            continue;
        }
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(d) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(d.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue; // a live server's
        }
        // The runtime is written after the lock is taken, `out/` after
        // it: a directory with either is set up, and unlocked, stale.
        let set_up = [RUNTIME_NAME, "out"]
            .iter()
            .any(|n| std::fs::symlink_metadata(path.join(n)).is_ok());
        let quiet = m
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= std::time::Duration::from_secs(60));
        if set_up || quiet {
            stale.push((path, d));
        }
    }
    if stale.is_empty() {
        return 0;
    }
    let Some(mapped) = mapped_runtimes() else {
        return 0;
    };
    let mut removed = 0;
    for (path, _lock) in stale {
        if !mapped.contains(&path) && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The directories whose runtime a live process maps.
fn mapped_runtimes() -> Option<BTreeSet<PathBuf>> {
    let mut out = BTreeSet::new();
    let procs = std::fs::read_dir("/proc").ok()?;
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        // A process whose maps profdev cannot read (gone; another
        // user's, when profdev is not root; one holding capabilities
        // profdev lacks) is one profdev could not have attached to, nor
        // preloaded into (see Bugs in the module doc).
        let Ok(maps) = profdev_symbolize::maps::read_file(Path::new(&format!("/proc/{pid}/maps")))
        else {
            continue;
        };
        for m in maps.iter().filter(|m| m.is_file()) {
            let file = Path::new(m.file_path());
            if file.file_name() == Some(std::ffi::OsStr::new(RUNTIME_NAME)) {
                if let Some(d) = file.parent() {
                    out.insert(d.to_path_buf());
                }
            }
        }
    }
    Some(out)
}

/// Whether a module path is selected by `select` (empty: all). A name
/// selects a module whose path is that name, or whose file name is that
/// name or starts with it followed by `.so`, `-` or `.`: `libc` selects
/// `libc.so.6`.
pub fn selected(select: &[String], path: &Path) -> bool {
    if select.is_empty() {
        return true;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    select.iter().any(|s| {
        Path::new(s) == path
            || *s == name
            || (name.starts_with(s.as_str()) && name[s.len()..].starts_with(['.', '-']))
    })
}

impl Server {
    /// A fresh private directory holding the runtime, the socket, and
    /// `out/` for reports; the server answers until dropped or finished.
    /// Plans and encodings are kept in the default on-disk cache
    /// ([`crate::cache`]; a cache that cannot be opened is said in the
    /// notes, and the run plans without it).
    pub fn new(select: &[String]) -> std::io::Result<Server> {
        let mut notes = Vec::new();
        let cache = Cache::default_dir().and_then(|d| match Cache::open(&d) {
            Ok(c) => Some(c),
            Err(e) => {
                notes.push(format!("{e}; planning without the cache"));
                None
            }
        });
        let server = Server::with_cache(select, cache)?;
        server.lock().notes.extend(notes);
        Ok(server)
    }

    /// As [`Server::new`], with `cache` (None: none).
    pub fn with_cache(select: &[String], cache: Option<Cache>) -> std::io::Result<Server> {
        let tmp = std::env::temp_dir();
        sweep(&tmp);
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(&tmp)?;
        // Locked before the runtime is written: a directory with a
        // runtime and no lock is an earlier run's.
        let lock = std::fs::File::open(dir.path())?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        profdev_safefile::write_file(dir.path().join(RUNTIME_NAME), RUNTIME, 0o500)
            .map_err(profdev_safefile::Error::into_os_error)?;
        profdev_safefile::create_dir(dir.path().join("out"), 0o700)
            .map_err(profdev_safefile::Error::into_os_error)?;
        let listener = UnixListener::bind(dir.path().join("sock"))?;
        let state = Arc::new(Mutex::new(State {
            select: select.to_vec(),
            cache: cache.map(Arc::new),
            ..State::default()
        }));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if sp.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                // Another user's connections: a bounded number at once,
                // each given up when its client stays silent.
                let their = st.lock().ok().is_some_and(|s| {
                    matches!(s.shared, Some(u) if foreign(u))
                        || peer_cred(&conn).is_some_and(|(_, u)| foreign(u))
                });
                let slot = if their {
                    if FOREIGN_CONNS.fetch_add(1, Ordering::AcqRel) >= MAX_FOREIGN_CONNS {
                        FOREIGN_CONNS.fetch_sub(1, Ordering::AcqRel);
                        continue;
                    }
                    let _ = conn.set_read_timeout(Some(CLIENT_SILENCE));
                    Some(Slot)
                } else {
                    None
                };
                let st = st.clone();
                std::thread::spawn(move || {
                    let _slot = slot;
                    let _ = serve(conn, &st);
                });
            }
        });
        Ok(Server {
            dir,
            _lock: lock,
            state,
            stop,
            thread: Some(thread),
        })
    }

    /// Record the targets of indirect calls and jumps
    /// ([`crate::encode::Options::call_targets`]; see
    /// [`Server::call_targets`]). Set it before the first process asks
    /// for a module: the encodings made before keep what they were made
    /// with. Off (the default), the trampolines only count. On, the
    /// on-disk cache's encodings (plain counting code) are neither used
    /// nor written; its plans are.
    pub fn set_call_targets(&self, on: bool) {
        self.lock().options.call_targets = on;
    }

    /// The indirect calls and jumps recorded (with
    /// [`Server::set_call_targets`]) in every report written so far,
    /// summed per (module, site, target), and the records lost (see the
    /// report format).
    pub fn call_targets(&self) -> (Vec<CallTarget>, u64) {
        let state = self.lock();
        let (names, _) = report_names(&self.reports_dir());
        let (mut traps, mut lost) = (0, 0);
        let mut sum: std::collections::BTreeMap<(usize, u64, Target), u64> = Default::default();
        for p in names {
            let mut raw = Vec::new();
            if read_report(&p, &state, &mut traps, &mut raw, &mut lost).is_err() {
                continue; // (collect's notes name it)
            }
            for (id, block, target, count) in raw {
                let Some(site) = state.entries[id]
                    .plan
                    .blocks
                    .get(block)
                    .and_then(|b| b.insns.last().copied())
                else {
                    continue;
                };
                let c = sum.entry((id, site, target)).or_insert(0);
                *c = c.saturating_add(count);
            }
        }
        let out = sum
            .into_iter()
            .map(|((id, site, target), count)| CallTarget {
                module: state.entries[id].path.clone(),
                site,
                target,
                count,
            })
            .collect();
        (out, lost)
    }

    /// The runtime's path.
    pub fn runtime(&self) -> PathBuf {
        self.dir.path().join(RUNTIME_NAME)
    }

    /// The socket's path.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("sock")
    }

    /// The reports' directory.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Open the run to processes of user `uid` (group `gid`), as attach
    /// mode needs when the target is not profdev's user: the directory
    /// becomes 0711 (traversable, not listable), the runtime 0555, `out/`
    /// (0700) and the socket (0600) belong to `uid`. Only that user (and
    /// root) can then connect, and what a connection may ask is bounded by
    /// what its process maps (see the protocol's checks).
    pub fn share_with(&self, uid: u32, gid: u32) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        mode(self.dir.path(), 0o711)?;
        mode(&self.runtime(), 0o555)?;
        std::os::unix::fs::chown(self.reports_dir(), Some(uid), Some(gid))?;
        mode(&self.socket(), 0o600)?;
        std::os::unix::fs::chown(self.socket(), Some(uid), Some(gid))?;
        self.lock().shared = Some(uid);
        Ok(())
    }

    /// Plan ahead the selected modules process `pid` maps now (read
    /// through its `/proc/PID/map_files/`), so that an attach, which holds
    /// every thread of `pid` while the runtime asks for them, only
    /// encodes. Returns how many modules were planned; a module that
    /// cannot be read now is left for the runtime's request.
    pub fn preplan(&self, pid: u32) -> usize {
        let Ok(maps) = profdev_symbolize::maps::read(pid) else {
            return 0;
        };
        let mut seen = BTreeSet::new();
        let mut planned = 0;
        for m in &maps {
            let path = m.file_path();
            if !m.perms.exec() || !m.is_file() || !seen.insert(path.to_string()) {
                continue;
            }
            let path = Path::new(path);
            if !selected(&self.lock().select, path) {
                continue;
            }
            let range = m.map_files_name();
            let Ok(file) = std::fs::File::open(format!("/proc/{pid}/map_files/{range}")) else {
                continue;
            };
            let Ok(m) = file.metadata() else { continue };
            if self.lock().by_file.contains_key(&(m.dev(), m.ino())) {
                continue;
            }
            // For the process's user: its mappings are that user's choice.
            let Some(uid) = euid_of(pid) else { continue };
            if plan_into(&self.state, path, &file, (m.dev(), m.ino()), uid).is_some() {
                planned += 1;
            }
        }
        planned
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `config` string of `profdev_cov_attach`.
    pub fn attach_config(&self) -> String {
        format!(
            "{}\n{}\n",
            self.socket().display(),
            self.reports_dir().display()
        )
    }

    /// The environment a covered command gets: `LD_PRELOAD` (the runtime
    /// first, then what `current` held), `PROFDEV_COV_SOCK`,
    /// `PROFDEV_COV_OUT`.
    pub fn env(&self, current: Option<OsString>) -> Vec<(String, OsString)> {
        let mut preload = self.runtime().into_os_string();
        if let Some(c) = current.filter(|c| !c.is_empty()) {
            preload.push(" ");
            preload.push(c);
        }
        vec![
            ("LD_PRELOAD".into(), preload),
            ("PROFDEV_COV_SOCK".into(), self.socket().into_os_string()),
            (
                "PROFDEV_COV_OUT".into(),
                self.reports_dir().into_os_string(),
            ),
        ]
    }

    /// Encodings made so far, and loads that were served a copy of one
    /// made for another load ([`crate::encode::Encoded::code_for`]).
    pub fn encodings(&self) -> (u64, u64) {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (s.made, s.reused)
    }

    /// Loads served an encoding from the on-disk cache.
    pub fn encodings_from_cache(&self) -> u64 {
        self.lock().from_disk
    }

    /// Wait (at most `limit`) until every cache file being written is
    /// written: a run that ends leaves no temporary behind.
    pub fn wait_for_cache(&self, limit: std::time::Duration) {
        let storing = self.lock().storing.clone();
        let (m, cv) = &*storing;
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        let _ = cv.wait_timeout_while(g, limit, |n| *n > 0);
    }

    /// The counts of every report written so far, per module planned,
    /// and notes (one sentence each) on what was not counted.
    pub fn collect(&self) -> (Vec<ModuleCoverage>, Vec<String>) {
        let mut counts: HashMap<usize, Vec<u64>> = HashMap::new();
        let mut notes = Vec::new();
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (names, more) = report_names(&self.reports_dir());
        if more {
            notes.push(format!(
                "{}: more than {MAX_REPORTS} reports; the others were not read",
                self.reports_dir().display()
            ));
        }
        let mut traps = 0;
        for p in names {
            match read_report(&p, &state, &mut traps, &mut Vec::new(), &mut 0) {
                Ok(r) => {
                    for (id, idx, c) in r {
                        let n = state.entries[id].plan.counters() as usize;
                        let v = counts.entry(id).or_insert_with(|| vec![0; n]);
                        v[idx] = v[idx].saturating_add(c);
                    }
                }
                Err(e) => notes.push(format!("{}: {e}", p.display())),
            }
        }
        let mut out = Vec::new();
        for (id, e) in state.entries.iter().enumerate() {
            let plan = &e.plan;
            let zero = vec![0; plan.counters() as usize];
            let c = counts.get(&id).unwrap_or(&zero);
            let mut m = ModuleCoverage {
                path: e.path.clone(),
                build_id: plan.build_id.clone(),
                ..ModuleCoverage::default()
            };
            let mut trapped = 0;
            for (i, b) in plan.blocks.iter().enumerate() {
                // A block derived from its predecessor's fall-throughs
                // is lost with it.
                let derived_lost = matches!(b.how, How::Fell { .. }) && e.lost.contains(&(i - 1));
                if b.how == How::None || e.lost.contains(&i) || derived_lost {
                    m.uncounted += 1;
                    continue;
                }
                if matches!(b.how, How::Int3 { .. }) {
                    trapped += 1;
                }
                m.blocks.push(Block {
                    start: b.start,
                    end: b.end,
                    insns: b.insns.clone(),
                    count: match b.how {
                        How::Fell { branch } => plan.fell(branch as usize, c),
                        _ => c[i],
                    },
                });
                if let Some(j) = b.branch {
                    // A fall-through read from the next block is lost
                    // with it.
                    let from = plan.fell_from[j as usize];
                    if from.is_some_and(|k| e.lost.contains(&(k as usize))) {
                        continue;
                    }
                    let not_taken = plan.fell(j as usize, c);
                    m.branches.push(Branch {
                        addr: plan.branches[j as usize].0,
                        taken: c[i].saturating_sub(not_taken),
                        not_taken,
                    });
                }
            }
            m.branches.sort_by_key(|b| b.addr);
            if m.uncounted > 0 {
                notes.push(format!(
                    "{}: {} of {} blocks could not be counted",
                    e.path.display(),
                    m.uncounted,
                    plan.blocks.len()
                ));
            }
            if trapped > 0 {
                notes.push(format!(
                    "{}: {trapped} blocks shorter than a jump are counted through a breakpoint (slower)",
                    e.path.display()
                ));
            }
            out.push(m);
        }
        if traps > 0 {
            notes.push(format!("{traps} breakpoints were taken"));
        }
        notes.extend(state.notes.iter().cloned());
        (out, notes)
    }
}

/// A trampoline area one load of a module ran from: samples taken in it
/// belong to the module's code (see [`Server::areas`]).
#[derive(Clone, Debug)]
pub struct Area {
    /// The module's file.
    pub path: PathBuf,
    /// The load's bias (run-time address less link-time address).
    pub bias: u64,
    /// The area's run-time addresses.
    pub start: u64,
    /// Past its last byte of code.
    pub end: u64,
    /// The patches of the load, in run-time addresses.
    pub patches: Vec<crate::encode::Patch>,
}

impl Server {
    /// Every trampoline area encoded so far, per load (processes that
    /// share a load, such as forked children, share an area).
    pub fn areas(&self) -> Vec<Area> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for e in &state.entries {
            for (bias, area, enc) in e.encoded.values() {
                out.push(Area {
                    path: e.path.clone(),
                    bias: *bias,
                    start: *area,
                    end: area + enc.code.len() as u64,
                    patches: enc.patches.clone(),
                });
            }
        }
        out
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.wait_for_cache(std::time::Duration::from_secs(30));
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let _ = UnixStream::connect(self.socket());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A finished run.
#[derive(Debug)]
pub struct Launched {
    /// The command's exit status.
    pub status: ExitStatus,
    /// The counts, one entry per module planned (in the order the
    /// processes asked for them).
    pub modules: Vec<ModuleCoverage>,
    /// What was not counted, and why, one sentence each.
    pub notes: Vec<String>,
    /// Loads whose encoding came from the on-disk cache.
    pub from_cache: u64,
}

/// Run `cmd` under coverage of the modules `select` names (empty: the
/// executable and every library it maps, the runtime excepted), wait for
/// it and every process that inherited it (the run ends when the last
/// one exits), and return the counts. `cmd`'s stdio is the caller's.
pub fn launch(mut cmd: Command, select: &[String]) -> Result<Launched, LaunchError> {
    let server = Server::new(select).map_err(LaunchError::Setup)?;
    for (k, v) in server.env(std::env::var_os("LD_PRELOAD")) {
        cmd.env(k, v);
    }
    // A pipe whose write end every process of the run holds: EOF on the
    // read end means the last one exited.
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills `fds` with two new descriptors, owned from here
    // on by `rd` and `wr`.
    let (rd, wr) = unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) < 0 {
            return Err(LaunchError::Setup(std::io::Error::last_os_error()));
        }
        (
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]),
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]),
        )
    };
    let wr_fd = std::os::fd::AsRawFd::as_raw_fd(&wr);
    // SAFETY: between fork and exec only fcntl, async-signal-safe, runs;
    // it clears close-on-exec on the pipe's write end, which the child
    // shares.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::fcntl(wr_fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|err| LaunchError::Spawn {
        cmd: format!("{:?}", cmd.get_program()),
        err,
    })?;
    drop(wr);
    let status = child.wait().map_err(LaunchError::Setup)?;
    let mut rd = rd;
    let mut sink = [0u8; 64];
    while matches!(rd.read(&mut sink), Ok(n) if n > 0) {}
    let (modules, notes) = server.collect();
    Ok(Launched {
        status,
        modules,
        notes,
        from_cache: server.encodings_from_cache(),
    })
}

/// The reports in `dir` (files named `cov.*`), sorted, at most
/// [`MAX_REPORTS`]; and whether there were more.
fn report_names(dir: &Path) -> (Vec<PathBuf>, bool) {
    let mut names = Vec::new();
    let mut more = false;
    if let Ok(d) = std::fs::read_dir(dir) {
        for e in d.flatten() {
            if !e.file_name().as_encoded_bytes().starts_with(b"cov.") {
                continue;
            }
            if names.len() == MAX_REPORTS {
                more = true;
                break;
            }
            names.push(e.path());
        }
    }
    names.sort();
    (names, more)
}

/// The largest report the run's processes could write: the runtime
/// writes a header, per module load an `M` line and at most one line per
/// counter (`<index> <count>` in hex: 24 bytes at most with its counters
/// fewer than 2^23), `ilost` and `end`; a process makes at most 4096
/// loads and 2^23 counters. So at most every load the server served,
/// each with all its counters, within the runtime's own bounds. With
/// call targets ([`Server::set_call_targets`]) the `I` lines are bounded
/// by [`MAX_REPORT`] only.
fn report_bound(state: &State) -> u64 {
    if state.options.call_targets {
        return MAX_REPORT;
    }
    const HEAD: u64 = 256;
    const M_LINE: u64 = 80;
    const LINE: u64 = 24;
    let served: u64 = state
        .entries
        .iter()
        .map(|e| {
            e.loads
                .min(RT_MAXMOD)
                .saturating_mul(M_LINE + LINE * e.plan.counters())
        })
        .fold(0, u64::saturating_add);
    HEAD + served.min(RT_MAXMOD * M_LINE + RT_CAP * LINE)
}

/// A report's counters (module id, counter index, count); its call
/// targets (module id, block index, target, count) go to `targets`, its
/// records lost are added to `lost`.
fn read_report(
    path: &Path,
    state: &State,
    traps: &mut u64,
    targets: &mut Vec<(usize, usize, Target, u64)>,
    lost: &mut u64,
) -> Result<Vec<(usize, usize, u64)>, String> {
    // The directory may belong to the profiled process's user (attach
    // mode): no links, regular files only, bounded.
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = f.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a report".into());
    }
    // Bounded before anything is read or allocated.
    let bound = report_bound(state);
    if meta.len() > bound {
        return Err(format!(
            "not a report: {} bytes, more than the {bound} the run's modules could write",
            meta.len()
        ));
    }
    let mut text = String::new();
    f.take(bound)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    let mut lines = text.lines();
    if lines.next() != Some("profdev-coverage 1") {
        return Err("not a coverage report (bad first line)".into());
    }
    let mut out = Vec::new();
    let mut cur: Option<(usize, usize)> = None;
    let mut ended = false;
    for l in lines {
        if l == "end" {
            ended = true;
            break;
        }
        if l.starts_with("pid ") {
            continue;
        }
        if let Some(t) = l.strip_prefix("traps ") {
            *traps += t.parse::<u64>().map_err(|_| format!("bad line {l:?}"))?;
            continue;
        }
        if let Some(t) = l.strip_prefix("ilost ") {
            *lost += t.parse::<u64>().map_err(|_| format!("bad line {l:?}"))?;
            continue;
        }
        if let Some(t) = l.strip_prefix("I ") {
            // I <id dec> <block> <count> <target> [<path>]
            let bad = || format!("bad line {l:?}");
            let mut w = t.splitn(5, ' ');
            let id: usize = w.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
            let block = hex(w.next().ok_or_else(bad)?).ok_or_else(bad)?;
            let count = hex(w.next().ok_or_else(bad)?).ok_or_else(bad)?;
            let addr = hex(w.next().ok_or_else(bad)?).ok_or_else(bad)?;
            let e = state
                .entries
                .get(id)
                .ok_or(format!("unknown module {id}"))?;
            let block = usize::try_from(block)
                .ok()
                .filter(|b| *b < e.plan.blocks.len())
                .ok_or(format!("block {block:x} out of range"))?;
            let target = match w.next() {
                Some(p) if p.starts_with('/') => Target::Module {
                    path: PathBuf::from(p),
                    addr,
                },
                Some(_) => return Err(bad()),
                None => Target::Outside(addr),
            };
            targets.push((id, block, target, count));
            continue;
        }
        let w: Vec<&str> = l.split(' ').collect();
        if w.first() == Some(&"M") && w.len() == 4 {
            let id: usize = w[1].parse().map_err(|_| format!("bad line {l:?}"))?;
            let n: usize = w[3].parse().map_err(|_| format!("bad line {l:?}"))?;
            let e = state
                .entries
                .get(id)
                .ok_or(format!("unknown module {id}"))?;
            if n != e.plan.counters() as usize {
                return Err(format!(
                    "module {id} has {n} counters, the plan {}",
                    e.plan.counters()
                ));
            }
            cur = Some((id, n));
            continue;
        }
        let (Some((id, n)), [i, c]) = (cur, w.as_slice()) else {
            return Err(format!("bad line {l:?}"));
        };
        let i = usize::from_str_radix(i, 16).map_err(|_| format!("bad line {l:?}"))?;
        let c = u64::from_str_radix(c, 16).map_err(|_| format!("bad line {l:?}"))?;
        if i >= n {
            return Err(format!("counter {i} out of range"));
        }
        out.push((id, i, c));
    }
    if !ended {
        return Err("the report is incomplete (its process died while writing it)".into());
    }
    Ok(out)
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}

/// One module's conversation.
fn serve(conn: UnixStream, state: &Mutex<State>) -> Option<()> {
    let mut r = BufReader::new(conn.try_clone().ok()?);
    let mut w = conn;
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let rest = line.trim_end_matches('\n').strip_prefix("MOD ")?;
    let mut it = rest.splitn(7, ' ');
    let _pid: u32 = it.next()?.parse().ok()?;
    let dev: u64 = it.next()?.parse().ok()?;
    let ino: u64 = it.next()?.parse().ok()?;
    let bias = hex(it.next()?)?;
    let lo = hex(it.next()?)?;
    let hi = hex(it.next()?)?;
    let path = PathBuf::from(it.next()?);
    let peer = peer_cred(&w);
    let id = match lookup(state, &path, peer, (dev, ino), (lo, hi)) {
        Some(id) => id,
        None => {
            w.write_all(b"SKIP\n").ok()?;
            return Some(());
        }
    };
    let (plan, offer) = {
        let s = state.lock().ok()?;
        let e = &s.entries[id];
        let disk = e.disk.as_ref().map(|d| d.0);
        (e.plan.clone(), e.encoded.keys().next().copied().or(disk))
    };
    let opts = state.lock().ok()?.options;
    let size = crate::encode::area_size_with(&plan, opts);
    match offer {
        Some(o) => writeln!(w, "SIZE {size:x} {:x} {o:x}", plan.counters()).ok()?,
        None => writeln!(w, "SIZE {size:x} {:x}", plan.counters()).ok()?,
    }
    line.clear();
    r.read_line(&mut line).ok()?;
    let mut at = line.trim_end().strip_prefix("AT ")?.split(' ');
    let area = hex(at.next()?)?;
    let first = hex(at.next()?)?;
    // An encoding serves every load with the same offset (see
    // crate::encode's Reuse).
    let key = offset_of(bias, area);
    let (cached, disk) = {
        let mut s = state.lock().ok()?;
        let foreign_peer = match s.shared {
            Some(u) if foreign(u) => true,
            _ => peer.is_some_and(|(_, u)| foreign(u)),
        };
        let entry = &mut s.entries[id];
        if foreign_peer
            && !entry.encoded.contains_key(&key)
            && entry.encoded.len() >= FOREIGN_ENCODINGS
        {
            // Each encoding is kept for the run: another user's process
            // naming ever new areas would grow the server without bound.
            let n = format!(
                "{}: more than {FOREIGN_ENCODINGS} areas asked for by another user's processes; \
                 a load elsewhere is not counted",
                entry.path.display()
            );
            s.note(n);
            return None;
        }
        let entry = &mut s.entries[id];
        let cached = entry.encoded.get(&key).cloned();
        let disk = match (&cached, &entry.disk) {
            (None, Some((off, _))) if *off == key => entry.disk.take(),
            _ => None,
        };
        (cached, disk)
    };
    let mut store = None;
    let (bias0, area0, enc) = match (cached, disk) {
        (Some(c), _) => {
            state.lock().ok()?.reused += 1;
            c
        }
        (None, Some((off, e))) => {
            // The cache's encoding, moved to this load (its patches are
            // kept at bias 0, its area at the offset).
            let moved = Arc::new(Encoded {
                patches: e.patches_for(0, off, bias, area),
                ..(*e).clone()
            });
            let mut s = state.lock().ok()?;
            s.from_disk += 1;
            let entry = &mut s.entries[id];
            entry.lost.extend(moved.failed_blocks.iter().copied());
            entry.encoded.insert(key, (bias, area, moved.clone()));
            (bias, area, moved)
        }
        (None, None) => {
            let e = Arc::new(encode_with(&plan, bias, area, first, opts));
            let mut s = state.lock().ok()?;
            s.made += 1;
            let storing = s.storing.clone();
            let entry = &mut s.entries[id];
            let cache = entry.cache.clone();
            entry.lost.extend(e.failed_blocks.iter().copied());
            entry.encoded.insert(key, (bias, area, e.clone()));
            if let (Some(cache), Some(k), false) = (cache, entry.key, entry.stored) {
                entry.stored = true;
                store = Some((cache, k, Storing::new(storing)));
            }
            (bias, area, e)
        }
    };
    let mut buf = Vec::with_capacity(enc.code.len() + 24 * enc.patches.len() + 64);
    writeln!(
        buf,
        "CODE {:x} {:x} {:x}",
        enc.code.len(),
        enc.patches.len(),
        id
    )
    .ok()?;
    buf.extend_from_slice(&enc.code_for(first));
    for p in enc.patches_for(bias0, area0, bias, area) {
        buf.extend_from_slice(&p.addr.to_le_bytes());
        buf.extend_from_slice(&p.entry.to_le_bytes());
        buf.extend_from_slice(&p.kind.to_le_bytes());
        buf.extend_from_slice(&p.len.to_le_bytes());
    }
    if let Ok(mut s) = state.lock() {
        s.entries[id].loads += 1;
    }
    w.write_all(&buf).ok()?;
    line.clear();
    r.read_line(&mut line).ok()?;
    let skipped = hex(line.trim_end().strip_prefix("DONE ")?)?;
    for _ in 0..skipped {
        line.clear();
        r.read_line(&mut line).ok()?;
        let a = hex(line.trim_end().strip_prefix("S ")?)?;
        let link = a.wrapping_sub(bias);
        let mut s = state.lock().ok()?;
        let entry = &mut s.entries[id];
        // The block holding the skipped patch.
        let i = entry.plan.blocks.partition_point(|b| b.start <= link);
        if i > 0 {
            entry.lost.insert(i - 1);
        }
    }
    drop((r, w));
    if let Some((cache, k, _storing)) = store {
        // Kept for later runs, once the process has its code. The
        // patches at bias 0, the area at the offset: what a load at any
        // bias moves them from.
        let canonical = Encoded {
            patches: enc.patches_for(bias0, area0, 0, key),
            ..(*enc).clone()
        };
        if let Err(e) = cache.store(&k, &plan, Some((key, &canonical))) {
            if let Ok(mut s) = state.lock() {
                let n = format!("{e}; the plan is not kept for later runs");
                s.note(n);
            }
        }
    }
    Some(())
}

/// One cache file being written ([`Server::wait_for_cache`] waits for
/// none to be left): counted from when a store is decided until it ends,
/// whether it is written or the conversation ends first (a runtime that
/// gives up, a process that dies) and it is not.
struct Storing(Arc<(Mutex<usize>, std::sync::Condvar)>);

impl Storing {
    fn new(count: Arc<(Mutex<usize>, std::sync::Condvar)>) -> Storing {
        *count.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Storing(count)
    }
}

impl Drop for Storing {
    fn drop(&mut self) {
        let (m, cv) = &*self.0;
        *m.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        cv.notify_all();
    }
}

/// The connecting process's (pid, effective uid), as the kernel recorded
/// them at `connect` (SO_PEERCRED).
fn peer_cred(conn: &UnixStream) -> Option<(u32, u32)> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain C struct of integers; all zeros is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, ours.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some((cred.pid as u32, cred.uid))
}

/// Open the module a client asks for, proving that its process maps that
/// file: a client must not make profdev (root, in the device) read a
/// file the client may not read. Through `/proc/PEER/map_files/` (the
/// mapping at `lo`..`hi` of the connecting process whose file is device
/// `dev`, inode `ino`), while the process still has the credentials it
/// connected with (an exec of a set-user-id program changes them). When
/// map_files is closed to profdev (it needs CAP_SYS_ADMIN), only a client
/// of profdev's own user is served, by `path` (checked to be `dev`,
/// `ino`): it could read that file itself.
fn open_mapped(
    path: &Path,
    peer: Option<(u32, u32)>,
    (dev, ino): (u64, u64),
    (lo, hi): (u64, u64),
) -> Result<std::fs::File, String> {
    let (pid, uid) = peer.ok_or("the client's credentials are unknown")?;
    if euid_of(pid) != Some(uid) {
        return Err(format!(
            "process {pid} no longer has the credentials it connected with"
        ));
    }
    let check = |f: std::fs::File| -> Result<std::fs::File, String> {
        let m = f.metadata().map_err(|e| e.to_string())?;
        if m.is_file() && m.dev() == dev && m.ino() == ino {
            Ok(f)
        } else {
            Err("the file changed since it was mapped".into())
        }
    };
    let maps = profdev_symbolize::maps::read(pid).map_err(|e| e.to_string())?;
    let range = maps
        .iter()
        .find(|m| m.start >= lo && m.start < hi && m.inode == ino)
        .map(|m| (m.start, m.end));
    let Some((a, b)) = range else {
        return Err(format!("process {pid} maps no such file at 0x{lo:x}"));
    };
    match std::fs::File::open(format!("/proc/{pid}/map_files/{a:x}-{b:x}")) {
        Ok(f) => check(f),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
            // SAFETY: geteuid has no preconditions.
            if uid != unsafe { libc::geteuid() } {
                return Err(format!(
                    "profdev cannot prove that process {pid} (user {uid}) may read it \
                     (/proc/PID/map_files needs CAP_SYS_ADMIN)"
                ));
            }
            check(std::fs::File::open(path).map_err(|e| e.to_string())?)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The entry for the file at `path`, which the client `peer` says it
/// maps at `lo`..`hi` and is device `dev`, inode `ino` (checked by
/// [`open_mapped`]), planned on first use; None when it is not selected
/// or cannot be planned (with a note).
fn lookup(
    state: &Mutex<State>,
    path: &Path,
    peer: Option<(u32, u32)>,
    (dev, ino): (u64, u64),
    range: (u64, u64),
) -> Option<usize> {
    let note = |s: String| {
        if let Ok(mut st) = state.lock() {
            st.note(s);
        }
    };
    if !selected(&state.lock().ok()?.select, path) {
        return None;
    }
    let file = match open_mapped(path, peer, (dev, ino), range) {
        Ok(f) => f,
        Err(why) => {
            note(format!("{}: {why}; not counted", path.display()));
            return None;
        }
    };
    if let Some(&id) = state.lock().ok()?.by_file.get(&(dev, ino)) {
        return Some(id);
    }
    plan_into(state, path, &file, (dev, ino), peer?.1)
}

/// Held while a module is read and planned for another user's process.
static FOREIGN_PLANNING: Mutex<()> = Mutex::new(());

/// Whether `uid` is another user's: neither root nor profdev's own.
fn foreign(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid != 0 && uid != unsafe { libc::geteuid() }
}

/// The effective uid of process `pid` (when it is also its file-system
/// uid).
fn euid_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let v: Vec<u32> = l
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (v.len() == 4 && v[1] == v[3]).then_some(v[1])
}

/// Plan the module `path`, open as `file` (device `dev`, inode `ino`),
/// for a process of user `uid`, and add its entry; None (with a note)
/// when it cannot be planned. Only what its ELF headers name is read
/// ([`crate::image`]); for another user's process (or a run open to
/// another user, [`Server::share_with`]) within
/// [`crate::image::Limits::for_file`] and [`FOREIGN_RUN_CODE`] per run,
/// and kept in that user's cache.
fn plan_into(
    state: &Mutex<State>,
    path: &Path,
    file: &std::fs::File,
    (dev, ino): (u64, u64),
    uid: u32,
) -> Option<usize> {
    use crate::image::{Layout, Limits};
    let note = |s: String| {
        if let Ok(mut st) = state.lock() {
            st.note(s);
        }
    };
    let who = match state.lock().ok()?.shared {
        Some(u) if foreign(u) => Some(u),
        _ => Some(uid).filter(|&u| foreign(u)),
    };
    let limits = match (who, file.metadata()) {
        (None, _) => Limits::OWN,
        (Some(_), Ok(m)) => Limits::for_file(&m),
        (Some(_), Err(_)) => Limits::FOREIGN,
    };
    // Planning is slow: do it unlocked (two processes may plan the same
    // file at once; the first to finish wins). The file is read through
    // the descriptor opened by the caller, and only what its headers
    // name.
    let layout = match Layout::of(file, path, limits) {
        Ok(l) => l,
        Err(e) => {
            note(format!("{e}; not counted"));
            return None;
        }
    };
    if let Some(u) = who {
        // Reserved before anything is read: planners running at once
        // cannot overshoot the run's bound together.
        let mut s = state.lock().ok()?;
        if s.foreign_code.saturating_add(layout.code()) > FOREIGN_RUN_CODE {
            drop(s);
            note(format!(
                "{}: planning it would take the code planned for processes of user {u} past \
                 {} MiB in this run; not counted",
                path.display(),
                FOREIGN_RUN_CODE >> 20
            ));
            return None;
        }
        s.foreign_code += layout.code();
    }
    // One such plan at a time in this process (every server of a
    // device): its memory peak is one module's, however many processes
    // ask at once.
    let _one = who.map(|_| FOREIGN_PLANNING.lock().unwrap_or_else(|e| e.into_inner()));
    let bytes = match layout.read(file, path) {
        Ok(b) => b,
        Err(e) => {
            note(format!("{e}; not counted"));
            return None;
        }
    };
    let cache = {
        let mut s = state.lock().ok()?;
        match who {
            None => s.cache.clone(),
            Some(u) => {
                let own = s.cache.clone();
                let mut failed = None;
                let c = s
                    .user_caches
                    .entry(u)
                    .or_insert_with(|| {
                        let c = own?.for_user(u).map_err(|e| failed = Some(e)).ok()?;
                        Some(Arc::new(c))
                    })
                    .clone();
                drop(s);
                if let Some(e) = failed {
                    note(format!(
                        "{e}; planning user {u}'s modules without the cache"
                    ));
                }
                c
            }
        }
    };
    let key = cache.as_ref().map(|_| Key::of(&bytes));
    let kept = match (&cache, &key) {
        (Some(c), Some(k)) => match c.load(k) {
            Ok(e) => e,
            Err(why) => {
                note(format!("{why}; planned afresh"));
                None
            }
        },
        _ => None,
    };
    let (plan, disk, stored) = match kept {
        Some(e) => {
            let stored = e.encoded.is_some();
            (
                Arc::new(e.plan),
                e.encoded.map(|(o, e)| (o, Arc::new(e))),
                stored,
            )
        }
        None => match Plan::of_bytes(&bytes, path) {
            Ok(p) => (Arc::new(p), None, false),
            Err(e) => {
                note(format!("{e}; not counted"));
                return None;
            }
        },
    };
    drop(bytes);
    let mut s = state.lock().ok()?;
    if let Some(&id) = s.by_file.get(&(dev, ino)) {
        return Some(id);
    }
    // The cache keeps plain counting code: a run that records call
    // targets neither takes its encoding nor stores its own (the plan,
    // the same either way, is taken).
    let (disk, stored) = if s.options == crate::encode::Options::default() {
        (disk, stored)
    } else {
        (None, true)
    };
    let id = s.entries.len();
    s.entries.push(Entry {
        path: path.to_path_buf(),
        plan,
        key,
        disk,
        stored,
        cache,
        loads: 0,
        lost: BTreeSet::new(),
        encoded: HashMap::new(),
    });
    s.by_file.insert((dev, ino), id);
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// Send one MOD line; the first line of the answer.
    fn ask(server: &Server, line: &str) -> String {
        let mut c = UnixStream::connect(server.socket()).unwrap();
        c.write_all(line.as_bytes()).unwrap();
        let mut answer = String::new();
        BufReader::new(c).read_line(&mut answer).unwrap();
        answer
    }

    #[test]
    fn a_client_gets_only_a_file_its_process_maps() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::copy("/bin/true", &victim).unwrap();
        let meta = std::fs::metadata(&victim).unwrap();
        let (dev, ino) = (meta.dev(), meta.ino());
        let server = Server::new(&[]).unwrap();
        let me = std::process::id();
        let line = |lo: u64, hi: u64| {
            format!(
                "MOD {me} {dev} {ino} 0 {lo:x} {hi:x} {}\n",
                victim.display()
            )
        };
        // Not mapped by this process: refused, whatever it claims.
        assert_eq!(ask(&server, &line(0x10000, 0x20000)), "SKIP\n");
        let (_, notes) = server.collect();
        assert!(
            notes.iter().any(|n| n.contains("maps no such file")),
            "{notes:?}"
        );
        // Mapped: planned and served.
        let f = std::fs::File::open(&victim).unwrap();
        let len = meta.len() as usize;
        // SAFETY: a fresh private read-only mapping of a file we opened,
        // unmapped below; nothing else uses it.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        let lo = at as u64;
        let answer = ask(&server, &line(lo, lo + len as u64));
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(at, len) };
        assert!(answer.starts_with("SIZE "), "{answer:?}");
    }

    #[test]
    fn a_conversation_given_up_leaves_no_store_pending() {
        // A runtime that takes the code and goes away without DONE (it
        // could not patch, or its process died): the store decided for
        // the new encoding must not stay pending, or the run's end
        // waits for it (30 s).
        let tmp = tempfile::tempdir().unwrap();
        let module = tmp.path().join("module");
        std::fs::copy("/bin/true", &module).unwrap();
        let meta = std::fs::metadata(&module).unwrap();
        let cache = Cache::open(&tmp.path().join("cache")).unwrap();
        let server = Server::with_cache(&[], Some(cache)).unwrap();
        let f = std::fs::File::open(&module).unwrap();
        let len = meta.len() as usize;
        // SAFETY: a fresh private read-only mapping of a file we opened,
        // unmapped below; nothing else uses it.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        let lo = at as u64;
        let mut c = UnixStream::connect(server.socket()).unwrap();
        writeln!(
            c,
            "MOD {} {} {} {lo:x} {lo:x} {:x} {}",
            std::process::id(),
            meta.dev(),
            meta.ino(),
            lo + len as u64,
            module.display()
        )
        .unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(at, len) };
        assert!(size.starts_with("SIZE "), "{size:?}");
        // Any area: the code is never written anywhere.
        writeln!(c, "AT {:x} 0", lo.wrapping_sub(1 << 30)).unwrap();
        let mut code = String::new();
        r.read_line(&mut code).unwrap();
        assert!(code.starts_with("CODE "), "{code:?}");
        drop((r, c));
        let storing = server.lock().storing.clone();
        profdev_testkit::wait_until(
            "the conversation's end",
            std::time::Duration::from_secs(60),
            || *storing.0.lock().unwrap() == 0,
        );
    }

    /// The tests of runs shared with another user, one at a time: they
    /// share [`MAX_FOREIGN_CONNS`].
    static SHARED_TESTS: Mutex<()> = Mutex::new(());

    /// A file mapped readable and executable in this process.
    struct Mapped(*mut libc::c_void, usize);

    impl Mapped {
        fn new(path: &Path) -> Mapped {
            let f = std::fs::File::open(path).unwrap();
            let len = f.metadata().unwrap().len() as usize;
            // SAFETY: a fresh private mapping of a file we opened, unmapped
            // on drop; nothing reads it.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE,
                    f.as_raw_fd(),
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            Mapped(at, len)
        }

        /// The MOD line of this mapping of `path`.
        fn line(&self, path: &Path) -> String {
            let m = std::fs::metadata(path).unwrap();
            let lo = self.0 as u64;
            format!(
                "MOD {} {} {} {lo:x} {lo:x} {:x} {}\n",
                std::process::id(),
                m.dev(),
                m.ino(),
                lo + self.1 as u64,
                path.display()
            )
        }
    }

    impl Drop for Mapped {
        fn drop(&mut self) {
            // SAFETY: the mapping made in new, no longer used.
            unsafe { libc::munmap(self.0, self.1) };
        }
    }

    fn root() -> Result<(), String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            Ok(())
        } else {
            Err("sharing a run with user 65534 needs root (chown)".into())
        }
    }

    #[test]
    fn another_users_huge_modules_are_refused_from_their_headers() {
        if !profdev_testkit::privileged("a run shared with user 65534", root()) {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let plain = tmp.path().join("plain");
        std::fs::File::create(&plain)
            .unwrap()
            .set_len(768 << 20)
            .unwrap();
        let elf = tmp.path().join("elf");
        crate::image::sparse_elf(&elf, 768 << 20).unwrap();
        // Root's own: only the run's bound stops it.
        let roots = tmp.path().join("roots");
        crate::image::sparse_elf(&roots, 768 << 20).unwrap();
        for p in [&plain, &elf] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
        let server = Server::with_cache(&[], None).unwrap();
        let _one = SHARED_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        server.share_with(65534, 65534).unwrap();
        let t = std::time::Instant::now();
        for p in [&plain, &elf, &roots] {
            let m = Mapped::new(p);
            assert_eq!(ask(&server, &m.line(p)), "SKIP\n", "{}", p.display());
        }
        // Refused from their headers: no time to read 1.5 GiB.
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        let (_, notes) = server.collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("plain") && n.contains("not an ELF file")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("its code (768.0 MiB) is more than the 4.0 MiB")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("roots: planning it would take") && n.contains("64 MiB")),
            "{notes:?}"
        );
    }

    /// One module's conversation for the mapping `m` of `path`, with the
    /// area `below` bytes below it (the code is never written anywhere):
    /// whether the code came.
    fn converse(server: &Server, m: &Mapped, path: &Path, below: u64) -> bool {
        let mut c = UnixStream::connect(server.socket()).unwrap();
        c.write_all(m.line(path).as_bytes()).unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("SIZE "), "{line:?}");
        writeln!(c, "AT {:x} 0", (m.0 as u64).wrapping_sub(below)).unwrap();
        line.clear();
        r.read_line(&mut line).unwrap();
        let Some(code) = line.trim_end().strip_prefix("CODE ") else {
            return false;
        };
        let w: Vec<u64> = code.split(' ').map(|x| hex(x).unwrap()).collect();
        let mut sink = vec![0u8; (w[0] + 24 * w[1]) as usize];
        r.read_exact(&mut sink).unwrap();
        writeln!(c, "DONE 0").unwrap();
        true
    }

    #[test]
    fn another_users_process_gets_a_bounded_number_of_encodings() {
        if !profdev_testkit::privileged("a run shared with user 65534", root()) {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let module = tmp.path().join("module");
        std::fs::copy("/bin/true", &module).unwrap();
        let server = Server::with_cache(&[], None).unwrap();
        let _one = SHARED_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        server.share_with(65534, 65534).unwrap();
        let m = Mapped::new(&module);
        for k in 0..FOREIGN_ENCODINGS as u64 {
            assert!(converse(&server, &m, &module, (1 << 30) + (k << 12)));
        }
        // A distance served already still is; a new one is not.
        assert!(converse(&server, &m, &module, 1 << 30));
        assert!(!converse(&server, &m, &module, 1 << 29));
        assert_eq!(server.encodings().0, FOREIGN_ENCODINGS as u64);
        let (_, notes) = server.collect();
        assert!(
            notes.iter().any(|n| n.contains("more than 8 areas")),
            "{notes:?}"
        );
    }

    #[test]
    fn another_users_modules_are_cached_apart() {
        if !profdev_testkit::privileged("a run shared with user 65534", root()) {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let module = tmp.path().join("module");
        std::fs::copy("/bin/true", &module).unwrap();
        let cache_dir = tmp.path().join("cache");
        let cache = Cache::open(&cache_dir).unwrap();
        let server = Server::with_cache(&[], Some(cache)).unwrap();
        let _one = SHARED_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        server.share_with(65534, 65534).unwrap();
        let m = Mapped::new(&module);
        assert!(converse(&server, &m, &module, 1 << 30));
        let files = |d: &Path| -> Vec<String> {
            std::fs::read_dir(d)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("mod-"))
                .collect()
        };
        let theirs = cache_dir.join("65534");
        profdev_testkit::wait_until(
            "user 65534's cache file",
            std::time::Duration::from_secs(60),
            || theirs.exists() && !files(&theirs).is_empty(),
        );
        assert_eq!(files(&cache_dir), Vec::<String>::new());
        let mode = std::fs::metadata(&theirs).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_forged_report_is_refused_from_its_size_and_reports_are_counted() {
        let server = Server::with_cache(&[], None).unwrap();
        let out = server.reports_dir();
        std::fs::File::create(out.join("cov.1.0"))
            .unwrap()
            .set_len(128 << 20)
            .unwrap();
        std::fs::write(
            out.join("cov.2.0"),
            "profdev-coverage 1\npid 2\ntraps 0\nend\n",
        )
        .unwrap();
        let t = std::time::Instant::now();
        let (_, notes) = server.collect();
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            notes
                .iter()
                .any(|n| n.contains("cov.1.0") && n.contains("134217728 bytes, more than the 256")),
            "{notes:?}"
        );
        assert!(!notes.iter().any(|n| n.contains("cov.2.0")), "{notes:?}");
        // At most MAX_REPORTS are read.
        for i in 0..MAX_REPORTS {
            std::fs::File::create(out.join(format!("cov.{}.1", i + 10))).unwrap();
        }
        let (_, notes) = server.collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("more than 10000 reports; the others were not read")),
            "{notes:?}"
        );
    }

    #[test]
    fn another_users_connections_are_bounded() {
        if !profdev_testkit::privileged("a run shared with user 65534", root()) {
            return;
        }
        let server = Server::with_cache(&[], None).unwrap();
        let _one = SHARED_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        server.share_with(65534, 65534).unwrap();
        let held: Vec<UnixStream> = (0..MAX_FOREIGN_CONNS)
            .map(|_| UnixStream::connect(server.socket()).unwrap())
            .collect();
        // One more than the bound: closed at once.
        let mut extra = UnixStream::connect(server.socket()).unwrap();
        extra
            .set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        let mut b = [0u8; 1];
        assert_eq!(extra.read(&mut b).unwrap(), 0);
        // Once they go, a connection is served again.
        drop(held);
        let me = std::process::id();
        let line = format!("MOD {me} 1 1 0 1000 2000 /nonexistent\n");
        profdev_testkit::wait_until(
            "a connection served",
            std::time::Duration::from_secs(60),
            || {
                let mut c = UnixStream::connect(server.socket()).unwrap();
                c.write_all(line.as_bytes()).unwrap();
                let mut answer = String::new();
                let _ = BufReader::new(c).read_line(&mut answer);
                answer == "SKIP\n"
            },
        );
    }

    #[test]
    fn notes_are_bounded() {
        let mut s = State::default();
        for i in 0..MAX_NOTES + 5 {
            s.note(format!("note {i}"));
            s.note(format!("note {i}"));
        }
        assert_eq!(s.notes.len(), MAX_NOTES + 1);
        assert!(s.notes[MAX_NOTES].contains("the others were dropped"));
    }

    #[test]
    fn private_directories_are_0700() {
        let server = Server::with_cache(&[], None).unwrap();
        let dir = server.reports_dir().parent().unwrap().to_path_buf();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn the_sweep_removes_only_what_nothing_uses() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        let made = |name: &str, runtime: bool| -> PathBuf {
            let d = t.join(name);
            std::fs::create_dir(&d).unwrap();
            if runtime {
                std::fs::copy("/bin/true", d.join(RUNTIME_NAME)).unwrap();
                std::fs::create_dir(d.join("out")).unwrap();
            }
            d
        };
        let stale = made("profdev-cov.stale", true);
        let locked = made("profdev-cov.locked", true);
        let mapped = made("profdev-cov.mapped", true);
        let fresh = made("profdev-cov.fresh", false);
        // A run's whose runtime was removed while its process ran on.
        let left = made("profdev-cov.left", true);
        std::fs::remove_file(left.join(RUNTIME_NAME)).unwrap();
        let other = made("other", true);
        let lock = std::fs::File::open(&locked).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let m = Mapped::new(&mapped.join(RUNTIME_NAME));
        assert_eq!(sweep(t), 2);
        assert!(!stale.exists() && !left.exists());
        for kept in [&locked, &mapped, &fresh, &other] {
            assert!(kept.exists(), "{}", kept.display());
        }
        // Once unmapped and unlocked, they go too (not the fresh one
        // without a runtime: a run being set up).
        drop((m, lock));
        assert_eq!(sweep(t), 2);
        assert!(fresh.exists() && other.exists());
    }
}
