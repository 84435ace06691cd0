//! A flame graph as a standalone SVG: one rectangle per call-tree node,
//! its width its share of the samples, callers below callees (or above
//! them, an icicle graph, with `inverted`). Each rectangle has a `<title>`
//! (shown on hover) with the name, samples and percentage; names are drawn
//! where they fit. Colours are a hash of the name (warm for user code,
//! blue for the kernel), so they are stable across exports.
//!
//! The graph can be explored in a web browser, as flamegraph.pl's graphs
//! can, by a script of ours embedded in it (flame.js, in CDATA, using no
//! external resource): a click zooms into a frame, "Reset Zoom" (or
//! Escape) undoes it, and "Search" (or Ctrl-F) highlights the frames a
//! regular expression matches and shows their share of the samples. For
//! the script each frame's `<g>` carries its first sample in the layout
//! (`data-s`), its samples (`data-n`) and its depth (`data-d`); the
//! drawing itself is the same with or without a script to run it.
//! Frames narrower than 0.1 pixel in the whole graph are left out of the
//! file (as flamegraph.pl's `--minwidth` does), so zooming and searching
//! do not see them either.
//!
//! [`render_diff`] draws a differential graph: NEW's frames, each
//! coloured by how its share of the samples (the same call path, matched
//! by function names from the root) changed from BASE: red where it grew
//! (slower), blue where it shrank (faster), deeper the larger the change,
//! grey where the change is not significant; its title says the change
//! in points. Which changes are significant is the caller's judgment
//! (`profdev_report::diff::judge`), made over all frames at once.
//!
//! Of an `off-cpu` or `wall` view ([`Recording::view`]) widths are time,
//! not samples: each frame's width is its share of the summed weights,
//! its title says its time in µs, the search its share of ns, and a
//! differential graph judges shares of time with each recording's
//! Kish effective sample size ([`super::kish`]) for its count of samples.

use super::{Names, Tree};
use crate::recording::Recording;
use std::fmt::Write;

/// Drawing options.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Title above the graph.
    pub title: String,
    /// Icicle graph: roots at the top.
    pub inverted: bool,
    /// Width in pixels.
    pub width: f64,
    /// The weights are bytes (an allocation flame graph, [`super::heap`]):
    /// titles say bytes, and so does the search.
    pub bytes: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            title: "Flame Graph".into(),
            inverted: false,
            width: 1200.0,
            bytes: false,
        }
    }
}

const FRAME_H: f64 = 16.0;
const PAD_TOP: f64 = 40.0;
const PAD_BOTTOM: f64 = 20.0;
const PAD_SIDE: f64 = 10.0;
const CHAR_W: f64 = 7.0;

/// XML-escape `s` for text and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

fn colour(name: &str, kernel: bool) -> String {
    // FNV-1a: stable across runs and platforms.
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    let v = |shift: u32, range: u32| (h >> shift) % range;
    if kernel {
        format!(
            "rgb({},{},{})",
            80 + v(0, 50),
            130 + v(8, 50),
            200 + v(16, 55)
        )
    } else {
        format!(
            "rgb({},{},{})",
            205 + v(0, 50),
            80 + v(8, 120),
            40 + v(16, 40)
        )
    }
}

/// The script that makes the graph explorable (see the module doc).
const SCRIPT: &str = include_str!("flame.js");

/// A drawn flame graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// The SVG document.
    pub svg: String,
    /// The frames (rectangles) drawn.
    pub frames: usize,
    /// The samples the graph shows (of a time view too: samples, not ns).
    pub samples: u64,
}

/// The SVG of `rec`.
pub fn write(rec: &Recording, opt: &Options) -> String {
    render(rec, opt).svg
}

/// The SVG of `rec`, with what it shows.
pub fn render(rec: &Recording, opt: &Options) -> Graph {
    let names = Names::new(rec);
    let tree = Tree::new(&names);
    let colours: Vec<String> = names
        .funcs
        .iter()
        .map(|f| colour(&f.name, f.kernel))
        .collect();
    draw(&names, &tree, opt, &|i| {
        (colours[tree.nodes[i].func as usize].clone(), String::new())
    })
}

/// A frame's change in a differential graph: NEW's share less BASE's, in
/// percentage points, and whether it is significant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shift {
    pub delta: f64,
    pub significant: bool,
}

/// The counts of one frame of a differential graph: its samples in BASE
/// (0 where BASE has no such path) and all of BASE's, its samples in NEW
/// and all of NEW's.
pub type PathCounts = [u64; 4];

/// The differential flame graph of `new` against `base` (see the module
/// doc); `judge` gets every frame's counts at once and says how each
/// changed.
pub fn render_diff(
    base: &Recording,
    new: &Recording,
    opt: &Options,
    judge: &dyn Fn(&[PathCounts]) -> Vec<Shift>,
) -> Graph {
    let (bn, nn) = (Names::new(base), Names::new(new));
    let (bt, nt) = (Tree::new(&bn), Tree::new(&nn));
    // BASE's node of each (parent, function name).
    let mut child: std::collections::HashMap<(u32, &str), u32> = Default::default();
    for (i, n) in bt.nodes.iter().enumerate().skip(1) {
        child.insert(
            (n.parent, bn.funcs[n.func as usize].name.as_str()),
            i as u32,
        );
    }
    // NEW's nodes come parents first: each one's BASE node, if any.
    let mut in_base: Vec<Option<u32>> = vec![Some(0); nt.nodes.len()];
    for i in 1..nt.nodes.len() {
        let n = &nt.nodes[i];
        let name = nn.funcs[n.func as usize].name.as_str();
        in_base[i] = in_base[n.parent as usize].and_then(|p| child.get(&(p, name)).copied());
    }
    let (b_total, n_total) = (bt.nodes[0].total, nt.nodes[0].total);
    // Of a time view, shares of ns scaled to Kish's effective samples.
    let scale = |rec: &Recording, total: u64| -> Box<dyn Fn(u64) -> u64> {
        if rec.view == crate::recording::SampleType::Cpu || total == 0 {
            return Box::new(|k| k);
        }
        let draws = super::kish(rec.samples.iter().map(|s| s.weight));
        Box::new(move |k| (k as f64 / total as f64 * draws).round() as u64)
    };
    let (sb, sn) = (scale(base, b_total), scale(new, n_total));
    let counts: Vec<PathCounts> = nt
        .nodes
        .iter()
        .zip(&in_base)
        .map(|(n, b)| {
            [
                sb(b.map_or(0, |b| bt.nodes[b as usize].total)),
                sb(b_total),
                sn(n.total),
                sn(n_total),
            ]
        })
        .collect();
    let shifts = judge(&counts);
    let largest = shifts
        .iter()
        .filter(|s| s.significant)
        .map(|s| s.delta.abs())
        .fold(0.0, f64::max);
    draw(&nn, &nt, opt, &|i| {
        let s = shifts[i];
        let title = format!(
            ", {:+.2} points{}",
            s.delta,
            if s.significant {
                ""
            } else {
                ", not significant"
            }
        );
        if !s.significant || largest == 0.0 {
            return ("rgb(210,210,210)".into(), title);
        }
        // From a pale tint to full colour with the size of the change.
        let fade = (200.0 * (1.0 - s.delta.abs() / largest)) as u32 + 30;
        let colour = if s.delta > 0.0 {
            format!("rgb(255,{fade},{fade})")
        } else {
            format!("rgb({fade},{fade},255)")
        };
        (colour, title)
    })
}

/// The SVG of `tree`, each node `i`'s colour and the words added to its
/// title given by `paint(i)`.
fn draw(
    names: &Names,
    tree: &Tree,
    opt: &Options,
    paint: &dyn Fn(usize) -> (String, String),
) -> Graph {
    let total = tree.nodes[0].total;
    // A count of samples, or (a time view) of ns shown as µs.
    let timed = names.timed();
    let amount = |n: u64| {
        if opt.bytes {
            format!("{n} bytes")
        } else if timed {
            format!("{} µs", n.div_ceil(1000))
        } else {
            format!("{n} samples")
        }
    };
    // Depth of each node; nodes are created parents first.
    let mut depth = vec![0usize; tree.nodes.len()];
    for i in 1..tree.nodes.len() {
        depth[i] = depth[tree.nodes[i].parent as usize] + 1;
    }
    let max_depth = depth.iter().copied().max().unwrap_or(0);
    let height = PAD_TOP + PAD_BOTTOM + FRAME_H * (max_depth.max(1)) as f64;
    let usable = opt.width - 2.0 * PAD_SIDE;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="{w}" height="{height}" viewBox="0 0 {w} {height}" xmlns="http://www.w3.org/2000/svg">
<style>text {{ font-family: monospace; font-size: 12px; fill: rgb(0,0,0); }} rect:hover {{ stroke: black; }}</style>
<rect x="0" y="0" width="{w}" height="{height}" fill="rgb(250,250,240)"/>
<text x="{cx}" y="24" text-anchor="middle" style="font-size:17px">{title}</text>
<text x="{PAD_SIDE}" y="{fy}">{amount}</text>"#,
        w = opt.width,
        cx = opt.width / 2.0,
        title = escape(&opt.title),
        fy = height - 5.0,
        amount = amount(total),
    );
    if total == 0 {
        s.push_str("</svg>\n");
        return Graph {
            svg: s,
            frames: 0,
            samples: 0,
        };
    }
    // x of each node: its parent's x plus the totals of earlier siblings.
    let mut x = vec![0u64; tree.nodes.len()];
    let mut stack = vec![0u32];
    while let Some(n) = stack.pop() {
        let mut at = x[n as usize];
        for &c in &tree.nodes[n as usize].children {
            x[c as usize] = at;
            at += tree.nodes[c as usize].total;
            stack.push(c);
        }
    }
    let mut order: Vec<usize> = (1..tree.nodes.len()).collect();
    order.sort_by_key(|&i| (depth[i], x[i]));
    let mut frames = 0;
    for i in order {
        let n = &tree.nodes[i];
        let f = &names.funcs[n.func as usize];
        let width = usable * n.total as f64 / total as f64;
        if width < 0.1 {
            continue;
        }
        let left = PAD_SIDE + usable * x[i] as f64 / total as f64;
        let level = (depth[i] - 1) as f64;
        let y = if opt.inverted {
            PAD_TOP + level * FRAME_H
        } else {
            height - PAD_BOTTOM - (level + 1.0) * FRAME_H
        };
        let pct = 100.0 * n.total as f64 / total as f64;
        let name = escape(&f.name);
        let (fill, more) = paint(i);
        let _ = write!(
            s,
            "<g data-s=\"{}\" data-n=\"{}\" data-d=\"{}\"><title>{name} ({}, {}%{more})</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" rx=\"2\"/>",
            x[i],
            n.total,
            depth[i],
            amount(n.total),
            Fixed(pct, 2),
            Fixed(left, 1),
            Fixed(y, 1),
            Fixed(width, 1),
            Fixed(FRAME_H - 1.0, 1),
            fill,
        );
        let fits = ((width - 6.0) / CHAR_W).floor() as usize;
        if fits >= 3 {
            let chars: Vec<char> = f.name.chars().collect();
            let label: String = if chars.len() <= fits {
                f.name.clone()
            } else {
                chars[..fits - 2].iter().collect::<String>() + ".."
            };
            let _ = write!(
                s,
                "<text x=\"{}\" y=\"{}\">{}</text>",
                Fixed(left + 3.0, 1),
                Fixed(y + FRAME_H - 4.5, 1),
                escape(&label)
            );
        }
        s.push_str("</g>\n");
        frames += 1;
    }
    // The search counts what data-n holds: ns in a time view.
    let script = match (opt.bytes, timed) {
        (true, _) => std::borrow::Cow::Owned(SCRIPT.replace(" samples)\"", " bytes)\"")),
        (false, true) => std::borrow::Cow::Owned(SCRIPT.replace(" samples)\"", " ns of time)\"")),
        (false, false) => std::borrow::Cow::Borrowed(SCRIPT),
    };
    let _ = write!(
        s,
        "<script type=\"text/ecmascript\"><![CDATA[\nvar TOTAL = {total}, SIDE = {PAD_SIDE}, USABLE = {usable}, FRAME_H = {FRAME_H}, CHAR_W = {CHAR_W};\n{script}]]></script>\n</svg>\n"
    );
    Graph {
        svg: s,
        frames,
        samples: names.stack_counts.iter().map(|c| c.0).sum(),
    }
}

/// `v` with `digits` decimals, as `{:.N}` prints it for the values a
/// graph has (non-negative, far below 2^53), by integer arithmetic:
/// float formatting with a precision is the slow path of `core::fmt`.
struct Fixed(f64, u32);

impl std::fmt::Display for Fixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scale = 10u64.pow(self.1);
        if !(self.0.is_finite() && self.0 >= 0.0 && self.0 < 1e15) {
            return write!(f, "{:.*}", self.1 as usize, self.0);
        }
        let v = (self.0 * scale as f64).round() as u64;
        write!(f, "{}.{:0w$}", v / scale, v % scale, w = self.1 as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::{Fixed, SCRIPT};

    #[test]
    fn the_script_fits_in_cdata() {
        assert!(!SCRIPT.contains("]]>"));
        assert!(SCRIPT.ends_with('\n'));
    }

    #[test]
    fn fixed_prints_as_precision_formatting() {
        for v in [0.0, 0.04, 0.05, 1.25, 15.0, 99.999, 1234.5678, 55.555_555] {
            for d in [1, 2] {
                let want = format!("{v:.*}", d as usize);
                let got = Fixed(v, d).to_string();
                // Halfway cases may round either way; others agree.
                let close = (want.parse::<f64>().unwrap() - got.parse::<f64>().unwrap()).abs()
                    <= 1.0 / 10f64.powi(d as i32) + 1e-9;
                assert!(close, "{v} {d}: {want} {got}");
                assert_eq!(got.split('.').nth(1).unwrap().len(), d as usize);
            }
        }
        assert_eq!(Fixed(1.25, 1).to_string().len(), 3);
        assert_eq!(Fixed(12.34, 1).to_string(), "12.3");
    }
}
