//! Running the profiled command: finding it, passing ^C to it alone, and
//! handing its exit status on. Shared by `sample` and `gmon`.

use anyhow::{anyhow, bail, Result};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Resolve CMD as the shell would: a path if it has a slash, else the
/// first executable file of that name on PATH. One sentence if none.
pub fn find_program(cmd: &OsString) -> Result<PathBuf> {
    let name = Path::new(cmd);
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if name.components().count() > 1 {
        if executable(name) {
            return Ok(name.to_path_buf());
        }
        bail!("{}: no such executable file", name.display());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| executable(p))
        .ok_or_else(|| anyhow!("{}: command not found", name.display()))
}

/// While alive, profdev ignores SIGINT and SIGQUIT: ^C and ^\ go to the
/// whole foreground group, so CMD takes them and profdev stays to write
/// what was recorded. The child must restore the defaults before exec
/// ([`restore_in_child`]), since ignored signals survive exec.
pub struct IgnoreInterrupts {
    int: libc::sighandler_t,
    quit: libc::sighandler_t,
}

impl IgnoreInterrupts {
    /// Ignore SIGINT and SIGQUIT until dropped.
    pub fn new() -> Self {
        // SAFETY: installing SIG_IGN has no preconditions; the previous
        // handlers are restored on drop.
        unsafe {
            IgnoreInterrupts {
                int: libc::signal(libc::SIGINT, libc::SIG_IGN),
                quit: libc::signal(libc::SIGQUIT, libc::SIG_IGN),
            }
        }
    }
}

impl Drop for IgnoreInterrupts {
    fn drop(&mut self) {
        // SAFETY: restores the handlers saved in new().
        unsafe {
            libc::signal(libc::SIGINT, self.int);
            libc::signal(libc::SIGQUIT, self.quit);
        }
    }
}

/// Give CMD the default SIGINT/SIGQUIT dispositions back (in `pre_exec`).
pub fn restore_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: only async-signal-safe calls (signal) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            libc::signal(libc::SIGQUIT, libc::SIG_DFL);
            Ok(())
        });
    }
}

/// CMD's status as ours: its exit code, or 128 + the signal that killed it.
pub fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
        _ => ExitCode::from(1),
    }
}
