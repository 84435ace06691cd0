//! prof's memory mode (`startmp[digits] [PID]`): the control message and
//! the records a memory report fills.
//!
//! # Synopsis
//!
//! ```text
//! echo startmp1 > prof/ctl        # memory mode, nothing hooked yet
//! echo startmp1 PID > prof/ctl    # attach to running process PID
//! echo stop > prof/ctl            # PID reports now (or when it exits)
//! cat prof/NNNNNNNN/histogram     # its bytes
//! ```
//!
//! # Description
//!
//! In memory mode a record's histogram holds bytes, not ticks, in the
//! seed's layout (spec §2.3): index 0 the module's current bytes, 1 its
//! high water, `2*(p+1)` and `2*(p+1)+1` the current and high-water bytes
//! charged to p, the allocating call's return address in the module's
//! link-time address space (consumers subtract 1 to reach the call). The
//! pairs are served by the same one-pair-per-read protocol as sampling's
//! (`0x<index> <bytes>\n`), zero values left out, values 64-bit.
//!
//! Nothing in the device counts allocations: the accounting runs inside
//! the profiled processes (`profdev_mprof`'s library), and their reports
//! are handed to the device through [`Prof::memory_report`]: `profdev
//! mprof CMD` drives a private instance of this device that way, with the
//! library preloaded.
//!
//! **`startmp[digits] PID`** attaches to a running process, as `heaptrack
//! -p` does: the writer must be allowed to ptrace PID (EPERM otherwise:
//! the kernel's rule for the writer, its ids against all of PID's and PID
//! dumpable, checked again on PID itself, held by a pidfd, once every
//! thread is stopped and before the library is loaded, so that a process
//! that exec'd a set-user-id program meanwhile is let go untouched;
//! ESRCH for no such process, EBUSY while sampling or another tracer holds
//! it); memory mode may already be on (`startmp` alone waits for such an
//! attach). The device writes the library into a fresh private directory
//! (0711, the library 0555, a report directory 0700 owned by the process's
//! user), stops every thread of PID with ptrace (profdev-inject), loads the
//! library with the process's own `dlopen`, and calls its
//! `profdev_mprof_attach`, which redirects the malloc family of every
//! loaded module (their GOT entries) to the library, and of modules loaded
//! later (dlopen is redirected too); then it detaches and the process runs
//! on, counting. Blocks allocated before the attach are never subtracted
//! from anything. Its reports fill the histograms of the modules the
//! `module` list wants, in the layout above: when it exits (the library
//! writes a report at exit; the device watches the process for that), and
//! at `stop`, which first asks every attached process still running for a
//! report (the library's reporter thread, `profdev-mprof`, writes one when
//! the device writes the FIFO `request` in its report directory; `stop`
//! waits for it at most 5 s per process) and then stops.
//! A statically linked program is refused with "process N is out of reach:
//! statically linked, start it under profdev mprof instead" (ENXIO).
//!
//! # Example
//!
//! ```text
//! echo module myprog > /mnt/prof/prof/ctl
//! echo startmp1 4242 > /mnt/prof/prof/ctl
//! # ... 4242 runs ...
//! echo stop > /mnt/prof/prof/ctl
//! cat /mnt/prof/prof/00000001/histogram
//! ```
//!
//! # Bugs
//!
//! * The histograms of an attached process fill when it exits or at
//!   `stop`, not while it runs between: reading a histogram does not ask
//!   for a report. A process that ends with `_exit`, a signal or SIGKILL
//!   writes no exit report: its table of counts (`live.PID.K` in its
//!   report directory, a file the library counts into through a shared
//!   mapping) is read instead, as it is whenever it is newer than the
//!   reports. After `stop` (or `end`) its exit report is dropped: the
//!   histograms keep what `stop` took. Each report replaces the histograms
//!   of the modules it names (processes attached one after the other share
//!   a module such as libc.so.6: the last report wins).
//! * The report directory is the process's user's: what is read from it
//!   is bounded before it is read (a report at most what the library can
//!   write, about 15 MB, checked by its size; a table the size its header
//!   names, 13 MiB; at most 256 files and 64 MiB per reading), and only
//!   regular files opened without following links. The library opens its
//!   FIFO `request` `O_NOFOLLOW` and stops asking for reports if anything
//!   else is found there.
//! * The private directory stays while its process runs after the device
//!   let it go (the device ended, or `mprof -p` was interrupted); it is
//!   removed at a later attach or mprof run of the same user once no
//!   process maps its library and it is over 60 s old.
//! * The library adds a thread to the process (`profdev-mprof`, every
//!   signal blocked, asleep in open(2) on its FIFO).
//! * Children it forks after the attach count too, but only a report
//!   written before the attached process exits is read; programs it execs
//!   are not counted (no `LD_PRELOAD` in their environment).
//! * Every thread is held while the library loads: if one of them holds a
//!   lock `dlopen` needs (the loader's, or malloc's arena), the load gives
//!   up after 20 s and the attach fails, the process left as it was.
//! * The redirected `dlopen` calls the real one from the library, so a
//!   library opened by bare name through its caller's RUNPATH is searched
//!   with the library's instead (as with `heaptrack -p`).
//! * x86-64 and glibc only.

use super::histogram::ModRecord;
use super::{Mode, Prof, State};
use crate::access::{ptrace_may_attach, Cred, Permit};
use crate::ctl;
use crate::pc_counts::PcCounts;
use crate::DevError;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, Weak};
use std::time::Duration;

/// Pools of `startmp` (spec §2.2, Linux meanings): 1 the malloc family,
/// 2 mmap/brk called by the program, 3 file mappings.
pub const POOL_MALLOC: u8 = 1;
/// See [`POOL_MALLOC`].
pub const POOL_MAP: u8 = 2;
/// See [`POOL_MALLOC`].
pub const POOL_FILE: u8 = 4;

/// The pools a `startmp` verb names: `startmp` alone none (memory mode
/// with nothing hooked), else a non-empty combination of the digits 1, 2
/// and 3, each at most once, in any order. `None` for anything else.
pub fn parse_pools(verb: &str) -> Option<u8> {
    let digits = verb.strip_prefix("startmp")?;
    let mut pools = 0u8;
    for c in digits.chars() {
        let bit = match c {
            '1' => POOL_MALLOC,
            '2' => POOL_MAP,
            '3' => POOL_FILE,
            _ => return None,
        };
        if pools & bit != 0 {
            return None;
        }
        pools |= bit;
    }
    Some(pools)
}

/// One module's memory counters, as a report gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryModule {
    /// The module's name (its file's basename).
    pub name: String,
    /// Its file path.
    pub path: String,
    /// Pairs in the memory layout (index, bytes), as
    /// `profdev_mprof::histogram_pairs` makes them.
    pub pairs: Vec<(u64, u64)>,
}

impl Prof {
    /// `startmp[digits] [PID]`, with `data` the whole message.
    pub(super) fn startmp(&self, data: &[u8], cred: Option<Cred>) -> Result<(), DevError> {
        let msg = ctl::quoted(data);
        let words: Vec<&str> = msg.split_whitespace().collect();
        let bad = |why: String| DevError::BadCtlArg {
            msg: msg.clone(),
            why,
        };
        let pools = parse_pools(words[0]).ok_or_else(|| {
            bad("the pools after startmp are a combination of the digits 1, 2 and 3".into())
        })?;
        if words.len() > 2 {
            return Err(bad(
                "startmp takes at most one argument, a process id".into()
            ));
        }
        let pid = match words.get(1) {
            None => None,
            Some(w) => match w.parse::<u32>() {
                Ok(p) if p > 0 && !w.starts_with('+') => Some(p),
                _ => return Err(bad(format!("{w:?} is not a process id"))),
            },
        };
        let busy = |m: Mode| {
            DevError::Busy(format!(
                "the prof device is in {} mode; write stop first",
                m.name()
            ))
        };
        if let Some(pid) = pid {
            // Memory mode may be on (with nothing hooked, or other
            // processes attached); any other mode is busy.
            if let Some(m) = self.mode().filter(|m| !matches!(m, Mode::Memory { .. })) {
                return Err(busy(m));
            }
            let permit = match cred {
                Some(c) => {
                    let permit = ptrace_may_attach(&c, pid)?;
                    // The writer waits for this write: stopping it would
                    // wait for ever.
                    if c.pid != 0
                        && (c.pid == pid
                            || Path::new(&format!("/proc/{pid}/task/{}", c.pid)).exists())
                    {
                        return Err(bad(format!(
                            "process {pid} is the one writing this message: attach to it \
                             from another process"
                        )));
                    }
                    Some(permit)
                }
                None => {
                    crate::access::Target::of(pid)?;
                    None
                }
            };
            // Pools: the digits given, or the malloc family alone.
            let hooked = if pools == 0 { POOL_MALLOC } else { pools };
            let attached = attach_process(pid, hooked, &[], permit)?;
            {
                let mut st = self.lock();
                match st.mode {
                    Some(Mode::Memory { pools: p }) => {
                        st.mode = Some(Mode::Memory { pools: p | hooked })
                    }
                    None => st.mode = Some(Mode::Memory { pools: hooked }),
                    Some(m) => return Err(busy(m)), // started meanwhile
                }
            }
            watch(std::sync::Arc::downgrade(&self.state), attached);
            return Ok(());
        }
        let mut st = self.lock();
        match st.mode {
            None => st.mode = Some(Mode::Memory { pools }),
            Some(Mode::Memory { .. }) => st.mode = Some(Mode::Memory { pools }),
            Some(m) => return Err(busy(m)),
        }
        Ok(())
    }

    /// Hand the device a memory report: each module's record (created the
    /// first time, if the module list wants it) takes `pairs` as its
    /// histogram, replacing what it held. Refused (EINVAL) unless the
    /// device is in memory mode.
    pub fn memory_report(&self, modules: &[MemoryModule]) -> Result<(), DevError> {
        report_into(&self.state, modules)
    }
}

/// [`Prof::memory_report`] on the device's state.
fn report_into(state: &Mutex<State>, modules: &[MemoryModule]) -> Result<(), DevError> {
    let lock = || crate::kit::lock(state);
    let wanted = {
        let st = lock();
        if !matches!(st.mode, Some(Mode::Memory { .. })) {
            return Err(DevError::Invalid(
                "a memory report needs memory mode (startmp)".into(),
            ));
        }
        st.wanted.clone()
    };
    // Canonical paths outside the lock.
    let canon: Vec<Option<String>> = modules
        .iter()
        .map(|m| {
            std::fs::canonicalize(&m.path)
                .ok()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .collect();
    let mut st = lock();
    for (m, canon) in modules.iter().zip(canon) {
        let wants = wanted.is_empty()
            || wanted.iter().any(|w| {
                w.raw == m.name
                    || w.raw == m.path
                    || (w.canonical.is_some() && w.canonical == canon)
            });
        if let Some(r) = st
            .records
            .iter_mut()
            .find(|r| r.memory.is_some() && r.path == m.path)
        {
            r.memory = Some(m.pairs.clone());
            continue;
        }
        if !wants {
            continue;
        }
        let id = st.next_id;
        st.next_id = st.next_id.saturating_add(1);
        st.records.push(ModRecord {
            id,
            name: m.name.clone(),
            path: m.path.clone(),
            counts: PcCounts::default(),
            object: None,
            memory: Some(m.pairs.clone()),
        });
    }
    Ok(())
}

/// A running process the accounting library was loaded into
/// ([`attach_process`]): its private directory (the library, and `out/`
/// where its reports go), removed when dropped.
pub struct Attached {
    pid: u32,
    /// The process's start time (/proc/PID/stat field 22): a reused pid
    /// is another process.
    start: u64,
    dir: tempfile::TempDir,
}

/// The sentence for a process no library can be loaded into.
fn out_of_reach(pid: u32) -> DevError {
    DevError::NoDevice(format!(
        "process {pid} is out of reach: statically linked, start it under profdev mprof instead"
    ))
}

pub(super) fn inject_error(pid: u32, e: profdev_inject::InjectError) -> DevError {
    use profdev_inject::InjectError as E;
    match e {
        E::NoProcess(_) | E::Exited { .. } => DevError::NoProcess(pid),
        E::NotPermitted { .. } => DevError::NotPermitted(e.to_string()),
        E::AlreadyTraced { .. } => DevError::Busy(e.to_string()),
        E::Static(_) => out_of_reach(pid),
        e => DevError::NoDevice(format!("cannot attach to process {pid}: {e}")),
    }
}

/// Check `permit` again on the stopped process `pid` (every thread
/// stopped by the caller: nothing changes its ids until it is let go);
/// the refusal as the injector's, so that the `Target` is dropped (the
/// process let go untouched) on the way out.
pub(super) fn recheck(
    permit: Option<&Permit>,
    pid: u32,
) -> Result<(), profdev_inject::InjectError> {
    let Some(p) = permit else { return Ok(()) };
    debug_assert_eq!(p.pid(), pid);
    p.check_again().map_err(|e| match e {
        DevError::NoProcess(_) => profdev_inject::InjectError::NoProcess(pid),
        DevError::NotPermitted(why) => profdev_inject::InjectError::NotPermitted {
            pid,
            hint: format!(
                ": {}",
                why.strip_prefix(&format!("process {pid}: "))
                    .unwrap_or(&why)
            ),
        },
        e => profdev_inject::InjectError::NotPermitted {
            pid,
            hint: format!(": {e}"),
        },
    })
}

/// (state, start time) of /proc/PID/stat, if it exists.
pub(super) fn stat_of(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the command: state is field 3, starttime field 22.
    Some((f.first()?.chars().next()?, f.get(19)?.parse().ok()?))
}

/// The fs user and group ids of PID (who its files will belong to).
pub(super) fn fs_ids(pid: u32) -> Option<(u32, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let fourth = |key: &str| -> Option<u32> {
        s.lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .nth(3)?
            .parse()
            .ok()
    };
    Some((fourth("Uid:")?, fourth("Gid:")?))
}

pub(super) fn io_dev(what: &str, e: impl std::fmt::Display) -> DevError {
    DevError::NoDevice(format!("{what}: {e}"))
}

/// Load the accounting library into the running process `pid` and start
/// it counting `pools` ([`POOL_MALLOC`]...), with `wrappers` as more
/// allocation wrappers (`mprof --wrapper`). Refused: ESRCH no such
/// process, EPERM not allowed to ptrace it (profdev's own credentials: a
/// device checks its writer's first), EBUSY another tracer holds it or it
/// is counted already, ENXIO a static program ("process N is out of reach:
/// statically linked, start it under profdev mprof instead") or a load
/// that failed (the sentence says why).
///
/// `permit`, when a requester's right was checked ([`ptrace_may_attach`],
/// for `pid`), is checked again once every thread is stopped, before the
/// library is loaded: a process that exec'd a set-id program since is let
/// go untouched (EPERM), so the library never runs with more privilege
/// than the requester.
pub fn attach_process(
    pid: u32,
    pools: u8,
    wrappers: &[String],
    permit: Option<Permit>,
) -> Result<Attached, DevError> {
    let maps = profdev_inject::maps(pid).map_err(|e| inject_error(pid, e))?;
    let has_libc = maps.iter().any(|m| {
        Path::new(&m.path)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libc-"))
    });
    if !has_libc {
        return Err(out_of_reach(pid));
    }
    if maps
        .iter()
        .any(|m| m.path.ends_with("/libprofdev_mprof.so"))
    {
        return Err(DevError::Busy(format!(
            "process {pid} is counted already (by profdev mprof or an earlier startmp)"
        )));
    }
    let (_, start) = stat_of(pid).ok_or(DevError::NoProcess(pid))?;
    let (uid, gid) = fs_ids(pid).ok_or(DevError::NoProcess(pid))?;
    // A private directory the process can traverse but not list: the
    // library (readable by anyone: it is no secret) and out/, the
    // process's own, for its reports.
    let dir = tempfile::Builder::new()
        .prefix("profdev-attach.")
        .tempdir()
        .map_err(|e| io_dev("cannot make a directory for the accounting library", e))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
        .map_err(|e| io_dev("cannot make a directory for the accounting library", e))?;
    let lib = dir.path().join("libprofdev_mprof.so");
    profdev_safefile::write_file(&lib, profdev_mprof::LIBRARY, 0o555)
        .map_err(|e| io_dev("cannot write the accounting library", e))?;
    let out = dir.path().join("out");
    profdev_safefile::create_dir(&out, 0o700)
        .map_err(|e| io_dev("cannot make the report directory", e))?;
    std::os::unix::fs::chown(&out, Some(uid), Some(gid))
        .map_err(|e| io_dev("cannot give the report directory to the process's user", e))?;
    let digits: String = [(POOL_MALLOC, '1'), (POOL_MAP, '2'), (POOL_FILE, '3')]
        .iter()
        .filter(|(b, _)| pools & b != 0)
        .map(|&(_, c)| c)
        .collect();
    let mut config = format!(
        "PROFDEV_MPROF_DIR={}\nPROFDEV_MPROF_POOLS={digits}\n",
        out.display()
    );
    if !wrappers.is_empty() {
        config.push_str(&format!("PROFDEV_MPROF_WRAPPERS={}\n", wrappers.join(",")));
    }
    let lib_s = lib.to_string_lossy().into_owned();
    // On a thread of its own: when it ends, the kernel releases any thread
    // of PID the injector could not detach.
    let r = profdev_inject::on_tracer_thread(|| {
        let mut t = profdev_inject::Target::attach(pid)?;
        // Stopped: the requester's right, again, on this very process.
        recheck(permit.as_ref(), pid)?;
        let handle = t.dlopen(&lib_s)?;
        let entry = t.dlsym(handle, "profdev_mprof_attach")?;
        let tid = t.main_thread();
        let cfg = t.write_string(tid, &config)?;
        Ok::<_, profdev_inject::InjectError>(t.call(tid, entry, &[cfg])? as u32 as i32)
    })
    .map_err(|e| inject_error(pid, e))?;
    match r {
        n if n > 0 => Ok(Attached { pid, start, dir }),
        0 => Err(DevError::NoDevice(format!(
            "process {pid} calls no malloc through a module's GOT: nothing to count"
        ))),
        -2 => Err(DevError::Busy(format!(
            "process {pid} is already being counted by an earlier startmp"
        ))),
        _ => Err(DevError::NoDevice(format!(
            "the accounting library could not start in process {pid} (no memory, or it \
             cannot use {})",
            out.display()
        ))),
    }
}

/// At most this many entries of an attached process's report directory
/// are looked at when waiting for a report on demand.
const MAX_REPORTS: usize = 4096;

/// The reports in `dir`, a directory the profiled process owns: for each
/// process its table of counts (`live.PID.K`, which outlives `_exit`,
/// signals and SIGKILL) unless its exit report is complete, else its
/// latest report; opened without following links, regular files only,
/// each refused by its size before it is read (a report at most what the
/// library can write, `profdev_mprof::MAX_REPORT`; a table the size its
/// header names), and at most `profdev_mprof::Limits::ATTACHED` in all
/// (256 files, 64 MiB).
fn read_reports(dir: &Path) -> Vec<profdev_mprof::Report> {
    profdev_mprof::read_dir_reports(dir, &profdev_mprof::Limits::ATTACHED).0
}

/// The reports at `paths` that open (no links), are regular files, fit
/// `profdev_mprof::MAX_REPORT` (checked before reading) and parse.
fn read_reports_at(paths: &[PathBuf]) -> Vec<profdev_mprof::Report> {
    paths
        .iter()
        .filter_map(|p| profdev_mprof::read_report(p).ok())
        .collect()
}

/// The pid and number of a report's file name, `mprof.PID.K`.
fn report_name(name: &str) -> Option<(u32, u64)> {
    let (pid, k) = name.strip_prefix("mprof.")?.split_once('.')?;
    Some((pid.parse().ok()?, k.parse().ok()?))
}

impl Attached {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The directory its reports and its table of counts go to.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Lock its directory against the sweep of other runs
    /// (`profdev_mprof::sweep`) while the returned file is open.
    pub fn hold(&self) -> Option<std::fs::File> {
        profdev_mprof::hold(self.dir.path()).ok()
    }

    /// Does the process still run (not a zombie, not a reused pid)?
    pub fn running(&self) -> bool {
        matches!(stat_of(self.pid), Some((s, start)) if start == self.start && s != 'Z' && s != 'X')
    }

    /// The latest report of each process (the attached one, and children
    /// it forked) written so far: at exit, or on request.
    pub fn reports(&self) -> Vec<profdev_mprof::Report> {
        read_reports(&self.dir.path().join("out"))
    }

    /// Ask the running process for a report now (the library's reporter
    /// thread writes one, as at exit) and wait for it, at most `timeout`;
    /// true when it came.
    pub fn request_report(&self, timeout: Duration) -> bool {
        use std::io::Write;
        use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
        let out = self.dir.path().join("out");
        let last = |dir: &Path| -> Option<u64> {
            std::fs::read_dir(dir)
                .ok()?
                .take(MAX_REPORTS)
                .filter_map(|e| report_name(&e.ok()?.file_name().to_string_lossy()))
                .filter(|&(p, _)| p == self.pid)
                .map(|(_, k)| k)
                .max()
        };
        let before = last(&out);
        let Ok(mut fifo) = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(out.join("request"))
        else {
            return false;
        };
        // The process's own FIFO, in its own directory: a FIFO of anyone
        // else's (a hard link to another program's) is not written.
        let owner = std::fs::symlink_metadata(&out).map(|m| m.uid()).ok();
        if !fifo
            .metadata()
            .is_ok_and(|m| m.file_type().is_fifo() && Some(m.uid()) == owner && m.nlink() == 1)
            || fifo.write_all(b"r").is_err()
        {
            return false;
        }
        drop(fifo);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            // A new report, complete (it parses only once "end" is there).
            if let Some(k) = last(&out).filter(|&k| Some(k) > before) {
                let path = out.join(format!("mprof.{}.{k}", self.pid));
                if read_reports_at(&[path]).len() == 1 {
                    return true;
                }
            }
            if std::time::Instant::now() >= deadline || !self.running() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Dropped while its process still runs (the device went, or `mprof -p`
/// was interrupted), the directory stays: the process counts into it and
/// maps the library from it. The next sweep (`profdev_mprof::sweep`, at
/// the next attach or mprof run) removes it once no process maps it.
impl Drop for Attached {
    fn drop(&mut self) {
        if self.running() {
            self.dir.disable_cleanup(true);
        }
    }
}

/// The processes attached by each device (its state), for reports on
/// demand; entries whose process was read at its exit are gone.
type Registry = Vec<(Weak<Mutex<State>>, Weak<Attached>)>;
static ATTACHED: Mutex<Registry> = Mutex::new(Vec::new());

/// The modules of `reports`, merged, as the device takes them.
fn modules_of(reports: &[profdev_mprof::Report]) -> Vec<MemoryModule> {
    profdev_mprof::merge(reports)
        .iter()
        .map(|m| MemoryModule {
            name: Path::new(&m.path)
                .file_name()
                .map(|b| b.to_string_lossy().into_owned())
                .unwrap_or_else(|| m.path.clone()),
            path: m.path.clone(),
            pairs: profdev_mprof::histogram_pairs(m),
        })
        .collect()
}

impl Prof {
    /// Before `stop`: ask every process this device attached and that
    /// still runs for a report now, and fill the histograms from them
    /// (bounded: [`REPORT_TIMEOUT`] per process).
    pub(super) fn memory_snapshot(&self) {
        if !matches!(self.mode(), Some(Mode::Memory { .. })) {
            return;
        }
        let me = std::sync::Arc::downgrade(&self.state);
        let mine: Vec<std::sync::Arc<Attached>> = {
            let mut reg = crate::kit::lock(&ATTACHED);
            reg.retain(|(s, a)| s.strong_count() > 0 && a.strong_count() > 0);
            reg.iter()
                .filter(|(s, _)| s.ptr_eq(&me))
                .filter_map(|(_, a)| a.upgrade())
                .collect()
        };
        let mut reports = Vec::new();
        for a in mine.iter().filter(|a| a.running()) {
            a.request_report(REPORT_TIMEOUT);
            reports.extend(a.reports());
        }
        if !reports.is_empty() {
            let _ = report_into(&self.state, &modules_of(&reports));
        }
    }
}

/// How long `stop` waits for an attached process's report.
pub const REPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Watch `a` until it exits (or the device goes), then hand its reports
/// to the device.
fn watch(state: Weak<Mutex<State>>, a: Attached) {
    // Directories of earlier attaches that are over (their process gone,
    // their watcher too) go now; this one is held while watched.
    let held = a.hold();
    if let Some(tmp) = a.dir.path().parent() {
        profdev_mprof::sweep(tmp, fs_uid());
    }
    let a = std::sync::Arc::new(a);
    crate::kit::lock(&ATTACHED).push((state.clone(), std::sync::Arc::downgrade(&a)));
    let spawned = std::thread::Builder::new()
        .name(format!("mprof-{}", a.pid))
        .spawn(move || {
            while a.running() {
                if state.strong_count() == 0 {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let Some(state) = state.upgrade() else { return };
            // Refused if memory mode is off by now: see Bugs.
            let _ = report_into(&state, &modules_of(&a.reports()));
            drop(held);
        });
    // Without a thread the reports are never read; the process counts on.
    let _ = spawned;
}

/// This process's filesystem user id (whom its directories belong to).
fn fs_uid() -> u32 {
    fs_ids(std::process::id()).map_or(0, |(u, _)| u)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{walk, OpenMode, Qid};
    use crate::Dev;

    use super::super::tests::{idle as dev, write_as as write};

    #[test]
    fn pools() {
        assert_eq!(parse_pools("startmp"), Some(0));
        assert_eq!(parse_pools("startmp1"), Some(1));
        assert_eq!(parse_pools("startmp13"), Some(5));
        assert_eq!(parse_pools("startmp321"), Some(7));
        for bad in ["startmp0", "startmp4", "startmp11", "startmpx", "startm"] {
            assert_eq!(parse_pools(bad), None, "{bad}");
        }
    }

    #[test]
    fn startmp_messages() {
        let d = dev();
        for bad in [
            "startmp4",
            "startmp11",
            "startmp1 x",
            "startmp1 1 2",
            "startmp1 0",
            "startmpa",
        ] {
            assert!(
                matches!(write(&d, bad, None), Err(DevError::BadCtlArg { .. })),
                "{bad}"
            );
            assert_eq!(d.mode(), None, "{bad} changes nothing");
        }
        assert_eq!(write(&d, "startmp13\n", None), Ok(10));
        assert_eq!(d.mode(), Some(Mode::Memory { pools: 5 }));
        // Another start while memory mode is on: sampling's is ignored.
        write(&d, "start", None).unwrap();
        assert_eq!(d.mode(), Some(Mode::Memory { pools: 5 }));
        write(&d, "stop", None).unwrap();
        assert_eq!(d.mode(), None);
        // A PID while sampling: EBUSY.
        let me = std::process::id();
        write(&d, "start", None).unwrap();
        assert!(matches!(
            write(&d, &format!("startmp1 {me}"), None),
            Err(DevError::Busy(_))
        ));
        write(&d, "stop", None).unwrap();
        assert_eq!(d.mode(), None);
        // No such process: ESRCH, before anything else.
        assert_eq!(
            write(&d, "startmp1 2147483647", None),
            Err(DevError::NoProcess(2147483647))
        );
        // Not allowed to ptrace: EPERM (nobody may not trace pid 1).
        let nobody = Cred {
            uid: 65534,
            gid: 65534,
            pid: 0,
        };
        assert!(matches!(
            write(&d, "startmp1 1", Some(nobody)),
            Err(DevError::NotPermitted(_))
        ));
        // The device's own process: refused, never a fake success (real
        // attaches: tests/mprof_attach.rs of the cli).
        match write(&d, &format!("startmp1 {me}"), None) {
            Err(DevError::NotPermitted(why)) => assert!(why.contains("profdev itself"), "{why}"),
            r => panic!("{r:?}"),
        }
        assert_eq!(d.mode(), None);
    }

    #[test]
    fn reports_fill_histograms_in_the_memory_layout() {
        let d = dev();
        let m = MemoryModule {
            name: "known".into(),
            path: "/x/known".into(),
            pairs: vec![(0, 4096), (1, 8192), (7, 64)],
        };
        assert!(matches!(
            d.memory_report(std::slice::from_ref(&m)),
            Err(DevError::Invalid(_))
        ));
        write(&d, "module known", None).unwrap();
        write(&d, "startmp1", None).unwrap();
        let other = MemoryModule {
            name: "libc.so.6".into(),
            path: "/lib/libc.so.6".into(),
            pairs: vec![(0, 1)],
        };
        d.memory_report(&[m.clone(), other]).unwrap();
        let dir = walk(&d, Qid::ROOT, "00000001").unwrap();
        assert!(
            walk(&d, Qid::ROOT, "00000002").is_err(),
            "libc is not wanted"
        );
        let h = walk(&d, dir.qid, "histogram").unwrap();
        let mut chan = d.open(h.qid, OpenMode::Read).unwrap();
        let mut pairs = Vec::new();
        loop {
            let b = d.read(&mut chan, 0, 64).unwrap();
            if b.is_empty() {
                break;
            }
            pairs.push(String::from_utf8(b).unwrap());
        }
        assert_eq!(pairs, ["0x0 4096\n", "0x1 8192\n", "0x7 64\n"]);
        // A later report replaces the counts.
        d.memory_report(&[MemoryModule {
            pairs: vec![(1, 10)],
            ..m
        }])
        .unwrap();
        let mut chan = d.open(h.qid, OpenMode::Read).unwrap();
        assert_eq!(d.read(&mut chan, 0, 64).unwrap(), b"0x1 10\n");
        write(&d, "end", None).unwrap();
        assert!(walk(&d, Qid::ROOT, "00000001").is_err());
    }
}
