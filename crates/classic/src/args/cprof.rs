//! cprof's command line: its table and the arguments it parses into.

use crate::cmdline::{self, Longs, Operand, Opt, Spec, SIGNALS_HELP};
use clap::ValueHint;
use profdev_coverage::listing::Options;
use std::ffi::OsString;

/// cprof's command line, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `-f`, `-n`, `-a`: what the listing shows.
    pub options: Options,
    /// `-q`: say no notes on standard error (errors still).
    pub quiet: bool,
    /// `-e`: count CMD's (or PID's) own executable.
    pub exec: bool,
    /// `-r`: record the counts into MODULE.prf.
    pub record: bool,
    /// `-m`: the modules to count or show.
    pub modules: Vec<String>,
    /// `--lcov FILE`.
    pub lcov: Option<OsString>,
    /// `--cobertura FILE`.
    pub cobertura: Option<OsString>,
    /// `--hits`: run in hit mode (whether each line and branch ran, 1 or
    /// 0, in the exports too).
    pub hits: bool,
    /// `-o FILE`: where the listing goes (`-`: standard output).
    pub output: Option<OsString>,
    /// `-p PID`: attach to this running process.
    pub pid: Option<u32>,
    /// CMD and its arguments.
    pub command: Vec<OsString>,
}

impl Args {
    /// What the run's probes record: hits when only the marks are shown
    /// (no `-f`, `-r`, `--lcov` or `--cobertura`, which show counts), or
    /// with `--hits` (and each branch's edges when an export is asked
    /// for), else counts.
    pub fn mode(&self) -> profdev_coverage::plan::Mode {
        use profdev_coverage::plan::Mode;
        let export = self.lcov.is_some() || self.cobertura.is_some();
        if self.hits {
            return if export { Mode::Edges } else { Mode::Hits };
        }
        let counts = self.options.frequency
            || self.record
            || self.lcov.is_some()
            || self.cobertura.is_some();
        if counts {
            Mode::Counts
        } else {
            Mode::Hits
        }
    }
}

/// `-p`'s argument: a process id in decimal, not 0.
fn parse_pid(word: &str) -> Result<u32, String> {
    word.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| word.parse::<u32>().ok())
        .flatten()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("-p needs a process id, not {word:?}"))
}

/// cprof's command line: its options, operands and help.
pub static SPEC: Spec = Spec {
    name: "cprof",
    synopsis: "cprof [-fner] [-m modname]... cmd [arg ... ]",
    additions: "[-aqH] [-o file] [--lcov file] [--cobertura file] [--hits] [-p pid]",
    about: "Run CMD (or attach to running process PID with -p) counting every instruction of \
            its modules exactly, then list each source line marked + (ran), - (never ran) or ? \
            (ran in part), or with -f its count, and each module's coverage; -r records the \
            counts into MODULE.prf instead. Without CMD or -p, show the .prf records of the -m \
            modules.",
    longs: Longs::Any,
    opts: &[
        Opt::flag('f', "Show counts instead of marks"),
        Opt::flag('n', "Prefix lines with the source file"),
        Opt::flag(
            'a',
            "List every source file: headers whose code was only inlined, and those not found \
             as line numbers only (default: a module's own files whose text was read)",
        ),
        Opt::flag('q', "Quiet: no notes on standard error (errors still)"),
        Opt::flag('e', "Count CMD's own executable (PID's with -p)"),
        Opt::flag(
            'r',
            "Record the counts into MODULE.prf in the current directory, adding to what it holds",
        ),
        Opt::value(
            'm',
            "modname",
            "Count or show this module (a basename such as libc.so.6, or a path); repeatable",
        )
        .repeat()
        .missing("missing module/file after -m"),
        Opt::value(
            'p',
            "pid",
            "Attach to running process PID instead of running CMD; count until it exits \
             or cprof gets SIGINT, SIGTERM or SIGHUP (PID then runs on, still counted)",
        )
        .missing("missing process id after -p"),
        Opt::long(
            "lcov",
            "file",
            "Also write an lcov tracefile (genhtml renders it)",
        )
        .hint(ValueHint::FilePath),
        Opt::long("cobertura", "file", "Also write Cobertura XML").hint(ValueHint::FilePath),
        Opt::long_flag(
            "hits",
            "Record only whether each block and branch edge ran (1 or 0 in --lcov and \
             --cobertura), at about the cost of the marks; not with -f or -r",
        ),
        Opt::value(
            'o',
            "file",
            "Write the listing to FILE (- for standard output); by default it goes to \
             standard error when cprof runs CMD, to standard output otherwise",
        )
        .hint(ValueHint::FilePath),
        Opt::flag(
            'H',
            "Head each module's lines with a line naming the columns",
        ),
    ],
    operands: &[Operand::command("The command to run, and its arguments")],
    after_help: SIGNALS_HELP,
};

/// Parse cprof's command line (the words after its name).
pub fn parse(args: Vec<OsString>) -> Result<Args, String> {
    let mut a = Args::default();
    let command = cmdline::parse(&SPEC, args, |o, v| {
        match (o.id, v) {
            ("f", _) => a.options.frequency = true,
            ("n", _) => a.options.file_prefix = true,
            ("a", _) => a.options.all = true,
            ("q", _) => a.quiet = true,
            ("e", _) => a.exec = true,
            ("r", _) => a.record = true,
            ("m", Some(v)) => a.modules.push(v.to_string_lossy().into_owned()),
            ("p", Some(v)) => a.pid = Some(parse_pid(&v.to_string_lossy())?),
            ("lcov", v) => a.lcov = v,
            ("cobertura", v) => a.cobertura = v,
            ("hits", _) => a.hits = true,
            ("o", v) => a.output = v,
            ("H", _) => a.options.header = true,
            (id, _) => unreachable!("cprof's table has no option {id}"),
        }
        Ok(())
    })?;
    a.command = command;
    if a.hits && a.options.frequency {
        return Err("--hits records whether code ran, not how often: give -f or --hits".into());
    }
    if a.hits && a.record {
        return Err("-r records counts, which --hits does not take: give -r or --hits".into());
    }
    if a.pid.is_some() {
        if !a.command.is_empty() {
            return Err("-p attaches to a running process: give a command or -p, not both".into());
        }
    } else if a.command.is_empty() {
        if a.exec {
            return Err("-e needs a command".into());
        }
        if a.record {
            return Err("-r needs a command (it records a run)".into());
        }
        if a.modules.is_empty() {
            return Err(
                "without a command, name the modules whose .prf records to show with -m".into(),
            );
        }
    }
    Ok(a)
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
            "-fn",
            "-mlibc.so.6",
            "--lcov=x.info",
            "--cobertura",
            "c.xml",
            "-e",
            "./x",
            "-f",
        ])
        .unwrap();
        assert!(a.options.frequency && a.options.file_prefix && a.exec);
        assert_eq!(a.modules, ["libc.so.6"]);
        assert_eq!(a.lcov.as_deref(), Some("x.info".as_ref()));
        assert_eq!(a.cobertura.as_deref(), Some("c.xml".as_ref()));
        assert_eq!(a.command, ["./x", "-f"]);
        assert_eq!(parse(&["-z", "x"]).unwrap_err(), "unknown option -z");
        let a = parse(&["-aq", "x"]).unwrap();
        assert!(a.options.all && a.quiet && !a.options.frequency);
        assert_eq!(
            parse(&["--bogus", "x"]).unwrap_err(),
            "unknown option --bogus"
        );
        assert!(parse(&["-r"]).is_err());
        assert!(parse(&[]).is_err(), "nothing to show");
        assert!(parse(&["-m", "x"]).is_ok());
        use profdev_coverage::plan::Mode;
        let mode = |v: &[&str]| parse(v).unwrap().mode();
        assert_eq!(mode(&["--hits", "--lcov", "f", "x"]), Mode::Edges);
        assert_eq!(mode(&["--hits", "--cobertura", "f", "x"]), Mode::Edges);
        assert_eq!(mode(&["--hits", "x"]), Mode::Hits);
        assert_eq!(mode(&["--lcov", "f", "x"]), Mode::Counts);
        assert_eq!(mode(&["x"]), Mode::Hits);
        assert!(parse(&["--hits", "-f", "x"]).is_err());
        assert!(parse(&["--hits", "-r", "x"]).is_err());
        let a = parse(&["-Ho", "r.txt", "x"]).unwrap();
        assert!(a.options.header);
        assert_eq!(a.output.as_deref(), Some("r.txt".as_ref()));
    }
}
