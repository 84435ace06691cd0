//! prof's command line: its table and the arguments it parses into.

use crate::cmdline::{self, Longs, Operand, Opt, Spec, SIGNALS_HELP};
use profdev_report::prof::Options;
use std::ffi::OsString;

/// The sampling interval, in ms, unless `-s` gives one (with CMD and `-b`).
pub const DEFAULT_INTERVAL_MS: u32 = 1;

/// prof's command line, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `-b`: start the mounted device and leave it on.
    pub begin: bool,
    /// `-i`: charge inlined code to its own lines and functions.
    pub innermost: bool,
    /// `-e`: profile CMD's own executable.
    pub exec: bool,
    /// `-f`, `-l`, `-n`, `-v`: what the listing shows.
    pub options: Options,
    /// `-m`: the modules to profile.
    pub modules: Vec<String>,
    /// `-s`: the sampling interval in ms.
    pub interval: Option<u32>,
    /// `--mmap-pages N`: log2 of the ring's data pages per CPU.
    pub mmap_pages: Option<u32>,
    /// CMD and its arguments.
    pub command: Vec<OsString>,
}

/// prof's command line: its options, operands and help.
pub static SPEC: Spec = Spec {
    name: "prof",
    synopsis: "prof [-bflnvei] [-m modname]... [-s ms] [cmd arg ...]",
    about: "Profile CMD's modules (or the -m ones) by sampling, then show the time per \
            source line (-l, the default) and per function (-f). Without CMD, show what \
            the mounted prof device holds.",
    longs: Longs::Named,
    opts: &[
        Opt::flag('b', "Start the mounted device and leave it on"),
        Opt::flag('f', "Show the time per function"),
        Opt::flag('l', "Show the time per source line (the default)"),
        Opt::flag('n', "Prefix rows with the source file"),
        Opt::flag('v', "Show rows with no samples"),
        Opt::flag('e', "Profile CMD's own executable only"),
        Opt::flag(
            'i',
            "Charge inlined code to the inlined function and its own lines",
        ),
        Opt::value(
            'm',
            "modname",
            "Profile this module (a basename such as libc.so.6, or a path); repeatable",
        )
        .repeat(),
        Opt::value(
            's',
            "ms",
            "The sampling interval in ms (default 1, also with -b)",
        ),
        Opt::long(
            "mmap-pages",
            "N",
            "The ring buffer's data pages per CPU for a command's run (a power of two)",
        ),
    ],
    operands: &[Operand::command(
        "The command to profile, and its arguments",
    )],
    after_help: SIGNALS_HELP,
};

/// Parse prof's command line by its table ([`crate::cmdline::parse`]).
pub fn parse(args: Vec<OsString>) -> Result<Args, String> {
    let mut a = Args::default();
    let command = cmdline::parse(&SPEC, args, |o, v| {
        let v = v
            .map(|v| v.to_string_lossy().into_owned())
            .unwrap_or_default();
        match o.id {
            "b" => a.begin = true,
            "f" => a.options.functions = true,
            "l" => a.options.lines = true,
            "n" => a.options.file_prefix = true,
            "v" => a.options.zeros = true,
            "e" => a.exec = true,
            "i" => a.innermost = true,
            "m" => a.modules.push(v),
            "s" => match v.parse::<u32>() {
                Ok(ms) if ms > 0 => a.interval = Some(ms),
                _ => return Err(format!("bad sample rate: '{v}'")),
            },
            "mmap-pages" => a.mmap_pages = Some(cmdline::parse_mmap_pages(&v)?),
            id => unreachable!("prof's table has no option {id}"),
        }
        Ok(())
    })?;
    a.command = command;
    if a.exec && a.command.is_empty() {
        return Err("-e needs a command".into());
    }
    Ok(a)
}

/// The control messages `-b` writes: the interval (prof's default, not the
/// device's, unless `-s` gives one), the modules, `start`.
pub fn begin_messages(interval: Option<u32>, modules: &[String]) -> [String; 3] {
    [
        format!("interval {}", interval.unwrap_or(DEFAULT_INTERVAL_MS)),
        format!("module {}", modules.join(" "))
            .trim_end()
            .to_string(),
        "start".to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Args, String> {
        super::parse(v.iter().map(OsString::from).collect())
    }

    #[test]
    fn options() {
        let a = parse(&[
            "-fl",
            "-mlibc.so.6",
            "-m",
            "prog",
            "-s",
            "5",
            "--",
            "./x",
            "-f",
        ])
        .unwrap();
        assert!(a.options.functions && a.options.lines && !a.options.zeros);
        assert_eq!(a.modules, ["libc.so.6", "prog"]);
        assert_eq!(a.interval, Some(5));
        assert_eq!(a.command, ["./x", "-f"]);
        let a = parse(&["-nv", "ls", "-l"]).unwrap();
        assert!(a.options.file_prefix && a.options.zeros);
        assert_eq!(a.command, ["ls", "-l"]);
        assert_eq!(parse(&["-s", "0"]).unwrap_err(), "bad sample rate: '0'");
        assert_eq!(parse(&["-s", "x"]).unwrap_err(), "bad sample rate: 'x'");
        assert_eq!(parse(&["-m"]).unwrap_err(), "option -m needs an argument");
        assert_eq!(parse(&["-q"]).unwrap_err(), "unknown option -q");
        assert_eq!(parse(&["-e"]).unwrap_err(), "-e needs a command");
        assert!(parse(&[]).unwrap().command.is_empty());
    }

    #[test]
    fn begin_sets_the_default_interval_too() {
        // -s is documented as "default 1": -b must not leave the device
        // at its own 100 ms.
        assert_eq!(begin_messages(None, &[]), ["interval 1", "module", "start"]);
        assert_eq!(
            begin_messages(Some(7), &["libc.so.6".into()]),
            ["interval 7", "module libc.so.6", "start"]
        );
    }
}
