//! `profdev record [-g] [-F HZ] [-a | -p PID[,PID] | -t TID] [-o FILE] [-- CMD [ARGS]]`:
//! sample with stacks into one recording that `profdev export` turns into
//! every format.
//!
//! # Synopsis
//!
//! ```text
//! profdev record [-g] [--off-cpu] [-F HZ] [--no-symbols] [--stack-bytes N] [-o FILE] -- CMD [ARGS]
//! profdev record [-g] [-F HZ] (-a | -p PID[,PID] | -t TID) [-o FILE] [-- CMD [ARGS]]
//! ```
//!
//! # Description
//!
//! Samples kernel and user mode at `-F` Hz (software cpu-clock, default
//! 1000): CMD and the processes it starts; or, as with perf, with `-a`
//! every CPU, with `-p` processes (comma separated) with every thread they
//! have and start (one session per thread, read as one by
//! `profdev_sample::several`), with `-t` one thread,
//! where a CMD only sets the duration and without one recording runs until
//! SIGINT, SIGTERM or SIGHUP (or, with `-p`/`-t`, until the target
//! exits). With `-g` each sample carries its stack: the kernel's callchain
//! and the user stack unwound while recording (`.eh_frame` CFI, frame
//! pointers where better: `profdev_symbolize::unwind`), so no stack copy
//! reaches the disk. A stack the unwinder could not take to its root ends
//! in the frame `[unwind failed: REASON]` (no stack copy, an address in
//! anonymous memory or outside any mapping, a stack deeper than the copy,
//! or no caller found from an object), which every export shows; the
//! counts by reason are printed at the end.
//!
//! With `--off-cpu` (implies `-g`), also every interval each thread spends
//! off the CPU, from the moment it leaves (a software context-switch
//! event sampled at every switch, whose stack is where it blocked) to
//! the moment it comes back (the kernel's switch records), weighted in
//! nanoseconds, with its state: `io` (entered the scheduler through
//! `io_schedule`), `sleep`, or `other` (preempted: runnable, counted in
//! `--type wall` but not in `off-cpu`, the time spent waiting). A thread
//! still away at the end counts until the end. It needs kernel
//! samples (root, CAP_PERFMON, or kernel.perf_event_paranoid ≤ 1).
//!
//! The recording (`crates/formats/src/recording/`) holds the Task entry of
//! every sampled thread and the Object entry of every sampled file
//! (device, inode, build id), each written before the first sample using
//! it, the samples as (object, offset) frames, losses, and the symbols of
//! every function sampled with the source line of each sampled address
//! (kernel functions from `/proc/kallsyms`), so exports work after the
//! binaries change (`--no-symbols` leaves them out). User functions and
//! lines are made once a second for the addresses first sampled in it, by a
//! thread of their own (reading ELF and DWARF files must not keep the ring
//! reader waiting: a full ring drops samples), each object's ELF opened
//! once for them (through the descriptor the objects table kept when it was
//! mapped) and closed, so memory stays bounded however many objects a
//! system-wide recording meets; they are written as they are done.
//!
//! Code a runtime generated (a JIT compiler, an interpreter's trampolines)
//! is named as perf names it: from the jitdump the process mapped (a file
//! `jit-N.dump` anywhere: node's `--perf-prof`, JVM and .NET agents; its
//! functions, their moves and their source lines), else from
//! `/tmp/perf-N.map` (`node --perf-basic-prof`, CPython 3.12+ `-X perf`),
//! N the process's pid in its own namespace and the path inside its own
//! root. The file is read when a sample first lands in the process's
//! anonymous memory and read on as the runtime adds to it; each function
//! sampled is written into the recording at once, as a function of an
//! object named after the file, so its name outlives the process. A
//! sample is named by the function loaded at its address at its time; an
//! address given to another function later makes a second object of the
//! same name. Only a regular file owned by the process's user is read,
//! never through a link at its end or out of the process's root, and at
//! most 256 MiB of it. Stacks go through JIT frames by the frame pointers
//! the runtimes keep, so the callers of JIT code are named.
//!
//! FILE (default `profdev.data`) is written progressively as
//! `FILE.partial` (created 0600, never through a link; an existing
//! `.partial` is refused rather than overwritten), then renamed to FILE
//! when recording ends, an existing FILE first renamed `FILE.old`, as perf
//! does. A crash or SIGKILL leaves the `.partial`, which `profdev export`
//! reads up to its last whole record.
//!
//! # Example
//!
//! ```text
//! profdev record -g -- ./prog && profdev export folded | sort -k2 -n | tail
//! ```
//!
//! # Bugs
//!
//! `-p` takes one process. Offsets of objects whose ELF cannot be read are
//! file offsets, without symbols; kernel modules' functions are not named
//! (`[unknown] in [kernel.kallsyms]`). A `.partial` left by a crash lacks
//! the functions of its last second's new addresses. System-wide with
//! `-g` on a busy machine, the 16 KB stack copies can overflow the rings
//! (the loss count is printed).
//!
//! `--off-cpu` copies at most 8 KiB of user stack at a switch: a deeper
//! stack ends in `[unwind failed: …]`. Above about 13,000 switches a
//! second the reader falls behind and the kernel drops switch samples
//! (counted as lost). A thread's first wait, begun before recording
//! started, is not seen.
//!
//! A perf map has no times: a sample is named by the lines written up to
//! when the sample is read (within milliseconds), not to when it was
//! taken. The JIT files of a process that has ended before its first
//! sample in anonymous memory was read cannot be read (its root is gone):
//! its JIT frames stay `[anon]`. A jitdump is read again whole each time
//! it grows (its records are kept in memory while the process lives).

use crate::child::find_program;
use anyhow::{bail, Result};
use clap::Parser;
use profdev_record::Options;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

const NAME: &str = "profdev record";

/// Record samples (with -g, stacks) into one file for profdev export.
#[derive(Parser, Debug)]
#[command(
    name = "profdev record",
    version,
    after_help = format!("Without -a, -p or -t, CMD is recorded with the processes it starts. With them, \
        a CMD only sets the duration; without one, recording runs until SIGINT, SIGTERM or SIGHUP. \
        FILE is written as FILE.partial and renamed at the end (an existing FILE becomes FILE.old); \
        'profdev export FORMAT' turns it into folded, svg, pprof, firefox, perf-script, gmon, kpdata, \
        proc-profile or otlp (see profdev-export(1)).\n\n{}", crate::child::SIGNALS_HELP)
)]
pub(crate) struct Args {
    /// Record stacks: the kernel callchain and the user stack, unwound while recording.
    #[arg(short = 'g')]
    stacks: bool,
    /// Also record each thread's time off the CPU and where it blocked (implies -g).
    #[arg(long)]
    off_cpu: bool,
    /// Samples per second per CPU (software cpu-clock), at most 10000.
    #[arg(short = 'F', value_name = "HZ", default_value_t = 1000)]
    frequency: u32,
    /// Every CPU, every task.
    #[arg(short = 'a', conflicts_with_all = ["pid", "tid"])]
    all: bool,
    /// Existing processes, comma separated (each with all its threads).
    #[arg(
        short = 'p',
        value_name = "PID[,PID]",
        value_delimiter = ',',
        conflicts_with = "tid"
    )]
    pid: Vec<u32>,
    /// An existing thread.
    #[arg(short = 't', value_name = "TID")]
    tid: Option<u32>,
    /// The recording.
    #[arg(short = 'o', value_name = "FILE", default_value = "profdev.data")]
    output: PathBuf,
    /// Leave the symbol and line tables out (exports then name objects only).
    #[arg(long)]
    no_symbols: bool,
    /// With -g: bytes of user stack copied with each sample for unwinding.
    #[arg(long, value_name = "BYTES", default_value_t = 16384)]
    stack_bytes: u32,
    /// The command to record (or, with -a/-p/-t, whose run sets the duration).
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>(NAME, args) {
        Ok(args) => crate::cmdline::finish(NAME, run(&args)),
        Err(code) => code,
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    let opts = Options {
        stacks: args.stacks || args.off_cpu,
        off_cpu: args.off_cpu,
        frequency: args.frequency,
        all: args.all,
        pids: args.pid.clone(),
        tid: args.tid,
        output: args.output.clone(),
        symbols: !args.no_symbols,
        stack_bytes: args.stack_bytes,
        command: args.command.clone(),
    };
    let find = |cmd: &OsString| find_program(cmd).map_err(|e| e.to_string());
    let objects = profdev_symbolize::Objects::new();
    let done = profdev_record::record(&opts, objects, &find)?;
    let wrote = done.wrote();
    eprintln!(
        "{NAME}: {wrote}: {} samples, {} bytes ({:.1} bytes per sample); {} lost, {} throttled",
        done.samples,
        done.bytes,
        done.bytes as f64 / done.samples.max(1) as f64,
        done.stats.lost,
        done.stats.throttled
    );
    if let Some(s) = &done.unwind {
        eprintln!("{NAME}: {s}");
    }
    if !done.failures.is_empty() {
        let list: Vec<String> = done
            .failures
            .iter()
            .map(|(r, n)| format!("{n} {r}"))
            .collect();
        eprintln!(
            "{NAME}: stacks ending in [unwind failed: REASON]: {}",
            list.join(", ")
        );
    }
    if let Some(e) = &done.stopped {
        bail!("sampling stopped early: {e}");
    }
    if let Some(i) = done.job.interrupted() {
        if done.child.is_some() {
            eprintln!("{}", i.sentence(NAME, &wrote));
        }
    }
    done.written?;
    Ok(match done.child {
        Some(status) => done.job.exit_code(status),
        None => ExitCode::SUCCESS,
    })
}
