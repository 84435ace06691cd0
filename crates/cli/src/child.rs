//! Running the profiled command: finding it, and the `--help` paragraph on
//! signals. Shared by `sample`, `gmon` and `prof`, which run CMD through a
//! [`Job`] (`profdev_sample::job`: its own process group, the terminal,
//! signals passed on, no orphans).

use anyhow::{anyhow, bail, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use profdev_sample::job::Job;

pub use profdev_classic::cmdline::SIGNALS_HELP;

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
