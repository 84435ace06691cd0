//! `profdev prof`: Inferno's prof(1), time profiling by module, function and
//! source line.
//!
//! # Synopsis
//!
//! ```text
//! profdev prof [-bflnvei] [-m MODULE]... [-s MS] [CMD [ARGS]]
//! ```
//!
//! # Description
//!
//! With CMD, prof profiles the modules CMD runs (every ELF object its
//! process tree executes: the program, its shared libraries, the dynamic
//! linker), or only the `-m` ones, runs CMD, stops, shows the profile and
//! ends it. Without CMD it shows what the mounted prof device holds.
//!
//! | option | meaning |
//! |---|---|
//! | `-f` | the function table |
//! | `-l` | the line table (the default when neither `-f` nor `-l` is given) |
//! | `-n` | prefix each row with its source file and a colon |
//! | `-v` | include rows with no samples: every line of each shown source file, every function symbol of each module |
//! | `-m MODULE` | profile only this module (a basename such as `libc.so.6`, or a path); repeatable |
//! | `-e` | profile CMD's own executable (adds it to the `-m` list) |
//! | `-s MS` | the sampling interval in milliseconds (default 1, with CMD and with `-b`; the device's own default, for a bare `start` on `prof/ctl`, is 100) |
//! | `-i` | charge inlined code to its own lines and functions (see Attribution); not in Inferno |
//! | `-b` | begin: start profiling on the mounted device (and run CMD if given) and exit, leaving profiling on |
//!
//! **How CMD is profiled.** prof drives a private instance of the prof
//! device (`profdev_dev::prof`) in its own process, through the same
//! control messages a user writes to `prof/ctl` (`interval`, `module`,
//! `start`, `stop`, `end`) and the same one-pair-per-read histogram
//! protocol, but fed by a session on CMD's process tree only
//! (`Target::Process` with `inherit`, started at CMD's exec by
//! `profdev_sample::spawn_profiled`). So prof needs no mount, samples
//! nothing but CMD, and any number of prof runs coexist. prof waits for
//! CMD, then up to a second for CMD's descendants, then stops. Its exit
//! status is CMD's (128 + signal if CMD was killed).
//!
//! **Signals.** CMD runs in its own process group, the terminal's
//! foreground group while it runs, so ^C reaches CMD alone and prof shows
//! what was sampled. SIGINT, SIGTERM or SIGHUP sent to prof is passed to
//! CMD's group; after 2 s what is left of CMD's processes is killed with
//! SIGKILL; prof shows the profile sampled until then, says so on standard
//! error (`prof: interrupted by SIGTERM; CMD's process group was ended; the
//! listing shows what was sampled until then`) and exits with 128 + the
//! signal. `-b CMD` runs CMD the same way. The rules, shared with `sample`
//! and `gmon`, are in `profdev_sample::job`.
//!
//! The default interval is 1 ms (1000 samples per second of CPU time), with
//! CMD and with `-b` (which writes `interval 1` before `start`), not the
//! device's 100 ms: Inferno's 100 ms suited a slow interpreter; on native
//! code a one-second run would yield ten samples. The device keeps its
//! 100 ms for a bare `start` written to `prof/ctl`.
//!
//! **Attribution.** Each histogram pc is an address in the module's ELF
//! file. Its *function* is the out-of-line function holding it (its ELF
//! symbol), shown at its declaration line (`DW_AT_decl_line`); as with
//! Inferno's function ranges and `perf report`, code inlined into a
//! function counts toward it. Its *line* is the line of that same function
//! the code belongs to: the line-table location when the pc is in the
//! function's own code, and, when it is in code inlined there, the call
//! site in the function (DW_AT_call_file/line of the outermost inlined
//! subroutine; what `addr2line -i` prints last). So the line table shows
//! each function's own lines, its rows add up to the function table's, and
//! a Rust loop spending its time in inlined `wrapping_mul` is charged to
//! the loop's line, not to a line of the standard library. With `-i` both
//! go to the innermost inlined subroutine instead (what `addr2line -i`
//! prints first): the line whose code actually ran, and the inlined
//! function's name. Percentages are of all samples of all modules shown.
//! The report format is Inferno's (see `profdev_report::prof`).
//!
//! # Example
//!
//! Columns are separated by tabs; shown here with spaces.
//!
//! ```text
//! % cc -g -O1 -o prog prog.c
//! % profdev prof -f -l -- ./prog
//! 2466030419683779552
//!
//! Module: prog(/home/u/prog)
//!
//! 6       69.72   hot()
//! 13      30.28   cold()
//!
//! **** module sampling points 1103 ****
//!
//!
//! 9       69.72       for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
//! 16      30.28       for (unsigned long i = 0; i < n; i++) x = x * 2862933555777941757UL + i;
//!
//! **** module sampling points 1103 ****
//!
//! % profdev prof -b -m libc.so.6        # start the mounted device, leave it on
//! % …
//! % echo stop >/run/profdev/prof/ctl
//! % profdev prof -f                      # show what the mounted device holds
//! ```
//!
//! # Errors
//!
//! One sentence each, on standard error, prefixed `prof: `:
//! a module that cannot be read or is not ELF (`prof: cannot read module
//! /x: …`; its samples are shown as `??`), a module without debug
//! information (`prof: /usr/lib/…/libc.so.6 has no debug information:
//! functions from its symbol table, no lines`), a source file that cannot
//! be read (`prof: source file /x/y.c not found: line numbers only`), a
//! source newer than its module (a warning), a CMD that cannot be found
//! (`prof: command not found: ./nope`), and `prof: no profile information`
//! when nothing was sampled. That classic line is kept byte for byte; when
//! CMD is a malformed ELF file (the kernel would not run it), or a module
//! asked for by path (`-m PATH`, `-e`) is not a readable ELF file, a second
//! line names the file and what is wrong with it (`prof: ./prog is a
//! malformed ELF file: …`).
//!
//! # Bugs
//!
//! * Time spent in the kernel on CMD's behalf is not sampled (prof profiles
//!   modules; see `profdev sample` for the kernel).
//! * Code in anonymous memory (JIT compilers) and in the vDSO belongs to
//!   no module and is not shown.
//! * `-e` adds CMD's file: for a script that is the script, not the
//!   interpreter that runs it, and nothing is profiled.
//! * Detached debug information is found by build id under
//!   `/usr/lib/debug/.build-id` only (no `.gnu_debuglink`, no debuginfod).
//! * Sources are looked up at the paths the debug info names; Rust's
//!   standard library (`/rustc/HASH/…`) is usually not there, so its lines
//!   show without text.

use crate::child::{find_program, Job};
use anyhow::{anyhow, bail, Context as _, Result};
use profdev_core::{FileAddr, SampleSource, SessionConfig, SourceError, SourceFactory};
use profdev_dev::prof::{self, Prof};
use profdev_dev::tree::walk;
use profdev_dev::{Dev, DevError, DirEntry, Engine, OpenMode, Qid};
use profdev_formats::prof_histogram;
use profdev_report::prof::{
    attribute, format, Function, ModuleProfile, Options, SourceMap, SrcRange,
};
use profdev_symbolize::open::{read_bounded, Follow};
use profdev_symbolize::ElfObject;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: prof [-bflnvei] [-m modname]... [-s ms] [cmd arg ...]";

/// The sampling interval, in ms, unless `-s` gives one (with CMD and `-b`).
const DEFAULT_INTERVAL_MS: u32 = 1;

/// The command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Args {
    begin: bool,
    innermost: bool,
    exec: bool,
    options: Options,
    modules: Vec<String>,
    interval: Option<u32>,
    /// `--mmap-pages N`: log2 of the ring's data pages per CPU.
    mmap_pages: Option<u32>,
    command: Vec<OsString>,
}

/// Parse Inferno-style options: clustered flags, `-m X` or `-mX`, `--`.
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
        if let Some(rest) = s.strip_prefix("--mmap-pages") {
            let value = match rest.strip_prefix('=') {
                Some(v) => v.to_string(),
                None if rest.is_empty() => match it.next() {
                    Some(v) => v.to_string_lossy().into_owned(),
                    None => return Err("option --mmap-pages needs an argument".into()),
                },
                None => return Err(format!("unknown option {s}")),
            };
            a.mmap_pages = Some(crate::progress::parse_mmap_pages(&value)?);
            continue;
        }
        let flags: Vec<char> = s[1..].chars().collect();
        let mut i = 0;
        while i < flags.len() {
            match flags[i] {
                'b' => a.begin = true,
                'f' => a.options.functions = true,
                'l' => a.options.lines = true,
                'n' => a.options.file_prefix = true,
                'v' => a.options.zeros = true,
                'e' => a.exec = true,
                'i' => a.innermost = true,
                c @ ('m' | 's') => {
                    let rest: String = flags[i + 1..].iter().collect();
                    let value = if !rest.is_empty() {
                        rest
                    } else {
                        match it.next() {
                            Some(v) => v.to_string_lossy().into_owned(),
                            None => return Err(format!("option -{c} needs an argument")),
                        }
                    };
                    if c == 'm' {
                        a.modules.push(value);
                    } else {
                        match value.parse::<u32>() {
                            Ok(ms) if ms > 0 => a.interval = Some(ms),
                            _ => return Err(format!("bad sample rate: '{value}'")),
                        }
                    }
                    break;
                }
                c => return Err(format!("unknown option -{c}")),
            }
            i += 1;
        }
    }
    a.command = it.collect();
    if a.exec && a.command.is_empty() {
        return Err("-e needs a command".into());
    }
    Ok(a)
}

/// The command line as data: `--help`, the man page and the completions
/// come from it (`parse_args` keeps Inferno's parsing and messages; a unit
/// test holds the two to the same options).
pub fn command() -> clap::Command {
    use clap::{Arg, ArgAction, ValueHint};
    let flag = |c: char, help: &'static str| {
        Arg::new(c.to_string())
            .short(c)
            .action(ArgAction::SetTrue)
            .help(help)
    };
    clap::Command::new("prof")
        .override_usage(USAGE.trim_start_matches("usage: "))
        .about(
            "Profile CMD's modules (or the -m ones) by sampling, then show the time per \
             source line (-l, the default) and per function (-f). Without CMD, show what \
             the mounted prof device holds.",
        )
        .arg(flag('b', "Start the mounted device and leave it on"))
        .arg(flag('f', "Show the time per function"))
        .arg(flag('l', "Show the time per source line (the default)"))
        .arg(flag('n', "Prefix rows with the source file"))
        .arg(flag('v', "Show rows with no samples"))
        .arg(flag('e', "Profile CMD's own executable only"))
        .arg(flag(
            'i',
            "Charge inlined code to the inlined function and its own lines",
        ))
        .arg(
            Arg::new("m")
                .short('m')
                .value_name("modname")
                .action(ArgAction::Append)
                .help("Profile this module (a basename such as libc.so.6, or a path); repeatable"),
        )
        .arg(
            Arg::new("s")
                .short('s')
                .value_name("ms")
                .help("The sampling interval in ms (default 1, also with -b)"),
        )
        .arg(
            Arg::new("mmap-pages")
                .long("mmap-pages")
                .value_name("N")
                .help("The ring buffer's data pages per CPU for a command's run (a power of two)"),
        )
        .arg(
            Arg::new("cmd")
                .num_args(1..)
                .trailing_var_arg(true)
                .value_name("cmd")
                .value_hint(ValueHint::CommandWithArguments)
                .help("The command to profile, and its arguments"),
        )
        .after_help(crate::child::SIGNALS_HELP)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    crate::cmdline::classic_main("prof", USAGE, args, command, parse_args, run)
}

fn run(args: &Args) -> Result<ExitCode> {
    if args.mmap_pages.is_some() && (args.begin || args.command.is_empty()) {
        eprintln!(
            "prof: warning: --mmap-pages ignored: it sizes the ring of a command's private run"
        );
    }
    if args.begin {
        return begin(args);
    }
    if args.command.is_empty() {
        if !args.modules.is_empty() {
            eprintln!("prof: warning: -m option ignored");
        }
        if args.interval.is_some() {
            eprintln!("prof: warning: -s option ignored");
        }
        let dir = crate::mount::ensure_mounted()?.join("prof");
        let records = read_mounted(&dir)?;
        show(&records, &args.options, args.innermost)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (job, status, records, stats) = profile_command(args)?;
    if stats.lost > 0 || stats.throttled > 0 {
        eprintln!(
            "prof: warning: the kernel dropped {} records and throttled sampling {} times; \
             counts are incomplete (try a larger -s)",
            stats.lost, stats.throttled
        );
    }
    if records.iter().all(|r| r.pairs.is_empty()) {
        // The classic line, then which of the files asked for could not
        // be run or read, and why.
        eprintln!("prof: {NO_PROFILE}");
        for why in unprofilable(args) {
            eprintln!("prof: {why}");
        }
        return Ok(ExitCode::from(1));
    }
    show(&records, &args.options, args.innermost)?;
    if let Some(i) = job.interrupted() {
        eprintln!(
            "{}",
            i.sentence("prof", "the listing shows what was sampled until then")
        );
    }
    Ok(job.exit_code(status))
}

/// Inferno's message when nothing was sampled.
const NO_PROFILE: &str = "no profile information";

/// What is wrong with the files a run that sampled nothing was asked to
/// profile, one sentence each naming the file: CMD when it is a malformed
/// ELF file (the kernel could not run it), and each module asked for by
/// path (`-m PATH`, `-e`) that is not a readable ELF file.
fn unprofilable(args: &Args) -> Vec<String> {
    let mut files: Vec<(std::path::PathBuf, bool)> = Vec::new();
    if let Some(cmd) = args.command.first() {
        if let Ok(exe) = find_program(cmd) {
            files.push((exe, args.exec));
        }
    }
    files.extend(asked_by_path(&args.modules));
    not_profilable(files)
}

/// The modules of a `-m` list given as paths, as [`not_profilable`] takes
/// them.
fn asked_by_path(modules: &[String]) -> impl Iterator<Item = (std::path::PathBuf, bool)> + '_ {
    modules
        .iter()
        .filter(|m| m.contains('/'))
        .map(|m| (m.into(), true))
}

/// For each `(file, asked as a module)`: why it cannot be profiled, if it
/// is a malformed ELF file or, asked as a module, not a readable ELF file
/// at all. One sentence each, naming the file; duplicates dropped.
fn not_profilable(files: impl IntoIterator<Item = (std::path::PathBuf, bool)>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (path, module) in files {
        let why = match ElfObject::open(&path) {
            Ok(_) => continue,
            Err(e @ profdev_symbolize::ElfError::Malformed { .. }) => e.to_string(),
            Err(e) if module => e.to_string(),
            Err(_) => continue,
        };
        if !out.contains(&why) {
            out.push(why);
        }
    }
    out
}

/// The error of a cprof or mprof run that counted nothing: the classic
/// message `classic` (`no profile information (…)`), byte for byte, then
/// one line `NAME: why` for each module of the `-m` list given as a path
/// that is not a readable ELF file (the classic line names none).
pub(crate) fn no_profile(name: &str, classic: &str, modules: &[String]) -> anyhow::Error {
    let mut msg = classic.to_string();
    for why in not_profilable(asked_by_path(modules)) {
        msg.push_str(&format!("\n{name}: {why}"));
    }
    anyhow!(msg)
}

/// A module's record as read from the device.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    id: u32,
    name: String,
    path: String,
    pairs: Vec<(u64, u64)>,
    /// The module's file as it was mapped (the directory's `object`), when
    /// the device serves it and the reader may read it.
    object: Option<Vec<u8>>,
}

/// The -m list (and -e's executable) as `module` words: paths made
/// absolute, since the device may run in another directory.
fn module_words(args: &Args) -> Result<Vec<String>> {
    let mut words: Vec<String> = args
        .modules
        .iter()
        .map(|m| {
            if m.contains('/') {
                absolute(Path::new(m))
            } else {
                m.clone()
            }
        })
        .collect();
    if args.exec {
        let exe = find_program(&args.command[0])?;
        words.push(absolute(&exe));
    }
    if let Some(w) = words.iter().find(|w| w.chars().any(char::is_whitespace)) {
        bail!("module name {w:?} contains a blank, which a control message cannot carry");
    }
    Ok(words)
}

fn absolute(p: &Path) -> String {
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .unwrap_or_else(|_| p.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// A factory handing out the one session `spawn_profiled` opened.
struct Prepared(Mutex<Option<Box<dyn SampleSource>>>);

impl SourceFactory for Prepared {
    fn open(&self, _config: &SessionConfig) -> Result<Box<dyn SampleSource>, SourceError> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| SourceError::Io {
                context: "the command's sampling session".into(),
                source: std::io::Error::other("it was already started once"),
            })
    }
}

/// Write one control message, as `echo MSG >prof/ctl`.
fn ctl(dev: &Prof, msg: &str) -> Result<()> {
    let entry = walk(dev, Qid::ROOT, "ctl").map_err(|e| anyhow!("ctl: {e}"))?;
    let mut chan = dev.open(entry.qid, OpenMode::Write)?;
    let r = dev.write(&mut chan, 0, format!("{msg}\n").as_bytes());
    dev.close(chan);
    match r {
        Ok(_) => Ok(()),
        Err(DevError::Sampling { msg, .. }) => bail!("cannot start profiling: {msg}"),
        Err(e) => Err(e.into()),
    }
}

/// Run CMD under a private prof device; the job that ran it (to tell
/// whether a signal ended it), its exit status and the records.
fn profile_command(
    args: &Args,
) -> Result<(Job, std::process::ExitStatus, Vec<Record>, prof::ProfStats)> {
    // Signals are caught from here on (see `profdev_sample::job`).
    let mut job = Job::new()?;
    let interval = args.interval.unwrap_or(DEFAULT_INTERVAL_MS);
    let words = module_words(args)?;
    let config = prof::session_config(interval);
    let mut cmd = std::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    // Own process group, the terminal, signals passed on: `profdev_sample::job`.
    // Registered before spawn_profiled's own pre_exec hook, so it runs first.
    job.prepare(&mut cmd);
    let objects = profdev_symbolize::Objects::new();
    let (child, source) = crate::progress::factory(args.mmap_pages)
        .with_mapping_hook(objects.mapping_hook())
        .spawn_profiled(&mut cmd, &config)
        .map_err(|e| match e {
            profdev_sample::SpawnError::NotFound(_) => anyhow!("{e}"),
            e => anyhow!("cannot start profiling: {e}"),
        })?;
    job.started(&child);
    let dev =
        Prof::new(Engine::new(Arc::new(Prepared(Mutex::new(Some(source)))))).with_objects(objects);
    // On an error, dropping the job kills CMD's group.
    ctl(&dev, &format!("interval {interval}"))?;
    ctl(&dev, format!("module {}", words.join(" ")).trim_end())?;
    ctl(&dev, "start")?;
    let progress = dev
        .health()
        .map(|h| crate::progress::Progress::start("prof", h));
    let status = job.wait();
    // Descendants may outlive CMD: give them a moment, not forever (and
    // no moment at all after a signal, which ended them).
    let deadline = Instant::now() + Duration::from_secs(1);
    while !dev.session_ended() && !job.signalled() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        job.poll();
    }
    if let Some(e) = dev.session_error() {
        eprintln!("prof: warning: sampling ended early: {e}");
    }
    ctl(&dev, "stop")?;
    progress.map(crate::progress::Progress::finish);
    let records = read_dev(&dev)?;
    let stats = dev.stats();
    ctl(&dev, "end")?;
    let status = if job.signalled() { job.wait() } else { status };
    Ok((job, status, records, stats))
}

/// `-b`: start the mounted device (and run CMD) and leave it on.
fn begin(args: &Args) -> Result<ExitCode> {
    let o = &args.options;
    if o.functions || o.lines || o.file_prefix || o.zeros || args.innermost {
        eprintln!("prof: warning: output format ignored");
    }
    let words = module_words(args)?;
    let ctl_path = crate::mount::ensure_mounted()?.join("prof/ctl");
    let write = |msg: String| -> Result<()> {
        crate::output::open_ctl(&ctl_path)
            .and_then(|mut f| f.write_all(format!("{msg}\n").as_bytes()))
            .with_context(|| format!("cannot start profiling: {}: {msg:?}", ctl_path.display()))
    };
    for msg in begin_messages(args.interval, &words) {
        write(msg)?;
    }
    if args.command.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let program = find_program(&args.command[0])?;
    let mut job = Job::new()?;
    let mut cmd = std::process::Command::new(program);
    cmd.args(&args.command[1..]);
    job.prepare(&mut cmd);
    let child = cmd.spawn().context("cannot run the command")?;
    job.started(&child);
    let status = job.wait();
    if let Some(i) = job.interrupted() {
        eprintln!("{}", i.sentence("prof", "profiling is still on"));
    }
    Ok(job.exit_code(status))
}

/// The control messages `-b` writes: the interval (prof's default, not the
/// device's, unless `-s` gives one), the modules, `start`.
fn begin_messages(interval: Option<u32>, modules: &[String]) -> [String; 3] {
    [
        format!("interval {}", interval.unwrap_or(DEFAULT_INTERVAL_MS)),
        format!("module {}", modules.join(" "))
            .trim_end()
            .to_string(),
        "start".to_string(),
    ]
}

/// Read every record of a device through its files, as the library did:
/// the root's directories, each one's `name`, `path`, and `histogram` one
/// pair per read. Oldest record first.
fn read_dev(dev: &dyn Dev) -> Result<Vec<Record>> {
    let read_file = |dir: &DirEntry, name: &str, buf: usize| -> Result<Vec<Vec<u8>>> {
        let f = walk(dev, dir.qid, name).map_err(|e| anyhow!("{}/{name}: {e}", dir.name))?;
        let mut chan = dev.open(f.qid, OpenMode::Read)?;
        let mut reads = Vec::new();
        let mut offset = 0;
        loop {
            let b = dev.read(&mut chan, offset, buf as u32)?;
            if b.is_empty() {
                break;
            }
            offset += b.len() as u64;
            reads.push(b);
        }
        dev.close(chan);
        Ok(reads)
    };
    let mut out = Vec::new();
    for dir in dev.gen(Qid::ROOT)?.into_iter().filter(|e| e.qid.is_dir()) {
        let text = |name| -> Result<String> {
            let bytes = read_file(&dir, name, 4096)?.concat();
            Ok(String::from_utf8_lossy(&bytes)
                .trim_end_matches('\n')
                .to_string())
        };
        let mut pairs = Vec::new();
        for pair in read_file(&dir, "histogram", 64)? {
            pairs.push(
                prof_histogram::parse_pair(&pair)
                    .with_context(|| format!("{}/histogram", dir.name))?,
            );
        }
        let object = read_file(&dir, "object", 1 << 20).ok().map(|r| r.concat());
        out.push(Record {
            id: u32::from_str_radix(&dir.name, 16).unwrap_or(0),
            name: text("name")?,
            path: text("path")?,
            pairs,
            object,
        });
    }
    out.sort_by_key(|r| r.id);
    Ok(out)
}

/// Read every record of a mounted device (`DIR` is its `prof/`).
fn read_mounted(dir: &Path) -> Result<Vec<Record>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    let mut out = Vec::new();
    for e in entries {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "ctl" {
            continue;
        }
        let Ok(id) = u32::from_str_radix(&name, 16) else {
            continue;
        };
        let text = |f: &str| -> Result<String> {
            let p = e.path().join(f);
            Ok(std::fs::read_to_string(&p)
                .with_context(|| format!("cannot read {}", p.display()))?
                .trim_end_matches('\n')
                .to_string())
        };
        let hist = e.path().join("histogram");
        let mut bytes = Vec::new();
        let mut f = std::fs::File::open(&hist)
            .with_context(|| format!("cannot open {}", hist.display()))?;
        // One pair per read; a large buffer takes several if a server
        // returns more.
        let mut buf = vec![0; 4096];
        loop {
            let n = f
                .read(&mut buf)
                .with_context(|| format!("cannot read {}", hist.display()))?;
            if n == 0 {
                break;
            }
            bytes.extend_from_slice(&buf[..n]);
        }
        let pairs = prof_histogram::parse_text(&String::from_utf8_lossy(&bytes))
            .with_context(|| hist.display().to_string())?;
        // The mapped file itself; absent from an older server, refused to
        // a reader who may not read the file.
        let object = read_bounded(
            &e.path().join("object"),
            profdev_symbolize::open::MAX_OBJECT,
            Follow::No,
        )
        .ok();
        out.push(Record {
            id,
            name: text("name")?,
            path: text("path")?,
            pairs,
            object,
        });
    }
    out.sort_by_key(|r| r.id);
    Ok(out)
}

/// A module's ELF file as prof's source map.
struct ElfMap {
    obj: Option<ElfObject>,
    /// `-i`: charge inlined code to its own lines and functions.
    innermost: bool,
    functions: RefCell<HashMap<u64, Function>>,
}

impl ElfMap {
    fn function_at(&self, obj: &ElfObject, addr: u64) -> Function {
        if let Some(f) = self.functions.borrow().get(&addr) {
            return f.clone();
        }
        let frames = obj.frames(FileAddr(addr));
        let name = frames
            .last()
            .and_then(|f| f.function.clone())
            .or_else(|| obj.symbol(FileAddr(addr)).map(|(s, _)| s.name()))
            .unwrap_or_else(|| "??".into());
        let decl = obj.function_decl(FileAddr(addr));
        let f = Function {
            file: decl.as_ref().map(|d| d.0.clone()),
            line: decl.map(|d| d.1),
            name,
            addr: Some(addr),
        };
        self.functions.borrow_mut().insert(addr, f.clone());
        f
    }
}

impl SourceMap for ElfMap {
    fn lines(&self, pc: u64) -> Option<SrcRange> {
        let obj = self.obj.as_ref()?;
        if !obj.has_debug_info() {
            return None;
        }
        let frames = obj.frames(FileAddr(pc));
        let frame = if self.innermost {
            frames.into_iter().next()?
        } else {
            frames.into_iter().next_back()?
        };
        let line = frame.line.filter(|&l| l != 0)?;
        Some(SrcRange {
            file: frame.file?,
            first: line,
            last: line,
        })
    }

    fn function(&self, pc: u64) -> Option<Function> {
        let obj = self.obj.as_ref()?;
        if self.innermost {
            let frames = obj.frames(FileAddr(pc));
            if frames.len() > 1 {
                let decl = obj.frame_decls(FileAddr(pc)).into_iter().next().flatten();
                return Some(Function {
                    file: decl.as_ref().map(|d| d.0.clone()),
                    line: decl.map(|d| d.1),
                    name: frames[0].function.clone().unwrap_or_else(|| "??".into()),
                    addr: None,
                });
            }
        }
        match obj.symbol(FileAddr(pc)) {
            Some((sym, _)) => Some(self.function_at(obj, sym.addr)),
            // Code no symbol and no FDE covers: one row per module.
            None => Some(Function {
                file: None,
                line: None,
                name: obj.unknown_name(),
                addr: None,
            }),
        }
    }
}

/// A source map that moves the bar one pc on per function looked up
/// (`attribute` looks up each pc's function once).
struct Ticking<'a> {
    map: &'a ElfMap,
    bar: &'a crate::bar::Bar,
}

impl SourceMap for Ticking<'_> {
    fn lines(&self, pc: u64) -> Option<SrcRange> {
        self.map.lines(pc)
    }

    fn function(&self, pc: u64) -> Option<Function> {
        self.bar.inc(1);
        self.map.function(pc)
    }
}

/// Attribute, read sources, print.
fn show(records: &[Record], options: &Options, innermost: bool) -> Result<()> {
    if records.iter().all(|r| r.pairs.is_empty()) {
        bail!("{NO_PROFILE}");
    }
    let mut modules = Vec::new();
    // Symbolizing a big profile takes a while: a bar on a terminal.
    let pcs = records.iter().map(|r| r.pairs.len() as u64).sum();
    let bar = crate::bar::Bar::start("prof", "symbolizing", pcs);
    for r in records {
        let opened = match &r.object {
            Some(bytes) => ElfObject::parse(bytes, Path::new(&r.path)),
            None => ElfObject::open(Path::new(&r.path)),
        };
        let obj = match opened {
            Ok(o) => Some(o.with_separate_debug_info()),
            Err(e) => {
                eprintln!("prof: cannot read module {}: {e}", r.path);
                None
            }
        };
        let has_lines = obj.as_ref().is_some_and(ElfObject::has_debug_info);
        if obj.is_some() && !has_lines {
            eprintln!(
                "prof: {} has no debug information: functions from its symbol table, no lines",
                r.path
            );
        }
        let map = ElfMap {
            obj,
            innermost,
            functions: RefCell::new(HashMap::new()),
        };
        let a = attribute(
            &r.pairs,
            &Ticking {
                map: &map,
                bar: &bar,
            },
        );
        let mut m = ModuleProfile::new(&r.name, &r.path, &a, has_lines);
        if options.zeros {
            if let Some(obj) = &map.obj {
                let seen: std::collections::HashSet<Option<u64>> =
                    m.functions.iter().map(|(f, _)| f.addr).collect();
                for s in obj.all_symbols() {
                    if !seen.contains(&Some(s.addr)) {
                        m.functions.push((map.function_at(obj, s.addr), 0));
                    }
                }
            }
        }
        for f in &mut m.files {
            f.text = crate::output::source_lines("prof", &f.path, &r.path);
        }
        modules.push(m);
    }
    drop(bar);
    let mut out = std::io::stdout().lock();
    out.write_all(format(&modules, options).as_bytes())?;
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Result<Args, String> {
        parse_args(v.iter().map(OsString::from).collect())
    }

    #[test]
    fn no_profile_names_the_modules_that_are_no_elf_files() {
        let d = tempfile::tempdir().unwrap();
        let text = d.path().join("notes.txt");
        std::fs::write(&text, "x\n").unwrap();
        let cut = d.path().join("cut");
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        std::fs::write(&cut, &me[..100]).unwrap();
        for f in [&text, &cut] {
            let exec = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            std::fs::set_permissions(f, exec).unwrap();
        }
        let modules = [
            "libc.so.6".to_string(),
            text.display().to_string(),
            cut.display().to_string(),
            text.display().to_string(),
        ];
        let e = no_profile(
            "cprof",
            "no profile information (no module asked for ran)",
            &modules,
        );
        assert_eq!(
            crate::cmdline::sentence(&e),
            format!(
                "no profile information (no module asked for ran)\ncprof: {} is not an ELF file\n\
                 cprof: {} is a malformed ELF file: Invalid ELF program header size or alignment",
                text.display(),
                cut.display()
            )
        );
        // Nothing to say: the classic message alone.
        let e = no_profile("mprof", "no profile information (x)", &["libc.so.6".into()]);
        assert_eq!(e.to_string(), "no profile information (x)");
        // prof names CMD only when it is a malformed ELF; a script is not.
        let args = |cmd: &Path, exec: bool| Args {
            command: vec![cmd.into()],
            exec,
            ..Args::default()
        };
        assert_eq!(
            unprofilable(&args(&cut, false)),
            [format!(
                "{} is a malformed ELF file: Invalid ELF program header size or alignment",
                cut.display()
            )]
        );
        assert!(unprofilable(&args(&text, false)).is_empty());
        assert_eq!(
            unprofilable(&args(&text, true)),
            [format!("{} is not an ELF file", text.display())]
        );
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

    /// The parser and the description its help, page and completions come
    /// from take the same options: each documented one parses, every other
    /// letter is refused.
    #[test]
    fn the_parser_takes_exactly_the_documented_options() {
        crate::cmdline::assert_parser_takes_the_documented_options(command(), &[], parse);
    }

    /// The reader the command uses, on a device fed with TV-P2's counts:
    /// five ticks at pc 1 and seven at pc 4 of this test binary (a PIE
    /// whose first load segment maps offset 0 at address 0).
    #[test]
    fn reads_a_device_through_its_files() {
        use profdev_core::{CpuMode, Record as R, Sample};
        let exe = std::env::current_exe().unwrap();
        let base = 0x5555_0000_0000;
        let mut recs = vec![R::Mmap {
            pid: 3,
            tid: 3,
            addr: base,
            len: 0x1000,
            pgoff: 0,
            path: exe.to_string_lossy().into_owned(),
            file: None,
            build_id: None,
            time: 0,
        }];
        for (pc, n) in [(1, 5), (4, 7)] {
            for _ in 0..n {
                recs.push(R::Sample(Sample {
                    ip: base + pc,
                    pid: 3,
                    tid: 3,
                    mode: CpuMode::User,
                    ..Default::default()
                }));
            }
        }
        let factory = profdev_dev::engine::ReplayFactory::new(recs);
        let dev = Prof::new(Engine::new(Arc::new(factory)));
        ctl(&dev, "start").unwrap();
        profdev_testkit::wait_until("the replay to end", Duration::from_secs(30), || {
            dev.session_ended()
        });
        ctl(&dev, "stop").unwrap();
        let records = read_dev(&dev).unwrap();
        assert_eq!(
            records,
            [Record {
                id: 1,
                name: exe.file_name().unwrap().to_string_lossy().into_owned(),
                path: exe.to_string_lossy().into_owned(),
                pairs: vec![(1, 5), (4, 7)],
                object: Some(std::fs::read(&exe).unwrap()),
            }]
        );
        ctl(&dev, "end").unwrap();
        assert!(read_dev(&dev).unwrap().is_empty());
    }
}
