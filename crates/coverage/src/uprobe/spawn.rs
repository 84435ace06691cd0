//! A static program run with its module counted through uprobes.

use super::*;

/// Spawn `cmd` (a static program whose probes are `probes`, attached to
/// the file `path`) with the probes in place before its first
/// instruction: the child, between fork and exec, writes its pid into a
/// pipe and waits on another; a helper thread attaches the link for that
/// pid and opens the gate (or closes it, and the spawn fails: the attach
/// error is returned). Call after every other `pre_exec` hook is added.
pub fn spawn_counted(
    cmd: &mut std::process::Command,
    probes: Probes,
    path: PathBuf,
) -> Result<(std::process::Child, Counter), UprobeError> {
    use std::io::{Read as _, Write as _};
    use std::os::unix::process::CommandExt as _;
    let pipe = || -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two-element array on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: two fresh descriptors we own.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    };
    let (pid_r, pid_w) = pipe().map_err(|e| io_error("cannot make a pipe", e))?;
    let (go_r, go_w) = pipe().map_err(|e| io_error("cannot make a pipe", e))?;
    let (pr, pw, gr, gw) = (
        pid_r.as_raw_fd(),
        pid_w.as_raw_fd(),
        go_r.as_raw_fd(),
        go_w.as_raw_fd(),
    );
    // SAFETY: the hook runs between fork and exec and makes only
    // async-signal-safe calls (close, getpid, write, read) on descriptor
    // numbers copied in; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::close(pr);
            libc::close(gw);
            let pid = libc::getpid();
            let b = pid.to_ne_bytes();
            if libc::write(pw, b.as_ptr().cast(), b.len()) != b.len() as isize {
                return Err(io::Error::last_os_error());
            }
            libc::close(pw);
            let mut go = [0u8; 1];
            loop {
                let n = libc::read(gr, go.as_mut_ptr().cast(), 1);
                if n == 1 {
                    break;
                }
                if n < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                return Err(io::Error::from_raw_os_error(libc::ECANCELED));
            }
            libc::close(gr);
            Ok(())
        });
    }
    let attacher = std::thread::Builder::new()
        .name("cprof-uprobe".into())
        .spawn(move || -> Result<Counter, UprobeError> {
            let mut r = std::fs::File::from(pid_r);
            let mut b = [0u8; 4];
            r.read_exact(&mut b)
                .map_err(|e| io_error("the program did not start", e))?;
            let pid = i32::from_ne_bytes(b) as u32;
            let counter = Counter::attach(probes, &path, pid)?;
            let mut w = std::fs::File::from(go_w);
            w.write_all(b"g")
                .map_err(|e| io_error("cannot let the program run", e))?;
            Ok(counter)
        })
        .map_err(|e| io_error("cannot start a thread", e))?;
    let spawned = cmd.spawn();
    // The child has written its pid or is gone: our copies go, so that the
    // helper sees the end of the pipe if the child never wrote.
    drop(pid_w);
    drop(go_r);
    let counter = attacher.join().unwrap_or_else(|_| {
        Err(io_error(
            "the attach thread panicked",
            io::Error::from_raw_os_error(libc::EIO),
        ))
    });
    match (spawned, counter) {
        (Ok(child), Ok(counter)) => Ok((child, counter)),
        (Ok(mut child), Err(e)) => {
            // Cannot happen (the gate stays shut), but never leave it.
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
        (Err(_), Err(e)) => Err(e),
        (Err(e), Ok(_)) => Err(io_error("cannot run the program", e)),
    }
}
