//! A running, statically linked process counted through ptrace
//! (`profdev cprof -p PID`), at the launch route's cost instead of the
//! uprobes' (about 0.2 to 16 us a block).
//!
//! The caller seizes every thread of the process (`PTRACE_SEIZE`, then
//! `PTRACE_INTERRUPT`: `profdev_inject::Target`, which also checks the
//! requester's right again once all are stopped) on the thread that will
//! follow the run, and hands them over. [`attach_seized`] then, while
//! every thread waits:
//!
//! * sets the options that follow new threads, processes and exits;
//! * maps the `syscall; int3` stub page (from a copy of those bytes
//!   written where the main thread stopped, put back after);
//! * plans the executable, maps its trampolines, writes the patches, as
//!   the launch route does; a patch over an instruction a thread stopped
//!   in (or, in a system call, the one a restart runs again) is skipped,
//!   and its block reported uncounted, as the runtime's attach does;
//! * gives each thread a counter array of its own (its GS base).
//!
//! [`Seized::follow`] follows the run as the launch route does (new
//! threads get arrays, forks count, breakpoints are taken, exits are
//! read), honouring group stops (`PTRACE_LISTEN`: ^Z and SIGSTOP stop
//! it, SIGCONT goes on), until the process ends or [`Live::end`] is
//! asked. That wakes the follower with a signal to its thread, whose
//! handler interrupts one of the process's threads (`PTRACE_INTERRUPT`,
//! heard even while the process is stopped by ^Z). Then it lets go: every
//! thread is stopped, their counts read, each breakpoint's byte put back
//! (nobody would take its trap), and every thread detached with the
//! signal it had stopped with (a process stopped by ^Z stays stopped). The jumps
//! into the trampolines stay, counting into arrays nobody reads, as the
//! runtime's patches stay after a dynamic process's attach.

use super::*;
use std::sync::atomic::{AtomicI32, Ordering};

/// An attached process, set up and waiting to be followed
/// ([`Seized::follow`], on the thread that seized it).
pub struct Seized {
    tracer: Tracer,
    server: Server,
}

/// Count the running, statically linked process `pid`, whose every
/// thread (`held`) the calling thread has seized and stopped. Planned by
/// `server` (counting mode); `live` is for the caller's end
/// ([`Live::end`]). Err (one sentence) when it could not be set up; the
/// threads are still stopped then, for the caller to let go (the
/// trampolines may be mapped, unused; every patch written is put back).
pub fn attach_seized(
    pid: u32,
    held: &[u32],
    server: Server,
    live: &Live,
) -> Result<Seized, String> {
    let opts = libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_TRACEEXEC
        | libc::PTRACE_O_TRACEEXIT;
    let mut stopped = Vec::with_capacity(held.len());
    for &tid in held {
        if ptrace(libc::PTRACE_SETOPTIONS, tid, 0, opts as u64) != 0 {
            return Err(format!("ptrace: {}", io::Error::last_os_error()));
        }
        let r = regs(tid).map_err(|e| format!("cannot read its registers: {e}"))?;
        // In a system call (orig_rax set): a restart runs its
        // instruction again, 2 bytes back.
        stopped.push((r.rip, (r.orig_rax as i64) >= 0));
    }
    let main = held
        .iter()
        .copied()
        .find(|&t| t == pid)
        .or(held.first().copied())
        .ok_or("no thread to run in")?;
    let stub = make_stub(pid, main)?;
    let mut tracer = Tracer::patched(pid, stub, &server, &stopped, live.clone())?;
    // Every thread needs an array before it runs the patched code (its
    // GS base, else it faults): its own, else the first one's, else the
    // patches are taken back.
    let mut first = None;
    for &tid in held {
        tracer.known.insert(tid);
        if tracer.own_array(tid) {
            first = first.or(live.lock().arrays.get(&tid).map(|&(_, a)| a));
            continue;
        }
        let shared = first.is_some_and(|a| {
            regs(tid).is_ok_and(|mut r| {
                r.gs_base = a;
                set_regs(tid, &r).is_ok()
            })
        });
        if !shared {
            for (addr, was, _) in &tracer.originals {
                let _ = poke(pid, *addr, was);
            }
            live.lock().procs.clear();
            return Err("cannot map a counter array in it".into());
        }
        tracer.sharing += 1;
    }
    Ok(Seized { tracer, server })
}

impl Seized {
    /// Let every thread run (`pending`: a thread, the signal it had
    /// stopped with, delivered now) and follow them until the process has
    /// ended or [`Live::end`] is asked (then let go, the process running
    /// on, or staying stopped if it was); the counts.
    pub fn follow(self, pending: &[(u32, i32)]) -> TracedRun {
        let Seized { mut tracer, server } = self;
        wake_handler();
        let ending = {
            let mut s = tracer.live.lock();
            // SAFETY: pthread_self has no preconditions.
            s.follower = Some(unsafe { libc::pthread_self() });
            s.ending
        };
        let threads: Vec<u32> = tracer.known.iter().copied().collect();
        for tid in threads {
            let sig = pending.iter().find(|p| p.0 == tid).map_or(0, |p| p.1);
            resume(tid, sig);
        }
        if ending {
            // Asked before this thread was known to [`Live::end`].
            wake(0);
        }
        let status = tracer.follow(None);
        tracer.live.lock().follower = None;
        WAKE_TID.store(0, Ordering::SeqCst);
        tracer.finish(status, server)
    }
}

/// The thread [`wake`] interrupts: one of the attached run's.
static WAKE_TID: AtomicI32 = AtomicI32::new(0);
/// The signal that wakes the follower (sent to that thread alone; its
/// default action is to ignore it).
const WAKE_SIGNAL: i32 = libc::SIGURG;

/// [`WAKE_SIGNAL`]'s handler, on the follower (the tracer: only it may
/// ptrace its tracees): interrupt [`WAKE_TID`]. Its stop is an event for
/// the follower's `waitpid` whatever the thread was doing, running or
/// held in a group stop (`PTRACE_LISTEN`, where a new signal would not
/// be reported); the follower sees the end asked after that event.
extern "C" fn wake(_: libc::c_int) {
    let tid = WAKE_TID.load(Ordering::SeqCst);
    if tid > 0 {
        // SAFETY: ptrace and errno's location are async-signal-safe;
        // errno is put back for the code the signal interrupted.
        unsafe {
            let errno = *libc::__errno_location();
            libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
            *libc::__errno_location() = errno;
        }
    }
}

/// Install [`wake`] (once per process; `SA_RESTART`: the follower's
/// `waitpid` goes on and returns the interrupt's stop).
fn wake_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is valid; the handler only calls
        // async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = wake as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(WAKE_SIGNAL, &sa, std::ptr::null_mut());
        }
    });
}

impl Live {
    /// End an attached run: wake its follower (a signal to that thread,
    /// whose handler interrupts one of the process's threads: [`wake`]),
    /// which lets the process go. Nothing when it has ended already.
    pub fn end(&self) {
        let mut s = self.lock();
        if s.ending || s.procs.is_empty() {
            return;
        }
        s.ending = true;
        let kick = s
            .arrays
            .iter()
            .map(|(&tid, &(tg, _))| (tid, tg))
            .min_by_key(|&(tid, tg)| (tid != tg, tid))
            .map(|(tid, _)| tid)
            .or(s.procs.iter().copied().min());
        WAKE_TID.store(kick.map_or(0, |t| t as i32), Ordering::SeqCst);
        if let Some(f) = s.follower {
            // SAFETY: the follower clears `follower` under this lock
            // before it ends, so the thread is alive.
            unsafe {
                libc::pthread_kill(f, WAKE_SIGNAL);
            }
        }
    }
}

impl Tracer {
    /// An attached run's end: stop every thread (each interrupted, one
    /// held in a group stop included), read the counts, put the
    /// breakpoints' bytes back and detach each thread with the signal it
    /// stopped with (one in a group stop stays stopped).
    pub(super) fn let_go(&mut self) {
        // Who is stopped already: new threads not yet set up.
        let mut stopped: HashMap<u32, i32> = self.early.drain().map(|t| (t, 0)).collect();
        let mut waiting: HashSet<u32> = HashSet::new();
        for &t in &self.known {
            if !stopped.contains_key(&t) && ptrace(libc::PTRACE_INTERRUPT, t, 0, 0) == 0 {
                waiting.insert(t);
            }
        }
        while !waiting.is_empty() {
            let Some((t, st)) = wait(-1) else { break };
            if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                waiting.remove(&t);
                let mut s = self.live.lock();
                s.take(t, false);
                s.procs.remove(&t);
                continue;
            }
            if !libc::WIFSTOPPED(st) {
                continue;
            }
            let sig = libc::WSTOPSIG(st);
            match st >> 16 {
                libc::PTRACE_EVENT_EXIT => {
                    // Its counts now; it goes on to exit.
                    self.live.lock().take(t, true);
                    waiting.remove(&t);
                    resume(t, 0);
                }
                libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                    let new = event_msg(t);
                    if !stopped.contains_key(&new) {
                        waiting.insert(new);
                    }
                    waiting.remove(&t);
                    stopped.insert(t, 0);
                }
                libc::PTRACE_EVENT_EXEC => {
                    waiting.remove(&t);
                    self.live.lock().arrays.remove(&t);
                    self.execs += 1;
                    ptrace(libc::PTRACE_DETACH, t, 0, 0);
                }
                0 if sig == libc::SIGTRAP && self.trap_to_trampoline(t) => {
                    waiting.remove(&t);
                    stopped.insert(t, 0);
                }
                0 => {
                    // Delivered when it is let go.
                    waiting.remove(&t);
                    stopped.insert(t, sig);
                }
                _ => {
                    waiting.remove(&t);
                    stopped.entry(t).or_insert(0);
                }
            }
        }
        let procs: Vec<u32> = {
            let mut s = self.live.lock();
            let tids: Vec<u32> = s.arrays.keys().copied().collect();
            for t in tids {
                s.take(t, false);
            }
            s.procs.iter().copied().collect()
        };
        for p in procs {
            for (addr, was, _) in self.originals.iter().filter(|o| o.2) {
                let _ = poke(p, *addr, was);
            }
        }
        for (t, sig) in stopped {
            ptrace(libc::PTRACE_DETACH, t, 0, sig as u64);
        }
        self.live.lock().procs.clear();
    }

    /// Thread `t`, stopped by a SIGTRAP: if it is one of the module's
    /// breakpoints, counted and moved on to its trampoline (not resumed);
    /// if one of its one-shot probes (hit mode), its block marked, the
    /// byte put back in the thread's process (another thread there taking
    /// it at once finds it back, and is marked again: a mark is ran or
    /// not), and sent back to run it.
    pub(super) fn trap_to_trampoline(&mut self, t: u32) -> bool {
        let Ok(mut r) = regs(t) else { return false };
        let at = r.rip.wrapping_sub(1);
        if let Some(&(block, orig)) = self.onces.get(&at) {
            if poke(t, at, &[orig]).is_err() {
                return false;
            }
            if let Some(c) = self.live.lock().totals.get_mut(block as usize) {
                *c = c.saturating_add(1);
            }
            r.rip = at;
            return set_regs(t, &r).is_ok();
        }
        let Some(&to) = self.traps.get(&at) else {
            return false;
        };
        r.rip = to;
        let ok = set_regs(t, &r).is_ok();
        self.taken += u64::from(ok);
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::super::busy_patches;
    use crate::encode::{Patch, PATCH_JMP, PATCH_REL8};

    #[test]
    fn a_hop_in_live_code_is_not_written() {
        // A host block at 0x100 (its jump, 5 bytes), a hop's jump in its
        // dead bytes at 0x108, and a short block at 0x180 jumping there.
        let p = |addr, entry, kind, len| Patch {
            addr,
            entry,
            kind,
            len,
        };
        let patches = [
            p(0x100, 0x9000, PATCH_JMP, 5),
            p(0x108, 0x9100, PATCH_JMP, 5),
            p(0x180, 0x108, PATCH_REL8, 2),
        ];
        let busy = |stopped: &[(u64, bool)]| busy_patches(&patches, stopped);
        assert_eq!(busy(&[]), [false; 3]);
        // At the host's start (it will take its jump), or past the hop.
        assert_eq!(busy(&[(0x100, false)]), [false; 3]);
        assert_eq!(busy(&[(0x110, false)]), [false; 3]);
        // Inside the host's jump: nothing of the host or its hop.
        assert_eq!(busy(&[(0x103, false)]), [true; 3]);
        // Past the host's jump but before the hop's end: the hop's bytes
        // are code the thread runs.
        assert_eq!(busy(&[(0x106, false)]), [false, true, true]);
        assert_eq!(busy(&[(0x10c, false)]), [false, true, true]);
        // After a system call ending at 0x10a: a restart runs 0x108 again.
        assert_eq!(busy(&[(0x10a, true)]), [false, true, true]);
        // In the short block's rel8: that alone.
        assert_eq!(busy(&[(0x181, false)]), [false, false, true]);
    }
}
