//! profdev mprof's accounting library and the reader of its reports.
//!
//! **The library** (`c/mprof.c`, built by `build.rs` into
//! `libprofdev_mprof.so` and embedded here as [`LIBRARY`]) interposes the
//! malloc family through `LD_PRELOAD`: malloc, calloc, realloc (a free of
//! the old block and an allocation at the realloc's site, moved or not),
//! reallocarray, posix_memalign, aligned_alloc, memalign, valloc, pvalloc
//! and free. C++'s `operator new`/`delete` and Rust's global allocator end
//! in malloc and free, so they are counted there; the *site* is then found
//! past them (below). Each block's requested size is charged to its site;
//! a free subtracts it from the site that allocated the block; high-water
//! marks per site and per module rise on allocation only.
//!
//! * **Pools 2 and 3** ([`POOLS_ENV`]): `mmap`, `mmap64`, `munmap`,
//!   `mremap`, `brk` and `sbrk` are interposed too; an anonymous mapping
//!   or the break's growth is pool 2, a file mapping pool 3, each charged
//!   to its call's site (whole pages; the break in bytes) and credited by
//!   `munmap` (partly, for part of a mapping) or the break's shrinking.
//!   glibc's malloc calls its internal `__mmap`/`__sbrk`, which bypass the
//!   PLT: only the program's own calls are seen, nothing twice. The
//!   regions are a table under one mutex held across the system call.
//! * **Site**: the allocation call's return address, or, when that lies in
//!   a known wrapper, the first return address outside every wrapper
//!   (found with `_Unwind_Backtrace`, taken only for those calls). The
//!   wrappers are recognized by symbol, read once per module from its
//!   `.symtab` and `.dynsym`: C++'s operator new family (`_Znw*`, `_Zna*`),
//!   Rust's `__rust_alloc`/`__rust_realloc`/`__rdl_*`/`__rg_*`, its whole
//!   `alloc` crate (`alloc::raw_vec::*`, `finish_grow`, `Vec`, `String`,
//!   `Box`) and std's System allocator, `strdup`, `strndup`, `wcsdup`,
//!   `asprintf`, `getline`, `getdelim`, `open_memstream`, `xmalloc`,
//!   `xcalloc`, `xrealloc`, `xstrdup`, `xmemdup`, `xzalloc`, glib's
//!   `g_malloc`, `g_malloc0`, `g_realloc`, `g_try_*`, `g_*_n`, `g_strdup`,
//!   `g_strndup`, `g_memdup*`, `g_slice_alloc*`; more with
//!   `PROFDEV_MPROF_WRAPPERS=sym1,sym2` (`mprof --wrapper SYMBOL`).
//! * **Bookkeeping beside the blocks**: a map keyed by block address (a
//!   page map: one 8-byte entry per 16-byte granule where blocks are, no
//!   lock: a block's entry is written by its allocating thread and cleared
//!   by its freeing one); a block the library did not allocate (before it
//!   was loaded, or inside itself) is not in the map and its free
//!   subtracts nothing. A site's and its module's bytes change together
//!   under the module's spin lock (none while the process has one
//!   thread): no update is lost between threads, and high water, per site
//!   and per module, is exact in an order that agrees with the program's
//!   own (why not per-thread deltas: the head of `c/mprof.c`).
//! * **fork**: the child starts from zero (empty tables and counters), so
//!   adding up the reports of all processes counts each allocation once;
//!   frees of blocks the child inherited are not counted. **exec**:
//!   `LD_PRELOAD` stays in the environment, the new image loads the library
//!   afresh and writes its own report.
//! * **The shared table**: the modules, sites and counters live in a
//!   `MAP_SHARED` mapping of a file of the process image's own,
//!   `live.PID.K`, created `O_CREAT|O_EXCL|O_NOFOLLOW` mode 0600 in the
//!   directory `PROFDEV_MPROF_DIR` names (a private 0700 directory profdev
//!   made, see [`Session`]): the counts outlive a process that ends by
//!   `_exit`, a signal, SIGKILL (the OOM killer) or an exec, and profdev
//!   reads them once it is gone ([`read_live`]: a one-page header that
//!   names the layout, every offset and the file's size, then only the
//!   modules and the sites in use). A forked child gets a new table (its
//!   modules kept, its sites empty) mapped in place of the parent's.
//! * **Report**: at a normal exit (a destructor), one text file per
//!   process image, `mprof.PID.N`, created the same way; the table's
//!   header says `WRITING N` meanwhile and `DONE` after, and the table is
//!   then removed ([`read_dir_reports`] takes the text report when it is
//!   complete, else the table, never both). Format: [`Report::parse`].
//! * **Attach** (`c/attach.c`, same shared object): loaded into a running
//!   process by `startmp… PID` or `mprof -p PID` (through profdev-inject),
//!   its `profdev_mprof_attach(config)` takes the settings the environment
//!   gives under `LD_PRELOAD` as `NAME=VALUE` lines (`PROFDEV_MPROF_DIR`,
//!   `PROFDEV_MPROF_WRAPPERS`, `PROFDEV_MPROF_POOLS`...; `mprof.c` reads
//!   them through `mprof_getenv`), starts the accounting, and redirects
//!   the malloc family of every loaded module to this library by
//!   rewriting their GOT entries (JUMP_SLOT and GLOB_DAT), and dlopen's,
//!   so that modules loaded later are redirected too. It returns the
//!   number of entries redirected.
//!
//! **Why C, built at build time and embedded.** The interposer runs inside
//! malloc, before and after any Rust runtime, in processes of any language:
//! it must not allocate, must not unwind through a panic, and must use
//! initial-exec TLS. A Rust cdylib would bring std's runtime into every
//! profiled process, and cargo cannot build one crate's cdylib as an input
//! of another crate's binary on stable (artifact dependencies are
//! unstable). So `build.rs` compiles the C file with the system C compiler
//! (`$CC` or `cc`), the bytes are embedded in the profdev binary, and
//! [`Session::new`] writes them to a private temporary directory at run
//! time: `cargo install --path crates/cli` gives a working `profdev mprof`
//! on any machine with a C compiler. The real allocator is reached through
//! glibc's exported `__libc_malloc` family (no `dlsym`, which allocates):
//! the library needs glibc.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming the pools the library counts, as
/// `startmp`'s digits (`1` the malloc family, `2` anonymous mappings and
/// the break made by the program, `3` file mappings): `123` counts all.
/// Unset, pool 1 alone.
pub const POOLS_ENV: &str = "PROFDEV_MPROF_POOLS";

/// The accounting library, a shared object for `LD_PRELOAD`.
pub const LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libprofdev_mprof.so"));

/// The library's limits (c/mprof.c): modules, and sites, per process.
pub const MAX_MODULES: usize = 1024;
/// See [`MAX_MODULES`].
pub const MAX_SITES: usize = 1 << 16;

/// The longest report the library can write, from its longest lines: the
/// head (`profdev-mprof 1`, `pid`, `dhat`), a `module` line (index,
/// bias, device, inode, two signed counts and a 511-byte path), a `site`
/// line with DHAT's four numbers and its `pools` line, and the tail. A
/// larger file is refused before anything is read (about 15 MB).
pub const MAX_REPORT: u64 = (16 + 15 + 47)
    + MAX_MODULES as u64 * (7 + 4 + 3 + 16 + 4 * 21 + 1 + 511 + 1)
    + MAX_SITES as u64 * ((7 + 16 + 1 + 4 + 5 * 21 + 4 * 21 + 1) + 8)
    + (73 + 4);

/// The shared table's size is checked against the header it starts with,
/// and refused above this (the library's is 13 MiB).
pub const MAX_LIVE: u64 = 64 << 20;

/// One run's private directory: the library, and the reports it writes.
pub struct Session {
    dir: tempfile::TempDir,
    /// The directory's lock, held while the session lives ([`sweep`]).
    _held: std::fs::File,
}

impl Session {
    /// A fresh private directory (0700, a unique name under `$TMPDIR` or
    /// /tmp, locked while the session lives) holding the library (written
    /// through profdev-safefile: `O_EXCL|O_NOFOLLOW`, then renamed) and an
    /// empty `out/` for reports. Directories earlier sessions of this user
    /// left behind are removed first ([`sweep`]).
    pub fn new() -> std::io::Result<Session> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::Builder::new()
            .prefix(LAUNCH_PREFIX)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        let held = hold(dir.path())?;
        let uid = std::fs::symlink_metadata(dir.path())?.uid();
        sweep(&std::env::temp_dir(), uid);
        profdev_safefile::write_file(dir.path().join("libprofdev_mprof.so"), LIBRARY, 0o500)
            .map_err(profdev_safefile::Error::into_os_error)?;
        profdev_safefile::create_dir(dir.path().join("out"), 0o700)
            .map_err(profdev_safefile::Error::into_os_error)?;
        Ok(Session { dir, _held: held })
    }

    /// The session's directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The library's path.
    pub fn library(&self) -> PathBuf {
        self.dir.path().join("libprofdev_mprof.so")
    }

    /// The directory the reports go to.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The environment a profiled command gets: `LD_PRELOAD` (the library
    /// first, then whatever `current` held), `PROFDEV_MPROF_DIR`, and
    /// `PROFDEV_MPROF_WRAPPERS` when `wrappers` is not empty, and
    /// `PROFDEV_MPROF_DHAT=1` with `dhat` (lifetimes and the peak's picture
    /// are then kept, under one global lock).
    pub fn env(
        &self,
        current: Option<OsString>,
        wrappers: &[String],
        dhat: bool,
    ) -> Vec<(String, OsString)> {
        let mut preload = self.library().into_os_string();
        if let Some(c) = current.filter(|c| !c.is_empty()) {
            preload.push(" ");
            preload.push(c);
        }
        let mut env = vec![
            ("LD_PRELOAD".to_string(), preload),
            (
                "PROFDEV_MPROF_DIR".to_string(),
                self.reports_dir().into_os_string(),
            ),
        ];
        if dhat {
            env.push(("PROFDEV_MPROF_DHAT".to_string(), "1".into()));
        }
        if !wrappers.is_empty() {
            env.push((
                "PROFDEV_MPROF_WRAPPERS".to_string(),
                wrappers.join(",").into(),
            ));
        }
        env
    }

    /// Every complete report written so far, in name order; unreadable or
    /// malformed ones are returned as errors (one sentence each).
    pub fn reports(&self) -> (Vec<Report>, Vec<String>) {
        read_reports(&self.reports_dir())
    }
}

/// The name prefix of `mprof CMD`'s private directories.
pub const LAUNCH_PREFIX: &str = "profdev-mprof.";
/// The name prefix of an attached process's directories
/// (`profdev_attach::attach_process`).
pub const ATTACH_PREFIX: &str = "profdev-attach.";
/// A directory of an attach younger than this is never swept (the load
/// into the process may take 20 s), nor one of `mprof CMD` still without
/// its library.
pub const SWEEP_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Lock the directory `dir` (an exclusive `flock` on it, held as long as
/// the returned file is open) so that [`sweep`] leaves it alone.
pub fn hold(dir: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(f)
}

/// Remove, under `tmp`, the private directories of earlier mprof sessions
/// and attaches ([`LAUNCH_PREFIX`], [`ATTACH_PREFIX`]) that belong to
/// `uid` and are over: not locked ([`hold`]: no profdev works in them),
/// and whose library no live process maps (/proc/PID/maps of every
/// process this one may read), and, for an attach's or one without its
/// library, older than [`SWEEP_GRACE`]. Returns how many were removed.
/// `mprof CMD` and `mprof -p` sweep as they start, the prof device at each
/// attach: a directory left by a SIGKILLed profdev, or by an attached
/// process that went on after profdev, goes at the next run of its user.
pub fn sweep(tmp: &Path, uid: u32) -> usize {
    use std::os::unix::fs::MetadataExt;
    // Paths as /proc/PID/maps gives them.
    let Ok(tmp) = std::fs::canonicalize(tmp) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return 0;
    };
    let mut candidates = Vec::new();
    for e in entries.take(MAX_ENTRIES).filter_map(|e| e.ok()) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let attach = name.starts_with(ATTACH_PREFIX);
        if !attach && !name.starts_with(LAUNCH_PREFIX) {
            continue;
        }
        let path = e.path();
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !m.is_dir() || m.uid() != uid {
            continue;
        }
        let old = m
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > SWEEP_GRACE);
        let has_library = path.join("libprofdev_mprof.so").exists();
        if (attach || !has_library) && !old {
            continue;
        }
        candidates.push(path);
    }
    if candidates.is_empty() {
        return 0;
    }
    let mapped = mapped_dirs();
    let mut removed = 0;
    for path in candidates {
        if mapped.iter().any(|m| m == &path) {
            continue;
        }
        use std::os::unix::fs::OpenOptionsExt;
        // Locked by a profdev at work: not ours to take. Holding the lock
        // while removing keeps a new holder out (none can come: only the
        // session that made a directory locks it).
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        else {
            continue;
        };
        if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The directories of mprof libraries that live processes map.
fn mapped_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.filter_map(|e| e.ok()) {
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(maps) = profdev_symbolize::maps::read_file(&p.path().join("maps")) else {
            continue;
        };
        for m in maps.iter().filter(|m| m.is_file()) {
            if let Some(dir) = m.file_path().strip_suffix("/libprofdev_mprof.so") {
                if !out.iter().any(|o: &PathBuf| o.as_os_str() == dir) {
                    out.push(PathBuf::from(dir));
                }
            }
        }
    }
    out
}

/// Read the reports in `dir`: every complete text report (`mprof.PID.K`)
/// and every shared table (`live.PID.K`) whose process did not finish its
/// text report (it ended by `_exit`, a signal, SIGKILL or an exec, or is
/// still running), each process image counted once. See
/// [`read_dir_reports`].
pub fn read_reports(dir: &Path) -> (Vec<Report>, Vec<String>) {
    read_dir_reports(dir, &Limits::LAUNCH)
}

/// How much [`read_dir_reports`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Only the latest text report of each pid (an attached process's
    /// reports on demand supersede each other), and a pid's shared table
    /// supersedes its text reports unless the table says it is done.
    pub latest_per_pid: bool,
    /// At most this many reports and tables (the rest are named in one
    /// error).
    pub max_reports: usize,
    /// At most this many bytes read in all (each text report is at most
    /// [`MAX_REPORT`] and each table at most [`MAX_LIVE`] besides).
    pub max_bytes: u64,
}

impl Limits {
    /// `mprof CMD`: a private directory only the user's own processes
    /// write; every process image's report, up to a million of them.
    pub const LAUNCH: Limits = Limits {
        latest_per_pid: false,
        max_reports: 1 << 20,
        max_bytes: u64::MAX,
    };
    /// An attached process's directory (`startmp PID`, `mprof -p`), which
    /// its user may fill: 256 reports, 64 MiB read in all.
    pub const ATTACHED: Limits = Limits {
        latest_per_pid: true,
        max_reports: 256,
        max_bytes: 64 << 20,
    };
}

/// The entries of a report directory looked at, at most.
const MAX_ENTRIES: usize = 1 << 20;

/// Read the reports and shared tables in `dir` within `limits`; errors
/// (one sentence each) for the unreadable, malformed or refused ones.
/// Files are opened without following links, must be regular files, and
/// are refused by their size before anything is allocated for them.
pub fn read_dir_reports(dir: &Path, limits: &Limits) -> (Vec<Report>, Vec<String>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(d) => d,
        Err(e) => return (vec![], vec![format!("cannot read {}: {e}", dir.display())]),
    };
    let mut texts: BTreeMap<(u32, u64), PathBuf> = BTreeMap::new();
    let mut lives: BTreeMap<(u32, u64), PathBuf> = BTreeMap::new();
    for e in entries.take(MAX_ENTRIES).filter_map(|e| e.ok()) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if let Some(id) = numbered(&name, "mprof.") {
            texts.insert(id, e.path());
        } else if let Some(id) = numbered(&name, "live.") {
            lives.insert(id, e.path());
        }
    }
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    let mut budget = Budget {
        limits: *limits,
        reports: 0,
        bytes: 0,
        refused: 0,
    };
    let mut superseded: std::collections::BTreeSet<(u32, u64)> = Default::default();
    let mut text_of_table: Vec<((u32, u64), Report)> = Vec::new();
    for (&(pid, _), path) in &lives {
        if !budget.room(0) {
            break;
        }
        match read_live(path) {
            Ok(live) => {
                budget.charge(live.read);
                match live.state {
                    LiveState::Done => continue,
                    LiveState::Writing(k) => {
                        // The exit's text report, if complete, is this
                        // image's report; else the table is.
                        if let Some(p) = texts.get(&(pid, k as u64)) {
                            if let Ok(r) = read_text(p, &mut budget) {
                                superseded.insert((pid, k as u64));
                                text_of_table.push(((pid, k as u64), r));
                                continue;
                            }
                        }
                        superseded.insert((pid, k as u64));
                    }
                    LiveState::Counting => {}
                }
                if limits.latest_per_pid {
                    superseded.extend(texts.keys().filter(|&&(p, _)| p == pid).copied());
                }
                reports.push(live.report);
            }
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    reports.extend(text_of_table.into_iter().map(|(_, r)| r));
    let mut chosen: Vec<&PathBuf> = Vec::new();
    for (&(pid, k), path) in &texts {
        if superseded.contains(&(pid, k)) {
            continue;
        }
        if limits.latest_per_pid && texts.range((pid, k + 1)..(pid + 1, 0)).next().is_some() {
            continue; // a later one of the same pid
        }
        chosen.push(path);
    }
    for path in chosen {
        if !budget.room(0) {
            break;
        }
        match read_text(path, &mut budget) {
            Ok(r) => reports.push(r),
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    if budget.refused > 0 {
        errors.push(format!(
            "{} holds more reports than are read in one session ({} reports, {} bytes): the \
             rest were ignored",
            dir.display(),
            limits.max_reports,
            limits.max_bytes
        ));
    }
    (reports, errors)
}

/// What a session has read so far.
struct Budget {
    limits: Limits,
    reports: usize,
    bytes: u64,
    refused: usize,
}

impl Budget {
    /// May one more report of `bytes` be read? (Counted as refused if not.)
    fn room(&mut self, bytes: u64) -> bool {
        if self.reports >= self.limits.max_reports
            || self.bytes.saturating_add(bytes) > self.limits.max_bytes
        {
            self.refused += 1;
            return false;
        }
        true
    }

    /// One more report of `bytes` was read.
    fn charge(&mut self, bytes: u64) {
        self.reports += 1;
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// `PREFIX PID . K` as (PID, K).
fn numbered(name: &str, prefix: &str) -> Option<(u32, u64)> {
    let (pid, k) = name.strip_prefix(prefix)?.split_once('.')?;
    if !pid.bytes().all(|b| b.is_ascii_digit()) || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((pid.parse().ok()?, k.parse().ok()?))
}

/// Open a file of a report directory: no link followed, no blocking on a
/// FIFO, a regular file; with its size.
fn open_report_file(path: &Path) -> Result<(std::fs::File, u64), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let m = f.metadata().map_err(|e| format!("cannot read it: {e}"))?;
    if !m.is_file() {
        return Err("not a regular file".into());
    }
    Ok((f, m.len()))
}

/// One text report (`mprof.PID.K`), opened without following a link, a
/// regular file, refused by its size (over [`MAX_REPORT`]) before it is
/// read.
pub fn read_report(path: &Path) -> Result<Report, String> {
    let mut budget = Budget {
        limits: Limits::LAUNCH,
        reports: 0,
        bytes: 0,
        refused: 0,
    };
    read_text(path, &mut budget)
}

/// A text report, refused by its size (over [`MAX_REPORT`], or over what
/// is left of the budget) before it is read.
fn read_text(path: &Path, budget: &mut Budget) -> Result<Report, String> {
    use std::io::Read;
    let (f, len) = open_report_file(path)?;
    if len > MAX_REPORT {
        return Err(format!(
            "{len} bytes is more than the library can write ({MAX_REPORT}): refused"
        ));
    }
    if !budget.room(len) {
        return Err("over the session's budget: not read".into());
    }
    budget.charge(len);
    let mut text = String::with_capacity(len as usize);
    f.take(MAX_REPORT + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if text.len() as u64 > MAX_REPORT {
        return Err(format!(
            "more than the library can write ({MAX_REPORT} bytes): refused"
        ));
    }
    Report::parse(&text)
}

/// Where a shared table stands (`state` in its header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveState {
    /// The process counts into it (or ended without its destructor).
    Counting,
    /// Its destructor was writing the text report `mprof.PID.K`.
    Writing(u32),
    /// The text report is complete: the table is not the report.
    Done,
}

/// A shared table read back ([`read_live`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Live {
    /// Its state.
    pub state: LiveState,
    /// The counts in it, as a report (no DHAT figures: those are in the
    /// text report only).
    pub report: Report,
    /// Bytes read.
    pub read: u64,
}

/// Read a shared table (`live.PID.K`, c/mprof.c's "the shared table"):
/// its header first (magic, layout, sizes), the file's size must be the
/// one the header names and at most [`MAX_LIVE`]; then only the modules
/// and the sites in use. Sites whose module was not yet known when the
/// process ended are left out.
pub fn read_live(path: &Path) -> Result<Live, String> {
    use std::os::unix::fs::FileExt;
    let (f, len) = open_report_file(path)?;
    let bad = |why: &str| format!("not a shared table of the mprof library ({why})");
    if len > MAX_LIVE {
        return Err(bad(&format!("{len} bytes, more than {MAX_LIVE}")));
    }
    let mut head = [0u8; 4096];
    let n = head.len().min(len as usize);
    f.read_exact_at(&mut head[..n], 0)
        .map_err(|e| format!("cannot read it: {e}"))?;
    let u32_at = |o: usize| u32::from_le_bytes(head[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap_or([0; 8]));
    if n < 168 || &head[..16] != b"profdev-mlive 1\0" {
        return Err(bad("no header"));
    }
    let header_size = u32_at(16) as u64;
    let pid = u32_at(20);
    let total = u64_at(24);
    let (modules_off, used_off, sites_off) = (u64_at(32), u64_at(40), u64_at(48));
    let (max_modules, nsites) = (u32_at(56) as u64, u32_at(60) as u64);
    let (module_size, site_size) = (u32_at(64) as u64, u32_at(68) as u64);
    let m: Vec<u64> = (0..8).map(|i| u32_at(72 + 4 * i) as u64).collect();
    let (m_l_addr, m_path, m_path_size, m_dev, m_ino, m_cur, m_hw, m_resident) =
        (m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7]);
    let s: Vec<u64> = (0..6).map(|i| u32_at(104 + 4 * i) as u64).collect();
    let (s_pc, s_module, s_pools, s_resident, s_own, counters_size) =
        (s[0], s[1], s[2], s[3], s[4], s[5]);
    let state = u32_at(128);
    let report_k = u32_at(132);
    let nmodules = u32_at(136) as u64;
    let nused = u32_at(140) as u64;
    let fits =
        |off: u64, size: u64, within: u64| off.checked_add(size).is_some_and(|e| e <= within);
    let layout_ok = (168..=4096).contains(&header_size)
        && total == len
        && (1..=MAX_MODULES as u64 + 1).contains(&max_modules)
        && (1..=MAX_SITES as u64).contains(&nsites)
        && module_size <= 4096
        && site_size <= 4096
        && counters_size >= 40
        && fits(modules_off, max_modules * module_size, total)
        && fits(used_off, nsites * 4, total)
        && fits(sites_off, nsites * site_size, total)
        && [m_l_addr, m_dev, m_ino, m_cur, m_hw]
            .iter()
            .all(|&o| fits(o, 8, module_size))
        && fits(m_path, m_path_size, module_size)
        && fits(m_resident, counters_size, module_size)
        && [s_pc, s_own].iter().all(|&o| fits(o, 8, site_size))
        && [s_module, s_pools, s_resident]
            .iter()
            .all(|&o| fits(o, 4, site_size))
        && fits(s_own, counters_size, site_size)
        && nmodules < max_modules
        && nused <= nsites;
    if !layout_ok {
        return Err(bad("its header does not describe it"));
    }
    let state = match state {
        0 => LiveState::Counting,
        1 => LiveState::Writing(report_k),
        2 => LiveState::Done,
        _ => return Err(bad("unknown state")),
    };
    let mut read = 4096u64;
    let mut report = Report {
        pid,
        untracked: u64_at(144),
        unknown_frees: u64_at(152),
        table_failures: u64_at(160),
        ..Default::default()
    };
    if state == LiveState::Done {
        return Ok(Live {
            state,
            report,
            read,
        });
    }
    let io = |e: std::io::Error| format!("cannot read it: {e}");
    let le64 = |b: &[u8], o: u64| {
        let o = o as usize;
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]))
    };
    let le32 = |b: &[u8], o: u64| {
        let o = o as usize;
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]))
    };
    // The modules in use, and the slot of sites in no module (the last).
    let mut mods = vec![0u8; (nmodules * module_size) as usize];
    f.read_exact_at(&mut mods, modules_off).map_err(io)?;
    let mut none = vec![0u8; module_size as usize];
    f.read_exact_at(&mut none, modules_off + (max_modules - 1) * module_size)
        .map_err(io)?;
    read += mods.len() as u64 + none.len() as u64;
    let module_rec = |i: u64| &mods[(i * module_size) as usize..((i + 1) * module_size) as usize];
    for i in 0..nmodules {
        let r = module_rec(i);
        let path = &r[m_path as usize..(m_path + m_path_size) as usize];
        let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
        report.modules.push(ReportModule {
            bias: le64(r, m_l_addr),
            dev: le64(r, m_dev),
            ino: le64(r, m_ino),
            current: le64(r, m_cur) as i64,
            high_water: le64(r, m_hw) as i64,
            path: String::from_utf8_lossy(path).into_owned(),
        });
    }
    let mut used = vec![0u8; (nused * 4) as usize];
    f.read_exact_at(&mut used, used_off).map_err(io)?;
    read += used.len() as u64;
    let mut seen = std::collections::BTreeSet::new();
    let mut site = vec![0u8; site_size as usize];
    for j in used.chunks_exact(4) {
        let j = u32::from_le_bytes(j.try_into().unwrap_or([0; 4])) as u64;
        if j >= nsites || !seen.insert(j) {
            continue;
        }
        f.read_exact_at(&mut site, sites_off + j * site_size)
            .map_err(io)?;
        read += site_size;
        let module = le32(&site, s_module) as i32;
        let module = match module {
            -1 => None,
            m if m > 0 && (m as u64) <= nmodules => Some(m as usize - 1),
            _ => continue, // not known yet, or nonsense
        };
        let counters: &[u8] = if le32(&site, s_resident) != 0 {
            match module {
                Some(m) => &module_rec(m as u64)[m_resident as usize..],
                None => &none[m_resident as usize..],
            }
        } else {
            &site[s_own as usize..]
        };
        let (current, high_water) = (le64(counters, 0) as i64, le64(counters, 8) as i64);
        let (allocs, bytes, live) = (le64(counters, 16), le64(counters, 24), le64(counters, 32));
        if allocs == 0 {
            continue;
        }
        let pools = le32(&site, s_pools);
        report.sites.push(ReportSite {
            pc: le64(&site, s_pc),
            module,
            current,
            high_water,
            allocs,
            bytes,
            live,
            dhat: None,
            pools: if (1..8).contains(&pools) {
                pools as u8
            } else {
                1
            },
        });
    }
    Ok(Live {
        state,
        report,
        read,
    })
}

/// A module as the library saw it: a link map's object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportModule {
    /// Its load bias (`l_addr`): a site's link-time pc is `pc - bias`.
    pub bias: u64,
    /// Device and inode of its file when the library first saw it.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Bytes charged to its sites and not freed, at exit.
    pub current: i64,
    /// The most its sites ever held at once.
    pub high_water: i64,
    /// Its path.
    pub path: String,
}

/// One allocating site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportSite {
    /// Its return address in the process.
    pub pc: u64,
    /// Its module (an index into `modules`), if any.
    pub module: Option<usize>,
    /// Bytes allocated there and not freed, at exit.
    pub current: i64,
    /// The most bytes it held at once.
    pub high_water: i64,
    /// Blocks allocated there.
    pub allocs: u64,
    /// Bytes allocated there in all.
    pub bytes: u64,
    /// Blocks allocated there and never freed.
    pub live: u64,
    /// With `PROFDEV_MPROF_DHAT=1`: lifetimes and the peak's picture.
    pub dhat: Option<DhatSite>,
    /// The pools charged here, bits 1 (pool 1), 2 (pool 2), 4 (pool 3).
    pub pools: u8,
}

/// What a site's report adds for DHAT (times in microseconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DhatSite {
    /// The sum of its blocks' lifetimes (a block still live at the end
    /// counts until the end).
    pub total_lifetime: u64,
    /// Blocks live when its bytes were at their high water.
    pub max_blocks: u64,
    /// Its bytes at the process's global peak (t-gmax).
    pub gmax_bytes: u64,
    /// Its blocks at t-gmax.
    pub gmax_blocks: u64,
}

/// One process image's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Its process id.
    pub pid: u32,
    /// Modules, by the index sites name.
    pub modules: Vec<ReportModule>,
    /// Sites with at least one allocation.
    pub sites: Vec<ReportSite>,
    /// Allocations not charged (the site table was full, or made inside
    /// the library itself).
    pub untracked: u64,
    /// Frees of blocks not in the table (allocated before the library was
    /// loaded or in a parent before fork).
    pub unknown_frees: u64,
    /// Blocks not entered in the table (no memory for it).
    pub table_failures: u64,
    /// With `PROFDEV_MPROF_DHAT=1`: the run's end and its global peak's
    /// time (t-gmax), in microseconds since the library started.
    pub dhat: Option<(u64, u64)>,
}

impl Report {
    /// Parse a report:
    ///
    /// ```text
    /// profdev-mprof 1
    /// pid PID
    /// module INDEX 0xBIAS DEV INO CURRENT HIGHWATER PATH
    /// dhat END_US GMAX_US                                       (only with PROFDEV_MPROF_DHAT=1)
    /// site 0xPC MODULE CURRENT HIGHWATER ALLOCS BYTES LIVE [LIFETIMES_US MAXBLOCKS GMAXBYTES GMAXBLOCKS]
    ///                                                          (MODULE -1: none)
    /// pools MASK                  (the site above's pools when not pool 1 alone: 1, 2, 4 = pools 1, 2, 3;
    ///                              ALLOCS then counts mappings too, LIVE mappings never unmapped)
    /// untracked ALLOCS UNKNOWN_FREES TABLE_FAILURES
    /// end
    /// ```
    ///
    /// A file without its `end` line (a process killed before its
    /// destructor finished) is an error.
    pub fn parse(text: &str) -> Result<Report, String> {
        let mut lines = text.lines();
        if lines.next() != Some("profdev-mprof 1") {
            return Err("not an mprof report (no \"profdev-mprof 1\" header)".into());
        }
        let mut r = Report::default();
        let mut ended = false;
        for (n, line) in lines.enumerate() {
            let bad = || format!("line {}: cannot parse {line:?}", n + 2);
            let num = |s: Option<&str>| -> Result<u64, String> {
                let s = s.ok_or_else(bad)?;
                match s.strip_prefix("0x") {
                    Some(h) => u64::from_str_radix(h, 16),
                    None => s.parse(),
                }
                .map_err(|_| bad())
            };
            let int = |s: Option<&str>| -> Result<i64, String> {
                s.ok_or_else(bad)?.parse().map_err(|_| bad())
            };
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "pid" => r.pid = rest.parse().map_err(|_| bad())?,
                "dhat" => {
                    let mut f = rest.split(' ');
                    r.dhat = Some((num(f.next())?, num(f.next())?));
                }
                "module" => {
                    if r.modules.len() >= MAX_MODULES {
                        return Err(format!("more than {MAX_MODULES} modules: refused"));
                    }
                    let mut f = rest.splitn(7, ' ');
                    let index = num(f.next())?;
                    if index != r.modules.len() as u64 {
                        return Err(bad());
                    }
                    r.modules.push(ReportModule {
                        bias: num(f.next())?,
                        dev: num(f.next())?,
                        ino: num(f.next())?,
                        current: int(f.next())?,
                        high_water: int(f.next())?,
                        path: f.next().unwrap_or("").to_string(),
                    });
                }
                "site" => {
                    if r.sites.len() >= MAX_SITES {
                        return Err(format!("more than {MAX_SITES} sites: refused"));
                    }
                    let mut f = rest.split(' ');
                    let pc = num(f.next())?;
                    let module = int(f.next())?;
                    let module = if module < 0 {
                        None
                    } else if (module as usize) < r.modules.len() {
                        Some(module as usize)
                    } else {
                        return Err(bad());
                    };
                    let (current, high_water) = (int(f.next())?, int(f.next())?);
                    let (allocs, bytes, live) = (num(f.next())?, num(f.next())?, num(f.next())?);
                    let dhat = match f.next() {
                        None => None,
                        first => Some(DhatSite {
                            total_lifetime: num(first)?,
                            max_blocks: int(f.next())?.max(0) as u64,
                            gmax_bytes: int(f.next())?.max(0) as u64,
                            gmax_blocks: int(f.next())?.max(0) as u64,
                        }),
                    };
                    r.sites.push(ReportSite {
                        pc,
                        module,
                        current,
                        high_water,
                        allocs,
                        bytes,
                        live,
                        dhat,
                        pools: 1,
                    });
                }
                "pools" => {
                    let mask = num(Some(rest))?;
                    match r.sites.last_mut() {
                        Some(s) if mask > 0 && mask < 8 => s.pools = mask as u8,
                        _ => return Err(bad()),
                    }
                }
                "untracked" => {
                    let mut f = rest.split(' ');
                    r.untracked = num(f.next())?;
                    r.unknown_frees = num(f.next())?;
                    r.table_failures = num(f.next())?;
                }
                "end" => {
                    ended = true;
                    break;
                }
                _ => return Err(bad()),
            }
        }
        if !ended {
            return Err(
                "the report is incomplete (the process ended before writing it all)".into(),
            );
        }
        Ok(r)
    }
}

/// A module of the merged profile: the same file (path, device, inode)
/// across processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Module {
    /// Its path.
    pub path: String,
    /// Device and inode of the file that was mapped.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Current bytes, summed over processes.
    pub current: u64,
    /// High water, summed over processes.
    pub high_water: u64,
    /// Sites by link-time return address.
    pub sites: BTreeMap<u64, Site>,
}

/// A site of the merged profile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Site {
    /// Current bytes at exit.
    pub current: u64,
    /// High water.
    pub high_water: u64,
    /// Blocks allocated.
    pub allocs: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Blocks never freed.
    pub live: u64,
    /// DHAT's figures, summed over processes.
    pub dhat: DhatSite,
    /// The pools charged here (bits 1, 2, 4 = pools 1, 2, 3).
    pub pools: u8,
}

/// The reports merged by module file and link-time pc, modules in the order
/// first seen. Counters of the same site in several processes are added
/// (a high water is then the sum of each process's own).
pub fn merge(reports: &[Report]) -> Vec<Module> {
    let mut out: Vec<Module> = Vec::new();
    for r in reports {
        let idx: Vec<usize> = r
            .modules
            .iter()
            .map(|m| {
                let key = (&m.path, m.dev, m.ino);
                let i = out
                    .iter()
                    .position(|o| (&o.path, o.dev, o.ino) == key)
                    .unwrap_or_else(|| {
                        out.push(Module {
                            path: m.path.clone(),
                            dev: m.dev,
                            ino: m.ino,
                            ..Default::default()
                        });
                        out.len() - 1
                    });
                out[i].current += m.current.max(0) as u64;
                out[i].high_water += m.high_water.max(0) as u64;
                i
            })
            .collect();
        for s in &r.sites {
            let Some(m) = s.module else { continue };
            let link = s.pc.wrapping_sub(r.modules[m].bias);
            let site = out[idx[m]].sites.entry(link).or_default();
            site.current += s.current.max(0) as u64;
            site.high_water += s.high_water.max(0) as u64;
            site.allocs += s.allocs;
            site.bytes += s.bytes;
            site.live += s.live;
            site.pools |= s.pools;
            if let Some(d) = s.dhat {
                site.dhat.total_lifetime += d.total_lifetime;
                site.dhat.max_blocks += d.max_blocks;
                site.dhat.gmax_bytes += d.gmax_bytes;
                site.dhat.gmax_blocks += d.gmax_blocks;
            }
        }
    }
    out
}

/// A module's counters in the prof device's memory-mode histogram layout
/// (spec §2.3): `0` current, `1` high water, `2*(p+1)` and `2*(p+1)+1`
/// current and high water at return address p; non-zero values only, in
/// ascending index order.
pub fn histogram_pairs(m: &Module) -> Vec<(u64, u64)> {
    let mut pairs = vec![(0, m.current), (1, m.high_water)];
    for (&p, s) in &m.sites {
        pairs.push((2 * (p + 1), s.current));
        pairs.push((2 * (p + 1) + 1, s.high_water));
    }
    pairs.retain(|&(_, v)| v != 0);
    pairs.sort_unstable();
    pairs
}

/// Decode memory-mode pairs (spec §2.4, TV-P4): the module's (current,
/// high water) and per return address p its (current, high water).
pub fn decode_pairs(pairs: &[(u64, u64)]) -> ((u64, u64), BTreeMap<u64, (u64, u64)>) {
    let mut module = (0, 0);
    let mut sites: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for &(i, v) in pairs {
        match i {
            0 => module.0 = v,
            1 => module.1 = v,
            _ => {
                let q = i - 2;
                let e = sites.entry(q / 2).or_default();
                if q & 1 == 0 {
                    e.0 = v;
                } else {
                    e.1 = v;
                }
            }
        }
    }
    (module, sites)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tv_p4_decoding() {
        // `0 4096` module current, `1 8192` module high water, `7 64`:
        // p = 5, t = 1 (high water), pc = 2.
        let ((cur, hw), sites) = decode_pairs(&[(0, 4096), (1, 8192), (7, 64)]);
        assert_eq!((cur, hw), (4096, 8192));
        assert_eq!(sites.into_iter().collect::<Vec<_>>(), [(2, (0, 64))]);
    }

    #[test]
    fn histogram_round_trip() {
        let mut m = Module {
            current: 10,
            high_water: 30,
            ..Default::default()
        };
        m.sites.insert(
            0x1139,
            Site {
                current: 10,
                high_water: 20,
                ..Default::default()
            },
        );
        m.sites.insert(
            0x2000,
            Site {
                current: 0,
                high_water: 10,
                ..Default::default()
            },
        );
        let pairs = histogram_pairs(&m);
        assert_eq!(
            pairs,
            [
                (0, 10),
                (1, 30),
                (2 * 0x113a, 10),
                (2 * 0x113a + 1, 20),
                (2 * 0x2001 + 1, 10)
            ]
        );
        let (module, sites) = decode_pairs(&pairs);
        assert_eq!(module, (10, 30));
        assert_eq!(sites[&0x1139], (10, 20));
        assert_eq!(sites[&0x2000], (0, 10));
    }

    /// A shared table as the library lays one out (offsets in the
    /// header: a small layout of its own), one module `/m`, its sites
    /// (pc, current, high water, allocations), the state and its K.
    fn fake_live(pid: u32, state: u32, k: u32, sites: &[(u64, i64, i64, u64)]) -> Vec<u8> {
        let (module_size, site_size, max_modules, nsites) = (128u64, 64u64, 2u64, 4u64);
        let modules_off = 4096u64;
        let used_off = modules_off + max_modules * module_size;
        let sites_off = used_off + nsites * 4;
        let total = sites_off + nsites * site_size;
        let mut b = vec![0u8; total as usize];
        let put32 = |b: &mut Vec<u8>, o: u64, v: u32| {
            b[o as usize..o as usize + 4].copy_from_slice(&v.to_le_bytes())
        };
        let put64 = |b: &mut Vec<u8>, o: u64, v: u64| {
            b[o as usize..o as usize + 8].copy_from_slice(&v.to_le_bytes())
        };
        b[..16].copy_from_slice(b"profdev-mlive 1\0");
        put32(&mut b, 16, 168);
        put32(&mut b, 20, pid);
        for (o, v) in [
            (24, total),
            (32, modules_off),
            (40, used_off),
            (48, sites_off),
        ] {
            put64(&mut b, o, v);
        }
        let layout = [
            max_modules,
            nsites,
            module_size,
            site_size,
            0,  // l_addr
            8,  // path
            32, // path size
            40, // dev
            48, // ino
            56, // cur
            64, // hw
            72, // resident counters
            0,  // site pc
            8,  // module
            12, // pools
            16, // resident
            24, // own counters
            40, // counters size
            state as u64,
            k as u64,
            1, // modules
            sites.len() as u64,
        ];
        for (i, v) in layout.iter().enumerate() {
            put32(&mut b, 56 + 4 * i as u64, *v as u32);
        }
        b[modules_off as usize + 8..modules_off as usize + 10].copy_from_slice(b"/m");
        for (j, &(pc, cur, hw, n)) in sites.iter().enumerate() {
            put32(&mut b, used_off + 4 * j as u64, j as u32);
            let at = sites_off + j as u64 * site_size;
            put64(&mut b, at, pc);
            put32(&mut b, at + 8, 1); // module 0
            put32(&mut b, at + 12, 1); // pool 1
            for (i, v) in [cur as u64, hw as u64, n, hw as u64, n].iter().enumerate() {
                put64(&mut b, at + 24 + 8 * i as u64, *v);
            }
        }
        b
    }

    const TEXT: &str =
        "profdev-mprof 1\npid 7\nmodule 0 0x0 1 2 5 5 /m\nsite 0x20 0 5 5 1 5 1\nend\n";

    #[test]
    fn tables_and_reports_each_image_once() {
        let d = tempfile::tempdir().unwrap();
        let w = |name: &str, b: &[u8]| std::fs::write(d.path().join(name), b).unwrap();
        let pcs = |r: &[Report]| -> Vec<u64> {
            let mut v: Vec<u64> = r
                .iter()
                .flat_map(|r| r.sites.iter().map(|s| s.pc))
                .collect();
            v.sort();
            v
        };
        // Counting (ended by _exit or a signal): the table is the report.
        w("live.7.0", &fake_live(7, 0, 0, &[(0x10, 100, 300, 3)]));
        let (r, e) = read_reports(d.path());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].modules[0].path, "/m");
        let s = &r[0].sites[0];
        assert_eq!(
            (s.pc, s.current, s.high_water, s.allocs, s.module),
            (0x10, 100, 300, 3, Some(0))
        );
        // Writing report 0, which is complete: the text report, once.
        w("live.7.0", &fake_live(7, 1, 0, &[(0x10, 100, 300, 3)]));
        w("mprof.7.0", TEXT.as_bytes());
        let (r, e) = read_reports(d.path());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(pcs(&r), [0x20]);
        // ...incomplete (killed while writing it): the table, no error.
        w("mprof.7.0", &TEXT.as_bytes()[..40]);
        let (r, e) = read_reports(d.path());
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(pcs(&r), [0x10]);
        // Done: the text report alone.
        w("live.7.0", &fake_live(7, 2, 0, &[(0x10, 100, 300, 3)]));
        w("mprof.7.0", TEXT.as_bytes());
        assert_eq!(pcs(&read_reports(d.path()).0), [0x20]);
        // A table whose size is not its header's: refused.
        let mut long = fake_live(8, 0, 0, &[(0x30, 1, 1, 1)]);
        long.push(0);
        w("live.8.0", &long);
        let (r, e) = read_reports(d.path());
        assert_eq!(pcs(&r), [0x20]);
        assert!(e[0].contains("its header does not describe it"), "{e:?}");
        std::fs::remove_file(d.path().join("live.8.0")).unwrap();
        // Attached: a running process's table supersedes its reports on
        // demand; of the reports, the latest of each pid.
        w("live.7.0", &fake_live(7, 0, 0, &[(0x10, 100, 300, 3)]));
        w("mprof.9.0", TEXT.replace("0x20", "0x90").as_bytes());
        w("mprof.9.1", TEXT.replace("0x20", "0x91").as_bytes());
        let (r, e) = read_dir_reports(d.path(), &Limits::ATTACHED);
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(pcs(&r), [0x10, 0x91]);
    }

    #[test]
    fn reports_are_bounded_before_they_are_read() {
        let d = tempfile::tempdir().unwrap();
        // Larger than the library can write: refused by its size.
        let f = std::fs::File::create(d.path().join("mprof.1.0")).unwrap();
        f.set_len(128 << 20).unwrap();
        let t = std::time::Instant::now();
        let (r, e) = read_reports(d.path());
        assert!(r.is_empty() && e[0].contains("refused"), "{e:?}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        std::fs::remove_file(d.path().join("mprof.1.0")).unwrap();
        // More sites than the library keeps: refused.
        let mut text = String::from("profdev-mprof 1\nmodule 0 0x0 1 2 0 0 /m\n");
        for pc in 0..=MAX_SITES {
            text.push_str(&format!("site {pc:#x} 0 1 1 1 1 1\n"));
        }
        text.push_str("end\n");
        assert!(Report::parse(&text).unwrap_err().contains("sites"));
        // A session's budget: reports past it are named, not read.
        for i in 0..3 {
            std::fs::write(d.path().join(format!("mprof.{i}.0")), TEXT).unwrap();
        }
        let few = Limits {
            max_reports: 2,
            ..Limits::ATTACHED
        };
        let (r, e) = read_dir_reports(d.path(), &few);
        assert_eq!(r.len(), 2);
        assert!(e[0].contains("more reports than are read"), "{e:?}");
    }

    #[test]
    fn parse_and_merge() {
        let a = "profdev-mprof 1\npid 7\n\
                 module 0 0x1000 1 2 100 300 /bin/x y\n\
                 site 0x1139 0 100 200 3 300 1\nsite 0x9 -1 5 5 1 5 1\n\
                 untracked 1 2 0\nend\n";
        let r = Report::parse(a).unwrap();
        assert_eq!(r.modules[0].path, "/bin/x y");
        assert_eq!(r.sites[1].module, None);
        assert_eq!((r.untracked, r.unknown_frees), (1, 2));
        let b = a.replace("0x1000", "0x5000").replace("0x1139", "0x5139");
        let m = merge(&[r, Report::parse(&b).unwrap()]);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].current, m[0].high_water), (200, 600));
        assert_eq!(m[0].sites[&0x139].high_water, 400);
        assert_eq!(m[0].sites[&0x139].live, 2);
        assert!(Report::parse("profdev-mprof 1\npid 1\n")
            .unwrap_err()
            .contains("incomplete"));
        assert!(Report::parse("x").is_err());
        let d = Report::parse(
            "profdev-mprof 1\npid 7\ndhat 900 400\nmodule 0 0x0 1 2 0 0 /x\n\
             site 0x10 0 5 5 1 5 1 800 1 5 1\nend\n",
        )
        .unwrap();
        assert_eq!(d.dhat, Some((900, 400)));
        assert_eq!(
            d.sites[0].dhat,
            Some(DhatSite {
                total_lifetime: 800,
                max_blocks: 1,
                gmax_bytes: 5,
                gmax_blocks: 1
            })
        );
        assert!(Report::parse("profdev-mprof 1\nsite 0x1 3 0 0 0 0 0\nend\n").is_err());
        let p = Report::parse(
            "profdev-mprof 1\nmodule 0 0x0 1 2 0 0 /x\nsite 0x10 0 8192 8192 1 8192 1\npools 2\n\
             site 0x20 0 5 5 1 5 1\nend\n",
        )
        .unwrap();
        assert_eq!((p.sites[0].pools, p.sites[1].pools), (2, 1));
        assert_eq!(merge(&[p])[0].sites[&0x10].pools, 2);
        assert!(Report::parse("profdev-mprof 1\npools 2\nend\n").is_err());
        assert!(Report::parse(
            "profdev-mprof 1\nmodule 0 0x0 1 2 0 0 /x\nsite 0x10 0 1 1 1 1 1\npools 9\nend\n"
        )
        .is_err());
    }
}
