//! prof's coverage mode (`startcp PID`): the control message, the attach
//! to a running process, and the records a coverage report fills.
//!
//! # Synopsis
//!
//! ```text
//! echo module NAME... > prof/ctl   # what to count (empty: everything)
//! echo startcp PID > prof/ctl      # count running process PID from now on
//! echo stop > prof/ctl             # PID reports now (or when it exits)
//! cat prof/NNNNNNNN/histogram      # 0x<address> <count> per instruction
//! ```
//!
//! # Description
//!
//! In coverage mode a record's histogram holds **exact execution counts**
//! (spec §2.3, coverage row): one pair per executed instruction,
//! `0x<address> <count>\n`, the address in the module's link-time address
//! space (what `addr2line -e PATH` reads), the count the number of times
//! that instruction ran; every instruction of a basic block carries its
//! block's count. Instructions that never ran have no pair (a histogram
//! skips zeros). The pairs are served by the same one-pair-per-read
//! protocol as the other modes.
//!
//! Nothing in the device counts instructions: the counting runs inside
//! the profiled processes (the coverage engine of `profdev_coverage`),
//! and its counts are handed to the device through
//! [`Prof::coverage_report`], each report replacing the module's pairs
//! (the engine's counts are cumulative).
//!
//! `startcp PID` is parsed exactly: one argument, a process id in decimal
//! (`startcp` alone, `startcp x`, `startcp 1 2` are EINVAL). While another
//! mode is on it fails with EBUSY (the seed ignored the request
//! silently: a documented change, so that a caller learns its request did
//! nothing). A PID that does not exist fails with ESRCH; a writer that may
//! not ptrace PID, with EPERM (the kernel's rule for the writer: its ids
//! against all of PID's, and PID dumpable); the writer's own process,
//! EINVAL (it would wait for itself). The right is checked again on PID
//! itself (held by a pidfd since the message) once every thread is
//! stopped, before the runtime is loaded, and again before `stop` calls
//! into it: a process that exec'd a set-user-id program (or became
//! non-dumpable) since is let go untouched, EPERM, and `stop` calls into
//! no process that no longer maps the runtime it was given.
//!
//! **The attach** ([`attach_coverage`], which `profdev cprof -p PID` calls
//! too, without a device; a statically linked process is told apart in one
//! place, [`statically_linked`]): the device makes a planning
//! server (`profdev_coverage::launch::Server`) whose private directory is
//! 0711, the runtime `libprofdev_cov.so` 0555, its socket 0600 and its
//! report directory `out/` 0700, both owned by PID's user, so a process of
//! another user can load the runtime, reach the socket and write reports,
//! and no third user can; it plans the selected modules PID maps while
//! PID runs on (planning is the slow part). Then it stops every thread of PID with ptrace
//! (profdev-inject), loads the runtime with the process's own `dlopen`,
//! and calls `profdev_cov_attach` in the main thread with every thread's
//! pc: the runtime asks the server for each module the `module` list
//! selects (empty: the executable and every library it maps), the server
//! plans it and encodes its trampolines, and the runtime patches the code
//! in place, leaving out a patch whose bytes hold a stopped thread's pc
//! (that block is reported uncounted). Every thread then gets a counter
//! array of its own as its GS base (set in the registers it resumes
//! with), so threads lose no count, and the process is detached and runs
//! on, counting every block directly (no count is inferred from flow, so
//! frames active at the attach count exactly from there on). Code that
//! ran before the attach has no pair. The server reads a module only
//! through the connecting process's `/proc/PID/map_files/` (the
//! connection's SO_PEERCRED pid): a process cannot make profdev, root,
//! read a file it does not map. It reads of a module only what its ELF
//! headers name (refusing any other file from its first 64 bytes), and
//! for a process of a user other than root and the mount's plans at most
//! 4 MiB of code per module that user can have written (16 MiB read) and
//! 64 MiB per attach, keeps that user's plans in a cache of the user's
//! own (`/var/cache/profdev/coverage/UID/`, 256 MiB), and refuses a
//! report in `out/` larger than the planned modules could write, reading
//! at most 10,000 reports (`profdev_coverage::launch`'s Bounds).
//!
//! The histograms fill when the process exits (the runtime writes a
//! report at exit; the device watches the process for that) and at
//! `stop`, which first stops the process again and calls the runtime's
//! `profdev_cov_flush` in it (a report of the counts so far), then fills
//! the histograms and stops. A process counted already (by `profdev cprof`
//! or an earlier `startcp`), EBUSY.
//!
//! **A statically linked process** (one that maps no libc to load the
//! runtime with) is counted through uprobes instead
//! (`profdev_coverage::uprobe`): its executable (`/proc/PID/exe`) is
//! planned into the same blocks, and one multi-uprobe BPF link, filtered
//! to PID's threads, puts a probe on each block and each conditional
//! jump, counting into a per-CPU BPF array. Nothing is injected and the
//! process is not stopped; counts start when the write returns, exact as
//! the runtime's (a jump's outcome is decided from the saved flags before
//! it runs). `stop` reads the counts in place and removes the probes (a
//! later `startcp` may count the process again, from zero); at exit the
//! counts are read as well. Without CAP_BPF and CAP_PERFMON the
//! write fails with EPERM, and on a kernel without multi-uprobe links
//! (before Linux 6.6) with ENXIO, each with a sentence.
//!
//! # Example
//!
//! ```text
//! echo module myprog > /mnt/prof/prof/ctl
//! echo startcp 4242 > /mnt/prof/prof/ctl
//! # ... 4242 runs ...
//! echo stop > /mnt/prof/prof/ctl
//! cat /mnt/prof/prof/00000001/histogram
//! 0x1219 200000
//! 0x121a 200000
//! ...
//! ```
//!
//! # Bugs
//!
//! * Every thread is held while the trampolines are encoded and the code
//!   patched (the modules the process maps are planned before it is
//!   stopped; a module it maps meanwhile is planned while it waits):
//!   milliseconds for a small program, 0.9 s on the test VM when the
//!   module list is empty (libc's trampolines). A thread
//!   holding a lock `dlopen` needs makes the load give up after 20 s and
//!   the attach fail, the process left as it was. `profdev_cov_attach`
//!   itself may take 300 s ([`ATTACH_TIMEOUT`]; the writer waits): a
//!   program so large that encoding and patching take longer is
//!   abandoned half patched, and its threads fault at their first count
//!   (select modules with `module`).
//! * `stop` stops the process again to call `profdev_cov_flush`; a thread
//!   stopped inside the runtime's own `dlopen` hook holds its lock, and
//!   the flush then gives up after 20 s: the histograms keep what the
//!   reports before held.
//! * The code stays patched after `stop` and `end`: the process counts on
//!   (at near-native cost) until it exits, and a second `startcp` on it is
//!   refused (EBUSY). After `stop` its exit report is dropped: the
//!   histograms keep what `stop` took. When the mount goes while such a
//!   process runs, its private directory (in the temporary directory,
//!   `profdev-cov.*`) is left behind, with no socket, for its later
//!   reports: removing it could let another user create one of the same
//!   name and serve the still-patched process code at its next `dlopen`.
//!   The next `startcp` or cprof run after the device's process has
//!   ended removes it once no process maps its runtime.
//! * The histograms fill at `stop` or at exit, not while it runs: reading
//!   a histogram does not ask for a report. A process that ends with a
//!   signal that kills it writes no exit report (SIGINT, SIGTERM and
//!   SIGHUP left at their default do write one).
//! * Threads created after the attach inherit their creator's array (GS
//!   is copied by clone): their counts are kept but may race with it.
//!   Children forked after the attach report what they ran after the
//!   fork, but only reports written before the attached process exits
//!   are read; programs it execs are not counted.
//! * A block whose patch would cover a stopped thread's pc is not counted
//!   at all (it is left out of the histogram).
//! * A static process's probes cost a trap per block executed (0.2–16
//!   µs): it runs many times slower until `stop` or its exit. Its children
//!   are not counted (the link's pid filter is one thread group), nor
//!   what it execs.
//! * x86-64 and glibc only (a static process: any libc).

use super::ctl::Wanted;
use super::histogram::ModRecord;
use super::memory::{fs_ids, inject_error, io_dev, recheck, stat_of};
use super::{Mode, Prof, State};
use crate::access::{ptrace_may_attach, Cred, Permit};
use crate::ctl;
use crate::pc_counts::PcCounts;
use crate::DevError;
use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::launch::Server;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// A running process the coverage runtime was injected into
/// ([`attach_coverage`]): its planning server (and private directory,
/// removed when dropped) and where its `profdev_cov_flush` is.
pub struct CovAttached {
    pid: u32,
    /// The process's start time: a reused pid is another process.
    start: u64,
    engine: Engine,
    /// Whose request it was, and the process held since the check:
    /// checked again whenever the process is stopped (None: profdev's
    /// own caller, with its own rights).
    permit: Option<Permit>,
}

/// How an attached process is counted.
enum Engine {
    /// The runtime injected into it, and where its `profdev_cov_flush`
    /// is.
    Runtime { flush: u64, server: Server },
    /// A statically linked process: one multi-uprobe link
    /// (`profdev_coverage::uprobe`), read in place.
    Uprobe(profdev_coverage::uprobe::Counter),
}

impl CovAttached {
    /// Does the process still run (not a zombie, not a reused pid)?
    pub fn running(&self) -> bool {
        matches!(stat_of(self.pid), Some((s, start)) if start == self.start && s != 'Z' && s != 'X')
    }

    /// Ask the running process for a report now: stop it under ptrace
    /// again and call the runtime's `profdev_cov_flush` in its main
    /// thread (the report is written when the call returns).
    pub fn flush(&self) -> Result<(), DevError> {
        let Engine::Runtime { flush, server } = &self.engine else {
            // Uprobe counts are read in place.
            return Ok(());
        };
        let flush = *flush;
        let pid = self.pid;
        let runtime = server.runtime().to_string_lossy().into_owned();
        profdev_inject::on_tracer_thread(|| {
            let mut t = profdev_inject::Target::attach(pid)?;
            recheck(self.permit.as_ref(), pid)?;
            // The same program still: the runtime is mapped where it was
            // loaded (a process that exec'd has no runtime to call).
            let maps = profdev_inject::maps(pid)?;
            if !maps.iter().any(|m| m.path.starts_with(&runtime)) {
                return Err(profdev_inject::InjectError::NotPermitted {
                    pid,
                    hint: ": it runs another program now (it exec'd since the attach)".into(),
                });
            }
            let tid = t.main_thread();
            t.call(tid, flush, &[]).map(|_| ())
        })
        .map_err(|e| inject_error(pid, e))
    }

    /// The counts of every report written so far (cumulative).
    pub fn counts(&self) -> Vec<ModuleCoverage> {
        match &self.engine {
            Engine::Runtime { server, .. } => server.collect().0,
            Engine::Uprobe(c) => vec![c.coverage()],
        }
    }

    /// After `stop`: a static process's probes are removed (the runtime's
    /// patches stay: see Bugs).
    fn detach(&self) {
        if let Engine::Uprobe(c) = &self.engine {
            c.detach();
        }
    }

    /// The process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The counts of every report written so far, and notes (one
    /// sentence each) on what was not counted.
    pub fn collect(&self) -> (Vec<ModuleCoverage>, Vec<String>) {
        match &self.engine {
            Engine::Runtime { server, .. } => server.collect(),
            Engine::Uprobe(c) => (vec![c.coverage()], Vec::new()),
        }
    }

    /// Whether the process is counted through uprobes (statically
    /// linked): its counting ends with this process.
    pub fn through_uprobes(&self) -> bool {
        matches!(self.engine, Engine::Uprobe(_))
    }

    /// Leave the process running, still patched and counting, with
    /// nobody to read its counts (`profdev cprof -p` interrupted): the
    /// socket and the runtime's file are removed (a module the process
    /// loads from now on is left uncounted), and the private directory is
    /// kept, with its `out/` that the process's later reports go to, so
    /// that no other user can create a directory of the same name and
    /// serve the still-patched process trampolines. Returns that
    /// directory, for the caller to name (remove it once the process has
    /// exited).
    /// A process counted through uprobes ([`CovAttached::through_uprobes`])
    /// has no directory: None (its probes go with this process).
    pub fn leave_running(self) -> Option<std::path::PathBuf> {
        let Engine::Runtime { server, .. } = self.engine else {
            return None;
        };
        let dir = server
            .reports_dir()
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let _ = std::fs::remove_file(server.socket());
        let _ = std::fs::remove_file(server.runtime());
        // Dropping the server would remove the directory; its accepting
        // thread waits on a socket nobody can reach any more, until this
        // process exits.
        std::mem::forget(server);
        Some(dir)
    }
}

/// How long `profdev_cov_attach` may take (encoding and patching every
/// selected module while the process is stopped).
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(300);

/// Count the statically linked process `pid` (no libc to load a runtime
/// with) through one multi-uprobe link on its executable, filtered to its
/// threads (`profdev_coverage::uprobe`).
fn attach_static(pid: u32, permit: Option<Permit>) -> Result<CovAttached, DevError> {
    use profdev_coverage::uprobe::{Counter, Probes, UprobeError};
    let (_, start) = stat_of(pid).ok_or(DevError::NoProcess(pid))?;
    let exe = std::path::PathBuf::from(format!("/proc/{pid}/exe"));
    let path = std::fs::read_link(&exe).map_err(|_| DevError::NoProcess(pid))?;
    let counter = Probes::of_file(&exe, path)
        .and_then(|p| Counter::attach(p, &exe, pid))
        .map_err(|e| match e {
            UprobeError::Permission(s) => DevError::NotPermitted(s),
            UprobeError::Unsupported(s) => DevError::NoDevice(format!(
                "process {pid} is statically linked and can only be counted through uprobes: {s}"
            )),
            e => DevError::NoDevice(format!(
                "process {pid} is statically linked and its uprobes could not be attached: {e}"
            )),
        })?;
    // The probes sit on the file opened above: if the process exec'd a
    // program its requester may not trace before that, refuse now (the
    // counter is dropped, its link closed).
    if let Some(p) = &permit {
        p.check_again()?;
    }
    Ok(CovAttached {
        pid,
        start,
        engine: Engine::Uprobe(counter),
        permit,
    })
}

/// Is the running process `pid` out of reach of the runtime because it
/// is statically linked (no C library mapped, so nothing can `dlopen`
/// it)? The one place attach mode tells a static program from a dynamic
/// one: `startcp` ([`attach_coverage`]) and `profdev cprof -p` branch on
/// it. ESRCH for a process that does not exist, ENXIO (with the reason)
/// for one whose `/proc/PID/maps` cannot be read: the caller checks the
/// right to ptrace first (the device its writer's, `cprof -p` its own).
pub fn statically_linked(pid: u32) -> Result<bool, DevError> {
    let maps = profdev_inject::maps(pid).map_err(|e| inject_error(pid, e))?;
    let has_libc = maps.iter().any(|m| {
        Path::new(&m.path)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libc-"))
    });
    Ok(!has_libc)
}

/// The planning server's selection for the device's module list: each
/// name as written, and for a name that is a file its canonical path and
/// that path's file name (the device's module list decides exactly, in
/// [`Prof::coverage_report`]; the server only needs to plan the module
/// however the process names it).
fn select_words(wanted: &[Wanted]) -> Vec<String> {
    let mut select: Vec<String> = Vec::new();
    for w in wanted {
        select.push(w.raw.clone());
        if let Some(c) = &w.canonical {
            select.push(c.clone());
            if let Some(n) = Path::new(c).file_name() {
                select.push(n.to_string_lossy().into_owned());
            }
        }
    }
    select
}

/// Inject the coverage runtime into the running process `pid` (its
/// threads, and the processes it forks), counting the modules `select`
/// names (the planning server's selection,
/// [`profdev_coverage::launch::selected`]: basenames or paths; empty: the
/// executable and every library it maps), from now on. Used by `startcp`
/// and by `profdev cprof -p`.
///
/// Every thread is stopped (profdev-inject); the runtime is loaded with
/// the process's `dlopen` from a private directory the process's user can
/// use ([`Server::share_with`]); `profdev_cov_attach` is called in the
/// main thread with every thread's pc (patches over a pc are skipped);
/// each thread gets its own counter array as its GS base before it
/// resumes.
///
/// Errors, one sentence each: ESRCH no such process ([`DevError::NoProcess`]),
/// EPERM ptrace refused (naming `kernel.yama.ptrace_scope` when it is the
/// reason), EBUSY counted already or traced by another tracer, ENXIO a
/// runtime that could not start (or, for a statically linked process,
/// [`statically_linked`], counted through uprobes instead: uprobes the
/// kernel does not offer).
///
/// `permit`, when a requester's right was checked ([`ptrace_may_attach`],
/// for `pid`), is checked again once every thread is stopped, before
/// anything is loaded (a process that exec'd a set-id program since is let
/// go untouched: EPERM), and before every later stop ([`CovAttached::flush`]).
pub fn attach_coverage(
    pid: u32,
    select: &[String],
    permit: Option<Permit>,
) -> Result<CovAttached, DevError> {
    if pid == std::process::id() {
        // Refused by the injector too, but before any planning.
        return Err(inject_error(
            pid,
            profdev_inject::InjectError::NotPermitted {
                pid,
                hint: ": it is profdev itself".into(),
            },
        ));
    }
    if statically_linked(pid)? {
        return attach_static(pid, permit);
    }
    let maps = profdev_inject::maps(pid).map_err(|e| inject_error(pid, e))?;
    if maps.iter().any(|m| m.path.ends_with("/libprofdev_cov.so")) {
        return Err(DevError::Busy(format!(
            "process {pid} is counted already (by profdev cprof or an earlier startcp)"
        )));
    }
    let (_, start) = stat_of(pid).ok_or(DevError::NoProcess(pid))?;
    let (uid, gid) = fs_ids(pid).ok_or(DevError::NoProcess(pid))?;
    let server = Server::new(select).map_err(|e| io_dev("cannot set up coverage", e))?;
    server.share_with(uid, gid).map_err(|e| {
        io_dev(
            "cannot open the coverage directory to the process's user",
            e,
        )
    })?;
    // Planning is the slow part: done before the threads are stopped.
    server.preplan(pid);
    let runtime = server.runtime().to_string_lossy().into_owned();
    let config = server.attach_config();
    let r = profdev_inject::on_tracer_thread(|| {
        let mut t = profdev_inject::Target::attach(pid)?;
        // Stopped: the requester's right, again, on this very process.
        recheck(permit.as_ref(), pid)?;
        let tids = t.threads();
        let mut pcs = Vec::with_capacity(tids.len() * 8);
        for &tid in &tids {
            pcs.extend_from_slice(&t.pc(tid)?.to_le_bytes());
        }
        let handle = t.dlopen(&runtime)?;
        let entry = t.dlsym(handle, "profdev_cov_attach")?;
        let flush = t.dlsym(handle, "profdev_cov_flush")?;
        let main = t.main_thread();
        let n = tids.len() as u64;
        let cfg = t.write_string(main, &config)?;
        let pcs_at = t.write_bytes(main, &pcs)?;
        let gs_at = t.write_bytes(main, &vec![0u8; tids.len() * 8])?;
        // It patches while every thread waits and waits for none of them
        // (the loader's lock was free: dlopen returned): a long bound, as
        // giving up half way leaves threads without their arrays.
        let r =
            t.call_bounded(main, entry, &[cfg, pcs_at, n, gs_at, n], ATTACH_TIMEOUT)? as u32 as i32;
        if r != 0 {
            return Ok(Err(r));
        }
        // From here on the code is patched: every thread needs its array
        // before it runs again.
        let mut gs = vec![0u8; tids.len() * 8];
        t.read_bytes(gs_at, &mut gs)?;
        for (&tid, g) in tids.iter().zip(gs.chunks_exact(8)) {
            let g = u64::from_le_bytes(g.try_into().unwrap_or([0; 8]));
            t.set_gs_base(tid, g)?;
        }
        Ok::<_, profdev_inject::InjectError>(Ok(flush))
    })
    .map_err(|e| inject_error(pid, e))?;
    match r {
        Ok(flush) => Ok(CovAttached {
            pid,
            start,
            engine: Engine::Runtime { flush, server },
            permit,
        }),
        Err(_) => Err(DevError::NoDevice(format!(
            "the coverage runtime could not start in process {pid} (no memory, or it cannot use \
             {})",
            server.reports_dir().display()
        ))),
    }
}

/// The processes attached by each device (its state), for reports at
/// `stop`; entries whose process was read at its exit are gone.
type Registry = Vec<(Weak<Mutex<State>>, Weak<CovAttached>)>;
static ATTACHED: Mutex<Registry> = Mutex::new(Vec::new());

/// Watch `a` until it exits (or the device goes), then hand its counts
/// to the device.
fn watch(state: Weak<Mutex<State>>, a: CovAttached) {
    let a = Arc::new(a);
    crate::kit::lock(&ATTACHED).push((state.clone(), Arc::downgrade(&a)));
    let spawned = std::thread::Builder::new()
        .name(format!("cprof-{}", a.pid))
        .spawn(move || {
            while a.running() {
                if state.strong_count() == 0 {
                    // The device went (unmounted) while the process runs
                    // on, patched: its private directory is kept (see
                    // CovAttached::leave_running), so that no other user
                    // can take its name and serve it trampolines.
                    if let Ok(a) = Arc::try_unwrap(a) {
                        let _ = a.leave_running();
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let Some(state) = state.upgrade() else { return };
            // Refused if coverage mode is off by now: see Bugs.
            let _ = report_into(&state, &a.counts());
        });
    // Without a thread the exit report is never read; `stop` still asks.
    let _ = spawned;
}

/// The process id of `startcp`'s argument: decimal digits only, not 0.
fn parse_pid(word: &str) -> Option<u32> {
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse::<u32>().ok().filter(|&p| p > 0)
}

/// The histogram pairs of `m`: one per executed instruction, ascending.
pub fn coverage_pairs(m: &ModuleCoverage) -> Vec<(u64, u64)> {
    profdev_coverage::lines::instruction_counts(m)
        .into_iter()
        .filter(|&(_, c)| c > 0)
        .collect()
}

/// A reported module: name, path, canonical path, pairs.
type Prepared = (String, String, Option<String>, Vec<(u64, u64)>);

impl Prof {
    /// `startcp PID`, with `word` the argument and `data` the message.
    pub(super) fn startcp(
        &self,
        word: &str,
        data: &[u8],
        cred: Option<Cred>,
    ) -> Result<(), DevError> {
        let pid = parse_pid(word).ok_or_else(|| DevError::BadCtlArg {
            msg: ctl::quoted(data),
            why: format!("{word:?} is not a process id"),
        })?;
        if let Some(m) = self.mode() {
            return Err(DevError::Busy(format!(
                "the prof device is in {} mode; write stop first",
                m.name()
            )));
        }
        let permit = match cred {
            Some(c) => Some(ptrace_may_attach(&c, pid)?),
            None => {
                crate::access::Target::of(pid)?;
                None
            }
        };
        if let Some(c) = cred {
            // The writer waits for this write: stopping it would wait for
            // ever.
            if c.pid != 0
                && (c.pid == pid || Path::new(&format!("/proc/{pid}/task/{}", c.pid)).exists())
            {
                return Err(DevError::BadCtlArg {
                    msg: ctl::quoted(data),
                    why: format!(
                        "process {pid} is the one writing this message: attach to it from \
                         another process"
                    ),
                });
            }
        }
        let wanted = self.lock().wanted.clone();
        let attached = attach_coverage(pid, &select_words(&wanted), permit)?;
        self.coverage_launched(pid)?;
        watch(Arc::downgrade(&self.state), attached);
        Ok(())
    }

    /// Before `stop`: ask every process this device attached and that
    /// still runs for a report now, and fill the histograms from the
    /// counts so far.
    pub(super) fn coverage_snapshot(&self) {
        if !matches!(self.mode(), Some(Mode::Coverage { .. })) {
            return;
        }
        let me = Arc::downgrade(&self.state);
        let mine: Vec<Arc<CovAttached>> = {
            let mut reg = crate::kit::lock(&ATTACHED);
            reg.retain(|(s, a)| s.strong_count() > 0 && a.strong_count() > 0);
            reg.iter()
                .filter(|(s, _)| s.ptr_eq(&me))
                .filter_map(|(_, a)| a.upgrade())
                .collect()
        };
        for a in mine {
            if a.running() {
                let _ = a.flush();
            }
            let _ = report_into(&self.state, &a.counts());
            a.detach();
        }
    }

    /// Coverage mode for `pid`, a process the caller started under the
    /// coverage engine itself (as `profdev cprof CMD` does): no attach, no
    /// permission check. EBUSY while another mode is on.
    pub fn coverage_launched(&self, pid: u32) -> Result<(), DevError> {
        let mut st = self.lock();
        match st.mode {
            None => {
                st.mode = Some(Mode::Coverage { pid });
                Ok(())
            }
            Some(m) => Err(DevError::Busy(format!(
                "the prof device is in {} mode; write stop first",
                m.name()
            ))),
        }
    }

    /// Hand the device a coverage report: each module's record (created
    /// the first time, if the module list wants it) takes the module's
    /// executed instructions and counts as its histogram, replacing what
    /// it held. Refused (EINVAL) unless the device is in coverage mode.
    pub fn coverage_report(&self, modules: &[ModuleCoverage]) -> Result<(), DevError> {
        report_into(&self.state, modules)
    }
}

/// [`Prof::coverage_report`] on the device's state.
fn report_into(state: &Mutex<State>, modules: &[ModuleCoverage]) -> Result<(), DevError> {
    let lock = || crate::kit::lock(state);
    let wanted = {
        let st = lock();
        if !matches!(st.mode, Some(Mode::Coverage { .. })) {
            return Err(DevError::Invalid(
                "a coverage report needs coverage mode (startcp)".into(),
            ));
        }
        st.wanted.clone()
    };
    // Files are looked at outside the lock.
    let prepared: Vec<Prepared> = modules
        .iter()
        .map(|m| {
            let path = m.path.to_string_lossy().into_owned();
            let name = m
                .path
                .file_name()
                .map_or_else(|| path.clone(), |n| n.to_string_lossy().into_owned());
            let canon = std::fs::canonicalize(&m.path)
                .ok()
                .map(|p| p.to_string_lossy().into_owned());
            (name, path, canon, coverage_pairs(m))
        })
        .collect();
    let mut st = lock();
    for (name, path, canon, pairs) in prepared {
        if let Some(r) = st
            .records
            .iter_mut()
            .find(|r| r.memory.is_some() && r.path == path)
        {
            r.memory = Some(pairs);
            continue;
        }
        let wants = wanted.is_empty()
            || wanted.iter().any(|w| {
                w.raw == name || w.raw == path || (w.canonical.is_some() && w.canonical == canon)
            });
        if !wants {
            continue;
        }
        let id = st.next_id;
        st.next_id = st.next_id.saturating_add(1);
        st.records.push(ModRecord {
            id,
            name,
            path,
            counts: PcCounts::default(),
            object: None,
            memory: Some(pairs),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{walk, OpenMode, Qid};
    use crate::Dev;
    use profdev_coverage::counts::{Block, Branch};

    use super::super::tests::{idle as dev, write_as as write};

    fn histogram(d: &Prof, dir: &str) -> Vec<String> {
        let dir = walk(d, Qid::ROOT, dir).unwrap();
        let h = walk(d, dir.qid, "histogram").unwrap();
        let mut chan = d.open(h.qid, OpenMode::Read).unwrap();
        let mut pairs = Vec::new();
        loop {
            let b = d.read(&mut chan, 0, 64).unwrap();
            if b.is_empty() {
                break;
            }
            pairs.push(String::from_utf8(b).unwrap());
        }
        pairs
    }

    #[test]
    fn startcp_parse_and_errors() {
        let d = dev();
        for bad in [
            "startcp",
            "startcp x",
            "startcp 1 2",
            "startcp 0",
            "startcp +5",
            "startcp -1",
            "startcp 0x10",
        ] {
            assert!(
                matches!(write(&d, bad, None), Err(DevError::BadCtlArg { .. })),
                "{bad}"
            );
            assert_eq!(d.mode(), None, "{bad} changes nothing");
        }
        assert!(
            matches!(write(&d, "startcpx 1", None), Err(DevError::BadCtl(_))),
            "verbs match exactly"
        );
        // No such process: ESRCH.
        assert_eq!(
            write(&d, "startcp 2147483647", None),
            Err(DevError::NoProcess(2147483647))
        );
        // Not allowed to ptrace: EPERM (nobody may not trace pid 1).
        let nobody = Cred {
            uid: 65534,
            gid: 65534,
            pid: 0,
        };
        assert!(matches!(
            write(&d, "startcp 1", Some(nobody)),
            Err(DevError::NotPermitted(_))
        ));
        // The device's own process: refused, never a fake success (real
        // attaches: tests/cprof_attach.rs of the cli).
        let me = std::process::id();
        match write(&d, &format!("startcp {me}\n"), None) {
            Err(DevError::NotPermitted(why)) => assert!(why.contains("profdev itself"), "{why}"),
            r => panic!("{r:?}"),
        }
        assert_eq!(d.mode(), None);
        // Another mode on: EBUSY (the seed ignored it).
        write(&d, "startmp1", None).unwrap();
        assert!(matches!(
            write(&d, &format!("startcp {me}"), None),
            Err(DevError::Busy(_))
        ));
        assert!(matches!(d.coverage_launched(me), Err(DevError::Busy(_))));
        write(&d, "stop", None).unwrap();
        d.coverage_launched(me).unwrap();
        assert_eq!(d.mode(), Some(Mode::Coverage { pid: me }));
        // Sampling's start is ignored in another mode, as in Inferno.
        write(&d, "start", None).unwrap();
        assert_eq!(d.mode(), Some(Mode::Coverage { pid: me }));
        assert!(matches!(
            write(&d, &format!("startcp {me}"), None),
            Err(DevError::Busy(_))
        ));
    }

    fn module(path: &str) -> ModuleCoverage {
        ModuleCoverage {
            path: path.into(),
            build_id: None,
            blocks: vec![
                Block {
                    start: 0x1130,
                    end: 0x113a,
                    insns: vec![0x1130, 0x1134, 0x1137],
                    count: 10,
                },
                Block {
                    start: 0x113a,
                    end: 0x1140,
                    insns: vec![0x113a],
                    count: 0,
                },
                Block {
                    start: 0x1140,
                    end: 0x1144,
                    insns: vec![0x1140, 0x1142],
                    count: 2,
                },
            ],
            branches: vec![Branch {
                addr: 0x1137,
                taken: 8,
                not_taken: 2,
            }],
            uncounted: 0,
        }
    }

    #[test]
    fn histogram_holds_one_pair_per_executed_instruction() {
        let d = dev();
        let m = module("/x/known");
        assert!(matches!(
            d.coverage_report(std::slice::from_ref(&m)),
            Err(DevError::Invalid(_))
        ));
        write(&d, "module known", None).unwrap();
        d.coverage_launched(std::process::id()).unwrap();
        d.coverage_report(&[m.clone(), module("/lib/libc.so.6")])
            .unwrap();
        assert!(
            walk(&d, Qid::ROOT, "00000002").is_err(),
            "libc is not wanted"
        );
        assert_eq!(
            histogram(&d, "00000001"),
            [
                "0x1130 10\n",
                "0x1134 10\n",
                "0x1137 10\n",
                "0x1140 2\n",
                "0x1142 2\n"
            ]
        );
        // A later report replaces the counts (the engine's are cumulative).
        let mut later = m;
        later.blocks[1].count = 3;
        d.coverage_report(&[later]).unwrap();
        assert_eq!(histogram(&d, "00000001")[3], "0x113a 3\n");
        write(&d, "stop", None).unwrap();
        assert_eq!(histogram(&d, "00000001").len(), 6, "kept after stop");
        write(&d, "end", None).unwrap();
        assert!(walk(&d, Qid::ROOT, "00000001").is_err());
    }
}
