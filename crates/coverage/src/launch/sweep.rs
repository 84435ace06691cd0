//! The private directories earlier runs left behind, removed once nothing
//! uses them.

use super::*;

/// Remove the private directories (`profdev-cov.*` in `tmp`) that earlier
/// runs of this user left (a run killed, or an attached process that
/// outlived its run) and nothing uses any more: owned by the effective
/// user, not locked by a live server, and whose runtime no live process
/// maps (every process's `/proc/PID/maps` is read). A directory with
/// neither its runtime nor `out/` (a run being set up) is removed only
/// when it was last changed a minute ago or more. Returns how many were
/// removed.
pub fn sweep(tmp: &Path) -> usize {
    use std::os::fd::AsRawFd;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    // As the processes' maps name it.
    let Ok(tmp) = tmp.canonicalize() else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return 0;
    };
    let mut stale: Vec<(PathBuf, std::fs::File)> = Vec::new();
    for e in entries.flatten() {
        if !e
            .file_name()
            .as_encoded_bytes()
            .starts_with(DIR_PREFIX.as_bytes())
        {
            continue;
        }
        let path = e.path();
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !m.is_dir() || m.uid() != me {
            continue;
        }
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(d) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(d.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue; // a live server's
        }
        // The runtime is written after the lock is taken, `out/` after
        // it: a directory with either is set up, and unlocked, stale.
        let set_up = [RUNTIME_NAME, "out"]
            .iter()
            .any(|n| std::fs::symlink_metadata(path.join(n)).is_ok());
        let quiet = m
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= std::time::Duration::from_secs(60));
        if set_up || quiet {
            stale.push((path, d));
        }
    }
    if stale.is_empty() {
        return 0;
    }
    let Some(mapped) = mapped_runtimes() else {
        return 0;
    };
    let mut removed = 0;
    for (path, _lock) in stale {
        if !mapped.contains(&path) && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The directories whose runtime a live process maps.
pub(super) fn mapped_runtimes() -> Option<BTreeSet<PathBuf>> {
    let mut out = BTreeSet::new();
    let procs = std::fs::read_dir("/proc").ok()?;
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        // A process whose maps profdev cannot read (gone; another
        // user's, when profdev is not root; one holding capabilities
        // profdev lacks) is one profdev could not have attached to, nor
        // preloaded into (see Bugs in the module doc).
        let Ok(maps) = profdev_symbolize::maps::read_file(Path::new(&format!("/proc/{pid}/maps")))
        else {
            continue;
        };
        for m in maps.iter().filter(|m| m.is_file()) {
            let file = Path::new(m.file_path());
            if file.file_name() == Some(std::ffi::OsStr::new(RUNTIME_NAME)) {
                if let Some(d) = file.parent() {
                    out.insert(d.to_path_buf());
                }
            }
        }
    }
    Some(out)
}
