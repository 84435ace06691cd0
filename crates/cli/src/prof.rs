//! `profdev prof`: Inferno's prof(1), time profiling by module, function and
//! source line.
//!
//! # Synopsis
//!
//! ```text
//! profdev prof [-bflnveiH] [-m MODULE]... [-s MS | -F HZ] [-o FILE] [CMD [ARGS]]
//! ```
//!
//! # Description
//!
//! With CMD, prof profiles the modules CMD runs (every ELF object its
//! process tree executes: the program, its shared libraries, the dynamic
//! linker), or only the `-m` ones, runs CMD, stops, shows the profile and
//! ends it. Without CMD it shows what the mounted prof device holds.
//!
//! **Where the listing goes.** With CMD, to standard error, or to FILE
//! with `-o FILE` (written whole, through a temporary renamed over it):
//! never into CMD's standard output, so `profdev prof -- xz -c big >
//! big.xz` leaves big.xz as xz wrote it (time(1), perf stat and valgrind
//! do the same). Without CMD, to standard output as in Inferno (or FILE).
//! `-o -` asks for standard output.
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
//! | `-F HZ` | samples per second of CPU time, 1 to 10000, as `-F` means in every profdev command (default 1000, i.e. `-s 1`); a command's run samples at exactly HZ, `-b` writes the interval 1000/HZ ms rounded; the last of `-s` and `-F` counts; not in Inferno |
//! | `-o FILE` | write the listing to FILE (`-`: standard output) instead of standard error (with CMD) or standard output (without); not in Inferno |
//! | `-H` | head each table with a line naming its columns (see Example); the rows are unchanged; not in Inferno |
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
//! CMD, then up to a second for CMD's descendants, then stops.
//!
//! **Exit status.** With CMD: CMD's status if CMD failed (128 + the
//! signal if a signal ended it), else 0 when a listing was shown, else 1
//! with the classic `prof: no profile information`. Without CMD: 0, or 1
//! after an error. A bad command line: 2, after `prof: why` and the usage
//! lines (as every profdev command).
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
//! Columns are separated by tabs; shown here with spaces. The listing goes
//! to standard error (CMD runs); `-H` heads each table with its columns'
//! names, `-o prog.prof` would write it to a file instead.
//!
//! ```text
//! % cc -g -O1 -o prog prog.c
//! % profdev prof -H -f -l -- ./prog
//!
//! Module: prog(/home/u/prog)              <- module name(its file)
//!
//! line    %time   function                <- -H: the function table's columns
//! 6       69.72   hot()                   <- hot() starts at line 6; 69.72% of all samples
//! 13      30.28   cold()
//!
//! **** module sampling points 1103 ****   <- this module's samples (1 ms of CPU time each)
//!
//!
//! line    %time   source                  <- -H: the line table's columns
//! 9       69.72       for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
//! 16      30.28       for (unsigned long i = 0; i < n; i++) x = x * 2862933555777941757UL + i;
//!
//! **** module sampling points 1103 ****
//!
//! % profdev prof -b -m libc.so.6        # start the mounted device, leave it on
//! % …
//! % echo stop >/run/profdev/prof/ctl
//! % profdev prof -f                      # show what the mounted device holds (standard output)
//! ```
//!
//! A row reads: the source line (for a function, the line it is declared
//! at; with `-n`, `file:line`), then the share of all samples of all
//! modules shown, in percent (the `%time` of gprof), then the function or
//! the text of the line. Without `-H` the rows are the same, with no
//! heading line.
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
//! * Deviations from Inferno's prof: with CMD the listing goes to standard
//!   error (or `-o FILE`), not standard output, so that it never mixes
//!   with CMD's output; its bytes are Inferno's. The usage line is
//!   Inferno's byte for byte, followed by a second line listing profdev's
//!   additions; a bad command line exits with status 2 (Inferno's
//!   `fail:usage` had no number), and with CMD the status is CMD's when
//!   CMD failed.
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
use crate::classic;
use crate::output::Report;
use anyhow::{anyhow, Context as _, Result};
use profdev_classic::args::prof::{begin_messages, parse, Args, DEFAULT_INTERVAL_MS, SPEC};
use profdev_classic::prof::{ctl, listing, read_dev, read_mounted, Record, NO_PROFILE};
use profdev_core::{SampleSource, SessionConfig, SourceError, SourceFactory};
use profdev_dev::prof::{self, Prof};
use profdev_dev::{Dev as _, Engine};
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The command line as data: `--help`, the man page and the completions.
pub fn command() -> clap::Command {
    classic::command(&SPEC)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    classic::main(&SPEC, args, parse, run)
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
        if args.frequency.is_some() {
            eprintln!("prof: warning: -F option ignored");
        } else if args.interval.is_some() {
            eprintln!("prof: warning: -s option ignored");
        }
        let dir = crate::mount::ensure_mounted()?.join("prof");
        let records = read_mounted(&dir)?;
        show(&records, args, &Report::to(args.output.as_deref(), false))?;
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
        if let Some(i) = job.interrupted() {
            eprintln!("{}", i.sentence("prof", "nothing was sampled"));
        }
        // CMD's status if it failed, else 1.
        return Ok(crate::output::status(&job, status, false));
    }
    show(&records, args, &Report::to(args.output.as_deref(), true))?;
    if let Some(i) = job.interrupted() {
        eprintln!(
            "{}",
            i.sentence("prof", "the listing shows what was sampled until then")
        );
    }
    Ok(job.exit_code(status))
}

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
    files.extend(profdev_classic::prof::asked_by_path(&args.modules));
    profdev_classic::prof::not_profilable(files)
}

/// The -m list (and -e's executable) as `module` words, paths absolute.
fn module_words(args: &Args) -> Result<Vec<String>> {
    let exe = if args.exec {
        Some(find_program(&args.command[0])?)
    } else {
        None
    };
    profdev_classic::prof::module_words(&args.modules, exe.as_deref())
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

/// Run CMD under a private prof device; the job that ran it (to tell
/// whether a signal ended it), its exit status and the records.
fn profile_command(
    args: &Args,
) -> Result<(Job, std::process::ExitStatus, Vec<Record>, prof::ProfStats)> {
    // Signals are caught from here on (see `profdev_sample::job`).
    let mut job = Job::new()?;
    let interval = args.interval.unwrap_or(DEFAULT_INTERVAL_MS);
    let words = module_words(args)?;
    let mut config = prof::session_config(interval);
    if let Some(hz) = args.frequency {
        config.frequency_hz = hz;
    }
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
    // The rate is per second of CMD's CPU time (profdev_sample::cputime).
    let pid = child.id();
    let progress = dev.health().map(|h| {
        let cpu = Box::new(move || profdev_sample::cputime::of_process(pid));
        crate::progress::Progress::start_timed("prof", h, cpu)
    });
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
    let cpu = job.cpu_time();
    progress.map(|p| p.finish_timed(cpu));
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

/// Attribute, read sources, write the listing to `report`.
fn show(records: &[Record], args: &Args, report: &Report) -> Result<()> {
    // Symbolizing a big profile takes a while: a bar on a terminal.
    let pcs = records.iter().map(|r| r.pairs.len() as u64).sum();
    let bar = crate::bar::Bar::start("prof", "symbolizing", pcs);
    let text = listing(
        records,
        &args.options,
        args.innermost,
        &|| bar.inc(1),
        &mut |n| eprintln!("{n}"),
    )?;
    drop(bar);
    report.write(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_profile_names_cmd_when_it_is_a_malformed_elf_file() {
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
        // prof names CMD only when it is a malformed ELF; a script is not.
        let args = |cmd: &std::path::Path, exec: bool| Args {
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
}
