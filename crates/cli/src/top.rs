//! `profdev top [-F HZ] [-p PID | -a] [-g] [--sort self|total] [-d SECONDS]
//! [--batch [-n N]]`: where the machine spends its time, live, as `perf
//! top` shows it.
//!
//! Samples every CPU at `-F` Hz (1000 by default; software cpu-clock,
//! kernel and user mode) and shows the functions the samples fell in, one
//! row per process and function: the share of the samples whose
//! instruction was in the function (*self*), with `-g` also the share whose
//! stack held it (*total*: the kernel's callchain and the user stack,
//! unwound with the binaries' `.eh_frame` from a copy of the stack taken
//! at each sample), the process's name and pid, and the module (`[kernel]`,
//! `[ext4]` for a kernel module, a library or executable's file name).
//! Kernel functions are named from `/proc/kallsyms`, user functions from
//! the symbol tables of the files the processes mapped (opened when their
//! mappings were seen, so a file replaced since still names its code).
//! A function in no symbol is `[unknown]` in its module; code in no file
//! (a JIT) is `[unknown]` in `[anon]`. The idle loop is process 0,
//! `swapper`, as the kernel names it.
//!
//! The shares are of a decaying window: at every refresh (every `-d`
//! seconds, 2 by default) every count is multiplied by 7/8, as perf top
//! does, so a function that stopped running fades out over a few tens of
//! seconds while one that runs stays.
//!
//! The health line is always shown, in the words of the other commands'
//! progress lines and of the `stat/` files: the rate achieved per CPU
//! (and the rate asked), the samples taken, the records the kernel lost
//! (a ring buffer full), the times it throttled sampling, with `-g` the
//! stacks that could not be unwound to their root, and the samples whose
//! function no symbol names (symbol misses). The counts are of everything
//! sampled, `-p` or not.
//!
//! `-p PID` keeps the samples of process PID alone (all its threads; the
//! machine is still sampled on every CPU, so it needs the same privilege
//! as `-a`). `-a`, every process, is the default.
//!
//! **On a terminal** the view fills the screen and is redrawn every `-d`
//! seconds. Keys: `s` switches the order between self and total; `↑`/`↓`
//! (or `k`/`j`) select a row; `p` zooms into the selected row's process,
//! `m` into its module (the shares are then of that process's or module's
//! samples), `z` or `Esc` zooms out; space pauses the display (sampling
//! goes on) and resumes it; `q` (or `Esc` when not zoomed, or ^C) quits.
//! The terminal is restored however top ends: a key, SIGINT, SIGTERM or
//! SIGHUP (exit status 128 + the signal), or a panic.
//!
//! **`--batch`** prints snapshots as plain text instead, every `-d`
//! seconds, `-n N` of them (until a signal without `-n`), for scripts and
//! tests: a title line, the health line, the column heads and the rows
//! with at least 0.1% of the samples, then an empty line:
//!
//! ```text
//! profdev top: snapshot 1 of 2, every 1 s, system-wide at 1000 Hz, by self
//! health: 996 Hz (asked 1000), 1993 samples, 0 lost, 0 throttled
//!   self%  COMMAND          PID  MODULE               FUNCTION
//!  49.62%  spin            4242  spin                 burn
//!  47.11%  swapper            0  [kernel]             pv_native_safe_halt
//! ```
//!
//! Without the privilege to sample the machine it says which sysctl or
//! capability is missing (`kernel.perf_event_paranoid`, CAP_PERFMON), as
//! the other commands do, and exits with status 1; a PID that is no
//! process, or a bad option, is one sentence and a non-zero status too.
//!
//! **Cost.** The sampling thread only reads the rings, keeps the tasks
//! table and (with `-g`) unwinds; it names nothing. Naming happens on the
//! display thread, once per kernel pc and per (object, file offset),
//! cached. `bench/top_overhead.sh` compares its CPU time with `perf top`'s
//! at the same rate (bench/README.md).
//!
//! # Bugs
//!
//! The window decays per refresh, not per second: a shorter `-d` forgets
//! faster. Rows are per process, not per thread. A process that exits
//! keeps its rows until they fade. With `-g`, total shares count a function
//! once per sample however often it recurs, and stacks through code
//! without `.eh_frame` or frame pointers stop there (counted as unwind
//! failures).

use anyhow::{anyhow, bail, Result};
use clap::{Parser, ValueEnum};
use profdev_core::{CpuMode, ProcessVa, Record, Sample, SessionConfig, SourceError, Target};
use profdev_dev::health::{Health, HealthSnapshot};
use profdev_dev::top::{Frame, Snapshot, Sort, Symbolizer, View, Window, Zoom};
use profdev_symbolize::unwind::UserUnwinder;
use profdev_symbolize::{KernelSymbols, Objects, Tasks};
use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// The factor every count is multiplied by at each refresh (perf top's).
pub const DECAY: f64 = 7.0 / 8.0;

/// Rows below this share are left out of a batch snapshot.
const BATCH_MIN_SHARE: f64 = 0.001;

/// Bytes of user stack copied with each sample under `-g`.
const STACK_BYTES: u32 = 8192;

/// The kernel's callchain markers (`PERF_CONTEXT_*`) are above this.
const PERF_CONTEXT_MAX: u64 = (-4095i64) as u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SortArg {
    /// By the share of samples in the function itself.
    #[value(name = "self")]
    Own,
    /// By the share of samples whose stack holds the function (with -g).
    Total,
}

/// Show the functions the machine runs, live, by share of the samples.
#[derive(Parser, Debug)]
#[command(name = "profdev top", version)]
pub(crate) struct Args {
    /// Samples per second per CPU (software cpu-clock), at most 10000.
    #[arg(short = 'F', value_name = "HZ", default_value_t = 1000)]
    frequency: u32,
    /// Only process PID's samples (all its threads).
    #[arg(short = 'p', value_name = "PID", conflicts_with = "all")]
    pid: Option<u32>,
    /// Every process (the default).
    #[arg(short = 'a')]
    all: bool,
    /// Take callchains (kernel and user stacks) and show total shares.
    #[arg(short = 'g')]
    callgraph: bool,
    /// The order of the rows.
    #[arg(long, value_enum, default_value_t = SortArg::Own)]
    sort: SortArg,
    /// Seconds between refreshes (and batch snapshots).
    #[arg(short = 'd', value_name = "SECONDS", default_value_t = 2.0, value_parser = parse_delay)]
    delay: f64,
    /// Print snapshots as plain text instead of the screen.
    #[arg(long)]
    batch: bool,
    /// With --batch: print N snapshots, then exit.
    #[arg(short = 'n', value_name = "N", requires = "batch", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
}

fn parse_delay(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if d.is_finite() && (0.1..=3600.0).contains(&d) => Ok(d),
        _ => Err(format!(
            "-d takes the seconds between refreshes, from 0.1 to 3600, not {s:?}"
        )),
    }
}

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>("profdev top", args) {
        Ok(args) => crate::cmdline::finish("profdev top", run(&args)),
        Err(code) => code,
    }
}

/// One sample, as the sampling thread hands it over: placed, not named.
struct Event {
    pid: u32,
    comm: Arc<str>,
    frames: Vec<Frame>,
}

/// What the sampling thread sends: samples, or why it stopped.
enum Batch {
    Events(Vec<Event>),
    Failed(String),
}

fn run(args: &Args) -> Result<ExitCode> {
    let config = SessionConfig {
        target: Target::System,
        frequency_hz: args.frequency,
        kernel: true,
        user: true,
        callchain: args.callgraph,
        user_stack_bytes: if args.callgraph { STACK_BYTES } else { 0 },
        track_tasks: true,
    };
    config.validate().map_err(|e| anyhow!("{e}"))?;
    if let Some(pid) = args.pid {
        check_process(pid)?;
    }
    let signal = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register_usize(sig, signal.clone(), sig as usize)
            .map_err(|e| anyhow!("cannot catch signal {sig}: {e}"))?;
    }
    if !args.batch && !std::io::stdout().is_terminal() {
        bail!("the live view needs a terminal; give --batch (and -n N) for text snapshots");
    }
    // Read before sampling starts: the rate achieved counts from the open.
    let kernel = KernelSymbols::running();
    let source = crate::progress::factory(None)
        .open_perf(&config)
        .map_err(|e| anyhow!("{e}"))?;
    let kernel = match kernel {
        Ok(k) => Some(k),
        Err(e) => {
            eprintln!("profdev top: kernel functions will show as [unknown]: {e}");
            None
        }
    };
    let health = Arc::new(Health::new());
    health.started(&config);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let sampler = {
        let (health, stop, filter, callgraph) =
            (health.clone(), stop.clone(), args.pid, args.callgraph);
        std::thread::spawn(move || sample(source, health, stop, filter, callgraph, tx))
    };
    let mut live = Live {
        rx,
        symbolizer: Symbolizer::new(kernel),
        window: Window::new(),
        health: health.clone(),
        failed: None,
    };
    let view = View {
        sort: match args.sort {
            SortArg::Own => Sort::SelfShare,
            SortArg::Total => Sort::Total,
        },
        zoom: args.pid.map(Zoom::Process),
    };
    let result = if args.batch {
        batch(args, &mut live, view, &signal)
    } else {
        crate::topui::interactive(
            args_title(args),
            args.delay,
            args.callgraph,
            &mut live,
            view,
            &signal,
        )
    };
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let ended = result?;
    if let Some(why) = live.failed {
        bail!("sampling stopped: {why}");
    }
    Ok(match ended {
        0 => ExitCode::SUCCESS,
        sig => ExitCode::from(128u8.saturating_add(sig as u8)),
    })
}

/// Is `pid` a running process (a thread group leader)? One sentence if not.
fn check_process(pid: u32) -> Result<()> {
    let status = match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s) if pid != 0 => s,
        _ => bail!("process {pid} does not exist; give the pid of a running process, or -a"),
    };
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|t| t.trim().parse::<u32>().ok());
    match tgid {
        Some(tgid) if tgid != pid => {
            bail!("{pid} is a thread of process {tgid}: give -p {tgid} (its threads are shown together)")
        }
        _ => Ok(()),
    }
}

/// What the title says about the run.
fn args_title(args: &Args) -> String {
    let what = match args.pid {
        Some(pid) => format!("process {pid}"),
        None => "system-wide".into(),
    };
    format!(
        "{what} at {} Hz{}",
        args.frequency,
        if args.callgraph { ", -g" } else { "" }
    )
}

/// The sampling thread: read the rings, keep the tasks, place each
/// sample's frames in their objects, hand them over. No naming here.
fn sample(
    mut source: profdev_sample::PerfSource,
    health: Arc<Health>,
    stop: Arc<AtomicBool>,
    filter: Option<u32>,
    callgraph: bool,
    tx: mpsc::Sender<Batch>,
) {
    use profdev_core::SampleSource as _;
    let mut tasks = Tasks::with_objects(Objects::new());
    let mut unwinder = UserUnwinder::new();
    let mut comms: HashMap<u32, Arc<str>> = HashMap::new();
    let mut records = Vec::new();
    let mut user = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let r = source.read(&mut records, Duration::from_millis(100));
        health.count(&records);
        let mut events = Vec::new();
        for rec in records.drain(..) {
            tasks.observe(&rec);
            match &rec {
                Record::Comm { pid, .. } | Record::Exit { pid, .. } => {
                    comms.remove(pid);
                }
                Record::Sample(s) if filter.is_none_or(|p| p == s.pid) => {
                    let comm = comms
                        .entry(s.pid)
                        .or_insert_with(|| Arc::from(comm_of(&tasks, s.pid)))
                        .clone();
                    let frames = place(&tasks, &mut unwinder, s, callgraph, &mut user);
                    events.push(Event {
                        pid: s.pid,
                        comm,
                        frames,
                    });
                }
                _ => {}
            }
        }
        if callgraph {
            let u = unwinder.stats();
            health.set_unwind(u.samples - u.truncated, [0, u.truncated, 0]);
        }
        if !events.is_empty() && tx.send(Batch::Events(events)).is_err() {
            return;
        }
        match r {
            Ok(()) => {}
            Err(SourceError::Ended) => return,
            Err(e) => {
                let _ = tx.send(Batch::Failed(e.to_string()));
                return;
            }
        }
    }
}

fn comm_of(tasks: &Tasks, pid: u32) -> String {
    match tasks.comm(pid) {
        Some(c) => c.to_string(),
        None if pid == 0 => "swapper".into(),
        None => format!("[{pid}]"),
    }
}

/// A sample's frames, leaf first: the sampled pc alone, or with `-g` the
/// kernel's callchain and the unwound user stack. Return addresses are
/// looked up one byte back, in their call instruction.
fn place(
    tasks: &Tasks,
    unwinder: &mut UserUnwinder,
    s: &Sample,
    callgraph: bool,
    user: &mut Vec<u64>,
) -> Vec<Frame> {
    let user_frame = |va: u64| match tasks.lookup(s.pid, ProcessVa(va)) {
        Some(m) => match &m.object {
            Some(object) => Frame::User {
                object: object.clone(),
                offset: m.file_offset(ProcessVa(va)),
            },
            None => Frame::Anonymous,
        },
        None => Frame::Anonymous,
    };
    if !callgraph {
        return vec![match s.mode {
            CpuMode::User => user_frame(s.ip),
            _ => Frame::Kernel(s.ip),
        }];
    }
    let mut frames = Vec::new();
    if s.mode != CpuMode::User {
        let chain = s
            .kernel_chain
            .iter()
            .copied()
            .filter(|&a| a < PERF_CONTEXT_MAX);
        for (i, pc) in chain.enumerate() {
            frames.push(Frame::Kernel(if i == 0 { pc } else { pc.wrapping_sub(1) }));
        }
        if frames.is_empty() {
            frames.push(Frame::Kernel(s.ip));
        }
    }
    if s.pid != 0 && (s.mode == CpuMode::User || s.user_regs.is_some() || !s.user_chain.is_empty())
    {
        unwinder.unwind_into(tasks, s, user);
        for (i, &va) in user.iter().enumerate() {
            frames.push(user_frame(if i == 0 { va } else { va.wrapping_sub(1) }));
        }
    }
    if frames.is_empty() {
        frames.push(user_frame(s.ip));
    }
    frames
}

/// The display side: what arrives from the sampler, named and counted.
pub(crate) struct Live {
    rx: mpsc::Receiver<Batch>,
    symbolizer: Symbolizer,
    window: Window,
    health: Arc<Health>,
    failed: Option<String>,
}

impl Live {
    /// Take in what the sampler sent until `deadline` (or until it
    /// stopped); false when it stopped.
    pub(crate) fn drain_until(&mut self, deadline: Instant) -> bool {
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(batch) => self.take(batch),
                Err(mpsc::RecvTimeoutError::Timeout) => return true,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // It stops only when told to, or after sending why.
                    self.failed
                        .get_or_insert_with(|| "the sampling thread ended unexpectedly".into());
                    return false;
                }
            }
            if self.failed.is_some() {
                return false;
            }
            if Instant::now() >= deadline {
                return true;
            }
        }
    }

    fn take(&mut self, batch: Batch) {
        let events = match batch {
            Batch::Events(e) => e,
            Batch::Failed(why) => {
                self.failed = Some(why);
                return;
            }
        };
        let mut ids = Vec::new();
        for e in events {
            ids.clear();
            ids.extend(e.frames.iter().map(|f| self.symbolizer.resolve(f)));
            // A sample whose own function has no name: a symbol miss.
            if ids
                .first()
                .is_some_and(|&leaf| self.symbolizer.is_unknown(leaf))
            {
                self.health.symbol_miss();
            }
            self.window.add(e.pid, &e.comm, &ids);
        }
    }

    pub(crate) fn snapshot(&self, view: &View) -> Snapshot {
        self.window.snapshot(view, |id| {
            let f = self.symbolizer.func(id);
            (f.name.clone(), f.module.clone())
        })
    }

    pub(crate) fn decay(&mut self) {
        self.window.decay(DECAY);
    }

    pub(crate) fn health(&self) -> HealthSnapshot {
        self.health.snapshot()
    }

    pub(crate) fn failed(&self) -> bool {
        self.failed.is_some()
    }
}

/// `--batch`: N snapshots as text on stdout. Returns the signal that ended
/// it early, or 0.
fn batch(args: &Args, live: &mut Live, view: View, signal: &AtomicUsize) -> Result<usize> {
    let every = Duration::from_secs_f64(args.delay);
    let mut next = Instant::now() + every;
    let mut n = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        // Wake at least every 100 ms to see a signal.
        while Instant::now() < next {
            let step = next.min(Instant::now() + Duration::from_millis(100));
            if !live.drain_until(step) {
                return Ok(0);
            }
            let sig = signal.load(Ordering::Relaxed);
            if sig != 0 {
                return Ok(sig);
            }
        }
        n += 1;
        let title = format!(
            "profdev top: snapshot {n}{}, every {} s, {}, by {}",
            args.count.map_or_else(String::new, |c| format!(" of {c}")),
            args.delay,
            args_title(args),
            sort_word(view.sort)
        );
        let text = batch_text(
            &title,
            &live.health(),
            &live.snapshot(&view),
            args.callgraph,
        );
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            // A closed pipe (`| head`) ends the run quietly.
            return Ok(0);
        }
        live.decay();
        if args.count.is_some_and(|c| n >= c) {
            return Ok(0);
        }
        next += every;
    }
}

pub(crate) fn sort_word(s: Sort) -> &'static str {
    match s {
        Sort::SelfShare => "self",
        Sort::Total => "total",
    }
}

/// The health line, in the words of the progress lines and `stat/` keys.
pub(crate) fn health_line(h: &HealthSnapshot) -> String {
    let mut s = format!(
        "health: {} Hz (asked {}), {} samples, {} lost, {} throttled",
        h.rate_achieved, h.rate_asked, h.samples, h.lost, h.throttled
    );
    if h.unwind_ok + h.unwind_failures() > 0 {
        let _ = write!(s, ", {} unwind failures", h.unwind_failures());
    }
    if h.symbol_misses > 0 {
        let _ = write!(s, ", {} symbol misses", h.symbol_misses);
    }
    s
}

/// The column heads of a snapshot.
pub(crate) fn heads(total: bool) -> String {
    format!(
        "  self%{}  {:<15} {:>7}  {:<20} FUNCTION",
        if total { "  total%" } else { "" },
        "COMMAND",
        "PID",
        "MODULE"
    )
}

/// One row as text.
pub(crate) fn row_text(r: &profdev_dev::top::Row, total: bool) -> String {
    let mut s = format!("{:>6.2}%", r.self_share * 100.0);
    if total {
        let _ = write!(s, " {:>6.2}%", r.total_share * 100.0);
    }
    let _ = write!(
        s,
        "  {:<15} {:>7}  {:<20} {}",
        r.comm, r.pid, r.module, r.function
    );
    s
}

/// A batch snapshot: title, health line, heads, the rows with at least
/// 0.1% (of the sort's share), an empty line.
fn batch_text(title: &str, h: &HealthSnapshot, snap: &Snapshot, total: bool) -> String {
    let mut s = format!("{title}\n{}\n{}\n", health_line(h), heads(total));
    for r in &snap.rows {
        let share = if total {
            r.self_share.max(r.total_share)
        } else {
            r.self_share
        };
        if share < BATCH_MIN_SHARE {
            continue;
        }
        s.push_str(&row_text(r, total));
        s.push('\n');
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use profdev_dev::top::{FuncId, Window};

    #[test]
    fn batch_text_has_the_health_line_and_the_rows_above_a_tenth_of_a_percent() {
        let mut w = Window::new();
        for _ in 0..999 {
            w.add(42, "spin", &[FuncId(1), FuncId(2)]);
        }
        w.add(7, "rare", &[FuncId(3)]);
        let names = |id: FuncId| (format!("fn{}", id.0), "spin".to_string());
        let view = View {
            sort: Sort::SelfShare,
            zoom: None,
        };
        let h = Health::new();
        h.started(&SessionConfig::system(1000));
        let text = batch_text("title", &h.snapshot(), &w.snapshot(&view, names), false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "title");
        assert_eq!(
            lines[1],
            "health: 0 Hz (asked 1000), 0 samples, 0 lost, 0 throttled"
        );
        assert_eq!(
            lines[2],
            "  self%  COMMAND             PID  MODULE               FUNCTION"
        );
        assert_eq!(
            lines[3],
            " 99.90%  spin                 42  spin                 fn1"
        );
        assert_eq!(
            lines[4],
            "  0.10%  rare                  7  spin                 fn3"
        );
        assert_eq!(lines.len(), 6);
        // With totals: fn2 holds 99.9% of the stacks, no sample of its own.
        let text = batch_text(
            "t",
            &h.snapshot(),
            &w.snapshot(
                &View {
                    sort: Sort::Total,
                    zoom: None,
                },
                names,
            ),
            true,
        );
        assert!(
            text.contains("\n  0.00%  99.90%  spin                 42  spin                 fn2\n"),
            "{text}"
        );
        h.set_unwind(5, [0, 1, 0]);
        assert!(health_line(&h.snapshot()).ends_with(", 0 throttled, 1 unwind failures"));
    }

    #[test]
    fn a_pid_must_be_a_running_process() {
        let me = std::process::id();
        assert!(check_process(me).is_ok());
        // A thread of this process (alive until told) is not a process.
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let e = check_process(tid).unwrap_err().to_string();
        drop(done_tx);
        t.join().unwrap();
        assert_eq!(
            e,
            format!(
                "{tid} is a thread of process {me}: give -p {me} (its threads are shown together)"
            )
        );
        assert!(check_process(0)
            .unwrap_err()
            .to_string()
            .starts_with("process 0 does not exist"));
    }

    #[test]
    fn delay_is_bounded() {
        assert_eq!(parse_delay("1"), Ok(1.0));
        assert_eq!(parse_delay("0.5"), Ok(0.5));
        for bad in ["0", "-1", "x", "nan", "inf", "4000"] {
            assert!(parse_delay(bad).unwrap_err().contains("-d takes"), "{bad}");
        }
    }
}
