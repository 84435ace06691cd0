//! A run's private directory ([`Session`]): the library written there,
//! the environment that preloads it, and the sweep of the directories of
//! runs that are gone.

use crate::read::MAX_ENTRIES;
use crate::{read_reports, Report, LIBRARY};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One run's private directory: the library, and the reports it writes.
pub struct Session {
    /// The service of unwind tables on request, stopped before the
    /// directory is removed ([`Session::serve_unwind`]).
    unwind: std::sync::OnceLock<crate::unwind::Server>,
    dir: tempfile::TempDir,
    /// The directory's lock, held while the session lives ([`sweep`]).
    _held: std::fs::File,
}

impl Session {
    /// A fresh private directory (0700, a unique name under [`base_dir`],
    /// locked while the session lives) holding the library (written
    /// through profdev-safefile: `O_EXCL|O_NOFOLLOW`, then renamed) and an
    /// empty `out/` for reports. Directories earlier sessions of this user
    /// left behind are removed first ([`sweep`]).
    pub fn new() -> std::io::Result<Session> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = base_dir();
        let dir = tempfile::Builder::new()
            .prefix(LAUNCH_PREFIX)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&base)?;
        let held = hold(dir.path())?;
        let uid = std::fs::symlink_metadata(dir.path())?.uid();
        sweep(&base, uid);
        if base != std::env::temp_dir() {
            sweep(&std::env::temp_dir(), uid);
        }
        profdev_safefile::write_file(dir.path().join("libprofdev_mprof.so"), LIBRARY, 0o500)
            .map_err(profdev_safefile::Error::into_os_error)?;
        profdev_safefile::create_dir(dir.path().join("out"), 0o700)
            .map_err(profdev_safefile::Error::into_os_error)?;
        Ok(Session {
            unwind: std::sync::OnceLock::new(),
            dir,
            _held: held,
        })
    }

    /// The session's directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Builds unwind tables on request in `dir`, the session's directory
    /// of tables, while the session lives ([`crate::unwind::serve`]): for
    /// the programs CMD executes and the libraries it loads with `dlopen`.
    pub fn serve_unwind(&self, dir: &Path) -> std::io::Result<()> {
        let server = crate::unwind::serve(dir, 0o400)?;
        let _ = self.unwind.set(server);
        Ok(())
    }

    /// The library's path.
    pub fn library(&self) -> PathBuf {
        self.dir.path().join("libprofdev_mprof.so")
    }

    /// The directory the reports go to.
    pub fn reports_dir(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// The file of system code of `modules` (the library walks past
    /// their functions declared in system headers: [`crate::system`]),
    /// written into the directory, and the variable that names it.
    pub fn system_env(
        &self,
        modules: &[crate::system::SystemModule],
    ) -> std::io::Result<(&'static str, OsString)> {
        let file = self.dir.path().join("system");
        let bytes = crate::system::encode(modules);
        profdev_safefile::write_file(&file, &bytes, 0o400)
            .map_err(profdev_safefile::Error::into_os_error)?;
        Ok((crate::system::SYSTEM_ENV, file.into_os_string()))
    }

    /// The environment a profiled command gets: `LD_PRELOAD` (the library
    /// first, then whatever `current` held), `PROFDEV_MPROF_DIR`, and
    /// `PROFDEV_MPROF_WRAPPERS` when `wrappers` is not empty, and
    /// `PROFDEV_MPROF_DHAT=1` with `dhat` (lifetimes and the peak's picture
    /// are then kept, under one global lock).
    pub fn env(
        &self,
        current: Option<OsString>,
        wrappers: &[String],
        dhat: bool,
    ) -> Vec<(String, OsString)> {
        let mut preload = self.library().into_os_string();
        if let Some(c) = current.filter(|c| !c.is_empty()) {
            preload.push(" ");
            preload.push(c);
        }
        let mut env = vec![
            ("LD_PRELOAD".to_string(), preload),
            (
                "PROFDEV_MPROF_DIR".to_string(),
                self.reports_dir().into_os_string(),
            ),
        ];
        if dhat {
            env.push(("PROFDEV_MPROF_DHAT".to_string(), "1".into()));
        }
        if !wrappers.is_empty() {
            env.push((
                "PROFDEV_MPROF_WRAPPERS".to_string(),
                wrappers.join(",").into(),
            ));
        }
        env
    }

    /// Every complete report written so far, in name order; unreadable or
    /// malformed ones are returned as errors (one sentence each).
    pub fn reports(&self) -> (Vec<Report>, Vec<String>) {
        read_reports(&self.reports_dir())
    }
}

/// Where `mprof CMD`'s private directory goes: `$TMPDIR` when it is set;
/// else the first memory-backed (tmpfs) directory that can hold an
/// executable library: `$XDG_RUNTIME_DIR` (when it is this user's, mode
/// 0700), then /dev/shm; else /tmp. Every process of the command creates
/// a table file there, writes its report and removes the file: on a
/// disk filesystem (ext4 mounted with `discard`, as here) the inode
/// churn cost about 30 ms a process, most of mprof's fixed cost on a
/// command that runs a chain of shell scripts.
pub fn base_dir() -> PathBuf {
    choose_base(
        std::env::var_os("TMPDIR"),
        std::env::var_os("XDG_RUNTIME_DIR"),
        Path::new("/dev/shm"),
        rustix::process::getuid().as_raw(),
    )
}

/// [`base_dir`] given `$TMPDIR`, `$XDG_RUNTIME_DIR`, the shared memory
/// directory and the user.
fn choose_base(
    tmpdir: Option<OsString>,
    runtime: Option<OsString>,
    shm: &Path,
    uid: u32,
) -> PathBuf {
    if let Some(t) = tmpdir.filter(|t| !t.is_empty()) {
        return PathBuf::from(t);
    }
    let runtime = runtime
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && owned_private(d, uid));
    runtime
        .into_iter()
        .chain([shm.to_path_buf()])
        .find(|d| memory_backed_exec(d))
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// Is `dir` a directory (not a link) of `uid`'s that no one else may
/// enter or write?
fn owned_private(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
}

/// Is a filesystem type (`statfs`'s `f_type`, whose integer type varies
/// between architectures) tmpfs's?
#[allow(clippy::unnecessary_cast)] // an i64 on x86_64 only
fn is_tmpfs_magic(f_type: rustix::fs::FsWord) -> bool {
    f_type as i64 == 0x0102_1994
}

/// Is `dir` on a tmpfs that allows executable mappings (not `noexec`)?
fn memory_backed_exec(dir: &Path) -> bool {
    let tmpfs = rustix::fs::statfs(dir).is_ok_and(|s| is_tmpfs_magic(s.f_type));
    tmpfs
        && rustix::fs::statvfs(dir)
            .is_ok_and(|s| !s.f_flag.contains(rustix::fs::StatVfsMountFlags::NOEXEC))
        && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
}

/// The name prefix of `mprof CMD`'s private directories.
pub const LAUNCH_PREFIX: &str = "profdev-mprof.";
/// The name prefix of an attached process's directories
/// (`profdev_attach::attach_process`).
pub const ATTACH_PREFIX: &str = "profdev-attach.";
/// A directory of an attach younger than this is never swept (the load
/// into the process may take 20 s), nor one of `mprof CMD` still without
/// its library.
pub const SWEEP_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Lock the directory `dir` (an exclusive `flock` on it, held as long as
/// the returned file is open) so that [`sweep`] leaves it alone.
pub fn hold(dir: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)?;
    Ok(f)
}

/// Remove, under `tmp`, the private directories of earlier mprof sessions
/// and attaches ([`LAUNCH_PREFIX`], [`ATTACH_PREFIX`]) that belong to
/// `uid` and are over: not locked ([`hold`]: no profdev works in them),
/// and whose library no live process maps (/proc/PID/maps of every
/// process this one may read), and, for an attach's or one without its
/// library, older than [`SWEEP_GRACE`]. Returns how many were removed.
/// `mprof CMD` and `mprof -p` sweep as they start, the prof device at each
/// attach: a directory left by a SIGKILLed profdev, or by an attached
/// process that went on after profdev, goes at the next run of its user.
pub fn sweep(tmp: &Path, uid: u32) -> usize {
    use std::os::unix::fs::MetadataExt;
    // Paths as /proc/PID/maps gives them.
    let Ok(tmp) = std::fs::canonicalize(tmp) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return 0;
    };
    let mut candidates = Vec::new();
    for e in entries.take(MAX_ENTRIES).filter_map(|e| e.ok()) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let attach = name.starts_with(ATTACH_PREFIX);
        if !attach && !name.starts_with(LAUNCH_PREFIX) {
            continue;
        }
        let path = e.path();
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !m.is_dir() || m.uid() != uid {
            continue;
        }
        let old = m
            .modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > SWEEP_GRACE);
        let has_library = path.join("libprofdev_mprof.so").exists();
        if (attach || !has_library) && !old {
            continue;
        }
        candidates.push(path);
    }
    if candidates.is_empty() {
        return 0;
    }
    let mapped = mapped_dirs();
    let mut removed = 0;
    for path in candidates {
        if mapped.iter().any(|m| m == &path) {
            continue;
        }
        use std::os::unix::fs::OpenOptionsExt;
        // Locked by a profdev at work: not ours to take. Holding the lock
        // while removing keeps a new holder out (none can come: only the
        // session that made a directory locks it).
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        else {
            continue;
        };
        if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The directories of mprof libraries that live processes map.
fn mapped_dirs() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.filter_map(|e| e.ok()) {
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(maps) = profdev_symbolize::maps::read_file(&p.path().join("maps")) else {
            continue;
        };
        for m in maps.iter().filter(|m| m.is_file()) {
            if let Some(dir) = m.file_path().strip_suffix("/libprofdev_mprof.so") {
                if !out.iter().any(|o: &PathBuf| o.as_os_str() == dir) {
                    out.push(PathBuf::from(dir));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn is_tmpfs(d: &Path) -> bool {
        rustix::fs::statfs(d).is_ok_and(|s| is_tmpfs_magic(s.f_type))
    }

    #[test]
    fn an_explicit_tmpdir_is_kept() {
        let uid = rustix::process::getuid().as_raw();
        let got = choose_base(Some("/var/tmp".into()), None, Path::new("/dev/shm"), uid);
        assert_eq!(got, Path::new("/var/tmp"));
    }

    #[test]
    fn a_disk_directory_is_not_taken_for_memory() {
        let uid = rustix::process::getuid().as_raw();
        let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        if is_tmpfs(disk.path()) {
            eprintln!("skipped: the source tree is on a tmpfs here");
            return;
        }
        // Neither a runtime directory on disk nor a "shared memory" one
        // on disk: /tmp.
        let got = choose_base(None, Some(disk.path().into()), disk.path(), uid);
        assert_eq!(got, Path::new("/tmp"));
    }

    #[test]
    fn a_runtime_directory_must_be_the_users_own_and_private() {
        let uid = rustix::process::getuid().as_raw();
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(owned_private(d.path(), uid));
        assert!(!owned_private(d.path(), uid + 1), "another user's");
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!owned_private(d.path(), uid), "open to others");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        assert!(!owned_private(&link, uid), "a symbolic link");
    }

    #[test]
    fn shared_memory_is_used_when_it_is_a_tmpfs() {
        let shm = Path::new("/dev/shm");
        if !is_tmpfs(shm) {
            eprintln!("skipped: /dev/shm is not a tmpfs here");
            return;
        }
        let uid = rustix::process::getuid().as_raw();
        let got = choose_base(None, None, shm, uid);
        assert_eq!(got, shm);
    }
}
