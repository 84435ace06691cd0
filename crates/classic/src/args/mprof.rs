//! mprof's command line: its table and the arguments it parses into.

use crate::cmdline::{self, Longs, Operand, Opt, Spec, SIGNALS_HELP};
use clap::ValueHint;
use profdev_report::mprof::Options;
use std::ffi::OsString;

/// mprof's command line, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `-b`: put the mounted device in memory mode.
    pub begin: bool,
    /// `-c`: end the mounted device's session.
    pub end: bool,
    /// `-e`: show CMD's own executable.
    pub exec: bool,
    /// `-1`, `-2`, `-3`: the pools asked for, sorted, once each.
    pub pools: Vec<char>,
    /// `-M`, `-f`, `-l`, `-n`, `-v`: what the tables show.
    pub options: Options,
    /// `-m`: the modules to show.
    pub modules: Vec<String>,
    /// `--leaks`: list the blocks never freed.
    pub leaks: bool,
    /// `--wrapper SYMBOL`: more allocation wrappers.
    pub wrappers: Vec<String>,
    /// `--pprof FILE`.
    pub pprof: Option<OsString>,
    /// `--dhat FILE`.
    pub dhat: Option<OsString>,
    /// `--folded FILE`.
    pub folded: Option<OsString>,
    /// `--folded-type inuse`: bytes live at the end (else allocated).
    pub folded_inuse: bool,
    /// `--no-stacks`: one site per allocation (`--pprof`'s samples too).
    pub no_stacks: bool,
    /// `-o FILE`: where the tables go (`-`: standard output).
    pub output: Option<OsString>,
    /// CMD and its arguments.
    pub command: Vec<OsString>,
    /// `-p PID`: attach to a running process instead of running CMD.
    pub pid: Option<u32>,
    /// `--sample-bytes N`: sample allocations every N bytes on average.
    pub sample_bytes: Option<u64>,
    /// `--snapshot SECONDS` (with `-p`): count that long, show, detach.
    pub snapshot: Option<std::time::Duration>,
    /// `--temporary`: list the temporary blocks per site.
    pub temporary: bool,
    /// `--peak`: list what was live at the global high-water mark.
    pub peak: bool,
    /// `--scan` (with `-p`): list PID's unreachable heap blocks.
    pub scan: bool,
}

/// mprof's command line: its options, operands and help.
pub static SPEC: Spec = Spec {
    name: "mprof",
    synopsis: "mprof [-bcMflnve] [-m modname]... [cmd arg ...]",
    additions: "[-123H] [-o file] [--leaks] [--pprof file] [--dhat file] [--folded file] \
         [--folded-type alloc|inuse] [--no-stacks] [--sample-bytes n] [--temporary] [--peak] \
         [--wrapper symbol]... [-p pid [--snapshot seconds] [--scan]]",
    about: "Run CMD counting every allocation of the malloc family exactly, then show per \
            source line (-l, the default with -M), per function (-f) and per module (-M) \
            the bytes allocated and not freed and the high-water bytes; --leaks lists the \
            blocks never freed. Without CMD, show what the mounted prof device holds.",
    longs: Longs::Any,
    opts: &[
        Opt::flag('b', "Put the mounted prof device in memory mode and exit"),
        Opt::flag('c', "End the mounted prof device's session and exit"),
        Opt::flag('M', "Show module totals"),
        Opt::flag('f', "Show the bytes per function"),
        Opt::flag('l', "Show the bytes per source line"),
        Opt::flag('n', "Prefix rows with the source file"),
        Opt::flag('v', "Show rows whose bytes are zero"),
        Opt::flag('e', "Show CMD's own executable only"),
        Opt::flag('1', "Pool 1: the malloc family"),
        Opt::flag(
            '2',
            "Pool 2: anonymous mmap, mremap, brk and sbrk called by the program",
        ),
        Opt::flag(
            '3',
            "Pool 3: file mappings (mmap of a file) made by the program",
        ),
        Opt::value(
            'm',
            "modname",
            "Show this module (a basename such as libc.so.6, or a path); repeatable",
        )
        .repeat(),
        Opt::value(
            'p',
            "pid",
            "Attach to running process PID instead of running CMD; show the tables when it exits",
        )
        .missing("option -p needs a process id"),
        Opt::value(
            'o',
            "file",
            "Write the tables to FILE (- for standard output); by default they go to \
             standard error when mprof runs CMD, to standard output otherwise",
        )
        .hint(ValueHint::FilePath),
        Opt::flag('H', "Head each table with a line naming its columns"),
        Opt::long_flag(
            "leaks",
            "List the blocks never freed, by allocating line, largest first",
        ),
        Opt::long(
            "pprof",
            "file",
            "Also write a pprof heap profile of the run to FILE (go tool pprof reads it)",
        )
        .hint(ValueHint::FilePath),
        Opt::long(
            "dhat",
            "file",
            "Also write DHAT's JSON of CMD's run to FILE (valgrind's dh_view.html opens it)",
        )
        .hint(ValueHint::FilePath),
        Opt::long(
            "folded",
            "file",
            "Also write the allocation stacks of the run to FILE as folded lines, \
             root;...;site BYTES (flame graphs)",
        )
        .hint(ValueHint::FilePath),
        Opt::long(
            "folded-type",
            "type",
            "What --folded's BYTES are: alloc (allocated, the default) or inuse (live at exit)",
        ),
        Opt::long_flag(
            "no-stacks",
            "Capture no stacks: --pprof gets one frame per site (faster)",
        ),
        Opt::long(
            "sample-bytes",
            "n",
            "Sample allocations every N bytes on average and show estimates (cheaper)",
        ),
        Opt::long_flag(
            "temporary",
            "List the temporary blocks (freed before their thread's next allocation) per site",
        ),
        Opt::long_flag(
            "peak",
            "List what was live at the global high-water mark, per stack (per site with \
             --no-stacks)",
        ),
        Opt::long(
            "snapshot",
            "seconds",
            "With -p: count for SECONDS, then show the tables and detach (the process runs on)",
        ),
        Opt::long_flag(
            "scan",
            "With -p: stop PID briefly and list its heap blocks that nothing points to \
             (leaks, also those allocated before any attach)",
        ),
        Opt::long(
            "wrapper",
            "symbol",
            "Treat this function as an allocation wrapper too; repeatable",
        )
        .repeat(),
    ],
    operands: &[Operand::command("The command to run, and its arguments")],
    after_help: SIGNALS_HELP,
};

/// Parse mprof's command line (the words after its name).
pub fn parse(args: Vec<OsString>) -> Result<Args, String> {
    let mut a = Args::default();
    let command = cmdline::parse(&SPEC, args, |o, v| {
        let text = || {
            v.as_ref()
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        match o.id {
            "b" => a.begin = true,
            "c" => a.end = true,
            "M" => a.options.module_totals = true,
            "f" => a.options.functions = true,
            "l" => a.options.lines = true,
            "n" => a.options.file_prefix = true,
            "v" => a.options.zeros = true,
            "e" => a.exec = true,
            "1" | "2" | "3" => {
                let c = o.short.unwrap_or('1');
                if !a.pools.contains(&c) {
                    a.pools.push(c);
                }
            }
            "m" => a.modules.push(text()),
            "p" => {
                let value = text();
                match value.parse::<u32>() {
                    Ok(p) if p > 0 && !value.starts_with('+') => a.pid = Some(p),
                    _ => return Err(format!("{value:?} is not a process id")),
                }
            }
            "leaks" => a.leaks = true,
            "o" => a.output = v,
            "H" => a.options.header = true,
            "pprof" => a.pprof = v,
            "dhat" => a.dhat = v,
            "folded" => a.folded = v,
            "folded-type" => match text().as_str() {
                "alloc" => a.folded_inuse = false,
                "inuse" => a.folded_inuse = true,
                t => return Err(format!("--folded-type is alloc or inuse, not {t:?}")),
            },
            "no-stacks" => a.no_stacks = true,
            "temporary" => a.temporary = true,
            "peak" => a.peak = true,
            "scan" => a.scan = true,
            "sample-bytes" => match text().parse::<u64>() {
                Ok(n) if (1..=1 << 40).contains(&n) => a.sample_bytes = Some(n),
                _ => {
                    return Err(format!(
                        "--sample-bytes is 1 to 2^40 bytes, not {:?}",
                        text()
                    ))
                }
            },
            "snapshot" => match text().parse::<f64>() {
                Ok(t) if (0.0..=1e9).contains(&t) => {
                    a.snapshot = Some(std::time::Duration::from_secs_f64(t))
                }
                _ => return Err(format!("--snapshot is seconds, not {:?}", text())),
            },
            "wrapper" => {
                let value = text();
                if value.is_empty() || value.contains([',', ' ']) {
                    return Err(format!("bad wrapper symbol {value:?}"));
                }
                a.wrappers.push(value);
            }
            id => unreachable!("mprof's table has no option {id}"),
        }
        Ok(())
    })?;
    a.pools.sort_unstable();
    a.command = command;
    if a.pid.is_some() && (!a.command.is_empty() || a.begin || a.end) {
        return Err("-p goes with neither a command nor -b or -c".into());
    }
    if a.exec && a.command.is_empty() && a.pid.is_none() {
        return Err("-e needs a command".into());
    }
    // Counts of a run: CMD's, or PID's (attached); the device keeps none.
    let run = !a.command.is_empty() || a.pid.is_some();
    if (a.pprof.is_some() || a.dhat.is_some() || a.folded.is_some()) && !run {
        return Err(
            "--pprof, --dhat and --folded need a command or -p PID (the device keeps \
                    no allocation counts)"
                .into(),
        );
    }
    if a.dhat.is_some() && a.pid.is_some() {
        return Err(
            "--dhat is not with -p: the lifetimes and the peak of blocks allocated \
                    before the attach are unknown, and DHAT's figures are of a whole run"
                .into(),
        );
    }
    if a.sample_bytes.is_some() && (!run || a.dhat.is_some()) {
        return Err("--sample-bytes needs a command or -p PID, and not --dhat \
                    (DHAT's lifetimes are exact only)"
            .into());
    }
    if a.snapshot.is_some() && a.pid.is_none() {
        return Err("--snapshot goes with -p PID (a running process to show and detach)".into());
    }
    if (a.temporary || a.peak) && !run {
        return Err(
            "--temporary and --peak need a command or -p PID (the device keeps no such counts)"
                .into(),
        );
    }
    if a.peak && a.sample_bytes.is_some() {
        return Err("--peak is exact only: not with --sample-bytes".into());
    }
    if a.scan && a.snapshot.is_some() {
        return Err("--scan shows unreachable blocks now: not with --snapshot".into());
    }
    let counts = a.leaks || a.pprof.is_some() || a.folded.is_some() || a.dhat.is_some();
    let counts = counts || a.sample_bytes.is_some() || a.temporary || a.peak;
    if a.scan && (a.pid.is_none() || counts) {
        return Err(
            "--scan needs -p PID, and none of the counts' outputs (--leaks, --pprof, \
                    --folded, --sample-bytes, --temporary, --peak)"
                .into(),
        );
    }
    if a.folded.is_some() && a.no_stacks {
        return Err("--folded needs stacks: not with --no-stacks".into());
    }
    Ok(a)
}

impl Args {
    /// Whether the library captures whole stacks: when an output needs
    /// them (`--folded`, `--pprof`, `--peak`) and not `--no-stacks`.
    pub fn stacks(&self) -> bool {
        !self.no_stacks && (self.folded.is_some() || self.pprof.is_some() || self.peak)
    }
}

/// The `startmp` message for the pools asked for (all when none is).
pub fn startmp_message(pools: &[char]) -> String {
    if pools.is_empty() {
        "startmp123".into()
    } else {
        format!("startmp{}", pools.iter().collect::<String>())
    }
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
            "-Mfl31",
            "-mlibc.so.6",
            "--leaks",
            "--wrapper",
            "my_alloc",
            "./x",
            "-f",
        ])
        .unwrap();
        assert!(a.options.module_totals && a.options.functions && a.options.lines);
        assert_eq!(a.pools, ['1', '3']);
        assert_eq!(a.modules, ["libc.so.6"]);
        assert!(a.leaks);
        assert_eq!(a.wrappers, ["my_alloc"]);
        assert_eq!(a.command, ["./x", "-f"]);
        assert_eq!(startmp_message(&a.pools), "startmp13");
        assert_eq!(startmp_message(&[]), "startmp123");
        assert_eq!(parse(&["-q"]).unwrap_err(), "unknown option -q");
        assert_eq!(parse(&["--bogus"]).unwrap_err(), "unknown option --bogus");
        assert_eq!(parse(&["-e"]).unwrap_err(), "-e needs a command");
        assert!(parse(&["--wrapper", "a,b", "x"]).is_err());
        let a = parse(&["-l", "-p", "42", "-M"]).unwrap();
        assert_eq!(
            (a.pid, a.options.lines, a.options.module_totals),
            (Some(42), true, true)
        );
        assert_eq!(parse(&["-p42", "-e"]).unwrap().pid, Some(42));
        assert!(parse(&["-p", "x"]).is_err());
        assert!(parse(&["-p", "0"]).is_err());
        assert!(parse(&["-p"]).is_err());
        assert!(parse(&["-p", "5", "./cmd"]).is_err());
        assert!(parse(&["-b", "-p", "5"]).is_err());
        let a = parse(&["--folded", "f", "--folded-type", "inuse", "x"]).unwrap();
        assert!(a.folded_inuse && a.stacks());
        assert!(!parse(&["--pprof", "f", "--no-stacks", "x"])
            .unwrap()
            .stacks());
        assert!(!parse(&["x"]).unwrap().stacks());
        let a = parse(&["--temporary", "--peak", "x"]).unwrap();
        assert!(a.temporary && a.peak && a.stacks());
        assert!(!parse(&["--peak", "--no-stacks", "x"]).unwrap().stacks());
        let a = parse(&["--peak", "--temporary", "-p", "5"]).unwrap();
        assert!(a.peak && a.temporary && a.stacks());
        assert!(parse(&["--peak", "-p", "5", "--scan"]).is_err());
        assert!(parse(&["--temporary"]).is_err());
        assert!(parse(&["--peak", "--sample-bytes", "9", "x"]).is_err());
        assert!(parse(&["--folded-type", "peak", "x"]).is_err());
        assert!(parse(&["--folded", "f", "--no-stacks", "x"]).is_err());
        assert!(parse(&["--folded", "f", "-p", "5"]).unwrap().stacks());
        assert!(parse(&["--pprof", "f", "-p", "5"]).unwrap().stacks());
        assert!(parse(&["--folded", "f"]).is_err());
        assert!(parse(&["--dhat", "d", "-p", "5"])
            .unwrap_err()
            .starts_with("--dhat is not with -p"));
        assert_eq!(
            parse(&["--sample-bytes", "524288", "x"])
                .unwrap()
                .sample_bytes,
            Some(524288)
        );
        assert!(parse(&["--sample-bytes", "0", "x"]).is_err());
        let a = parse(&["--sample-bytes", "512", "-p", "5"]).unwrap();
        assert_eq!(a.sample_bytes, Some(512));
        assert!(parse(&["--sample-bytes", "512"]).is_err());
        assert!(parse(&["--sample-bytes", "512", "--dhat", "d", "x"]).is_err());
        assert!(parse(&["-p", "5", "--scan"]).unwrap().scan);
        assert!(parse(&["--scan"]).is_err());
        assert!(parse(&["--scan", "x"]).is_err());
        assert!(parse(&["--scan", "-p", "5", "--leaks"]).is_err());
        let a = parse(&["-H", "-or.txt", "x"]).unwrap();
        assert!(a.options.header);
        assert_eq!(a.output.as_deref(), Some("r.txt".as_ref()));
    }
}
