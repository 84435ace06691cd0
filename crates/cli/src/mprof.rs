//! `profdev mprof`: Inferno's mprof(1), memory profiling: the bytes each
//! source line allocated and has not freed, and the most it ever held.
//!
//! # Synopsis
//!
//! ```text
//! profdev mprof [-bcMflnve123H] [-m MODULE]... [-o FILE] [--leaks] [--pprof FILE] [--dhat FILE] [--folded FILE [--folded-type alloc|inuse]] [--no-stacks] [--sample-bytes N] [--temporary] [--peak] [--wrapper SYMBOL]... [CMD [ARGS]]
//! profdev mprof [-Mflnve123H] [-m MODULE]... [-o FILE] [--leaks] [--pprof FILE] [--folded FILE [--folded-type alloc|inuse]] [--no-stacks] [--sample-bytes N] [--temporary] [--peak] [--wrapper SYMBOL]... -p PID [--snapshot SECONDS]
//! profdev mprof [-o FILE] -p PID --scan
//! ```
//!
//! # Description
//!
//! With CMD, mprof runs CMD with its accounting library preloaded
//! (`LD_PRELOAD`, into every process CMD starts), waits for it, and shows
//! per source line the bytes allocated there and not freed when the
//! process ended (*current*) and the most bytes that line's allocations
//! held at once (*high water*), per function, and per module. Every
//! allocation of the C library's malloc family is counted exactly, not
//! sampled: malloc, calloc, realloc (a free of the old block and an
//! allocation at the realloc's line), reallocarray, posix_memalign,
//! aligned_alloc, memalign, valloc, pvalloc and free, and C++'s `new` and
//! `delete` and Rust's allocations, which end in them.
//!
//! | option | meaning |
//! |---|---|
//! | `-l` | the line table: line, current bytes, high-water bytes, source text (the default, with `-M`, when neither `-f` nor `-l` is given) |
//! | `-f` | the function table |
//! | `-M` | module totals (and the line table unless `-f` is given) |
//! | `-n` | prefix each row with its source file and a colon |
//! | `-v` | include rows whose bytes are zero |
//! | `-m MODULE` | show only this module (a basename such as `libc.so.6`, or a path); repeatable |
//! | `-e` | show CMD's own executable only |
//! | `-1` `-2` `-3` | pools to count (default all three): 1 the malloc family; 2 anonymous memory the program maps itself (`mmap` with `MAP_ANONYMOUS`, `mremap`, `brk`, `sbrk`); 3 files the program maps (`mmap` of a file descriptor) |
//! | `-p PID` | attach to running process PID instead of running CMD (as `heaptrack -p`: its threads are stopped with ptrace while the library loads and its malloc family is redirected); the tables are shown when it exits, or at SIGINT, SIGTERM or SIGHUP, after which it is detached and runs on (see Nothing lost). Takes the options CMD does but `--dhat` (see Attached); blocks it allocated before are never subtracted. Needs the right to ptrace PID. With `--scan`, PID's unreachable heap blocks instead (see Scan; with none of the counts' outputs) |
//! | `--snapshot SECONDS` | with `-p`: count for SECONDS (a decimal), then show the tables and detach: the process runs on, its allocation calls going straight to the C library again, as before the attach |
//! | `-b` | begin: put the mounted prof device in memory mode (`startmp…`) and exit |
//! | `-c` | end the mounted device's session (`end`) and exit |
//! | `--leaks` | after the tables, the blocks never freed, grouped by allocating line, largest first |
//! | `--wrapper SYMBOL` | treat SYMBOL as an allocation wrapper too (repeatable) |
//! | `--dhat FILE` | also write DHAT's JSON of the run (valgrind's `dh_view.html` opens it): per site total bytes and blocks, the sum of block lifetimes (µs), high water, bytes and blocks at the global peak (t-gmax) and at the end; accesses are not measured. Lifetimes and the peak need one global lock: slower. Not with `-p` (see Attached) |
//! | `-o FILE` | write the tables (and `--leaks`' list) to FILE (`-`: standard output) instead of standard error (with CMD) or standard output (with `-p` or without CMD); not in Inferno |
//! | `-H` | head the line and function tables with a line naming the columns (see Example); the rows are unchanged; not in Inferno |
//! | `--pprof FILE` | also write a pprof heap profile of the run (`alloc_objects`, `alloc_space`, `inuse_objects`, `inuse_space`; one sample per allocation stack, symbolized; per site with `--no-stacks`) for `go tool pprof` |
//! | `--folded FILE` | also write the allocation stacks as folded lines, `root;…;caller;function BYTES` (bytes allocated per stack) for flame graphs |
//! | `--folded-type inuse` | `--folded`'s BYTES are those live at exit (`alloc`, the default: allocated) |
//! | `--no-stacks` | capture no stacks (`--pprof` then has one frame per site): the cost of stacks saved |
//! | `--sample-bytes N` | sample allocations every N bytes on average (1 to 2^40) and show estimates (see Sampling); not with `--dhat` |
//! | `--temporary` | after the tables, per site the *temporary* blocks: freed by their thread before its next allocation (heaptrack's definition), and all blocks |
//! | `--peak` | after the tables, what was live at the global high-water mark (DHAT's t-gmax), per stack (per site with `--no-stacks`); exact, under one global lock (slower); not with `--sample-bytes` |
//!
//! Without CMD (and without `-b` or `-c`), mprof shows what the mounted
//! prof device holds, its histograms read in the memory-mode layout.
//!
//! **Where the tables go.** With CMD, to standard error, or to FILE with
//! `-o FILE` (written whole, through a temporary renamed over it): never
//! into CMD's standard output, so `profdev mprof -- cat f > g` leaves g a
//! copy of f. With `-p PID` or without CMD, to standard output as in
//! Inferno (or FILE).
//!
//! **Exit status.** With CMD: CMD's status if CMD failed (128 + the
//! signal if a signal ended it), else 0 when the tables were shown, else
//! 1 with the classic `mprof: no profile information` or the sentence
//! saying why nothing was counted. A bad command line: 2, after `mprof:
//! why` and the usage lines.
//!
//! **Sites.** Bytes are charged to the *allocating site*: the return
//! address of the allocation call, or, when that call was made by a
//! known wrapper (C++'s operator new, Rust's `__rust_alloc`, its
//! `alloc::raw_vec` growth and `finish_grow`, `strdup`, `xmalloc`,
//! `g_malloc` and the list in `profdev_mprof`'s documentation), the first
//! return address outside the wrappers (found by the unwind tables below: a
//! cached rule a frame), so a `new` or a Rust `Vec` growing is
//! charged to the user's line. So is *system code*: a function declared
//! under a system include directory (`/usr/include`, `/usr/local/include`,
//! gcc's and clang's under `/usr/lib`, Rust's `/rustc/…`; any other file
//! is the user's own), found before the run in the DWARF of CMD's
//! executable and of the modules `-m` names by path (then their own lines
//! are the user's): at -O0, `new std::vector<int>(25000)` is charged to
//! its line, not to `bits/new_allocator.h`. A site is shown at the line of its call
//! instruction (the return address minus one) within the function that
//! made it (inlined code is charged to the line it was inlined at, as
//! `profdev prof` does by default). A free subtracts the block's bytes from
//! the site that allocated it; high water rises on allocation only. Blocks
//! allocated before the library was loaded are never subtracted.
//!
//! **Stacks.** With `--folded`, `--pprof` or `--peak` (unless `--no-stacks`) each
//! allocation is charged to its whole call stack too: its site (as above)
//! and its callers (at most 64 frames). Before the run (without stacks: on request), profdev builds
//! from `.eh_frame` an unwind table for the program and the libraries it
//! needs (`DT_NEEDED`, found as the loader would; with `-p PID`, for every
//! module the process has mapped): address ranges and their rule (the
//! CFA at `rsp` or `rbp` plus an offset, the return address below it, `rbp`
//! saved or unchanged), shared read-only with the library, which keeps
//! each return address's rule in a lock-free hash. A module met later (a
//! program CMD executes, a library it `dlopen`s) gets its table on request:
//! the library sends profdev the module's open file and waits (10 s at most).
//! With `-p PID` the service runs while profdev is attached, its socket and
//! tables in the process's own tables directory (its user's, 0700); a module
//! whose mapping profdev cannot open (`/proc/PID/map_files` is root's) gets
//! its table that way too. A frame no table covers is walked by its frame
//! pointer; a frame whose CFI is of another kind ends the stack. Every address read
//! is checked first (8-aligned, within the thread's stack, each frame
//! above the one before). Stacks merge per unique stack (16,384 at most per process,
//! the rest as one `[mprof: stack table full]` stack). The tables are unchanged. A stack
//! met before costs a compare of the words its walk read. Cost: `bench/README.md`.
//!
//! **Sampling.** With `--sample-bytes N`, each thread counts down bytes
//! drawn from an exponential distribution of mean N (a Poisson process);
//! the allocation that crosses zero is sampled (one of s bytes with
//! probability p = 1−e^(−s/N)) and stands for s/p bytes and 1/p blocks
//! (Go's unbiased weights); its free credits the same back. The others
//! cost a countdown and are not in the books. Every count shown (tables,
//! `--pprof`, `--folded`) is then an estimate, and a line after the tables
//! says so: an estimate of B bytes has a standard error of at most
//! √(N·B) (its variance is Σ w(w−s) over its samples, each w−s ≤ N).
//! Before it, an `Estimates` section lists each site's bytes allocated and
//! live at the end, each with `±` that bound, most allocated first (at
//! most 50 rows, the rest on one line); a site that allocated under N
//! bytes may not be sampled at all and then shows 0.
//!
//! **Temporary blocks and the peak.** `--temporary` and `--peak` come
//! from each process's exit report, added up over processes. The peak is
//! exact: at the first free after each new global high water the library
//! keeps what every site and stack holds (a copy made as each changes
//! next), under one global lock, as `--dhat`'s.
//!
//! **Attached.** `-p` gives the library mprof's settings (and
//! `PROFDEV_MPROF_SAMPLE_SEED`) as config lines; it counts from the attach
//! on, and the free of an older block subtracts nothing. So each output is
//! of the blocks allocated since: the tables and `--leaks`; `--pprof` and
//! `--folded`'s whole stacks; `--sample-bytes`' estimates and error line;
//! `--temporary` (an older block's free makes none); `--peak`, the high
//! water of those blocks, not of the heap. `--dhat` is refused: its
//! lifetimes and peak of older blocks are unknown. A run ended by the
//! detach (a signal, `--snapshot`) shows the report asked for before it.
//!
//! **Scan.** `-p PID --scan` stops PID (ptrace, the right checked as the
//! kernel would) while glibc's heap is walked and copied (at most 5 s; 0.4 s
//! for 190 MB), then lists by usable size the blocks nothing reachable
//! points into (interior pointers count), from before any attach too. The
//! roots, as memcheck's: registers, stacks from their pointer, and every
//! readable and writable mapping but glibc's heaps and mmapped chunks
//! (blocks: scanned when reached), kernel pages, devices, guard pages and
//! glibc's cache of dead threads' stacks (`profdev_mprof::scan`). Past
//! 1 GiB to read in all, the scan refuses in one sentence (never a partial
//! report). A program running under mprof (launched: `-p` its PID, not
//! mprof's; or attached) also has its leaks grouped by the stack
//! (`--folded`, `--pprof`; else the site) mprof's block table in it names,
//! "(allocated before mprof)" (or not sampled) the others; it is held for
//! the mark too (0.7 s with a million blocks leaked, 184 MB), a table left
//! unread said.
//!
//! **Pools.** As Inferno's `startmp` digits: pool 1 is the malloc family
//! above; pool 2 is anonymous memory the program itself maps or takes
//! from the break (`mmap` with `MAP_ANONYMOUS`, `mremap`, `brk`, `sbrk`);
//! pool 3 is files it maps (`mmap` of a file descriptor). A mapping is
//! charged to the line of its call, its length rounded up to whole pages
//! (the break: the bytes given to sbrk); `munmap` credits the pages it
//! removes, from part of a mapping too; `mremap` is the old range's
//! removal and a mapping at its own line. glibc's malloc maps its heaps
//! through internal calls that do not reach the exported `mmap`, so its
//! memory is counted once, in pool 1; blocks malloc serves from its own
//! mappings are not pool 2.
//!
//! **Processes.** A forked child starts from zero and counts its own
//! allocations; an exec'd program is counted again from its start. The
//! tables add up the processes (a high water so added is the sum of each
//! process's own). Module totals are each module's own counters: its high
//! water is the most its sites held at once.
//!
//! **How.** The library (`profdev_mprof`, C, embedded in profdev) is
//! written to a fresh private directory (mode 0700, locked by mprof while
//! it runs) at each run. Each process counts into a table shared with
//! profdev: a `MAP_SHARED` mapping of a file of its own in that directory
//! (`live.PID.K`, created `O_EXCL|O_NOFOLLOW`, mode 0600), so its counts
//! outlive it however it ends; at a normal exit it writes them as a text
//! report (`mprof.PID.K`, the same way) and removes the table. mprof reads
//! the reports, and the tables of processes that left none. Sites are
//! mapped to their module's link-time address through the load bias the
//! dynamic linker recorded and looked up in the module's DWARF line
//! tables, each file read once (the C library's and the dynamic loader's while CMD runs, the others several at once after it). The overhead, and the fixed cost apart, is measured by `bench/memory_overhead.sh`.
//!
//! **Nothing lost.** A process that ends with `_exit` (dash does), dies
//! of a signal (SIGSEGV...), is killed with SIGKILL (the OOM killer), or
//! execs another program is shown with what it had counted until then,
//! from its table. SIGINT, SIGTERM or SIGHUP sent to mprof: with CMD, the
//! signal is passed on as the Signals paragraph of `--help` says and the
//! tables of what was counted are shown; with `-p`, the process is asked
//! for a report, then detached (every GOT slot the attach redirected gets
//! back what it held; the library stays mapped, counting nothing), and
//! the tables of what it counted are shown (it runs on); either way mprof
//! says so in one sentence and exits with 128 + the signal. When no
//! process loaded the library at all, the sentence says why it can be
//! (a setuid program, LD_PRELOAD cleared, or interrupted before), with
//! CMD's status.
//!
//! **Directories.** mprof's private directory (`profdev-mprof.*` under
//! `$TMPDIR` if set, else a tmpfs: `$XDG_RUNTIME_DIR` when it is the user's
//! own, or /dev/shm; else /tmp) is removed when mprof ends; an attach's
//! (`profdev-attach.*`) when its process has exited. One left behind (a
//! SIGKILLed mprof, a process still counting after `mprof -p` was
//! interrupted) is removed by the next mprof or attach of the same user,
//! once it is not locked by a running profdev and no live process maps
//! its library (`/proc/PID/maps`); an attach's only when over 60 s old
//! (loading into a process may take 20 s).
//!
//! **Reports read.** A report larger than the library can write (about
//! 15 MB: 1024 modules, 65536 sites) or with more modules or sites is
//! refused by its size before it is read; a table must be the size its
//! header names (63 MiB). From an attached process's directory, which its
//! user owns, at most 256 reports and 64 MiB are read per session.
//!
//! **Signals.** CMD runs in its own process group as under `profdev prof`.
//!
//! # Example
//!
//! Columns are separated by tabs; shown here with spaces. CMD runs, so the
//! tables go to standard error (`-o known.mem` would write them to a file).
//!
//! ```text
//! % cc -g -o known known.c
//! % profdev mprof -H --leaks ./known
//!
//! Module: known(/home/u/known)
//!
//! line    current high-water      source          <- -H: the columns
//! 13      0       2097152         b[i] = malloc(4096);   <- all freed; at most 2 MiB held at once
//! 23      40000   100000          blocks[i] = malloc(100);  <- 40000 bytes never freed
//! 26      65536   65536       char *big = malloc(65536);
//! 28      0       10          char *r = malloc(10);
//! 29      0       10000       r = realloc(r, 10000);  <- realloc: a free of the old block, an allocation here
//!
//! Module totals   105536  2202688                 <- current and high water of the module as a whole
//!
//! Leaks: 105536 bytes in 401 blocks never freed
//!
//! bytes   blocks  site    function
//! 65536   1       /home/u/known.c:26      main()
//! 40000   400     /home/u/known.c:23      main()
//! ```
//!
//! A row reads: the source line (with `-n`, `file:line`; in the function
//! table, the line the function is declared at), the bytes allocated
//! there and not freed when the process ended (*current*), the most bytes
//! its allocations held at once (*high water*), then the text of the line
//! or the function. A row `?` sums the sites with no line information.
//!
//! # Errors
//!
//! A statically linked CMD cannot load the library: `mprof: ./prog is
//! statically linked: its allocations are out of reach of mprof (it
//! preloads a library into dynamically linked programs)`, exit status 1.
//! A program that carries its own allocator (jemalloc, mimalloc,
//! tcmalloc linked in, its own `malloc`, or a Rust `#[global_allocator]`)
//! is named with the symbol found: its allocations bypass the C library's
//! malloc and are out of reach. When nothing the program allocated was
//! counted in the malloc family, mprof says so (`mprof: ./prog carries its
//! own allocator (a Rust #[global_allocator]): its allocations bypass the C library's
//! malloc and are out of reach of mprof …`) and exits with status 1
//! instead of printing an empty profile. When no process
//! loaded the library (setuid programs ignore `LD_PRELOAD`; a program may
//! clear its environment), mprof says so with CMD's status (`mprof: prog
//! never loaded the accounting library (it exited with status 0): it is
//! setuid or setgid ...`) rather than print an empty profile.
//!
//! # Bugs
//!
//! * Deviations from Inferno's mprof: with CMD the tables go to standard
//!   error (or `-o FILE`), not standard output, so that they never mix
//!   with CMD's output; their bytes are Inferno's. The usage line is
//!   Inferno's byte for byte, followed by a second line listing profdev's
//!   additions (`-1`, `-2`, `-3`, `-H`, `-o`, `--leaks`, `--pprof`, `--dhat`,
//!   `--folded`, `--folded-type`, `--no-stacks`, `--sample-bytes`, `--temporary`, `--peak`, `--wrapper`, `-p`); a bad command line exits with status 2, and with
//!   CMD the status is CMD's when CMD failed (`mprof -- /bin/true` exits 0).
//! * A row's high water is the sum of the high waters of the sites
//!   (instructions) charged to it, as Inferno's library sums a line's
//!   instructions' (spec §2.4), not the most the row's sites held at once:
//!   a line with several allocating calls, and above all the `?` row, which
//!   sums every site without line information, can show a high water
//!   above the module total's, which is the most the module held at once.
//! * Pools share one histogram per module, as in Inferno, where every
//!   pool's allocations were charged to the same instruction buckets: a
//!   line shows the bytes of all pools counted (one call site calls one
//!   function, so a row is one pool's in practice); `-2` or `-3` alone
//!   shows one pool.
//! * Mappings count whole pages (a length is rounded up to the page size;
//!   the break counts the bytes sbrk was given). Mappings made by
//!   libraries through their own system calls (not the exported `mmap`),
//!   and pages a MAP_FIXED mapping or an mremap made by glibc itself
//!   replaces, are not seen.
//! * `-p PID` shows the tables when the process exits; interrupted (or at
//!   `--snapshot`'s time), mprof shows what it counted so far and detaches
//!   it; its directory stays while it runs (it maps the library from
//!   there) and is removed by a later run once it has exited. A process
//!   detached cannot be attached again (the library stays loaded in it).
//!   A detach that fails (the process was loading a library just then)
//!   leaves it counting into its directory, as the sentence says. Programs it
//!   execs are not counted, and children it forks only if they end
//!   first. The limits of attaching are in `profdev_dev::prof`'s memory
//!   mode (`startmp… PID`).
//! * Unwind tables cover the launched program and its `DT_NEEDED`
//!   libraries only: a library `dlopen`'d later, and the programs a
//!   script or shim execs (`python3` behind a pyenv shim), are walked by
//!   frame pointers, and a stack ends at their first frame built without
//!   them. Frames whose CFI is not the common case (signal frames, a
//!   CFA computed by an expression, as in PLT stubs) end a stack. A frame
//!   that calls by a tail call is missing. Building the tables (several modules at once) adds to
//!   the fixed cost of a run with stacks (`bench/README.md`).
//! * Counts taken from a table (a process that ended without its exit
//!   report) have no DHAT figures (`--dhat` then warns and writes no
//!   file if no process ended normally), and leave out a site whose
//!   module the process had not yet found when it ended. A table is
//!   read as it is: a process killed in the middle of an update of a
//!   site may show that update half made (a high water not yet raised).
//! * A process image that execs now counts too: its allocations up to the
//!   exec are in its table (before, it wrote no report). Each process
//!   leaves a sparse 63 MiB file in the private directory for as long as
//!   it runs (its touched pages only, as its memory did), or until mprof
//!   ends if it ended without its report. On a disk-backed `$TMPDIR` the
//!   kernel writes those pages back now and then. A page is given its
//!   block before it is first touched: on a full filesystem a new site or
//!   module is not counted (`untracked`), and a process whose table
//!   cannot be made at all counts in private memory as before (a report
//!   at its normal exit only).
//! * Exactness costs most when several threads allocate in one module at
//!   once: each thread updates its own line per site (a lane: its delta
//!   within an allowance), past the allowance the module's lock folds all
//!   lanes, a stack's counts on the thread's own line too (`--peak`,
//!   `--dhat`: the lock on every call). A single thread takes no lock.
//!   What that buys: every count, current bytes and high water, per site,
//!   stack and module, is exact in one order of the calls that agrees with
//!   the program's. Two threads churning at one line run about 2.5x
//!   native, 3.1x with stacks (one thread 2.5x and 2.9x; see
//!   `bench/README.md`); `--sample-bytes` shares no line.
//! * `--sample-bytes`: pools 2 and 3 stay exact; high waters are those of
//!   the weighted sums (noisy, and biased upward); block counts are kept
//!   in 1/256ths, bytes rounded per sample; not with `--dhat`; a thread's
//!   first countdown is seeded from the clock (`PROFDEV_MPROF_SAMPLE_SEED`
//!   fixes it, with `-p` too).
//! * The accounting's own memory: an 8-byte entry per 16 bytes of heap
//!   where blocks are (a page map touched only there: about half the size
//!   of a heap of small blocks, a page per large block), 192 bytes per
//!   site, and a few MiB of tables mapped once (touched as used).
//! * The library needs glibc (it calls `__libc_malloc` and friends);
//!   static programs and programs with a built-in allocator are out of
//!   reach.
//! * Sites are symbolized from the module files as they are when mprof
//!   reads them; a module replaced while CMD ran is named in a warning.
//! * `--scan` is conservative: a stale or look-alike word hides a leak
//!   (in memory the program maps and no longer uses too, and in vector
//!   registers, roots as well); a pointer kept xor'ed or tagged shows a
//!   live block as leaked. Other mallocs are refused.
//! * Rust symbols in v0 mangling are recognized as wrappers only in the
//!   `alloc` crate.
//! * System code is found only in CMD's executable and the `-m` modules
//!   given by path, with DWARF (read before the run: the larger their
//!   debug information, the longer), not with `-p`; other modules' sites
//!   stay where the call was made.
//! * `--temporary` and `--peak` have nothing from a process that ended
//!   without its report (`_exit`, a signal), nor, with `-p`, when the
//!   report asked for before the detach did not come (its table is
//!   shown).

use crate::child::{find_program, Job};
use crate::classic;
use crate::output::Report;
use anyhow::{Context as _, Result};
use profdev_classic::args::mprof::{parse, startmp_message, Args, SPEC};
use profdev_classic::mprof;
use profdev_mprof::{Module, Session};
use std::ffi::OsString;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// The command line as data, for `--help`, the man page and completions.
pub fn command() -> clap::Command {
    classic::command(&SPEC)
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    classic::main(&SPEC, args, parse, run)
}

fn run(args: &Args) -> Result<ExitCode> {
    if let Some(pid) = args.pid.filter(|_| args.scan) {
        let text = profdev_classic::mprof_scan::scan(pid)?;
        return (Report::to(args.output.as_deref(), false).write(text.as_bytes()))
            .map(|()| ExitCode::SUCCESS);
    }
    if let Some(pid) = args.pid {
        return run_attached(args, pid);
    }
    if args.end || args.begin {
        let ctl_path = crate::mount::ensure_mounted()?.join("prof/ctl");
        let write = |msg: String| -> Result<()> {
            crate::output::open_ctl(&ctl_path)
                .and_then(|mut f| f.write_all(format!("{msg}\n").as_bytes()))
                .with_context(|| format!("{}: {msg:?}", ctl_path.display()))
        };
        if args.end {
            write("end".into())?;
            return Ok(ExitCode::SUCCESS);
        }
        write(
            format!("module {}", args.modules.join(" "))
                .trim_end()
                .to_string(),
        )?;
        write(startmp_message(&args.pools))?;
        if args.command.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
    }
    if args.command.is_empty() {
        let dir = crate::mount::ensure_mounted()?.join("prof");
        let modules = mprof::read_mounted(&dir)?;
        let report = Report::to(args.output.as_deref(), false);
        return show(&modules, args, &Default::default(), &report).map(|()| ExitCode::SUCCESS);
    }
    let program = find_program(&args.command[0])?;
    let own_allocator = mprof::prepare(&program)?;
    let session = Session::new().context("cannot prepare the accounting library")?;
    let words = profdev_classic::prof::module_words(&args.modules, args.exec.then_some(&program))?;
    let startmp = startmp_message(&args.pools);
    let dev = mprof::private_device(&words, &startmp)?;
    let mut job = Job::new()?;
    let mut cmd = std::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    cmd.envs(mprof::launch_env(args, &startmp, &session, &program)?);
    job.prepare(&mut cmd);
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", args.command[0].to_string_lossy()))?;
    job.started(&child);
    let status = job.wait();
    let ran = Ran {
        job: &job,
        status,
        program: &program,
        own_allocator,
        dev,
    };
    match show_run(args, &session, ran) {
        // CMD failed: its status, after what mprof could not show.
        Err(e) if !status.success() || job.interrupted().is_some() => {
            eprintln!("mprof: {}", crate::cmdline::sentence(&e));
            Ok(job.exit_code(status))
        }
        r => r.map(|()| job.exit_code(status)),
    }
}

/// A run of CMD, ended.
struct Ran<'a> {
    job: &'a Job,
    status: std::process::ExitStatus,
    program: &'a Path,
    own_allocator: Option<String>,
    dev: profdev_dev::prof::Prof,
}

/// After CMD's run: read the session's reports and show them.
fn show_run(args: &Args, session: &Session, ran: Ran) -> Result<()> {
    let Ran {
        job,
        status,
        program,
        own_allocator,
        dev,
    } = ran;
    let (reports, errors) = session.reports();
    for e in &errors {
        eprintln!("mprof: warning: {e}");
    }
    if reports.is_empty() {
        // Every process that loaded the library left its table at least:
        // none did.
        let cmd = args.command[0].to_string_lossy();
        if let Some(i) = job.interrupted() {
            let why =
                format!("{cmd} had not loaded the accounting library yet: nothing was counted");
            eprintln!("{}", i.sentence("mprof", &why));
            return Ok(());
        }
        return Err(mprof::nothing_counted(&cmd, status, !errors.is_empty()));
    }
    let own = own_allocator.as_deref();
    let merged = mprof::merge_checked(&reports, program, own, &mut |n| eprintln!("{n}"))?;
    let modules = mprof::through_device(&dev, &merged, args.options.zeros)?;
    if let Some(line) = mprof::nothing_allocated(&modules, &args.modules) {
        // Counted, and nothing allocated: CMD's status, not 1.
        eprintln!("mprof: {line}");
        if let Some(i) = job.interrupted() {
            eprintln!(
                "{}",
                i.sentence("mprof", "nothing was allocated until then")
            );
        }
        return Ok(());
    }
    let cmd: Vec<_> = args.command.iter().map(|a| a.to_string_lossy()).collect();
    let run = mprof::show::Run::of(&reports, cmd.join(" "));
    show(
        &modules,
        args,
        &run,
        &Report::to(args.output.as_deref(), true),
    )?;
    if let Some(i) = job.interrupted() {
        eprintln!(
            "{}",
            i.sentence("mprof", "the tables show what was counted until then")
        );
    }
    Ok(())
}

/// `mprof -p PID`: attach, wait for the process to exit, show its tables
/// (and leaks) from its report, through a private device as with CMD.
fn run_attached(args: &Args, pid: u32) -> Result<ExitCode> {
    let run = mprof::run_attached(args, pid, &mut |n| eprintln!("{n}"))?;
    let to = Report::to(args.output.as_deref(), false);
    let shown = show(&run.modules, args, &run.run, &to);
    if let Some((sig, sentence)) = run.interrupted {
        if let Err(e) = shown {
            eprintln!("mprof: {e}");
        }
        eprintln!("{sentence}");
        return Ok(ExitCode::from(128u8.wrapping_add(sig as u8)));
    }
    shown.map(|()| ExitCode::SUCCESS)
}

/// Write the tables and their sections to `report`, and the files asked
/// for (`mprof::show::render`).
fn show(modules: &[Module], args: &Args, run: &mprof::show::Run, report: &Report) -> Result<()> {
    let (text, files) = mprof::show::render(modules, args, run, &mut |n| eprintln!("{n}"))?;
    report.write(text.as_bytes())?;
    for (file, data) in files {
        profdev_safefile::write_file(Path::new(&file), &data, 0o644)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}
