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
//! profdev: TEXT <code bytes> <patches> <module id>
//!          then the code, then 12 bytes per patch, relative to the
//!          load ([`crate::encode::wire`])
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
//! **Hit mode** ([`Server::set_mode`], [`launch_in`]): the plans and
//! encodings are made for [`Mode::Hits`] (cprof's marks): each block's
//! count is then 1 if it ran, in any process, else 0, and no branch is
//! reported. The runtime is the same: a probe stores 1 in its counter's
//! low byte instead of adding 1.
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
//! 1`, `pid N`, `traps N`, `once N` (one-shot probes taken, hit mode),
//! then per module `M <id dec> <first counter dec>
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
use crate::cache::{Cache, Key, Stamp};
use crate::counts::{Block, Branch, ModuleCoverage};
use crate::encode::{encode_with, Encoded};
use crate::plan::{How, Mode, Plan};

// The server's life, its directory and listening thread.
mod server;
// One module's conversation with a runtime.
mod serve;
// Modules planned on first use.
mod planning;
// What another user's process may ask.
mod bounds;
// The reports read back.
mod collect;
// Directories earlier runs left behind.
mod sweep;
// A plan, there or being read from the cache.
mod plan_cell;
#[cfg(test)]
mod tests;

pub use bounds::MAX_FOREIGN_CONNS;
pub use server::Area;
pub use sweep::sweep;
// (The submodules share this module's names: `use super::*`.)
use bounds::*;
use plan_cell::PlanCell;
use planning::*;
use serve::*;

/// The runtime, a shared object for `LD_PRELOAD` (or dlopen, attach mode).
pub const RUNTIME: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libprofdev_cov.so"));

/// A report with call targets larger than this is refused (see
/// `collect::report_bound` for one without).
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

/// An encoding kept for the loads at one offset ([`offset_of`]).
#[derive(Clone)]
struct Cached {
    /// The bias of the first load it served.
    bias: u64,
    /// That load's area.
    area: u64,
    enc: Arc<Encoded>,
    /// The bias and area its patches are for: the first load's, or bias
    /// 0 and the offset for the on-disk cache's (kept as read, not
    /// copied).
    made: (u64, u64),
}

/// The distance from a load's bias to its area, what an encoding is
/// reusable for.
fn offset_of(bias: u64, area: u64) -> u64 {
    area.wrapping_sub(bias)
}

/// How three kinds of [`Server::collect`]'s notes end, for a command
/// that gathers its notes by kind (cprof): a module's blocks that could
/// not be counted (`PATH: N of M` before it), ...
pub const NOTE_UNCOUNTED: &str = " blocks could not be counted";
/// ... its blocks counted through a breakpoint (`PATH: N` before it) ...
pub const NOTE_TRAPPED: &str =
    " blocks shorter than a jump are counted through a breakpoint (slower)";
/// ... and the breakpoints taken (`N` before it).
pub const NOTE_TRAPS: &str = " breakpoints were taken";

/// One planned module, shared by the processes that map it.
struct Entry {
    path: PathBuf,
    /// The file as it was opened to be planned (device and inode checked
    /// against the mapping), kept for whoever places the counts on lines
    /// after the processes are gone (`ModuleCoverage::file`); None when
    /// the descriptor could not be duplicated.
    file: Option<crate::counts::OpenFile>,
    plan: PlanCell,
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
    /// Where its first load came among the run's loads served: the
    /// order the counts list modules in (a process asks for its modules
    /// in the loader's order, one after another; their entries are made
    /// as the server finds them, several at once).
    first_load: Option<u64>,
    /// Blocks left uncounted by an encoding failure or a skipped patch.
    lost: BTreeSet<usize>,
    /// Skipped patches' link-time addresses (their blocks are lost too).
    skipped: Vec<u64>,
    /// Encodings by the area's offset from the bias ([`offset_of`]): the
    /// bias and area each was made for, and the result.
    encoded: HashMap<u64, Cached>,
}

#[derive(Default)]
struct State {
    select: Vec<String>,
    /// What the trampolines do beyond counting (call targets).
    options: crate::encode::Options,
    /// What the probes record: counts, or hits (cprof's marks).
    mode: Mode,
    entries: Vec<Entry>,
    by_file: HashMap<(u64, u64), usize>,
    notes: Vec<String>,
    /// Encodings made, loads served a copy of one, and loads served the
    /// on-disk cache's.
    made: u64,
    reused: u64,
    from_disk: u64,
    /// Loads served so far.
    served: u64,
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
pub fn launch(cmd: Command, select: &[String]) -> Result<Launched, LaunchError> {
    launch_in(cmd, select, Mode::Counts)
}

/// [`launch`], its probes recording `mode` ([`Server::set_mode`]: in
/// [`Mode::Hits`] each block's count is 1 if it ran, else 0).
pub fn launch_in(mut cmd: Command, select: &[String], mode: Mode) -> Result<Launched, LaunchError> {
    let server = Server::new(select).map_err(LaunchError::Setup)?;
    server.set_mode(mode);
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
    let from_cache = server.encodings_from_cache();
    let (modules, notes) = server.into_collected();
    Ok(Launched {
        status,
        modules,
        notes,
        from_cache,
    })
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s, 16).ok()
}
