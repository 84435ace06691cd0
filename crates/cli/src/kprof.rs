//! `profdev kprof TEXT KPDATA`: Inferno's kprof(10.1) formatter.
//!
//! TEXT is `/proc/kallsyms`, a `System.map` or a `vmlinux`; KPDATA a copy
//! of the kprof device's `kpdata`. Output and messages are the original's
//! (see `profdev_report::kprof`).

use profdev_formats::kpdata::{self, Kpdata, KpdataError};
use profdev_report::kprof::{format, Report};
use profdev_symbolize::KernelSymbols;
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "kprof: usage: kprof text data";

/// The command line as data: `--help`, the man page and the completions
/// come from it.
pub fn command() -> clap::Command {
    use clap::{Arg, ValueHint};
    clap::Command::new("kprof")
        .override_usage("kprof text data")
        .about(
            "Format a kpdata histogram (Inferno 4e layout) against the kernel symbols in \
             text (/proc/kallsyms, a System.map or a vmlinux): total, in-text and outside \
             ticks, then milliseconds and percentage of in-text ticks per function.",
        )
        .arg(
            Arg::new("text")
                .required(true)
                .value_hint(ValueHint::FilePath)
                .help("/proc/kallsyms, a System.map or a vmlinux"),
        )
        .arg(
            Arg::new("data")
                .required(true)
                .value_hint(ValueHint::FilePath)
                .help("A copy of the kprof device's kpdata"),
        )
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{}", crate::cmdline::classic_help(command()));
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

/// Read a kpdata file: a regular file (a FIFO or a device is refused
/// without blocking), no longer than its header allows
/// ([`profdev_formats::kpdata::max_len`]), checked before anything but the
/// header is read.
fn read_kpdata(data: &Path) -> Result<Vec<u8>, String> {
    use profdev_symbolize::open::{open_bounded, Follow, OpenError};
    use std::io::Read;
    let (file, size) = open_bounded(data, u64::MAX, Follow::Yes).map_err(|e| match e {
        OpenError::Open { path, source } => format!("can't open {}: {source}\n", path.display()),
        e => format!("{e}\n"),
    })?;
    let cant_read = |e: std::io::Error| format!("can't read {}: {e}\n", data.display());
    let mut file = file;
    let mut bytes = Vec::new();
    (&mut file)
        .take(kpdata::HEADER_LEN as u64)
        .read_to_end(&mut bytes)
        .map_err(cant_read)?;
    let max = kpdata::max_len(&bytes);
    if size > max {
        return Err(format!(
            "{}: {}\n",
            data.display(),
            KpdataError::TooLong { len: size, max }
        ));
    }
    // The file may grow while it is read: never past the bound.
    file.take(max + 1 - bytes.len() as u64)
        .read_to_end(&mut bytes)
        .map_err(cant_read)?;
    if bytes.len() as u64 > max {
        return Err(format!(
            "{}: {}\n",
            data.display(),
            KpdataError::TooLong {
                len: bytes.len() as u64,
                max
            }
        ));
    }
    Ok(bytes)
}

/// Read, check and format; an error is the text after "kprof: ", newline
/// included.
pub fn run(text: &Path, data: &Path) -> Result<Report, String> {
    let bytes = read_kpdata(data)?;
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
