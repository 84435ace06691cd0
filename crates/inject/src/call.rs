//! A function call in a stopped thread (SysV x86-64): the data written
//! on its stack for the call, the registers set for it, the return to
//! address 0 whose fault ends it, and the bound on how long it runs.

use crate::error::io_err;
use crate::ptrace::{ptrace, wait_stop, Regs, Wait};
use crate::{InjectError, Target, CALL_TIMEOUT, STOP_TIMEOUT};
use std::io;
use std::time::{Duration, Instant};

/// How much stack the data written for calls may take.
pub(crate) const MAX_SCRATCH: u64 = 64 << 10;
/// The red zone below a thread's stack pointer (SysV x86-64).
pub(crate) const RED_ZONE: u64 = 128;

/// The first scratch address of a thread stopped with stack pointer
/// `rsp`: below the red zone, 16-byte aligned.
pub(crate) fn scratch_start(rsp: u64) -> u64 {
    (rsp - RED_ZONE) & !0xf
}

/// Where `len` bytes of data go below the scratch address `scratch` of a
/// thread stopped with stack pointer `rsp`: 16-byte aligned, or None when
/// the data would reach more than [`MAX_SCRATCH`] below `rsp`.
pub(crate) fn scratch_slot(rsp: u64, scratch: u64, len: usize) -> Option<u64> {
    let at = scratch.wrapping_sub(len as u64) & !0xf;
    (rsp.wrapping_sub(at) <= MAX_SCRATCH).then_some(at)
}

/// The stack pointer at the called function's entry, below the data at
/// `scratch`: the return address, 0, at an address = 8 mod 16, so the
/// stack is as a `call` leaves it.
pub(crate) fn call_sp(scratch: u64) -> u64 {
    (scratch & !0xf) - 8
}

impl Target {
    /// Put `data` on thread `tid`'s stack below the red zone (16-byte
    /// aligned) for the calls that follow; its address. It stays until
    /// the detach.
    pub fn write_bytes(&mut self, tid: u32, data: &[u8]) -> Result<u64, InjectError> {
        let pid = self.pid;
        let th = self.thread(tid)?;
        let rsp = th.regs.map(|r| r.rsp).unwrap_or(0);
        let Some(at) = scratch_slot(rsp, th.scratch, data.len()) else {
            return Err(InjectError::Io {
                what: format!(
                    "cannot put {} more bytes on the stack of thread {tid} of process {pid}",
                    data.len()
                ),
                err: io::Error::from_raw_os_error(libc::ENOSPC),
            });
        };
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
        let sp = call_sp(scratch);
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
                    if s == libc::SIGTRAP {
                        // A breakpoint the call itself reached (coverage's
                        // runtime patching the C library it then calls):
                        // delivered now, to the runtime's handler, which
                        // resumes it; held, the thread would go on past
                        // the `int3`, inside an instruction.
                        sig = s;
                        continue;
                    }
                    // Someone else's signal: hold it for after the detach.
                    self.thread(tid)?.later.push(s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::on_tracer_thread;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    #[test]
    fn stack_arithmetic() {
        let rsp = 0x7ffc_0000_1238;
        let s0 = scratch_start(rsp);
        assert_eq!(s0 % 16, 0);
        assert!(s0 <= rsp - RED_ZONE && rsp - RED_ZONE - s0 < 16);
        // Data goes below, aligned, and the call's stack below that with
        // its return address at 8 mod 16.
        let a = scratch_slot(rsp, s0, 5).unwrap();
        assert_eq!(a % 16, 0);
        assert!(a + 5 <= s0 && s0 - a < 5 + 16);
        let sp = call_sp(a);
        assert_eq!(sp % 16, 8);
        assert!(sp + 8 <= a);
        assert_eq!(call_sp(s0), s0 - 8);
        // The bound: up to MAX_SCRATCH below rsp, not one byte more.
        let last = rsp & !0xf;
        let floor = (rsp - MAX_SCRATCH + 15) & !0xf;
        let n = (last - floor) as usize;
        assert_eq!(scratch_slot(rsp, last, n), Some(floor));
        assert_eq!(scratch_slot(rsp, last, n + 1), None);
        assert_eq!(scratch_slot(rsp, s0, MAX_SCRATCH as usize), None);
    }

    /// ptrace of our own children: allowed unless Yama forbids every
    /// attach.
    fn may_ptrace_children() -> bool {
        let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope");
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        match scope.as_deref().map(str::trim) {
            Ok("3") => false,
            Ok("2") => root,
            _ => true,
        }
    }

    /// `cat`, blocked reading its standard input, has getpid and atoi
    /// called in it and runs on: the read it was in restarts and returns
    /// what is written after the detach.
    #[test]
    fn calls_in_a_child_that_then_runs_on() {
        if !may_ptrace_children() {
            eprintln!("skipped: kernel.yama.ptrace_scope forbids attaching");
            return;
        }
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cat runs");
        let mut input = child.stdin.take().unwrap();
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        // Echoed: cat runs, its C library loaded, and goes on to read.
        input.write_all(b"before\n").unwrap();
        output.read_line(&mut line).unwrap();
        assert_eq!(line, "before\n");
        let pid = child.id();
        let got = on_tracer_thread(|| -> Result<_, InjectError> {
            let mut t = Target::attach(pid)?;
            let tid = t.main_thread();
            let pc = t.pc(tid)?;
            let getpid = t.libc_symbol("getpid")?;
            let atoi = t.libc_symbol("atoi")?;
            let own = t.call(tid, getpid, &[])?;
            let s = t.write_string(tid, "-1234")?;
            let n = t.call(tid, atoi, &[s])? as u32 as i32;
            let text = t.read_string(s, 100)?;
            // The registers are put back after each call.
            assert_eq!(t.pc(tid)?, pc);
            Ok((own, n, text))
        })
        .expect("attach and call");
        assert_eq!(got, (u64::from(pid), -1234, "-1234".to_string()));
        line.clear();
        input.write_all(b"after\n").unwrap();
        output.read_line(&mut line).unwrap();
        assert_eq!(line, "after\n");
        drop(input);
        assert!(child.wait().unwrap().success());
    }
}
