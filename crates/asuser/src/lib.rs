//! Acting for a requester: let the kernel decide what another user may do.
//!
//! profdev serves files and takes control messages as root for other
//! users. Whether such a user may read a file or trace a process is the
//! kernel's question, with rules (directory search bits on the whole
//! path, ACLs, supplementary groups, dumpability, LSMs) that a copy in
//! user space gets wrong. So profdev does not answer it: it asks the
//! kernel, from a thread that holds the requester's ids.
//!
//! * [`User`]: the ids of a requester (uid, gid and supplementary groups;
//!   [`User::of_request`] takes the groups from the requesting process).
//! * [`run_as`]: run a closure on a fresh thread that took the user's ids
//!   (`setgroups`, `setresgid`, `setresuid` on that thread alone, the
//!   kernel's per-thread calls, not the C library's process-wide ones);
//!   leaving uid 0 clears every capability of the thread, and the thread
//!   checks that its effective set is empty before it runs the closure
//!   (fail closed). The thread ends with the closure: the rest of profdev
//!   keeps its own ids. For root (uid 0) the closure runs as it is.
//! * [`open_as`]: `open(2)` as the user would make it (read only,
//!   non-blocking, close-on-exec, symbolic links followed as `open`
//!   follows them): the descriptor is root's afterwards, but only a file
//!   the user could have opened is ever opened.
//! * [`may_trace`]: the kernel's ptrace access check for the user against
//!   a process (`/proc/PID/environ` opened as the user:
//!   `PTRACE_MODE_READ_FSCREDS`: the user's ids against the process's
//!   real, effective and saved ids, its dumpability, the LSMs' read rule).
//! * [`Held`]: a process held by a pidfd, with its start time: a pid that
//!   was reused, or a process that is gone, is told apart from the one
//!   that was checked.
//!
//! ```
//! use profdev_asuser::{run_as, User};
//! // Root's closure runs as it is; another user's on a thread of its own.
//! let me = rustix::process::getuid().as_raw();
//! if me != 0 {
//!     let r = run_as(&User { uid: me, gid: 0, groups: vec![] }, || 1 + 1);
//!     assert!(r.is_err() || r.unwrap() == 2);
//! }
//! ```
#![forbid(unsafe_code)]

use rustix::fd::{AsFd, OwnedFd};
use rustix::process::{Gid, Pid, Uid};
use std::fs::File;
use std::io;
use std::path::Path;

/// The ids a requester acts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The (file-system) user id.
    pub uid: u32,
    /// The (file-system) group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

impl User {
    /// The requester of a request that carried `uid` and `gid` (a FUSE
    /// request's, which are the caller's file-system ids), made by
    /// process `pid` (0: unknown): the supplementary groups are that
    /// process's (`Groups:` of /proc/PID/status; none when unknown or
    /// gone, which can only take rights away).
    pub fn of_request(uid: u32, gid: u32, pid: u32) -> User {
        let groups = if pid == 0 {
            Vec::new()
        } else {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                        g.split_whitespace()
                            .filter_map(|w| w.parse().ok())
                            .collect()
                    })
                })
                .unwrap_or_default()
        };
        User { uid, gid, groups }
    }

    /// Is this root (who needs no thread of its own)?
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// Why a thread could not take a user's ids.
#[derive(Debug, thiserror::Error)]
pub enum AsUserError {
    /// A set*id call failed (profdev is not root, or lacks CAP_SETUID /
    /// CAP_SETGID).
    #[error("profdev cannot act as uid {uid} (it needs to run as root, or with CAP_SETUID and CAP_SETGID): {source}")]
    Ids {
        /// The user.
        uid: u32,
        /// The failed call's error.
        #[source]
        source: io::Error,
    },
    /// The thread kept a capability after taking the ids (securebits
    /// keep them): refused rather than acting with more than the user.
    #[error(
        "a thread acting as uid {0} kept capabilities (check the process's securebits); refused"
    )]
    KeptCapabilities(u32),
}

/// Run `f` with `user`'s ids and no capability: on a fresh thread that
/// takes them (per thread), or here for root and for a process that
/// already is the user ([`is_already`]). Errors if the thread
/// cannot take the ids or would keep a capability; `f` then does not run.
pub fn run_as<R: Send>(user: &User, f: impl FnOnce() -> R + Send) -> Result<R, AsUserError> {
    if user.is_root() || is_already(user) {
        return Ok(f());
    }
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .name(format!("profdev-as-{}", user.uid))
            .spawn_scoped(s, move || {
                take_ids(user)?;
                Ok(f())
            })
            .map_err(|e| AsUserError::Ids {
                uid: user.uid,
                source: e,
            })?
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Whether this process already is `user` and nothing more: its real and
/// effective uid and gid are the user's and it holds no capability (profdev
/// run by that user, `mprof -p` or `cprof -p` of their own process). It
/// has no power of its own to lend, so `f` runs here: taking the ids again
/// would need CAP_SETUID for nothing.
fn is_already(user: &User) -> bool {
    use rustix::process::{getegid, geteuid, getgid, getuid};
    let ids = getuid().as_raw() == user.uid
        && geteuid().as_raw() == user.uid
        && getgid().as_raw() == user.gid
        && getegid().as_raw() == user.gid;
    ids && rustix::thread::capabilities(None)
        .is_ok_and(|c| c.effective.is_empty() && c.permitted.is_empty())
}

/// Take `user`'s ids on this thread, for good, and check that no
/// capability is left.
fn take_ids(user: &User) -> Result<(), AsUserError> {
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    let err = |source: rustix::io::Errno| AsUserError::Ids {
        uid: user.uid,
        source: source.into(),
    };
    let groups: Vec<Gid> = user.groups.iter().map(|&g| Gid::from_raw(g)).collect();
    set_thread_groups(&groups).map_err(err)?;
    let g = Gid::from_raw(user.gid);
    set_thread_res_gid(g, g, g).map_err(err)?;
    let u = Uid::from_raw(user.uid);
    set_thread_res_uid(u, u, u).map_err(err)?;
    let caps = rustix::thread::capabilities(None).map_err(err)?;
    if !caps.effective.is_empty() || !caps.permitted.is_empty() {
        return Err(AsUserError::KeptCapabilities(user.uid));
    }
    Ok(())
}

/// Open `path` for reading as `user` would (`O_RDONLY|O_NONBLOCK|
/// O_CLOEXEC`, links followed as `open(2)` follows them). The outer
/// error: the ids could not be taken; the inner one: the kernel's answer.
pub fn open_as(user: &User, path: &Path) -> Result<io::Result<File>, AsUserError> {
    use std::os::unix::fs::OpenOptionsExt;
    run_as(user, || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
    })
}

/// The kernel's answer to "may `user` inspect process `pid` as a tracer
/// would": `/proc/PID/environ` opened as the user, which the kernel
/// grants only under `ptrace_may_access(PTRACE_MODE_READ_FSCREDS)`: the
/// user's ids equal to the process's real, effective and saved ids (uids
/// and gids), the process dumpable, and the LSMs agreeing. Yama's attach
/// scope is not part of it (it governs attaching only): the caller
/// applies it. Root may (its closure is not run on a thread of its own).
pub fn may_trace(user: &User, pid: u32) -> Result<io::Result<()>, AsUserError> {
    if user.is_root() {
        return Ok(Ok(()));
    }
    open_as(user, Path::new(&format!("/proc/{pid}/environ"))).map(|r| r.map(drop))
}

/// A process held from the moment it was checked: its pidfd (which
/// refers to that process, never to a later one with the same pid) and
/// its start time.
#[derive(Debug)]
pub struct Held {
    pid: u32,
    start: u64,
    pidfd: OwnedFd,
}

impl Held {
    /// Hold process `pid`: ESRCH's `io::ErrorKind::NotFound` if it does
    /// not exist.
    pub fn new(pid: u32) -> io::Result<Held> {
        let p = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let pidfd =
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).map_err(|e| {
                if e == rustix::io::Errno::SRCH {
                    io::Error::from(io::ErrorKind::NotFound)
                } else {
                    e.into()
                }
            })?;
        let start = start_time(pid).ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let held = Held { pid, start, pidfd };
        // The pid may have been reused between the open and the read.
        if !held.alive() {
            return Err(io::ErrorKind::NotFound.into());
        }
        Ok(held)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Its start time (field 22 of /proc/PID/stat, clock ticks since boot).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Is it still the process that was held, and not yet exited (its
    /// pidfd not readable, and /proc/PID shows the same start time)?
    /// A zombie has exited.
    pub fn alive(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
        let exited = match poll(&mut fds, Some(&rustix::event::Timespec::default())) {
            Ok(n) => n > 0,
            Err(_) => true,
        };
        !exited && start_time(self.pid) == Some(self.start)
    }

    /// The pidfd.
    pub fn pidfd(&self) -> impl AsFd + '_ {
        self.pidfd.as_fd()
    }
}

/// Field 22 (start time) of /proc/PID/stat.
pub fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn root() -> bool {
        profdev_testkit::privileged(
            "acting as another user",
            if rustix::process::geteuid().is_root() {
                Ok(())
            } else {
                Err("needs root".into())
            },
        )
    }

    fn nobody() -> User {
        User {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        }
    }

    #[test]
    fn the_kernel_decides_what_a_user_opens() {
        if !root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let f = private.join("prog");
        std::fs::write(&f, b"bytes").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // The file's own bits say yes; the directory says no.
        let e = open_as(&nobody(), &f).unwrap().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        // Root opens it; so does nobody once the directory lets it search.
        assert!(open_as(
            &User {
                uid: 0,
                gid: 0,
                groups: vec![]
            },
            &f
        )
        .unwrap()
        .is_ok());
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert!(open_as(&nobody(), &f).unwrap().is_ok());
        // A supplementary group counts, as the kernel counts it.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o740)).unwrap();
        rustix::fs::chown(&f, None, Some(Gid::from_raw(4242))).unwrap();
        assert!(open_as(&nobody(), &f).unwrap().is_err());
        let member = User {
            groups: vec![4242],
            ..nobody()
        };
        assert!(open_as(&member, &f).unwrap().is_ok());
        // This thread kept its own ids.
        assert!(rustix::process::geteuid().is_root());
        assert!(rustix::thread::capabilities(None)
            .unwrap()
            .effective
            .contains(rustix::thread::CapabilitySet::SYS_PTRACE));
    }

    #[test]
    fn the_closure_runs_without_capabilities() {
        if !root() {
            return;
        }
        let caps = run_as(&nobody(), || rustix::thread::capabilities(None).unwrap()).unwrap();
        assert!(caps.effective.is_empty() && caps.permitted.is_empty());
        let ids = run_as(&nobody(), || {
            std::fs::read_to_string("/proc/thread-self/status").unwrap()
        })
        .unwrap();
        assert!(ids.contains("Uid:\t65534\t65534\t65534\t65534"), "{ids}");
    }

    #[test]
    fn may_trace_is_the_kernels_rule() {
        if !root() {
            return;
        }
        // Root's own process: not nobody's.
        let me = std::process::id();
        assert!(may_trace(&nobody(), me).unwrap().is_err());
        // A process of nobody's, dumpable: yes.
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        let pid = child.id();
        profdev_testkit::wait_until(
            "the child runs as nobody",
            std::time::Duration::from_secs(10),
            || {
                std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .is_ok_and(|s| s.contains("Uid:\t65534\t65534\t65534\t65534"))
            },
        );
        assert!(may_trace(&nobody(), pid).unwrap().is_ok());
        assert!(may_trace(
            &User {
                uid: 65533,
                gid: 65534,
                groups: vec![]
            },
            pid
        )
        .unwrap()
        .is_err());
        child.kill().unwrap();
        child.wait().unwrap();
    }

    use std::os::unix::process::CommandExt;

    #[test]
    fn a_held_process_is_told_from_a_gone_one() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let held = Held::new(child.id()).unwrap();
        assert!(held.alive());
        assert_eq!(Some(held.start()), start_time(child.id()));
        child.kill().unwrap();
        // A zombie has exited already.
        profdev_testkit::wait_until(
            "the pidfd says exited",
            std::time::Duration::from_secs(10),
            || !held.alive(),
        );
        child.wait().unwrap();
        assert!(!held.alive());
        assert!(Held::new(u32::MAX - 1).is_err());
    }
}
