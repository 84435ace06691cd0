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

/// An ELF file with no PT_INTERP is statically linked (64-bit
/// little-endian only; anything else is left to the exec). Only a file
/// whose every program header is there and names a loadable segment is
/// judged: a truncated or malformed one is not "static" (the exec says
/// what is wrong with it).
pub fn is_static(b: &[u8]) -> bool {
    const PT_LOAD: u32 = 1;
    const PT_INTERP: u32 = 3;
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]));
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
    };
    if !b.starts_with(b"\x7fELF") || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    if phentsize < 4 {
        return false;
    }
    let types: Option<Vec<u32>> = (0..phnum as u64)
        .map(|i| {
            let o = usize::try_from(phoff.checked_add(i * phentsize as u64)?).ok()?;
            let t = b.get(o..o.checked_add(4)?)?;
            Some(u32::from_le_bytes(t.try_into().ok()?))
        })
        .collect();
    types.is_some_and(|t| t.contains(&PT_LOAD) && !t.contains(&PT_INTERP))
}

/// Is the ELF file `program` statically linked (no interpreter)? False
/// when it cannot be read or is not ELF (a script: its interpreter is what
/// runs). Reads at most the first 64 KiB, where the program headers are.
pub fn is_static_program(program: &Path) -> bool {
    use std::io::Read as _;
    let mut head = Vec::new();
    std::fs::File::open(program)
        .and_then(|f| f.take(64 << 10).read_to_end(&mut head))
        .is_ok()
        && head.starts_with(b"\x7fELF")
        && is_static(&head)
}
