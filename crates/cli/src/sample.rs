//! `profdev sample [-F HZ] [-o DIR] [--report FILE] -- CMD [ARGS]`: the kprof man page's
//! `sample` shell function as one command.
//!
//! ```text
//! fn sample { echo startclr >/dev/kpctl; $*; echo stop >/dev/kpctl; cp /dev/kpdata kpdata }
//! ```
//!
//! It drives a kprof device exactly that way (through its `kpctl` and
//! `kpdata` files), system wide on every CPU, around CMD; writes
//! DIR/kpdata; writes its report to standard error (never into CMD's
//! standard output), or to FILE with `--report FILE` (`-`: standard
//! output; `-o` already names DIR): the kprof table, byte for byte, and after it how many
//! of its ticks were the idle loop (pid 0) — on an idle machine the top row
//! is a halt instruction such as `pv_native_safe_halt`; then explains the
//! ticks outside kernel text — user space (programs and their libraries),
//! and kernel code outside `[_stext, _etext)` (modules, BPF programs, init
//! text) — per process, per user-space function, per kernel-module symbol,
//! which kprof could never say (the attribution is
//! `profdev_dev::outside`, rendered by `profdev_report::outside`); with
//! `--ci` each of those rows also shows its share's 95% Wilson interval and
//! marks `=` a row whose interval overlaps a neighbour's (the kprof table
//! above stays exactly kprof's). It exits with CMD's status.
//!
//! On standard error: the totals (samples, the rate achieved per CPU and
//! the rate asked, records lost, throttling), then how long CMD ran and
//! where kpdata went:
//!
//! ```text
//! profdev sample: totals: 5120 samples, 998 Hz (asked 1000), 0 lost, 0 throttled
//! profdev sample: 2.6s; wrote profdev.out/kpdata
//! ```
//!
//! DIR is created 0755 if missing (never through a symbolic link another
//! user planted) and DIR/kpdata 0600, since it holds kernel addresses; it
//! is written through `profdev_safefile` (a unique temporary, renamed over
//! kpdata). If it cannot be written (a full disk) the table is still
//! printed, the error names the file, kpdata is left complete or absent,
//! and the exit status is CMD's if CMD failed, else 1.
//!
//! **Signals.** CMD runs in its own process group, the terminal's
//! foreground group while it runs, so ^C reaches CMD alone and sample
//! stays to write kpdata. SIGINT, SIGTERM or SIGHUP sent to sample (by
//! `kill`, `timeout`, a hangup) is passed to CMD's group; after 2 s what is
//! left of it is killed with SIGKILL; sampling stops, kpdata is written and
//! the report printed as after a normal run, one more line says so
//! (`profdev sample: interrupted by SIGTERM; CMD's process group was ended;
//! wrote profdev.out/kpdata`), and the exit status is 128 + the signal. No
//! process CMD started is left running. The rules, shared with `gmon` and
//! `prof`, are in `profdev_sample::job`.
//!
//! With `--bpf` the device's histogram is counted in the kernel by a BPF
//! program on the cpu-clock events ([`profdev_sample::bpf`]): no sample
//! crosses a ring buffer, and kpdata is a copy of the kernel's counters.
//! No records reach user space then, so the outside-kernel-text section is
//! not available (it says so), and the summary counts word 0 as samples.
//!
//! # Bugs
//!
//! * The report goes to standard error, or `--report FILE`, not to
//!   standard output as `kprof` after the classic `sample` function wrote
//!   it: profdev never writes into the output of the program it runs, so
//!   `profdev sample -- cat f > g` leaves g a copy of f. Its bytes are
//!   unchanged. The option is `--report`, not `-o`, because `-o` names the
//!   directory of kpdata.

use crate::child::{find_program, Job};
use crate::output;
use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use profdev_core::{SessionConfig, SourceError, SourceStats};
use profdev_dev::kprof::{HistogramCounter, Kprof, KprofConfig};
use profdev_dev::outside::{OutsideCollector as Collector, OutsideTap};
use profdev_dev::tree::walk;
use profdev_dev::{Dev, DevError, Engine, OpenMode, Qid};
use profdev_formats::kpdata::{self, Kpdata};
use profdev_safefile::SafeFile;
use profdev_symbolize::KernelSymbols;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Run CMD with kernel profiling on (system wide, all CPUs); write
/// DIR/kpdata and print the kprof table and where the ticks outside kernel
/// text went.
#[derive(Parser, Debug)]
#[command(name = "profdev sample", version, after_help = crate::child::SIGNALS_HELP)]
pub(crate) struct Args {
    /// Samples per second per CPU (software cpu-clock), at most 10000.
    #[arg(short = 'F', value_name = "HZ", default_value_t = 1000)]
    frequency: u32,
    /// Output directory for kpdata.
    #[arg(short = 'o', value_name = "DIR", default_value = "profdev.out")]
    output: PathBuf,
    /// Write the report (the kprof table and what follows it) to FILE, - for
    /// standard output; by default it goes to standard error, never into
    /// CMD's standard output.
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    report: Option<OsString>,
    /// log2 of the bucket size in bytes (Inferno's LRES).
    #[arg(long, value_name = "N", default_value_t = kpdata::DEFAULT_LOG_BUCKET_SIZE,
          value_parser = clap::value_parser!(u32).range(1..=12))]
    log_bucket: u32,
    /// Count kpdata in the kernel with a BPF program instead of reading
    /// samples through ring buffers (needs CAP_BPF and CAP_PERFMON, or
    /// root); the outside-kernel-text section is then unavailable.
    #[arg(long)]
    bpf: bool,
    /// Rows per table in the outside-kernel-text section.
    #[arg(long, value_name = "N", default_value_t = 15)]
    rows: usize,
    /// In the outside-kernel-text section, each share's 95% Wilson interval, ties marked '='.
    #[arg(long)]
    ci: bool,
    /// Ring buffer data pages per CPU, a power of two (perf's name; the
    /// default is sized to the rate). A small ring loses records.
    #[arg(long, value_name = "N", value_parser = crate::progress::parse_mmap_pages)]
    mmap_pages: Option<u32>,
    /// The command to profile, and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>("profdev sample", args) {
        Ok(args) => crate::cmdline::finish("profdev sample", run(&args)),
        Err(code) => code,
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    SessionConfig::system(args.frequency)
        .validate()
        .map_err(|e| anyhow!("{e}"))?;
    // Signals are caught from here on: one that comes while profdev
    // prepares still ends the run cleanly (see `profdev_sample::job`).
    let mut job = Job::new()?;
    let program = find_program(&args.command[0])?;
    // The real write starts now: a temporary beside DIR/kpdata, so an
    // unwritable DIR is found before a long run, not after.
    let kpdata_file = prepare_output(&args.output)?;
    let ksyms = Arc::new(KernelSymbols::running()?);
    let text = ksyms.require_text("/proc/kallsyms")?;

    let objects = profdev_symbolize::Objects::new();
    let collector = Collector::new(text, args.log_bucket).with_objects(objects.clone());
    let collector = Arc::new(Mutex::new(collector));
    let factory = OutsideTap::new(
        crate::progress::factory(args.mmap_pages).with_mapping_hook(objects.mapping_hook()),
        collector.clone(),
    );
    let config = KprofConfig {
        text,
        log_bucket: args.log_bucket,
        frequency_hz: args.frequency,
    };
    let kprof = if args.bpf {
        let h = profdev_sample::bpf::KernelHistogram::open(
            text.start.0,
            text.end.0,
            args.log_bucket,
            args.frequency,
        )
        .map_err(|e| anyhow!("{e}"))?;
        Kprof::with_counter(config, Box::new(BpfCounter(h)))?
    } else {
        Kprof::new(config, Engine::new(Arc::new(factory)))
    };

    ctl(&kprof, "startclr")?;
    let started = Instant::now();
    // Live on a terminal; the totals after (not with --bpf: no records).
    let progress = kprof
        .health()
        .filter(|_| !args.bpf)
        .map(|h| crate::progress::Progress::start("profdev sample", h));
    let status = run_child(&mut job, &program, &args.command[1..]);
    ctl(&kprof, "stop")?;
    progress.map(crate::progress::Progress::finish);
    let status = status?;
    let elapsed = started.elapsed();

    let bytes = read_kpdata(&kprof)?;
    let out_path = args.output.join("kpdata");
    // A full disk loses the file, not the report: it is still written.
    let written = write_kpdata(kpdata_file, &bytes);
    let wrote = match &written {
        Ok(()) => format!("wrote {}", out_path.display()),
        Err(_) => format!("{} not written", out_path.display()),
    };

    let data = Kpdata::parse(&bytes).context("the kpdata just recorded is malformed")?;
    let symbols: Vec<(u64, &str)> = ksyms
        .text_symbols()
        .into_iter()
        .map(|s| (s.addr, s.name.as_str()))
        .collect();
    let report = profdev_report::kprof::format(&symbols, &data);
    let mut out = Vec::new();
    out.write_all(report.text.as_bytes())?;
    if let Some(e) = report.error {
        writeln!(out, "kprof: {e}")?;
    }
    let collector = collector.lock().unwrap_or_else(|p| p.into_inner());
    if !args.bpf {
        out.write_all(
            profdev_report::outside::idle_line(collector.idle_in_text(), collector.in_text())
                .as_bytes(),
        )?;
    }
    writeln!(out)?;
    let stats = if args.bpf {
        writeln!(
            out,
            "outside section unavailable with --bpf: the kernel counted {} ticks outside kernel text \
             (word 1), but no records reached user space to say whose they were",
            data.outside()
        )?;
        SourceStats {
            samples: u64::from(data.total()),
            ..SourceStats::default()
        }
    } else {
        let outside = collector.attribute(&ksyms);
        out.write_all(outside.render_with(args.rows, args.ci).as_bytes())?;
        collector.stats()
    };
    crate::output::Report::to(args.report.as_deref(), true).write(&out)?;
    if args.bpf {
        eprintln!(
            "profdev sample: {} ticks in {:.1}s at {} Hz per CPU, counted in the kernel (BPF); {wrote}",
            stats.samples,
            elapsed.as_secs_f64(),
            args.frequency,
        );
        interrupted(&job, &out_path, written.is_ok());
        return Ok(written_status(&job, status, written));
    }
    // The counts are in the totals line above (crate::progress).
    eprintln!("profdev sample: {:.1}s; {wrote}", elapsed.as_secs_f64());
    if stats.lost > 0 || stats.throttled > 0 {
        eprintln!(
            "profdev sample: warning: the kernel dropped {} records and throttled sampling {} times; \
             counts are incomplete (try a lower -F)",
            stats.lost, stats.throttled
        );
    }
    interrupted(&job, &out_path, written.is_ok());
    Ok(written_status(&job, status, written))
}

/// Say why kpdata was not written; our status (see [`output::status`]).
fn written_status(
    job: &Job,
    status: std::process::ExitStatus,
    written: Result<(), profdev_safefile::Error>,
) -> ExitCode {
    if let Err(e) = &written {
        eprintln!("profdev sample: {e}");
    }
    output::status(job, status, written.is_ok())
}

/// Say so when a signal ended the run.
fn interrupted(job: &Job, out_path: &Path, written: bool) {
    if let Some(i) = job.interrupted() {
        let wrote = if written { "wrote" } else { "did not write" };
        eprintln!(
            "{}",
            i.sentence("profdev sample", &format!("{wrote} {}", out_path.display()))
        );
    }
}

/// Write a control message to the device's `kpctl`, as `echo MSG >kpctl`.
fn ctl(dev: &Kprof, msg: &str) -> Result<()> {
    let entry = walk(dev, Qid::ROOT, "kpctl").map_err(|e| anyhow!("kpctl: {e}"))?;
    let mut chan = dev.open(entry.qid, OpenMode::Write)?;
    let r = dev.write(&mut chan, 0, format!("{msg}\n").as_bytes());
    dev.close(chan);
    match r {
        Ok(_) => Ok(()),
        Err(DevError::Sampling { msg, .. }) => bail!("{msg}"),
        Err(e) => Err(e.into()),
    }
}

/// Read the whole of `kpdata`, as `cp kpdata`.
fn read_kpdata(dev: &Kprof) -> Result<Vec<u8>> {
    let entry = walk(dev, Qid::ROOT, "kpdata").map_err(|e| anyhow!("kpdata: {e}"))?;
    let mut chan = dev.open(entry.qid, OpenMode::Read)?;
    let mut bytes = Vec::with_capacity(entry.length as usize);
    loop {
        let chunk = dev.read(&mut chan, bytes.len() as u64, 1 << 20)?;
        if chunk.is_empty() {
            break;
        }
        bytes.extend_from_slice(&chunk);
    }
    dev.close(chan);
    Ok(bytes)
}

/// Create DIR (never through another user's symbolic link) and start
/// writing DIR/kpdata, 0600: it holds kernel addresses.
fn prepare_output(dir: &Path) -> Result<SafeFile> {
    let dir = profdev_safefile::create_dir(dir, output::DIR_MODE)?;
    Ok(dir.create_file("kpdata", output::KERNEL_MODE)?)
}

/// Complete DIR/kpdata, or leave it as it was.
fn write_kpdata(mut file: SafeFile, bytes: &[u8]) -> Result<(), profdev_safefile::Error> {
    file.write_bytes(bytes)?;
    file.commit()
}

/// Run CMD under `job` (its own process group, signals passed on; see
/// `profdev_sample::job`) and wait for it.
fn run_child(job: &mut Job, program: &Path, args: &[OsString]) -> Result<std::process::ExitStatus> {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    job.prepare(&mut cmd);
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", program.display()))?;
    job.started(&child);
    Ok(job.wait())
}

/// The in-kernel BPF histogram as the kprof device's counter.
struct BpfCounter(profdev_sample::bpf::KernelHistogram);

impl HistogramCounter for BpfCounter {
    fn enable(&mut self) -> Result<(), SourceError> {
        self.0.enable()
    }
    fn disable(&mut self) {
        self.0.disable()
    }
    fn clear(&mut self) {
        self.0.clear()
    }
    fn words(&self) -> Vec<u32> {
        self.0.words()
    }
}
