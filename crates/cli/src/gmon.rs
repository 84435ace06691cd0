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
use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, ValueEnum};
use profdev_core::{CpuMode, FileAddr, Record, Sample, SessionConfig, SourceError, Target};
use profdev_coverage::arcs;
use profdev_coverage::launch::Server;
use profdev_formats::gmon::build::{self, ArcCounts, CallGraph};
use profdev_formats::gmon::{self, Format, GmonOut};
use profdev_safefile::SafeFile;
use profdev_symbolize::unwind::UserUnwinder;
use profdev_symbolize::{ElfObject, Objects, SymOrigin, Tasks};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The honesty note, on stderr after writing and in `--help`.
pub const CALLED_NOTE: &str =
    "gprof's \"called\" column shows sampled arc traversals (the number of \
samples whose stack held the call), not numbers of calls: read it as a relative weight.";

/// The note with `--exact`.
pub const EXACT_NOTE: &str = "gprof's \"called\" column shows exact numbers of calls, counted at \
every call site (direct, through a pointer, through the PLT) and tail-call jump in the executable; \
calls from shared libraries and counts above 4294967295 (GNU gmon.out's 32 bits) are not in it, \
nor what is said above to be left out.";

/// Bytes of user stack copied with each sample for unwinding.
const DEFAULT_STACK_BYTES: u32 = 16384;

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
        the profile, for `gprof CMD.syms gmon.out`. Its children are sampled too, but only code in \
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
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_STACK_BYTES)]
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
    let config = SessionConfig {
        target: Target::Process {
            pid: 0,
            inherit: true,
        },
        frequency_hz: args.frequency,
        kernel: false,
        user: true,
        // --exact takes the arcs from the counts: no stacks to unwind.
        callchain: !args.exact,
        user_stack_bytes: if args.exact { 0 } else { args.stack_bytes },
        track_tasks: true,
    };
    config.validate().map_err(|e| anyhow!("{e}"))?;
    // Signals are caught from here on: one that comes while profdev
    // prepares still ends the run cleanly (see `profdev_sample::job`).
    let mut job = Job::new()?;
    let program = find_program(&args.command[0])?;
    let exe = Program::open(&program)?;
    // Find out now, not after a long run, whether the output can be written:
    // the real write starts here, into a temporary beside FILE.
    let out = create_output(&args.output)?;

    let mut cmd = std::process::Command::new(&program);
    cmd.args(&args.command[1..]);
    // --exact: the coverage runtime preloaded, CMD's executable selected.
    let counter = if args.exact {
        if !dynamically_linked(&exe.path) {
            bail!(
                "--exact counts calls by rewriting the executable through the dynamic loader, \
                 and {} is statically linked: run profdev gmon without --exact for sampled \
                 call counts",
                program.display()
            );
        }
        let server = Server::new(&[exe.path.to_string_lossy().into_owned()])
            .context("cannot set up exact call counting")?;
        // Indirect calls' targets too.
        server.set_call_targets(true);
        for (k, v) in server.env(std::env::var_os("LD_PRELOAD")) {
            cmd.env(k, v);
        }
        Some(server)
    } else {
        None
    };
    // Own process group, the terminal, signals passed on: `profdev_sample::job`.
    job.prepare(&mut cmd);
    let objects = Objects::new();
    let (child, mut source) = crate::progress::factory(args.mmap_pages)
        .with_mapping_hook(objects.mapping_hook())
        .spawn_profiled(&mut cmd, &config)
        .map_err(|e| anyhow!("{e}"))?;
    job.started(&child);
    let health = std::sync::Arc::new(profdev_dev::health::Health::new());
    health.started(&config);
    let progress = crate::progress::Progress::start("profdev gmon", health.clone());
    let mut builder = Builder::new(exe, objects);
    if counter.is_some() {
        builder.misses = Some(Vec::new());
    }
    let mut batch = Vec::new();
    let ended = loop {
        let r = source.read(&mut batch, Duration::from_millis(100));
        health.count(&batch);
        for rec in batch.drain(..) {
            builder.record(&rec);
        }
        if !args.exact {
            // (--exact takes no stacks.)
            let u = builder.unwinder.stats();
            health.set_unwind(u.samples - u.truncated, [0, u.truncated, 0]);
        }
        // Pass signals on, reap CMD, kill its group after the grace period.
        job.poll();
        match r {
            Ok(()) => {}
            Err(SourceError::Ended) => break None,
            Err(e) => break Some(e),
        }
    };
    let stats = source.stats();
    drop(source);
    health.stopped_after_end();
    progress.finish();
    let status = job.wait();
    if let Some(e) = ended {
        bail!("sampling stopped early: {e}");
    }

    let charged = match &counter {
        Some(server) => builder.charge_trampolines(&Trampolines::new(server, &builder.exe.path)),
        None => 0,
    };
    let mut profile = builder.gmon(args.frequency);
    let format = match args.format {
        FormatArg::Gnu => Format::Gnu,
        FormatArg::Bsd => Format::Bsd,
    };
    let exact = match &counter {
        Some(server) => Some(exact_arcs(server, &builder.exe, format)?),
        None => None,
    };
    if let Some(x) = &exact {
        profile.arcs.clone_from(&x.arcs);
    }
    let bytes = gmon::write(&profile, format, gmon::Target::X86_64)
        .map_err(|e| anyhow!("cannot encode the profile: {e}"))?;
    // A full disk loses the file, not the summary below.
    let mut written = finish_output(out, &bytes);
    let mut syms_file = None;
    if written.is_ok() {
        if let Some(elf) = exe_symbols_elf(&builder.exe) {
            let path = symbols_path(&args.output, &builder.exe.path);
            written = write_output(&path, &elf);
            syms_file = Some(path);
        }
    }
    let wrote = match &written {
        Ok(()) => "wrote",
        Err(_) => "did not write",
    };

    let c = builder.counts();
    eprintln!(
        "profdev gmon: {wrote} {} for {}: {} user samples at {} Hz, {} in its text, {} elsewhere \
         (libraries, other programs), {} arcs; {} lost, {} throttled",
        args.output.display(),
        program.display(),
        c.samples,
        args.frequency,
        c.in_text,
        c.samples - c.in_text,
        profile.arcs.len(),
        stats.lost,
        stats.throttled
    );
    if exact.is_none() {
        eprintln!("profdev gmon: {}", builder.unwinder.stats());
    }
    if c.saturated > 0 {
        eprintln!(
            "profdev gmon: {} histogram counts were lost: cells stop at 65535",
            c.saturated
        );
    }
    if c.unresolved > 0 {
        eprintln!(
            "profdev gmon: {} arcs dropped: their callee is in no function of {}'s symbol table",
            c.unresolved,
            program.display()
        );
    }
    if c.plt_calls > 0 && exact.is_none() {
        eprintln!(
            "profdev gmon: {} arcs into PLT stubs (calls into shared libraries) not written: \
             gprof knows no PLT symbols and would charge them to _init",
            c.plt_calls
        );
    }
    match &exact {
        Some(x) => {
            if charged > 0 {
                eprintln!(
                    "profdev gmon: {charged} of the samples in its text ran in the copies of its \
                     code that count the calls (trampolines), charged to the code they copy"
                );
            }
            for n in &x.notes {
                eprintln!("profdev gmon: {n}");
            }
            eprintln!("profdev gmon: note: {EXACT_NOTE}");
        }
        None => eprintln!("profdev gmon: note: {CALLED_NOTE}"),
    }
    if let Some(i) = job.interrupted() {
        let wrote = if written.is_ok() {
            "wrote"
        } else {
            "did not write"
        };
        eprintln!(
            "{}",
            i.sentence(
                "profdev gmon",
                &format!("{wrote} {}", args.output.display())
            )
        );
    }
    if let Err(e) = &written {
        eprintln!("profdev gmon: {e}");
    } else if let Some(path) = syms_file {
        eprintln!(
            "profdev gmon: {} is stripped: wrote its functions (.dynsym and .eh_frame: sub_ADDR) \
             to {}; read the profile with: gprof {} {}",
            program.display(),
            path.display(),
            path.display(),
            args.output.display()
        );
    }
    Ok(output::status(&job, status, written.is_ok()))
}

/// Where the executable's code ran from under `--exact`: its trampoline
/// areas, each entry leading back to the block (link-time address) it
/// counts and copies.
struct Trampolines {
    areas: Vec<TrampolineArea>,
}

/// One load's trampoline area: its run-time start and end, and its entries
/// sorted, (run-time entry, link-time address of the block it counts).
type TrampolineArea = (u64, u64, Vec<(u64, u64)>);

impl Trampolines {
    fn new(server: &Server, exe: &Path) -> Self {
        Trampolines::of(server.areas(), exe)
    }

    fn of(all: Vec<profdev_coverage::launch::Area>, exe: &Path) -> Self {
        use profdev_coverage::encode::{PATCH_JMP, PATCH_REL8};
        let mut areas = Vec::new();
        for a in all.into_iter().filter(|a| a.path == exe) {
            // A short block hops (rel8) to a jmp placed in another block's
            // dead bytes: the trampoline behind that jmp is the short
            // block's.
            let hops: HashMap<u64, u64> = a
                .patches
                .iter()
                .filter(|p| p.kind == PATCH_REL8)
                .map(|p| (p.entry, p.addr))
                .collect();
            let mut entries: Vec<(u64, u64)> = a
                .patches
                .iter()
                .filter(|p| p.entry >= a.start && p.entry < a.end)
                .map(|p| {
                    let at = match hops.get(&p.addr) {
                        Some(&block) if p.kind == PATCH_JMP => block,
                        _ => p.addr,
                    };
                    (p.entry, at.wrapping_sub(a.bias))
                })
                .collect();
            entries.sort_unstable();
            areas.push((a.start, a.end, entries));
        }
        Trampolines { areas }
    }

    /// The link-time address of the block whose trampoline holds `pc`.
    fn link_addr(&self, pc: u64) -> Option<u64> {
        let (_, _, entries) = self.areas.iter().find(|(s, e, _)| *s <= pc && pc < *e)?;
        let i = entries.partition_point(|(entry, _)| *entry <= pc);
        Some(entries.get(i.checked_sub(1)?)?.1)
    }
}

/// Does the executable at `path` name a dynamic loader (`.interp`), which
/// `--exact` needs to preload its runtime?
fn dynamically_linked(path: &Path) -> bool {
    use object::read::elf::{ElfFile64, ProgramHeader};
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    // Only the headers are read.
    let cache = object::ReadCache::new(file);
    let Ok(elf) = ElfFile64::<object::Endianness, _>::parse(&cache) else {
        return false;
    };
    let endian = elf.endian();
    elf.elf_program_headers()
        .iter()
        .any(|ph| ph.p_type(endian) == object::elf::PT_INTERP)
}

/// The exact arcs of a `--exact` run and what to say about them.
struct Exact {
    arcs: Vec<gmon::Arc>,
    notes: Vec<String>,
}

/// The executable's exact call arcs, from the coverage counts `server`
/// collected, as `format` can hold them.
fn exact_arcs(server: &Server, exe: &Program, format: Format) -> Result<Exact> {
    let (modules, cov_notes) = server.collect();
    let mut notes: Vec<String> = cov_notes
        .into_iter()
        .map(|n| format!("exact counts: {n}"))
        .collect();
    let Some(m) = modules.iter().find(|m| m.path == exe.path) else {
        notes.push(format!(
            "--exact counted no call: {} was not reached through the loader (a static or \
             setuid program is not; see the man page's Bugs), so gmon.out has no arcs",
            exe.path.display()
        ));
        return Ok(Exact {
            arcs: Vec::new(),
            notes,
        });
    };
    let (targets, lost) = server.call_targets();
    let a = arcs::module_arcs(m, &exe.elf, &targets)?;
    let (arcs, saturated) = gmon_arcs(&a.arcs, format);
    let calls: u64 = a.arcs.values().fold(0, |s, c| s.saturating_add(*c));
    notes.push(format!(
        "{calls} calls counted exactly in {}",
        plural(arcs.len() as u64, "arc")
    ));
    if a.indirect_calls > 0 {
        notes.push(format!(
            "{} indirect calls at {} not attributed: their targets were not recorded{} (see the \
             man page's Bugs)",
            a.indirect_calls,
            plural(a.indirect_sites, "call site"),
            if lost > 0 {
                format!(" ({lost} records lost)")
            } else {
                String::new()
            }
        ));
    }
    if a.library_calls > 0 {
        notes.push(format!(
            "{} calls into shared libraries (through the PLT, the GOT or a pointer) not written: \
             gprof knows only {}'s functions",
            a.library_calls,
            exe.path.display()
        ));
    }
    if a.outside_calls > 0 {
        notes.push(format!(
            "{} indirect calls into code outside every module mapped from a file (the vDSO, JIT \
             code) not written",
            a.outside_calls
        ));
    }
    if a.unresolved > 0 {
        notes.push(format!(
            "{} calls dropped: their callee is in no function of {}'s symbol table",
            a.unresolved,
            exe.path.display()
        ));
    }
    notes.extend(saturated);
    Ok(Exact { arcs, notes })
}

/// `1 arc`, `2 arcs`.
fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Exact arcs as gmon.out arcs, and the note saying how many were
/// saturated: the GNU layout's counts are 32 bits (4.4BSD LP64's are a
/// signed 64-bit long).
fn gmon_arcs(arcs: &BTreeMap<(u64, u64), u64>, format: Format) -> (Vec<gmon::Arc>, Option<String>) {
    let max = match format {
        Format::Gnu => u64::from(u32::MAX),
        _ => i64::MAX as u64,
    };
    let mut saturated = 0;
    let out = arcs
        .iter()
        .map(|(&(from_pc, self_pc), &count)| {
            if count > max {
                saturated += 1;
            }
            gmon::Arc {
                from_pc,
                self_pc,
                count: count.min(max),
            }
        })
        .collect();
    let note = (saturated > 0).then(|| {
        format!(
            "{} made more than {max} calls, written as {max}: GNU gmon.out's arc counts are \
             32-bit (--format bsd holds 64)",
            plural(saturated, "arc")
        )
    });
    (out, note)
}

/// Start writing a profile file for user programs (gmon.out, or a file
/// beside it): a unique temporary in its directory, mode 0644 (it holds
/// the program's addresses, no kernel's), renamed over `path` by
/// [`finish_output`]. Every file `profdev gmon` writes goes through here.
pub(crate) fn create_output(path: &Path) -> Result<SafeFile, profdev_safefile::Error> {
    SafeFile::create(path, output::USER_MODE)
}

/// Write `bytes` and put the file in place: afterwards it is complete, or
/// (on an error, e.g. a full disk) as it was before.
pub(crate) fn finish_output(
    mut out: SafeFile,
    bytes: &[u8],
) -> Result<(), profdev_safefile::Error> {
    out.write_bytes(bytes)?;
    out.commit()
}

/// Write a whole profile file at once, as [`create_output`] and
/// [`finish_output`] do (the stripped executable's symbols beside gmon.out).
pub(crate) fn write_output(path: &Path, bytes: &[u8]) -> Result<(), profdev_safefile::Error> {
    finish_output(create_output(path)?, bytes)
}

/// Where a stripped executable's symbols go: `EXE.syms` beside gmon.out.
fn symbols_path(output: &Path, exe: &Path) -> PathBuf {
    let name = exe
        .file_name()
        .map_or_else(|| "a.out".into(), |n| n.to_string_lossy().into_owned());
    output.with_file_name(format!("{name}.syms"))
}

/// For a stripped executable, the symbols ELF gprof reads in its place (as
/// `kgmon -p` writes `vmlinux.syms`): its `.dynsym` functions and the
/// functions its `.eh_frame` FDEs delimit, over the histogram's range.
/// `None` for an executable with a symbol table: gprof reads that.
fn exe_symbols_elf(exe: &Program) -> Option<Vec<u8>> {
    if !exe.stripped {
        return None;
    }
    let syms: Vec<(u64, char, String)> = exe
        .elf
        .all_symbols()
        .into_iter()
        .filter(|s| s.addr >= exe.lowpc && s.addr < exe.highpc && s.origin != SymOrigin::Plt)
        .map(|s| {
            let kind = if s.origin == SymOrigin::Table {
                'T'
            } else {
                't'
            };
            (s.addr, kind, s.mangled)
        })
        .collect();
    let nm: Vec<(u64, char, &str)> = syms.iter().map(|(a, k, n)| (*a, *k, n.as_str())).collect();
    Some(profdev_formats::symelf::from_nm(exe.lowpc..exe.highpc, &nm))
}

/// The `.text` of the executable at `path` (`shown` names it to the user)
/// as gmon.out describes it, `(start, end)` in link-time addresses, when
/// its bytes are in the file: within the file's length, and within the
/// file bytes of one loadable segment (what exec maps and runs). The
/// histogram and the arc table are sized from this range, so a section
/// header that claims more text than the file holds (2^62 bytes) is
/// refused with a sentence instead of sizing them.
fn present_text(path: &Path, shown: &Path) -> Result<(u64, u64)> {
    use object::{Object, ObjectSection, ObjectSegment};
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", shown.display()))?;
    let len = file
        .metadata()
        .with_context(|| format!("cannot read {}", shown.display()))?
        .len();
    // Read what the headers name, not the whole file.
    let cache = object::ReadCache::new(file);
    let elf = profdev_symbolize::elf::parse(&cache, shown).map_err(|e| {
        anyhow!(
            "{} is a malformed ELF file: {}; give an intact executable",
            shown.display(),
            e.reason()
        )
    })?;
    let malformed = |why: String| {
        anyhow!(
            "{} is a malformed ELF file: {why}; give an intact executable",
            shown.display()
        )
    };
    let Some(text) = elf.section_by_name(".text") else {
        bail!("{} has no .text section to profile", shown.display());
    };
    let (start, size) = (text.address(), text.size());
    let Some((offset, _)) = text.file_range() else {
        return Err(malformed(
            "its .text section has no bytes in the file".into(),
        ));
    };
    if offset.checked_add(size).is_none_or(|e| e > len) {
        return Err(malformed(format!(
            "its .text section claims {size} bytes at file offset {offset}, past the end of \
             the file ({len} bytes)"
        )));
    }
    let end = start.checked_add(size).ok_or_else(|| {
        malformed(format!(
            "its .text section ends past 2^64 ({start:#x} + {size})"
        ))
    })?;
    let mapped = elf.segments().any(|seg| {
        let (seg_off, seg_len) = seg.file_range();
        let seg_end = seg.address().checked_add(seg_len);
        seg_off.checked_add(seg_len).is_some_and(|e| e <= len)
            && seg.address() <= start
            && seg_end.is_some_and(|e| end <= e)
    });
    if !mapped {
        return Err(malformed(format!(
            "its .text section ({size} bytes at {start:#x}) is not within the file bytes of a \
             loadable segment, so it is not the code that runs"
        )));
    }
    Ok((start, end))
}

/// CMD's executable: its symbols, text range and identity.
struct Program {
    elf: ElfObject,
    path: PathBuf,
    ino: u64,
    dev: (u32, u32),
    lowpc: u64,
    highpc: u64,
    /// No symbol table: gprof needs the symbols file written beside gmon.out.
    stripped: bool,
}

impl Program {
    fn open(path: &Path) -> Result<Self> {
        let canonical = path
            .canonicalize()
            .with_context(|| format!("cannot read {}", path.display()))?;
        let meta = std::fs::metadata(&canonical)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let elf = match ElfObject::open(&canonical) {
            Ok(e) => e,
            Err(profdev_symbolize::ElfError::NotElf { .. }) => {
                bail!("{} is not an ELF executable", path.display())
            }
            Err(e) => return Err(e.into()),
        };
        if elf.text_range().is_none() {
            bail!("{} has no .text section to profile", path.display());
        }
        // The histogram covers the text the file holds, never what its
        // section header claims.
        let (start, end) = present_text(&canonical, path)?;
        // Stripped: no function of the symbol tables in its text. Its
        // functions then come from .dynsym and .eh_frame, written for gprof
        // to a symbols file beside gmon.out.
        let stripped = !elf
            .symbols()
            .iter()
            .any(|s| s.origin == SymOrigin::Table && s.addr >= start && s.addr < end);
        if stripped
            && !elf
                .all_symbols()
                .iter()
                .any(|s| s.addr >= start && s.addr < end)
        {
            bail!(
                "{} has no symbol table (it was stripped) and no .eh_frame, so gprof could not \
                 name its functions",
                path.display()
            );
        }
        Ok(Program {
            elf,
            path: canonical,
            ino: meta.ino(),
            dev: (libc::major(meta.dev()), libc::minor(meta.dev())),
            lowpc: build::text_bounds(start, end).0,
            highpc: build::text_bounds(start, end).1,
            stripped,
        })
    }

    /// Is the mapping this executable?
    fn is(&self, m: &profdev_symbolize::Mapping) -> bool {
        match m.file {
            Some(f) => f.ino == self.ino && (f.major, f.minor) == self.dev,
            None => Path::new(&m.path) == self.path,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    samples: u64,
    in_text: u64,
    saturated: u64,
    unresolved: u64,
    /// Arcs into PLT stubs (calls into shared libraries), not written.
    plt_calls: u64,
}

/// What a sample's callee frames were refused for (no arc).
#[derive(Debug, Default)]
struct Refused {
    unresolved: u64,
    plt_calls: u64,
}

/// Turns a record stream into a gmon.out for one executable.
struct Builder {
    exe: Program,
    tasks: Tasks,
    unwinder: UserUnwinder,
    /// The histogram and arcs (`profdev_formats::gmon::build`, shared with
    /// kgmon).
    graph: CallGraph<ArcCounts>,
    samples: u64,
    refused: Refused,
    /// The frames of the sample at hand, reused.
    frames: Vec<Option<u64>>,
    /// With `--exact`: user pcs outside every file mapping of the
    /// executable (trampolines among them), kept for [`Trampolines`].
    misses: Option<Vec<(u32, u64)>>,
}

impl Builder {
    fn new(exe: Program, objects: Objects) -> Self {
        Builder::with_tasks(exe, Tasks::with_objects(objects))
    }

    fn with_tasks(exe: Program, tasks: Tasks) -> Self {
        Builder {
            graph: CallGraph::new(exe.lowpc, exe.highpc, ArcCounts::default()),
            exe,
            tasks,
            unwinder: UserUnwinder::new(),
            samples: 0,
            refused: Refused::default(),
            frames: Vec::new(),
            misses: None,
        }
    }

    fn counts(&self) -> Counts {
        let g = self.graph.counts();
        Counts {
            samples: self.samples,
            in_text: g.ticks,
            saturated: g.saturated,
            unresolved: self.refused.unresolved,
            plt_calls: self.refused.plt_calls,
        }
    }

    fn record(&mut self, r: &Record) {
        self.tasks.observe(r);
        if let Record::Sample(s) = r {
            self.sample(s);
        }
    }

    /// The link-time address in the executable of process address `va`.
    fn file_addr(&self, pid: u32, va: u64) -> Option<FileAddr> {
        let m = self.tasks.lookup(pid, profdev_core::ProcessVa(va))?;
        if !self.exe.is(m) {
            return None;
        }
        self.exe
            .elf
            .file_addr_of_offset(m.file_offset(profdev_core::ProcessVa(va)))
    }

    fn sample(&mut self, s: &Sample) {
        if s.mode != CpuMode::User {
            return;
        }
        self.samples += 1;
        let stack = self.unwinder.unwind(&self.tasks, s);
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        frames.extend((0..stack.frames.len()).map(|i| {
            self.file_addr(s.pid, stack.lookup_address(i).0)
                .map(|a| a.0)
        }));
        if let (Some(misses), None) = (&mut self.misses, frames.first().copied().flatten()) {
            misses.push((s.pid, s.ip));
        }
        let (elf, refused) = (&self.exe.elf, &mut self.refused);
        // Arcs only into functions gprof can name: a PLT stub jumps into a
        // shared library (the call leaves the executable), and gprof,
        // which reads no PLT symbols, would charge the stub to `_init`.
        let entry = |callee: u64| match elf.symbol(FileAddr(callee)) {
            Some((sym, _)) if sym.origin == SymOrigin::Plt => {
                refused.plt_calls += 1;
                None
            }
            Some((sym, _)) => Some(sym.addr),
            None => {
                refused.unresolved += 1;
                None
            }
        };
        // An unbounded arc map never overflows.
        let _ = self.graph.sample(frames.iter().copied(), entry);
        self.frames = frames;
    }

    /// Charge the samples taken in the executable's trampolines (its code
    /// as the coverage runtime runs it) to the blocks they run: the
    /// histogram stays what it would be without `--exact`.
    fn charge_trampolines(&mut self, t: &Trampolines) -> u64 {
        let mut n = 0;
        for (_pid, ip) in self.misses.take().unwrap_or_default() {
            if let Some(a) = t.link_addr(ip) {
                if self.graph.tick(a) {
                    n += 1;
                }
            }
        }
        n
    }

    fn gmon(&self, hz: u32) -> GmonOut {
        let mut out = self.graph.gmon_out(hz);
        for arc in &mut out.arcs {
            // The GNU layout's counts are 32 bits.
            arc.count = arc.count.min(u64::from(u32::MAX));
        }
        out
    }

    #[cfg(test)]
    fn unwind_stats(&self) -> profdev_symbolize::unwind::UnwindStats {
        self.unwinder.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_core::UserRegs;

    /// The test binary itself plays CMD: a PIE with symbols.
    fn me() -> Program {
        Program::open(&std::env::current_exe().unwrap()).unwrap()
    }

    #[test]
    fn exact_counts_saturate_in_the_gnu_layout() {
        let big = u64::from(u32::MAX) + 5;
        let arcs: BTreeMap<(u64, u64), u64> =
            [((0x1010, 0x2000), big), ((0x1020, 0x2000), 7)].into();
        let (gnu, saturated) = gmon_arcs(&arcs, Format::Gnu);
        assert_eq!(
            saturated.as_deref(),
            Some(
                "1 arc made more than 4294967295 calls, written as 4294967295: GNU gmon.out's \
                 arc counts are 32-bit (--format bsd holds 64)"
            )
        );
        assert_eq!(
            gnu,
            vec![
                gmon::Arc {
                    from_pc: 0x1010,
                    self_pc: 0x2000,
                    count: u64::from(u32::MAX)
                },
                gmon::Arc {
                    from_pc: 0x1020,
                    self_pc: 0x2000,
                    count: 7
                }
            ]
        );
        // Written and read back: the file holds the saturated count.
        let out = GmonOut {
            arcs: gnu,
            ..GmonOut::default()
        };
        let bytes = gmon::write(&out, Format::Gnu, gmon::Target::X86_64).unwrap();
        let back = gmon::parse(&bytes, gmon::Target::X86_64).unwrap().gmon;
        assert_eq!(back.arcs[0].count, u64::from(u32::MAX));
        // 4.4BSD's LP64 counts are 64-bit: nothing saturates.
        let (bsd, saturated) = gmon_arcs(&arcs, Format::Bsd);
        assert_eq!((bsd[0].count, saturated), (big, None));
        assert_eq!(plural(1, "arc"), "1 arc");
        assert_eq!(plural(2, "arc"), "2 arcs");
    }

    #[test]
    fn trampoline_pcs_go_back_to_their_blocks() {
        use profdev_coverage::encode::{Patch, PATCH_CALL5, PATCH_JMP, PATCH_REL8};
        let bias = 0x5555_0000_0000;
        let area = profdev_coverage::launch::Area {
            path: "/x/prog".into(),
            bias,
            start: 0x7000_0000,
            end: 0x7000_1000,
            patches: vec![
                // Block 0x1100: a jump to its trampoline at +0x0.
                Patch {
                    addr: bias + 0x1100,
                    entry: 0x7000_0000,
                    kind: PATCH_JMP,
                    len: 5,
                },
                // Block 0x1200 (short): hops to a jmp at 0x1108, in block
                // 0x1100's dead bytes, which leads to +0x80.
                Patch {
                    addr: bias + 0x1108,
                    entry: 0x7000_0080,
                    kind: PATCH_JMP,
                    len: 5,
                },
                Patch {
                    addr: bias + 0x1200,
                    entry: bias + 0x1108,
                    kind: PATCH_REL8,
                    len: 2,
                },
                // A call site at 0x1300, counted by a stub at +0x100.
                Patch {
                    addr: bias + 0x1300,
                    entry: 0x7000_0100,
                    kind: PATCH_CALL5,
                    len: 5,
                },
            ],
        };
        let mut other = area.clone();
        other.path = "/x/lib.so".into();
        other.start = 0x7100_0000;
        other.end = 0x7100_1000;
        let t = Trampolines::of(vec![area, other], Path::new("/x/prog"));
        assert_eq!(t.link_addr(0x7000_0000), Some(0x1100));
        assert_eq!(t.link_addr(0x7000_007f), Some(0x1100));
        assert_eq!(t.link_addr(0x7000_0080), Some(0x1200));
        assert_eq!(t.link_addr(0x7000_0120), Some(0x1300));
        assert_eq!(t.link_addr(0x6fff_ffff), None);
        assert_eq!(t.link_addr(0x7000_1000), None);
        // Another module's area is not the executable's.
        assert_eq!(t.link_addr(0x7100_0000), None);
    }

    /// The unwinder's fixture (9 KB, static): `.text` is section 1, 0x12b
    /// bytes at 0x401000 from file offset 0x1000, all of its second load
    /// segment.
    const FX: &[u8] = include_bytes!("../../symbolize/fuzz-fixture/fx.elf");

    /// FX with `.text`'s section header field at `at` (bytes into the
    /// header) set to `value`, written to `dir/name`.
    fn fx_with(dir: &Path, name: &str, at: usize, value: u64) -> PathBuf {
        let mut b = FX.to_vec();
        let shoff = u64::from_le_bytes(b[0x28..0x30].try_into().unwrap()) as usize;
        let text = shoff + 64 + at;
        if at == 4 {
            b[text..text + 4].copy_from_slice(&(value as u32).to_le_bytes());
        } else {
            b[text..text + 8].copy_from_slice(&value.to_le_bytes());
        }
        let path = dir.join(name);
        std::fs::write(&path, b).unwrap();
        path
    }

    #[test]
    fn the_histogram_covers_only_text_the_file_holds() {
        let d = tempfile::tempdir().unwrap();
        let fx = fx_with(d.path(), "fx", 0x20, 0x12b);
        assert_eq!(present_text(&fx, &fx).unwrap(), (0x401000, 0x40112b));
        let p = Program::open(&fx).unwrap();
        assert_eq!((p.lowpc, p.highpc), (0x401000, 0x40112c));
        // sh_size 2^62: past the end of the file, refused before anything
        // is sized from it.
        let huge = fx_with(d.path(), "huge", 0x20, 1 << 62);
        assert_eq!(
            format!("{:#}", Program::open(&huge).err().unwrap()),
            format!(
                "{} is a malformed ELF file: its .text section claims 4611686018427387904 \
                 bytes at file offset 4096, past the end of the file (9448 bytes); give an \
                 intact executable",
                huge.display()
            )
        );
        // In the file, but beyond what the segment maps: not the code that
        // runs.
        let long = fx_with(d.path(), "long", 0x20, 0x1000);
        assert_eq!(
            format!("{:#}", Program::open(&long).err().unwrap()),
            format!(
                "{} is a malformed ELF file: its .text section (4096 bytes at 0x401000) is not \
                 within the file bytes of a loadable segment, so it is not the code that runs; \
                 give an intact executable",
                long.display()
            )
        );
        // SHT_NOBITS: no bytes at all.
        let nobits = fx_with(d.path(), "nobits", 4, u64::from(object::elf::SHT_NOBITS));
        assert!(format!("{:#}", Program::open(&nobits).err().unwrap())
            .ends_with("its .text section has no bytes in the file; give an intact executable"));
        // An address range that wraps.
        let wraps = fx_with(d.path(), "wraps", 0x10, u64::MAX - 0x10);
        assert!(format!("{:#}", present_text(&wraps, &wraps).unwrap_err())
            .contains("its .text section ends past 2^64"));
    }

    #[test]
    fn not_elf_and_missing_are_sentences() {
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let e = Program::open(&script).err().unwrap();
        assert_eq!(
            format!("{e:#}"),
            format!("{} is not an ELF executable", script.display())
        );
        let e = find_program(&OsString::from("/nonexistent/x")).unwrap_err();
        assert_eq!(e.to_string(), "/nonexistent/x: no such executable file");
    }

    #[test]
    fn synthetic_samples_become_histogram_and_arcs() {
        let exe = me();
        // Two functions of this binary, as a caller/callee pair.
        let syms = exe.elf.symbols();
        let callee = syms
            .iter()
            .find(|s| s.size > 16 && s.addr >= exe.lowpc)
            .unwrap()
            .clone();
        let caller = syms
            .iter()
            .find(|s| s.size > 16 && s.addr > callee.addr + callee.size)
            .unwrap()
            .clone();
        let path = exe.path.to_str().unwrap().to_string();
        // Map the whole file at a bias: offset 0 at 0x5555_0000_0000.
        let base = 0x5555_0000_0000u64;
        let file_len = std::fs::metadata(&exe.path).unwrap().len();
        let offset_of = |fa: u64| {
            // Invert file_addr_of_offset by a search over the file.
            (0..file_len)
                .step_by(16)
                .find_map(|off| {
                    let a = exe.elf.file_addr_of_offset(off)?;
                    (fa >= a.0 && fa < a.0 + 16).then(|| off + (fa - a.0))
                })
                .unwrap()
        };
        let ip = base + offset_of(callee.addr + 8);
        let ret = base + offset_of(caller.addr + 10);
        let mut b = Builder::with_tasks(exe, Tasks::with_objects(Objects::with_loader(|_| None)));
        b.record(&Record::Mmap {
            pid: 9,
            tid: 9,
            addr: base,
            len: 0x4000_0000,
            pgoff: 0,
            path,
            file: None,
            build_id: None,
            time: 0,
        });
        let s = Sample {
            pid: 9,
            tid: 9,
            ip,
            mode: CpuMode::User,
            user_chain: vec![ip, ret],
            ..Sample::default()
        };
        b.record(&Record::Sample(s.clone()));
        b.record(&Record::Sample(s));
        // A sample elsewhere (no mapping) and a kernel one.
        b.record(&Record::Sample(Sample {
            pid: 9,
            ip: 0x10,
            mode: CpuMode::User,
            user_regs: Some(UserRegs::default()),
            ..Sample::default()
        }));
        b.record(&Record::Sample(Sample {
            pid: 9,
            ip: 0x10,
            mode: CpuMode::Kernel,
            ..Sample::default()
        }));
        let g = b.gmon(1000);
        let h = &g.histograms[0];
        assert_eq!(h.bins[((callee.addr + 8 - h.low_pc) / 4) as usize], 2);
        assert_eq!(
            g.arcs,
            vec![gmon::Arc {
                from_pc: caller.addr + 9,
                self_pc: callee.addr,
                count: 2
            }]
        );
        let c = b.counts();
        assert_eq!((c.samples, c.in_text), (3, 2));
        assert_eq!(b.unwind_stats().kernel_chain, 2);
    }
}

/// The PLT arc rule on synthetic stacks (a file of its own).
#[cfg(test)]
mod plt_arcs;
