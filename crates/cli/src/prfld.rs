//! `profdev prfld [-f DEVICE] [namelist]`: load the prf device with the
//! kernel's text addresses (profiler(1M)).
//!
//! The namelist is `/proc/kallsyms` by default (the running kernel, its
//! modules included), or a `System.map` or `vmlinux`. prfld takes the
//! address of every code symbol (types `T t W w`, without the
//! `__pfx_`/`__cfi_` padding labels of recent kernels), once per address,
//! puts 0 in front and sorts them, as SVR4's prfld did, and writes the
//! table to the device in one write. Messages go to standard output as
//! `error: <message>`, exit status 1, with SVR4's words for the device's
//! errors:
//!
//! | errno | message |
//! |---|---|
//! | ENOSPC | `insufficient space in system for addresses` |
//! | E2BIG | `unaligned data or insufficient addresses` |
//! | EBUSY | `profiler is enabled` |
//! | EINVAL | `text addresses not sorted properly` |
//! | other | `cannot load profiler addresses` |
//!
//! More symbols than `PRF_GETMAX` allows: `too many text symbols`.
//!
//! Those lines are SVR4's, byte for byte; after each of the device's errors
//! and `too many text symbols`, profdev adds a second line on standard
//! error, `prfld: …`, that says what to do (for EBUSY: switch profiling
//! off with `prfstat off` first).

use crate::classic;
use crate::prfdev::{self, Access, PrfDev};
use profdev_classic::args::prf::PRFLD as SPEC;
use profdev_symbolize::KernelSymbols;
use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage: prfld [-f device_name] [namelist]";

fn error(msg: &str) -> ExitCode {
    println!("error: {msg}");
    ExitCode::from(1)
}

/// SVR4's message on standard output, byte for byte, then what to do on
/// standard error.
fn error_then(msg: &str, hint: &str) -> ExitCode {
    println!("error: {msg}");
    eprintln!("prfld: {hint}");
    ExitCode::from(1)
}

/// SVR4's message for the device's answer to a load, and what to do.
fn load_error(errno: Option<i32>, maxprf: usize) -> (&'static str, String) {
    match errno {
        Some(libc::ENOSPC) => (
            "insufficient space in system for addresses",
            format!("the device takes at most {maxprf} addresses; give a namelist with fewer text symbols"),
        ),
        Some(libc::E2BIG) => (
            "unaligned data or insufficient addresses",
            "the device takes 0 and at least two text addresses; give the running kernel's namelist \
             (/proc/kallsyms, its System.map or its vmlinux)"
                .into(),
        ),
        Some(libc::EBUSY) => (
            "profiler is enabled",
            "switch profiling off first (profdev prfstat off), then load".into(),
        ),
        Some(libc::EINVAL) => (
            "text addresses not sorted properly",
            "the table must start at 0 and ascend without repeats (prfld sorts it: if this \
             namelist came through prfld, please report it)"
                .into(),
        ),
        _ => (
            "cannot load profiler addresses",
            match errno {
                Some(e) => format!(
                    "the device refused the table: {}; check the device with profdev prfstat",
                    std::io::Error::from_raw_os_error(e)
                ),
                None => "the device took only part of the table; check it with profdev prfstat".into(),
            },
        ),
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
    let namelist = match opts.operands.as_slice() {
        [] => "/proc/kallsyms",
        [n] => n.as_str(),
        _ => return error(USAGE),
    };
    let path = prfdev::device_path("prfld", opts.get('f'));
    let mut dev = match PrfDev::open(&path, Access::Write) {
        Ok(d) => d,
        Err(e) => return error(&format!("cannot open {}: {e}", path.display())),
    };
    let maxprf = match dev.max() {
        Ok(m) => usize::try_from(m).unwrap_or(0),
        Err(e) => {
            return error(&format!(
                "{} is not a prf device (PRF_GETMAX: {e})",
                path.display()
            ))
        }
    };
    let syms = match KernelSymbols::load(Path::new(namelist)) {
        Ok(s) => s,
        Err(e) => return error(&e.to_string()),
    };
    let table = match table(&syms) {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    if table.len() > maxprf {
        return error_then(
            "too many text symbols",
            &format!(
                "the namelist has {} text addresses and the device takes at most {maxprf}",
                table.len()
            ),
        );
    }
    let failed = match dev.load(&table) {
        Ok(n) if n == table.len() * 8 => return ExitCode::SUCCESS,
        Ok(_) => None,
        Err(e) => Some(e.raw_os_error().unwrap_or(0)),
    };
    let (msg, hint) = load_error(failed, maxprf);
    error_then(msg, &hint)
}

/// The table prfld loads: 0, then each code symbol's address once, sorted.
pub fn table(syms: &KernelSymbols) -> Result<Vec<u64>, String> {
    let mut addrs: Vec<u64> = std::iter::once(0)
        .chain(
            syms.all()
                .iter()
                .filter(|s| {
                    s.is_text() && !s.name.starts_with("__pfx_") && !s.name.starts_with("__cfi_")
                })
                .map(|s| s.addr),
        )
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    if addrs.len() < 2 {
        return Err("no text symbols in the namelist".into());
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_device_error_keeps_svr4_words_and_says_what_to_do() {
        for (errno, svr4) in [
            (
                Some(libc::ENOSPC),
                "insufficient space in system for addresses",
            ),
            (
                Some(libc::E2BIG),
                "unaligned data or insufficient addresses",
            ),
            (Some(libc::EBUSY), "profiler is enabled"),
            (Some(libc::EINVAL), "text addresses not sorted properly"),
            (Some(libc::EIO), "cannot load profiler addresses"),
            (None, "cannot load profiler addresses"),
        ] {
            let (msg, hint) = load_error(errno, 130_560);
            assert_eq!(msg, svr4);
            assert!(!hint.is_empty() && !hint.contains('\n'), "{hint}");
        }
        assert!(load_error(Some(libc::EBUSY), 1).1.contains("prfstat off"));
    }

    #[test]
    fn table_is_zero_then_sorted_code_addresses_once() {
        let map = "\
ffffffff81000200 T fnB
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff810000f0 t __pfx_fnA
ffffffff81000100 t fnA
ffffffff81001000 D some_data
ffffffff81002000 T _etext
ffffffffc0000000 t modfn\t[kvm]
";
        let syms = KernelSymbols::from_text(map.as_bytes(), "map").unwrap();
        assert_eq!(
            table(&syms).unwrap(),
            [
                0,
                0xffffffff81000000,
                0xffffffff81000100,
                0xffffffff81000200,
                0xffffffff81002000,
                0xffffffffc0000000
            ]
        );
    }
}
