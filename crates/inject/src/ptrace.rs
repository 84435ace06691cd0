//! The [`Target`]: every thread of a process seized and interrupted
//! (`PTRACE_SEIZE`, `PTRACE_INTERRUPT`), waited for with a bound, its
//! registers and FPU/SSE/AVX state saved and put back, its memory read
//! and written through `/proc/PID/mem`, and the detach.

use crate::call::scratch_start;
use crate::error::io_err;
use crate::loader::Loader;
use crate::{InjectError, STOP_TIMEOUT};
use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

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

#[cfg(target_arch = "x86_64")]
pub(crate) type Regs = libc::user_regs_struct;

/// A stopped thread's registers ([`Target::registers`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registers {
    /// The stack pointer.
    pub sp: u64,
    /// The `fs` base: the thread pointer (TLS).
    pub fs_base: u64,
    /// Every general register.
    pub words: Vec<u64>,
}

/// One seized thread of the target.
pub(crate) struct Thread {
    pub(crate) tid: u32,
    /// In a ptrace stop (and so detachable).
    pub(crate) stopped: bool,
    /// The registers at the stop.
    pub(crate) regs: Option<Regs>,
    /// The extended state (NT_X86_XSTATE) at the stop, once read.
    pub(crate) xstate: Option<Vec<u8>>,
    /// Registers were changed: put them back before the detach.
    pub(crate) touched: bool,
    /// The signal of the signal-delivery-stop it was caught in (0 none):
    /// delivered at the detach.
    pub(crate) signal: i32,
    /// Signals that arrived during calls: raised again after the detach.
    pub(crate) later: Vec<i32>,
    /// Data written for calls lies in [scratch, regs.rsp - red zone).
    pub(crate) scratch: u64,
}

/// A process whose threads are all stopped under ptrace.
pub struct Target {
    pub(crate) pid: u32,
    pub(crate) threads: Vec<Thread>,
    mem: Option<File>,
    pub(crate) loader: Option<Loader>,
    _tracer_thread: PhantomData<*const ()>,
}

/// One ptrace request on thread `tid`; its raw result.
pub(crate) fn ptrace(req: libc::c_uint, tid: u32, addr: u64, data: u64) -> libc::c_long {
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

pub(crate) enum Wait {
    /// A ptrace stop: (signal, event).
    Stopped(i32, i32),
    /// The thread is gone.
    Gone,
    /// The deadline passed.
    Timeout,
}

/// Wait, until `deadline`, for thread `tid`'s next ptrace stop.
pub(crate) fn wait_stop(tid: u32, deadline: Instant) -> Wait {
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
            th.scratch = scratch_start(regs.rsp);
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

    pub(crate) fn thread(&mut self, tid: u32) -> Result<&mut Thread, InjectError> {
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

    /// Thread `tid`'s registers at the stop, as words (every field of
    /// `user_regs_struct`, then the 64-bit words of its vector registers:
    /// a leak scan's candidate pointers), its stack pointer and its `fs`
    /// base (the thread pointer).
    pub fn registers(&mut self, tid: u32) -> Result<Registers, InjectError> {
        let r = self.regs(tid)?;
        let mut words = vec![
            r.r15, r.r14, r.r13, r.r12, r.rbp, r.rbx, r.r11, r.r10, r.r9, r.r8, r.rax, r.rcx,
            r.rdx, r.rsi, r.rdi, r.orig_rax, r.rip, r.cs, r.eflags, r.rsp, r.ss, r.fs_base,
            r.gs_base, r.ds, r.es, r.fs, r.gs,
        ];
        self.save_xstate(tid)?;
        let x = self.thread(tid)?.xstate.as_deref().unwrap_or_default();
        words.extend(vector_words(x));
        Ok(Registers {
            sp: r.rsp,
            fs_base: r.fs_base,
            words,
        })
    }

    pub(crate) fn regs(&mut self, tid: u32) -> Result<Regs, InjectError> {
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

    /// Take signal `sig` out of thread `tid`'s blocked set
    /// (`PTRACE_GETSIGMASK`, `PTRACE_SETSIGMASK`): coverage's breakpoints
    /// kill a thread that blocks SIGTRAP. Whether it was blocked.
    pub fn unblock_signal(&mut self, tid: u32, sig: i32) -> Result<bool, InjectError> {
        self.thread(tid)?;
        let bit = 1u64 << (sig - 1);
        let mut mask = 0u64;
        let io = |what: &str| InjectError::Io {
            what: format!("{what} of thread {tid} of process {}", self.pid),
            err: io::Error::last_os_error(),
        };
        // The kernel's sigset is 8 bytes on x86-64 (addr is its size).
        if ptrace(0x420a, tid, 8, &mut mask as *mut u64 as u64) < 0 {
            return Err(io("cannot read the signal mask"));
        }
        if mask & bit == 0 {
            return Ok(false);
        }
        mask &= !bit;
        if ptrace(0x420b, tid, 8, &mut mask as *mut u64 as u64) < 0 {
            return Err(io("cannot set the signal mask"));
        }
        Ok(true)
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

    pub(crate) fn save_xstate(&mut self, tid: u32) -> Result<(), InjectError> {
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
    pub(crate) fn restore(&mut self, tid: u32) -> Result<(), InjectError> {
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

    /// Keep every thread traced and stopped, for the calling thread to
    /// follow and detach itself (nothing is put back: for a caller that
    /// changed nothing through this `Target`): each thread with the
    /// signal it had stopped with (0 none), to deliver when it resumes.
    pub fn keep(mut self) -> Vec<(u32, i32)> {
        self.mem = None;
        std::mem::take(&mut self.threads)
            .into_iter()
            .filter(|th| th.stopped)
            .map(|th| (th.tid, th.signal))
            .collect()
    }

    /// Put every register set back and detach (what dropping does).
    pub fn detach(self) {}
}

/// The 64-bit words of the vector registers in a saved FPU state (an
/// XSAVE area as PTRACE_GETREGSET gives it, or a 512-byte FXSAVE area):
/// XMM0-15 (the legacy area's bytes 160..416), and past the XSAVE header
/// (bytes 512..576) every extended component the kernel wrote (AVX's upper
/// halves, AVX-512's, and whatever else it holds: a word too many is a
/// root too many, never a block wrongly called leaked). A memcpy in
/// progress holds pointers there.
pub fn vector_words(x: &[u8]) -> impl Iterator<Item = u64> + '_ {
    let xmm = x.get(160..416).unwrap_or_default();
    let ext = x.get(576..).unwrap_or_default();
    xmm.chunks_exact(8)
        .chain(ext.chunks_exact(8))
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
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

#[cfg(test)]
mod tests {
    #[test]
    fn vector_words_are_the_xmm_and_extended_areas() {
        let mut x = vec![0u8; 1024];
        x[160..168].copy_from_slice(&0x1111u64.to_le_bytes()); // xmm0
        x[408..416].copy_from_slice(&0x2222u64.to_le_bytes()); // xmm15's high
        x[512..520].copy_from_slice(&0x3333u64.to_le_bytes()); // the header
        x[576..584].copy_from_slice(&0x4444u64.to_le_bytes()); // ymm0's upper
        x[32..40].copy_from_slice(&0x5555u64.to_le_bytes()); // st0
        let w: Vec<u64> = super::vector_words(&x).collect();
        assert_eq!(w.len(), 32 + (1024 - 576) / 8);
        for v in [0x1111, 0x2222, 0x4444] {
            assert!(w.contains(&v), "{v:#x}");
        }
        assert!(!w.contains(&0x3333) && !w.contains(&0x5555));
        // FXSAVE's 512 bytes: XMM0-15 alone.
        assert_eq!(super::vector_words(&x[..512]).count(), 32);
        assert_eq!(super::vector_words(&[]).count(), 0);
    }

    use super::*;

    #[test]
    fn refuses_itself_and_no_process() {
        let me = std::process::id();
        match Target::attach(me) {
            Err(InjectError::NotPermitted { pid, hint }) => {
                assert_eq!((pid, hint.as_str()), (me, ": it is profdev itself"))
            }
            other => panic!("{:?}", other.err()),
        }
        for pid in [0, u32::MAX] {
            assert!(matches!(
                Target::attach(pid),
                Err(InjectError::NoProcess(p)) if p == pid
            ));
        }
    }

    #[test]
    fn tasks_and_tracer_of_this_process() {
        let me = std::process::id();
        let tasks = list_tasks(me).unwrap();
        assert!(tasks.contains(&me), "{tasks:?}");
        assert!(tasks.windows(2).all(|w| w[0] < w[1]), "sorted: {tasks:?}");
        assert!(matches!(
            list_tasks(u32::MAX),
            Err(InjectError::NoProcess(_))
        ));
        assert_eq!(tracer_of(u32::MAX, u32::MAX), 0);
    }

    #[test]
    fn the_eperm_hint_is_a_clause() {
        let h = eperm_hint();
        assert!(h.starts_with(": "), "{h}");
        assert!(
            h.contains("ptrace_scope") || h.contains("CAP_SYS_PTRACE"),
            "{h}"
        );
    }
}
