//! What a process of another user may ask of the server: connections
//! bounded in number and silence, a module opened only as its process maps
//! it, and whose user it is.

use super::*;

/// Connections of other users' processes served at once, in a profdev
/// process; more are closed at once (their modules are not counted).
pub const MAX_FOREIGN_CONNS: usize = 256;

/// How long a connection of another user's process may stay silent
/// while the server waits for its next line.
pub(super) const CLIENT_SILENCE: std::time::Duration = std::time::Duration::from_secs(300);

pub(super) static FOREIGN_CONNS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// One of [`MAX_FOREIGN_CONNS`], given back on drop.
pub(super) struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        FOREIGN_CONNS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connecting process's (pid, effective uid), as the kernel recorded
/// them at `connect` (SO_PEERCRED).
pub(super) fn peer_cred(conn: &UnixStream) -> Option<(u32, u32)> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain C struct of integers; all zeros is valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`, ours.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0 && cred.pid > 0).then_some((cred.pid as u32, cred.uid))
}

/// Open the module a client asks for, proving that its process maps that
/// file: a client must not make profdev (root, in the device) read a
/// file the client may not read. Through `/proc/PEER/map_files/` (the
/// mapping at `lo`..`hi` of the connecting process whose file is device
/// `dev`, inode `ino`), while the process still has the credentials it
/// connected with (an exec of a set-user-id program changes them). When
/// map_files is closed to profdev (it needs CAP_SYS_ADMIN), only a client
/// of profdev's own user is served, by `path` (checked to be `dev`,
/// `ino`): it could read that file itself.
pub(super) fn open_mapped(
    path: &Path,
    peer: Option<(u32, u32)>,
    (dev, ino): (u64, u64),
    (lo, hi): (u64, u64),
) -> Result<std::fs::File, String> {
    let (pid, uid) = peer.ok_or("the client's credentials are unknown")?;
    if euid_of(pid) != Some(uid) {
        return Err(format!(
            "process {pid} no longer has the credentials it connected with"
        ));
    }
    let check = |f: std::fs::File| -> Result<std::fs::File, String> {
        let m = f.metadata().map_err(|e| e.to_string())?;
        if m.is_file() && m.dev() == dev && m.ino() == ino {
            Ok(f)
        } else {
            Err("the file changed since it was mapped".into())
        }
    };
    let maps = profdev_symbolize::maps::read(pid).map_err(|e| e.to_string())?;
    let range = maps
        .iter()
        .find(|m| m.start >= lo && m.start < hi && m.inode == ino)
        .map(|m| (m.start, m.end));
    let Some((a, b)) = range else {
        return Err(format!("process {pid} maps no such file at 0x{lo:x}"));
    };
    match std::fs::File::open(format!("/proc/{pid}/map_files/{a:x}-{b:x}")) {
        Ok(f) => check(f),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
            // SAFETY: geteuid has no preconditions.
            if uid != unsafe { libc::geteuid() } {
                return Err(format!(
                    "profdev cannot prove that process {pid} (user {uid}) may read it \
                     (/proc/PID/map_files needs CAP_SYS_ADMIN)"
                ));
            }
            check(std::fs::File::open(path).map_err(|e| e.to_string())?)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Whether `uid` is another user's: neither root nor profdev's own.
pub(super) fn foreign(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid != 0 && uid != unsafe { libc::geteuid() }
}

/// The effective uid of process `pid` (when it is also its file-system
/// uid).
pub(super) fn euid_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let v: Vec<u32> = l
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (v.len() == 4 && v[1] == v[3]).then_some(v[1])
}
