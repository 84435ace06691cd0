//! The terminal's half of job control, for a command whose CMD cannot be
//! run through a [`super::Job`]: cprof's route for static programs traces
//! CMD, and the tracer's waits, not a [`super::Job`]'s, see CMD's stops.

use std::os::unix::process::CommandExt;
use std::process::Command;

/// `tcsetpgrp(fd, pgrp)` with SIGTTOU blocked in this thread, so that a
/// process in a background group may do it without being stopped.
pub(super) fn give_terminal(fd: libc::c_int, pgrp: libc::pid_t) -> bool {
    // SAFETY: plain calls on a sigset on the stack; the old mask is
    // restored before returning.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        let ok = libc::tcsetpgrp(fd, pgrp) == 0;
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        ok
    }
}

/// The first of our standard descriptors that is our controlling
/// terminal (tcgetpgrp fails on any other terminal), and whether our
/// process group is its foreground group.
pub(super) fn controlling_terminal() -> Option<(libc::c_int, bool)> {
    // SAFETY: getpgrp, isatty and tcgetpgrp only query.
    unsafe {
        let own = libc::getpgrp();
        [0, 1, 2].into_iter().find_map(|fd| {
            let fg = (libc::isatty(fd) == 1).then(|| libc::tcgetpgrp(fd))?;
            (fg > 0).then_some((fd, fg == own))
        })
    }
}

/// In CMD, between fork and exec (a `pre_exec` hook of a [`super::Job`]
/// or a [`Foreground`]): take `terminal` for CMD's group (its own, made
/// already) with SIGTTOU blocked, and give SIGTTOU its default back when
/// profdev ignores it (`ttou`). Only async-signal-safe calls.
pub(super) fn in_child(terminal: Option<libc::c_int>, ttou: bool) {
    // SAFETY: sigprocmask, tcsetpgrp, getpid and signal on a sigset on the
    // stack and integers: async-signal-safe, no allocation.
    unsafe {
        if let Some(fd) = terminal {
            let mut block: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut block);
            libc::sigaddset(&mut block, libc::SIGTTOU);
            libc::sigprocmask(libc::SIG_BLOCK, &block, &mut old);
            libc::tcsetpgrp(fd, libc::getpid());
            libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        if ttou {
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
        }
    }
}

/// CMD's process group and the terminal, as a [`super::Job`] keeps them,
/// for a CMD whose stops its caller learns of itself (a tracer):
///
/// * CMD starts in a process group of its own ([`Foreground::prepare`]),
///   made the terminal's foreground group when profdev's group is, so
///   that ^C and ^Z reach CMD alone, as without profdev; profdev ignores
///   SIGTTOU meanwhile (its own writes to the terminal, a background
///   process's then, must not stop it under `stty tostop`).
/// * CMD stopped from the terminal (^Z, SIGTTIN, SIGTTOU:
///   [`Foreground::stopped`]): profdev takes the terminal back and stops
///   itself with the same signal, so that the shell sees the job stopped;
///   `fg` continues profdev, which gives CMD the terminal and continues
///   it; `bg` after ^Z continues CMD in the background.
/// * CMD ended ([`Foreground::ended`], or the drop): profdev takes the
///   terminal back.
pub struct Foreground {
    /// Our controlling terminal, if one of our standard descriptors.
    tty: Option<libc::c_int>,
    /// The terminal, if our group was its foreground group at the start.
    terminal: Option<libc::c_int>,
    /// SIGTTOU ignored by us while CMD runs.
    ttou: bool,
    own_pgrp: libc::pid_t,
}

impl Foreground {
    /// Look at the terminal; ignore SIGTTOU while CMD may hold it.
    pub fn new() -> Self {
        let tty = controlling_terminal();
        let ttou = tty.is_some() && !super::ignored(libc::SIGTTOU);
        if ttou {
            // SAFETY: installing SIG_IGN has no preconditions; Drop
            // restores the default.
            unsafe {
                libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            }
        }
        Foreground {
            tty: tty.map(|(fd, _)| fd),
            terminal: tty.and_then(|(fd, fg)| fg.then_some(fd)),
            ttou,
            // SAFETY: getpgrp only queries.
            own_pgrp: unsafe { libc::getpgrp() },
        }
    }

    /// Make `cmd` start in its own process group, as the terminal's
    /// foreground group when we hold the terminal (before exec, in the
    /// child: its caller learns its pid only after that). Call before any
    /// other `pre_exec` hook is added.
    pub fn prepare(&self, cmd: &mut Command) {
        cmd.process_group(0);
        let (terminal, ttou) = (self.terminal, self.ttou);
        // SAFETY: the hook runs between fork and exec and makes only
        // async-signal-safe calls (sigprocmask, tcsetpgrp, getpid, signal)
        // on values copied in; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                in_child(terminal, ttou);
                Ok(())
            });
        }
    }

    /// CMD (`pid`, its group's leader) was stopped by `sig`. From the
    /// terminal (SIGTSTP, SIGTTIN, SIGTTOU): take the terminal back, stop
    /// ourselves with the same signal (SIGTSTP for SIGTTOU, which we
    /// ignore), and once continued give CMD the terminal and continue it
    /// if we hold the terminal (`fg`), or continue it in the background
    /// after ^Z (`bg`). Returns once we run again. Another stop (SIGSTOP)
    /// is CMD's alone.
    pub fn stopped(&mut self, pid: u32, sig: libc::c_int) {
        let from_terminal = matches!(sig, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU);
        let (Some(fd), true) = (self.tty, from_terminal) else {
            return;
        };
        let pgid = pid as libc::pid_t;
        // SAFETY: tcgetpgrp only queries; raise stops this process (the
        // default action: profdev catches none of these signals) and
        // returns once it is continued. The kernel discards it when our
        // process group is orphaned: then CMD is continued at once.
        unsafe {
            if libc::tcgetpgrp(fd) == self.own_pgrp {
                // We hold the terminal (`fg` after `bg`): CMD gets it.
                if give_terminal(fd, pgid) {
                    super::send(-pgid, libc::SIGCONT);
                }
                return;
            }
            if libc::tcgetpgrp(fd) == pgid {
                give_terminal(fd, self.own_pgrp);
            }
            libc::raise(if sig == libc::SIGTTOU && self.ttou {
                libc::SIGTSTP
            } else {
                sig
            });
            if libc::tcgetpgrp(fd) == self.own_pgrp {
                if give_terminal(fd, pgid) {
                    super::send(-pgid, libc::SIGCONT);
                }
            } else if sig == libc::SIGTSTP {
                super::send(-pgid, libc::SIGCONT);
            }
        }
    }

    /// CMD (`pid`) ended: take the terminal back if its group holds it.
    pub fn ended(&mut self, pid: u32) {
        if let Some(fd) = self.terminal {
            // SAFETY: tcgetpgrp only queries.
            if unsafe { libc::tcgetpgrp(fd) } == pid as libc::pid_t {
                give_terminal(fd, self.own_pgrp);
            }
        }
    }
}

impl Default for Foreground {
    fn default() -> Self {
        Foreground::new()
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        if self.ttou {
            // SAFETY: restoring the default disposition.
            unsafe {
                libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            }
        }
    }
}
