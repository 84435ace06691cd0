//! Device errors as errno values: the one place they are converted.

use profdev_dev::DevError;

/// The errno a failed device operation returns to the caller.
///
/// | error | errno |
/// |---|---|
/// | `Perm` | EACCES |
/// | `NotFound` | ENOENT |
/// | `NotDir` | ENOTDIR |
/// | `BadCtl`, `BadCtlArg`, `BadArg`, `BadUseFd`, `Invalid` | EINVAL |
/// | `Busy` | EBUSY |
/// | `NoSpace` | ENOSPC |
/// | `TooBig` | E2BIG |
/// | `NoDevice` | ENXIO |
/// | `NoIoctl` | ENOTTY |
/// | `NotPermitted` (e.g. the ptrace-attach rule) | EPERM |
/// | `NoProcess` | ESRCH |
/// | `Sampling` (a missing privilege) | EPERM |
/// | `Sampling` (anything else) | EIO |
///
/// The match is exhaustive on purpose: a new `DevError` variant does not
/// compile until it has an errno here.
pub fn errno(e: &DevError) -> i32 {
    match e {
        DevError::Perm => libc::EACCES,
        DevError::NotFound => libc::ENOENT,
        DevError::NotDir => libc::ENOTDIR,
        DevError::BadCtl(_)
        | DevError::BadCtlArg { .. }
        | DevError::BadArg
        | DevError::BadUseFd
        | DevError::Invalid(_) => libc::EINVAL,
        DevError::Busy(_) => libc::EBUSY,
        DevError::NoSpace(_) => libc::ENOSPC,
        DevError::TooBig(_) => libc::E2BIG,
        DevError::NoDevice(_) => libc::ENXIO,
        DevError::NoIoctl => libc::ENOTTY,
        DevError::NotPermitted(_) => libc::EPERM,
        DevError::NoProcess(_) => libc::ESRCH,
        DevError::Sampling {
            permission: true, ..
        } => libc::EPERM,
        DevError::Sampling {
            permission: false, ..
        } => libc::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let cases = [
            (DevError::Perm, libc::EACCES),
            (DevError::NotFound, libc::ENOENT),
            (DevError::BadCtl("stopwatch".into()), libc::EINVAL),
            (DevError::BadUseFd, libc::EINVAL),
            (DevError::NoIoctl, libc::ENOTTY),
            (
                DevError::Sampling {
                    msg: "needs CAP_PERFMON".into(),
                    permission: true,
                },
                libc::EPERM,
            ),
            (
                DevError::Sampling {
                    msg: "mmap failed".into(),
                    permission: false,
                },
                libc::EIO,
            ),
        ];
        for (e, n) in cases {
            assert_eq!(errno(&e), n, "{e:?}");
        }
    }
}
