//! The live leak scan of a running process (`profdev mprof -p PID
//! --scan`): every thread stopped with ptrace, the requester's right
//! checked again on the stopped process, glibc's heap and the roots read
//! through `/proc/PID/mem` by `profdev_mprof::scan` (read-only), and the
//! process let go as it was (registers untouched, detached).
//!
//! The process is held only while the heap is walked and copied
//! (`profdev_mprof::scan::copy`); the mark runs on the copy after the
//! detach (in a process carrying mprof's library, before it: the entries
//! of mprof's block table for the unreachable blocks are read too). The
//! pause is bounded: reads stop [`MAX_PAUSE`] after the first
//! thread was stopped (the scan then gives up and the process is let
//! go), so the process is held at most [`MAX_PAUSE`] plus one read of at
//! most 1 MiB (with mprof's library, one mark of what was copied) and the
//! detach. The pause is measured and returned.

use crate::memory::{inject_error, recheck};
use profdev_dev::access::Permit;
use profdev_dev::DevError;
use profdev_mprof::scan::{Copied, Limits, Memory, Scan, ScanError, ThreadRoots};
use std::time::{Duration, Instant};

/// The longest a scan holds the process (see the module doc).
pub const MAX_PAUSE: Duration = Duration::from_secs(5);

/// A scan done, and how long the process was held.
#[derive(Debug)]
pub struct Scanned {
    /// What was found.
    pub scan: Scan,
    /// From the first `PTRACE_INTERRUPT` to the detach.
    pub pause: Duration,
}

/// `/proc/PID/mem` of the stopped process, until the deadline.
struct Live<'a> {
    target: &'a profdev_inject::Target,
    deadline: Instant,
}

impl Memory for Live<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        !self.expired() && self.target.read_bytes(addr, buf).is_ok()
    }

    fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// The sentence for a scan that gave up.
fn scan_error(pid: u32, e: ScanError) -> DevError {
    match e {
        ScanError::NotGlibc(why) => {
            DevError::NoDevice(format!("process {pid} cannot be scanned: {why}"))
        }
        ScanError::Expired => DevError::NoDevice(format!(
            "the scan of process {pid} gave up after {} s, the longest it holds a process (its \
             heap is too large); the process runs on as before",
            MAX_PAUSE.as_secs()
        )),
        e => DevError::NoDevice(format!("process {pid} was not scanned: {e}")),
    }
}

/// Stop process `pid`, scan its heap for unreachable blocks, let it go.
/// `permit` (the requester's right to ptrace it, held by pidfd) is
/// checked again once every thread is stopped, before anything is read:
/// a process that exec'd a set-id program since is let go untouched.
/// Refused: ESRCH no such process, EPERM not allowed, EBUSY traced by
/// another, ENXIO a process without glibc's malloc or whose heap does not
/// parse in [`ATTEMPTS`] stops (the sentence says which). The pause
/// returned is the last stop's.
pub fn scan_process(pid: u32, permit: Option<Permit>) -> Result<Scanned, DevError> {
    let mut attempt = 1;
    loop {
        let (copied, pause) = copy_stopped(pid, permit.as_ref())?;
        match copied {
            // A thread stopped inside malloc may leave a list or a header
            // half updated: once running on, it finishes; try again.
            Err(ScanError::Corrupt { .. }) if attempt < ATTEMPTS => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(scan_error(pid, e)),
            // Let go: the mark works on the copy.
            Ok(copied) => {
                return Ok(Scanned {
                    scan: profdev_mprof::scan::scan_copy(&copied),
                    pause,
                })
            }
        }
    }
}

/// A heap that does not parse is copied again, this many times in all.
pub const ATTEMPTS: u32 = 3;

/// Stop `pid`, check `permit` again, copy what the scan needs, let go;
/// the copy (or why not) and how long the process was held.
fn copy_stopped(
    pid: u32,
    permit: Option<&Permit>,
) -> Result<(Result<Copied, ScanError>, Duration), DevError> {
    profdev_inject::on_tracer_thread(|| {
        let started = Instant::now();
        let mut t = profdev_inject::Target::attach(pid)?;
        recheck(permit, pid)?;
        // Read while it is stopped: its mappings cannot change now.
        let maps = profdev_inject::maps(pid)?;
        let mut threads = Vec::new();
        for tid in t.threads() {
            let r = t.registers(tid)?;
            threads.push(ThreadRoots {
                tid,
                sp: r.sp,
                fs_base: r.fs_base,
                registers: r.words,
            });
        }
        let live = Live {
            target: &t,
            deadline: started + MAX_PAUSE,
        };
        let copied = profdev_mprof::scan::copy(&live, &maps, &threads, Limits::DEFAULT);
        drop(t);
        Ok::<_, profdev_inject::InjectError>((copied, started.elapsed()))
    })
    .map_err(|e| inject_error(pid, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_itself_and_no_process() {
        assert!(matches!(
            scan_process(std::process::id(), None),
            Err(DevError::NotPermitted(_))
        ));
        assert!(matches!(
            scan_process(u32::MAX, None),
            Err(DevError::NoProcess(_))
        ));
    }

    #[test]
    fn sentences() {
        let e = scan_error(7, ScanError::NotGlibc("it maps no glibc".into()));
        assert_eq!(
            e.to_string(),
            DevError::NoDevice("process 7 cannot be scanned: it maps no glibc".into()).to_string()
        );
        assert!(scan_error(7, ScanError::Expired)
            .to_string()
            .contains("gave up after 5 s"));
    }
}
