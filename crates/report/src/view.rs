//! `profdev report` of a recording: its samples as the tables
//! ([`crate::samples`], [`crate::diff`]) take them, weighted as the
//! recording's view says ([`Recording::view`]).
//!
//! A `cpu` view counts samples, as `report` always did. An `off-cpu` or
//! `wall` view weighs time: each sample by its weight in ns (an off-CPU
//! interval's time off the CPU, an on-CPU sample's period), its shares
//! of the summed weight, each followed by its seconds; intervals take
//! Kish's effective sample size `n_eff = (Σw)² / Σw²` for the number of
//! independent draws, an approximation (it treats the weights as fixed,
//! and long intervals as single draws).

use crate::samples::{table_weighted, Options, SampleRow};
use profdev_formats::export::Names;
use profdev_formats::recording::{ObjectKind, Recording, SampleType};
use std::fmt::Write as _;

/// Each sample of `rec` as the tables take it.
pub fn sample_rows<'a>(rec: &'a Recording, names: &'a Names) -> Vec<SampleRow<'a>> {
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

/// The samples' weights (ns) where `rec`'s view weighs time (`off-cpu`,
/// `wall`); None for a `cpu` view, whose samples count one each.
pub fn weights(rec: &Recording) -> Option<Vec<u64>> {
    (rec.view != SampleType::Cpu).then(|| rec.samples.iter().map(|s| s.weight).collect())
}

/// The whole report of `rec`: the table, then the labelled frames.
pub fn report(rec: &Recording, opts: &Options) -> String {
    let names = Names::new(rec);
    let rows = sample_rows(rec, &names);
    let w = weights(rec);
    let mut text = table_weighted(&rows, w.as_deref(), opts);
    text.push_str(&labels(&names, rec));
    text
}

/// `report --diff` of two recordings viewed alike, named `files`.
pub fn diff(
    base: &Recording,
    new: &Recording,
    files: (&str, &str),
    opts: &crate::diff::Options,
) -> String {
    let (bn, nn) = (Names::new(base), Names::new(new));
    let (bw, nw) = (weights(base), weights(new));
    crate::diff::table_weighted(
        (&sample_rows(base, &bn), bw.as_deref()),
        (&sample_rows(new, &nn), nw.as_deref()),
        files,
        opts,
    )
}

/// The labelled frames' counts (of a time view: seconds): the samples
/// with each label anywhere in their stack (none: an empty string).
pub fn labels(names: &Names, rec: &Recording) -> String {
    let counts = names.label_counts();
    if counts.is_empty() {
        return String::new();
    }
    let timed = rec.view != SampleType::Cpu;
    let mut s = if timed {
        let total: u64 = rec.samples.iter().map(|s| s.weight).sum();
        format!(
            "\n# Labelled frames: time of the samples with the label anywhere in their stack, of {:.3} s\n",
            total as f64 / 1e9
        )
    } else {
        format!(
            "\n# Labelled frames: samples with the label anywhere in their stack, of {}\n",
            rec.samples.len()
        )
    };
    // Units: samples, or (time views) ns, as Names counts them.
    let total: u64 = (0..names.stacks.len()).map(|u| names.units(u)).sum();
    for (label, n) in counts {
        let pct = 100.0 * n as f64 / total.max(1) as f64;
        if timed {
            let _ = writeln!(s, "{:>9.3}s {pct:>7.2}%  {label}", n as f64 / 1e9);
        } else {
            let _ = writeln!(s, "{n:>10} {pct:>7.2}%  {label}");
        }
    }
    s
}
