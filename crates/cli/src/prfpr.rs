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
//! output with exit status 1, byte for byte; a second line on standard
//! error names the file, the reason and what to do
//! (`prfpr: /x/log: No such file or directory; give the path of a log
//! written by prfsnap or prfdc`).
//!
//! The log is read as a stream, one record at a time, so memory stays that
//! of one record (at most `PRF_GETMAX` addresses) whatever the log's
//! length; a FIFO or a device is refused without blocking. Every record is
//! checked against the one before it (`prflog::check_record`): at a torn
//! record (a last append cut short) or a foreign one (garbage, another
//! log's bytes) the intervals before it have been printed, a sentence on
//! standard error names its byte offset and how to drop it, and the exit
//! status is 1. (SVR4's prfpr stopped quietly at a short record and printed
//! garbage for a foreign one, exiting 0.)

use crate::classic;
use profdev_classic::args::prf::PRFPR as SPEC;
use profdev_formats::prflog::{self, PrfLogError};
use profdev_report::prfpr::{self, Namelist, PrfprError, Reporter};
use profdev_symbolize::open::{open_bounded, Follow, OpenError};
use profdev_symbolize::{KernelSymbols, SymbolError};
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::process::ExitCode;

/// SVR4's message on standard output, exactly; then, on standard error,
/// what went wrong and what to do.
fn error(msg: &dyn std::fmt::Display) -> ExitCode {
    println!("error: {msg}");
    ExitCode::from(1)
}

fn error_with_hint(msg: &dyn std::fmt::Display, hint: &str) -> ExitCode {
    let code = error(msg);
    let _ = std::io::stdout().flush();
    eprintln!("prfpr: {hint}");
    code
}

/// An I/O error's reason without Rust's "(os error N)".
fn reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => nix::errno::Errno::from_raw(n).desc().to_string(),
        None => e.to_string(),
    }
}

/// Why the log could not be opened, as a sentence naming it and what to do.
fn open_hint(path: &str, e: &OpenError) -> String {
    let why = match e {
        OpenError::Open { source, .. } | OpenError::Read { source, .. } => reason(source),
        OpenError::NotRegular { kind, .. } => format!("it is a {kind}, not a regular file"),
        other => other.to_string(),
    };
    format!("{path}: {why}; give the path of a log written by prfsnap or prfdc")
}

/// Read up to `buf.len()` bytes, fewer only at end of file.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
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
    // Any regular file, opened without blocking (a FIFO or a device is
    // refused at once); read as a stream, one record at a time, so memory
    // stays that of one record whatever the log's length.
    let file = match open_bounded(Path::new(log), u64::MAX, Follow::Yes) {
        Ok((f, _)) => f,
        Err(e) => return error_with_hint(&PrfprError::CannotOpenData, &open_hint(log, &e)),
    };
    let cutoff = match prfpr::parse_cutoff(cutoff) {
        Ok(c) => c,
        Err(e) => return error(&e),
    };
    let mut input = BufReader::new(file);
    let (header, past_header) = match read_header(&mut input) {
        Ok(h) => h,
        Err(Err(e)) => {
            return error_with_hint(
                &PrfprError::CannotOpenData,
                &format!(
                    "{log}: {}; give the path of a log written by prfsnap or prfdc",
                    reason(&e)
                ),
            )
        }
        Err(Ok(e)) => {
            return error_with_hint(
                &PrfprError::from_log_error(&e),
                &format!("{log}: {e}; is it a log written by prfsnap or prfdc?"),
            )
        }
    };
    let syms = match KernelSymbols::load(Path::new(namelist)) {
        Ok(s) => s,
        Err(SymbolError::Read { source, .. }) => {
            return error_with_hint(
                &PrfprError::CannotOpenNamelist,
                &format!(
                    "{namelist}: {}; give /proc/kallsyms (of the boot that wrote the log), a System.map or a vmlinux",
                    reason(&source)
                ),
            )
        }
        Err(e) => return error(&e),
    };
    let names = Namelist::new(
        syms.all()
            .iter()
            .filter(|s| s.is_text())
            .map(|s| (s.addr, s.name.clone())),
    );
    match print_records(&mut input, &past_header, &header, cutoff, &names) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("prfpr: {log}: {msg}");
            ExitCode::from(1)
        }
    }
}

/// The header, read with no more memory than its fixed part allows, and
/// any bytes read past it (the SVR4 fixed part is shorter than the
/// profdev one): an I/O error (`Err(Err)`) or a format error (`Err(Ok)`).
fn read_header(
    input: &mut BufReader<File>,
) -> Result<(prflog::Header, Vec<u8>), Result<PrfLogError, std::io::Error>> {
    let mut bytes = vec![0u8; prflog::PROFDEV_FIXED_HEADER];
    let got = read_full(input, &mut bytes).map_err(Err)?;
    bytes.truncate(got);
    let len = prflog::header_len(&bytes).map_err(Ok)?;
    let past = if len > bytes.len() {
        let mut rest = vec![0u8; len - bytes.len()];
        let got = read_full(input, &mut rest).map_err(Err)?;
        rest.truncate(got);
        bytes.extend(rest);
        Vec::new()
    } else {
        bytes.split_off(len)
    };
    let (header, _) = prflog::parse_header(&bytes).map_err(Ok)?;
    Ok((header, past))
}

/// Print each interval as its record arrives, checking every record;
/// stop at the first torn or foreign one with a sentence naming its byte
/// offset.
fn print_records(
    input: &mut BufReader<File>,
    past_header: &[u8],
    header: &prflog::Header,
    cutoff: u32,
    names: &Namelist,
) -> Result<(), String> {
    let record_len = header.record_len();
    let mut reporter = Reporter::new(header, cutoff, names, &crate::prfdev::localtime);
    let mut out = std::io::stdout().lock();
    let mut offset = header.byte_len() as u64;
    let mut prev: Option<prflog::Record> = None;
    let mut buf = vec![0u8; record_len];
    let mut stream = past_header.chain(input);
    loop {
        let got = read_full(&mut stream, &mut buf).map_err(|e| {
            format!(
                "cannot read the record at byte offset {offset}: {}",
                reason(&e)
            )
        })?;
        if got == 0 {
            break;
        }
        let checked = if got < record_len {
            Err(PrfLogError::Torn {
                offset,
                len: got as u64,
                record_len: record_len as u64,
            })
        } else {
            let rec = prflog::decode_record(header, &buf);
            prflog::check_record(prev.as_ref(), &rec, offset).map(|()| rec)
        };
        let rec = match checked {
            Ok(rec) => rec,
            Err(e) => {
                let _ = out.flush();
                return Err(format!(
                    "{e}; the intervals before it are printed above; truncate the log to {offset} bytes to drop it and what follows"
                ));
            }
        };
        let text = reporter.push(&rec);
        if out.write_all(text.as_bytes()).is_err() {
            return Ok(()); // stdout closed (prfpr log | head): stop quietly
        }
        prev = Some(rec);
        offset += record_len as u64;
    }
    let _ = out.flush();
    Ok(())
}
