//! `profdev gmon [-F HZ] [-o FILE] [--format gnu|bsd] [--exact] -- CMD
//! [ARGS]`: gprof for any program, without `-pg`.
//!
//! Runs CMD (and the processes it forks) under a per-process sampling
//! session, user mode only, with the user registers and a copy of the user
//! stack taken at every sample; unwinds each stack with the binaries'
//! `.eh_frame` (frame pointers where that is better, see
//! `profdev_symbolize::unwind`); and when CMD exits writes a gmon.out for
//! CMD's executable, which `gprof CMD gmon.out` reads:
//!
//! * a histogram over the executable's `.text`, in link-time addresses (a
//!   PIE's load bias removed), one u16 cell per 4 bytes as glibc's
//!   `monstartup` sizes it (HISTFRACTION 2), saturating, at `-F` Hz;
//! * one arc per pair of adjacent frames that both lie in the executable:
//!   `frompc` the call site (return address - 1), `selfpc` the entry of the
//!   function holding the callee frame, counted once per sample whose stack
//!   held it.
//!
//! The histogram covers the text CMD's file holds: a `.text` section whose
//! header claims bytes past the end of the file, or outside the file
//! bytes of every loadable segment (what exec maps), or none at all, is
//! refused before CMD runs with one sentence naming the file (`profdev
//! gmon: ./prog is a malformed ELF file: its .text section claims …`),
//! exit status 1; nothing is sized from a claim.
//!
//! Samples outside the executable (shared libraries, the vDSO, other
//! programs CMD runs) are counted and reported, not written: gprof knows
//! only CMD's symbols. Arcs into PLT stubs (`random_r@plt`, calls into
//! shared libraries) are counted and not written either: gprof reads no
//! PLT symbols and would charge them to `_init`. A stripped CMD's functions
//! (from `.dynsym` and `.eh_frame`, `sub_ADDR`) are written to `CMD.syms`
//! beside gmon.out, and the `gprof CMD.syms gmon.out` that reads it is
//! printed. It exits with CMD's status.
//!
//! **Names gprof drops.** GNU gprof leaves out a local (static) function
//! whose name holds a `$` (Rust's legacy mangling: generic instances,
//! closures, hashbrown) or a `.` suffix other than `.N`, `.clone.N` and
//! `.constprop.N` (GCC's `.isra.0`, `.part.0`, `.cold` and LTO's
//! `.lto_priv.0` clones), and charges its time to the function before it
//! (`frame_dummy` in a Rust release program, with false cycles). When
//! CMD's symbol table has such a function, its functions are written to
//! `CMD.syms` beside gmon.out, each at its address with its size, and the
//! last line names them and prints the command that reads the profile:
//! `gprof CMD.syms gmon.out`. No name is changed: a local function whose
//! name holds `.` or `$` is written as a global symbol under its own name
//! (the reverse mapping is the identity; gprof, which keeps every global
//! name, prints it as the binary has it, demangled unless `--no-demangle`),
//! and the others as they are in CMD. So gprof `-a`, which hides static
//! functions, shows these. Where such a function shares its address with
//! another symbol (an alias), it is left out and gprof names the address
//! by the other, as it does reading CMD. `gprof CMD gmon.out` still reads
//! the profile, with those names dropped. The same holds for a stripped
//! CMD's `NAME.cold` parts and for `kgmon -p`'s `vmlinux.syms`.
//!
//! **Exact call counts: `--exact`.** Without it, gprof's "called" column
//! holds sampled arc traversals (the number of samples whose stack held
//! the call), a relative weight. With `--exact` it holds numbers of calls:
//! CMD's executable is run under prof's coverage engine
//! (`profdev_coverage`, the one `cprof` uses: the runtime preloaded with
//! `LD_PRELOAD` rewrites the executable's code at load time into
//! trampolines with per-thread counters), which counts every basic block
//! exactly; blocks end after each call, so the block holding a call ran as
//! many times as the call was made (`profdev_coverage::arcs`). Each direct
//! call (`call F`), each direct jump to another function's entry (a tail
//! call, `jmp F`, or a conditional one, counted as often as it was taken)
//! becomes an arc from the call site to F with that count. Calls through
//! the PLT or, with `-fno-plt`, through a GOT slot go to the function the
//! slot's relocation names: into the executable (an arc) or out of it into
//! a shared library (counted on stderr, not written). Indirect calls
//! (`call *%rax`, `call *8(%rbx)`, any operand) and indirect jumps that are
//! not a switch's jump table (tail calls through a pointer, `jmp *%rax`)
//! have their target recorded at run time, as the instruction computes it,
//! in per-thread tables (5 to 7 ns per such call): each target with its
//! exact count becomes an arc to the function it enters (a jump counts
//! only when it enters another function at its entry), or a call into a
//! shared library (counted on stderr), or into code outside every file
//! (the vDSO, JIT code: counted on stderr). Threads are summed; a forked
//! child counts what it ran after the fork. The histogram stays
//! sampled, as without `--exact`, from the same one run: a sample taken
//! in a trampoline (the executable's code as the runtime runs it) is
//! charged to the block the trampoline copies, and stderr says how many
//! were. No stack is taken or unwound. GNU gmon.out's arc counts are 32
//! bits: a count above 4294967295 is written as 4294967295 and stderr says
//! how many arcs were saturated (`--format bsd`, LP64, holds 64 bits).
//! The executable's plan is kept in the coverage engine's plan cache
//! (`$PROFDEV_CACHE_DIR/coverage`, else `/var/cache/profdev/coverage` for
//! root and `~/.cache/profdev/coverage` for others; see profdev-cprof(1)).
//!
//! **Other programs.** gmon.out holds CMD's executable only. When CMD
//! runs other programs that take the time (`gmon -- gcc …` compiles in
//! `cc1`, a program `gcc` runs), their samples cannot go into it: gmon
//! says how many samples were in which other programs, by command name,
//! so that gmon can be run on the one that matters.
//!
//! **Signals.** CMD runs in its own process group, the terminal's
//! foreground group while it runs. SIGINT, SIGTERM or SIGHUP sent to gmon
//! is passed to CMD's group; after 2 s what is left of CMD's processes is
//! killed with SIGKILL; the gmon.out of what was sampled until then is
//! written (complete: gprof reads it), one line says so (`profdev gmon:
//! interrupted by SIGTERM; CMD's process group was ended; wrote gmon.out`),
//! and the exit status is 128 + the signal. When CMD exits on its own,
//! gmon keeps sampling the processes it left running until they exit too.
//! The rules, shared with `sample` and `prof`, are in `profdev_sample::job`.
//!
//! FILE is written through `profdev_safefile`: a unique temporary beside
//! it, created when the run starts (so an unwritable FILE is found at
//! once), renamed over FILE at the end; a symbolic link at FILE is
//! replaced, never followed. Its mode is 0644 (less the umask), as `cc -pg`
//! leaves gmon.out: it holds the program's addresses, none of the
//! kernel's. If it cannot be written (a full disk) FILE is left complete
//! or absent, the error names it, and the exit status is CMD's if CMD
//! failed, else 1 (128 + the signal after a signal).
//!
//! # Example
//!
//! ```text
//! $ profdev gmon --exact -- ./prog
//! $ gprof -b -q ./prog gmon.out
//!                 0.00    0.00    3000/3000        a [2]
//! [1]      0.0    0.00    0.00    3000         b [1]
//!                 0.00    0.00       7/7           c [5]
//! ```
//!
//! (b calls c through a function pointer, `call *%rax`, 7 times.)
//!
//! # Bugs
//!
//! gmon writes nothing to standard output: the profile goes to `-o FILE`
//! (gmon.out), its summary to standard error, so CMD's output is left as
//! CMD wrote it (`profdev gmon -- cat f > g` leaves g a copy of f), as
//! `profdev prof`, `cprof`, `mprof` and `sample` do.
//!
//! With `--exact`, an indirect call whose target could not be recorded
//! (`call *%rsp`; a record lost when a signal handler interrupts the
//! recording of another and records too, or when a thread has met more
//! than 2^19 (site, target) pairs) is counted but not attributed: stderr
//! says `N indirect calls at M call sites not attributed`, and the callee
//! shows fewer calls. A switch whose jump table the planner did not
//! recover has its jumps recorded (slower) and, as they stay inside the
//! function, not counted as calls. In a function that uses computed gotos
//! (its inner labels stored in data, as an interpreter's dispatch) no
//! `jmp *%reg` is recorded: a tail call through a pointer made there by
//! such a jump is not counted. A target is named when the process
//! writes its report (at exit): a call into a library unloaded before
//! (`dlclose`) is counted as a call outside every module. Calls into the executable from
//! shared libraries (callbacks such as `qsort`'s comparator) and from the
//! loader (`main`) have no call site in the executable's text, which is all
//! a gmon.out describes: gprof shows such a callee with fewer calls, or as
//! spontaneous. Blocks the coverage engine could not count (see
//! `profdev_coverage`'s limits; stderr names how many) lose the calls they
//! make. `--exact` reaches a dynamically linked executable only: a static
//! CMD is refused with a sentence, and a setuid one (run by another user:
//! the loader ignores `LD_PRELOAD`) is not rewritten, so gmon.out then has
//! no arcs (stderr says so). Only CMD's executable is counted, in CMD and the processes
//! it forks; other programs CMD runs are not (gmon.out describes CMD's
//! executable alone).

use crate::child::{find_program, Job};
use crate::output;
use anyhow::{anyhow, bail, Result};
use clap::{Parser, ValueEnum};
use profdev_gprof::{Builder, Counter, Program, CALLED_NOTE, EXACT_NOTE};
use profdev_safefile::SafeFile;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FormatArg {
    /// GNU tagged format, what glibc writes.
    Gnu,
    /// 4.4BSD format, what NetBSD's kgmon writes.
    Bsd,
}

/// Profile CMD the way `cc -pg` would, without recompiling it: write a
/// gmon.out that `gprof CMD gmon.out` reads.
#[derive(Parser, Debug)]
#[command(
    name = "profdev gmon",
    version,
    after_help = format!("Note: {CALLED_NOTE} With --exact: {EXACT_NOTE}\n\nCMD must be an ELF executable. If it is stripped, its \
        functions are taken from .dynsym and .eh_frame (named sub_ADDR) and written to CMD.syms beside \
        the profile, for `gprof CMD.syms gmon.out`; so are its functions when gprof would drop \
        some of their names (local names with '$' or a '.isra.0', '.part.0', '.cold' suffix), as \
        global symbols under the same names. Its children are sampled too, but only code in \
        CMD's own executable is written.\n\n{}",
        crate::child::SIGNALS_HELP)
)]
pub(crate) struct Args {
    /// Samples per second (software cpu-clock, user mode), at most 10000.
    #[arg(short = 'F', value_name = "HZ", default_value_t = 1000)]
    frequency: u32,
    /// Where to write the profile.
    #[arg(short = 'o', value_name = "FILE", default_value = "gmon.out")]
    output: PathBuf,
    /// gmon.out layout.
    #[arg(long, value_enum, default_value_t = FormatArg::Gnu)]
    format: FormatArg,
    /// Bytes of user stack copied with each sample, for unwinding code
    /// without frame pointers (0: the kernel's frame-pointer chains only).
    #[arg(long, value_name = "BYTES", default_value_t = profdev_gprof::DEFAULT_STACK_BYTES)]
    stack_bytes: u32,
    /// Ring buffer data pages per CPU, a power of two (perf's name; the
    /// default is sized to the rate and stack copy). A ring too small for
    /// a sample loses it.
    #[arg(long, value_name = "N", value_parser = crate::progress::parse_mmap_pages)]
    mmap_pages: Option<u32>,
    /// Count every call exactly (coverage trampolines in CMD's executable):
    /// gprof's "called" column then holds numbers of calls; the histogram
    /// stays sampled.
    #[arg(long)]
    exact: bool,
    /// The command to profile, and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>("profdev gmon", args) {
        Ok(args) => crate::cmdline::finish("profdev gmon", run(&args)),
        Err(code) => code,
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    let config = profdev_gprof::session_config(args.frequency, args.stack_bytes, args.exact)?;
    // Signals are caught from here on: one that comes while profdev
    // prepares still ends the run cleanly (see `profdev_sample::job`).
    let mut job = Job::new()?;
    let program = find_program(&args.command[0])?;
    let exe = Program::open(&program)?;
    // Find out now, not after a long run, whether the output can be written:
    // the real write starts here, into a temporary beside FILE.
    let out = SafeFile::create(&args.output, output::USER_MODE)?;
    let mut cmd = std::process::Command::new(&program);
    cmd.args(&args.command[1..]);
    // --exact: the coverage runtime preloaded, CMD's executable selected.
    let counter = Counter::for_run(args.exact, &exe, &program)?;
    cmd.envs(
        counter
            .iter()
            .flat_map(|c| c.env(std::env::var_os("LD_PRELOAD"))),
    );
    // Own process group, the terminal, signals passed on: `profdev_sample::job`.
    job.prepare(&mut cmd);
    let objects = profdev_symbolize::Objects::new();
    let (child, source) = crate::progress::factory(args.mmap_pages)
        .with_mapping_hook(objects.mapping_hook())
        .spawn_profiled(&mut cmd, &config)
        .map_err(|e| anyhow!("{e}"))?;
    job.started(&child);
    let health = std::sync::Arc::new(profdev_dev::health::Health::new());
    health.started(&config);
    // The rate is per second of CMD's CPU time (profdev_sample::cputime).
    let pid = child.id();
    let cpu = Box::new(move || profdev_sample::cputime::of_process(pid));
    let progress = crate::progress::Progress::start_timed("profdev gmon", health.clone(), cpu);
    let mut builder = Builder::new(exe, objects, args.exact);
    let (ended, stats) = builder.read_until_end(source, |batch, unwind| {
        health.count(batch);
        if let Some(u) = unwind {
            health.set_unwind(u.samples - u.truncated, [0, u.truncated, 0]);
        }
        // Pass signals on, reap CMD, kill its group after the grace period.
        job.poll();
    });
    health.stopped_after_end();
    let status = job.wait();
    progress.finish_timed(job.cpu_time());
    if let Some(e) = ended {
        bail!("sampling stopped early: {e}");
    }
    let format = match args.format {
        FormatArg::Gnu => profdev_formats::gmon::Format::Gnu,
        FormatArg::Bsd => profdev_formats::gmon::Format::Bsd,
    };
    let done = builder.finish(counter.as_ref(), args.frequency, format)?;
    let written = done.write(out, &args.output, output::USER_MODE);
    for line in done.summary(&written, &program, &stats) {
        eprintln!("profdev gmon: {line}");
    }
    if let Some(i) = job.interrupted() {
        eprintln!("{}", i.sentence("profdev gmon", &written.what()));
    }
    if let Some(line) = written.last_line(&program) {
        eprintln!("profdev gmon: {line}");
    }
    Ok(output::status(&job, status, written.is_ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_missing_program_is_a_sentence() {
        let e = find_program(&OsString::from("/nonexistent/x")).unwrap_err();
        assert_eq!(e.to_string(), "/nonexistent/x: no such executable file");
        // The options parse as documented.
        let a = Args::try_parse_from(["gmon", "--exact", "-F", "500", "--", "ls", "-l"]).unwrap();
        assert!(a.exact);
        assert_eq!((a.frequency, a.format), (500, FormatArg::Gnu));
        assert_eq!(a.output, Path::new("gmon.out"));
        assert_eq!(a.command, ["ls", "-l"]);
    }
}
