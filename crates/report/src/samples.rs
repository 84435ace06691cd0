//! `profdev report`'s table: samples by any key, self and children, with
//! confidence intervals.
//!
//! Each sample comes as its process, thread and frames (object and function
//! names, innermost first). A row is one combination of the chosen keys
//! (`comm`, `pid`, `tid`, `dso`, `sym`): its **self** count is the samples
//! whose innermost frame has that combination, its **children** count
//! (with `--children`) the samples with that combination anywhere in their
//! stack, each sample counted once per row. Rows are sorted by children
//! (with `--children`) or self, largest first, then by key.
//!
//! With `--ci` each share gets its 95% interval, the Wilson score interval
//! of the row's count out of all samples, and rows whose intervals overlap
//! the row next to them in the order are marked as ties (`=`): their order
//! is not told apart by this many samples. The header says the model:
//! samples are treated as independent draws, which periodic sampling only
//! approximates (a workload in phase with the clock breaks it).
//!
//! [`table_weighted`] weighs each sample (`report --type off-cpu|wall`,
//! weights in ns): a row's share is of the summed weight, followed by its
//! seconds, and its interval is the Wilson interval of that share with
//! Kish's effective sample size `n_eff = (Σw)² / Σw²` ([`kish`]) in place
//! of the number of samples. The model: the share of time is treated as
//! the share of n_eff independent, equally weighted draws. It is an
//! approximation: the weights are treated as fixed, not drawn, and a
//! long off-CPU interval is one draw however long it is (a few long
//! intervals give a small n_eff, so wide intervals).
//!
//! ```
//! use profdev_report::samples::{table, Key, SampleRow, Options};
//! let s = |sym: &'static str| SampleRow {
//!     comm: "prog", pid: 1, tid: 1,
//!     frames: vec![("prog", sym), ("prog", "main")],
//! };
//! let samples = vec![s("hot"), s("hot"), s("hot"), s("cold")];
//! let text = table(&samples, &Options { keys: vec![Key::Sym], children: true, ci: false });
//! assert!(text.contains("  100.00%     0.00%  main\n"));
//! assert!(text.contains("   75.00%    75.00%  hot\n"));
//! ```

use std::collections::HashMap;
use std::fmt::Write;

/// A column of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// The thread's command name.
    Comm,
    /// Process id.
    Pid,
    /// Thread id.
    Tid,
    /// The object (shared object, executable, `[kernel]`).
    Dso,
    /// The function.
    Sym,
}

impl Key {
    /// Parse one of `comm`, `pid`, `tid`, `dso`, `sym`.
    pub fn parse(s: &str) -> Option<Key> {
        Some(match s {
            "comm" => Key::Comm,
            "pid" => Key::Pid,
            "tid" => Key::Tid,
            "dso" => Key::Dso,
            "sym" => Key::Sym,
            _ => return None,
        })
    }

    /// Parse `--sort`'s comma-separated keys; the error is a sentence.
    pub fn parse_list(s: &str) -> Result<Vec<Key>, String> {
        let keys = s.split(',').filter(|k| !k.is_empty());
        let keys = keys
            .map(|k| {
                Key::parse(k).ok_or_else(|| {
                    format!("--sort: unknown key {k:?}; use comm, pid, tid, dso or sym, comma separated")
                })
            })
            .collect::<Result<Vec<Key>, String>>()?;
        if keys.is_empty() {
            return Err("--sort: no key; use comm, pid, tid, dso or sym, comma separated".into());
        }
        Ok(keys)
    }

    /// The column's title.
    pub fn title(self) -> &'static str {
        match self {
            Key::Comm => "Command",
            Key::Pid => "Pid",
            Key::Tid => "Tid",
            Key::Dso => "Object",
            Key::Sym => "Symbol",
        }
    }
}

/// One sample, as the table needs it.
#[derive(Clone, Debug)]
pub struct SampleRow<'a> {
    /// The thread's command name.
    pub comm: &'a str,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// (object, function) of each frame, innermost first.
    pub frames: Vec<(&'a str, &'a str)>,
}

/// What to show.
#[derive(Clone, Debug)]
pub struct Options {
    /// The row keys, in column order.
    pub keys: Vec<Key>,
    /// Also count each row's samples anywhere in the stack.
    pub children: bool,
    /// Add each share's 95% Wilson interval and mark ties.
    pub ci: bool,
}

/// z for a two-sided 95% interval.
const Z: f64 = 1.959_963_984_540_054;

/// The Wilson score interval (95%) of `k` successes out of `n`, as shares.
pub fn wilson(k: u64, n: u64) -> (f64, f64) {
    wilson_f(k as f64, n as f64)
}

/// [`wilson`] of a fractional count `k` out of `n` (a weighted share
/// times Kish's effective sample size, [`kish`]).
pub fn wilson_f(k: f64, n: f64) -> (f64, f64) {
    if n == 0.0 {
        return (0.0, 1.0);
    }
    let p = k / n;
    let z2 = Z * Z;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    ((center - half).max(0.0), (center + half).min(1.0))
}

/// The row key of sample `s` with `frame` as its frame.
pub(crate) fn key_of<'a>(
    keys: &[Key],
    s: &SampleRow<'a>,
    frame: Option<(&'a str, &'a str)>,
) -> Vec<String> {
    keys.iter()
        .map(|k| match k {
            Key::Comm => s.comm.to_string(),
            Key::Pid => s.pid.to_string(),
            Key::Tid => s.tid.to_string(),
            Key::Dso => frame.map_or("[none]", |f| f.0).to_string(),
            Key::Sym => frame.map_or("[none]", |f| f.1).to_string(),
        })
        .collect()
}

/// Kish's effective sample size of samples with weights `w`,
/// `(Σw)² / Σw²`: as many equally weighted draws as would give a share
/// the same variance (an approximation that treats the weights as fixed).
pub fn kish(w: &[u64]) -> f64 {
    profdev_formats::export::kish(w.iter().copied())
}

/// The report's text.
pub fn table(samples: &[SampleRow], opts: &Options) -> String {
    table_weighted(samples, None, opts)
}

/// Each row's (children, self) units: samples, or the weights of
/// `weights` (one per sample).
fn units(
    samples: &[SampleRow],
    weights: Option<&[u64]>,
    opts: &Options,
) -> Vec<(Vec<String>, (u64, u64))> {
    let mut rows: HashMap<Vec<String>, (u64, u64)> = HashMap::new();
    for (i, s) in samples.iter().enumerate() {
        let unit = weights.map_or(1, |w| w[i]);
        let own = key_of(&opts.keys, s, s.frames.first().copied());
        rows.entry(own.clone()).or_default().1 += unit;
        if opts.children {
            let mut seen: Vec<Vec<String>> = Vec::new();
            if s.frames.is_empty() {
                seen.push(own);
            }
            for f in &s.frames {
                let k = key_of(&opts.keys, s, Some(*f));
                if !seen.contains(&k) {
                    seen.push(k);
                }
            }
            for k in seen {
                rows.entry(k).or_default().0 += unit;
            }
        }
    }
    rows.into_iter().collect()
}

/// [`table`] of weighted samples when `weights` (ns, one per sample) is
/// given (`report --type off-cpu|wall`): each share is of the summed
/// weight and is followed by its seconds, and `--ci`'s intervals take
/// Kish's effective sample size ([`kish`]) for the count of draws.
pub fn table_weighted(samples: &[SampleRow], weights: Option<&[u64]>, opts: &Options) -> String {
    let n: u64 = weights.map_or(samples.len() as u64, |w| w.iter().sum());
    // The draws an interval is of: the samples, or Kish's n_eff.
    let draws = weights.map_or(n as f64, kish);
    let mut rows = units(samples, weights, opts);
    let rank = |r: &(u64, u64)| if opts.children { r.0 } else { r.1 };
    rows.sort_by(|a, b| rank(&b.1).cmp(&rank(&a.1)).then(a.0.cmp(&b.0)));

    let mut out = String::new();
    match weights {
        None => {
            let _ = writeln!(out, "# {n} samples");
        }
        Some(_) => {
            let _ = writeln!(
                out,
                "# {} samples, {:.3} s; shares of time (their weights), not of samples",
                samples.len(),
                n as f64 / 1e9
            );
        }
    }
    if opts.ci && weights.is_none() {
        let _ = writeln!(
            out,
            "# [lo, hi]: 95% Wilson score interval of the share, treating samples as \
             independent draws (periodic sampling only approximates this); '=' marks a row \
             whose interval overlaps a neighbour's: their order is not established"
        );
    } else if opts.ci {
        let _ = writeln!(
            out,
            "# [lo, hi]: 95% Wilson score interval of the share of time, of Kish's effective \
             sample size n_eff = (sum w)^2 / sum w^2 = {draws:.1} draws in place of the samples \
             (an approximation: samples treated as independent draws of fixed weights); '=' \
             marks a row whose interval overlaps a neighbour's: their order is not established"
        );
    }
    let secs_head = if weights.is_some() { "   Seconds" } else { "" };
    let mut head = String::from("#");
    if opts.children {
        head.push_str(" Children");
        head.push_str(secs_head);
        if opts.ci {
            head.push_str("  [lo, hi]        ");
        }
    }
    head.push_str("     Self");
    head.push_str(secs_head);
    if opts.ci {
        head.push_str("  [lo, hi]         ");
    }
    for k in &opts.keys {
        let _ = write!(head, "  {}", k.title());
    }
    let _ = writeln!(out, "{}", head.trim_end());
    let pct = |k: u64| {
        if n == 0 {
            0.0
        } else {
            100.0 * k as f64 / n as f64
        }
    };
    // A row's interval: of its count, or of its share times n_eff.
    let interval = |k: u64| match weights {
        None => wilson(k, n),
        Some(_) if n == 0 => (0.0, 1.0),
        Some(_) => wilson_f(k as f64 / n as f64 * draws, draws),
    };
    let share = |line: &mut String, k: u64| {
        let _ = write!(line, "{:8.2}%", pct(k));
        if weights.is_some() {
            let _ = write!(line, " {:8.3}s", k as f64 / 1e9);
        }
        if opts.ci {
            let (lo, hi) = interval(k);
            let _ = write!(line, "  [{:6.2}, {:6.2}]", 100.0 * lo, 100.0 * hi);
        }
    };
    let intervals: Vec<(f64, f64)> = rows.iter().map(|r| interval(rank(&r.1))).collect();
    let overlaps = |a: (f64, f64), b: (f64, f64)| a.0 <= b.1 && b.0 <= a.1;
    for (i, (key, (children, own))) in rows.iter().enumerate() {
        let mut line = String::new();
        if opts.children {
            share(&mut line, *children);
            line.push(' ');
        }
        share(&mut line, *own);
        if opts.ci {
            let tie = (i > 0 && overlaps(intervals[i], intervals[i - 1]))
                || (i + 1 < rows.len() && overlaps(intervals[i], intervals[i + 1]));
            line.push_str(if tie { " =" } else { "  " });
        }
        for v in key {
            let _ = write!(line, "  {v}");
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s<'a>(comm: &'a str, tid: u32, frames: &[(&'a str, &'a str)]) -> SampleRow<'a> {
        SampleRow {
            comm,
            pid: 1,
            tid,
            frames: frames.to_vec(),
        }
    }

    #[test]
    fn wilson_matches_the_textbook_values() {
        // 50 of 100: 40.38% to 59.62% (e.g. Newcombe 1998's formula).
        let (lo, hi) = wilson(50, 100);
        assert!(
            (lo - 0.4038).abs() < 1e-4 && (hi - 0.5962).abs() < 1e-4,
            "{lo} {hi}"
        );
        // 0 of 10: [0, 27.75%].
        let (lo, hi) = wilson(0, 10);
        assert!(lo == 0.0 && (hi - 0.2775).abs() < 1e-4, "{lo} {hi}");
        assert_eq!(wilson(0, 0), (0.0, 1.0));
    }

    #[test]
    fn self_and_children_by_symbol() {
        let samples = vec![
            s("p", 1, &[("p", "c"), ("p", "b"), ("p", "main")]),
            s("p", 1, &[("p", "c"), ("p", "b"), ("p", "main")]),
            s("p", 1, &[("p", "d"), ("p", "main")]),
            // Recursion: b counted once in this sample's children.
            s("p", 1, &[("p", "b"), ("p", "b"), ("p", "main")]),
        ];
        let t = table(
            &samples,
            &Options {
                keys: vec![Key::Sym],
                children: true,
                ci: false,
            },
        );
        let lines: Vec<&str> = t.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "  100.00%     0.00%  main",
                "   75.00%    25.00%  b",
                "   50.00%    50.00%  c",
                "   25.00%    25.00%  d",
            ]
        );
    }

    #[test]
    fn keys_combine_and_ci_marks_ties() {
        let mut samples = Vec::new();
        for _ in 0..60 {
            samples.push(s("a", 1, &[("x.so", "f")]));
        }
        for _ in 0..38 {
            samples.push(s("a", 2, &[("x.so", "g")]));
        }
        for _ in 0..2 {
            samples.push(s("b", 3, &[]));
        }
        let t = table(
            &samples,
            &Options {
                keys: vec![Key::Comm, Key::Tid, Key::Dso],
                children: false,
                ci: true,
            },
        );
        assert!(t.contains("Wilson"), "{t}");
        let rows: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 3, "{t}");
        assert!(rows[0].ends_with("  a  1  x.so"), "{t}");
        assert!(rows[2].ends_with("  b  3  [none]"), "{t}");
        // 60 vs 38 of 100: [50.2, 69.1] and [28.9, 48.0] do not overlap;
        // 38 vs 2: apart too. No ties.
        assert!(!t.contains(" ="), "{t}");
        // 51 vs 47 of 100 overlap: both marked.
        let mut close = Vec::new();
        close.extend((0..51).map(|_| s("a", 1, &[("x", "f")])));
        close.extend((0..47).map(|_| s("a", 1, &[("x", "g")])));
        let t = table(
            &close,
            &Options {
                keys: vec![Key::Sym],
                children: false,
                ci: true,
            },
        );
        assert_eq!(t.matches(" =").count(), 2, "{t}");
    }

    #[test]
    fn kish_counts_equal_weights_as_samples() {
        assert_eq!(kish(&[5, 5, 5, 5]), 4.0);
        // (1 + 3)² / (1 + 9) = 1.6.
        assert!((kish(&[1, 3]) - 1.6).abs() < 1e-12);
        assert_eq!(kish(&[]), 0.0);
    }

    #[test]
    fn weighted_shares_are_of_time_with_seconds() {
        let samples = vec![
            s("p", 1, &[("p", "burner"), ("p", "main")]),
            s("p", 1, &[("p", "napper"), ("p", "main")]),
        ];
        let opts = Options {
            keys: vec![Key::Sym],
            children: true,
            ci: false,
        };
        let t = table_weighted(&samples, Some(&[1_000_000, 3_000_000]), &opts);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines,
            [
                "# 2 samples, 0.004 s; shares of time (their weights), not of samples",
                "# Children   Seconds     Self   Seconds  Symbol",
                "  100.00%    0.004s     0.00%    0.000s  main",
                "   75.00%    0.003s    75.00%    0.003s  napper",
                "   25.00%    0.001s    25.00%    0.001s  burner",
            ]
        );
        // Without weights: the counts, as `table`.
        assert_eq!(
            table_weighted(&samples, None, &opts),
            table(&samples, &opts)
        );
        // --ci: Kish's n_eff = 16 / 10 = 1.6 draws, so wide intervals.
        let t = table_weighted(
            &samples,
            Some(&[1_000_000, 3_000_000]),
            &Options { ci: true, ..opts },
        );
        assert!(t.contains("n_eff = (sum w)^2 / sum w^2 = 1.6 draws"), "{t}");
        let (lo, hi) = wilson_f(0.75 * 1.6, 1.6);
        let want = format!("[{:6.2}, {:6.2}]", 100.0 * lo, 100.0 * hi);
        assert!(t.contains(&want), "{want}: {t}");
    }
}
