//! `profdev kprof TEXT KPDATA`: Inferno's kprof(10.1) formatter.
//!
//! TEXT is `/proc/kallsyms`, a `System.map` or a `vmlinux`; KPDATA a copy
//! of the kprof device's `kpdata`. Output and messages are the original's
//! (see `profdev_report::kprof`).

use profdev_formats::kpdata::{Kpdata, KpdataError};
use profdev_report::kprof::{format, Report};
use profdev_symbolize::KernelSymbols;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "kprof: usage: kprof text data";

pub fn main(args: Vec<OsString>) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}\n\nFormat a kpdata histogram (Inferno 4e layout) against the kernel symbols in");
        println!("text (/proc/kallsyms, a System.map or a vmlinux): total, in-text and outside");
        println!("ticks, then milliseconds and percentage of in-text ticks per function.");
        return ExitCode::SUCCESS;
    }
    let [text, data] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(1);
    };
    match run(Path::new(text), Path::new(data)) {
        Ok(report) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(report.text.as_bytes());
            let _ = out.flush();
            match report.error {
                None => ExitCode::SUCCESS,
                Some(e) => {
                    eprintln!("kprof: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Err(msg) => {
            eprint!("kprof: {msg}");
            ExitCode::from(1)
        }
    }
}

/// Read, check and format; an error is the text after "kprof: ", newline
/// included.
pub fn run(text: &Path, data: &Path) -> Result<Report, String> {
    let bytes = std::fs::read(data).map_err(|e| format!("can't open {}: {e}\n", data.display()))?;
    let kp = match Kpdata::parse(&bytes) {
        // The original's message already ended in a newline, and its error
        // helper added another: two newlines, as it printed.
        Err(e @ KpdataError::SampleSize { .. }) => return Err(format!("{e}\n\n")),
        Err(e) => return Err(format!("{e}\n")),
        Ok(k) => k,
    };
    let syms = KernelSymbols::load(text).map_err(|e| format!("{e}\n"))?;
    let list: Vec<(u64, &str)> = syms
        .text_symbols()
        .into_iter()
        .map(|s| (s.addr, s.name.as_str()))
        .collect();
    Ok(format(&list, &kp))
}
