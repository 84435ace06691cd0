//! `profdev report [-i FILE] [--sort KEYS] [--children] [--ci]`: a
//! recording's samples as a text table, by any of command, process,
//! thread, object and function, self and children, with 95% intervals;
//! with `--diff BASE NEW`, how two recordings' shares differ.
//!
//! # Synopsis
//!
//! ```text
//! profdev report [-i FILE | --since DURATION [--store DIR]] [--type cpu|off-cpu|wall] [--sort comm,pid,tid,dso,sym] [--children] [--ci]
//! profdev report --diff BASE NEW [--type cpu|off-cpu|wall] [--sort comm,pid,tid,dso,sym] [--children]
//! ```
//!
//! # Description
//!
//! Reads FILE (default `profdev.data`, as `profdev record` writes it; a
//! torn `.partial` is read up to its last whole record) and prints one row
//! per combination of the `--sort` keys (default `comm,dso,sym`, as perf
//! report's): the share of samples whose innermost frame has it (Self) and,
//! with `--children`, the share of samples that have it anywhere in their
//! stack, each sample counted once per row (Children), largest first. The
//! idle task's samples are shown with the command `[idle]` (and the frame
//! `[idle]` outermost); frames that no symbol covers are `[unknown] in
//! OBJECT`, `[anon]` or `[unknown]`, a stripped object's functions
//! `sub_ADDR` as the recording's symbol tables name them, and a stack the
//! recorder could not unwind to its root ends in `[unwind failed: REASON]`
//! (object `[label]`). After the table, the count of samples with each of
//! those labels (`[idle]`, `[unwind failed: …]`, `[anon]`, `[unknown]…`).
//!
//! With `--since DURATION` (`10m`, `2h`, `1d`), the recordings of `profdev
//! agent`'s store (`--store DIR`, default /var/lib/profdev-agent/store)
//! of the last DURATION are read as one instead of FILE.
//!
//! With `--ci`, each share is followed by its 95% Wilson score interval,
//! and rows whose interval overlaps the interval of the row next to them
//! are marked `=`: that many samples do not tell their order apart. The
//! header says the model: samples are treated as independent draws, which
//! periodic sampling only approximates (a workload in phase with the
//! sampling clock breaks it). The table is computed by
//! `profdev_report::samples`.
//!
//! With `--diff BASE NEW`, one row per key found in either recording:
//! its share in BASE and in NEW, the change in percentage points (NEW −
//! BASE) with its 95% interval (Newcombe's hybrid score interval, built
//! from the two Wilson intervals `--ci` shows), and `*` where the change
//! is significant at a false discovery rate of 5% across all the rows
//! (Benjamini–Hochberg on two-proportion z-tests, and the interval
//! excludes zero), so that among many unchanged rows none is starred by
//! chance. Significant changes come first, largest first. The measure is
//! the share of samples (of time, with `--type off-cpu` or `wall`), not
//! time per run: a function whose own time did not change loses share
//! when another grows, and two runs of different lengths compare by
//! shares alone. `--children` compares the shares of
//! samples with the key anywhere in their stack. Computed by
//! `profdev_report::diff`; `profdev export svg --diff` draws it.
//!
//! `--type off-cpu` reports the intervals threads spent waiting off the
//! CPU (recorded by `profdev record -g --off-cpu`; a recording without
//! them is refused in one sentence), `--type wall` those, the time they
//! were preempted, and the on-CPU samples, each weighed by the sampling
//! period (`cpu`, the default: the clock's samples as before). Of these two, shares are of time (the
//! samples' weights in ns), not of samples, each followed by its seconds
//! (self, and children with `--children`): `97.57%  2.010s  napper`.
//! Their `--ci` and `--diff` intervals and tests take Kish's effective
//! sample size, n_eff = (Σw)²/Σw², in place of the count of samples: a
//! share of time is treated as a share of n_eff independent draws. This
//! is an approximation (weights are treated as fixed, and one long
//! interval is one draw); the header states it and n_eff.
//!
//! # Example
//!
//! ```text
//! profdev record -g -- ./prog && profdev report --children --ci --sort sym
//! profdev report --diff before.data after.data --sort sym
//! profdev report --since 10m --sort comm,sym
//! ```
//!
//! # Bugs
//!
//! Of `--type cpu`, shares are of sample counts, not of their weights
//! (every sample of one recording stands for the same period).

use anyhow::{anyhow, bail, Result};
use clap::Parser;
use profdev_report::samples::{Key, Options};
use profdev_report::view;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Print a recording's samples by command, process, thread, object and function.
#[derive(Parser, Debug)]
#[command(name = "profdev report", version)]
pub(crate) struct Args {
    /// The recording.
    #[arg(short = 'i', value_name = "FILE", default_value = "profdev.data")]
    input: PathBuf,
    #[command(flatten)]
    since: crate::export::Since,
    /// The row keys, comma separated: comm, pid, tid, dso, sym.
    #[arg(long, value_name = "KEYS", default_value = "comm,dso,sym")]
    sort: String,
    /// Also show each row's share of samples anywhere in the stack.
    #[arg(long)]
    children: bool,
    /// Which samples: cpu (the sampling clock's), off-cpu (time waiting off the CPU), wall (all); the latter two weigh time.
    #[arg(long = "type", value_name = "TYPE", default_value = "cpu", value_parser = crate::export::types())]
    ty: profdev_formats::recording::SampleType,
    /// Show each share's 95% Wilson interval and mark ties.
    #[arg(long)]
    ci: bool,
    /// Compare two recordings: each row's share in both, the change, its interval, '*' where significant.
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"], conflicts_with_all = ["input", "ci", "since"])]
    diff: Vec<PathBuf>,
}

const NAME: &str = "profdev report";

pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::cmdline::parse::<Args>(NAME, args) {
        Ok(args) => crate::cmdline::finish(NAME, run(&args)),
        Err(code) => code,
    }
}

fn run(args: &Args) -> Result<ExitCode> {
    let keys = Key::parse_list(&args.sort).map_err(anyhow::Error::msg)?;
    let empty = |p: &Path| {
        anyhow!(
            "{} holds no samples; record some with 'profdev record'",
            p.display()
        )
    };
    if let [base, new] = &args.diff[..] {
        let read = |p: &PathBuf| crate::export::read_view(p, NAME, "comparing", args.ty);
        let (b, n) = (read(base)?, read(new)?);
        if let Some(p) = [(base, &b), (new, &n)]
            .iter()
            .find(|(_, r)| r.samples.is_empty())
        {
            return Err(empty(p.0));
        }
        let files = (base.display().to_string(), new.display().to_string());
        let opts = profdev_report::diff::Options {
            keys,
            children: args.children,
        };
        return print(&view::diff(&b, &n, (&files.0, &files.1), &opts));
    }
    let rec = args.since.read(&args.input, NAME, "reporting", args.ty)?;
    if rec.samples.is_empty() {
        return Err(empty(&args.input));
    }
    let opts = Options {
        keys,
        children: args.children,
        ci: args.ci,
    };
    print(&view::report(&rec, &opts))
}

/// Write `text` to standard output (a reader that has seen enough is no
/// error).
fn print(text: &str) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // `| head`: not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        Err(e) => bail!("cannot write the report: {e}"),
    }
}
