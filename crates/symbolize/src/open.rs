//! Opening files that someone else may have named: object files from other
//! users' MMAP records, kernel symbol tables and logs given on a command
//! line.
//!
//! A path named by another user's process can be swapped, between the
//! mapping and the open, for a FIFO (an open that never returns), a device
//! (`/dev/zero`: a read that never ends), a huge or sparse file (memory
//! exhausted), or a symbolic link to somewhere else. Every open here is
//!
//! * non-blocking (`O_NONBLOCK`: a FIFO without a writer opens at once, and
//!   is then refused), close-on-exec;
//! * of a **regular file only** (checked with `fstat` on the open
//!   descriptor, so no race);
//! * **bounded**: a file larger than the caller's limit is refused before
//!   anything is read, and the read itself stops at the limit (procfs files
//!   such as /proc/kallsyms report size 0, so the size alone is no bound).
//!
//! Objects ([`open_object`], [`read_object`]) are preferably opened through
//! `/proc/PID/map_files/START-END`, the kernel's own reference to exactly
//! the mapped file, when the pid and range are known; otherwise by path
//! with `O_NOFOLLOW`, so a final symbolic link is refused. Files under the
//! root-owned [`crate::elf::DEBUG_DIR`] tree are resolved first (its
//! build-id entries are symbolic links by design). Files given on a command
//! line ([`read_bounded`] with [`Follow::Yes`]) may be links: the user chose
//! them.
//!
//! ```
//! use profdev_symbolize::open::{read_bounded, Follow, OpenError};
//! let e = read_bounded("/dev/zero".as_ref(), 1 << 20, Follow::Yes).unwrap_err();
//! assert!(matches!(e, OpenError::NotRegular { .. }));
//! ```

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The largest object file profdev reads or maps: 2 GiB. (The largest
/// shared libraries with debug information are a few hundred MiB.)
pub const MAX_OBJECT: u64 = 2 << 30;

/// Whether a final symbolic link is followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Follow it (a path the user gave).
    Yes,
    /// Refuse it (`O_NOFOLLOW`: a path another user may control).
    No,
}

/// Why a file was not read. Each reads as one sentence naming the file.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The open failed.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A symbolic link where none is followed.
    #[error("{} is a symbolic link, which profdev does not follow here; give the file it points to", path.display())]
    Symlink { path: PathBuf },
    /// Not a regular file.
    #[error("{} is a {kind}, not a regular file; give a regular file", path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    /// Larger than the limit.
    #[error("{} is larger than {limit} bytes, more than profdev reads for it; is it the right file?", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    /// The read failed.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl OpenError {
    /// The file it is about.
    pub fn path(&self) -> &Path {
        match self {
            OpenError::Open { path, .. }
            | OpenError::Symlink { path }
            | OpenError::NotRegular { path, .. }
            | OpenError::TooLarge { path, .. }
            | OpenError::Read { path, .. } => path,
        }
    }
}

impl OpenError {
    /// The reason alone, as an `io::Error` (for errors that name the path
    /// themselves).
    pub fn into_io(self) -> io::Error {
        match self {
            OpenError::Open { source, .. } | OpenError::Read { source, .. } => source,
            OpenError::Symlink { .. } => {
                io::Error::other("a symbolic link, which profdev does not follow here")
            }
            OpenError::NotRegular { kind, .. } => {
                io::Error::other(format!("a {kind}, not a regular file"))
            }
            OpenError::TooLarge { limit, .. } => {
                io::Error::other(format!("larger than {limit} bytes"))
            }
        }
    }
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_char_device() {
        "character device"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Open `path` for reading: non-blocking, close-on-exec, `O_NOFOLLOW`
/// unless `follow`; a regular file of at most `limit` bytes. Returns the
/// file and its size. The descriptor is switched back to blocking reads.
pub fn open_bounded(path: &Path, limit: u64, follow: Follow) -> Result<(File, u64), OpenError> {
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|source| {
            if follow == Follow::No && source.raw_os_error() == Some(libc::ELOOP) {
                OpenError::Symlink {
                    path: path.to_path_buf(),
                }
            } else {
                OpenError::Open {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
    let meta = file.metadata().map_err(|source| OpenError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.file_type().is_file() {
        return Err(OpenError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    if meta.len() > limit {
        return Err(OpenError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    // SAFETY: fcntl on a descriptor we own; clears O_NONBLOCK (meaningless
    // for regular files, but plain blocking reads are what callers expect).
    unsafe {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
        }
    }
    Ok((file, meta.len()))
}

/// Read all of `path` (see [`open_bounded`]), at most `limit` bytes: a file
/// that turns out longer (a procfs file reports size 0; a file may grow)
/// is refused.
pub fn read_bounded(path: &Path, limit: u64, follow: Follow) -> Result<Vec<u8>, OpenError> {
    let (file, size) = open_bounded(path, limit, follow)?;
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|source| OpenError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if out.len() as u64 > limit {
        return Err(OpenError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(out)
}

/// Where a mapping of an object lives: process, start and end address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappedRange {
    pub pid: u32,
    pub start: u64,
    pub end: u64,
}

/// `/proc/PID/map_files/START-END`.
pub fn map_files_path(m: MappedRange) -> PathBuf {
    PathBuf::from(format!(
        "/proc/{}/map_files/{:x}-{:x}",
        m.pid, m.start, m.end
    ))
}

/// Is `path` an entry of some `/proc/PID/map_files` (a magic link to the
/// mapped file itself, which must be followed)?
fn is_map_files(path: &Path) -> bool {
    let mut c = path.components().map(|c| c.as_os_str());
    matches!(
        (c.next(), c.next(), c.next(), c.next(), c.next(), c.next()),
        (Some(r), Some(p), Some(pid), Some(m), Some(_), None)
            if r == "/" && p == "proc" && m == "map_files"
                && pid.to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()) || s == "self")
    )
}

/// Open an object file (an executable, a shared library, a debug file) for
/// reading or mapping, under [`MAX_OBJECT`]: through `/proc/PID/map_files`
/// when `mapping` is given and that works (exactly the mapped file, even if
/// the path was replaced); else `path` without following a final link. A
/// `path` that is itself a map_files entry is followed (it is the kernel's
/// link); one under the root-owned debug directory is resolved first.
pub fn open_object(path: &Path, mapping: Option<MappedRange>) -> Result<(File, u64), OpenError> {
    if let Some(m) = mapping {
        if let Ok(found) = open_bounded(&map_files_path(m), MAX_OBJECT, Follow::Yes) {
            return Ok(found);
        }
    }
    if is_map_files(path) {
        return open_bounded(path, MAX_OBJECT, Follow::Yes);
    }
    if path.starts_with(crate::elf::DEBUG_DIR) {
        if let Ok(real) = path.canonicalize() {
            return open_bounded(&real, MAX_OBJECT, Follow::No);
        }
    }
    open_bounded(path, MAX_OBJECT, Follow::No)
}

/// Read a whole object file: [`open_object`], then at most [`MAX_OBJECT`]
/// bytes.
pub fn read_object(path: &Path, mapping: Option<MappedRange>) -> Result<Vec<u8>, OpenError> {
    let (file, size) = open_object(path, mapping)?;
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(MAX_OBJECT.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|source| OpenError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if out.len() as u64 > MAX_OBJECT {
        return Err(OpenError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_OBJECT,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_fifo_is_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: c is a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever opens the FIFO: an open that waited for one would
        // block for good. The opens run in a thread of their own, so that
        // such a wait fails the test (the bound only guards the hang).
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let reads = [Follow::Yes, Follow::No].map(|f| read_bounded(&path, 1 << 20, f));
            let _ = tx.send((reads, read_object(&path, None)));
        });
        let (reads, object) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("no open of the FIFO blocked");
        for e in reads {
            let e = e.unwrap_err();
            assert!(
                matches!(e, OpenError::NotRegular { kind: "FIFO", .. }),
                "{e}"
            );
        }
        let e = object.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is a FIFO, not a regular file; give a regular file",
                fifo.display()
            )
        );
    }

    #[test]
    fn a_symlink_is_refused_unless_followed() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::write(&target, b"\x7fELF...").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = read_object(&link, None).unwrap_err();
        assert!(matches!(e, OpenError::Symlink { .. }), "{e}");
        assert!(matches!(
            read_bounded(&link, 100, Follow::No),
            Err(OpenError::Symlink { .. })
        ));
        assert_eq!(
            read_bounded(&link, 100, Follow::Yes).unwrap(),
            b"\x7fELF..."
        );
        assert_eq!(read_object(&target, None).unwrap(), b"\x7fELF...");
    }

    #[test]
    fn devices_and_directories_are_refused() {
        let e = read_object(Path::new("/dev/zero"), None).unwrap_err();
        assert!(
            matches!(
                e,
                OpenError::NotRegular {
                    kind: "character device",
                    ..
                }
            ),
            "{e}"
        );
        let e = read_bounded(Path::new("/dev/zero"), 10, Follow::Yes).unwrap_err();
        assert!(matches!(e, OpenError::NotRegular { .. }), "{e}");
        let e = read_bounded(Path::new("/"), 10, Follow::Yes).unwrap_err();
        assert!(
            matches!(
                e,
                OpenError::NotRegular {
                    kind: "directory",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn oversized_files_are_refused_before_reading() {
        let d = tempfile::tempdir().unwrap();
        let big = d.path().join("sparse");
        let f = File::create(&big).unwrap();
        f.set_len(MAX_OBJECT + 1).unwrap(); // sparse: no disk used
        drop(f);
        let e = read_object(&big, None).unwrap_err();
        assert!(matches!(e, OpenError::TooLarge { .. }), "{e}");
        assert!(open_object(&big, None).is_err());
        let e = read_bounded(&big, 4096, Follow::Yes).unwrap_err();
        assert!(matches!(e, OpenError::TooLarge { limit: 4096, .. }), "{e}");
        // A procfs file says 0 bytes: the read itself is bounded.
        let e = read_bounded(Path::new("/proc/self/status"), 16, Follow::Yes).unwrap_err();
        assert!(matches!(e, OpenError::TooLarge { limit: 16, .. }), "{e}");
        assert!(
            !read_bounded(Path::new("/proc/self/status"), 1 << 20, Follow::Yes)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn map_files_are_preferred_and_followed() {
        // This test's own executable is mapped: find a mapping of it.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = crate::maps::read_self().unwrap();
        let line = maps
            .iter()
            .find(|l| l.path == exe.to_str().unwrap())
            .expect("the executable is mapped");
        let m = MappedRange {
            pid: std::process::id(),
            start: line.start,
            end: line.end,
        };
        let want = std::fs::metadata(&exe).unwrap().len();
        // A bogus path: the map_files entry is used.
        let (_, size) = open_object(Path::new("/nonexistent/x"), Some(m)).unwrap();
        assert_eq!(size, want);
        // The entry itself, given as a path, is followed.
        assert!(is_map_files(&map_files_path(m)));
        assert!(!is_map_files(Path::new("/tmp/proc/1/map_files/x")));
        let (_, size) = open_object(&map_files_path(m), None).unwrap();
        assert_eq!(size, want);
    }
}
