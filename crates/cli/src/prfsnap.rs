//! `profdev prfsnap [-f DEVICE] file`: append one snapshot of the prf
//! counters to a log (profiler(1M)).
//!
//! As SVR4's prfsnap: the log is opened for appending (created if absent),
//! profiling is switched on, and the counters
//! are read; an empty log first gets the header (the address table). The
//! log is profdev's 64-bit layout (see `profdev_formats::prflog`), with the
//! user and idle counters. Errors go to standard error as
//! `prfsnap: <message>`, exit status 1: `usage: prfsnap  logfile`,
//! `cannot open …`, `cannot creat log file`, `cannot activate profiling`
//! (also when no table is loaded: run prfld). profdev adds one check SVR4
//! lacked: appending to a log written for another address table (or in
//! the SVR4 layout) is refused, since prfpr would misread every record.
//!
//! The log holds kernel addresses, so profdev creates it mode 0600 (SVR4:
//! 0666 less the umask), and opens it as `profdev_safefile` appends: never
//! through a symbolic link, and only a regular file of the user running
//! prfsnap with one link (anything else is refused with a sentence). Each
//! snapshot is one write(2); one that does not fit (a full disk) is an
//! error, and its partial bytes are cut off again.

use crate::classic;
use crate::output;
use crate::prfdev::{self, Access, PrfDev};
use profdev_classic::args::prf::PRFSNAP as SPEC;
use profdev_formats::prflog::{self, Header, Layout, Record};
use profdev_report::prfpr::PRF_ON;
use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

fn error(msg: &str) -> ExitCode {
    eprintln!("prfsnap: {msg}");
    ExitCode::from(1)
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
        return error("usage: prfsnap  logfile");
    };
    let [log] = opts.operands.as_slice() else {
        return error("usage: prfsnap  logfile");
    };
    let path = prfdev::device_path("prfsnap", opts.get('f'));
    let mut dev = match PrfDev::open(&path, Access::Read) {
        Ok(d) => d,
        Err(e) => return error(&format!("cannot open {}: {e}", path.display())),
    };
    match snap(&mut dev, Path::new(log)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => error(&msg),
    }
}

/// Switch on, read, append. Shared with prfdc's first steps.
fn snap(dev: &mut PrfDev, log: &Path) -> Result<(), String> {
    let mut file = profdev_safefile::open_append(log, output::KERNEL_MODE)
        .map_err(|e| format!("cannot creat log file: {e}"))?;
    activate(dev)?;
    let n = dev
        .size()
        .map_err(|e| format!("cannot read the table size: {e}"))? as usize;
    let time = now();
    let (addrs, counters) = dev
        .snapshot(n)
        .map_err(|e| format!("cannot read the profiler: {e}"))?;
    let header = Header::new(Layout::Profdev64, 2, addrs).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    // The header is read through the descriptor appended to, never the
    // path again, and only as far as this table's header reaches.
    let existing = read_head(file.file(), header.byte_len())
        .map_err(|e| format!("cannot read log file: {e}"))?;
    if existing.is_empty() {
        bytes.extend(header.encode().map_err(|e| e.to_string())?);
    } else if !same_table(&existing, &header) {
        return Err(format!(
            "{} was written for a different address table; use a new log file",
            log.display()
        ));
    }
    bytes.extend(
        header
            .encode_record(&Record { time, counters })
            .map_err(|e| e.to_string())?,
    );
    // One write(2): the record (with the header, into an empty log) is
    // whole in the log or not there at all.
    file.append(&bytes).map_err(|e| e.to_string())
}

/// Up to `len` bytes from the start of `file`.
fn read_head(file: &std::fs::File, len: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    let mut r = file;
    std::io::Seek::seek(&mut r, std::io::SeekFrom::Start(0))?;
    r.take(len as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// Switch profiling on; fails unless the device says it is on.
pub fn activate(dev: &PrfDev) -> Result<(), String> {
    let on = dev.set_state(true).and_then(|()| dev.status());
    match on {
        Ok(s) if s & PRF_ON != 0 => Ok(()),
        Ok(_) => Err("cannot activate profiling".into()),
        Err(e) => Err(format!("cannot activate profiling: {e}")),
    }
}

fn same_table(existing: &[u8], header: &Header) -> bool {
    matches!(prflog::parse_header(existing), Ok((h, _)) if h == *header)
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
