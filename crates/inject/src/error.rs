//! [`InjectError`]: why attaching, calling or loading failed, in one
//! sentence each, and the errno a device's write reports for it.

use std::io;

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

/// [`InjectError::Io`] of `what` and the last OS error.
pub(crate) fn io_err(what: impl Into<String>) -> InjectError {
    InjectError::Io {
        what: what.into(),
        err: io::Error::last_os_error(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos() {
        let io = |e: io::Error| InjectError::Io {
            what: "x".into(),
            err: e,
        };
        let cases = [
            (InjectError::NoProcess(1), libc::ESRCH),
            (InjectError::Exited { pid: 1, tid: 2 }, libc::ESRCH),
            (InjectError::NoThread { pid: 1, tid: 2 }, libc::ESRCH),
            (
                InjectError::NotPermitted {
                    pid: 1,
                    hint: String::new(),
                },
                libc::EPERM,
            ),
            (
                InjectError::AlreadyTraced { pid: 1, tracer: 2 },
                libc::EBUSY,
            ),
            (InjectError::Static(1), libc::ENOEXEC),
            (
                InjectError::Timeout {
                    pid: 1,
                    tid: 1,
                    what: "did not stop".into(),
                    secs: 5,
                },
                libc::ETIMEDOUT,
            ),
            (InjectError::Unsupported, libc::ENOSYS),
            (io(io::Error::from_raw_os_error(libc::ENOSPC)), libc::ENOSPC),
            (io(io::Error::other("no errno")), libc::EIO),
            (
                InjectError::Dlopen {
                    pid: 1,
                    path: "/l.so".into(),
                    why: "w".into(),
                },
                libc::EIO,
            ),
            (
                InjectError::Symbol {
                    pid: 1,
                    name: "f".into(),
                    why: String::new(),
                },
                libc::EIO,
            ),
            (
                InjectError::Crashed {
                    pid: 1,
                    tid: 1,
                    addr: 0,
                    sig: libc::SIGSEGV,
                    pc: 0,
                },
                libc::EIO,
            ),
        ];
        for (e, errno) in cases {
            assert_eq!(e.errno(), errno, "{e}");
        }
    }

    #[test]
    fn sentences() {
        let e = InjectError::Timeout {
            pid: 7,
            tid: 8,
            what: "did not return from the call of 0x1000".into(),
            secs: 20,
        };
        assert_eq!(
            e.to_string(),
            "thread 8 of process 7 did not return from the call of 0x1000 within 20 s"
        );
        let e = InjectError::Crashed {
            pid: 7,
            tid: 8,
            addr: 0x10,
            sig: 11,
            pc: 0x20,
        };
        assert_eq!(
            e.to_string(),
            "the call of 0x10 in thread 8 of process 7 stopped with signal 11 at pc 0x20; its \
             registers were put back"
        );
        assert_eq!(
            InjectError::AlreadyTraced { pid: 7, tracer: 9 }.to_string(),
            "process 7 is already traced by process 9 (a debugger or another tracer): detach \
             that first"
        );
    }
}
