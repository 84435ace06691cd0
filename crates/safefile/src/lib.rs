//! The one path through which profdev writes files.
//!
//! profdev runs as root among other users, often in shared directories such
//! as /tmp, on machines where `fs.protected_symlinks` may be 0. Every file it
//! writes is therefore created the way the kernel's own tools do it:
//!
//! - **Whole files** ([`write_file`], [`SafeFile`], [`Dir::create_file`]):
//!   a fresh name `.NAME.XXXXXXXXXXXXXXXX` (64 random bits) in the target
//!   directory, opened `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC` with the final
//!   mode, written, fsync'd, and renamed over `NAME`. A `NAME` that is a
//!   symbolic link (or a hard link to anything) is replaced, never written
//!   through. If anything fails (a full disk, a quota, an I/O error) the
//!   temporary is removed: `NAME` is complete or untouched, never partial.
//!   Two runs never share a temporary: `O_EXCL` makes a clash a retry.
//!   A `NAME` that is a character device or a FIFO (`-o /dev/null`, a
//!   pipe) is written in place, opened `O_NOFOLLOW` without `O_CREAT` and
//!   checked to be what was found, never replaced: a rename would put a
//!   regular file in place of `/dev/null`. A block device, a socket or a
//!   directory is refused.
//! - **Directories** are opened once and every name is resolved relative to
//!   that descriptor, so nobody can move the target between the checks and
//!   the writes. A directory writable by other users and not sticky is
//!   refused ([`Dir::open`]); [`Dir::create`] makes the last component
//!   without following a symbolic link planted there by another user.
//! - **Appends** ([`open_append`], [`create_append`], [`AppendFile::append`]):
//!   `O_APPEND|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC` (absent files are created
//!   `O_EXCL` with the given mode, so a racing link cannot slip in), then
//!   `fstat`: anything but a regular file with one link, owned by the
//!   effective user, is refused. Each record is one `write(2)`; a short
//!   write is an error and the torn tail is cut off again.
//!
//! Every error is one sentence naming the file and the OS error or the rule.
//!
//! ```
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("kpdata");
//! profdev_safefile::write_file(&path, b"counts", 0o600)?;
//! assert_eq!(std::fs::read(&path)?, b"counts");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The result of every operation here.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a file could not be written: the file and the reason, as one sentence.
#[derive(Debug)]
pub struct Error {
    path: PathBuf,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// The OS refused `doing` (e.g. "cannot write").
    Io {
        doing: &'static str,
        source: io::Error,
    },
    /// A directory writable by other users and not sticky.
    SharedDir,
    /// A symbolic link at a directory's name, planted by another user.
    ForeignLink { uid: u32 },
    /// Not a directory where one is needed.
    NotDir,
    /// Not a plain file name (`/`, `..`).
    NotAName,
    /// An append target that is not a regular file.
    NotRegular { what: &'static str },
    /// An append target owned by another user.
    NotOwned { uid: u32, euid: u32 },
    /// An append target with more than one link.
    Linked { nlink: u64 },
    /// The file must be new and exists.
    Exists,
    /// A target that is neither a file, a character device nor a FIFO.
    Special { what: &'static str },
    /// A file or directory read back that someone other than the
    /// effective user could have written.
    Untrusted { why: String },
    /// A record only partly written.
    ShortWrite {
        wrote: usize,
        len: usize,
        removed: bool,
    },
}

impl Error {
    fn io(doing: &'static str, path: &Path, source: impl Into<io::Error>) -> Error {
        Error {
            path: path.to_path_buf(),
            kind: Kind::Io {
                doing,
                source: source.into(),
            },
        }
    }

    fn new(path: &Path, kind: Kind) -> Error {
        Error {
            path: path.to_path_buf(),
            kind,
        }
    }

    /// An OS error opening `file`'s directory, told as one about `file`
    /// (which is what the user named); refusals keep naming the directory.
    fn for_file(self, doing: &'static str, file: &Path) -> Error {
        match self.kind {
            Kind::Io { source, .. } => Error::io(doing, file, source),
            kind => Error { kind, ..self },
        }
    }

    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The OS error, when the OS refused (rather than a safety rule).
    pub fn os_error(&self) -> Option<&io::Error> {
        match &self.kind {
            Kind::Io { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The OS error itself when the OS refused, else this error as an
    /// `io::Error` (for callers that keep the path apart, as C's
    /// `perror(path)` does).
    pub fn into_os_error(self) -> io::Error {
        match self.kind {
            Kind::Io { source, .. } => source,
            _ => self.into(),
        }
    }

    /// Was the file to be created new, and exists?
    pub fn already_exists(&self) -> bool {
        matches!(self.kind, Kind::Exists)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        match &self.kind {
            Kind::Io { doing, source } => write!(f, "{doing} {p}: {source}"),
            Kind::SharedDir => write!(
                f,
                "refusing to write in {p}: it is writable by other users and not sticky, so they \
                 could swap its files; use a directory only you can write (chmod go-w {p}) or a \
                 sticky one such as /tmp"
            ),
            Kind::ForeignLink { uid } => write!(
                f,
                "refusing to use {p}: it is a symbolic link that uid {uid} controls; remove it or \
                 choose another directory"
            ),
            Kind::NotDir => write!(f, "cannot write in {p}: it is not a directory"),
            Kind::NotAName => write!(f, "cannot write {p}: it does not name a file"),
            Kind::NotRegular { what } => write!(
                f,
                "refusing to append to {p}: it is {what}, not a regular file; remove it or choose \
                 another file"
            ),
            Kind::NotOwned { uid, euid } => write!(
                f,
                "refusing to append to {p}: it belongs to uid {uid}, not to uid {euid} who runs \
                 profdev; remove it or choose another file"
            ),
            Kind::Linked { nlink } => write!(
                f,
                "refusing to append to {p}: it has {nlink} hard links, so it may be another \
                 file's alias; remove it or choose another file"
            ),
            Kind::Exists => write!(f, "refusing to create {p}: it already exists"),
            Kind::Special { what } => write!(
                f,
                "refusing to write {p}: it is {what}; give a file's name, a character device \
                 such as /dev/null, or a FIFO"
            ),
            Kind::Untrusted { why } => write!(
                f,
                "refusing to read {p}: {why}, so another user could have written it; remove it"
            ),
            Kind::ShortWrite {
                wrote,
                len,
                removed,
            } => write!(
                f,
                "cannot write {p}: only {wrote} of {len} bytes fitted (is the file system full?); \
                 {}",
                if *removed {
                    "the partial record was removed"
                } else {
                    "a partial record remains at its end"
                }
            ),
        }
    }
}

/// The message already ends with the OS error, so it is no `source()`:
/// a chain printer (`anyhow`'s `{:#}`) would say it twice. It is at hand
/// in [`Error::os_error`].
impl std::error::Error for Error {}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e.kind {
            Kind::Io { source, .. } => source.kind(),
            Kind::Exists => io::ErrorKind::AlreadyExists,
            Kind::ShortWrite { .. } => io::ErrorKind::WriteZero,
            _ => io::ErrorKind::PermissionDenied,
        };
        io::Error::new(kind, e)
    }
}

fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits)
}

/// `path`'s directory (`.` when it has none) and file name.
fn split(path: &Path) -> Result<(&Path, &OsStr)> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::new(path, Kind::NotAName))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// A directory opened for writing in: every name below is resolved
/// relative to this descriptor, never again through the path.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn is_shared(st_mode: u32) -> bool {
    st_mode & 0o022 != 0 && st_mode & 0o1000 == 0
}

impl Dir {
    /// Open an existing directory (following `path` as given) and check it:
    /// a directory writable by other users (group or other write bit) and
    /// not sticky is refused, since they could swap its entries.
    pub fn open(path: &Path) -> Result<Dir> {
        let p = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let fd = rfs::openat(
            CWD,
            p,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::NOTDIR => Error::new(path, Kind::NotDir),
            e => Error::io("cannot open the directory", path, e),
        })?;
        Dir::checked(fd, path)
    }

    fn checked(fd: OwnedFd, path: &Path) -> Result<Dir> {
        let st = rfs::fstat(&fd).map_err(|e| Error::io("cannot examine", path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return Err(Error::new(path, Kind::NotDir));
        }
        if is_shared(st.st_mode) {
            return Err(Error::new(path, Kind::SharedDir));
        }
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Create the directory `path` with `mode` (less the umask) if it is
    /// missing, as `mkdir -p` (missing parents get 0755), and open it.
    /// The last component is never followed when it is a symbolic link that
    /// another user could have planted: a link is followed only when it and
    /// the directory holding it belong to the effective user or root, and
    /// that directory is not writable by others unless sticky. The result
    /// is checked as [`Dir::open`] checks.
    pub fn create(path: &Path, mode_bits: u32) -> Result<Dir> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Dir::open(path);
        };
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io("cannot create the directory", parent, e))?;
        let pfd = rfs::openat(
            CWD,
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::io("cannot open the directory", parent, e))?;
        match rfs::mkdirat(&pfd, name, mode(mode_bits)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(Error::io("cannot create the directory", path, e)),
        }
        let nofollow = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rfs::openat(&pfd, name, nofollow, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR) => {
                let st = rfs::statat(&pfd, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| Error::io("cannot examine", path, e))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                    return Err(Error::new(path, Kind::NotDir));
                }
                let euid = rustix::process::geteuid().as_raw();
                let pst = rfs::fstat(&pfd).map_err(|e| Error::io("cannot examine", parent, e))?;
                let trusted = |uid: u32| uid == euid || uid == 0;
                if !trusted(st.st_uid) {
                    return Err(Error::new(path, Kind::ForeignLink { uid: st.st_uid }));
                }
                if !trusted(pst.st_uid) || is_shared(pst.st_mode) {
                    // Whoever controls the parent can swap the link.
                    return Err(Error::new(path, Kind::ForeignLink { uid: pst.st_uid }));
                }
                rfs::openat(
                    &pfd,
                    name,
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| match e {
                    Errno::NOTDIR => Error::new(path, Kind::NotDir),
                    e => Error::io("cannot open the directory", path, e),
                })?
            }
            Err(e) => return Err(Error::io("cannot open the directory", path, e)),
        };
        Dir::checked(fd, path)
    }

    /// The directory's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn name_of(&self, name: &Path) -> Result<OsString> {
        let full = self.path.join(name);
        match name.file_name() {
            Some(n) if n == name.as_os_str() => Ok(n.to_os_string()),
            _ => Err(Error::new(&full, Kind::NotAName)),
        }
    }

    /// Start writing `name` in this directory: a unique temporary, created
    /// with `mode` (less the umask), that becomes `name` on
    /// [`SafeFile::commit`]. Creating it early is how a command finds out,
    /// before a long run, that its output can be written.
    pub fn create_file(&self, name: impl AsRef<Path>, mode_bits: u32) -> Result<SafeFile> {
        let name = self.name_of(name.as_ref())?;
        let path = self.path.join(&name);
        let dir = self
            .fd
            .try_clone()
            .map_err(|e| Error::io("cannot write", &path, e))?;
        if let Some(f) = in_place(&dir, &name, &path)? {
            return Ok(f);
        }
        // Keep the temporary's name within NAME_MAX whatever `name` is.
        let stem: Vec<u8> = name.as_bytes().iter().copied().take(200).collect();
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        for _ in 0..64 {
            let mut tmp = b".".to_vec();
            tmp.extend_from_slice(&stem);
            tmp.extend_from_slice(format!(".{:016x}", random_u64()).as_bytes());
            let tmp = OsString::from_vec(tmp);
            match rfs::openat(&dir, &tmp, flags, mode(mode_bits)) {
                Ok(fd) => {
                    return Ok(SafeFile {
                        dir,
                        tmp,
                        name,
                        path,
                        file: Some(File::from(fd)),
                        done: false,
                    })
                }
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(Error::io("cannot write", &path, e)),
            }
        }
        Err(Error::io("cannot write", &path, Errno::EXIST))
    }

    /// Write the whole of `name` in this directory (see [`write_file`]).
    pub fn write_file(&self, name: impl AsRef<Path>, bytes: &[u8], mode_bits: u32) -> Result<()> {
        let mut f = self.create_file(name, mode_bits)?;
        f.write_bytes(bytes)?;
        f.commit()
    }

    /// Read back `name` in this directory, a file profdev wrote for
    /// itself (a cache): only when nobody but the effective user could
    /// have written it. The directory and the file must belong to the
    /// effective user and not be writable by group or others; the file
    /// must be a regular file with one link (never followed if a
    /// symbolic link) of at most `max` bytes. `Ok(None)` when there is no
    /// such name.
    pub fn read_own(&self, name: impl AsRef<Path>, max: u64) -> Result<Option<Vec<u8>>> {
        self.read_checked(name.as_ref(), max, false)
    }

    /// Read back `name` in this directory as [`Dir::read_own`] does, but
    /// accepting root as the owner too (of the file and the directory):
    /// what a root daemon wrote for any user who may read it (the agent's
    /// health file and store).
    pub fn read_trusted(&self, name: impl AsRef<Path>, max: u64) -> Result<Option<Vec<u8>>> {
        self.read_checked(name.as_ref(), max, true)
    }

    /// Open `name` in this directory for reading, with the checks of
    /// [`Dir::read_own`] (the effective user's alone, one link, at most
    /// `max` bytes): the file and its length, for a reader that takes
    /// parts of it (a plan cache's header now, its plan later).
    pub fn open_own(&self, name: impl AsRef<Path>, max: u64) -> Result<Option<(File, u64)>> {
        self.open_checked(name.as_ref(), max, false)
    }

    fn read_checked(&self, name: &Path, max: u64, root_too: bool) -> Result<Option<Vec<u8>>> {
        use std::io::Read;
        let Some((file, len)) = self.open_checked(name, max, root_too)? else {
            return Ok(None);
        };
        let path = self.path.join(self.name_of(name)?);
        let mut out = Vec::with_capacity(len as usize);
        file.take(max)
            .read_to_end(&mut out)
            .map_err(|e| Error::io("cannot read", &path, e))?;
        Ok(Some(out))
    }

    fn open_checked(&self, name: &Path, max: u64, root_too: bool) -> Result<Option<(File, u64)>> {
        let name = self.name_of(name)?;
        let path = self.path.join(&name);
        let euid = rustix::process::geteuid().as_raw();
        let trusted = |st: &rfs::Stat, what: &str| -> Result<()> {
            let why = if st.st_uid != euid && !(root_too && st.st_uid == 0) {
                format!("{what} belongs to uid {}, not to uid {euid}", st.st_uid)
            } else if st.st_mode & 0o022 != 0 {
                format!("{what} is writable by group or others")
            } else {
                return Ok(());
            };
            Err(Error::new(&path, Kind::Untrusted { why }))
        };
        let dst = rfs::fstat(&self.fd).map_err(|e| Error::io("cannot examine", &self.path, e))?;
        trusted(&dst, "its directory")?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rfs::openat(&self.fd, &name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(Error::new(
                    &path,
                    Kind::NotRegular {
                        what: "a symbolic link",
                    },
                ))
            }
            Err(e) => return Err(Error::io("cannot read", &path, e)),
        };
        let st = rfs::fstat(&fd).map_err(|e| Error::io("cannot examine", &path, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::new(&path, Kind::NotRegular { what: "not a file" }));
        }
        trusted(&st, "it")?;
        if st.st_nlink != 1 {
            return Err(Error::new(
                &path,
                Kind::Linked {
                    nlink: st.st_nlink as u64,
                },
            ));
        }
        let len = st.st_size as u64;
        if len > max {
            return Err(Error::new(
                &path,
                Kind::Untrusted {
                    why: format!("it is {len} bytes, more than the {max} expected"),
                },
            ));
        }
        Ok(Some((File::from(fd), len)))
    }

    /// The regular files in this directory whose names start with
    /// `prefix`: (name, size in bytes, modification time in seconds).
    pub fn files(&self, prefix: &str) -> Result<Vec<(OsString, u64, i64)>> {
        let mut out = Vec::new();
        let d =
            rfs::Dir::read_from(&self.fd).map_err(|e| Error::io("cannot list", &self.path, e))?;
        for e in d {
            let e = e.map_err(|e| Error::io("cannot list", &self.path, e))?;
            let name = OsStr::from_bytes(e.file_name().to_bytes()).to_os_string();
            if !name.as_bytes().starts_with(prefix.as_bytes()) {
                continue;
            }
            if let Ok(st) = rfs::statat(&self.fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
                    out.push((name, st.st_size as u64, st.st_mtime));
                }
            }
        }
        Ok(out)
    }

    /// Set the modification time of the file `name` in this directory to
    /// now (a symbolic link there is not followed).
    pub fn touch(&self, name: impl AsRef<Path>) -> Result<()> {
        let name = self.name_of(name.as_ref())?;
        let now = rfs::Timestamps {
            last_access: rfs::Timespec {
                tv_sec: 0,
                tv_nsec: rfs::UTIME_NOW,
            },
            last_modification: rfs::Timespec {
                tv_sec: 0,
                tv_nsec: rfs::UTIME_NOW,
            },
        };
        rfs::utimensat(&self.fd, &name, &now, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| Error::io("cannot touch", &self.path.join(&name), e))
    }

    /// Remove the file `name` in this directory (a symbolic link there is
    /// removed, never followed).
    pub fn remove(&self, name: impl AsRef<Path>) -> Result<()> {
        let name = self.name_of(name.as_ref())?;
        rfs::unlinkat(&self.fd, &name, AtFlags::empty())
            .map_err(|e| Error::io("cannot remove", &self.path.join(&name), e))
    }

    /// Open `name` in this directory for appending (see [`open_append`]).
    pub fn open_append(&self, name: impl AsRef<Path>, mode_bits: u32) -> Result<AppendFile> {
        self.append(name.as_ref(), mode_bits, false)
    }

    /// Create `name`, which must not exist, for appending (see
    /// [`create_append`]).
    pub fn create_append(&self, name: impl AsRef<Path>, mode_bits: u32) -> Result<AppendFile> {
        self.append(name.as_ref(), mode_bits, true)
    }

    fn append(&self, name: &Path, mode_bits: u32, new: bool) -> Result<AppendFile> {
        let name = self.name_of(name)?;
        let path = self.path.join(&name);
        let base = OFlags::RDWR
            | OFlags::APPEND
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        let symlink = || {
            Error::new(
                &path,
                Kind::NotRegular {
                    what: "a symbolic link",
                },
            )
        };
        let mut opened = None;
        // Each round either opens, or loses a race to a creator or a
        // remover; a handful of rounds ends any honest race.
        for _ in 0..16 {
            if !new {
                match rfs::openat(&self.fd, &name, base, Mode::empty()) {
                    Ok(fd) => {
                        opened = Some(fd);
                        break;
                    }
                    Err(Errno::NOENT) => {}
                    Err(Errno::LOOP) => return Err(symlink()),
                    Err(e) => return Err(Error::io("cannot open", &path, e)),
                }
            }
            match rfs::openat(
                &self.fd,
                &name,
                base | OFlags::CREATE | OFlags::EXCL,
                mode(mode_bits),
            ) {
                Ok(fd) => {
                    opened = Some(fd);
                    break;
                }
                Err(Errno::EXIST) if new => return Err(Error::new(&path, Kind::Exists)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(Error::io("cannot create", &path, e)),
            }
        }
        let fd = opened.ok_or_else(|| Error::io("cannot open", &path, Errno::AGAIN))?;
        let st = rfs::fstat(&fd).map_err(|e| Error::io("cannot examine", &path, e))?;
        let what = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => None,
            FileType::Directory => Some("a directory"),
            FileType::Fifo => Some("a FIFO"),
            FileType::Socket => Some("a socket"),
            FileType::CharacterDevice | FileType::BlockDevice => Some("a device"),
            FileType::Symlink => Some("a symbolic link"),
            FileType::Unknown => Some("of an unknown type"),
        };
        if let Some(what) = what {
            return Err(Error::new(&path, Kind::NotRegular { what }));
        }
        let euid = rustix::process::geteuid().as_raw();
        if st.st_uid != euid {
            return Err(Error::new(
                &path,
                Kind::NotOwned {
                    uid: st.st_uid,
                    euid,
                },
            ));
        }
        #[allow(clippy::useless_conversion)] // st_nlink is u32 on some targets
        let nlink = u64::from(st.st_nlink);
        if nlink != 1 {
            return Err(Error::new(&path, Kind::Linked { nlink }));
        }
        // A file made before these rules (an old 0644 log) keeps no
        // permission bit beyond `mode`.
        let perms = st.st_mode & 0o7777;
        if perms & !(mode_bits & 0o777) != 0 {
            rfs::fchmod(&fd, mode(perms & mode_bits & 0o777))
                .map_err(|e| Error::io("cannot restrict the mode of", &path, e))?;
        }
        let flags = rfs::fcntl_getfl(&fd).map_err(|e| Error::io("cannot open", &path, e))?;
        rfs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)
            .map_err(|e| Error::io("cannot open", &path, e))?;
        Ok(AppendFile {
            file: File::from(fd),
            path,
        })
    }
}

/// 64 bits for a temporary's name; `O_EXCL` catches the rare clash, so
/// the fallback need only differ between processes and calls.
fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut b = [0u8; 8];
    if matches!(
        rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::NONBLOCK),
        Ok(8)
    ) {
        return u64::from_ne_bytes(b);
    }
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    nanos ^ (u64::from(std::process::id()) << 40) ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A `name` in `dir` that is a character device or a FIFO, opened to be
/// written in place (none for a name that is absent, a regular file or a
/// symbolic link: those are replaced); other kinds refused.
fn in_place(dir: &OwnedFd, name: &OsStr, path: &Path) -> Result<Option<SafeFile>> {
    let st = match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(Error::io("cannot write", path, e)),
    };
    let what = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile | FileType::Symlink => return Ok(None),
        FileType::CharacterDevice | FileType::Fifo => None,
        FileType::BlockDevice => Some("a block device"),
        FileType::Socket => Some("a socket"),
        FileType::Directory => Some("a directory"),
        FileType::Unknown => Some("of an unknown kind"),
    };
    if let Some(what) = what {
        return Err(Error::new(path, Kind::Special { what }));
    }
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = rfs::openat(dir, name, flags, Mode::empty())
        .map_err(|e| Error::io("cannot write", path, e))?;
    // What was opened is what was examined, not something swapped in.
    let now = rfs::fstat(&fd).map_err(|e| Error::io("cannot write", path, e))?;
    if (now.st_dev, now.st_ino, now.st_mode) != (st.st_dev, st.st_ino, st.st_mode) {
        return Err(Error::io(
            "cannot write",
            path,
            io::Error::other("it changed while it was opened"),
        ));
    }
    Ok(Some(SafeFile {
        dir: dir
            .try_clone()
            .map_err(|e| Error::io("cannot write", path, e))?,
        tmp: OsString::new(),
        name: name.to_os_string(),
        path: path.to_path_buf(),
        file: Some(File::from(fd)),
        done: true,
    }))
}

/// A file being written under a temporary name; [`SafeFile::commit`]
/// fsyncs it and renames it over its final name. Dropped without a commit,
/// the temporary is removed and the final name is untouched.
#[derive(Debug)]
pub struct SafeFile {
    dir: OwnedFd,
    tmp: OsString,
    name: OsString,
    path: PathBuf,
    file: Option<File>,
    done: bool,
}

impl SafeFile {
    /// Start writing `path` with `mode` (see [`Dir::create_file`]); its
    /// directory is opened and checked as [`Dir::open`] does.
    pub fn create(path: impl AsRef<Path>, mode_bits: u32) -> Result<SafeFile> {
        let path = path.as_ref();
        let (dir, name) = split(path)?;
        let dir = Dir::open(dir).map_err(|e| e.for_file("cannot write", path))?;
        let mut f = dir.create_file(name, mode_bits)?;
        f.path = path.to_path_buf();
        Ok(f)
    }

    /// The final name, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write all of `bytes`; the error names the final file.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        self.write_all(bytes)
            .map_err(|e| Error::io("cannot write", &self.path, e))
    }

    /// Flush to the disk and rename over the final name. On an error the
    /// temporary is removed and the final name is as it was.
    pub fn commit(mut self) -> Result<()> {
        let mut file = self
            .file
            .take()
            .expect("a SafeFile holds its file until commit");
        if self.tmp.is_empty() {
            // A device or FIFO written in place: nothing to rename.
            return file
                .flush()
                .map_err(|e| Error::io("cannot write", &self.path, e));
        }
        file.sync_all()
            .map_err(|e| Error::io("cannot write", &self.path, e))?;
        drop(file);
        rfs::renameat(&self.dir, &self.tmp, &self.dir, &self.name)
            .map_err(|e| Error::io("cannot write", &self.path, e))?;
        self.done = true;
        // Make the new name durable too; the data already is.
        rfs::fsync(&self.dir).map_err(|e| Error::io("cannot write", &self.path, e))
    }
}

impl Write for SafeFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.as_mut().expect("not committed").write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().expect("not committed").flush()
    }
}

impl Drop for SafeFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = rfs::unlinkat(&self.dir, &self.tmp, AtFlags::empty());
        }
    }
}

/// Write the whole of `path` with `mode` (less the umask) through a unique
/// temporary in its directory, fsync'd and renamed over `path`: afterwards
/// `path` is the complete new file, or, on an error, as it was before.
pub fn write_file(path: impl AsRef<Path>, bytes: &[u8], mode_bits: u32) -> Result<()> {
    let mut f = SafeFile::create(path, mode_bits)?;
    f.write_bytes(bytes)?;
    f.commit()
}

/// The effective user id, the owner the rules above trust besides root.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Create `path` with `mode` (see [`Dir::create`]).
pub fn create_dir(path: impl AsRef<Path>, mode_bits: u32) -> Result<Dir> {
    Dir::create(path.as_ref(), mode_bits)
}

/// A log opened for appending records, checked to be a regular file of the
/// effective user with one link.
#[derive(Debug)]
pub struct AppendFile {
    file: File,
    path: PathBuf,
}

impl AppendFile {
    /// The file's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file (also readable: `O_RDWR|O_APPEND`).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The open file, for handing on (e.g. as a child's stderr).
    pub fn into_file(self) -> File {
        self.file
    }

    /// The file's current length.
    pub fn len(&self) -> Result<u64> {
        let st = rfs::fstat(&self.file).map_err(|e| Error::io("cannot examine", &self.path, e))?;
        Ok(st.st_size as u64)
    }

    /// Is the file empty?
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Append `record` with one `write(2)`. A short write is an error; the
    /// partial record is then cut off again unless someone else appended
    /// after it, so no torn record stays behind.
    pub fn append(&mut self, record: &[u8]) -> Result<()> {
        if record.is_empty() {
            return Ok(());
        }
        let before = self.len()?;
        let wrote = loop {
            match rustix::io::write(&self.file, record) {
                Ok(n) => break n,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(Error::io("cannot write", &self.path, e)),
            }
        };
        if wrote == record.len() {
            return Ok(());
        }
        let removed = self.len().ok() == Some(before + wrote as u64)
            && rfs::ftruncate(&self.file, before).is_ok();
        Err(Error::new(
            &self.path,
            Kind::ShortWrite {
                wrote,
                len: record.len(),
                removed,
            },
        ))
    }
}

/// Open `path` for appending records, creating it with `mode` (less the
/// umask) when absent; an existing file loses any permission bit beyond
/// `mode` (an old 0644 log becomes 0600). Refuses a symbolic link, anything but a regular
/// file, a file owned by another user, a file with more than one link, and
/// a directory writable by others and not sticky.
pub fn open_append(path: impl AsRef<Path>, mode_bits: u32) -> Result<AppendFile> {
    let path = path.as_ref();
    let (dir, name) = split(path)?;
    let dir = Dir::open(dir).map_err(|e| e.for_file("cannot open", path))?;
    let mut f = dir.open_append(name, mode_bits)?;
    f.path = path.to_path_buf();
    Ok(f)
}

/// As [`open_append`], but `path` must not exist (`O_CREAT|O_EXCL`);
/// [`Error::already_exists`] tells that case apart.
pub fn create_append(path: impl AsRef<Path>, mode_bits: u32) -> Result<AppendFile> {
    let path = path.as_ref();
    let (dir, name) = split(path)?;
    let dir = Dir::open(dir).map_err(|e| e.for_file("cannot create", path))?;
    let mut f = dir.create_append(name, mode_bits)?;
    f.path = path.to_path_buf();
    Ok(f)
}

#[cfg(test)]
mod tests;
