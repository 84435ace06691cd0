//! Starting a command under a per-process session.
//!
//! The child is forked by [`Command::spawn`] and held in `pre_exec`: it
//! writes its pid into one pipe and blocks reading a second. A helper thread
//! of the parent reads the pid, opens a `Target::Process { pid, inherit:
//! true }` session on it with `enable_on_exec`, and writes "go". The child
//! then execs, which enables the events, so sampling covers exactly the
//! command's image and everything it forks, from its first instruction.
//! If the session cannot be opened the helper writes "abort" instead (or
//! just closes the pipe), the child returns an error from `pre_exec`, and
//! the command never runs.

use crate::source::{PerfFactory, PerfSource, Start};
use profdev_core::{SampleSource, SessionConfig, SourceError, Target};
use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};

/// Why [`spawn_profiled`] could not start the command.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The program is not an executable file (on PATH, if it has no `/`).
    #[error("command not found: {0}")]
    NotFound(String),
    /// The sampling session could not be opened; the command was not run.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The command could not be started for another reason.
    #[error("cannot start {cmd}: {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: io::Error,
    },
}

const GO: u8 = b'g';
const ABORT: u8 = b'x';

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two c_ints, as pipe2 requires.
    let ret = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are fresh and ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Is `program` something exec could run, searching `path` when it has no
/// slash (as execvp does)?
fn find_program(program: &OsStr, path: Option<&OsStr>) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.as_bytes().contains(&b'/') {
        return runnable(Path::new(program));
    }
    if program.is_empty() {
        return false;
    }
    let default = OsStr::new("/usr/local/bin:/usr/bin:/bin");
    std::env::split_paths(path.unwrap_or(default)).any(|dir| runnable(&dir.join(program)))
}

/// Start `cmd` with sampling of it and its descendants from its exec on.
///
/// `config.target` is ignored (the session is always
/// `Target::Process { pid: child, inherit: true }`); everything else is
/// honoured. Running tasks are not synthesized: the command's own exec
/// delivers its COMM and MMAP2 records. The source ends
/// (`Err(SourceError::Ended)` from `read`) once the whole process tree has
/// exited and its records have been read. `cmd` must not already carry a
/// `pre_exec` hook that blocks, and should be spawned only through this
/// function.
pub fn spawn_profiled(
    cmd: &mut Command,
    config: &SessionConfig,
) -> Result<(Child, Box<dyn SampleSource>), SpawnError> {
    PerfFactory::new().spawn_profiled(cmd, config)
}

impl PerfFactory {
    /// [`spawn_profiled`] with this factory's ring size and mapping hook.
    pub fn spawn_profiled(
        &self,
        cmd: &mut Command,
        config: &SessionConfig,
    ) -> Result<(Child, Box<dyn SampleSource>), SpawnError> {
        config.validate()?;
        let program = cmd.get_program().to_owned();
        let name = program.to_string_lossy().into_owned();
        let path_override = cmd
            .get_envs()
            .find(|(k, _)| *k == OsStr::new("PATH"))
            .map(|(_, v)| v.map(OsStr::to_owned));
        let path = match path_override {
            Some(v) => v,
            None => std::env::var_os("PATH"),
        };
        if !find_program(&program, path.as_deref()) {
            return Err(SpawnError::NotFound(name));
        }
        let spawn_err = |source: io::Error| SpawnError::Spawn {
            cmd: name.clone(),
            source,
        };
        let (pid_r, pid_w) = pipe().map_err(spawn_err)?;
        let (go_r, go_w) = pipe().map_err(spawn_err)?;
        let (child_pid_w, child_go_r) = (pid_w.as_raw_fd(), go_r.as_raw_fd());
        let (child_pid_r, child_go_w) = (pid_r.as_raw_fd(), go_w.as_raw_fd());
        // SAFETY: the hook runs in the forked child before exec and only
        // makes async-signal-safe calls (close, getpid, write, read) on
        // descriptors that stay open in the parent until spawn() returns;
        // it allocates nothing and touches no lock.
        unsafe {
            cmd.pre_exec(move || {
                // Drop the child's copies of the parent's ends, so the parent
                // closing its end reads as "abort" here and vice versa.
                libc::close(child_pid_r);
                libc::close(child_go_w);
                let pid = libc::getpid().to_ne_bytes();
                if libc::write(child_pid_w, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                    return Err(io::Error::last_os_error());
                }
                libc::close(child_pid_w);
                let mut b = 0u8;
                loop {
                    let n = libc::read(child_go_r, (&mut b as *mut u8).cast(), 1);
                    if n == 1 && b == GO {
                        return Ok(());
                    }
                    if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(io::Error::from_raw_os_error(libc::ECANCELED));
                }
            });
        }
        let mut proc_config = config.clone();
        let factory = self;
        let (spawned, opened) = std::thread::scope(|s| {
            let opener = s.spawn(move || -> Option<Result<PerfSource, SourceError>> {
                let mut pid_r = std::fs::File::from(pid_r);
                let mut go_w = std::fs::File::from(go_w);
                let mut buf = [0u8; 4];
                // EOF: the child never got as far as pre_exec.
                pid_r.read_exact(&mut buf).ok()?;
                let pid = i32::from_ne_bytes(buf) as u32;
                proc_config.target = Target::Process { pid, inherit: true };
                let result = PerfSource::open(
                    &proc_config,
                    factory.ring_pages(&proc_config),
                    Start::OnExec,
                    factory.mappings.clone(),
                );
                let _ = go_w.write_all(&[if result.is_ok() { GO } else { ABORT }]);
                Some(result)
            });
            let spawned = cmd.spawn();
            // The child has exec'd or failed: close our ends of its pipes so
            // the opener cannot block if the child never wrote.
            drop(pid_w);
            drop(go_r);
            (
                spawned,
                opener.join().expect("the session opener thread panicked"),
            )
        });
        match (spawned, opened) {
            (Ok(child), Some(Ok(source))) => Ok((child, Box::new(source))),
            (_, Some(Err(e))) => Err(SpawnError::Source(e)),
            (Err(e), _) if e.kind() == io::ErrorKind::NotFound => Err(SpawnError::NotFound(name)),
            (Err(e), _) => Err(spawn_err(e)),
            (Ok(mut child), None) => {
                // Unreachable in practice: the child ran pre_exec without
                // reporting its pid. Do not leave it running unprofiled.
                let _ = child.kill();
                let _ = child.wait();
                Err(spawn_err(io::Error::other(
                    "the child did not report its pid before exec",
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_lookup() {
        assert!(find_program(
            OsStr::new("sh"),
            Some(OsStr::new("/usr/bin:/bin"))
        ));
        assert!(!find_program(
            OsStr::new("sh"),
            Some(OsStr::new("/nonexistent"))
        ));
        assert!(find_program(OsStr::new("/bin/sh"), None));
        assert!(!find_program(OsStr::new("./no-such-program"), None));
        assert!(!find_program(OsStr::new(""), None));
        // a directory is not a program
        assert!(!find_program(OsStr::new("/usr/bin"), None));
    }

    #[test]
    fn not_found_is_a_sentence_and_runs_nothing() {
        let mut cmd = Command::new("profdev-no-such-command");
        let err = spawn_profiled(&mut cmd, &SessionConfig::system(1000))
            .err()
            .expect("refused");
        assert!(matches!(err, SpawnError::NotFound(_)));
        assert_eq!(
            err.to_string(),
            "command not found: profdev-no-such-command"
        );
    }

    #[test]
    fn frequency_refused_before_spawning() {
        let mut cmd = Command::new("true");
        let err = spawn_profiled(&mut cmd, &SessionConfig::system(20_000))
            .err()
            .expect("refused");
        assert!(
            matches!(err, SpawnError::Source(SourceError::Frequency(_))),
            "{err}"
        );
    }
}
