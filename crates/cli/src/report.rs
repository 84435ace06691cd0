//! `profdev report [-i FILE] [--sort KEYS] [--children] [--ci]`: a
//! recording's samples as a text table, by any of command, process,
//! thread, object and function, self and children, with 95% intervals;
//! with `--diff BASE NEW`, how two recordings' shares differ.
//!
//! # Synopsis
//!
//! ```text
//! profdev report [-i FILE | --since DURATION [--store DIR]] [--sort comm,pid,tid,dso,sym] [--children] [--ci]
//! profdev report --diff BASE NEW [--sort comm,pid,tid,dso,sym] [--children]
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
//! the share of samples, not time per run: a function whose own time did
//! not change loses share when another grows, and two runs of different
//! lengths compare by shares alone. `--children` compares the shares of
//! samples with the key anywhere in their stack. Computed by
//! `profdev_report::diff`; `profdev export svg --diff` draws it.
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
//! Shares are of sample counts, not of their weights (every sample of one
//! recording stands for the same period).

use anyhow::{bail, Result};
use clap::Parser;
use profdev_formats::export::Names;
use profdev_formats::recording::{ObjectKind, Recording};
use profdev_report::samples::{table, Key, Options, SampleRow};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
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
    let mut keys = Vec::new();
    for k in args.sort.split(',').filter(|k| !k.is_empty()) {
        match Key::parse(k) {
            Some(k) => keys.push(k),
            None => {
                bail!("--sort: unknown key {k:?}; use comm, pid, tid, dso or sym, comma separated")
            }
        }
    }
    if keys.is_empty() {
        bail!("--sort: no key; use comm, pid, tid, dso or sym, comma separated");
    }
    if let [base, new] = &args.diff[..] {
        let read = |p: &PathBuf| crate::export::read_recording(p, NAME, "comparing");
        let (base_rec, new_rec) = (read(base)?, read(new)?);
        if let Some(p) = [(base, &base_rec), (new, &new_rec)]
            .iter()
            .find(|(_, r)| r.samples.is_empty())
        {
            bail!(
                "{} holds no samples; record some with 'profdev record'",
                p.0.display()
            );
        }
        let (bn, nn) = (Names::new(&base_rec), Names::new(&new_rec));
        let text = profdev_report::diff::table(
            &sample_rows(&base_rec, &bn),
            &sample_rows(&new_rec, &nn),
            (&base.display().to_string(), &new.display().to_string()),
            &profdev_report::diff::Options {
                keys,
                children: args.children,
            },
        );
        return print(&text);
    }
    let rec = args.since.read(&args.input, NAME, "reporting")?;
    if rec.samples.is_empty() {
        bail!(
            "{} holds no samples; record some with 'profdev record'",
            args.input.display()
        );
    }
    let names = Names::new(&rec);
    let rows = sample_rows(&rec, &names);
    let mut text = table(
        &rows,
        &Options {
            keys,
            children: args.children,
            ci: args.ci,
        },
    );
    text.push_str(&labels(&names, rec.samples.len() as u64));
    print(&text)
}

/// Each sample of `rec` as the tables take it.
fn sample_rows<'a>(rec: &'a Recording, names: &'a Names) -> Vec<SampleRow<'a>> {
    let dso = |object: u32| -> &str {
        match rec.object(object) {
            Some(o) if o.info.kind == ObjectKind::Kernel => "[kernel]",
            // A JIT object is named after its perf map or jitdump.
            Some(o) if o.info.kind == ObjectKind::Anon && !o.info.path.starts_with('/') => "[anon]",
            Some(o) if o.info.kind == ObjectKind::Label => "[label]",
            Some(o) => o.short_name(),
            None => "[unknown]",
        }
    };
    rec.samples
        .iter()
        .enumerate()
        .map(|(i, s)| SampleRow {
            comm: profdev_formats::export::comm(rec, s),
            pid: s.pid,
            tid: s.tid,
            frames: names
                .stack(i)
                .iter()
                .map(|&f| {
                    let f = &names.funcs[f as usize];
                    (dso(f.object), f.name.as_str())
                })
                .collect(),
        })
        .collect()
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

/// The labelled frames' counts: the samples with each label anywhere in
/// their stack (none: an empty string).
fn labels(names: &Names, total: u64) -> String {
    use std::fmt::Write as _;
    let counts = names.label_counts();
    if counts.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\n# Labelled frames: samples with the label anywhere in their stack, of {total}\n"
    );
    for (label, n) in counts {
        let _ = writeln!(
            s,
            "{n:>10} {:>7.2}%  {label}",
            100.0 * n as f64 / total.max(1) as f64
        );
    }
    s
}
