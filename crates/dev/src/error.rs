//! The device error table.
//!
//! Like Plan 9's error strings, each variant is one sentence a user can
//! read. The file server converts them to errno values in one place.

/// Why a device operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DevError {
    /// Operation not allowed on this file (EACCES/EPERM).
    #[error("permission denied")]
    Perm,
    /// No such file (ENOENT).
    #[error("file does not exist")]
    NotFound,
    /// A directory operation on a file (ENOTDIR).
    #[error("not a directory")]
    NotDir,
    /// A control message that no command matches; quotes the message with
    /// Rust's escapes (`"a\"b\n"`), so no byte of it forges a log line
    /// (EINVAL).
    #[error("unknown control message {0:?}")]
    BadCtl(String),
    /// A control message with the wrong arguments (EINVAL).
    #[error("bad control message {msg:?}: {why}")]
    BadCtlArg { msg: String, why: String },
    /// A bad argument to a system call, e.g. a misaligned offset (EINVAL).
    #[error("bad arg in system call")]
    BadArg,
    /// The file cannot be used that way, e.g. writing kpdata (EBADF-like;
    /// served as EINVAL).
    #[error("inappropriate use of fd")]
    BadUseFd,
    /// The device is busy (EBUSY).
    #[error("device busy: {0}")]
    Busy(String),
    /// More than the device can hold (ENOSPC).
    #[error("no space: {0}")]
    NoSpace(String),
    /// An argument list too small or malformed in size (E2BIG).
    #[error("argument list too long or malformed: {0}")]
    TooBig(String),
    /// The device has nothing to give yet (ENXIO).
    #[error("no such device or address: {0}")]
    NoDevice(String),
    /// Invalid data (EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// No such ioctl (ENOTTY).
    #[error("inappropriate ioctl for device")]
    NoIoctl,
    /// The requester may not do this to that process, e.g. it fails the
    /// kernel's ptrace-attach rule (EPERM).
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// No such process (ESRCH).
    #[error("no such process: {0}")]
    NoProcess(u32),
    /// Sampling could not start; the message says why (e.g. a missing
    /// capability). Served as EPERM when it is a permission problem, EIO
    /// otherwise.
    #[error("{msg}")]
    Sampling { msg: String, permission: bool },
}
