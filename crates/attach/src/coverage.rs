//! Coverage of a running process: the coverage runtime injected with
//! ptrace, or uprobes for a statically linked one. What prof's `startcp
//! PID` does and `profdev cprof -p PID` calls; the device's side (the
//! control message, the records, the man page) is `profdev_dev::prof`'s
//! coverage mode.

use crate::memory::{fs_ids, inject_error, io_dev, recheck, stat_of};
use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::launch::Server;
use profdev_coverage::plan::Mode;
use profdev_dev::access::Permit;
use profdev_dev::DevError;
use std::path::Path;
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
    /// A statically linked process patched and followed through ptrace by
    /// a thread of profdev's ([`attach_static_traced`]): its counts when
    /// that thread lets it go.
    Traced(Traced),
}

/// The thread following a process through ptrace, and what it gave.
struct Traced {
    live: profdev_coverage::traced::Live,
    run: std::sync::Mutex<TracedState>,
}

enum TracedState {
    Following(std::thread::JoinHandle<Option<profdev_coverage::traced::TracedRun>>),
    Done(Vec<ModuleCoverage>, Vec<String>),
}

impl Drop for Traced {
    /// Never leave the process traced by a thread nobody waits for: its
    /// breakpoints would kill it once profdev has exited.
    fn drop(&mut self) {
        self.end();
    }
}

impl Traced {
    /// Let the process go (it runs on) and take its counts, once.
    fn end(&self) -> (Vec<ModuleCoverage>, Vec<String>) {
        self.live.end();
        let mut run = self.run.lock().unwrap_or_else(|e| e.into_inner());
        if let TracedState::Following(_) = &*run {
            let done = TracedState::Done(Vec::new(), Vec::new());
            let TracedState::Following(h) = std::mem::replace(&mut *run, done) else {
                unreachable!("matched above")
            };
            if let Ok(Some(r)) = h.join() {
                *run = TracedState::Done(r.modules, r.notes);
            }
        }
        match &*run {
            TracedState::Done(m, n) => (m.clone(), n.clone()),
            TracedState::Following(_) => (Vec::new(), Vec::new()),
        }
    }
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
        self.collect().0
    }

    /// After `stop`: a static process's probes are removed (the runtime's
    /// patches stay: see Bugs).
    pub fn detach(&self) {
        match &self.engine {
            Engine::Uprobe(c) => c.detach(),
            Engine::Traced(t) => drop(t.end()),
            Engine::Runtime { .. } => {}
        }
    }

    /// The process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The counts of every report written so far, and notes (one
    /// sentence each) on what was not counted.
    /// Through ptrace ([`attach_static_traced`]), the process is let go
    /// first: its counts up to now are all there will be.
    pub fn collect(&self) -> (Vec<ModuleCoverage>, Vec<String>) {
        match &self.engine {
            Engine::Runtime { server, .. } => server.collect(),
            Engine::Uprobe(c) => (vec![c.coverage()], Vec::new()),
            Engine::Traced(t) => t.end(),
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

/// Count the statically linked process `pid` through ptrace, at the
/// launch route's cost (`profdev_coverage::traced::attach_seized`): a
/// thread of profdev's seizes and stops every thread of it
/// (profdev-inject), checks `permit` again once they are stopped, patches
/// the executable as `profdev cprof CMD` does for a static program, gives
/// each thread a counter array, and follows the process (new threads,
/// forks, breakpoints, exits) until it exits or its counts are taken
/// ([`CovAttached::collect`], which lets it go, running on). `select`:
/// the executable is the module counted (a static program has no other).
///
/// In `mode`: [`Mode::Hits`] (`cprof -p` without `-f`) stores a mark per
/// block that ran instead of counting it (no flags saved; one-shot
/// breakpoints are not used: there is no handler in the process).
///
/// Errors as [`attach_coverage`]'s; ENXIO when the process could not be
/// patched (nothing is left changed then but an unused mapping).
pub fn attach_static_traced(
    pid: u32,
    permit: Option<Permit>,
    mode: Mode,
) -> Result<CovAttached, DevError> {
    use profdev_coverage::traced::{attach_seized, Live};
    let (_, start) = stat_of(pid).ok_or(DevError::NoProcess(pid))?;
    let server = Server::new(&[]).map_err(|e| io_dev("cannot set up coverage", e))?;
    server.set_mode(mode);
    // Planning is the slow part: done before the threads are stopped.
    server.preplan(pid);
    let live = Live::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let following = live.clone();
    let handle = std::thread::Builder::new()
        .name("profdev-cov-tracer".into())
        .spawn(move || {
            let set_up = (|| {
                let t = profdev_inject::Target::attach(pid).map_err(|e| inject_error(pid, e))?;
                // Stopped: the requester's right, again, on this very process.
                recheck(permit.as_ref(), pid).map_err(|e| inject_error(pid, e))?;
                let seized = attach_seized(pid, &t.threads(), server, &following)
                    .map_err(|e| DevError::NoDevice(format!("process {pid}: {e}")))?;
                Ok::<_, DevError>((seized, t.keep()))
            })();
            match set_up {
                Ok((seized, pending)) => {
                    let _ = tx.send(Ok(()));
                    Some(seized.follow(&pending))
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                    None
                }
            }
        })
        .map_err(|e| io_dev("cannot start a thread to follow it", e))?;
    match rx.recv() {
        Ok(Ok(())) => Ok(CovAttached {
            pid,
            start,
            engine: Engine::Traced(Traced {
                live,
                run: std::sync::Mutex::new(TracedState::Following(handle)),
            }),
            // Checked once stopped; it is never stopped again for a
            // request (the tracer follows it from then on).
            permit: None,
        }),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => Err(DevError::NoDevice(format!(
            "process {pid}: the thread following it ended"
        ))),
    }
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
/// `permit`, when a requester's right was checked
/// ([`profdev_dev::access::ptrace_may_attach`],
/// for `pid`), is checked again once every thread is stopped, before
/// anything is loaded (a process that exec'd a set-id program since is let
/// go untouched: EPERM), and before every later stop ([`CovAttached::flush`]).
pub fn attach_coverage(
    pid: u32,
    select: &[String],
    permit: Option<Permit>,
) -> Result<CovAttached, DevError> {
    attach_coverage_in(pid, select, permit, Mode::Counts)
}

/// [`attach_coverage`] with the probes of `mode`: `profdev cprof -p`
/// without `-f` asks for [`Mode::Hits`] (one-shot probes, the marks
/// only); a statically linked process is counted through uprobes all the
/// same.
pub fn attach_coverage_in(
    pid: u32,
    select: &[String],
    permit: Option<Permit>,
    mode: Mode,
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
    server.set_mode(mode);
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
            // A thread that blocks SIGTRAP (a server's workers blocking
            // every signal) would be killed by its first breakpoint: the
            // runtime keeps SIGTRAP out of masks set from now on, this
            // takes it out of the masks set before.
            t.unblock_signal(tid, libc::SIGTRAP)?;
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

/// The histogram pairs of `m`: one per executed instruction, ascending.
pub fn coverage_pairs(m: &ModuleCoverage) -> Vec<(u64, u64)> {
    profdev_coverage::lines::instruction_counts(m)
        .into_iter()
        .filter(|&(_, c)| c > 0)
        .collect()
}
