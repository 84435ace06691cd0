//! Mounting, unmounting, and the mount table.

use crate::server::Server;
use fuser::{Config, Session, SessionACL};
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// The file system type profdev mounts show in /proc/mounts.
pub const FSTYPE: &str = "fuse.profdev";

/// The source profdev mounts show in /proc/mounts.
pub const SOURCE: &str = "profdev";

/// The FUSE device.
pub const DEV_FUSE: &str = "/dev/fuse";

/// Where profdev's device server is mounted unless `$PROFDEV_MOUNT` says
/// otherwise.
pub const DEFAULT_MOUNT_DIR: &str = "/run/profdev";

/// The variable that names the mount directory.
pub const MOUNT_VAR: &str = "PROFDEV_MOUNT";

/// The mount directory every command uses when not given one: `mount`,
/// `unmount`, `stat`, `kgmon`, `prof` and the prf commands alike.
/// `$PROFDEV_MOUNT` when set and not empty, else [`DEFAULT_MOUNT_DIR`].
pub fn mount_dir() -> PathBuf {
    mount_dir_from(std::env::var_os(MOUNT_VAR))
}

fn mount_dir_from(var: Option<std::ffi::OsString>) -> PathBuf {
    match var {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_MOUNT_DIR),
    }
}

/// `DIR.log`, beside DIR: the log of a server started in the background
/// on DIR.
pub fn log_path(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(".log");
    dir.with_file_name(name)
}

/// What to tell someone who found no server mounted at `dir`: the command
/// that will mount one there (`profdev mount -b DIR` creates a missing
/// DIR), or, when that would be refused, why, and what will work instead.
/// Nothing is changed.
pub fn how_to_mount(dir: &Path) -> String {
    let shown = dir.display();
    let elsewhere = format!(
        "start one on a new or empty directory with: profdev mount -b DIR, \
         and set {MOUNT_VAR}=DIR"
    );
    let why = match std::fs::symlink_metadata(dir) {
        Err(_) => None,
        Ok(m) if !m.is_dir() && !m.file_type().is_symlink() => {
            Some(format!("{shown} is not a directory"))
        }
        Ok(_) => match check_trusted(dir) {
            Err(e) => Some(e.to_string()),
            Ok(()) => match std::fs::metadata(dir) {
                Ok(m) if !m.is_dir() => Some(format!("{shown} is not a directory")),
                Ok(_) if check_empty(dir).is_err() => Some(format!(
                    "{shown} is not empty: a mount there would hide its files"
                )),
                _ => None,
            },
        },
    };
    match why {
        Some(why) => format!("{why}; {elsewhere}"),
        None if check_can_mount(dir).is_err() => {
            format!("as root, start one with: profdev mount -b {shown}")
        }
        None => format!("start one with: profdev mount -b {shown}"),
    }
}

/// Why a mount or an unmount failed. Each reads as one sentence.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The mount point does not exist.
    #[error("{} does not exist", .0.display())]
    NoDir(PathBuf),
    /// The mount point is not a directory.
    #[error("{} is not a directory", .0.display())]
    NotDir(PathBuf),
    /// Something other than profdev is mounted there.
    #[error("{} is already a mount point ({fstype}); unmount it first", dir.display())]
    Busy { dir: PathBuf, fstype: String },
    /// A live profdev server is mounted there.
    #[error("a profdev server is already mounted at {}", .0.display())]
    AlreadyServed(PathBuf),
    /// No FUSE in this kernel or no device node.
    #[error("{DEV_FUSE} does not exist; load the fuse module (modprobe fuse)")]
    NoFuse,
    /// Not privileged enough to mount.
    #[error("mounting {} needs CAP_SYS_ADMIN; run profdev mount as root", .0.display())]
    Permission(PathBuf),
    /// Not privileged enough to unmount.
    #[error("unmounting {} needs CAP_SYS_ADMIN; run profdev unmount as root", .0.display())]
    UnmountPermission(PathBuf),
    /// The mount point, or the directory holding it, belongs to another
    /// user who could swap it for a link to any directory before the mount.
    #[error("{} is controlled by user {uid}, who could swap it for a link to any directory before the mount; mount on a directory that only you or root can change", dir.display())]
    Untrusted { dir: PathBuf, uid: u32 },
    /// The directory holding the mount point may be written by other
    /// users and is not sticky: any of them could swap the mount point.
    #[error("{} is in a directory other users may write (and not sticky), so they could swap it for a link to any directory before the mount; mount on a directory that only you or root can change", .0.display())]
    SharedHolder(PathBuf),
    /// The mount point has files in it, which the mount would hide.
    #[error("{} is not empty: a mount there would hide its files; empty it, choose another directory, or give --nonempty", .0.display())]
    NotEmpty(PathBuf),
    /// Nothing is mounted there.
    #[error("nothing is mounted at {}", .0.display())]
    NotMounted(PathBuf),
    /// Something else is mounted there, and profdev leaves it alone.
    #[error("{} is a {fstype} mount, not a profdev one; profdev leaves it alone", dir.display())]
    NotProfdev { dir: PathBuf, fstype: String },
    /// Anything else, with what was being done.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

fn io_error(context: String) -> impl FnOnce(io::Error) -> MountError {
    move |source| MountError::Io { context, source }
}

/// What is mounted at a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountState {
    /// Nothing.
    NotMounted,
    /// A profdev server; `alive` is false when its server has died and
    /// the mount only answers "transport endpoint is not connected".
    Profdev { alive: bool },
    /// Some other file system.
    Other { fstype: String },
}

/// `dir` made absolute with symbolic links resolved, without touching
/// `dir` itself when that fails (a dead FUSE mount cannot be stat'ed):
/// then only its parent is resolved.
pub fn resolve(dir: &Path) -> PathBuf {
    if let Ok(p) = dir.canonicalize() {
        return p;
    }
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(dir)
    };
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .unwrap_or_else(|_| parent.to_path_buf())
            .join(name),
        _ => abs,
    }
}

/// The topmost mount at exactly `dir` (already resolved), from
/// /proc/self/mountinfo: its file system type.
pub fn mounted_fstype(dir: &Path) -> io::Result<Option<String>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(parse_mountinfo(&table)
        .into_iter()
        .filter(|(point, _)| Path::new(point) == dir)
        .map(|(_, fstype)| fstype)
        .next_back())
}

/// (mount point, fstype) of each line of a mountinfo table, in order.
fn parse_mountinfo(table: &str) -> Vec<(String, String)> {
    table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = fields.get(4)?;
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            Some((unescape(point), unescape(fstype)))
        })
        .collect()
}

/// Undo mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c));
        if b[i] == b'\\' && octal {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What is mounted at `dir` (resolved first).
pub fn state(dir: &Path) -> Result<MountState, MountError> {
    let dir = resolve(dir);
    let fstype =
        mounted_fstype(&dir).map_err(io_error("cannot read /proc/self/mountinfo".into()))?;
    Ok(match fstype {
        None => MountState::NotMounted,
        Some(t) if t == FSTYPE => MountState::Profdev {
            alive: !is_dead(&dir),
        },
        Some(fstype) => MountState::Other { fstype },
    })
}

/// True if stat on `dir` says its FUSE server is gone.
fn is_dead(dir: &Path) -> bool {
    match std::fs::metadata(dir) {
        Ok(_) => false,
        Err(e) => matches!(
            e.raw_os_error(),
            Some(libc::ENOTCONN) | Some(libc::ECONNABORTED)
        ),
    }
}

/// Detach whatever is mounted at `dir` (lazily: files held open keep
/// working until closed, and the name is free at once).
fn detach(dir: &Path) -> Result<(), MountError> {
    match nix::mount::umount2(dir, MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(Errno::EPERM) => Err(MountError::UnmountPermission(dir.to_path_buf())),
        Err(Errno::EINVAL) => Err(MountError::NotMounted(dir.to_path_buf())),
        Err(e) => Err(MountError::Io {
            context: format!("cannot unmount {}", dir.display()),
            source: e.into(),
        }),
    }
}

/// If a dead profdev mount (its server killed) is at `dir`, detach it.
/// Returns true if it did.
pub fn clear_dead(dir: &Path) -> Result<bool, MountError> {
    if state(dir)? == (MountState::Profdev { alive: false }) {
        detach(&resolve(dir))?;
        return Ok(true);
    }
    Ok(false)
}

/// What [`unmount`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// Detached a live server's mount; the server ends once the last
    /// file held open is closed.
    Detached,
    /// Detached a dead mount whose server had died.
    ClearedDead,
}

/// Unmount the profdev server at `dir`, dead or alive.
pub fn unmount(dir: &Path) -> Result<Unmounted, MountError> {
    let abs = resolve(dir);
    match state(&abs)? {
        MountState::NotMounted => Err(MountError::NotMounted(dir.to_path_buf())),
        MountState::Other { fstype } => Err(MountError::NotProfdev {
            dir: dir.to_path_buf(),
            fstype,
        }),
        MountState::Profdev { alive } => {
            detach(&abs)?;
            Ok(if alive {
                Unmounted::Detached
            } else {
                Unmounted::ClearedDead
            })
        }
    }
}

/// Check that `dir` can take a mount: it exists (or, with `create`, is
/// created), is a directory, and nothing is mounted on it. Returns it
/// resolved. Dead profdev mounts are not cleared here: see [`clear_dead`].
pub fn check_mount_point(dir: &Path, create: bool) -> Result<PathBuf, MountError> {
    check_trusted(dir)?;
    let abs = resolve(dir);
    match state(&abs)? {
        MountState::NotMounted => {}
        MountState::Profdev { .. } => return Err(MountError::AlreadyServed(dir.to_path_buf())),
        MountState::Other { fstype } => {
            return Err(MountError::Busy {
                dir: dir.to_path_buf(),
                fstype,
            })
        }
    }
    match std::fs::metadata(&abs) {
        Ok(m) if m.is_dir() => Ok(abs),
        Ok(_) => Err(MountError::NotDir(dir.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
            std::fs::create_dir_all(&abs)
                .map_err(io_error(format!("cannot create {}", dir.display())))?;
            Ok(resolve(&abs))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(MountError::NoDir(dir.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            Err(MountError::NotDir(dir.to_path_buf()))
        }
        Err(e) => Err(MountError::Io {
            context: format!("cannot use {}", dir.display()),
            source: e,
        }),
    }
}

/// mount(2) follows symbolic links, so a mount point that another user
/// controls is refused: root would mount over whatever it points to by the
/// time of the mount. `dir` (its last component, not followed) must belong
/// to the effective user or root, unless the directory holding it is one
/// that only they can change; a symbolic link is followed only when it and
/// the directory holding it belong to them, as `profdev_safefile` follows
/// an output directory. A missing `dir` is left to the caller.
fn check_trusted(dir: &Path) -> Result<(), MountError> {
    use std::os::unix::fs::MetadataExt;
    check_ancestors(dir)?;
    let Ok(entry) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let holder = std::fs::metadata(parent)
        .map_err(io_error(format!("cannot examine {}", parent.display())))?;
    let euid = nix::unistd::geteuid().as_raw();
    let trusted = |uid: u32| uid == euid || uid == 0;
    let others_write = holder.mode() & 0o022 != 0;
    let sticky = holder.mode() & 0o1000 != 0;
    let untrusted = |uid| {
        Err(MountError::Untrusted {
            dir: dir.to_path_buf(),
            uid,
        })
    };
    // Whoever owns the holding directory, or may write in it without a
    // sticky bit, can rename the entry and put a link in its place.
    if !trusted(holder.uid()) {
        return untrusted(holder.uid());
    }
    if others_write && !sticky {
        return Err(MountError::SharedHolder(dir.to_path_buf()));
    }
    // In a sticky shared directory the entry's owner can still swap it.
    if !trusted(entry.uid()) && (others_write || entry.file_type().is_symlink()) {
        return untrusted(entry.uid());
    }
    Ok(())
}

/// Refuse a path to a mount point that goes through another user's
/// symbolic link: mount(2), and the creation of a missing mount point,
/// follow every link on the way, so whoever owns one chooses where root
/// mounts (or creates). Links owned by root or by this process's user are
/// followed as the kernel would; the last component is [`check_trusted`]'s.
pub fn check_ancestors(dir: &Path) -> Result<(), MountError> {
    use std::os::unix::fs::MetadataExt;
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io_error("cannot read the current directory".into()))?
            .join(dir)
    };
    let euid = nix::unistd::geteuid().as_raw();
    for ancestor in abs.ancestors().skip(1) {
        let Ok(m) = std::fs::symlink_metadata(ancestor) else {
            continue;
        };
        if m.file_type().is_symlink() && m.uid() != 0 && m.uid() != euid {
            return Err(MountError::Untrusted {
                dir: ancestor.to_path_buf(),
                uid: m.uid(),
            });
        }
    }
    Ok(())
}

/// Check that `dir` is empty, as libfuse 2's fusermount did unless given
/// `nonempty`: a mount would hide its files.
pub fn check_empty(dir: &Path) -> Result<(), MountError> {
    let mut entries =
        std::fs::read_dir(dir).map_err(io_error(format!("cannot list {}", dir.display())))?;
    match entries.next() {
        None => Ok(()),
        Some(_) => Err(MountError::NotEmpty(dir.to_path_buf())),
    }
}

/// Check, before doing anything costly, that this process could mount:
/// /dev/fuse exists and the process has CAP_SYS_ADMIN.
pub fn check_can_mount(dir: &Path) -> Result<(), MountError> {
    if !Path::new(DEV_FUSE).exists() {
        return Err(MountError::NoFuse);
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !has_cap_sys_admin(&status) {
        return Err(MountError::Permission(dir.to_path_buf()));
    }
    Ok(())
}

/// CAP_SYS_ADMIN (bit 21) in the CapEff line of /proc/self/status.
fn has_cap_sys_admin(status: &str) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// How to mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountOptions {
    /// Threads serving requests: several readers are served at once.
    pub threads: usize,
    /// Mount even on a directory that has files in it (hiding them).
    pub nonempty: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            threads: 4,
            nonempty: false,
        }
    }
}

/// A mounted server, not yet serving: [`Mounted::run`] or
/// [`Mounted::spawn`] it. Until then, requests wait.
pub struct Mounted {
    dir: PathBuf,
    session: Session<Server>,
}

/// Mount `server` on the directory `dir`, which must exist, have nothing
/// mounted on it (see [`check_mount_point`]), and be empty unless
/// `options.nonempty` ([`check_empty`]).
///
/// The mount is `fuse.profdev` with `default_permissions,allow_other`:
/// every user reaches the files, and the kernel checks each file's mode
/// against its owner, the mounting user. It is `nosuid,nodev`.
pub fn mount(server: Server, dir: &Path, options: MountOptions) -> Result<Mounted, MountError> {
    let dir = check_mount_point(dir, false)?;
    if !options.nonempty {
        check_empty(&dir)?;
    }
    let fuse = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(DEV_FUSE)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => MountError::NoFuse,
            io::ErrorKind::PermissionDenied => MountError::Permission(dir.clone()),
            _ => MountError::Io {
                context: format!("cannot open {DEV_FUSE}"),
                source: e,
            },
        })?;
    let data = format!(
        "fd={},rootmode={:o},user_id={},group_id={},default_permissions,allow_other",
        fuse.as_raw_fd(),
        libc::S_IFDIR | crate::server::ROOT_PERM as u32,
        nix::unistd::geteuid(),
        nix::unistd::getegid(),
    );
    nix::mount::mount(
        Some(SOURCE),
        &dir,
        Some(FSTYPE),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| match e {
        Errno::EPERM | Errno::EACCES => MountError::Permission(dir.clone()),
        Errno::ENODEV => MountError::NoFuse,
        e => MountError::Io {
            context: format!("cannot mount {}", dir.display()),
            source: e.into(),
        },
    })?;
    let mut config = Config::default();
    config.n_threads = Some(options.threads.max(1));
    let session =
        Session::from_fd(server, OwnedFd::from(fuse), SessionACL::All, config).map_err(|e| {
            let _ = detach(&dir);
            MountError::Io {
                context: format!("the kernel did not start FUSE on {}", dir.display()),
                source: e,
            }
        })?;
    Ok(Mounted { dir, session })
}

impl Mounted {
    /// The mount point, resolved.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Serve until the mount goes away (unmounted, or detached and the
    /// last open file closed).
    pub fn run(self) -> io::Result<()> {
        self.session.run()
    }

    /// Serve on background threads.
    pub fn spawn(self) -> io::Result<Background> {
        let (tx, done) = mpsc::channel();
        let dir = self.dir.clone();
        let session = self.session;
        std::thread::Builder::new()
            .name("profdev-fuse".into())
            .spawn(move || {
                let r = session.run();
                let _ = tx.send(r);
            })?;
        Ok(Background { dir, done })
    }
}

/// A server running on background threads.
pub struct Background {
    dir: PathBuf,
    done: mpsc::Receiver<io::Result<()>>,
}

impl Background {
    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Wait up to `timeout` for the server to end (after an unmount).
    /// Returns None if it is still serving.
    pub fn wait(&self, timeout: Duration) -> Option<io::Result<()>> {
        match self.done.recv_timeout(timeout) {
            Ok(r) => Some(r),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Some(Err(io::Error::other("the file server thread panicked")))
            }
        }
    }

    /// Detach the mount and wait up to `timeout` for the server to end
    /// (files still held open keep it serving them until closed).
    pub fn unmount(self, timeout: Duration) -> Result<bool, MountError> {
        detach(&self.dir)?;
        Ok(self.wait(timeout).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let table = "\
22 1 0:21 / /run rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,mode=755
99 22 0:50 / /run/profdev rw,nosuid,nodev,relatime shared:60 - fuse.profdev profdev rw,user_id=0,group_id=0,default_permissions,allow_other
100 1 0:51 / /tmp/a\\040b rw - fuse.profdev profdev rw
";
        assert_eq!(
            parse_mountinfo(table),
            [
                ("/run".to_string(), "tmpfs".to_string()),
                ("/run/profdev".to_string(), "fuse.profdev".to_string()),
                ("/tmp/a b".to_string(), "fuse.profdev".to_string()),
            ]
        );
        assert_eq!(unescape("a\\134b\\011"), "a\\b\t");
        assert_eq!(unescape("trailing\\04"), "trailing\\04");
    }

    #[test]
    fn capabilities() {
        assert!(has_cap_sys_admin("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(has_cap_sys_admin("CapEff:\t0000000000200000\n"));
        assert!(!has_cap_sys_admin("CapEff:\t0000000000000000\n"));
        assert!(!has_cap_sys_admin("CapEff:\t00000000001fffff\n"));
        assert!(!has_cap_sys_admin(""));
    }

    #[test]
    fn a_directory_with_files_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(check_empty(tmp.path()).is_ok());
        std::fs::write(tmp.path().join(".hidden"), b"x").unwrap();
        let e = check_empty(tmp.path()).unwrap_err();
        assert!(matches!(e, MountError::NotEmpty(_)));
        assert_eq!(
            e.to_string(),
            format!(
                "{} is not empty: a mount there would hide its files; empty it, choose another directory, or give --nonempty",
                tmp.path().display()
            )
        );
    }

    #[test]
    fn resolve_survives_missing_dirs() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("nope");
        assert_eq!(
            resolve(&missing),
            d.path().canonicalize().unwrap().join("nope")
        );
    }

    #[test]
    fn one_mount_dir_and_its_log() {
        assert_eq!(mount_dir_from(None), Path::new("/run/profdev"));
        assert_eq!(mount_dir_from(Some("".into())), Path::new("/run/profdev"));
        assert_eq!(mount_dir_from(Some("/x/m".into())), Path::new("/x/m"));
        assert_eq!(
            log_path(Path::new("/run/profdev")),
            Path::new("/run/profdev.log")
        );
        assert_eq!(
            log_path(Path::new("/tmp/x/mnt")),
            Path::new("/tmp/x/mnt.log")
        );
    }

    /// The advice suggests only what `profdev mount -b` would do: a new or
    /// empty directory of ours, never one whose files a mount would hide.
    #[test]
    fn advice_suggests_only_what_works() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let can = check_can_mount(&root).is_ok();
        let works = |d: &Path| {
            if can {
                format!("start one with: profdev mount -b {}", d.display())
            } else {
                format!("as root, start one with: profdev mount -b {}", d.display())
            }
        };
        let missing = root.join("new");
        assert_eq!(how_to_mount(&missing), works(&missing));
        assert!(!missing.exists(), "advice changes nothing");
        let empty = root.join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert_eq!(how_to_mount(&empty), works(&empty));
        let full = root.join("full");
        std::fs::create_dir(&full).unwrap();
        std::fs::write(full.join("f"), b"").unwrap();
        assert_eq!(
            how_to_mount(&full),
            format!(
                "{} is not empty: a mount there would hide its files; start one on a new or \
                 empty directory with: profdev mount -b DIR, and set PROFDEV_MOUNT=DIR",
                full.display()
            )
        );
        let file = root.join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(
            how_to_mount(&file).starts_with(&format!("{} is not a directory; ", file.display()))
        );
    }
}
