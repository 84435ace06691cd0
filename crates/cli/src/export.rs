//! `profdev export FORMAT [-i FILE] [-o OUT]`: a recording (`profdev
//! record`'s `profdev.data`, or a `.partial` a crash left) in the format
//! another tool opens; an allocation profile as an allocation flame graph.
//!
//! # Synopsis
//!
//! ```text
//! profdev export folded|svg|pprof|firefox|perf-script|gmon|kpdata|proc-profile|otlp
//!                [-i FILE | --since DURATION [--store DIR]] [-o OUT [--open]] [--type cpu|off-cpu|wall|alloc|inuse]
//!                [--inverted] [--title T] [--pid PID] [--comm COMM] [--format gnu|bsd] [--shift N] [--log-bucket N]
//! profdev export svg --diff BASE NEW [-o OUT [--open]] [--type cpu|off-cpu|wall] [--inverted] [--title T]
//! ```
//!
//! # Description
//!
//! Reads FILE (default `profdev.data`; a torn `.partial` is read up to its
//! last whole record, with a note on standard error) and writes OUT
//! (default: standard output, except `gmon` to `gmon.out`). The writers
//! are `profdev_formats::export`; every name comes from the symbol tables
//! the recording holds.
//!
//! `--since DURATION [--store DIR]` reads the agent's store as `profdev
//! report --since` does.
//!
//! **Allocation profiles.** A FILE that is a pprof heap profile (`profdev
//! mprof --pprof FILE`'s, raw or gzipped, or Go's) exports as `svg`, an
//! allocation flame graph whose widths and titles are bytes, or `folded`,
//! bytes per stack: `--type alloc` (the default) bytes allocated, `--type
//! inuse` bytes still live at the end; other formats and types are
//! refused in one sentence (`go tool pprof` reads the file itself).
//!
//! `--type` chooses the samples: `cpu` (the default) the sampling clock's,
//! each counted once, exactly as before off-CPU recording existed;
//! `off-cpu` the intervals threads spent waiting off the CPU (asleep, for
//! a lock or for I/O), recorded by `profdev record -g --off-cpu`, each
//! weighed by its time; `wall` both, and the time threads were preempted,
//! each on-CPU sample weighed by the sampling period, so a thread's
//! weights add up to its wall-clock time. Of `off-cpu` and `wall`: folded counts are microseconds (each
//! line's ns summed, rounded); a flame graph's widths are time (titles in
//! µs); pprof has the sample types `samples/count` and `off_cpu/nanoseconds`
//! (wall: also `cpu/nanoseconds` and `wall/nanoseconds`, the default), and
//! a `state` label (`sleep`, `io`, `other`) on off-CPU samples; Firefox an
//! `Off-CPU` category whose innermost frame `[off-CPU: STATE]` ends each
//! interval's stack, one sample of no CPU time weighing its periods; otlp
//! the sample type `off_cpu` (wall: `wall`), in ns; perf-script the event
//! `offcpu-time:` with the ns as weight. gmon, kpdata and proc-profile
//! hold CPU samples only and refuse them, as does a recording without
//! off-CPU samples, each in one sentence.
//!
//! * `folded`: `a;b;c count` per stack (flamegraph.pl, inferno, speedscope).
//! * `svg`: a flame graph; `--inverted` for an icicle graph. Opened in a
//!   web browser it can be explored, as flamegraph.pl's graphs can: a
//!   click on a frame zooms into it (it fills the width, its callers span
//!   it at half opacity, other frames hide), "Reset Zoom" (top left) or
//!   Escape shows the whole graph again, and "Search" (top right), Ctrl-F
//!   or `/` asks for a regular expression: the frames whose function
//!   names it matches turn purple and the share of the samples under them
//!   (each sample counted once) is shown at the bottom right. The script
//!   that does it is profdev's own, inside the file; it loads nothing.
//!   Where no script runs (an `<img>`, an image viewer) the graph is the
//!   same picture without the controls. With `--diff BASE NEW` (instead
//!   of `-i`), a differential flame graph: NEW's graph, each frame
//!   coloured by how the share of samples of its call path changed from
//!   BASE (red: grew, slower; blue: shrank, faster; the deeper, the
//!   larger the change; grey: not significant, as `profdev report --diff`
//!   judges it, over all frames at once), its title saying the change in
//!   points. Paths only BASE has are not drawn.
//! * `pprof`: gzipped profile.proto (`go tool pprof`, Pyroscope, Parca).
//! * `firefox`: the Firefox Profiler's processed JSON (profiler.firefox.com).
//! * `perf-script`: `perf script` text (stackcollapse-perf.pl, Firefox Profiler).
//! * `gmon`: gmon.out of one executable, chosen by `--pid`/`--comm`
//!   (default: the most sampled), for `gprof EXE gmon.out`.
//! * `kpdata`: Inferno kpdata, for `profdev kprof System.map kpdata`.
//! * `proc-profile`: the Linux /proc/profile layout, for `readprofile -p
//!   FILE -m System.map` (`--shift`, default 2: 4-byte counters).
//! * `otlp`: OpenTelemetry profiles, a `ProfilesData` protobuf of
//!   opentelemetry-proto **v1.10.0** exactly (the profiles signal is still
//!   in development and changes incompatibly between releases; pprof stays
//!   the format Pyroscope and Parca ingest).
//!
//! Every format names frames alike: functions by the recording's symbol
//! tables (`sub_ADDR` for a stripped object's `.eh_frame` functions),
//! `[unknown] in OBJECT`, `[anon]` (anonymous or JIT memory), `[unknown]`,
//! a stack that could not be unwound ending in `[unwind failed: REASON]`,
//! and the idle task's samples under `[idle]`.
//!
//! Written to a file, the export names it on standard error in one line,
//! `profdev export: wrote OUT (WHAT)`; for gmon the line ends with the
//! gprof command that reads it (`read it with 'gprof EXE OUT'`). Written
//! to standard output, only gmon says anything (EXE and the gprof line).
//!
//! `--open` (with `-o OUT`) hands OUT to the desktop's viewer for its
//! type, `xdg-open OUT` (a web browser, for an SVG), when there is a
//! display (`$DISPLAY` or `$WAYLAND_DISPLAY` set) and xdg-open is
//! installed; otherwise one sentence on standard error says why not and
//! where the file is. Either way the exit status is 0: the export was
//! written, and opening it is a convenience.
//!
//! Files that hold kernel addresses (kpdata, proc-profile, and pprof, otlp or
//! perf-script when the recording has kernel frames) are created 0600,
//! others 0644, through the safe write path.
//!
//! # Example
//!
//! ```text
//! profdev record -g -- ./prog && profdev export svg -o prog.svg --open
//! profdev export: wrote prog.svg (flame graph: 212 frames, 4013 samples; in a web browser, click to zoom, Ctrl-F to search)
//! profdev export pprof -o prog.pb.gz && go tool pprof -top prog.pb.gz
//! profdev export svg --since 1h -o last-hour.svg
//! profdev mprof --pprof heap.pb ./prog && profdev export svg -i heap.pb -o heap.svg
//! ```
//!
//! # Bugs
//!
//! The whole recording is read into memory (its distinct stacks once);
//! every format but perf-script is made in memory before it is written.
//!
//! A flame graph leaves out frames narrower than 0.1 pixel of the whole
//! graph (as flamegraph.pl's `--minwidth` does): zooming does not bring
//! them back, and a search does not count them.
//!
//! `--open` runs xdg-open as the user profdev runs as; it does not wait
//! for the viewer, so a viewer that fails to start says so itself, if at
//! all.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, ValueEnum};
use profdev_formats::export::{gmon, perf_script, request, svg, wrote, Written};
use profdev_formats::recording::{self, Recording, SampleType};
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// `a;b;c count` lines, root first.
    Folded,
    /// A flame graph (SVG).
    Svg,
    /// Gzipped profile.proto for go tool pprof.
    Pprof,
    /// Firefox Profiler processed JSON.
    Firefox,
    /// perf script text.
    PerfScript,
    /// gmon.out of one executable, for gprof.
    Gmon,
    /// Inferno kpdata, for profdev kprof.
    Kpdata,
    /// Linux /proc/profile layout, for readprofile.
    ProcProfile,
    /// OpenTelemetry profiles (ProfilesData protobuf, opentelemetry-proto v1.10.0).
    Otlp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum GmonFormat {
    /// GNU tagged format, what glibc writes.
    Gnu,
    /// 4.4BSD format.
    Bsd,
}

/// Write a recording in the format another tool reads.
#[derive(Parser, Debug)]
#[command(
    name = "profdev export",
    version,
    after_help = "FILE may be a .partial recording: its samples up to the last whole record are exported.\n\
        kpdata and proc-profile need the kernel symbol table the recording holds; gmon writes the \
        samples of one executable (--pid, --comm; default the most sampled)."
)]
pub(crate) struct Args {
    /// Output format.
    #[arg(value_enum, value_name = "FORMAT")]
    format: Format,
    /// The recording.
    #[arg(short = 'i', value_name = "FILE", default_value = "profdev.data")]
    input: PathBuf,
    #[command(flatten)]
    since: Since,
    /// Where to write ('-': standard output; the default, except gmon.out for gmon).
    #[arg(short = 'o', value_name = "OUT")]
    output: Option<PathBuf>,
    /// Open OUT in the desktop's viewer (xdg-open) when there is a display.
    #[arg(long, requires = "output")]
    open: bool,
    /// svg: an icicle graph (roots at the top).
    #[arg(long)]
    inverted: bool,
    /// svg: the title.
    #[arg(long, value_name = "T")]
    title: Option<String>,
    /// svg: NEW's flame graph coloured by the change from BASE (red slower, blue faster, grey not significant).
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"], conflicts_with_all = ["input", "since"])]
    diff: Vec<PathBuf>,
    /// Which samples: cpu (the sampling clock's), off-cpu (time off the CPU), wall (both); the latter two weigh time. Of an allocation profile: alloc (bytes allocated) or inuse (bytes live at the end).
    #[arg(long = "type", value_name = "TYPE", default_value = "cpu", value_parser = ["cpu", "off-cpu", "wall", "alloc", "inuse"])]
    ty: String,
    /// gmon: the samples of this process.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
    /// gmon: the samples of threads with this command name.
    #[arg(long, value_name = "COMM")]
    comm: Option<String>,
    /// gmon: the gmon.out layout.
    #[arg(long = "format", value_enum, default_value_t = GmonFormat::Gnu)]
    gmon_format: GmonFormat,
    /// proc-profile: log2 of the bytes per counter.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=31))]
    shift: u32,
    /// kpdata: log2 of the bytes per bucket.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=31))]
    log_bucket: u32,
}

const NAME: &str = "profdev export";

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>(NAME, args) {
        Ok(args) if args.open && args.output.as_deref() == Some(Path::new("-")) => {
            eprintln!("{NAME}: --open needs -o FILE, not standard output");
            ExitCode::from(2)
        }
        Ok(args) => crate::cmdline::finish(NAME, run(&args)),
        Err(code) => code,
    }
}

/// `--since DURATION [--store DIR]` of report and export.
#[derive(clap::Args, Debug)]
pub(crate) struct Since {
    /// The agent's local store's profiles of the last DURATION (10m, 2h, 1d) as one, not FILE.
    #[arg(long, value_name = "DURATION", value_parser = profdev_agent::store::parse_duration, conflicts_with = "input")]
    since: Option<std::time::Duration>,
    /// The store --since reads (default /var/lib/profdev-agent/store).
    #[arg(long, value_name = "DIR", requires = "since")]
    store: Option<PathBuf>,
}

/// `--type`'s parser: cpu, off-cpu, wall.
pub(crate) fn types() -> impl clap::builder::TypedValueParser<Value = SampleType> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["cpu", "off-cpu", "wall"])
        .map(|s| SampleType::parse(&s).unwrap_or_default())
}

impl Since {
    /// FILE's recording or, with `--since`, the store's recordings of that
    /// window as one (their notes said on stderr), viewed as `ty`.
    pub fn read(&self, input: &Path, name: &str, does: &str, ty: SampleType) -> Result<Recording> {
        let Some(since) = self.since else {
            return read_view(input, name, does, ty);
        };
        let w = profdev_agent::store::read_since(self.store.as_deref(), since)
            .map_err(|e| anyhow!(e))?;
        w.notes.iter().for_each(|n| eprintln!("{name}: {n}"));
        Ok(profdev_formats::export::view(
            w.recording,
            ty,
            "the store's window",
        )?)
    }
}

/// [`read_recording`] viewed as `ty` (refused where it has no off-CPU samples to view).
pub fn read_view(path: &Path, name: &str, does: &str, ty: SampleType) -> Result<Recording> {
    let rec = read_recording(path, name, does)?;
    Ok(profdev_formats::export::view(
        rec,
        ty,
        &path.display().to_string(),
    )?)
}

/// Read a recording file (regular files only; a FIFO is refused rather
/// than waited on); a torn or unfinished one is said so on stderr by
/// `name` (the command reading it: `profdev export`, `profdev report`),
/// which `does` what with its samples (`exporting`, `reporting`).
pub fn read_recording(path: &Path, name: &str, does: &str) -> Result<Recording> {
    use profdev_symbolize::open::{read_bounded, Follow};
    let bytes = read_bounded(path, u64::MAX, Follow::Yes).map_err(|e| anyhow!("{e}"))?;
    let rec = recording::read(&bytes).with_context(|| format!("{}", path.display()))?;
    if let Some(at) = rec.torn {
        eprintln!(
            "{name}: {}: the recording ends inside a record at byte {at} (a crash or a cut?); {does} the {} samples before it",
            path.display(),
            rec.samples.len()
        );
    } else if !rec.complete {
        eprintln!(
            "{name}: {}: the recording has no end record (still being written, or interrupted); {does} its {} samples",
            path.display(),
            rec.samples.len()
        );
    }
    Ok(rec)
}

/// An export's contents: bytes made in memory, or the perf-script text,
/// streamed (a million samples make gigabytes of it).
enum Contents<'r> {
    Bytes(Vec<u8>),
    Script(perf_script::Script<'r>),
}

impl Contents<'_> {
    fn len(&self) -> usize {
        match self {
            Contents::Bytes(b) => b.len(),
            Contents::Script(s) => s.len(),
        }
    }
    /// Write to `w` in chunks, advancing `bar`.
    fn write_to(&self, w: &mut dyn Write, bar: &crate::bar::Bar) -> std::io::Result<()> {
        struct Counting<'a>(&'a mut dyn Write, &'a crate::bar::Bar);
        impl Write for Counting<'_> {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let n = self.0.write(b)?;
                self.1.inc(n as u64);
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                self.0.flush()
            }
        }
        let mut w = Counting(w, bar);
        match self {
            Contents::Bytes(b) => b.chunks(1 << 20).try_for_each(|c| w.write_all(c)),
            Contents::Script(s) => s.write_to(&mut w),
        }?;
        w.flush()
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    if !args.diff.is_empty() && args.format != Format::Svg {
        bail!("--diff draws a differential flame graph: give the format svg");
    }
    let format = args.format.to_possible_value();
    let format = format.as_ref().map_or("", |v| v.get_name());
    let rec;
    let (contents, binary, kernel_addrs, what) = match heap(args, format)? {
        Some(m) => (Contents::Bytes(m.bytes), m.binary, m.kernel_addrs, m.what),
        None if args.format == Format::PerfScript => {
            rec = recording(args, format)?;
            let (script, k) = (perf_script::Script::new(&rec), rec.has_kernel_frames());
            (Contents::Script(script), false, k, Written::Other)
        }
        None => {
            let m = bytes(args, format, &recording(args, format)?)?;
            (Contents::Bytes(m.bytes), m.binary, m.kernel_addrs, m.what)
        }
    };
    let default_out = match args.format {
        Format::Gmon => Path::new("gmon.out"),
        _ => Path::new("-"),
    };
    let out = args.output.as_deref().unwrap_or(default_out);
    let len = contents.len();
    write(args, out, &contents, binary, kernel_addrs)?;
    let to_stdout = out == Path::new("-");
    if let Some(line) = wrote(format, out, len, &what) {
        eprintln!("{NAME}: {line}");
    }
    if args.open && !to_stdout {
        let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let display = env("DISPLAY").is_some() || env("WAYLAND_DISPLAY").is_some();
        eprintln!("{NAME}: {}", open(out, display, env("PATH").as_deref()));
    }
    Ok(ExitCode::SUCCESS)
}

/// The recording to export (NEW of `--diff`, FILE, or the store's window), viewed as `--type`.
fn recording(args: &Args, format: &str) -> Result<Recording> {
    let ty = args.sample_type()?;
    profdev_formats::export::check_type(format, ty)?;
    match args.diff.get(1) {
        Some(new) => read_view(new, NAME, "exporting", ty),
        None => args.since.read(&args.input, NAME, "exporting", ty),
    }
}

impl Args {
    /// `--type` of a recording.
    fn sample_type(&self) -> Result<SampleType> {
        let why = "is for an allocation profile ('profdev mprof --pprof FILE' writes one), not a recording";
        SampleType::parse(&self.ty).ok_or_else(|| anyhow!("--type {} {why}", self.ty))
    }
}

/// FILE's export when it is an allocation profile (a pprof heap profile)
/// rather than a recording.
fn heap(args: &Args, format: &str) -> Result<Option<request::Made>> {
    use profdev_formats::export::heap;
    use profdev_symbolize::open::{open_bounded, Follow};
    if !args.diff.is_empty() || args.since.since.is_some() {
        return Ok(None);
    }
    let (file, _) = open_bounded(&args.input, u64::MAX, Follow::Yes).map_err(|e| anyhow!("{e}"))?;
    let what = |e| anyhow!("{}: {e}", args.input.display());
    let Some(stacks) = heap::read(file).map_err(what)? else {
        return Ok(None);
    };
    let (space, title) = (heap::Space::of_type(&args.ty)?, args.title.clone());
    Ok(Some(heap::make(
        &stacks,
        format,
        space,
        title,
        args.inverted,
    )?))
}

/// Hand `file` to the desktop's viewer (xdg-open, found on `path`) when
/// there is a `display`; the sentence that says what happened.
fn open(file: &Path, display: bool, path: Option<&std::ffi::OsStr>) -> String {
    let shown = file.display();
    if !display {
        return format!(
            "--open: there is no display to open it on ($DISPLAY and $WAYLAND_DISPLAY are unset); the file is {shown}"
        );
    }
    let xdg_open = path.and_then(|p| {
        std::env::split_paths(p)
            .map(|d| d.join("xdg-open"))
            .find(|c| is_executable(c))
    });
    let Some(xdg_open) = xdg_open else {
        return format!("--open: xdg-open is not installed to open it; the file is {shown}");
    };
    // Not waited for: xdg-open may run the viewer in the foreground.
    match std::process::Command::new(&xdg_open)
        .arg(file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(_) => format!("opening {shown} with {}", xdg_open.display()),
        Err(e) => format!(
            "--open: cannot run {}: {e}; the file is {shown}",
            xdg_open.display()
        ),
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Write `contents` to `out` (`-`: standard output).
fn write(
    args: &Args,
    out: &Path,
    contents: &Contents,
    binary: bool,
    kernel_addrs: bool,
) -> Result<()> {
    // Writing a big export (perf-script text of a million samples is
    // gigabytes) shows a bar on a terminal.
    let bar = crate::bar::Bar::start(NAME, "writing", contents.len() as u64);
    if out == Path::new("-") {
        let mut stdout = std::io::stdout().lock();
        if binary && stdout.is_terminal() {
            bail!(
                "{:?} output is binary; give -o FILE or redirect standard output",
                args.format
            );
        }
        match contents.write_to(&mut stdout, &bar) {
            // A reader that has seen enough (`| head`) is no error.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r.context("cannot write to standard output")?,
        }
    } else {
        let mode = if kernel_addrs {
            crate::output::KERNEL_MODE
        } else {
            crate::output::USER_MODE
        };
        let mut f = profdev_safefile::SafeFile::create(out, mode).map_err(|e| anyhow!("{e}"))?;
        contents
            .write_to(&mut f, &bar)
            .map_err(|e| anyhow!("{}: {e}", out.display()))?;
        f.commit().map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// `profdev_report::diff`'s judgment of a differential graph's frames.
fn judge(frames: &[svg::PathCounts]) -> Vec<svg::Shift> {
    let judged = profdev_report::diff::judge_paths(frames);
    let shift = |(delta, significant)| svg::Shift { delta, significant };
    judged.into_iter().map(shift).collect()
}

/// The bytes of every format but perf-script (`format`, its name), made
/// by `profdev_formats::export::request`.
fn bytes(args: &Args, format: &str, rec: &Recording) -> Result<request::Made> {
    let base = match &args.diff[..] {
        [base, _] => Some(read_view(base, NAME, "comparing", args.sample_type()?)?),
        _ => None,
    };
    let req = request::Request {
        format,
        title: args.title.clone(),
        inverted: args.inverted,
        diff: base.as_ref().map(|b| (b, &judge as &request::Judge)),
        gmon: gmon::Select {
            pid: args.pid,
            comm: args.comm.clone(),
            format: match args.gmon_format {
                GmonFormat::Gnu => profdev_formats::gmon::Format::Gnu,
                GmonFormat::Bsd => profdev_formats::gmon::Format::Bsd,
            },
        },
        shift: args.shift,
        log_bucket: args.log_bucket,
    };
    Ok(request::make(rec, &req)?)
}
