//! The CPU time of a profiled command: what a private run's rate is
//! measured against.
//!
//! A session on a process tree samples its tasks' CPU time, not the
//! wall clock: a program with two busy threads gets twice the samples of
//! one in the same second, and one that sleeps gets none. So `prof` and
//! `gmon` state their rate as samples per second of CPU time of the tasks
//! they sampled, in the modes they sampled (user time for a user-mode
//! session). That time comes from the kernel's own accounting:
//!
//! * while CMD runs, from `/proc/PID/stat` ([`of_process`]): CMD's user
//!   and system time (every thread, exited ones included) and that of the
//!   children it has waited for;
//! * once CMD is reaped, from `wait4`'s resource usage
//!   ([`crate::job::Job::cpu_time`]): the same, final.
//!
//! Descendants CMD did not wait for (daemons, orphans) are not counted
//! there, as time(1) does not count them.

use std::time::Duration;

/// CPU time, split by mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTime {
    /// Time in user mode.
    pub user: Duration,
    /// Time in kernel mode on the tasks' behalf.
    pub system: Duration,
}

impl CpuTime {
    /// From a `struct rusage` (`wait4`, `getrusage`).
    pub fn from_rusage(r: &libc::rusage) -> CpuTime {
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        CpuTime {
            user: tv(r.ru_utime),
            system: tv(r.ru_stime),
        }
    }
}

/// Process `pid`'s CPU time and that of the children it has waited for,
/// from `/proc/PID/stat`; `None` once it is gone.
pub fn of_process(pid: u32) -> Option<CpuTime> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // SAFETY: sysconf only queries a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    parse_stat(&text, u64::try_from(ticks).ok().filter(|&t| t > 0)?)
}

/// utime + cutime and stime + cstime of a `/proc/PID/stat` line, in
/// `ticks_per_second`.
fn parse_stat(text: &str, ticks_per_second: u64) -> Option<CpuTime> {
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself: the fields that follow start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 to 17 of the line: utime stime cutime cstime; `rest`
    // starts at field 3.
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    let (utime, stime) = (field(14)?, field(15)?);
    let (cutime, cstime) = (field(16)?, field(17)?);
    let time = |t: u64| Duration::from_nanos(t.saturating_mul(1_000_000_000) / ticks_per_second);
    Some(CpuTime {
        user: time(utime + cutime),
        system: time(stime + cstime),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_user_and_system_time() {
        let line = "4242 (a (b) c) R 1 4242 4242 0 -1 4194304 100 0 0 0 250 30 12 8 20 0 2 0 \
                    1000 1000 100 18446744073709551615";
        assert_eq!(
            parse_stat(line, 100),
            Some(CpuTime {
                user: Duration::from_millis(2620),
                system: Duration::from_millis(380),
            })
        );
        assert_eq!(parse_stat("4242 (x) R 1", 100), None);
    }

    #[test]
    fn this_process_has_spent_some_time() {
        // 50 ms of this thread's CPU time (not of the wall clock, which a
        // loaded machine may spend elsewhere): several ticks of the stat line.
        profdev_testkit::burn_cpu(Duration::from_millis(50));
        let t = of_process(std::process::id()).expect("our own stat");
        assert!(t.user + t.system > Duration::ZERO, "{t:?}");
        assert_eq!(of_process(u32::MAX), None);
    }
}
