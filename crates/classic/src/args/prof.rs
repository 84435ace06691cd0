//! prof's command line: its table and the arguments it parses into.

use crate::cmdline::{self, Longs, Operand, Opt, Spec, SIGNALS_HELP};
use clap::ValueHint;
use profdev_report::prof::Options;
use std::ffi::OsString;

/// The sampling interval, in ms, unless `-s` gives one (with CMD and `-b`).
pub const DEFAULT_INTERVAL_MS: u32 = 1;

/// The most samples per second `-F` takes (as `profdev sample`'s).
pub const MAX_HZ: u32 = 10_000;

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
    /// `-s`: the sampling interval in ms (with `-F HZ`: 1000/HZ rounded,
    /// for the device's `interval` message).
    pub interval: Option<u32>,
    /// `-F HZ`: samples per second of CPU time, as every profdev command
    /// takes it (a command's run samples at exactly HZ).
    pub frequency: Option<u32>,
    /// `-o FILE`: where the listing goes (`-`: standard output).
    pub output: Option<OsString>,
    /// `--mmap-pages N`: log2 of the ring's data pages per CPU.
    pub mmap_pages: Option<u32>,
    /// CMD and its arguments.
    pub command: Vec<OsString>,
}

/// prof's command line: its options, operands and help.
pub static SPEC: Spec = Spec {
    name: "prof",
    synopsis: "prof [-bflnv] [-m modname]... [-s rate] [cmd arg ...]",
    additions: "[-eiH] [-F hz] [-o file] [--mmap-pages N]",
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
        Opt::value(
            'F',
            "hz",
            "Samples per second of CPU time, as -F in every profdev command (default 1000; \
             with -b, the device's interval 1000/hz ms)",
        ),
        Opt::value(
            'o',
            "file",
            "Write the listing to FILE (- for standard output); by default it goes to \
             standard error when prof runs CMD, to standard output otherwise",
        )
        .hint(ValueHint::FilePath),
        Opt::flag('H', "Head each table with a line naming its columns"),
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
    let command = cmdline::parse(&SPEC, args, |o, raw| {
        let v = raw
            .as_ref()
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
                Ok(ms) if ms > 0 => (a.interval, a.frequency) = (Some(ms), None),
                _ => return Err(format!("bad sample rate: '{v}'")),
            },
            "F" => match v.parse::<u32>() {
                Ok(hz) if (1..=MAX_HZ).contains(&hz) => {
                    a.interval = Some(((1000 + hz / 2) / hz).max(1));
                    a.frequency = Some(hz);
                }
                _ => {
                    return Err(format!(
                        "bad sample rate: '{v}' (-F takes 1 to {MAX_HZ} Hz)"
                    ))
                }
            },
            "o" => a.output = raw,
            "H" => a.options.header = true,
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
    fn f_is_samples_per_second_and_the_last_rate_wins() {
        let a = parse(&["-F", "250", "-H", "-o", "r.txt", "x"]).unwrap();
        assert_eq!((a.frequency, a.interval), (Some(250), Some(4)));
        assert!(a.options.header);
        assert_eq!(a.output.as_deref(), Some("r.txt".as_ref()));
        assert_eq!(parse(&["-F", "3000"]).unwrap().interval, Some(1));
        let a = parse(&["-F", "100", "-s", "7"]).unwrap();
        assert_eq!((a.frequency, a.interval), (None, Some(7)));
        assert!(parse(&["-F", "0"]).is_err());
        assert!(parse(&["-F", "10001"]).is_err());
        assert!(parse(&["-F", "x"]).is_err());
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
