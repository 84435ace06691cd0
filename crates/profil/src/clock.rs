//! The profiling clock: a POSIX timer on the process CPU-time clock.
//!
//! # Description
//!
//! SVR4 counted in the clock interrupt. A Linux process gets the nearest
//! thing from one `timer_create(CLOCK_PROCESS_CPUTIME_ID)` timer with
//! `SIGEV_SIGNAL`/`SIGPROF`, period `1/rate` of process CPU time (user plus
//! system time of all threads, as SVR4 charged system time to the user PC).
//! The handler takes the interrupted PC from the `ucontext` and hands it to
//! the counting function given to `install` ([`crate::profil`] gives its
//! own). The clock knows nothing of buffers or cells: `profil` uses the
//! clock, never the other way round.
//!
//! Why this timer, and not the alternatives:
//!
//! * **exec.** POSIX timers are deleted by execve; interval timers
//!   (`setitimer(ITIMER_PROF)`, what glibc uses) survive it while the
//!   handler is reset, so the new image is killed by SIGPROF. A signal that
//!   was already queued when execve deleted the timer is discarded with it
//!   (measured on Linux 6.18, even with SIGPROF blocked and pending at the
//!   moment of exec; kernels before the 6.13 posix-timer rework may leave it
//!   pending: see Bugs in the crate documentation).
//! * **fork.** Neither kind of timer is inherited by the child. A
//!   `pthread_atfork` child handler creates and arms a new timer in the
//!   child, so parent and child both keep counting, each into its own copy
//!   of the buffer (fork copies memory).
//! * **threads.** A process-directed timer signal is queued for the thread
//!   that is running when the timer expires (Linux ≥ 6.4, "posix-timers:
//!   Prefer delivery of signals to the current thread"): that is the thread
//!   that consumed the CPU, and its `ucontext` holds the PC to count.
//!   Per-thread `SIGEV_THREAD_ID` timers would also attribute exactly but
//!   need a timer for every thread, hence a hook on thread creation that a
//!   library linked into arbitrary programs does not have.
//! * **missed ticks.** When the signal is still pending at the next expiry
//!   the kernel counts an overrun; the handler adds `1 + si_overrun` ticks,
//!   as SVR4's `addupc(pc, ticks)` added every elapsed tick.
//!
//! Signals that are not ours (another SIGPROF source) are passed to the
//! handler that was installed before ours, if any.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::{io, mem, ptr};

use libc::{c_int, c_void};

use crate::error::Error;

/// Default sampling rate in Hz: the SVR4 and Linux `HZ` that profil(2) and
/// glibc's emulation (`AT_CLKTCK`) tick at.
pub const DEFAULT_RATE_HZ: u32 = 100;
/// Environment variable that overrides the rate (1 to 10000 Hz), read once.
pub const RATE_ENV: &str = "PROFDEV_PROFIL_HZ";

const SI_TIMER: c_int = -2;

/// The timer's `sigev_value`: the address of this static identifies our
/// timer's signals (a second copy of the library in the process has its own).
static MAGIC: u8 = 0;

static RATE: AtomicU32 = AtomicU32::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
static PREVIOUS: OnceLock<Previous> = OnceLock::new();
/// What a tick of ours calls with the interrupted PC and the number of
/// ticks; set once by [`install`], read by the handler (an atomic load).
static ON_TICK: OnceLock<fn(usize, u16)> = OnceLock::new();
static HAVE_TIMER: AtomicBool = AtomicBool::new(false);
static TIMER: AtomicUsize = AtomicUsize::new(0);
static ARMED: AtomicBool = AtomicBool::new(false);

/// The SIGPROF action that was in place before ours.
#[derive(Clone, Copy)]
struct Previous {
    handler: usize,
    siginfo: bool,
}

/// The sampling rate in Hz: [`DEFAULT_RATE_HZ`] unless `PROFDEV_PROFIL_HZ`
/// holds a number from 1 to 10000 when profiling first starts.
pub fn rate_hz() -> u32 {
    let r = RATE.load(Ordering::Relaxed);
    if r != 0 {
        return r;
    }
    let r = std::env::var(RATE_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|hz| (1..=10_000).contains(hz))
        .unwrap_or(DEFAULT_RATE_HZ);
    RATE.store(r, Ordering::Relaxed);
    r
}

/// Install the SIGPROF handler once; every tick of ours then calls
/// `on_tick(pc, ticks)` in signal context, so `on_tick` must be
/// async-signal-safe. The first call's `on_tick` stays. Called under the
/// profil writer lock.
pub(crate) fn install(on_tick: fn(usize, u16)) -> Result<(), Error> {
    if INSTALLED.load(Ordering::Acquire) {
        return Ok(());
    }
    let _ = ON_TICK.set(on_tick);
    // SAFETY: sigaction with a zeroed, then filled, struct; the handler is
    // async-signal-safe (atomics and raw system calls only).
    unsafe {
        let mut sa: libc::sigaction = mem::zeroed();
        sa.sa_sigaction = on_sigprof as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = mem::zeroed();
        if libc::sigaction(libc::SIGPROF, &sa, &mut old) != 0 {
            return Err(Error::Sigaction(io::Error::last_os_error()));
        }
        let prev = Previous {
            handler: old.sa_sigaction,
            siginfo: old.sa_flags & libc::SA_SIGINFO != 0,
        };
        let _ = PREVIOUS.set(prev);
    }
    INSTALLED.store(true, Ordering::Release);
    Ok(())
}

/// Create the timer if this process has none, and arm it if it is not armed.
/// Called under the profil writer lock (or in the fork child handler).
pub(crate) fn arm() -> Result<(), Error> {
    if !HAVE_TIMER.load(Ordering::Acquire) {
        // SAFETY: a zeroed sigevent filled for SIGEV_SIGNAL; `t` receives the id.
        let t = unsafe {
            let mut ev: libc::sigevent = mem::zeroed();
            ev.sigev_notify = libc::SIGEV_SIGNAL;
            ev.sigev_signo = libc::SIGPROF;
            ev.sigev_value = libc::sigval {
                sival_ptr: &MAGIC as *const u8 as *mut c_void,
            };
            let mut t: libc::timer_t = ptr::null_mut();
            if libc::timer_create(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ev, &mut t) != 0 {
                return Err(Error::TimerCreate(io::Error::last_os_error()));
            }
            t
        };
        TIMER.store(t as usize, Ordering::Release);
        HAVE_TIMER.store(true, Ordering::Release);
    }
    if ARMED.load(Ordering::Acquire) {
        return Ok(());
    }
    let period_ns = 1_000_000_000 / i64::from(rate_hz());
    let ts = libc::timespec {
        tv_sec: (period_ns / 1_000_000_000) as _,
        tv_nsec: (period_ns % 1_000_000_000) as _,
    };
    let its = libc::itimerspec {
        it_interval: ts,
        it_value: ts,
    };
    // SAFETY: TIMER holds a live timer id of this process.
    if unsafe { libc::timer_settime(timer(), 0, &its, ptr::null_mut()) } != 0 {
        return Err(Error::TimerArm(io::Error::last_os_error()));
    }
    ARMED.store(true, Ordering::Release);
    Ok(())
}

/// Stop the timer (keep it for the next start). Async-signal-safe.
pub(crate) fn disarm() {
    if !HAVE_TIMER.load(Ordering::Acquire) || !ARMED.swap(false, Ordering::AcqRel) {
        return;
    }
    // SAFETY: an all-zero itimerspec disarms; TIMER holds a live timer id.
    unsafe {
        let its: libc::itimerspec = mem::zeroed();
        libc::timer_settime(timer(), 0, &its, ptr::null_mut());
    }
}

/// In a fork child: the parent's timer does not exist here.
pub(crate) fn forget_timer() {
    HAVE_TIMER.store(false, Ordering::Release);
    ARMED.store(false, Ordering::Release);
}

fn timer() -> libc::timer_t {
    TIMER.load(Ordering::Acquire) as libc::timer_t
}

/// The part of the kernel's `siginfo_t` that a POSIX timer fills
/// (`_sifields._timer`), for the 64-bit Linux layout.
#[repr(C)]
struct TimerSiginfo {
    si_signo: c_int,
    si_errno: c_int,
    si_code: c_int,
    _pad: c_int,
    si_tid: c_int,
    si_overrun: c_int,
    si_value: *mut c_void,
}

#[cfg(target_arch = "x86_64")]
unsafe fn interrupted_pc(uc: *mut c_void) -> usize {
    let uc = uc as *const libc::ucontext_t;
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] as usize }
}

#[cfg(target_arch = "aarch64")]
unsafe fn interrupted_pc(uc: *mut c_void) -> usize {
    let uc = uc as *const libc::ucontext_t;
    // SAFETY: the kernel passes a valid ucontext to an SA_SIGINFO handler.
    unsafe { (*uc).uc_mcontext.pc as usize }
}

extern "C" fn on_sigprof(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    // SAFETY: errno is thread-local; we restore it so the interrupted code
    // never sees our system calls' errors.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: for SA_SIGINFO handlers `info` points to a full siginfo_t,
    // whose first 32 bytes have the TimerSiginfo layout when si_code is SI_TIMER.
    let ti = unsafe { &*(info as *const TimerSiginfo) };
    if ti.si_code == SI_TIMER && ti.si_value == &MAGIC as *const u8 as *mut c_void {
        let ticks = 1u32.wrapping_add(ti.si_overrun.max(0) as u32);
        // SAFETY: `uc` comes from the kernel.
        let pc = unsafe { interrupted_pc(uc) };
        if let Some(on_tick) = ON_TICK.get() {
            on_tick(pc, ticks as u16);
        }
    } else if let Some(prev) = PREVIOUS.get() {
        if prev.handler != libc::SIG_DFL && prev.handler != libc::SIG_IGN {
            // SAFETY: the previous handler was installed by the program with
            // the signature its SA_SIGINFO flag promises.
            unsafe {
                if prev.siginfo {
                    let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                        mem::transmute(prev.handler);
                    f(sig, info, uc);
                } else {
                    let f: extern "C" fn(c_int) = mem::transmute(prev.handler);
                    f(sig);
                }
            }
        }
    }
    // SAFETY: see above.
    unsafe { *libc::__errno_location() = errno };
}
