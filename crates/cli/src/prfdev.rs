//! The prf device as the profiler(1M) commands see it: where it is, how
//! to start a device server when none is mounted, the ioctls, and the
//! commands' shared option `-f` (its table is in `profdev_classic::args::prf`).
//!
//! `-f DEVICE` names the device: a path, or a bare file name (`prf1`)
//! taken in the mount directory, `$PROFDEV_MOUNT` or `/run/profdev`.
//! Without `-f` the commands use `prf` there. When the device is in the
//! mount directory and no device server is mounted there, the command
//! starts one in the background (`profdev mount -b`) and says so on
//! standard error.

use profdev_dev::prf::{PRF_GETMAX, PRF_GETSIZE, PRF_GETSTATUS, PRF_SETSTATE, WORD};
use profdev_report::prfpr::Tm;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The device a command uses: `-f`'s path, or a file in the mount
/// directory (`$PROFDEV_MOUNT`, or `/run/profdev`): `-f`'s bare name or
/// `prf`. In the mount directory, a device server is started if none is
/// mounted, and the command says so; if none can be started, it says why
/// and the open that follows fails with the command's own message.
pub fn device_path(cmd: &str, opt: Option<&str>) -> PathBuf {
    let name = match opt {
        Some(path) if path.contains('/') => return PathBuf::from(path),
        Some(name) => name,
        None => "prf",
    };
    match crate::mount::ensure_mounted() {
        Ok(dir) => dir.join(name),
        Err(e) => {
            eprintln!(
                "{cmd}: no device server is mounted, and none could be started: {}",
                crate::cmdline::sentence(&e)
            );
            mount_dir().join(name)
        }
    }
}

/// The mount directory the commands use by default.
pub fn mount_dir() -> PathBuf {
    profdev_fuse::mount_dir()
}

/// An open prf device.
pub struct PrfDev {
    file: File,
}

/// How to open the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

impl PrfDev {
    /// Open the device.
    /// Opened without blocking, so a FIFO put in the device's place is
    /// refused at once instead of hanging the command: the device is a
    /// regular file of the mount.
    pub fn open(path: &Path, access: Access) -> io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .read(access != Access::Write)
            .write(access != Access::Read)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(path)?;
        if !file.metadata()?.file_type().is_file() {
            return Err(io::Error::other("not a prf device (not a regular file)"));
        }
        // SAFETY: fcntl on the descriptor we own: back to blocking I/O.
        unsafe {
            let fd = file.as_raw_fd();
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl >= 0 {
                libc::fcntl(fd, libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
        }
        Ok(PrfDev { file })
    }

    /// ioctl with a by-value argument; the result is the return value.
    fn ioctl(&self, cmd: u32, arg: u64) -> io::Result<i32> {
        // SAFETY: the prf ioctls take their argument by value and copy no
        // memory in or out (they are _IO numbers), and the descriptor is
        // open for the life of `self.file`.
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), cmd as _, arg as libc::c_ulong) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    /// PRF_GETSTATUS: the state bits.
    pub fn status(&self) -> io::Result<i32> {
        self.ioctl(PRF_GETSTATUS, 0)
    }

    /// PRF_GETSIZE: N.
    pub fn size(&self) -> io::Result<i32> {
        self.ioctl(PRF_GETSIZE, 0)
    }

    /// PRF_GETMAX: the most addresses a load may hold.
    pub fn max(&self) -> io::Result<i32> {
        self.ioctl(PRF_GETMAX, 0)
    }

    /// PRF_SETSTATE.
    pub fn set_state(&self, on: bool) -> io::Result<()> {
        self.ioctl(PRF_SETSTATE, u64::from(on)).map(|_| ())
    }

    /// Load a table with one write(2).
    pub fn load(&mut self, addrs: &[u64]) -> io::Result<usize> {
        let bytes: Vec<u8> = addrs.iter().flat_map(|a| a.to_ne_bytes()).collect();
        self.file.write(&bytes)
    }

    /// One read of the whole image for a table of `n` addresses, at offset
    /// 0 whatever was read before (the device ends at the image's length):
    /// the addresses and the N + 2 counters.
    pub fn snapshot(&mut self, n: usize) -> io::Result<(Vec<u64>, Vec<u64>)> {
        let want = (2 * n + 2) * WORD;
        let mut buf = vec![0u8; want];
        let got = self.file.read_at(&mut buf, 0)?;
        if got != want {
            return Err(io::Error::other(format!(
                "read {got} bytes where a table of {n} addresses takes {want}: was it reloaded?"
            )));
        }
        let words: Vec<u64> = buf
            .chunks_exact(WORD)
            .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or([0; WORD])))
            .collect();
        let counters = words[n..].to_vec();
        let mut addrs = words;
        addrs.truncate(n);
        Ok((addrs, counters))
    }
}

/// Seconds since the epoch in the local time zone (`TZ`), as prfpr prints
/// them and prfdc compares its off hour.
pub fn localtime(t: i64) -> Tm {
    extern "C" {
        fn tzset();
    }
    // SAFETY: tzset only reads the environment and sets libc's time zone
    // globals; nothing else in this process touches them concurrently.
    unsafe { tzset() };
    // SAFETY: an all-zero `tm` is a valid value (integers and, on glibc, a
    // null tm_zone pointer) for localtime_r to overwrite.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let tt = t as libc::time_t;
    // SAFETY: both pointers are to live locals of the right types;
    // localtime_r is the reentrant form and keeps no pointer to them.
    let ok = !unsafe { libc::localtime_r(&tt, &mut tm) }.is_null();
    if !ok {
        return profdev_report::prfpr::utc(t);
    }
    Tm {
        years_since_1900: i64::from(tm.tm_year),
        month: (tm.tm_mon + 1) as u32,
        day: tm.tm_mday as u32,
        hour: tm.tm_hour as u32,
        minute: tm.tm_min as u32,
    }
}

/// C's `atoi`, as the commands read their numbers.
pub fn atoi(s: &str) -> i64 {
    profdev_report::prfpr::atoi(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_as_they_are() {
        assert_eq!(
            device_path("t", Some("/mnt/p/prf")),
            PathBuf::from("/mnt/p/prf")
        );
        assert_eq!(device_path("t", Some("./prf")), PathBuf::from("./prf"));
    }
}
