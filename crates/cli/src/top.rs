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
//! `--wall` (implies `-g`) shows where the threads' time goes, on the CPU
//! and off it: beside each sample, every interval a thread spends off the
//! CPU (asleep, blocked, waiting for I/O or for a CPU), from the switch
//! out to the switch back, with the stack it blocked in, weighed in
//! sampling periods (the idle task is left out); shares are of thread
//! time. It takes a sample at every context switch of the machine.
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
//! with at least 0.1% of the samples, then an empty line; each holds all
//! the samples its health line counts, however long naming them takes:
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
use profdev_dev::top::text::{batch_text, batch_title, run_title};
use profdev_dev::top::{check_process, session, wall_session, Live, Sort, View, Wake, Zoom};
use profdev_symbolize::KernelSymbols;
use std::ffi::OsString;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// Wall-clock view: time off the CPU too, where threads wait (implies -g).
    #[arg(long)]
    wall: bool,
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

fn run(args: &Args) -> Result<ExitCode> {
    let config = match args.wall {
        true => wall_session(args.frequency),
        false => session(args.frequency, args.callgraph),
    };
    config.validate().map_err(|e| anyhow!("{e}"))?;
    if let Some(pid) = args.pid {
        check_process(pid).map_err(|e| anyhow!(e))?;
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
    let mut live = Live::start(Box::new(source), &config, kernel, args.pid);
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
            config.callchain,
            &mut live,
            view,
            &signal,
        )
    };
    let failed = live.finish();
    let ended = result?;
    if let Some(why) = failed {
        bail!("sampling stopped: {why}");
    }
    Ok(match ended {
        0 => ExitCode::SUCCESS,
        sig => ExitCode::from(128u8.saturating_add(sig as u8)),
    })
}

/// What the title says about the run.
fn args_title(args: &Args) -> String {
    let title = run_title(args.pid, args.frequency, args.callgraph || args.wall);
    if args.wall {
        return title + ", wall";
    }
    title
}

/// `--batch`: N snapshots as text on stdout. Returns the signal that ended
/// it early, or 0.
fn batch(args: &Args, live: &mut Live, view: View, signal: &AtomicUsize) -> Result<usize> {
    let every = Duration::from_secs_f64(args.delay);
    let mut next = Instant::now() + every;
    let mut n = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        match live.wait(next, signal) {
            Wake::Deadline => {}
            Wake::Stopped => return Ok(0),
            Wake::Signal(sig) => return Ok(sig),
        }
        n += 1;
        let title = batch_title(n, args.count, args.delay, &args_title(args), view.sort);
        let text = batch_text(
            &title,
            &live.health(),
            &live.snapshot(&view),
            args.callgraph || args.wall,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_is_bounded() {
        assert_eq!(parse_delay("1"), Ok(1.0));
        assert_eq!(parse_delay("0.5"), Ok(0.5));
        for bad in ["0", "-1", "x", "nan", "inf", "4000"] {
            assert!(parse_delay(bad).unwrap_err().contains("-d takes"), "{bad}");
        }
    }
}
