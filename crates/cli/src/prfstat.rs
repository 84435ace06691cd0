//! `profdev prfstat [-f DEVICE] [on|off]`: switch the prf device and
//! report its state (profiler(1M)).
//!
//! As SVR4's prfstat: more than one operand prints `usage: prfstat  [ on
//! ]  [ off ]`, a word other than `on` or `off` prints `eh?`, a device
//! that cannot be opened `cannot open …` (all on standard output, exit
//! status 1; after `eh?`, profdev adds a line on standard error saying
//! what to say). SVR4 opened the device before it looked at the operands;
//! profdev looks first, since opening the device in the mount directory
//! may start a device server (see Bugs).
//! Then it prints `profiling enabled` or `profiling disabled`, and, when a
//! table is loaded, `N kernel text addresses`. If switching on fails (the
//! sampling engine cannot start), the reason goes to standard error; the
//! report on standard output says what the device is.
//!
//! # Bugs
//!
//! A bad operand with a device that cannot be opened prints `eh?` (or the
//! usage line), where SVR4's prfstat printed `cannot open /dev/prf`: the
//! operands are checked first, so that `prfstat xx` starts no device
//! server.

use crate::classic;
use crate::prfdev::{self, Access, PrfDev};
use profdev_classic::args::prf::PRFSTAT as SPEC;
use profdev_report::prfpr::prfstat_report;
use std::ffi::OsString;
use std::process::ExitCode;

const USAGE: &str = "usage: prfstat  [ on ]  [ off ]";

fn fail(msg: &str) -> ExitCode {
    println!("{msg}");
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
        return fail(USAGE);
    };
    // The operands are checked before the device is opened, which may
    // start a device server: a bad word starts nothing.
    let switch = match opts.operands.as_slice() {
        [] => None,
        [word] if word == "on" || word == "off" => Some(word == "on"),
        [word] => {
            let code = fail("eh?");
            eprintln!("prfstat: {word:?} is neither on nor off: say prfstat on, prfstat off, or prfstat alone for the state");
            return code;
        }
        _ => return fail(USAGE),
    };
    let path = prfdev::device_path("prfstat", opts.get('f'));
    let dev = match PrfDev::open(&path, Access::ReadWrite) {
        Ok(d) => d,
        Err(e) => return fail(&format!("cannot open {}: {e}", path.display())),
    };
    if let Some(on) = switch {
        if let Err(e) = dev.set_state(on) {
            let word = if on { "on" } else { "off" };
            eprintln!("prfstat: cannot switch profiling {word}: {e}");
        }
    }
    let status = match dev.status() {
        Ok(s) => s,
        Err(e) => {
            return fail(&format!(
                "{} is not a prf device (PRF_GETSTATUS: {e})",
                path.display()
            ))
        }
    };
    let size = dev.size().unwrap_or(0);
    print!("{}", prfstat_report(status, i64::from(size)));
    ExitCode::SUCCESS
}
