//! `profdev prfpr file [cutoff [namelist]]`: print a prf log
//! (profiler(1M)).
//!
//! Reads a log written by prfdc or prfsnap — profdev's 64-bit layout or
//! SVR4's i386 layout — and prints, for each interval between records, the
//! share of ticks of every counter above `cutoff` percent (default 1),
//! named after the nearest code symbol of `namelist` (default
//! `/proc/kallsyms`: a log's addresses belong to the boot that wrote it).
//! Times are local (`TZ`). Output and messages are SVR4's (see
//! `profdev_report::prfpr`): errors print `error: <message>` on standard
//! output with exit status 1.

use profdev_formats::prflog;
use profdev_report::prfpr::{self, Namelist, PrfprError};
use profdev_symbolize::{KernelSymbols, SymbolError};
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

fn error(msg: &dyn std::fmt::Display) -> ExitCode {
    println!("error: {msg}");
    ExitCode::from(1)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("usage: prfpr file [cutoff [namelist]]\n");
        println!("Print a prf log: per interval, each kernel function's share of the ticks above");
        println!("cutoff percent (default 1), named from namelist (default /proc/kallsyms).");
        return ExitCode::SUCCESS;
    }
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let (log, cutoff, namelist) = match args.as_slice() {
        [log] => (log, "1", "/proc/kallsyms"),
        [log, cutoff] => (log, cutoff.as_str(), "/proc/kallsyms"),
        [log, cutoff, namelist] => (log, cutoff.as_str(), namelist.as_str()),
        _ => return error(&PrfprError::Usage),
    };
    let Ok(bytes) = std::fs::read(log) else {
        return error(&PrfprError::CannotOpenData);
    };
    let cutoff = match prfpr::parse_cutoff(cutoff) {
        Ok(c) => c,
        Err(e) => return error(&e),
    };
    let log = match prflog::parse(&bytes) {
        Ok(l) => l,
        Err(e) => return error(&PrfprError::from_log_error(&e)),
    };
    let syms = match KernelSymbols::load(Path::new(namelist)) {
        Ok(s) => s,
        Err(SymbolError::Read { .. }) => return error(&PrfprError::CannotOpenNamelist),
        Err(e) => return error(&e),
    };
    let names = Namelist::new(
        syms.all()
            .iter()
            .filter(|s| s.is_text())
            .map(|s| (s.addr, s.name.clone())),
    );
    let text = prfpr::report(&log, cutoff, &names, &crate::prfdev::localtime);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    ExitCode::SUCCESS
}
