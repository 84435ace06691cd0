//! `profdev cprof`: Inferno's cprof(1), coverage: which source lines of a
//! program ran, which never did, and how many times each ran, counted
//! exactly.
//!
//! # Synopsis
//!
//! ```text
//! profdev cprof [-fner] [-m MODULE]... [--lcov FILE] [--cobertura FILE] [CMD [ARGS]]
//! profdev cprof [-fner] [-m MODULE]... [--lcov FILE] [--cobertura FILE] -p PID
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
//! | `-e` | count CMD's own executable, or PID's with `-p` (with `-m`: as well as those modules) |
//! | `-m MODULE` | count this module (a basename such as `libc.so.6`, or a path); repeatable |
//! | `-r` | record: add the counts to `MODULE.prf` in the current directory, one per module, instead of listing |
//! | `-p PID` | attach to the running process PID instead of running CMD, count from now until it exits (or until cprof gets SIGINT, SIGTERM or SIGHUP), then list |
//! | `--lcov FILE` | also write an lcov tracefile (`genhtml FILE` renders it) |
//! | `--cobertura FILE` | also write Cobertura XML |
//!
//! **Attach** (`-p PID`). cprof counts a process that is already running,
//! by the same machinery as prof's `startcp PID` (`profdev_dev::prof`'s
//! coverage mode, whose documentation has the details and limits): it
//! plans the selected modules PID maps while PID runs on, stops PID's
//! threads with ptrace, loads the runtime with PID's own `dlopen`, patches
//! the code in place and gives each thread a counter array of its own,
//! then lets PID run on, counting every block from then on (code that ran
//! before has no count). cprof says `cprof: counting process PID ...` on
//! standard error once PID runs again, and lists when PID exits (its
//! runtime writes the counts at exit). SIGINT, SIGTERM or SIGHUP to cprof
//! end the wait instead: cprof has PID write its counts so far (stopping
//! it once more for the call), lists them, says so in one sentence and
//! exits with 128 + the signal; **PID runs on**, still patched and
//! counting, but nobody reads its counts any more (see Bugs). cprof's exit
//! status is otherwise 0: PID is not its child, so PID's own status is not
//! known. cprof may attach only where `ptrace(2)` would let its user
//! (the kernel's rule: all of PID's uids and gids its own, PID dumpable,
//! Yama's scope), and PID is held by a pidfd from that check: once PID's
//! threads are stopped the check runs again on PID itself, before
//! anything is loaded, so a PID that exec'd a set-user-id program
//! meanwhile is let go untouched. The errors are one sentence each: no
//! such process, ptrace refused (naming `kernel.yama.ptrace_scope` when
//! that is why), a process traced or counted already, a statically linked
//! program.
//!
//! Without CMD or `-p`, cprof shows what the `.prf` records of the `-m` modules
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
//! (`profdev_coverage::lines`, `listing`, `prf`, `lcov`) and the formats
//! crate (`profdev_formats::lcov`, `cobertura`).
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
//! **The private directory.** The runtime, the planning socket and the
//! reports live in `profdev-cov.XXXXXX` in `$TMPDIR` (or `/tmp`), created
//! 0700 (with `-p`, opened to PID's user: 0711, as `startcp` does). cprof
//! removes it when it ends; one left behind (cprof killed, or an
//! interrupted `-p` whose process runs on) is removed by the next cprof
//! or `startcp` of the same user once no live process maps its runtime.
//! Run as root for another user's process (`-p`), cprof reads of a module
//! only what its ELF headers name and plans at most 4 MiB of code per
//! module the user can have written and 64 MiB per run, caching it
//! apart, per uid; see
//! `profdev_coverage::launch`'s Bounds.
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
//!
//! % ./server & profdev cprof -e -p $! --lcov server.info  # from now until it exits
//! cprof: counting process 4242 from now; its lines are listed when it exits (or on SIGINT, SIGTERM, SIGHUP)
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
//! * `-p PID`: everything `startcp PID`'s Bugs say (every thread held while
//!   the code is patched; a thread stopped inside `dlopen`'s lock makes
//!   the attach give up; blocks under a stopped thread's pc uncounted;
//!   programs PID execs not counted; children it forks counted only if
//!   they end before it). A process that ends with `_exit` or a signal that
//!   kills it writes no report: cprof then says that nothing was counted.
//!   After an interrupted `-p` the process stays patched and counts on at
//!   near-native cost until it exits, with nobody to read the counts: its
//!   later reports go to the private directory cprof names on standard
//!   error (kept, not removed, so that no other user can take its name
//!   while the patched process runs; the next cprof or `startcp` of the
//!   same user removes it once no process maps its runtime), and a
//!   module it loads from then on is not counted. A
//!   statically linked process is counted through uprobes (as a static
//!   CMD is, and said so on standard error); an interrupted `-p` then
//!   stops counting it (the probes go with cprof).
//! * Lines come from the line table: code the compiler attributed to no
//!   line (padding, some startup code) counts in the coverage but is in no
//!   listing; code optimized away has no instructions, so no mark.
//! * A line's count is that of its most executed instruction, not gcov's
//!   count of entries into the line: a loop condition's line counts the
//!   condition's runs.

use crate::child::Job;
use crate::classic;
use anyhow::{bail, Context as _, Result};
use profdev_attach::CovAttached;
use profdev_classic::args::cprof::{parse, Args, SPEC};
use profdev_classic::cprof::{self, counted_lines, lines_of, notes, read_records};
use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::lcov;
use profdev_coverage::listing;
use profdev_sample::job::Catcher;
use std::ffi::OsString;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

/// The command line as data, for `--help`, the man page and completions.
pub fn command() -> clap::Command {
    classic::command(&SPEC)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    classic::main(&SPEC, args, parse, run)
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

/// `-p PID`: the counts, the module words they were selected by, and
/// how the wait ended.
struct AttachRun {
    modules: Vec<ModuleCoverage>,
    words: Vec<String>,
    /// The signal that ended the wait, and the sentence to say after the
    /// listing.
    interrupted: Option<(libc::c_int, String)>,
}

/// A device error as cprof's one sentence.
fn attach_sentence(e: profdev_dev::DevError) -> anyhow::Error {
    use profdev_dev::DevError;
    anyhow::anyhow!(match e {
        DevError::NoDevice(s) | DevError::NotPermitted(s) | DevError::Busy(s) => s,
        DevError::NoProcess(p) => format!("no process {p}: -p needs the id of a running process"),
        e => e.to_string(),
    })
}

/// Wait until `a`'s process has exited (None) or one of the signals
/// `caught` catches came (Some). The process is watched through a pidfd
/// where the kernel has them (5.3), and its `/proc` entry (start time
/// checked) at every wake-up and at least every second.
fn wait_attached(caught: &Catcher, a: &CovAttached) -> Option<libc::c_int> {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a pid and flags; a descriptor it
    // returns is ours to own.
    let pidfd = unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, a.pid() as libc::pid_t, 0);
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd as libc::c_int))
    };
    loop {
        if let Some(s) = caught.caught() {
            return Some(s);
        }
        if !a.running() {
            return None;
        }
        let timeout = if pidfd.is_some() { 1000 } else { 50 };
        caught.sleep(
            std::time::Duration::from_millis(timeout),
            pidfd.as_ref().map(|p| p.as_fd()),
        );
        caught.drain();
    }
}

/// `cprof -p PID`: attach coverage to the running process (prof's
/// `startcp` machinery, [`profdev_attach::attach_coverage`]), wait for
/// it to exit or for a signal, and take its counts.
fn run_attached(pid: u32, args: &Args) -> Result<AttachRun> {
    // Caught from here on: a signal during the attach (which holds PID's
    // threads) ends the wait right after it, never the attach half way.
    let caught = Catcher::new().context("cannot catch signals")?;
    // The kernel's ptrace rule for cprof itself, first: a process cprof may
    // not trace is refused in its terms (kernel.yama.ptrace_scope, the
    // credentials), not as an unreadable /proc/PID/maps.
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    // SAFETY: getegid has no preconditions.
    let gid = unsafe { libc::getegid() };
    let me = profdev_dev::access::Cred {
        uid,
        gid,
        pid: std::process::id(),
    };
    let permit = profdev_dev::access::ptrace_may_attach(&me, pid).map_err(|e| match e {
        profdev_dev::DevError::NotPermitted(why) => {
            anyhow::anyhow!("not permitted to ptrace {why}")
        }
        e => attach_sentence(e),
    })?;
    // The static case (no C library to load the runtime with) is counted
    // through uprobes by the same attach: say so.
    if profdev_attach::statically_linked(pid).map_err(attach_sentence)? {
        eprintln!(
            "cprof: process {pid} is statically linked: counted through uprobes (one multi-uprobe \
             BPF link, Linux 6.6 or later), about 0.2 to 16 us per block executed; its children \
             are not counted"
        );
    }
    let mut words = args.modules.clone();
    if args.exec {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("cannot read process {pid}'s executable (-e)"))?;
        words.push(
            std::fs::canonicalize(&exe)
                .unwrap_or(exe)
                .to_string_lossy()
                .into_owned(),
        );
    }
    let attached =
        profdev_attach::attach_coverage(pid, &words, Some(permit)).map_err(attach_sentence)?;
    eprintln!(
        "cprof: counting process {pid} from now; its lines are listed when it exits (or on \
         SIGINT, SIGTERM, SIGHUP)"
    );
    if let Some(sig) = wait_attached(&caught, &attached) {
        // Its counts so far: a report now. A process gone meanwhile wrote
        // its exit report instead.
        let flushed = attached.flush();
        let (modules, notes) = attached.collect();
        for n in &notes {
            eprintln!("cprof: {n}");
        }
        let name = profdev_sample::job::signal_name(sig);
        let what = if attached.running() {
            if let Err(e) = flushed {
                eprintln!("cprof: process {pid} could not write its counts so far: {e}");
            }
            match attached.leave_running() {
                Some(dir) => format!(
                    "cprof: interrupted by {name}; process {pid} runs on, still counted, with \
                     nobody to read its later counts (in {}: remove it once process {pid} has \
                     exited); listed: its counts up to now",
                    dir.display()
                ),
                None => format!(
                    "cprof: interrupted by {name}; process {pid} runs on, no longer counted \
                     (its uprobes are removed with cprof); listed: its counts up to now"
                ),
            }
        } else {
            format!(
                "cprof: interrupted by {name}; process {pid} had exited; listed: all its counts"
            )
        };
        return Ok(AttachRun {
            modules,
            words,
            interrupted: Some((sig, what)),
        });
    }
    let (modules, notes) = attached.collect();
    for n in &notes {
        eprintln!("cprof: {n}");
    }
    let total: u64 = modules
        .iter()
        .flat_map(|m| &m.blocks)
        .map(|b| b.count)
        .fold(0, u64::saturating_add);
    if total == 0 {
        bail!(
            "process {pid} reported no counts: it ended with _exit or a signal that killed it, \
             or ran none of the counted code after the attach"
        );
    }
    Ok(AttachRun {
        modules,
        words,
        interrupted: None,
    })
}

fn run(args: &Args) -> Result<ExitCode> {
    let say = &mut |n: String| eprintln!("{n}");
    let mut listings = Vec::new();
    let mut exit = ExitCode::SUCCESS;
    let mut interrupted = None;
    if let Some(pid) = args.pid {
        let r = run_attached(pid, args)?;
        listings = counted_lines(r.modules, &r.words, &args.modules, args.record, say)?;
        if let Some((sig, sentence)) = r.interrupted {
            exit = ExitCode::from(128u8.wrapping_add(sig as u8));
            interrupted = Some(sentence);
        }
    } else if args.command.is_empty() {
        for m in &args.modules {
            let r = read_records(m)?;
            listings.push(lines_of(&r.path, &r.insns, &r.branches, say));
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
        listings = counted_lines(launched.modules, &words, &args.modules, args.record, say)?;
    }
    let listings = cprof::listings(listings, args.record, say);
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
            profdev_safefile::write_file(
                Path::new(file),
                profdev_formats::lcov::lcov(&records).as_bytes(),
                0o644,
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        if let Some(file) = &args.cobertura {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let xml = profdev_formats::cobertura::cobertura(&records, now);
            profdev_safefile::write_file(Path::new(file), xml.as_bytes(), 0o644)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    if let Some(sentence) = interrupted {
        eprintln!("{sentence}");
    }
    Ok(exit)
}
