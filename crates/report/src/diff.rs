//! `profdev report --diff BASE NEW`: how each row's share of samples
//! changed between two recordings, with a 95% interval of the change and
//! a mark where the change is significant across all rows.
//!
//! For a row with `k1` of `n1` samples in BASE and `k2` of `n2` in NEW,
//! the change is `d = k2/n2 − k1/n1`, in percentage points. Its interval
//! is Newcombe's hybrid score interval (Newcombe 1998, method 10), built
//! from the two Wilson score intervals `report --ci` shows:
//! `d − √((p2−l2)² + (u1−p1)²)` to `d + √((u2−p2)² + (p1−l1)²)`.
//! Each row's p-value is the two-sided pooled two-proportion z-test's;
//! rows are marked significant by the Benjamini–Hochberg procedure at a
//! false discovery rate of 5% over all rows compared, and only where
//! Newcombe's interval excludes zero too, so the mark and the interval
//! never disagree. As in `--ci`, samples are treated as independent
//! draws, which periodic sampling only approximates.
//!
//! The measure is the share of samples, not time per run: a function
//! whose own time did not change loses share when another one grows.
//!
//! [`table_weighted`] compares shares of time (`--type off-cpu|wall`):
//! each row's `k` is its share of the summed weight times its recording's
//! Kish effective sample size `n_eff = (Σw)² / Σw²`
//! ([`crate::samples::kish`]), and `n` is n_eff, in the same interval and
//! test ([`judge_f`]); an approximation, as [`crate::samples`] says.
//!
//! ```
//! use profdev_report::diff::{judge, Counts};
//! // 700 of 1000 samples, then 300 of 1000: a significant drop.
//! let c = judge(&[Counts { base: 700, base_total: 1000, new: 300, new_total: 1000 }]);
//! assert!(c[0].significant && (c[0].delta + 40.0).abs() < 1e-9);
//! ```

use crate::samples::{key_of, kish, wilson_f, Key, SampleRow};
use std::collections::BTreeMap;
use std::fmt::Write;

/// A row's counts in the two recordings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Samples of the row in BASE, and all of BASE's.
    pub base: u64,
    pub base_total: u64,
    /// Samples of the row in NEW, and all of NEW's.
    pub new: u64,
    pub new_total: u64,
}

/// What [`judge`] says of a row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    /// The shares, in percent.
    pub base_share: f64,
    pub new_share: f64,
    /// NEW's share less BASE's, in percentage points.
    pub delta: f64,
    /// Newcombe's 95% interval of `delta`, in points.
    pub lo: f64,
    pub hi: f64,
    /// The two-proportion z-test's two-sided p-value.
    pub p: f64,
    /// Significant after Benjamini–Hochberg over all rows judged
    /// together (and the interval excludes zero).
    pub significant: bool,
}

/// The false discovery rate the marks control.
pub const FDR: f64 = 0.05;

fn share(k: f64, n: f64) -> f64 {
    if n == 0.0 {
        0.0
    } else {
        k / n
    }
}

/// The two-sided p-value of the pooled two-proportion z-test of `k1` of
/// `n1` against `k2` of `n2`.
fn p_value([k1, n1, k2, n2]: [f64; 4]) -> f64 {
    if n1 == 0.0 || n2 == 0.0 {
        return 1.0;
    }
    let pooled = (k1 + k2) / (n1 + n2);
    let se = (pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)).sqrt();
    if se == 0.0 {
        return 1.0;
    }
    let z = (share(k2, n2) - share(k1, n1)) / se;
    // 2 (1 − Φ(|z|)) = erfc(|z| / √2).
    libm::erfc(z.abs() / std::f64::consts::SQRT_2)
}

/// Each row's change, interval, p-value and mark (see the module doc);
/// the rows are judged together, as the false discovery rate is over
/// all of them.
pub fn judge(rows: &[Counts]) -> Vec<Change> {
    let rows: Vec<[f64; 4]> = rows
        .iter()
        .map(|c| {
            [
                c.base as f64,
                c.base_total as f64,
                c.new as f64,
                c.new_total as f64,
            ]
        })
        .collect();
    judge_f(&rows)
}

/// [`judge`] of rows given as `[k1, n1, k2, n2]` where the counts may be
/// fractional: a weighted share times Kish's effective sample size
/// ([`crate::samples::kish`]) of its recording, for `n`.
pub fn judge_f(rows: &[[f64; 4]]) -> Vec<Change> {
    let mut out: Vec<Change> = rows
        .iter()
        .map(|&c| {
            let [k1, n1, k2, n2] = c;
            let (p1, p2) = (share(k1, n1), share(k2, n2));
            let (l1, u1) = wilson_f(k1, n1);
            let (l2, u2) = wilson_f(k2, n2);
            let d = p2 - p1;
            let lo = d - ((p2 - l2).powi(2) + (u1 - p1).powi(2)).sqrt();
            let hi = d + ((u2 - p2).powi(2) + (p1 - l1).powi(2)).sqrt();
            Change {
                base_share: 100.0 * p1,
                new_share: 100.0 * p2,
                delta: 100.0 * d,
                lo: 100.0 * lo,
                hi: 100.0 * hi,
                p: p_value(c),
                significant: false,
            }
        })
        .collect();
    // Benjamini–Hochberg: the largest rank i with p(i) <= i/m * FDR; every
    // row up to it is a discovery.
    let m = out.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| out[a].p.total_cmp(&out[b].p));
    let cut = order
        .iter()
        .enumerate()
        .filter(|&(i, &r)| out[r].p <= (i + 1) as f64 / m as f64 * FDR)
        .map(|(i, _)| i + 1)
        .max()
        .unwrap_or(0);
    for &r in &order[..cut] {
        let c = &mut out[r];
        c.significant = c.lo > 0.0 || c.hi < 0.0;
    }
    out
}

/// [`judge`] of a differential flame graph's frames, each given as
/// `[base, base_total, new, new_total]`: each one's change in points and
/// whether it is significant.
pub fn judge_paths(frames: &[[u64; 4]]) -> Vec<(f64, bool)> {
    let counts: Vec<Counts> = frames
        .iter()
        .map(|&[base, base_total, new, new_total]| Counts {
            base,
            base_total,
            new,
            new_total,
        })
        .collect();
    judge(&counts)
        .iter()
        .map(|c| (c.delta, c.significant))
        .collect()
}

/// What to compare.
#[derive(Clone, Debug)]
pub struct Options {
    /// The row keys, in column order.
    pub keys: Vec<Key>,
    /// Compare each row's samples anywhere in the stack rather than its
    /// own.
    pub children: bool,
}

/// Each row's count in `samples` (self, or children: once per sample),
/// or its summed weight where `weights` (one per sample) is given.
fn counts(
    samples: &[SampleRow],
    weights: Option<&[u64]>,
    opts: &Options,
) -> BTreeMap<Vec<String>, u64> {
    let mut rows: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    for (i, s) in samples.iter().enumerate() {
        let unit = weights.map_or(1, |w| w[i]);
        if !opts.children || s.frames.is_empty() {
            *rows
                .entry(key_of(&opts.keys, s, s.frames.first().copied()))
                .or_default() += unit;
            continue;
        }
        let mut seen: Vec<Vec<String>> = Vec::new();
        for f in &s.frames {
            let k = key_of(&opts.keys, s, Some(*f));
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        for k in seen {
            *rows.entry(k).or_default() += unit;
        }
    }
    rows
}

/// The comparison's text: a header naming both recordings (`names`) and
/// the model, then one row per key found in either, significant changes
/// first, largest change first.
pub fn table(base: &[SampleRow], new: &[SampleRow], names: (&str, &str), opts: &Options) -> String {
    table_weighted((base, None), (new, None), names, opts)
}

/// One side of a comparison: its samples and, for shares of time
/// (`--type off-cpu|wall`), their weights in ns.
pub type Side<'s, 'a> = (&'s [SampleRow<'a>], Option<&'s [u64]>);

/// [`table`] of weighted samples where a side has weights: shares of the
/// summed weight, and each recording's Kish effective sample size
/// ([`kish`]) as its number of draws for the interval and the test.
pub fn table_weighted(base: Side, new: Side, names: (&str, &str), opts: &Options) -> String {
    let (b, n) = (counts(base.0, base.1, opts), counts(new.0, new.1, opts));
    let total = |s: &Side| s.1.map_or(s.0.len() as u64, |w| w.iter().sum());
    let (bt, nt) = (total(&base), total(&new));
    let mut keys: Vec<&Vec<String>> = b.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    let get = |m: &BTreeMap<Vec<String>, u64>, k: &Vec<String>| m.get(k).copied().unwrap_or(0);
    let changes = if base.1.is_none() && new.1.is_none() {
        let rows: Vec<Counts> = keys
            .iter()
            .map(|k| Counts {
                base: get(&b, k),
                base_total: bt,
                new: get(&n, k),
                new_total: nt,
            })
            .collect();
        judge(&rows)
    } else {
        let draws = |s: &Side| s.1.map_or(s.0.len() as f64, kish);
        let (bd, nd) = (draws(&base), draws(&new));
        let scaled = |k: u64, t: u64, d: f64| if t == 0 { 0.0 } else { k as f64 / t as f64 * d };
        let rows: Vec<[f64; 4]> = keys
            .iter()
            .map(|k| {
                [
                    scaled(get(&b, k), bt, bd),
                    bd,
                    scaled(get(&n, k), nt, nd),
                    nd,
                ]
            })
            .collect();
        judge_f(&rows)
    };
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&x, &y| {
        let (cx, cy) = (&changes[x], &changes[y]);
        cy.significant
            .cmp(&cx.significant)
            .then(cy.delta.abs().total_cmp(&cx.delta.abs()))
            .then(keys[x].cmp(keys[y]))
    });
    let what = if opts.children {
        "anywhere in the stack"
    } else {
        "as the innermost frame"
    };
    let mut out = String::new();
    if base.1.is_none() && new.1.is_none() {
        let _ = writeln!(
            out,
            "# BASE {}: {bt} samples; NEW {}: {nt} samples",
            names.0, names.1
        );
        let _ = writeln!(
            out,
            "# share of samples {what} (not time per run); change in points, NEW - BASE, with its 95% \
             Newcombe interval; '*': significant at a false discovery rate of 5% over these {} rows \
             (Benjamini-Hochberg), samples treated as independent draws",
            keys.len()
        );
    } else {
        let secs = |t: u64| t as f64 / 1e9;
        let _ = writeln!(
            out,
            "# BASE {}: {} samples, {:.3} s; NEW {}: {} samples, {:.3} s",
            names.0,
            base.0.len(),
            secs(bt),
            names.1,
            new.0.len(),
            secs(nt)
        );
        let _ = writeln!(
            out,
            "# share of time {what} (not time per run); change in points, NEW - BASE, with its 95% \
             Newcombe interval; '*': significant at a false discovery rate of 5% over these {} rows \
             (Benjamini-Hochberg), samples treated as independent draws, each recording's count \
             taken as Kish's effective sample size (sum w)^2 / sum w^2 (an approximation)",
            keys.len()
        );
    }
    let mut head = String::from("#    Base      New   Change  [lo, hi]           ");
    for k in &opts.keys {
        let _ = write!(head, "  {}", k.title());
    }
    let _ = writeln!(out, "{}", head.trim_end());
    for i in order {
        let c = &changes[i];
        let mut line = format!(
            "{:8.2}% {:8.2}% {:+8.2}  [{:+7.2}, {:+7.2}] {}",
            c.base_share,
            c.new_share,
            c.delta,
            c.lo,
            c.hi,
            if c.significant { '*' } else { ' ' }
        );
        for v in keys[i] {
            let _ = write!(line, "  {v}");
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Newcombe (1998), table II, example (a): 56/70 vs 48/80, the
    /// difference 0.2 with method 10's interval 0.0524 to 0.3339.
    #[test]
    fn newcombe_matches_the_paper() {
        let c = judge(&[Counts {
            base: 48,
            base_total: 80,
            new: 56,
            new_total: 70,
        }]);
        assert!((c[0].delta - 20.0).abs() < 1e-9);
        assert!((c[0].lo - 5.24).abs() < 0.01, "{:?}", c[0]);
        assert!((c[0].hi - 33.39).abs() < 0.01, "{:?}", c[0]);
        // Pooled 104/150, z = 0.2 / 0.07547 = 2.650: p = 0.00805.
        assert!((c[0].p - 0.00805).abs() < 0.00005, "{:?}", c[0]);
        assert!(c[0].significant);
    }

    /// Benjamini–Hochberg on p-values whose adjusted cut is known: of 20
    /// rows with the same small change, none passes alone at 5%/20, and
    /// an unchanged row is never marked.
    #[test]
    fn the_marks_control_the_false_discovery_rate() {
        let same = Counts {
            base: 100,
            base_total: 1000,
            new: 100,
            new_total: 1000,
        };
        let c = judge(&[same]);
        assert!(!c[0].significant && c[0].p > 0.99);
        // 100 vs 130 of 1000: p about 0.03, significant alone...
        let small = Counts { new: 130, ..same };
        assert!(judge(&[small])[0].significant);
        // ...but not as one of 20 rows where only it changed (0.03 > 0.05/20).
        let mut rows = vec![same; 19];
        rows.push(small);
        assert!(judge(&rows).iter().all(|c| !c.significant));
        // A big change stays significant among them.
        rows.push(Counts { new: 300, ..same });
        let c = judge(&rows);
        assert!(c[20].significant && !c[19].significant);
    }

    #[test]
    fn the_table_puts_significant_changes_first() {
        let row = |sym: &'static str| SampleRow {
            comm: "p",
            pid: 1,
            tid: 1,
            frames: vec![("p", sym), ("p", "main")],
        };
        let mut base = Vec::new();
        let mut new = Vec::new();
        base.extend((0..700).map(|_| row("hot")));
        base.extend((0..200).map(|_| row("steady")));
        base.extend((0..100).map(|_| row("warm")));
        new.extend((0..300).map(|_| row("hot")));
        new.extend((0..200).map(|_| row("steady")));
        new.extend((0..500).map(|_| row("warm")));
        let opts = Options {
            keys: vec![Key::Sym],
            children: false,
        };
        let t = table(&base, &new, ("a.data", "b.data"), &opts);
        let rows: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rows.len(), 3, "{t}");
        assert!(
            rows[0].ends_with("*  hot") || rows[0].ends_with("*  warm"),
            "{t}"
        );
        assert!(
            rows[0].contains("-40.00") || rows[0].contains("+40.00"),
            "{t}"
        );
        assert!(rows[2].starts_with("   20.00%    20.00%    +0.00"), "{t}");
        assert!(rows[2].ends_with("   steady"), "{t}");
        assert!(t.starts_with("# BASE a.data: 1000 samples; NEW b.data: 1000 samples\n"));
        // With children, main is in every sample of both: unchanged.
        let t = table(
            &base,
            &new,
            ("a", "b"),
            &Options {
                children: true,
                ..opts
            },
        );
        assert!(t.contains("  100.00%   100.00%    +0.00"), "{t}");
    }

    #[test]
    fn weighted_tables_compare_shares_of_time_with_kish_draws() {
        let row = |sym: &'static str| SampleRow {
            comm: "p",
            pid: 1,
            tid: 1,
            frames: vec![("p", sym)],
        };
        // 100 intervals each side; BASE's hot ones weigh 7 ms and its cold
        // ones 3 ms (70% of the time), NEW's the other way round.
        let mut rows = Vec::new();
        rows.extend((0..50).map(|_| row("hot")));
        rows.extend((0..50).map(|_| row("cold")));
        let heavy_hot: Vec<u64> = (0..100).map(|i| if i < 50 { 7 } else { 3 }).collect();
        let light_hot: Vec<u64> = (0..100).map(|i| if i < 50 { 3 } else { 7 }).collect();
        let opts = Options {
            keys: vec![Key::Sym],
            children: false,
        };
        let t = table_weighted(
            (&rows, Some(&heavy_hot)),
            (&rows, Some(&light_hot)),
            ("a", "b"),
            &opts,
        );
        assert!(t.contains("share of time"), "{t}");
        let hot = t.lines().find(|l| l.ends_with("  hot")).unwrap();
        assert!(hot.starts_with("   70.00%    30.00%   -40.00"), "{t}");
        assert!(hot.ends_with("*  hot"), "{t}");
        // By counts nothing moved.
        let t = table(&rows, &rows, ("a", "b"), &opts);
        let rows = t.lines().filter(|l| !l.starts_with('#'));
        assert!(
            rows.clone().count() == 2 && rows.clone().all(|l| !l.contains('*')),
            "{t}"
        );
        // Kish's n_eff of 7s and 3s: 100² · 25 / (50 · 49 + 50 · 9) = 86.2 draws,
        // so an interval wider than of 100 samples.
        let c = judge_f(&[[70.0 * 0.862, 86.2, 30.0 * 0.862, 86.2]]);
        let d = judge(&[Counts {
            base: 70,
            base_total: 100,
            new: 30,
            new_total: 100,
        }]);
        assert!(c[0].hi - c[0].lo > d[0].hi - d[0].lo);
    }
}
