//! `profdev kprof TEXT KPDATA`: Inferno's kprof(10.1) formatter.
//!
//! TEXT is `/proc/kallsyms`, a `System.map` or a `vmlinux`; KPDATA a copy
//! of the kprof device's `kpdata`. Output and messages are the original's
//! (see `profdev_report::kprof`).
//!
//! KPDATA is read as it is formatted, never whole: a regular file no
//! longer than its header allows (`profdev_formats::kpdata::max_len`:
//! about 4 GiB at most), its six header words, then, unless its total is
//! 0 (only the totals line is printed, as the original did, and nothing
//! more is read), the buckets from the first text symbol's to the last
//! one's (normally `_etext`), through a small buffer. Memory and time
//! follow the symbols, not the file: a 4 GiB sparse KPDATA costs what a
//! small one does.
//!
//! A KPDATA whose header is not a kpdata file's gets the original's
//! message (`kprof: data file too short`), kept byte for byte, and a
//! second line naming the file and its length.

use crate::classic;
use profdev_classic::args::kprof::SPEC;
use profdev_formats::kpdata::{self, Header, KpdataError};
use profdev_report::kprof::{format_stream, Report};
use profdev_symbolize::KernelSymbols;
use std::ffi::OsString;
use std::io::Write;
use std::ops::Range;
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "kprof: usage: kprof text data";

/// The command line as data: `--help`, the man page and the completions.
pub fn command() -> clap::Command {
    classic::command(&SPEC)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    if classic::help_asked(&args) {
        print!("{}", classic::help(&SPEC));
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

/// An open kpdata file: a regular file (a FIFO or a device is refused
/// without blocking), no longer than its header allows
/// ([`profdev_formats::kpdata::max_len`]), its header checked; nothing
/// but the header has been read.
struct KpdataFile {
    file: std::fs::File,
    header: Header,
}

fn open_kpdata(data: &Path) -> Result<KpdataFile, String> {
    use profdev_symbolize::open::{open_bounded, Follow, OpenError};
    use std::io::Read;
    let (file, size) = open_bounded(data, u64::MAX, Follow::Yes).map_err(|e| match e {
        OpenError::Open { path, source } => format!("can't open {}: {source}\n", path.display()),
        e => format!("{e}\n"),
    })?;
    let mut prefix = Vec::new();
    (&file)
        .take(kpdata::HEADER_LEN as u64)
        .read_to_end(&mut prefix)
        .map_err(|e| cant_read(data, e))?;
    let max = kpdata::max_len(&prefix);
    if size > max {
        return Err(format!(
            "{}: {}\n",
            data.display(),
            KpdataError::TooLong { len: size, max }
        ));
    }
    // The classic message, kept byte for byte, then a line of profdev's
    // naming the file (the original never said which file it was).
    let which = || {
        format!(
            "kprof: {} ({size} bytes) is not a kpdata file as the kprof device writes it \
             (a copy of its kpdata, or profdev sample's DIR/kpdata)\n",
            data.display()
        )
    };
    let header = match Header::parse(&prefix, size) {
        // The original's message already ended in a newline, and its error
        // helper added another: two newlines, as it printed.
        Err(e @ KpdataError::SampleSize { .. }) => return Err(format!("{e}\n\n{}", which())),
        Err(e) => return Err(format!("{e}\n{}", which())),
        Ok(h) => h,
    };
    Ok(KpdataFile { file, header })
}

fn cant_read(data: &Path, e: std::io::Error) -> String {
    format!("can't read {}: {e}\n", data.display())
}

/// The words `range` of the file, read in order through a small buffer;
/// they end early where the file does.
fn words<'a>(
    file: &'a std::fs::File,
    data: &'a Path,
    range: Range<u64>,
) -> Result<impl Iterator<Item = Result<u32, String>> + 'a, String> {
    use std::io::{BufReader, Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(4 * range.start))
        .map_err(|e| cant_read(data, e))?;
    let mut r = BufReader::with_capacity(1 << 16, f.take(4 * (range.end - range.start)));
    let mut ended = false;
    Ok(std::iter::from_fn(move || {
        if ended {
            return None;
        }
        let mut w = [0u8; 4];
        match r.read_exact(&mut w) {
            Ok(()) => Some(Ok(u32::from_be_bytes(w))),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                ended = true;
                None
            }
            Err(e) => {
                ended = true;
                Some(Err(cant_read(data, e)))
            }
        }
    }))
}

/// Read, check and format; an error is the text after "kprof: ", newline
/// included. The file is read as it is formatted: its header, then only
/// the buckets the report charges (none when its total is 0), so memory
/// and time are bounded by the symbols, not by the file's length.
pub fn run(text: &Path, data: &Path) -> Result<Report, String> {
    let kp = open_kpdata(data)?;
    let syms = KernelSymbols::load(text).map_err(|e| format!("{e}\n"))?;
    let list: Vec<(u64, &str)> = syms
        .text_symbols()
        .into_iter()
        .map(|s| (s.addr, s.name.as_str()))
        .collect();
    format_stream(&list, &kp.header, |r| words(&kp.file, data, r))
}
