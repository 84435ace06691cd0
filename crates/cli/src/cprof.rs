//! `profdev cprof`: Inferno's cprof(1), coverage: which source lines of a
//! program ran, which never did, and how many times each ran, counted
//! exactly.
//!
//! # Synopsis
//!
//! ```text
//! profdev cprof [-fner] [-m MODULE]... [--lcov FILE] [--cobertura FILE] [CMD [ARGS]]
//! ```
//!
//! # Description
//!
//! With CMD, cprof runs CMD under prof's coverage mode, which counts every
//! instruction of the selected modules exactly (a statically linked CMD
//! through uprobes: see Bugs), and then lists, per module, each line of
//! its source files beside a mark:
//!
//! | mark | meaning |
//! |---|---|
//! | `+` | every instruction of the line ran |
//! | `-` | the line has code, and none of it ran |
//! | `?` | the line ran only in part |
//! | (space) | the line has no code |
//! | `a\|b\|…` | the line's parts (its columns in the line table) differ: each part's mark, left to right |
//!
//! | option | meaning |
//! |---|---|
//! | `-f` | counts instead of marks: a line's count is the largest count of its instructions (the times its most executed part ran); `0` for code that never ran |
//! | `-n` | prefix each line with its source file and a colon |
//! | `-e` | count CMD's own executable (with `-m`: as well as those modules) |
//! | `-m MODULE` | count this module (a basename such as `libc.so.6`, or a path); repeatable |
//! | `-r` | record: add the counts to `MODULE.prf` in the current directory, one per module, instead of listing |
//! | `--lcov FILE` | also write an lcov tracefile (`genhtml FILE` renders it) |
//! | `--cobertura FILE` | also write Cobertura XML |
//!
//! Without CMD, cprof shows what the `.prf` records of the `-m` modules
//! hold, summed over every `cprof -r` run, in the same forms (the listing,
//! `-f`, `--lcov`, `--cobertura`).
//!
//! Each module's listing starts with `Module: NAME(PATH)` and its
//! *coverage*, the share of its instructions that ran (integer percent);
//! a module at 100% shows only that line unless `-f` is given. It ends with
//! the number of instructions executed. Lines are read from the module's
//! DWARF line table, so the module needs debug information (`cc -g`), and
//! its source files where the debug information says they are: a file not
//! found is said so on stderr (five files at most, then how many more)
//! and listed as line numbers and marks only.
//! The marks, counts and files are described in the coverage crate
//! (`profdev_coverage::lines`, `listing`, `prf`, `lcov`, `cobertura`).
//!
//! **Records.** `MODULE.prf` (for `libc.so.6`, `libc.so.6.prf`) is text:
//! a header `profdev-prf 1 BUILD-ID PATH` (the module's build id in hex,
//! `-` if it has none, and its file), then Inferno's `"%d %d\n"` lines,
//! pc and count, ascending (every instruction counted, 0 included), then
//! one `b PC TAKEN NOT_TAKEN` line per conditional jump. A run adds its
//! counts to the file (written afresh through a temporary and a rename);
//! records of another build of the module are refused with a sentence, as
//! is showing records whose module file has since been rebuilt. A run in
//! which nothing ran writes nothing.
//!
//! **Exports.** lcov: `DA` per line (its count, as `-f`), `FN`/`FNDA` per
//! function (the count of its first instruction), and per conditional jump
//! two `BRDA` branches on the jump's line, taken and fallen through (`-`
//! for a jump that never ran). Cobertura: a package per module, a class per
//! source file. Source files that were not found are left out of both,
//! with a note on stderr, so that `genhtml` renders the rest without error.
//!
//! # Example
//!
//! Columns are separated by tabs; shown here with spaces.
//!
//! ```text
//! % cc -O0 -g -o known known.c
//! % profdev cprof -r -e ./known          # records known.prf
//! % profdev cprof -f -m known
//!
//! Module: known(/home/u/known)    72% coverage
//!
//! ...
//! 5                int called(int x)
//! 6       10       {
//! 7       10           return x * 2;
//! ...
//! 19      1|11|10      for (i = 0; i < n; i++) {
//! 20      10               sink += called(i);
//! 21      10               if (i % 5 == 0)
//! 22      2                    k++;
//! 23                   }
//! 24      1|0          if (argc > 5) never_called();
//! ...
//! **** module instructions 386 ****
//!
//! % profdev cprof -m known --lcov known.info && genhtml -o html known.info
//! ```
//!
//! # Bugs
//!
//! * Coverage reaches a program through the dynamic loader (its runtime
//!   is preloaded). A statically linked CMD is counted through uprobes
//!   instead (`profdev_coverage::uprobe`; one note on stderr says so): the
//!   same exact counts, views and files, but a trap into the kernel per
//!   block executed (0.2–16 µs), so a CPU-bound program runs many times
//!   slower; it needs root (CAP_BPF and CAP_PERFMON) and a multi-uprobe
//!   BPF link (Linux 6.6 or later), and without either cprof fails with a
//!   sentence naming what is missing. Processes a static CMD forks are not
//!   counted (the link counts one thread group).
//!   A setuid program run by another user ignores the preload. The vDSO,
//!   JIT code and code that runs before the runtime's constructor (the
//!   loader, libc's initializers) are not counted; blocks that cannot be
//!   patched are said on stderr (`N blocks could not be counted`), and
//!   blocks shorter than a jump counted through a breakpoint are said
//!   too. The engine's limits are listed in `profdev_coverage`'s crate
//!   documentation.
//! * Lines come from the line table: code the compiler attributed to no
//!   line (padding, some startup code) counts in the coverage but is in no
//!   listing; code optimized away has no instructions, so no mark.
//! * A line's count is that of its most executed instruction, not gcov's
//!   count of entries into the line: a loop condition's line counts the
//!   condition's runs.

use crate::child::Job;
use anyhow::{bail, Context as _, Result};
use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::lines::{instruction_counts, map_lines, ModuleLines};
use profdev_coverage::listing::{self, Listing, Options};
use profdev_coverage::prf::{self, Prf};
use profdev_coverage::{cobertura, lcov};
use profdev_symbolize::ElfObject;
use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str =
    "usage: cprof [-fner] [-m modname]... [--lcov file] [--cobertura file] [cmd arg ...]";

/// The command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Args {
    options: Options,
    exec: bool,
    record: bool,
    modules: Vec<String>,
    lcov: Option<OsString>,
    cobertura: Option<OsString>,
    command: Vec<OsString>,
}

fn parse_args(args: Vec<OsString>) -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = args.into_iter().peekable();
    while let Some(arg) = it.peek() {
        let s = arg.to_string_lossy().into_owned();
        if s == "--" {
            it.next();
            break;
        }
        if !s.starts_with('-') || s == "-" {
            break;
        }
        it.next();
        if s.starts_with("--") {
            let (name, inline) = match s.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(OsString::from(v))),
                None => (s.clone(), None),
            };
            let slot = match name.as_str() {
                "--lcov" => &mut a.lcov,
                "--cobertura" => &mut a.cobertura,
                _ => return Err(format!("unknown option {s}")),
            };
            *slot = Some(match inline {
                Some(v) => v,
                None => it
                    .next()
                    .ok_or_else(|| format!("option {name} needs an argument"))?,
            });
            continue;
        }
        let flags: Vec<char> = s[1..].chars().collect();
        for (i, &c) in flags.iter().enumerate() {
            match c {
                'f' => a.options.frequency = true,
                'n' => a.options.file_prefix = true,
                'e' => a.exec = true,
                'r' => a.record = true,
                'm' => {
                    let rest: String = flags[i + 1..].iter().collect();
                    let value = if !rest.is_empty() {
                        rest
                    } else {
                        match it.next() {
                            Some(v) => v.to_string_lossy().into_owned(),
                            None => return Err("missing module/file after -m".into()),
                        }
                    };
                    a.modules.push(value);
                    break;
                }
                c => return Err(format!("unknown option -{c}")),
            }
        }
    }
    a.command = it.collect();
    if a.command.is_empty() {
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

/// The command line as data, for `--help`, the man page and completions.
pub fn command() -> clap::Command {
    use clap::{Arg, ArgAction, ValueHint};
    let flag = |c: char, help: &'static str| {
        Arg::new(c.to_string())
            .short(c)
            .action(ArgAction::SetTrue)
            .help(help)
    };
    clap::Command::new("cprof")
        .override_usage(USAGE.trim_start_matches("usage: "))
        .about(
            "Run CMD counting every instruction of its modules exactly, then list each source \
             line marked + (ran), - (never ran) or ? (ran in part), or with -f its count, and \
             each module's coverage; -r records the counts into MODULE.prf instead. Without \
             CMD, show the .prf records of the -m modules.",
        )
        .arg(flag('f', "Show counts instead of marks"))
        .arg(flag('n', "Prefix lines with the source file"))
        .arg(flag('e', "Count CMD's own executable"))
        .arg(flag(
            'r',
            "Record the counts into MODULE.prf in the current directory, adding to what it holds",
        ))
        .arg(
            Arg::new("m")
                .short('m')
                .value_name("modname")
                .action(ArgAction::Append)
                .help("Count or show this module (a basename such as libc.so.6, or a path); repeatable"),
        )
        .arg(
            Arg::new("lcov")
                .long("lcov")
                .value_name("file")
                .value_hint(ValueHint::FilePath)
                .help("Also write an lcov tracefile (genhtml renders it)"),
        )
        .arg(
            Arg::new("cobertura")
                .long("cobertura")
                .value_name("file")
                .value_hint(ValueHint::FilePath)
                .help("Also write Cobertura XML"),
        )
        .arg(
            Arg::new("cmd")
                .num_args(1..)
                .trailing_var_arg(true)
                .value_name("cmd")
                .value_hint(ValueHint::CommandWithArguments)
                .help("The command to run, and its arguments"),
        )
        .after_help(crate::child::SIGNALS_HELP)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    crate::cmdline::classic_main("cprof", USAGE, args, command, parse_args, run)
}

/// What a run of CMD under the coverage engine gives: each module's
/// counts, summed over CMD's processes, and the exit status cprof ends
/// with (CMD's own if it failed, as `profdev prof` and `mprof` do).
struct Launched {
    modules: Vec<ModuleCoverage>,
    exit: ExitCode,
}

/// Run `cmd` under prof's coverage mode, counting the modules `modules`
/// names (basenames or absolute paths; empty: the executable and every
/// library it maps): the engine's runtime is preloaded into CMD and every
/// process it starts, which ask the engine's server to plan each module
/// they map and report their counts when they end. CMD runs as a job
/// (`profdev_sample::job`): SIGINT, SIGTERM and SIGHUP are passed on to it,
/// and the runtime writes the counts of a process those end.
fn run_under_coverage(cmd: &[OsString], modules: &[String]) -> Result<Launched> {
    let server = profdev_coverage::launch::Server::new(modules)
        .context("cannot prepare coverage (the runtime's private directory)")?;
    let mut job = Job::new().context("cannot catch signals")?;
    let mut child = std::process::Command::new(&cmd[0]);
    child.args(&cmd[1..]);
    for (k, v) in server.env(std::env::var_os("LD_PRELOAD")) {
        child.env(k, v);
    }
    job.prepare(&mut child);
    let spawned = child
        .spawn()
        .with_context(|| format!("cannot run {}", cmd[0].to_string_lossy()))?;
    job.started(&spawned);
    let status = job.wait();
    let (modules, notes) = server.collect();
    for n in &notes {
        eprintln!("cprof: {n}");
    }
    Ok(Launched {
        modules,
        exit: job.exit_code(status),
    })
}

/// Run the statically linked `program` (`cmd[0]`) counted through the
/// uprobe fallback (`profdev_coverage::uprobe`): its blocks are planned,
/// CMD is held between fork and exec until one multi-uprobe link with
/// its pid is in place, then runs as a job like any CMD; the counts are
/// read when it ends.
fn run_static(cmd: &[OsString], program: &Path) -> Result<Launched> {
    use profdev_coverage::uprobe;
    let canon = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let probes = uprobe::Probes::of_file(&canon, canon.clone())?;
    let mut job = Job::new().context("cannot catch signals")?;
    let mut child = std::process::Command::new(&cmd[0]);
    child.args(&cmd[1..]);
    job.prepare(&mut child);
    let (spawned, counter) = uprobe::spawn_counted(&mut child, probes, canon)?;
    eprintln!(
        "cprof: {} is statically linked: counted through {} uprobes instead of the loader \
         (slower: about 0.2-16 us per block executed; uses {})",
        program.display(),
        counter.probes(),
        uprobe::FEATURE
    );
    job.started(&spawned);
    let status = job.wait();
    counter.detach();
    Ok(Launched {
        modules: vec![counter.coverage()],
        exit: job.exit_code(status),
    })
}

fn module_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map_or_else(|| path.to_string(), |b| b.to_string_lossy().into_owned())
}

/// True if `m` is one of `wanted` (by basename, path or canonical path).
fn wanted(wanted: &[String], path: &Path) -> bool {
    let canon = std::fs::canonicalize(path).ok();
    wanted.iter().any(|w| {
        if w.contains('/') {
            Path::new(w) == path || (canon.is_some() && std::fs::canonicalize(w).ok() == canon)
        } else {
            *w == module_name(&path.to_string_lossy())
        }
    })
}

/// A module's counts on its lines, through its file's line table.
fn lines_of(
    path: &str,
    insns: &[(u64, u64)],
    branches: &[profdev_coverage::counts::Branch],
) -> ModuleLines {
    let name = module_name(path);
    match ElfObject::open(Path::new(path)) {
        Ok(obj) => {
            let obj = obj.with_separate_debug_info();
            if !obj.has_debug_info() {
                eprintln!("cprof: {path} has no debug information: no lines to mark");
            }
            map_lines(&name, path, insns, branches, &obj)
        }
        Err(e) => {
            eprintln!("cprof: cannot read module {path}: {e}: no lines to mark");
            map_lines(&name, path, insns, branches, &NoLines)
        }
    }
}

/// A module whose file cannot be read: no lines, no functions.
struct NoLines;

impl profdev_coverage::lines::LineTable for NoLines {
    fn rows(&self, _: u64, _: u64) -> Vec<profdev_symbolize::LineRow> {
        Vec::new()
    }
    fn functions(&self) -> Vec<(u64, String)> {
        Vec::new()
    }
}

/// The records of `-m MODULE` in the current directory, checked against
/// the module file their header names.
fn read_records(module: &str) -> Result<Prf> {
    let file = prf::file_name(Path::new(module));
    let record = prf::read(Path::new(&file))?
        .with_context(|| format!("no records for {module}: {file} is not in the current directory (cprof -r CMD makes it)"))?;
    let now = ElfObject::open(Path::new(&record.path))
        .with_context(|| format!("{file} records {}, which cannot be read", record.path))?;
    if now.build_id() != record.build_id.as_deref() {
        bail!(
            "{file} records build {} of {}, but that file is now build {}: its lines cannot be \
             placed (move {file} away to start anew)",
            record
                .build_id
                .as_deref()
                .map_or_else(|| "-".into(), prf::hex),
            record.path,
            now.build_id().map_or_else(|| "-".into(), prf::hex)
        );
    }
    Ok(record)
}

/// The most files named one per line before the rest are counted.
const MAX_NOTES: usize = 5;

/// One note per file of `files`, up to [`MAX_NOTES`], then one line
/// counting the rest (a Rust program's standard library alone names
/// hundreds of files that are not on the machine).
fn notes(files: &[String], note: impl Fn(&str) -> String) -> Vec<String> {
    let mut out: Vec<String> = files.iter().take(MAX_NOTES).map(|f| note(f)).collect();
    if files.len() > MAX_NOTES {
        out.push(format!(
            "cprof: and {} more source files not found",
            files.len() - MAX_NOTES
        ));
    }
    out
}

fn run(args: &Args) -> Result<ExitCode> {
    let mut listings = Vec::new();
    let mut exit = ExitCode::SUCCESS;
    if args.command.is_empty() {
        for m in &args.modules {
            let r = read_records(m)?;
            listings.push(lines_of(&r.path, &r.insns, &r.branches));
        }
    } else {
        let program = crate::child::find_program(&args.command[0])?;
        let is_static = crate::child::is_static_program(&program);
        let mut words = args.modules.clone();
        if args.exec {
            words.push(
                std::fs::canonicalize(&program)
                    .unwrap_or(program.clone())
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        let launched = if is_static {
            run_static(&args.command, &program)?
        } else {
            run_under_coverage(&args.command, &words)?
        };
        exit = launched.exit;
        let mut modules = launched.modules;
        if !words.is_empty() {
            modules.retain(|m| wanted(&words, &m.path));
        }
        if modules.is_empty() {
            bail!("no profile information (no module asked for ran)");
        }
        for m in &modules {
            if m.uncounted > 0 {
                eprintln!(
                    "cprof: {}: {} blocks could not be counted",
                    m.path.display(),
                    m.uncounted
                );
            }
        }
        if args.record {
            let dir = PathBuf::from(".");
            for m in &modules {
                prf::record(&dir, m)?;
            }
        }
        for m in &modules {
            let mut branches = m.branches.clone();
            branches.sort_by_key(|b| b.addr);
            listings.push(lines_of(
                &m.path.to_string_lossy(),
                &instruction_counts(m),
                &branches,
            ));
        }
    }
    let listings: Vec<Listing> = listings
        .into_iter()
        .map(|lines| {
            let (sources, missing) = listing::read_sources(&lines);
            if !args.record {
                for line in notes(&missing, |f| {
                    format!("cprof: source file {f} not found: line numbers only")
                }) {
                    eprintln!("{line}");
                }
            }
            Listing { lines, sources }
        })
        .collect();
    if !args.record {
        let text = listing::format(&listings, &args.options);
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()?;
    }
    if args.lcov.is_some() || args.cobertura.is_some() {
        let records = lcov::source_records(&listings);
        for line in notes(&records.left_out, |f| {
            format!("cprof: left out of the exports, its source was not found: {f}")
        }) {
            eprintln!("{line}");
        }
        if let Some(file) = &args.lcov {
            profdev_safefile::write_file(Path::new(file), lcov::lcov(&records).as_bytes(), 0o644)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        if let Some(file) = &args.cobertura {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let xml = cobertura::cobertura(&records, now);
            profdev_safefile::write_file(Path::new(file), xml.as_bytes(), 0o644)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    Ok(exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Args, String> {
        parse_args(v.iter().map(OsString::from).collect())
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
        assert_eq!(parse(&["-q", "x"]).unwrap_err(), "unknown option -q");
        assert_eq!(
            parse(&["--bogus", "x"]).unwrap_err(),
            "unknown option --bogus"
        );
        assert!(parse(&["-r"]).is_err());
        assert!(parse(&[]).is_err(), "nothing to show");
        assert!(parse(&["-m", "x"]).is_ok());
    }

    #[test]
    fn the_parser_takes_exactly_the_documented_options() {
        crate::cmdline::assert_parser_takes_the_documented_options(command(), &[], parse);
    }

    #[test]
    fn many_missing_files_are_counted_not_listed() {
        let files: Vec<String> = (0..8).map(|i| format!("/f{i}.rs")).collect();
        let n = notes(&files, |f| format!("missing {f}"));
        assert_eq!(n.len(), MAX_NOTES + 1);
        assert_eq!(n[0], "missing /f0.rs");
        assert_eq!(n[MAX_NOTES], "cprof: and 3 more source files not found");
        assert_eq!(notes(&files[..2], |f| f.to_string()), ["/f0.rs", "/f1.rs"]);
    }
}
