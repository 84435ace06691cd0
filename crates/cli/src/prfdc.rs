//! `profdev prfdc [-f DEVICE] [-u SECONDS] [-n COUNT] file [period [off_hour]]`:
//! collect prf counters into a log every period, in the background
//! (profiler(1M)).
//!
//! As SVR4's prfdc: `period` is in minutes (default 10), `off_hour` an hour
//! of the day (24 never comes), both read with `atoi`. prfdc refuses an
//! existing file, creates the log (mode 0600: it holds kernel addresses), switches
//! profiling on, and goes into the background: the command prints the
//! collector's process id on standard error and returns at once, and the
//! collector writes the header and a first record immediately, then one
//! record every period, and exits after writing a record whose local hour
//! is `off_hour`. The log is profdev's 64-bit layout (see
//! `profdev_formats::prflog`).
//!
//! Without `off_hour`, the collector runs until it is killed or has written
//! `-n` records. SVR4's default `off_hour` was 17 (the end of a working
//! day): started at 17:xx, its collector stopped after one record, and
//! started at 9:00 it ran all day. profdev drops that default on purpose.
//!
//! Example:
//!
//! ```text
//! $ profdev prfdc -u 1 /tmp/log 5
//! prfdc: collecting into /tmp/log every 5 s in the background: pid 4242 (stop it with kill 4242)
//! $ kill 4242
//! ```
//!
//! profdev adds two options: `-u SECONDS` sets the period's unit (60 by
//! default; `-u 1` makes the period count seconds, for tests and short
//! experiments), and `-n COUNT` stops the collector after COUNT records.
//!
//! The log holds kernel addresses, so profdev creates it mode 0600 (SVR4:
//! 0666 less the umask), with `O_CREAT|O_EXCL|O_NOFOLLOW` through
//! `profdev_safefile`: a symbolic link at its name is an existing file.
//! Each record is one write(2); one that does not fit (a full disk) ends
//! the collector with an error, and its partial bytes are cut off again.
//!
//! Errors go to standard error as `prfdc: <message>`, exit status 1:
//! `usage: prfdc  logfile  [ rate  [ off_hour ] ]`, `invalid sampling
//! rate`, `cannot open …`, `existing file would be truncated`, `cannot
//! creat log file`, `cannot activate profiling`. SVR4 wrote only six bytes
//! of `"prfdc: "`, losing the space; profdev writes the space.

use crate::classic;
use crate::output;
use crate::prfdev::{self, Access, PrfDev};
use crate::prfsnap::{activate, now};
use profdev_classic::args::prf::PRFDC as SPEC;
use profdev_formats::prflog::{Header, Layout, Record};
use profdev_safefile::AppendFile;
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: prfdc  logfile  [ rate  [ off_hour ] ]";

fn error(msg: &str) -> ExitCode {
    eprintln!("prfdc: {msg}");
    ExitCode::from(1)
}

/// What the collector does, once the command line is read.
struct Plan {
    period: Duration,
    /// The hour of day whose record is the last; None: no such hour.
    off_hour: Option<i64>,
    count: Option<u64>,
}

impl Plan {
    /// Is the collector done after writing its `written`th record, taken
    /// in local hour `hour`?
    fn done(&self, written: u64, hour: i64) -> bool {
        self.count.is_some_and(|c| written >= c) || self.off_hour == Some(hour)
    }
}

/// The command line as data: `--help`, the man page and the completions.
pub fn command() -> clap::Command {
    classic::command(&SPEC)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    if classic::help_asked(&args) {
        print!("{}", classic::help(&SPEC));
        return ExitCode::SUCCESS;
    }
    let Ok(opts) = classic::Opts::parse(&SPEC, args) else {
        return error(USAGE);
    };
    let (log, rate, off_hour) = match opts.operands.as_slice() {
        [log] => (log, 10, None),
        [log, rate] => (log, prfdev::atoi(rate), None),
        [log, rate, off] => (log, prfdev::atoi(rate), Some(prfdev::atoi(off))),
        _ => return error(USAGE),
    };
    let unit = match opts.get('u').map(prfdev::atoi) {
        None => 60,
        Some(u) if u > 0 => u,
        Some(_) => {
            return error("invalid period unit (-u): it must be a positive number of seconds")
        }
    };
    let count = match opts.get('n').map(prfdev::atoi) {
        None => None,
        Some(n) if n > 0 => Some(n as u64),
        Some(_) => return error("invalid record count (-n): it must be positive"),
    };
    if rate <= 0 {
        return error("invalid sampling rate");
    }
    let plan = Plan {
        period: Duration::from_secs(rate.saturating_mul(unit) as u64),
        off_hour,
        count,
    };
    let path = prfdev::device_path("prfdc", opts.get('f'));
    let mut dev = match PrfDev::open(&path, Access::Read) {
        Ok(d) => d,
        Err(e) => return error(&format!("cannot open {}: {e}", path.display())),
    };
    // O_CREAT|O_EXCL|O_NOFOLLOW: anything at that name, a symbolic link
    // too, is an existing file.
    let mut file = match profdev_safefile::create_append(log, output::KERNEL_MODE) {
        Ok(f) => f,
        Err(e) if e.already_exists() => return error("existing file would be truncated"),
        Err(e) => return error(&format!("cannot creat log file: {e}")),
    };
    if let Err(msg) = activate(&dev) {
        return error(&msg);
    }
    // SAFETY: fork has no preconditions; the process is single-threaded
    // here (no thread has been started), so the child may go on running
    // ordinary Rust code.
    match unsafe { libc::fork() } {
        -1 => return error(&format!("cannot fork: {}", std::io::Error::last_os_error())),
        0 => {}
        pid => {
            eprintln!(
                "prfdc: collecting into {} every {} s in the background: pid {pid} (stop it with kill {pid})",
                log,
                plan.period.as_secs()
            );
            return ExitCode::SUCCESS;
        }
    }
    // SAFETY: setsid has no preconditions; in the child of a fork it cannot
    // fail with EPERM (the child is no process group leader).
    unsafe { libc::setsid() };
    // The collector never reads or prints: let go of the caller's stdin and
    // stdout, so that `pid=$(prfdc …)` or `prfdc … | cat` returns at once.
    // It keeps stderr for its errors.
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto descriptors 0 and 1, which this process owns;
        // `null` stays open until both are done.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    match collect(&mut dev, &mut file, &plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => error(&msg),
    }
}

/// The collector: a record now, then one per period.
fn collect(dev: &mut PrfDev, file: &mut AppendFile, plan: &Plan) -> Result<(), String> {
    let n = dev
        .size()
        .map_err(|e| format!("cannot read the table size: {e}"))? as usize;
    let start = Instant::now();
    let mut header: Option<Header> = None;
    let mut written = 0u64;
    loop {
        let time = now();
        let (addrs, counters) = dev
            .snapshot(n)
            .map_err(|e| format!("cannot read the profiler: {e}"))?;
        let mut bytes = Vec::new();
        let h = match &header {
            Some(h) => h,
            None => {
                let h = Header::new(Layout::Profdev64, 2, addrs).map_err(|e| e.to_string())?;
                bytes.extend(h.encode().map_err(|e| e.to_string())?);
                header.insert(h)
            }
        };
        bytes.extend(
            h.encode_record(&Record { time, counters })
                .map_err(|e| e.to_string())?,
        );
        // One write(2) per record: whole in the log or cut off again.
        file.append(&bytes).map_err(|e| e.to_string())?;
        written += 1;
        if plan.done(written, i64::from(prfdev::localtime(time).hour)) {
            return Ok(());
        }
        let elapsed = plan
            .period
            .saturating_mul(u32::try_from(written).unwrap_or(u32::MAX));
        match start.checked_add(elapsed) {
            Some(next) => std::thread::sleep(next.saturating_duration_since(Instant::now())),
            // A period beyond the clock's range: the next record never comes.
            None => loop {
                std::thread::sleep(Duration::from_secs(u64::from(u32::MAX)));
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(off_hour: Option<i64>, count: Option<u64>) -> Plan {
        Plan {
            period: Duration::from_secs(60),
            off_hour,
            count,
        }
    }

    #[test]
    fn without_off_hour_no_hour_ends_the_collector() {
        // The seed's default stopped the collector at 17:xx after one record.
        let p = plan(None, None);
        for hour in 0..24 {
            assert!(!p.done(1, hour), "hour {hour}");
            assert!(!p.done(1000, hour), "hour {hour}");
        }
    }

    #[test]
    fn off_hour_ends_the_collector_in_that_hour_only() {
        let p = plan(Some(17), None);
        assert!(p.done(1, 17));
        assert!(!p.done(1, 16) && !p.done(5, 18));
        // 24 never comes.
        let p = plan(Some(24), None);
        assert!((0..24).all(|h| !p.done(1, h)));
    }

    #[test]
    fn count_ends_the_collector() {
        let p = plan(None, Some(3));
        assert!(!p.done(2, 10));
        assert!(p.done(3, 10));
        let p = plan(Some(17), Some(3));
        assert!(p.done(1, 17) && p.done(3, 9) && !p.done(2, 9));
    }
}
