//! What every subcommand writes goes through `profdev_safefile`; this
//! module holds the modes and the exit status rule shared by them.
//!
//! - Files holding kernel addresses (kpdata, kgmon's gmon.out and
//!   vmlinux.syms, prf logs, DIR.log) are created [`KERNEL_MODE`] 0600.
//! - A user program's gmon.out holds only that program's addresses:
//!   [`USER_MODE`] 0644, what `cc -pg` leaves under the usual umask.
//! - When CMD succeeded but its profile could not be written (a full disk),
//!   the exit status is 1; when CMD failed, CMD's status is kept.
//! - A report never goes into the standard output of a program profdev
//!   runs ([`Report`]): with CMD it goes to the file asked for (`-o FILE`,
//!   `sample --report FILE`) or else to standard error, as time(1), perf
//!   stat and valgrind do; without CMD (a device's or a file's data) to
//!   standard output. `-` asks for standard output.

use crate::child::Job;
use std::ffi::OsStr;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{ExitCode, ExitStatus};

/// Where a report goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// Standard output: without CMD, or `-o -`.
    Stdout,
    /// Standard error: with CMD, unless a file is asked for.
    Stderr,
    /// The file asked for, written whole through `profdev_safefile`
    /// ([`USER_MODE`]).
    File(PathBuf),
}

impl Report {
    /// The report's place: `asked` (`-o FILE`; `-` is standard output),
    /// else standard error if profdev runs a command (`runs_cmd`), else
    /// standard output.
    pub fn to(asked: Option<&OsStr>, runs_cmd: bool) -> Report {
        match asked {
            Some(f) if f == "-" => Report::Stdout,
            Some(f) => Report::File(f.into()),
            None if runs_cmd => Report::Stderr,
            None => Report::Stdout,
        }
    }

    /// Write `bytes` there (a file: complete or untouched).
    pub fn write(&self, bytes: &[u8]) -> anyhow::Result<()> {
        match self {
            Report::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes)?;
                out.flush()?;
            }
            Report::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(bytes)?;
                err.flush()?;
            }
            Report::File(path) => profdev_safefile::write_file(path, bytes, USER_MODE)?,
        }
        Ok(())
    }
}

/// Mode of every file that holds kernel addresses.
pub const KERNEL_MODE: u32 = 0o600;
/// Mode of a user program's profile.
pub const USER_MODE: u32 = 0o644;
/// Mode of an output directory profdev creates.
pub const DIR_MODE: u32 = 0o755;

/// Our exit status: 128 + the signal that interrupted the run; else CMD's
/// status, or 1 when CMD succeeded but the output was not written.
pub fn status(job: &Job, status: ExitStatus, written: bool) -> ExitCode {
    if job.interrupted().is_none() && !written && status.success() {
        ExitCode::from(1)
    } else {
        job.exit_code(status)
    }
}

/// Open a control file of a mounted device tree (`prof/ctl`, `gmon/ctl`)
/// for a control write: never created, never through a symbolic link, so
/// a missing or swapped file is an error rather than a new file.
pub fn open_ctl(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
}
