//! Load a shared library into a running process and call functions in
//! it, with ptrace: what `heaptrack -p` does through gdb, done directly.
//!
//! ```no_run
//! use profdev_inject::{on_tracer_thread, InjectError, Target};
//! let r = on_tracer_thread(|| {
//!     let mut t = Target::attach(1234)?; // every thread stopped
//!     let h = t.dlopen("/path/to/lib.so")?; // its constructors run
//!     let f = t.dlsym(h, "entry")?;
//!     let s = t.write_string(t.main_thread(), "argument")?;
//!     t.call(t.main_thread(), f, &[s])
//!     // dropped: registers restored, detached, the process runs on
//! });
//! # let _: Result<u64, InjectError> = r;
//! ```
//!
//! * [`Target::attach`] seizes (`PTRACE_SEIZE`) and interrupts
//!   (`PTRACE_INTERRUPT`) every thread of the process, re-reading
//!   `/proc/PID/task` until no new thread appears, and waits for each stop
//!   with a bound. Dropping the `Target` puts back every register set it
//!   changed (general registers and the whole FPU/SSE/AVX state) and
//!   detaches: the process goes on as before, also after an error. A
//!   signal that arrived while it was held is delivered at the detach.
//! * [`Target::call`] runs one function in one stopped thread, SysV ABI:
//!   up to 6 integer arguments, a 16-byte aligned stack below the red zone
//!   (and below any data [`Target::write_bytes`] put there), a return
//!   address of 0 whose fault (`SIGSEGV` at pc 0) ends the call and is
//!   never delivered. A thread stopped inside a system call has
//!   `orig_rax` set to -1 for the call, so the kernel does not "restart"
//!   the call's code as a system call; its saved registers are put back
//!   after the call, and the interrupted system call restarts at the
//!   detach as it would have (`-ERESTART*` semantics, done by the kernel).
//! * Remote memory: [`Target::read_bytes`] and [`Target::write_bytes`] go
//!   through `/proc/PID/mem`; [`Target::write_bytes`] and
//!   [`Target::write_string`] place data on the thread's stack, below the
//!   red zone, for the calls that follow (it is gone after the detach).
//! * [`Target::dlopen`], [`Target::dlsym`]: `dlopen`/`dlsym`/`dlerror`
//!   found in the process's C library (glibc >= 2.34 exports them from
//!   libc.so.6; older ones from libdl.so.2 when it is loaded, else
//!   `__libc_dlopen_mode`/`__libc_dlsym`), by reading `/proc/PID/maps`
//!   and the library file's dynamic symbols. A failing `dlopen` is
//!   reported with the text of a remote `dlerror()`.
//!
//! Every thread is held during a call: a function that waits for a lock
//! another (stopped) thread holds cannot finish, and the call gives up
//! after its bound ([`CALL_TIMEOUT`]), restoring the thread's registers.
//!
//! A `Target` must be used, and dropped, by the thread that attached
//! (ptrace's tracer is a thread): it is neither `Send` nor `Sync`. Use it
//! inside [`on_tracer_thread`]: a thread that never stopped (one blocked in
//! a request only the caller can answer, such as a FUSE write to the
//! caller's own file system) cannot be detached, but when the tracer
//! thread ends the kernel detaches it. x86-64 only.

use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a thread may take to stop after `PTRACE_INTERRUPT`.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a remote call may run.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// How much stack the data written for calls may take.
const MAX_SCRATCH: u64 = 64 << 10;
/// The red zone below a thread's stack pointer (SysV x86-64).
const RED_ZONE: u64 = 128;

/// Why attaching, calling or loading failed: one sentence each.
#[derive(Debug, thiserror::Error)]
pub enum InjectError {
    /// The process does not exist (ESRCH).
    #[error("no process {0}")]
    NoProcess(u32),
    /// ptrace refused (EPERM); `hint` names the reason when it is known.
    #[error("not permitted to ptrace process {pid}{hint}")]
    NotPermitted {
        /// The process.
        pid: u32,
        /// `: ...` naming `kernel.yama.ptrace_scope` or the credentials.
        hint: String,
    },
    /// Another tracer (a debugger, strace, another profiler) holds it.
    #[error(
        "process {pid} is already traced by process {tracer} (a debugger or another tracer): \
         detach that first"
    )]
    AlreadyTraced {
        /// The process.
        pid: u32,
        /// The tracer's pid.
        tracer: u32,
    },
    /// No C library is mapped: nothing can load a library into it.
    #[error(
        "process {0} is out of reach: statically linked (no C library is mapped), so no library \
         can be loaded into it; start it under profdev instead of attaching"
    )]
    Static(u32),
    /// `dlopen` returned NULL.
    #[error("loading {path} into process {pid} failed: {why}")]
    Dlopen {
        /// The process.
        pid: u32,
        /// The library.
        path: String,
        /// `dlerror()`'s text.
        why: String,
    },
    /// A symbol is not there.
    #[error("process {pid} has no symbol {name}{why}")]
    Symbol {
        /// The process.
        pid: u32,
        /// The symbol.
        name: String,
        /// More, from `dlerror()`, or empty.
        why: String,
    },
    /// A thread did not stop, or a call did not return, in time.
    #[error("thread {tid} of process {pid} {what} within {secs} s")]
    Timeout {
        /// The process.
        pid: u32,
        /// The thread.
        tid: u32,
        /// "did not stop", "did not return from the call at 0x...".
        what: String,
        /// The bound.
        secs: u64,
    },
    /// The process or the thread went away.
    #[error("process {pid} (thread {tid}) exited while profdev was attached to it")]
    Exited {
        /// The process.
        pid: u32,
        /// The thread.
        tid: u32,
    },
    /// A called function crashed.
    #[error(
        "the call of 0x{addr:x} in thread {tid} of process {pid} stopped with signal {sig} at \
         pc 0x{pc:x}; its registers were put back"
    )]
    Crashed {
        /// The process.
        pid: u32,
        /// The thread.
        tid: u32,
        /// The function called.
        addr: u64,
        /// The signal.
        sig: i32,
        /// Where.
        pc: u64,
    },
    /// A thread id that is not one of the target's stopped threads.
    #[error("thread {tid} is not a stopped thread of process {pid}")]
    NoThread {
        /// The process.
        pid: u32,
        /// The thread asked for.
        tid: u32,
    },
    /// Anything else the system refused.
    #[error("{what}: {err}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        err: io::Error,
    },
    /// Not x86-64.
    #[error("attaching to a running process is implemented for x86-64 only")]
    Unsupported,
}

impl InjectError {
    /// The errno that best says it (for a device's write): ESRCH, EPERM,
    /// EBUSY (already traced), ENOEXEC (static), ETIMEDOUT, EIO.
    pub fn errno(&self) -> i32 {
        match self {
            InjectError::NoProcess(_) | InjectError::Exited { .. } => libc::ESRCH,
            InjectError::NotPermitted { .. } => libc::EPERM,
            InjectError::AlreadyTraced { .. } => libc::EBUSY,
            InjectError::Static(_) => libc::ENOEXEC,
            InjectError::Timeout { .. } => libc::ETIMEDOUT,
            InjectError::NoThread { .. } => libc::ESRCH,
            InjectError::Unsupported => libc::ENOSYS,
            InjectError::Io { err, .. } => err.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EIO,
        }
    }
}

/// Run `f` on a fresh thread and wait for it: the thread to create and
/// use [`Target`]s on. When it ends, the kernel detaches whatever it still
/// traces (a thread that did not stop within the bounds is left traced by
/// a tracer that no longer waits, until that tracer exits), so nothing is
/// left stopped behind.
pub fn on_tracer_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name("profdev-tracer".into())
            .spawn_scoped(s, f)
            .expect("a thread for ptrace")
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

fn io_err(what: impl Into<String>) -> InjectError {
    InjectError::Io {
        what: what.into(),
        err: io::Error::last_os_error(),
    }
}

/// The `TracerPid:` of /proc/PID/task/TID/status (0 when none).
fn tracer_of(pid: u32, tid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The sentence after "not permitted to ptrace process N".
fn eperm_hint() -> String {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    match scope {
        Some(3) => {
            ": kernel.yama.ptrace_scope is 3, which forbids every attach until reboot".into()
        }
        Some(s @ (1 | 2)) => format!(
            ": kernel.yama.ptrace_scope is {s}; run as root (CAP_SYS_PTRACE) or set the sysctl \
             kernel.yama.ptrace_scope=0"
        ),
        _ => ": it belongs to another user or is not dumpable; run as its owner or as root \
               (CAP_SYS_PTRACE)"
            .into(),
    }
}

fn list_tasks(pid: u32) -> Result<Vec<u32>, InjectError> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            InjectError::NoProcess(pid)
        } else {
            InjectError::Io {
                what: format!("cannot list the threads of process {pid}"),
                err: e,
            }
        }
    })?;
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// One mapping of /proc/PID/maps.
#[derive(Clone, Debug)]
pub struct Mapping {
    /// Start address.
    pub start: u64,
    /// End address.
    pub end: u64,
    /// File offset.
    pub offset: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// The file's path, or a pseudo name (`[stack]`), or empty.
    pub path: String,
}

/// The mappings of process `pid`.
pub fn maps(pid: u32) -> Result<Vec<Mapping>, InjectError> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            InjectError::NoProcess(pid)
        } else {
            InjectError::Io {
                what: format!("cannot read /proc/{pid}/maps"),
                err: e,
            }
        }
    })?;
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let path = f.nth(2).unwrap_or("").trim_start().to_string();
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        out.push(Mapping {
            start,
            end,
            offset,
            perms: perms.to_string(),
            path,
        });
    }
    Ok(out)
}

/// A loaded shared object of the target: its path and load bias.
#[derive(Clone, Debug)]
pub struct Module {
    /// Its path as the target sees it.
    pub path: String,
    /// Runtime address minus link-time address.
    pub bias: u64,
}

/// The mapped object whose file name satisfies `matches`, with its bias.
fn find_module(
    pid: u32,
    matches: impl Fn(&str) -> bool,
) -> Result<Option<(Module, Vec<u8>)>, InjectError> {
    let maps = maps(pid)?;
    let Some(first) = maps.iter().find(|m| {
        m.offset == 0
            && m.path.starts_with('/')
            && Path::new(&m.path)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(&matches)
    }) else {
        return Ok(None);
    };
    // Through /proc/PID/root: the process may live in another mount
    // namespace or chroot.
    let file = PathBuf::from(format!("/proc/{pid}/root{}", first.path));
    let bytes = std::fs::read(&file).map_err(|e| InjectError::Io {
        what: format!("cannot read {} of process {pid}", first.path),
        err: e,
    })?;
    let bias = {
        use object::{Object, ObjectSegment};
        let obj = object::File::parse(&*bytes).map_err(|e| InjectError::Io {
            what: format!("{} of process {pid} is not an ELF file", first.path),
            err: io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        })?;
        let seg0 = obj
            .segments()
            .find(|s| s.file_range().0 == 0)
            .map(|s| s.address())
            .unwrap_or(0);
        first.start.wrapping_sub(seg0 & !0xfff)
    };
    Ok(Some((
        Module {
            path: first.path.clone(),
            bias,
        },
        bytes,
    )))
}

/// The runtime address of the defined dynamic symbol `name` of an object.
fn dynsym(bytes: &[u8], bias: u64, name: &str) -> Option<u64> {
    use object::{Object, ObjectSymbol};
    let obj = object::File::parse(bytes).ok()?;
    obj.dynamic_symbols()
        .find(|s| s.name() == Ok(name) && !s.is_undefined() && s.address() != 0)
        .map(|s| s.address().wrapping_add(bias))
}

fn is_libc(name: &str) -> bool {
    name.starts_with("libc.so") || (name.starts_with("libc-") && name.ends_with(".so"))
}

/// The functions the loader needs, in the target.
#[derive(Clone, Copy, Debug)]
struct Loader {
    dlopen: u64,
    dlsym: u64,
    dlerror: Option<u64>,
}

#[cfg(target_arch = "x86_64")]
type Regs = libc::user_regs_struct;

struct Thread {
    tid: u32,
    /// In a ptrace stop (and so detachable).
    stopped: bool,
    /// The registers at the stop.
    regs: Option<Regs>,
    /// The extended state (NT_X86_XSTATE) at the stop, once read.
    xstate: Option<Vec<u8>>,
    /// Registers were changed: put them back before the detach.
    touched: bool,
    /// The signal of the signal-delivery-stop it was caught in (0 none):
    /// delivered at the detach.
    signal: i32,
    /// Signals that arrived during calls: raised again after the detach.
    later: Vec<i32>,
    /// Data written for calls lies in [scratch, regs.rsp - red zone).
    scratch: u64,
}

/// A process whose threads are all stopped under ptrace.
pub struct Target {
    pid: u32,
    threads: Vec<Thread>,
    mem: Option<File>,
    loader: Option<Loader>,
    _tracer_thread: PhantomData<*const ()>,
}

fn ptrace(req: libc::c_uint, tid: u32, addr: u64, data: u64) -> libc::c_long {
    // SAFETY: ptrace's requests used here take integers or pointers to
    // buffers the callers own and size.
    unsafe {
        libc::ptrace(
            req,
            tid as libc::pid_t,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    }
}

enum Wait {
    /// A ptrace stop: (signal, event).
    Stopped(i32, i32),
    /// The thread is gone.
    Gone,
    Timeout,
}

fn wait_stop(tid: u32, deadline: Instant) -> Wait {
    let mut pause = Duration::from_micros(200);
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status word we own.
        let r = unsafe {
            libc::waitpid(
                tid as libc::pid_t,
                &mut status,
                libc::__WALL | libc::WNOHANG,
            )
        };
        if r < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Wait::Gone;
        }
        if r > 0 {
            if libc::WIFSTOPPED(status) {
                return Wait::Stopped(libc::WSTOPSIG(status), (status >> 16) & 0xff);
            }
            return Wait::Gone;
        }
        if Instant::now() >= deadline {
            return Wait::Timeout;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

impl Target {
    /// Stop every thread of `pid` under ptrace.
    pub fn attach(pid: u32) -> Result<Target, InjectError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(InjectError::Unsupported);
        }
        if pid == 0 || pid > i32::MAX as u32 {
            return Err(InjectError::NoProcess(pid));
        }
        if pid == std::process::id() {
            return Err(InjectError::NotPermitted {
                pid,
                hint: ": it is profdev itself".into(),
            });
        }
        let mut t = Target {
            pid,
            threads: Vec::new(),
            mem: None,
            loader: None,
            _tracer_thread: PhantomData,
        };
        // Seize until a pass over /proc/PID/task finds no new thread:
        // a thread not yet stopped may create others meanwhile.
        loop {
            let tids = list_tasks(pid)?;
            let mut new = false;
            for tid in tids {
                if t.threads.iter().any(|th| th.tid == tid) {
                    continue;
                }
                if ptrace(libc::PTRACE_SEIZE, tid, 0, 0) < 0 {
                    let err = io::Error::last_os_error();
                    match err.raw_os_error() {
                        Some(libc::ESRCH) if tid != pid => continue, // exited
                        Some(libc::ESRCH) => return Err(InjectError::NoProcess(pid)),
                        Some(libc::EPERM) => {
                            let tracer = tracer_of(pid, tid);
                            if tracer != 0 {
                                return Err(InjectError::AlreadyTraced { pid, tracer });
                            }
                            return Err(InjectError::NotPermitted {
                                pid,
                                hint: eperm_hint(),
                            });
                        }
                        _ => {
                            return Err(InjectError::Io {
                                what: format!("cannot ptrace thread {tid} of process {pid}"),
                                err,
                            })
                        }
                    }
                }
                new = true;
                t.threads.push(Thread {
                    tid,
                    stopped: false,
                    regs: None,
                    xstate: None,
                    touched: false,
                    signal: 0,
                    later: Vec::new(),
                    scratch: 0,
                });
                if ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) < 0 {
                    // Gone between the seize and now: the wait says so.
                }
            }
            if !new {
                break;
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut gone = Vec::new();
        for th in &mut t.threads {
            match wait_stop(th.tid, deadline) {
                Wait::Stopped(sig, event) => {
                    th.stopped = true;
                    if event == 0 {
                        // A signal-delivery-stop that came before the
                        // interrupt: hold the signal, deliver it at detach.
                        th.signal = sig;
                    }
                }
                Wait::Gone => gone.push(th.tid),
                Wait::Timeout => {
                    return Err(InjectError::Timeout {
                        pid,
                        tid: th.tid,
                        what: "did not stop".into(),
                        secs: STOP_TIMEOUT.as_secs(),
                    })
                }
            }
        }
        t.threads.retain(|th| !gone.contains(&th.tid));
        if t.threads.is_empty() {
            return Err(InjectError::NoProcess(pid));
        }
        for th in &mut t.threads {
            // SAFETY: a plain C struct of integers; all zeros is valid.
            let mut regs: Regs = unsafe { std::mem::zeroed() };
            if ptrace(
                libc::PTRACE_GETREGS,
                th.tid,
                0,
                &mut regs as *mut Regs as u64,
            ) < 0
            {
                return Err(io_err(format!(
                    "cannot read the registers of thread {} of process {pid}",
                    th.tid
                )));
            }
            th.scratch = (regs.rsp - RED_ZONE) & !0xf;
            th.regs = Some(regs);
        }
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))
            .map_err(|e| InjectError::Io {
                what: format!("cannot open /proc/{pid}/mem"),
                err: e,
            })?;
        t.mem = Some(mem);
        Ok(t)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The stopped threads, main thread first when it is there.
    pub fn threads(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.threads.iter().map(|t| t.tid).collect();
        v.sort_by_key(|&t| (t != self.pid, t));
        v
    }

    /// The thread calls go to by default: the main thread, or the first.
    pub fn main_thread(&self) -> u32 {
        self.threads()[0]
    }

    fn thread(&mut self, tid: u32) -> Result<&mut Thread, InjectError> {
        let pid = self.pid;
        self.threads
            .iter_mut()
            .find(|t| t.tid == tid && t.stopped)
            .ok_or(InjectError::NoThread { pid, tid })
    }

    /// The pc thread `tid` was stopped at.
    pub fn pc(&mut self, tid: u32) -> Result<u64, InjectError> {
        Ok(self.regs(tid)?.rip)
    }

    fn regs(&mut self, tid: u32) -> Result<Regs, InjectError> {
        let pid = self.pid;
        self.thread(tid)?
            .regs
            .ok_or(InjectError::NoThread { pid, tid })
    }

    /// Give thread `tid` the GS base `value` when it resumes: the saved
    /// registers put back at the detach (and the starting registers of
    /// later calls in it) take it. Refused (EIO) for an address outside
    /// user space.
    pub fn set_gs_base(&mut self, tid: u32, value: u64) -> Result<(), InjectError> {
        let pid = self.pid;
        if value >= 0x7fff_ffff_f000 {
            return Err(InjectError::Io {
                what: format!("GS base 0x{value:x} for thread {tid} of process {pid}"),
                err: io::Error::from_raw_os_error(libc::EIO),
            });
        }
        let th = self.thread(tid)?;
        let regs = th.regs.as_mut().ok_or(InjectError::NoThread { pid, tid })?;
        regs.gs_base = value;
        th.touched = true;
        Ok(())
    }

    /// Read `buf.len()` bytes at `addr` of the target.
    pub fn read_bytes(&self, addr: u64, buf: &mut [u8]) -> Result<(), InjectError> {
        let mem = self.mem.as_ref().ok_or(InjectError::NoProcess(self.pid))?;
        mem.read_exact_at(buf, addr).map_err(|e| InjectError::Io {
            what: format!("cannot read 0x{addr:x} of process {}", self.pid),
            err: e,
        })
    }

    /// Write `data` at `addr` of the target (any mapping, even read-only).
    pub fn poke(&self, addr: u64, data: &[u8]) -> Result<(), InjectError> {
        let mem = self.mem.as_ref().ok_or(InjectError::NoProcess(self.pid))?;
        mem.write_all_at(data, addr).map_err(|e| InjectError::Io {
            what: format!("cannot write 0x{addr:x} of process {}", self.pid),
            err: e,
        })
    }

    /// A NUL-terminated string at `addr`, at most `max` bytes.
    pub fn read_string(&self, addr: u64, max: usize) -> Result<String, InjectError> {
        let mut out = Vec::new();
        let mut chunk = [0u8; 256];
        while out.len() < max {
            // Never across a page end: the next page may be unmapped.
            let room = (4096 - ((addr as usize + out.len()) & 4095)).min(chunk.len());
            self.read_bytes(addr + out.len() as u64, &mut chunk[..room])?;
            if let Some(n) = chunk[..room].iter().position(|&b| b == 0) {
                out.extend_from_slice(&chunk[..n]);
                break;
            }
            out.extend_from_slice(&chunk[..room]);
        }
        out.truncate(max);
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Put `data` on thread `tid`'s stack below the red zone (16-byte
    /// aligned) for the calls that follow; its address. It stays until
    /// the detach.
    pub fn write_bytes(&mut self, tid: u32, data: &[u8]) -> Result<u64, InjectError> {
        let pid = self.pid;
        let th = self.thread(tid)?;
        let rsp = th.regs.map(|r| r.rsp).unwrap_or(0);
        let at = th.scratch.wrapping_sub(data.len() as u64) & !0xf;
        if rsp.wrapping_sub(at) > MAX_SCRATCH {
            return Err(InjectError::Io {
                what: format!(
                    "cannot put {} more bytes on the stack of thread {tid} of process {pid}",
                    data.len()
                ),
                err: io::Error::from_raw_os_error(libc::ENOSPC),
            });
        }
        th.scratch = at;
        self.poke(at, data)?;
        Ok(at)
    }

    /// [`Target::write_bytes`] of `s` and a NUL.
    pub fn write_string(&mut self, tid: u32, s: &str) -> Result<u64, InjectError> {
        let mut b = s.as_bytes().to_vec();
        b.push(0);
        self.write_bytes(tid, &b)
    }

    fn save_xstate(&mut self, tid: u32) -> Result<(), InjectError> {
        let pid = self.pid;
        let th = self.thread(tid)?;
        if th.xstate.is_some() {
            return Ok(());
        }
        let mut buf = vec![0u8; 64 << 10];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        const NT_X86_XSTATE: u64 = 0x202;
        if ptrace(
            libc::PTRACE_GETREGSET,
            tid,
            NT_X86_XSTATE,
            &mut iov as *mut libc::iovec as u64,
        ) < 0
        {
            // No XSAVE: the legacy FXSAVE area (x87, SSE).
            // SAFETY: a plain C struct of integers; all zeros is valid.
            let mut fp: libc::user_fpregs_struct = unsafe { std::mem::zeroed() };
            if ptrace(
                libc::PTRACE_GETFPREGS,
                tid,
                0,
                &mut fp as *mut libc::user_fpregs_struct as u64,
            ) < 0
            {
                return Err(io_err(format!(
                    "cannot read the FPU state of thread {tid} of process {pid}"
                )));
            }
            // SAFETY: the bytes of a plain C struct we own, alive here.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    &fp as *const libc::user_fpregs_struct as *const u8,
                    std::mem::size_of::<libc::user_fpregs_struct>(),
                )
            };
            // Marked by its length (512) being different from XSAVE's.
            th.xstate = Some(bytes.to_vec());
            return Ok(());
        }
        buf.truncate(iov.iov_len);
        th.xstate = Some(buf);
        Ok(())
    }

    /// Put thread `tid`'s saved registers back.
    fn restore(&mut self, tid: u32) -> Result<(), InjectError> {
        let pid = self.pid;
        let th = self.thread(tid)?;
        if !th.touched {
            return Ok(());
        }
        let mut ok = true;
        if let Some(mut regs) = th.regs {
            ok &= ptrace(libc::PTRACE_SETREGS, tid, 0, &mut regs as *mut Regs as u64) >= 0;
        }
        if let Some(x) = th.xstate.as_mut() {
            if x.len() == std::mem::size_of::<libc::user_fpregs_struct>() {
                ok &= ptrace(libc::PTRACE_SETFPREGS, tid, 0, x.as_mut_ptr() as u64) >= 0;
            } else {
                let mut iov = libc::iovec {
                    iov_base: x.as_mut_ptr().cast(),
                    iov_len: x.len(),
                };
                ok &= ptrace(
                    libc::PTRACE_SETREGSET,
                    tid,
                    0x202,
                    &mut iov as *mut libc::iovec as u64,
                ) >= 0;
            }
        }
        if !ok {
            return Err(io_err(format!(
                "cannot put back the registers of thread {tid} of process {pid}"
            )));
        }
        th.touched = false;
        Ok(())
    }

    /// Run `func(args...)` in stopped thread `tid` and return its `rax`;
    /// the thread's registers are put back afterwards (also on error).
    pub fn call(&mut self, tid: u32, func: u64, args: &[u64]) -> Result<u64, InjectError> {
        self.call_bounded(tid, func, args, CALL_TIMEOUT)
    }

    /// [`Target::call`] with its own bound instead of [`CALL_TIMEOUT`]:
    /// for a function known to be long and not to wait for other threads.
    pub fn call_bounded(
        &mut self,
        tid: u32,
        func: u64,
        args: &[u64],
        bound: Duration,
    ) -> Result<u64, InjectError> {
        assert!(args.len() <= 6, "at most 6 integer arguments");
        let pid = self.pid;
        let saved = self.regs(tid)?;
        self.save_xstate(tid)?;
        let scratch = self.thread(tid)?.scratch;
        // The return address, 0, at an address = 8 mod 16: at the
        // function's entry the stack is as a `call` leaves it.
        let sp = (scratch & !0xf) - 8;
        self.poke(sp, &0u64.to_ne_bytes())?;
        let mut r = saved;
        r.rsp = sp;
        r.rip = func;
        r.rax = 0;
        // Not in a system call: no restart of our code as one.
        r.orig_rax = u64::MAX;
        r.eflags &= !0x400; // DF clear, as the ABI wants at a call
        for (i, &a) in args.iter().enumerate() {
            match i {
                0 => r.rdi = a,
                1 => r.rsi = a,
                2 => r.rdx = a,
                3 => r.rcx = a,
                4 => r.r8 = a,
                _ => r.r9 = a,
            }
        }
        self.thread(tid)?.touched = true;
        if ptrace(libc::PTRACE_SETREGS, tid, 0, &mut r as *mut Regs as u64) < 0 {
            let e = io_err(format!(
                "cannot set the registers of thread {tid} of process {pid}"
            ));
            let _ = self.restore(tid);
            return Err(e);
        }
        let result = self.run_call(tid, func, bound);
        match self.restore(tid) {
            Ok(()) => result,
            Err(e) => result.and(Err(e)),
        }
    }

    fn run_call(&mut self, tid: u32, func: u64, bound: Duration) -> Result<u64, InjectError> {
        let pid = self.pid;
        let deadline = Instant::now() + bound;
        let mut sig = 0;
        loop {
            if ptrace(libc::PTRACE_CONT, tid, 0, sig as u64) < 0 {
                return Err(io_err(format!(
                    "cannot resume thread {tid} of process {pid}"
                )));
            }
            sig = 0;
            match wait_stop(tid, deadline) {
                Wait::Gone => {
                    if let Ok(th) = self.thread(tid) {
                        th.stopped = false;
                    }
                    self.threads.retain(|t| t.tid != tid);
                    return Err(InjectError::Exited { pid, tid });
                }
                Wait::Timeout => {
                    ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
                    let stop = wait_stop(tid, Instant::now() + STOP_TIMEOUT);
                    if !matches!(stop, Wait::Stopped(..)) {
                        if let Ok(th) = self.thread(tid) {
                            th.stopped = false;
                        }
                    }
                    return Err(InjectError::Timeout {
                        pid,
                        tid,
                        what: format!("did not return from the call of 0x{func:x}"),
                        secs: bound.as_secs(),
                    });
                }
                Wait::Stopped(s, event) => {
                    if event != 0 {
                        continue; // an interrupt or group stop: go on
                    }
                    if s == libc::SIGSEGV || s == libc::SIGBUS || s == libc::SIGILL {
                        // SAFETY: a plain C struct of integers; all zeros is valid.
                        let mut now: Regs = unsafe { std::mem::zeroed() };
                        if ptrace(libc::PTRACE_GETREGS, tid, 0, &mut now as *mut Regs as u64) < 0 {
                            return Err(io_err(format!(
                                "cannot read the registers of thread {tid} of process {pid}"
                            )));
                        }
                        if s == libc::SIGSEGV && now.rip == 0 {
                            return Ok(now.rax);
                        }
                        return Err(InjectError::Crashed {
                            pid,
                            tid,
                            addr: func,
                            sig: s,
                            pc: now.rip,
                        });
                    }
                    // Someone else's signal: hold it for after the detach.
                    self.thread(tid)?.later.push(s);
                }
            }
        }
    }

    fn loader(&mut self) -> Result<Loader, InjectError> {
        if let Some(l) = self.loader {
            return Ok(l);
        }
        let pid = self.pid;
        let Some((libc_mod, libc_bytes)) = find_module(pid, is_libc)? else {
            return Err(InjectError::Static(pid));
        };
        let sym = |n: &str| dynsym(&libc_bytes, libc_mod.bias, n);
        let l = if let (Some(o), Some(s)) = (sym("dlopen"), sym("dlsym")) {
            Loader {
                dlopen: o,
                dlsym: s,
                dlerror: sym("dlerror"),
            }
        } else if let Some((dl, dl_bytes)) = find_module(pid, |n| n.starts_with("libdl.so"))?
            .filter(|(m, b)| {
                dynsym(b, m.bias, "dlopen").is_some() && dynsym(b, m.bias, "dlsym").is_some()
            })
        {
            let s = |n: &str| dynsym(&dl_bytes, dl.bias, n);
            Loader {
                dlopen: s("dlopen").unwrap_or(0),
                dlsym: s("dlsym").unwrap_or(0),
                dlerror: s("dlerror"),
            }
        } else if let (Some(o), Some(s)) = (sym("__libc_dlopen_mode"), sym("__libc_dlsym")) {
            Loader {
                dlopen: o,
                dlsym: s,
                dlerror: None,
            }
        } else {
            return Err(InjectError::Symbol {
                pid,
                name: "dlopen".into(),
                why: format!(
                    " in {} (nor __libc_dlopen_mode): cannot load a library into it",
                    libc_mod.path
                ),
            });
        };
        self.loader = Some(l);
        Ok(l)
    }

    /// The C library of the target (path and bias).
    pub fn libc(&self) -> Result<Module, InjectError> {
        find_module(self.pid, is_libc)?
            .map(|(m, _)| m)
            .ok_or(InjectError::Static(self.pid))
    }

    /// The runtime address of `name`, a dynamic symbol of the target's C
    /// library, as its symbol table says: for an IFUNC (`strlen`...) that
    /// is the resolver; `dlsym(0, name)` (RTLD_DEFAULT) gives the function.
    pub fn libc_symbol(&self, name: &str) -> Result<u64, InjectError> {
        let (m, b) = find_module(self.pid, is_libc)?.ok_or(InjectError::Static(self.pid))?;
        dynsym(&b, m.bias, name).ok_or_else(|| InjectError::Symbol {
            pid: self.pid,
            name: name.into(),
            why: format!(" in {}", m.path),
        })
    }

    fn dlerror_text(&mut self, tid: u32, l: Loader) -> String {
        let Some(f) = l.dlerror else {
            return "the C library gives no reason (no dlerror)".into();
        };
        match self.call(tid, f, &[]) {
            Ok(0) => "no reason given".into(),
            Ok(p) => self
                .read_string(p, 4096)
                .unwrap_or_else(|e| format!("(cannot read dlerror's text: {e})")),
            Err(e) => format!("(dlerror failed: {e})"),
        }
    }

    /// Load the shared library `path` (as the target sees it) with
    /// `RTLD_NOW`, in the main thread; its handle. Its constructors have
    /// run when this returns.
    pub fn dlopen(&mut self, path: &str) -> Result<u64, InjectError> {
        let l = self.loader()?;
        let tid = self.main_thread();
        let s = self.write_string(tid, path)?;
        let h = self.call(tid, l.dlopen, &[s, libc::RTLD_NOW as u64])?;
        if h == 0 {
            let why = self.dlerror_text(tid, l);
            return Err(InjectError::Dlopen {
                pid: self.pid,
                path: path.into(),
                why,
            });
        }
        Ok(h)
    }

    /// The address of `name` in the library `handle` [`Target::dlopen`]
    /// gave.
    pub fn dlsym(&mut self, handle: u64, name: &str) -> Result<u64, InjectError> {
        let l = self.loader()?;
        let tid = self.main_thread();
        let s = self.write_string(tid, name)?;
        let a = self.call(tid, l.dlsym, &[handle, s])?;
        if a == 0 {
            let why = self.dlerror_text(tid, l);
            return Err(InjectError::Symbol {
                pid: self.pid,
                name: name.into(),
                why: format!(": {why}"),
            });
        }
        Ok(a)
    }

    /// Put every register set back and detach (what dropping does).
    pub fn detach(self) {}
}

impl Drop for Target {
    fn drop(&mut self) {
        let pid = self.pid;
        let tids: Vec<u32> = self.threads.iter().map(|t| t.tid).collect();
        for tid in tids {
            let _ = self.restore(tid);
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut later = Vec::new();
        for th in &mut self.threads {
            if !th.stopped {
                // Seized but not seen stopped yet: detaching needs a stop.
                ptrace(libc::PTRACE_INTERRUPT, th.tid, 0, 0);
                match wait_stop(th.tid, deadline) {
                    Wait::Stopped(sig, 0) => th.signal = sig,
                    Wait::Stopped(..) => {}
                    _ => continue,
                }
            }
            ptrace(libc::PTRACE_DETACH, th.tid, 0, th.signal as u64);
            for &s in &th.later {
                later.push((th.tid, s));
            }
        }
        for (tid, sig) in later {
            // SAFETY: a plain system call on integers.
            unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    pid as libc::c_long,
                    tid as libc::c_long,
                    sig as libc::c_long,
                )
            };
        }
    }
}
