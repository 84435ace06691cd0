//! Running a profiled command CMD: giving it the terminal, passing
//! signals to it, ending it, and handing its exit status on. `profdev
//! sample`, `gmon` and `prof` run CMD through one [`Job`] each.
//!
//! # Signals
//!
//! A [`Job`] runs CMD always the same way:
//!
//! * **Its own process group.** CMD is started in a new process group
//!   (`setpgid` in the child before exec, and again in the parent). When
//!   one of profdev's standard descriptors is its controlling terminal and
//!   profdev's group is that terminal's foreground group, CMD's group is
//!   made the foreground group while it runs (`tcsetpgrp`, with SIGTTOU
//!   blocked around it, in the child and in the parent) and the terminal is
//!   given back when CMD exits. So ^C and ^\ reach CMD once, as they would
//!   without profdev, and profdev stays to write what was recorded. When
//!   CMD is stopped from the terminal (^Z, or SIGTTIN/SIGTTOU), profdev
//!   takes the terminal back and stops itself with the same signal, so the
//!   shell sees the job stopped; `fg` continues both, CMD with the
//!   terminal (`bg` continues both in the background). Started in the
//!   background (`&`), CMD gets the terminal only through `fg`, after it
//!   was stopped for reading or writing the terminal. Meanwhile profdev,
//!   a background process then, ignores SIGTTOU, so that its own writes to
//!   the terminal (sample's progress line) do not stop it under `stty
//!   tostop`; CMD gets the default back before exec.
//! * **Signals to profdev are passed on.** SIGINT, SIGTERM and SIGHUP sent
//!   to profdev (by `kill`, `timeout`, a hangup, a service manager) are
//!   caught (`signal-hook`) and sent to CMD's group, followed by SIGCONT.
//!   A signal that was ignored when profdev started (`nohup`, or a
//!   non-interactive shell's `&`) stays ignored, by profdev and by CMD.
//! * **Bounded end.** After the first such signal profdev waits up to
//!   [`GRACE`] (2 s) for CMD's group to exit, then kills the group with
//!   SIGKILL. It then stops sampling, writes what it gathered, says so on
//!   standard error in one sentence (`profdev sample: interrupted by
//!   SIGTERM; CMD's process group was ended; wrote profdev.out/kpdata`), and
//!   exits with 128 + the signal's number.
//! * **No orphans.** profdev is a child subreaper
//!   (`PR_SET_CHILD_SUBREAPER`): CMD's descendants whose parent exits are
//!   re-parented to profdev rather than to init. On a signal, processes
//!   that left CMD's group (`setsid`, `setpgid`) and were re-parented to
//!   profdev are sent the signal and SIGKILL like the group, until none is
//!   left. A descendant that left the group and whose parent is still
//!   alive when the group is killed is re-parented to profdev then, and
//!   killed in turn.
//! * **profdev killed by SIGKILL.** CMD is started with
//!   `PR_SET_PDEATHSIG(SIGKILL)`, so it dies with profdev. That does not
//!   reach CMD's children (the setting is not inherited by fork), and the
//!   kernel clears it when CMD executes a set-user-ID or set-group-ID
//!   program or one with file capabilities: those survive as orphans.
//!
//! When CMD exits on its own, processes it left running in the background
//! are left alone, as a shell would (`gmon` and `prof` keep sampling them
//! for a while: see their docs). profdev's exit status is then CMD's: its
//! exit code, or 128 + the signal that killed it.
//!
//! A command that waits for a process it did not start (`cprof -p`,
//! `mprof -p`) catches the same signals with a [`Catcher`] alone: each
//! is noted and wakes the waiter, a signal ignored at the start stays
//! ignored, and the process waited for is sent nothing.

mod terminal;

pub use terminal::Foreground;
use terminal::{controlling_terminal, give_terminal};

use std::io::Read;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long CMD's process group has, after profdev passed it a signal,
/// before it is killed with SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// How long processes killed with SIGKILL have to disappear before profdev
/// gives up on them (a process in uninterruptible sleep can take a while).
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The signals profdev catches and passes to CMD's group.
const PASSED_ON: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// CMD's status as ours: its exit code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
        _ => ExitCode::from(1),
    }
}

/// The signal's name as `kill -l` spells it, with the SIG prefix.
pub fn signal_name(sig: libc::c_int) -> String {
    signal_hook::low_level::signal_name(sig)
        .map(str::to_string)
        .unwrap_or_else(|| format!("signal {sig}"))
}

/// Was `sig`'s disposition SIG_IGN when we looked?
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: a zeroed sigaction is a valid out-parameter; a null new
    // action only queries.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// The processes whose parent is this process.
fn children_of_self() -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: libc::pid_t = name.to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let rest = &stat[stat.rfind(')')? + 1..];
        let ppid: libc::pid_t = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == me).then_some(pid)
    })
    .collect()
}

/// Does process group `pgid` still have a member (a zombie counts)?
fn group_alive(pgid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

/// Send `sig` to process `pid` (negative: a group), ignoring errors.
fn send(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// SIGINT, SIGTERM and SIGHUP caught, those not ignored when it was made
/// (`nohup`'s stay ignored): each sets a flag and wakes
/// [`Catcher::sleep`]. A [`Job`] holds one; a command that waits for a
/// process it did not start uses one alone. Dropping it puts the previous
/// handlers back.
pub struct Catcher {
    flags: Vec<(libc::c_int, Arc<AtomicBool>)>,
    /// Per signal caught: whether its latest came from the kernel (the
    /// terminal's ^C or hangup), not from a process.
    kernel: Vec<(libc::c_int, Arc<AtomicBool>)>,
    wake: UnixStream,
    ids: Vec<signal_hook::SigId>,
}

impl Catcher {
    /// Catch SIGINT, SIGTERM and SIGHUP (those not ignored already).
    pub fn new() -> std::io::Result<Self> {
        Catcher::waking_on(&[])
    }

    /// [`Catcher::new`], also woken (not noting them) by the signals
    /// `also`.
    fn waking_on(also: &[libc::c_int]) -> std::io::Result<Self> {
        let (wake, wake_w) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        let mut c = Catcher {
            flags: Vec::new(),
            kernel: Vec::new(),
            wake,
            ids: Vec::new(),
        };
        for sig in PASSED_ON {
            if ignored(sig) {
                continue;
            }
            // Where it came from is noted first (the actions run in the
            // order they were registered), so that a flag seen set has
            // its origin noted.
            let kernel = Arc::new(AtomicBool::new(false));
            let mark = kernel.clone();
            // SAFETY: the action only stores to an atomic, which is
            // async-signal-safe.
            c.ids.push(unsafe {
                signal_hook_registry::register_sigaction(sig, move |info: &libc::siginfo_t| {
                    mark.store(info.si_code == libc::SI_KERNEL, Ordering::SeqCst)
                })
            }?);
            c.kernel.push((sig, kernel));
            let flag = Arc::new(AtomicBool::new(false));
            c.ids.push(signal_hook::flag::register(sig, flag.clone())?);
            c.ids.push(signal_hook::low_level::pipe::register(
                sig,
                wake_w.try_clone()?,
            )?);
            c.flags.push((sig, flag));
        }
        for &sig in also {
            c.ids.push(signal_hook::low_level::pipe::register(
                sig,
                wake_w.try_clone()?,
            )?);
        }
        Ok(c)
    }

    /// The first of SIGINT, SIGTERM and SIGHUP (in that order) that came.
    pub fn caught(&self) -> Option<libc::c_int> {
        self.flags
            .iter()
            .find(|(_, f)| f.load(Ordering::SeqCst))
            .map(|(sig, _)| *sig)
    }

    /// Whether the latest `sig` caught came from the kernel: from the
    /// terminal (^C, a hangup) to its whole foreground group, not sent by
    /// a process.
    pub fn from_terminal(&self, sig: libc::c_int) -> bool {
        self.kernel
            .iter()
            .any(|(s, k)| *s == sig && k.load(Ordering::SeqCst))
    }

    /// The signals that came since the last call, each forgotten.
    fn take(&self) -> Vec<libc::c_int> {
        self.flags
            .iter()
            .filter(|(_, f)| f.swap(false, Ordering::SeqCst))
            .map(|(sig, _)| *sig)
            .collect()
    }

    /// Wait up to `timeout` for a signal, or for `also` to be readable (a
    /// pidfd: its process exited). A signal that came before the call and
    /// was not [`Catcher::drain`]ed ends it at once.
    pub fn sleep(&self, timeout: Duration, also: Option<BorrowedFd<'_>>) {
        let mut fds = vec![libc::pollfd {
            fd: self.wake.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(fd) = also {
            fds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: `fds` is a valid array of its length; EINTR just ends
        // the wait early.
        unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                timeout.as_millis() as libc::c_int,
            );
        }
    }

    /// Forget the wake-ups so far (the flags stay): look at
    /// [`Catcher::caught`] after this and before the next
    /// [`Catcher::sleep`].
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
    }
}

impl Drop for Catcher {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// How CMD's process group ended after profdev passed it a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// CMD had exited before the signal came.
    Already,
    /// The group exited within [`GRACE`].
    InTime,
    /// The group was killed with SIGKILL after [`GRACE`].
    Killed,
    /// Some process of it was still there 5 s after SIGKILL.
    Stuck,
}

/// The signal profdev received while running CMD, and what came of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupted {
    pub signal: libc::c_int,
    pub ended: Ended,
}

impl Interrupted {
    /// The sentence for standard error: `NAME: interrupted by SIGTERM;
    /// CMD's process group was ended; WROTE`.
    pub fn sentence(&self, name: &str, wrote: &str) -> String {
        let what = match self.ended {
            Ended::Already => "CMD had already exited".to_string(),
            Ended::InTime => "CMD's process group was ended".to_string(),
            Ended::Killed => format!(
                "CMD's process group was killed with SIGKILL after {} s",
                GRACE.as_secs()
            ),
            Ended::Stuck => "some process of CMD's group could not be killed".to_string(),
        };
        format!(
            "{name}: interrupted by {}; {what}; {wrote}",
            signal_name(self.signal)
        )
    }
}

/// The end phase that follows a signal.
#[derive(Debug)]
struct Ending {
    signal: libc::c_int,
    deadline: Instant,
    killed: bool,
    /// Adopted processes already sent the signal.
    told: Vec<libc::pid_t>,
    result: Option<Ended>,
    already: bool,
}

/// Runs CMD; see the module doc for what it guarantees.
///
/// Create it before spawning CMD (it installs the signal handlers), let
/// [`Job::prepare`] set up the command, spawn it (with
/// [`Command::spawn`] or [`crate::spawn_profiled`]) from the thread
/// that will also wait for it (PR_SET_PDEATHSIG follows the thread that
/// forked), hand the child to [`Job::started`], then [`Job::wait`] or
/// [`Job::poll`]. Dropping a Job whose CMD still runs kills CMD's group.
pub struct Job {
    /// SIGINT, SIGTERM, SIGHUP; also woken by SIGCONT and SIGCHLD.
    signals: Catcher,
    /// Our controlling terminal, if one of our standard descriptors.
    tty: Option<libc::c_int>,
    /// The terminal, if our group was its foreground group at the start.
    terminal: Option<libc::c_int>,
    /// CMD stopped by this signal from the terminal, not yet continued.
    cmd_stopped: Option<libc::c_int>,
    /// SIGTTOU ignored by us (see [`Job::new`]).
    ttou: bool,
    own_pgrp: libc::pid_t,
    pid: Option<libc::pid_t>,
    status: Option<ExitStatus>,
    /// CMD's CPU time and its waited-for children's, once it is reaped.
    cpu: Option<crate::cputime::CpuTime>,
    group_gone: bool,
    handed: bool,
    ending: Option<Ending>,
}

impl Job {
    /// Catch SIGINT, SIGTERM and SIGHUP (those not ignored already) and
    /// SIGCHLD, and become a child subreaper.
    pub fn new() -> std::io::Result<Self> {
        // A child's change of state, and our own continuation (`fg`),
        // only wake us up.
        let signals = Catcher::waking_on(&[libc::SIGCONT, libc::SIGCHLD])?;
        // SAFETY: prctl with integer arguments; failure is harmless (the
        // no-orphans sweep then sees fewer processes).
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
        let tty = controlling_terminal();
        let terminal = tty.and_then(|(fd, fg)| fg.then_some(fd));
        // While CMD holds the terminal, profdev is a background process
        // that may still write to it (sample's progress line): with `stty
        // tostop` that would stop profdev, so SIGTTOU is ignored meanwhile
        // (and set back to the default in CMD before exec).
        let ttou = tty.is_some() && !ignored(libc::SIGTTOU);
        if ttou {
            // SAFETY: installing SIG_IGN has no preconditions; Drop restores
            // the default.
            unsafe {
                libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            }
        }
        Ok(Job {
            signals,
            tty: tty.map(|(fd, _)| fd),
            terminal,
            cmd_stopped: None,
            ttou,
            // SAFETY: getpgrp only queries.
            own_pgrp: unsafe { libc::getpgrp() },
            pid: None,
            status: None,
            cpu: None,
            group_gone: false,
            handed: false,
            ending: None,
        })
    }

    /// Make `cmd` start in its own process group, as the terminal's
    /// foreground group when we hold the terminal, and die with profdev.
    /// Call before any other `pre_exec` hook is added.
    pub fn prepare(&self, cmd: &mut Command) {
        cmd.process_group(0);
        let terminal = self.terminal;
        let ttou = self.ttou;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the hook runs between fork and exec and makes only
        // async-signal-safe calls (prctl, getppid, getpid, sigprocmask,
        // tcsetpgrp, signal) on values copied in; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    // profdev died before the line above took effect.
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                terminal::in_child(terminal, ttou);
                Ok(())
            });
        }
    }

    /// CMD was spawned: do the parent's half of the group and terminal
    /// set-up (the child did it too; whichever is first wins the race), and
    /// pass on any signal that came meanwhile.
    pub fn started(&mut self, child: &Child) {
        let pid = child.id() as libc::pid_t;
        self.pid = Some(pid);
        // SAFETY: setpgid on our own child; EACCES once it has exec'd.
        unsafe {
            libc::setpgid(pid, pid);
        }
        if let Some(e) = &mut self.ending {
            // A signal came while CMD was being started: CMD gets it and
            // its full grace period.
            e.deadline = Instant::now() + GRACE;
            send(-pid, e.signal);
            send(-pid, libc::SIGCONT);
        }
        if let Some(fd) = self.terminal {
            // SAFETY: tcgetpgrp only queries.
            if unsafe { libc::tcgetpgrp(fd) } == self.own_pgrp {
                give_terminal(fd, pid);
            }
            self.handed = true;
        }
        self.poll();
    }

    /// The first signal profdev received, once the end it started is over;
    /// or one that came after the caller stopped waiting for CMD (while it
    /// writes the profile), which is only noted.
    pub fn interrupted(&self) -> Option<Interrupted> {
        match &self.ending {
            Some(e) => Some(Interrupted {
                signal: e.signal,
                ended: e.result?,
            }),
            None => Some(Interrupted {
                signal: self.late_signal()?,
                ended: Ended::Already,
            }),
        }
    }

    /// A signal that came and was not handled by [`Job::poll`].
    fn late_signal(&self) -> Option<libc::c_int> {
        self.signals.caught()
    }

    /// Has a signal come (the end phase may still be under way)?
    pub fn signalled(&self) -> bool {
        self.ending.is_some()
    }

    /// Our exit status: 128 + the signal profdev received, else CMD's.
    pub fn exit_code(&self, status: ExitStatus) -> ExitCode {
        match self.interrupted() {
            Some(i) => ExitCode::from(128u8.wrapping_add(i.signal as u8)),
            None => exit_code(status),
        }
    }

    /// CMD's CPU time, with that of the children it waited for: final
    /// (`wait4`'s) once CMD is reaped, else so far (`/proc/PID/stat`);
    /// `None` before CMD started. See [`crate::cputime`].
    pub fn cpu_time(&self) -> Option<crate::cputime::CpuTime> {
        self.cpu
            .or_else(|| crate::cputime::of_process(u32::try_from(self.pid?).ok()?))
    }

    /// CMD's pid, once it started.
    pub fn pid(&self) -> Option<u32> {
        u32::try_from(self.pid?).ok()
    }

    /// Is CMD reaped and, after a signal, its group and adopted processes
    /// gone?
    pub fn finished(&self) -> bool {
        self.status.is_some() && self.ending.as_ref().is_none_or(|e| e.result.is_some())
    }

    /// Do what is due without blocking: pass on signals, reap CMD and
    /// adopted processes, follow CMD's stops, kill after the grace period.
    pub fn poll(&mut self) {
        self.signals.drain();
        for sig in self.signals.take() {
            self.pass_on(sig);
        }
        self.reap();
        self.resume_in_foreground();
        self.advance_ending();
    }

    /// CMD was stopped from the terminal and we now hold it (the shell's
    /// `fg` gave it to us): give it to CMD and continue CMD.
    fn resume_in_foreground(&mut self) {
        let (Some(fd), Some(pgid), Some(_)) = (self.tty, self.pid, self.cmd_stopped) else {
            return;
        };
        if self.status.is_some() {
            return;
        }
        // SAFETY: tcgetpgrp only queries.
        if unsafe { libc::tcgetpgrp(fd) } == self.own_pgrp && give_terminal(fd, pgid) {
            self.handed = true;
            self.cmd_stopped = None;
            send(-pgid, libc::SIGCONT);
        }
    }

    /// Block until [`Job::finished`], handling signals meanwhile; CMD's
    /// exit status.
    pub fn wait(&mut self) -> ExitStatus {
        loop {
            self.poll();
            if let (true, Some(s)) = (self.finished(), self.status) {
                return s;
            }
            // While ending, look often: members of CMD's group that are
            // not our children exit without telling us.
            let timeout = match &self.ending {
                Some(e) => e
                    .deadline
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(20)),
                None => Duration::from_secs(1),
            };
            // Woken by a signal or a child's change of state.
            self.signals
                .sleep(timeout.max(Duration::from_millis(1)), None);
        }
    }

    fn pass_on(&mut self, sig: libc::c_int) {
        if self.ending.is_none() {
            self.ending = Some(Ending {
                signal: sig,
                deadline: Instant::now() + GRACE,
                killed: false,
                told: Vec::new(),
                result: None,
                already: self.status.is_some()
                    && self.pid.is_none_or(|p| self.group_gone || !group_alive(p)),
            });
        }
        let Some(pgid) = self.pid else { return };
        if !self.group_gone {
            send(-pgid, sig);
            send(-pgid, libc::SIGCONT);
        }
        if let Some(e) = &mut self.ending {
            for p in children_of_self() {
                if Some(p) != self.pid {
                    send(p, sig);
                    send(p, libc::SIGCONT);
                    if !e.told.contains(&p) {
                        e.told.push(p);
                    }
                }
            }
        }
    }

    /// Reap CMD once it has exited, and follow its stops.
    fn reap(&mut self) {
        let Some(cmd) = self.pid else { return };
        while self.status.is_none() {
            let mut st = 0;
            // SAFETY: an all-zero rusage is a valid value of the C struct.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: wait4 writes the status and the usage into our locals.
            let pid =
                unsafe { libc::wait4(cmd, &mut st, libc::WNOHANG | libc::WUNTRACED, &mut usage) };
            if pid != cmd {
                break;
            }
            if libc::WIFSTOPPED(st) {
                self.stopped(libc::WSTOPSIG(st));
            } else {
                self.status = Some(ExitStatus::from_raw(st));
                self.cpu = Some(crate::cputime::CpuTime::from_rusage(&usage));
                self.take_terminal_back();
            }
        }
    }

    /// CMD was stopped by `sig`. A stop from the terminal (^Z, or reading
    /// or writing it from the background) suspends profdev too with the
    /// same signal, after taking the terminal back from CMD, so that the
    /// shell sees the job stopped and regains the terminal. Once profdev
    /// is continued and holds the terminal (`fg`), CMD gets it and is
    /// continued ([`Job::resume_in_foreground`]); continued in the
    /// background (`bg`) after ^Z, CMD is continued there.
    fn stopped(&mut self, sig: libc::c_int) {
        let from_terminal = matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU);
        let (Some(fd), Some(pgid), true) = (self.tty, self.pid, from_terminal) else {
            return;
        };
        if self.ending.is_some() {
            return;
        }
        self.cmd_stopped = Some(sig);
        // SAFETY: tcgetpgrp only queries.
        if unsafe { libc::tcgetpgrp(fd) } == self.own_pgrp {
            // We hold the terminal (`fg` after `bg`): no need to stop.
            self.resume_in_foreground();
            return;
        }
        // SAFETY: tcgetpgrp only queries; raise stops this process (the
        // default action: profdev catches none of these signals) and
        // returns once it is continued. The kernel discards it when our
        // process group is orphaned: then nothing else happens here.
        unsafe {
            if libc::tcgetpgrp(fd) == pgid {
                give_terminal(fd, self.own_pgrp);
            }
            self.handed = false;
            // SIGTTOU is ignored here while CMD runs: stop with SIGTSTP.
            libc::raise(if sig == libc::SIGTTOU && self.ttou {
                libc::SIGTSTP
            } else {
                sig
            });
        }
        self.resume_in_foreground();
        // SAFETY: tcgetpgrp only queries.
        let background = unsafe { libc::tcgetpgrp(fd) } != self.own_pgrp;
        if self.cmd_stopped == Some(libc::SIGTSTP) && background {
            // `bg`: continue CMD in the background too.
            self.cmd_stopped = None;
            send(-pgid, libc::SIGCONT);
        }
    }

    /// Give the terminal back to profdev's group, if CMD's group has it.
    fn take_terminal_back(&mut self) {
        if let (Some(fd), Some(pgid), true) = (self.tty, self.pid, self.handed) {
            // SAFETY: tcgetpgrp only queries.
            if unsafe { libc::tcgetpgrp(fd) } == pgid {
                give_terminal(fd, self.own_pgrp);
            }
            self.handed = false;
        }
    }

    fn advance_ending(&mut self) {
        let (Some(pgid), Some(e)) = (self.pid, self.ending.as_mut()) else {
            return;
        };
        if e.result.is_some() {
            return;
        }
        // Our children other than CMD are its descendants, re-parented to
        // us (we are a subreaper): reap those that have exited.
        let adopted: Vec<_> = children_of_self()
            .into_iter()
            .filter(|&p| Some(p) != self.pid)
            .filter(|&p| {
                // SAFETY: waitpid on our own child, status discarded.
                unsafe { libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG) != p }
            })
            .collect();
        if !self.group_gone && !group_alive(pgid) {
            self.group_gone = true;
        }
        for &p in &adopted {
            if !e.told.contains(&p) {
                send(p, if e.killed { libc::SIGKILL } else { e.signal });
                send(p, libc::SIGCONT);
                e.told.push(p);
            }
        }
        let now = Instant::now();
        if self.status.is_some() && self.group_gone && adopted.is_empty() {
            e.result = Some(if e.already {
                Ended::Already
            } else if e.killed {
                Ended::Killed
            } else {
                Ended::InTime
            });
            return;
        }
        if now >= e.deadline {
            if !e.killed {
                e.killed = true;
                e.deadline = now + KILL_WAIT;
            } else {
                e.result = Some(Ended::Stuck);
                return;
            }
        }
        if e.killed {
            if !self.group_gone {
                send(-pgid, libc::SIGKILL);
            }
            for &p in &adopted {
                send(p, libc::SIGKILL);
            }
        }
    }
}

impl Drop for Job {
    /// A Job dropped while CMD runs (profdev failed, or panicked) kills
    /// CMD's group and waits for it, so nothing is left behind.
    fn drop(&mut self) {
        if self.pid.is_some() && !self.finished() {
            match &mut self.ending {
                Some(e) => e.deadline = Instant::now(),
                None if self.status.is_none() => {
                    self.ending = Some(Ending {
                        signal: libc::SIGKILL,
                        deadline: Instant::now(),
                        killed: false,
                        told: Vec::new(),
                        result: None,
                        already: false,
                    })
                }
                None => {}
            }
            let _ = self.wait();
        }
        self.take_terminal_back();
        for id in self.signals.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
        if self.ttou {
            // SAFETY: restores the default that Job::new replaced.
            unsafe {
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences() {
        let i = Interrupted {
            signal: libc::SIGTERM,
            ended: Ended::InTime,
        };
        assert_eq!(
            i.sentence("profdev sample", "wrote profdev.out/kpdata"),
            "profdev sample: interrupted by SIGTERM; CMD's process group was ended; \
             wrote profdev.out/kpdata"
        );
        let i = Interrupted {
            signal: libc::SIGHUP,
            ended: Ended::Killed,
        };
        assert_eq!(
            i.sentence("prof", "the listing shows what was sampled"),
            "prof: interrupted by SIGHUP; CMD's process group was killed with SIGKILL after 2 s; \
             the listing shows what was sampled"
        );
    }

    /// A signal that comes once CMD is done (while profdev writes) is only
    /// noted: profdev finishes, says so and exits with 128 + the signal.
    /// (The Job's handler catches the signal.)
    /// Held by the tests that signal the test process, so that the signal
    /// of one never reaches the handlers of another.
    static SIGNALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    #[allow(clippy::zombie_processes)] // the Job reaps it
    fn a_late_signal_is_noted() {
        let _alone = SIGNALLING.lock().unwrap_or_else(|e| e.into_inner());
        // A runner may start the tests with SIGTERM ignored (nohup, `&` in
        // a non-interactive shell); the Job would rightly leave it so. Give
        // the test the default a user's shell gives. Only then: a
        // disposition signal-hook installed (another test's Catcher) must
        // stay, as signal-hook installs its handler once per process.
        if ignored(libc::SIGTERM) {
            // SAFETY: restoring the default disposition has no
            // preconditions.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_DFL) };
        }
        let mut job = Job::new().unwrap();
        let mut cmd = Command::new("true");
        job.prepare(&mut cmd);
        let child = cmd.spawn().unwrap();
        job.started(&child);
        let status = job.wait();
        assert!(status.success());
        assert_eq!(job.interrupted(), None);
        assert_eq!(job.exit_code(status), ExitCode::SUCCESS);
        // SAFETY: raise has no memory-safety preconditions; the Job's
        // handler is installed.
        unsafe {
            libc::raise(libc::SIGTERM);
        }
        let i = job.interrupted().expect("the signal was noted");
        assert_eq!((i.signal, i.ended), (libc::SIGTERM, Ended::Already));
        assert_eq!(job.exit_code(status), ExitCode::from(143));
        assert_eq!(
            i.sentence("profdev gmon", "wrote gmon.out"),
            "profdev gmon: interrupted by SIGTERM; CMD had already exited; wrote gmon.out"
        );
    }

    /// A Catcher without a Job: a signal is noted and wakes its sleep,
    /// and so does another descriptor that becomes readable.
    #[test]
    fn a_catcher_alone() {
        use std::io::Write as _;
        use std::os::fd::AsFd;
        let _alone = SIGNALLING.lock().unwrap_or_else(|e| e.into_inner());
        if ignored(libc::SIGHUP) {
            // Ignored by the runner (nohup): the Catcher would leave it so.
            // Never caught in this process yet, so no handler is replaced.
            // SAFETY: restoring the default disposition has no
            // preconditions.
            unsafe { libc::signal(libc::SIGHUP, libc::SIG_DFL) };
        }
        let c = Catcher::new().unwrap();
        assert_eq!(c.caught(), None);
        let (other, mut writer) = UnixStream::pair().unwrap();
        writer.write_all(b"x").unwrap();
        let start = Instant::now();
        c.sleep(Duration::from_secs(60), Some(other.as_fd()));
        assert!(start.elapsed() < Duration::from_secs(60));
        // SAFETY: raise has no memory-safety preconditions; the Catcher's
        // handler is installed.
        unsafe {
            libc::raise(libc::SIGHUP);
        }
        let start = Instant::now();
        c.sleep(Duration::from_secs(60), None);
        assert!(start.elapsed() < Duration::from_secs(60));
        c.drain();
        assert_eq!(c.caught(), Some(libc::SIGHUP));
        assert_eq!(c.take(), [libc::SIGHUP]);
        assert_eq!(c.caught(), None);
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), ExitCode::from(3));
        assert_eq!(
            exit_code(ExitStatus::from_raw(libc::SIGINT)),
            ExitCode::from(130)
        );
    }
}
