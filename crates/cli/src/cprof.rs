//! `profdev cprof`: Inferno's cprof(1), coverage: which source lines of a
//! program ran, which never did, and how many times each ran, counted
//! exactly.
//!
//! # Synopsis
//!
//! ```text
//! profdev cprof [-fneraqH] [-m MODULE]... [-o FILE] [--lcov FILE] [--cobertura FILE] [--hits] [CMD [ARGS]]
//! profdev cprof [-fneraqH] [-m MODULE]... [-o FILE] [--lcov FILE] [--cobertura FILE] [--hits] -p PID
//! ```
//!
//! # Description
//!
//! With CMD, cprof runs CMD under prof's coverage mode, which counts every
//! instruction of the selected modules exactly (a statically linked CMD
//! patched by cprof itself: see Bugs), and then lists, per module, each line of
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
//! | `-a` | list every source file of every module: headers whose code was only inlined, those whose text was not found as line numbers and marks only, and `(no line information)` for a module without lines (by default only a module's own files whose text was read are listed) |
//! | `-q` | quiet: no notes on standard error (errors, and the sentence of an interrupted `-p`, still) |
//! | `-e` | count CMD's own executable, or PID's with `-p` (with `-m`: as well as those modules) |
//! | `-m MODULE` | count this module (a basename such as `libc.so.6`, or a path); repeatable |
//! | `-r` | record: add the counts to `MODULE.prf` in the current directory, one per module, instead of listing |
//! | `-p PID` | attach to the running process PID instead of running CMD, count from now until it exits (or until cprof gets SIGINT, SIGTERM or SIGHUP), then list |
//! | `--lcov FILE` | also write an lcov tracefile (`genhtml FILE` renders it) |
//! | `--cobertura FILE` | also write Cobertura XML |
//! | `--hits` | hit mode with `--lcov`, `--cobertura` too: each line, function and branch edge 1 if it ran, else 0, at about the cost of the marks; not with `-f` or `-r` |
//! | `-o FILE` | write the listing to FILE (`-`: standard output) instead of standard error (with CMD) or standard output (with `-p` or without CMD); not in Inferno |
//! | `-H` | head each module's lines with a line naming the columns, `line  mark  source` (`line  count  source` with `-f`); the rows are unchanged; not in Inferno |
//!
//! **Marks at the cost of a flag.** When only the marks are wanted (no
//! `-f`, `-r`, `--lcov` or `--cobertura`), CMD runs in the engine's hit
//! mode (`profdev_coverage::plan::Mode`): a block's probe is one `int3`
//! that records the block at its first run and removes itself (in the
//! launch window by a store: the pages stay writable while new code runs, see the engine's limits), so the code
//! then runs natively (a trampoline's byte in C library code that may run with SIGTRAP blocked), and a
//! block that another's run implies gets no probe. The marks are the
//! counting run's; the last line gives the instructions that ran, each
//! once. `-p` too (a probe PID had not reached when cprof ended is
//! removed by the runtime, which stays, at its first hit). With `--hits` the exports come from
//! hit mode too, `-p` as well (`-` still for a jump that never ran): an edge that is its target's only way in
//! is read from the target's mark, and a jump with another edge keeps a trampoline that stores a
//! byte on each edge (`plan/hits.rs`, "Edges"). Only in modules with lines (their own DWARF
//! or an installed debug file): one without has no branch line to show, and its hits alone.
//!
//! **Where the listing goes.** With CMD, to standard error, or to FILE
//! with `-o FILE` (written whole, through a temporary renamed over it):
//! never into CMD's standard output, so `profdev cprof -- cat f > g`
//! leaves g a copy of f. With `-p PID` or without CMD (the `.prf`
//! records), to standard output as in Inferno (or FILE).
//!
//! **Exit status.** With CMD: CMD's status if CMD failed (128 + the
//! signal if a signal ended it; cprof then says `cprof: interrupted by
//! SIGTERM; CMD's process group was ended; the listing shows what was
//! counted until then`, as prof, mprof, sample and gmon do), else 0 when a
//! listing was shown, else 1 with the classic `cprof: no profile
//! information`. A bad command line: 2, after `cprof: why` and the usage
//! lines.
//!
//! A `--lcov` or `--cobertura` FILE whose directory does not exist or
//! cannot be written is refused before CMD runs (one sentence, exit
//! status 1).
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
//! its source files where the debug information says they are. By
//! default only a module's own source files whose text was read are
//! listed (files in which one of its functions is defined), so that the
//! program's lines are not lost among its libraries': a module none of
//! whose own files was found (the C library, whose line table names
//! thousands of files of its build tree, and the compiler's intrinsic
//! headers for code inlined from them) shows its header and totals only.
//! `-a` lists every file: headers whose code was only inlined, and the
//! files not found as line numbers and marks only. A module is read through the file the
//! counting engine opened when it planned it (device and inode checked
//! against the mapping), so a library reached through its soname link
//! (`libz.so.1 -> libz.so.1.2.13`) is listed under the name it was loaded
//! by, and no link is followed; `-r` records its file (the link's
//! target) in the `.prf` header.
//!
//! **Notes.** What cprof says besides its errors is one line per kind on
//! standard error, however many modules or files it concerns: source
//! files not found (how many, the first three), modules without debug
//! information, blocks that could not be counted, blocks counted through a
//! breakpoint, files left out of the exports. `-q` silences them.
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
//! **The plan cache.** Planning a module (finding its blocks, encoding
//! its counting code) is most of what a short cprof run costs (python3:
//! about a second per process), so cprof keeps each plan on disk, named
//! by a digest of the module's bytes and of the engine, and reuses it
//! while both are unchanged. The cache is `$PROFDEV_CACHE_DIR/coverage`
//! when `PROFDEV_CACHE_DIR` is set (`PROFDEV_CACHE_DIR=off`: no cache),
//! else `/var/cache/profdev/coverage` for root and
//! `$XDG_CACHE_HOME/profdev/coverage` (or `~/.cache/profdev/coverage`) for
//! other users; directories 0700, files 0600, read back only when nobody
//! else could have written them. It is kept under 2 GiB by removing the
//! files used least recently; one run of a big program (python3, with its
//! libraries) adds tens of megabytes. Removing the directory at any time is
//! safe: the next run plans again (`profdev_coverage::cache`).
//!
//! # Example
//!
//! Columns are separated by tabs; shown here with spaces.
//!
//! ```text
//! % cc -O0 -g -o known known.c
//! % profdev cprof -r -e ./known          # records known.prf
//! % profdev cprof -H -f -m known         # no CMD: the listing goes to standard output
//!
//! Module: known(/home/u/known)    72% coverage      <- name(file), share of its instructions that ran
//!
//! line    count   source                 <- -H: the columns
//! ...
//! 5                int called(int x)     <- no code on this line: no count
//! 6       10       {                     <- the line's code ran 10 times
//! 7       10           return x * 2;
//! ...
//! 19      1|11|10      for (i = 0; i < n; i++) {   <- three parts: init once, test 11, step 10
//! 20      10               sink += called(i);
//! 21      10               if (i % 5 == 0)
//! 22      2                    k++;
//! 23                   }
//! 24      1|0          if (argc > 5) never_called();  <- the test ran, the call never did
//! ...
//! **** module instructions 386 ****      <- instructions executed in the module
//!
//! % profdev cprof -m known --lcov known.info && genhtml -o html known.info
//!
//! % profdev cprof -e -o known.cov -- ./known > known.out   # the listing in known.cov, ./known's output alone in known.out
//!
//! % ./server & profdev cprof -e -p $! --lcov server.info  # from now until it exits
//! cprof: counting process 4242 from now; its lines are listed when it exits (or on SIGINT, SIGTERM, SIGHUP)
//! ```
//!
//! Without `-f` the second column holds the marks (`+`, `-`, `?`, see
//! above) and `-H` names it `mark`.
//!
//! # Bugs
//!
//! * Deviations from Inferno's cprof: with CMD the listing goes to
//!   standard error (or `-o FILE`), not standard output, so that it never
//!   mixes with CMD's output; its bytes are Inferno's. The usage line is
//!   Inferno's byte for byte, followed by a second line listing profdev's
//!   additions; a bad command line exits with status 2, and with CMD the
//!   status is CMD's when CMD failed.
//! * The listing's classic form is kept line for line, but by default it
//!   leaves out the source files whose text was not found (Inferno's
//!   modules always had theirs) and headers whose code was only inlined
//!   (a module's own files are those its functions are defined in): a
//!   module without any shows the header and the totals without rows.
//!   `-a` lists them all, as profdev did before (files not found as line
//!   numbers and marks).
//! * Coverage reaches a program through the dynamic loader (its runtime
//!   is preloaded). A statically linked CMD is patched by cprof itself,
//!   through ptrace, at its stop before `_start` (`profdev_coverage::traced`:
//!   the same plans and trampolines, no runtime in it; a note says so); a
//!   block too short to patch costs a ptrace stop (µs) per run; its threads
//!   and forked children count into arrays of their own, a vfork child into
//!   its parent's; a process that execs is let go (what its image ran is
//!   lost; a note says so). Where ptrace is refused (or with
//!   `PROFDEV_COV_UPROBES=1`) uprobes count it: 0.2–16 µs per block, root.
//!   A setuid program run by another user ignores the preload. The vDSO,
//!   JIT code and code that runs before the runtime's constructor (the
//!   loader, libc's initializers) are not counted; blocks that cannot be
//!   patched are said on stderr (`N blocks could not be counted`), and
//!   blocks shorter than a jump counted through a breakpoint are said
//!   too. The engine's limits are listed in `profdev_coverage`'s crate
//!   documentation.
//! * node (V8): its own binary is counted, but not V8's embedded builtins
//!   (`v8_Default_embedded_blob_code_`, found by symbol): V8 runs a copy
//!   of them it makes at run time, which a patch would break. A note
//!   says how many blocks that leaves uncounted; a stripped node, without
//!   the symbol, crashes. JavaScript itself (JIT code) is not counted.
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
//!   module it loads from then on is not counted. A statically linked
//!   process is patched and followed by cprof through ptrace, as a static
//!   CMD is (counts, not hit mode; its stops are honoured), until it exits
//!   or cprof is interrupted: then it is let go, its breakpoints put back,
//!   its jumps left counting into arrays nobody reads. Killed with SIGKILL,
//!   cprof cannot put them back, and the process dies at its next short
//!   block. Where ptrace fails (or with `PROFDEV_COV_UPROBES=1`) uprobes
//!   count it, said on standard error, and the probes go with cprof.
//! * A fault or asynchronous signal whose handler never returns may mark
//!   or count (once too often) the block cut short and blocks derived
//!   from it (`plan/hits.rs`, `plan/derive.rs`). Hit mode: a probe
//!   is removed through `/proc/self/mem` (else its page is left writable);
//!   a child forked before a block's first run marks it, one forked
//!   after does not (its parent did). SIGTRAP is the runtime's: a
//!   program's handler is chained, no mask holds it (`-p` clears it); C
//!   library code reached only through a pointer while the library
//!   itself holds every signal blocked, run there for the first time,
//!   would be killed by its probe (none is known; use `-f`).
//! * Lines come from the line table: code the compiler attributed to no
//!   line (padding, some startup code) counts in the coverage but is in no
//!   listing; code optimized away has no instructions, so no mark.
//! * A line's count is that of its most executed instruction, not gcov's
//!   count of entries into the line: a loop condition's line counts the
//!   condition's runs.

use crate::classic;
use crate::output::Report;
use anyhow::Result;
use profdev_classic::args::cprof::{parse, Args, SPEC};
use profdev_classic::cprof::{self, counted_lines, lines_of, read_records, Notes};
use profdev_coverage::listing;
use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

/// The command line as data, for `--help`, the man page and completions.
pub fn command() -> clap::Command {
    classic::command(&SPEC)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    classic::main(&SPEC, args, parse, run)
}

/// The run, then its notes (one line per kind, none with `-q`), also
/// when it fails, then the sentence of an interrupted `-p`.
fn run(args: &Args) -> Result<ExitCode> {
    let mut notes = Notes::new(args.options.all);
    let result = work(args, &mut notes);
    if !args.quiet {
        for line in notes.lines() {
            eprintln!("{line}");
        }
    }
    let (exit, interrupted) = result?;
    if let Some(sentence) = interrupted {
        eprintln!("{sentence}");
    }
    Ok(exit)
}

/// The run: its exit status, and the sentence to end with after an
/// interrupted `-p`.
fn work(args: &Args, notes: &mut Notes) -> Result<(ExitCode, Option<String>)> {
    let quiet = args.quiet;
    let say = &mut |n: String| {
        if !quiet {
            eprintln!("{n}");
        }
    };
    cprof::check_outputs(args)?;
    let mut listings = Vec::new();
    let mut exit = ExitCode::SUCCESS;
    let mut interrupted = None;
    if let Some(pid) = args.pid {
        let r = cprof::run_attached(pid, args, say, notes)?;
        listings = counted_lines(r.modules, &r.words, &args.modules, args.record, notes)?;
        if let Some((sig, sentence)) = r.interrupted {
            exit = ExitCode::from(128u8.wrapping_add(sig as u8));
            interrupted = Some(sentence);
        }
    } else if args.command.is_empty() {
        for m in &args.modules {
            let r = read_records(m)?;
            listings.push(lines_of(&r.path, None, &r.insns, &r.branches, notes));
        }
    } else {
        let program = crate::child::find_program(&args.command[0])?;
        let is_static = profdev_classic::program::is_static_program(&program);
        let words = cprof::selection(args, &program);
        let launched = if is_static {
            cprof::run_static(&args.command, &program, args.mode(), say, notes)?
        } else {
            cprof::run_under_coverage(&args.command, &words, args.mode(), notes)?
        };
        exit = launched.exit;
        interrupted = launched.interrupted;
        listings = match counted_lines(launched.modules, &words, &args.modules, args.record, notes)
        {
            // Nothing counted: the classic message, and CMD's status if
            // it failed.
            Err(e) if launched.failed => {
                eprintln!("cprof: {}", crate::cmdline::sentence(&e));
                return Ok((exit, interrupted));
            }
            r => r?,
        };
    }
    let listings = cprof::listings(listings, args.record, notes);
    if !args.record {
        let text = listing::format(&listings, &args.options);
        let runs_cmd = !args.command.is_empty();
        Report::to(args.output.as_deref(), runs_cmd).write(text.as_bytes())?;
    }
    for (file, bytes) in cprof::exports(&listings, args, notes) {
        profdev_safefile::write_file(Path::new(&file), &bytes, 0o644)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok((exit, interrupted))
}
