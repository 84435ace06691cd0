//! What kprof could never say: where the ticks outside kernel text went.
//!
//! A pure aggregation, filled by the caller with one call per outside tick
//! (already attributed to a process and a place), rendered as three tables:
//! per process, per user-space function, and per kernel-module symbol.

use std::collections::BTreeMap;
use std::fmt::Write;

/// The line printed after the kprof table: how many of its `in_text` ticks
/// were the idle loop (`idle`: samples of pid 0, the CPU's idle task), and
/// their share, truncated to tenths as kprof's. On an idle machine the top
/// rows (`pv_native_safe_halt`, `default_idle`, `intel_idle`…) are a CPU
/// with nothing to run, not kernel work, and the table alone does not say so.
///
/// ```
/// assert_eq!(
///     profdev_report::outside::idle_line(812, 1000),
///     "idle: 812 of the 1000 ticks in kernel text (81.2%) were the idle loop (pid 0: a CPU with nothing to run)\n"
/// );
/// ```
pub fn idle_line(idle: u64, in_text: u64) -> String {
    let t = if in_text == 0 {
        0
    } else {
        1000 * u128::from(idle) / u128::from(in_text)
    };
    format!(
        "idle: {idle} of the {in_text} ticks in kernel text ({}.{}%) were the idle loop (pid 0: a CPU with nothing to run)\n",
        t / 10,
        t % 10
    )
}

/// What "outside kernel text" holds, said after the section's tick count:
/// kprof's word 1 counts every tick whose pc is not in the core kernel's
/// text, which is mostly user space.
pub const OUTSIDE_MEANS: &str = "user space (programs and their libraries), and kernel code \
     outside [_stext, _etext) (modules, BPF programs, init text)";

/// Where one outside tick landed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// A user-space function: module (file basename) and symbol.
    User { module: String, symbol: String },
    /// A kernel-module symbol: module and symbol.
    KernelModule { module: String, symbol: String },
    /// The first bytes of kernel text, shadowed by kpdata's header.
    KernelTextHead { symbol: String },
    /// Kernel code outside `[_stext, _etext)` and outside modules (init
    /// text, entry trampolines, BPF programs).
    KernelOther { symbol: String },
    /// A user address that no known mapping or symbol covers.
    Unknown { module: String },
}

/// Picks a table's rows: (module, symbol) of the places it shows.
type Select = fn(&Place) -> Option<(&str, &str)>;

/// Aggregated outside ticks.
#[derive(Clone, Debug, Default)]
pub struct Outside {
    total: u64,
    by_process: BTreeMap<(String, u32), u64>,
    by_place: BTreeMap<Place, u64>,
}

impl Outside {
    /// Nothing counted yet.
    pub fn new() -> Self {
        Outside::default()
    }

    /// Count `ticks` ticks of process `comm`/`pid` at `place`.
    pub fn add(&mut self, comm: &str, pid: u32, place: Place, ticks: u64) {
        self.total += ticks;
        *self.by_process.entry((comm.to_string(), pid)).or_default() += ticks;
        *self.by_place.entry(place).or_default() += ticks;
    }

    /// Ticks counted.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Render the three tables, at most `limit` rows each, with
    /// percentages of the outside total (truncated to tenths, as kprof).
    pub fn render(&self, limit: usize) -> String {
        self.render_with(limit, false)
    }

    /// [`render`](Self::render), and with `ci` each row's 95% Wilson
    /// interval of its share (`crate::samples::wilson`) after the
    /// percentage, and `=` after the interval of a row whose interval
    /// overlaps the row before or after it in its table (their order is
    /// not established by this many ticks).
    pub fn render_with(&self, limit: usize, ci: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "outside kernel text: {} ticks: {OUTSIDE_MEANS}",
            self.total
        );
        if self.total == 0 {
            return out;
        }
        if ci {
            out.push_str(
                "95% Wilson intervals of each share, ticks treated as independent draws \
                 (periodic sampling only approximates this); '=': overlaps a neighbour\n",
            );
        }
        let pct = |n: u64| {
            let t = 1000 * n / self.total;
            format!("{:3}.{}", t / 10, t % 10)
        };
        let total = self.total;
        // The interval column of row `i` of `counts` (in table order).
        let interval = |counts: &[u64], i: usize| -> String {
            if !ci {
                return String::new();
            }
            let w = |n: u64| crate::samples::wilson(n, total);
            let (lo, hi) = w(counts[i]);
            let overlaps = |j: usize| {
                let (a, b) = w(counts[j]);
                lo <= b && a <= hi
            };
            let tie = (i > 0 && overlaps(i - 1)) || (i + 1 < counts.len() && overlaps(i + 1));
            format!(
                "\t[{:.1}, {:.1}]{}",
                100.0 * lo,
                100.0 * hi,
                if tie { " =" } else { "" }
            )
        };
        let ci_head = if ci { "\t95% CI" } else { "" };
        let mut procs: Vec<_> = self.by_process.iter().collect();
        procs.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let _ = write!(out, "\nby process\nticks\t  %{ci_head}\tpid\tcomm\n");
        let counts: Vec<u64> = procs.iter().map(|p| *p.1).collect();
        for (i, ((comm, pid), n)) in procs.iter().take(limit).enumerate() {
            let _ = writeln!(
                out,
                "{n}\t{}{}\t{pid}\t{comm}",
                pct(**n),
                interval(&counts, i)
            );
        }
        let sections: [(&str, Select); 3] = [
            (
                "by user-space function\nticks\t  %\tmodule\tsymbol",
                |p| match p {
                    Place::User { module, symbol } => Some((module, symbol)),
                    Place::Unknown { module } => Some((module, "?")),
                    _ => None,
                },
            ),
            (
                "by kernel-module symbol\nticks\t  %\tmodule\tsymbol",
                |p| match p {
                    Place::KernelModule { module, symbol } => Some((module, symbol)),
                    _ => None,
                },
            ),
            (
                "other kernel code\nticks\t  %\twhere\tsymbol",
                |p| match p {
                    Place::KernelTextHead { symbol } => Some(("text-head", symbol)),
                    Place::KernelOther { symbol } => Some(("kernel", symbol)),
                    _ => None,
                },
            ),
        ];
        for (title, select) in sections {
            let mut rows: Vec<_> = self
                .by_place
                .iter()
                .filter_map(|(p, n)| select(p).map(|(m, s)| (m, s, *n)))
                .collect();
            if rows.is_empty() {
                continue;
            }
            rows.sort_by(|a, b| b.2.cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
            let title = if ci {
                title.replacen("\t  %", "\t  %\t95% CI", 1)
            } else {
                title.to_string()
            };
            let _ = writeln!(out, "\n{title}");
            let counts: Vec<u64> = rows.iter().map(|r| r.2).collect();
            for (i, (m, s, n)) in rows.iter().take(limit).enumerate() {
                let _ = writeln!(out, "{n}\t{}{}\t{m}\t{s}", pct(*n), interval(&counts, i));
            }
            if rows.len() > limit {
                let rest: u64 = rows[limit..].iter().map(|r| r.2).sum();
                let _ = writeln!(
                    out,
                    "{rest}\t{}\t…\t({} more)",
                    pct(rest),
                    rows.len() - limit
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_and_ties() {
        let mut o = Outside::new();
        let user = |s: &str| Place::User {
            module: "m".into(),
            symbol: s.into(),
        };
        o.add("a", 1, user("f"), 60);
        o.add("b", 2, user("g"), 38);
        o.add("b", 2, user("h"), 2);
        let plain = o.render(10);
        assert!(!plain.contains("CI"), "{plain}");
        let t = o.render_with(10, true);
        assert!(t.contains("ticks\t  %\t95% CI\tpid\tcomm\n"), "{t}");
        // 60 of 100: [50.2, 69.1].
        assert!(t.contains("60\t 60.0\t[50.2, 69.1]\t1\ta\n"), "{t}");
        assert!(t.contains("38\t 38.0\t[29.1, 47.8]\tm\tg\n"), "{t}");
        assert!(!t.contains(" ="), "{t}");
        let mut close = Outside::new();
        close.add("a", 1, user("f"), 51);
        close.add("b", 2, user("g"), 49);
        let t = close.render_with(10, true);
        // Both tables' two rows overlap.
        assert_eq!(t.matches(" =").count(), 4, "{t}");
    }

    #[test]
    fn renders_sorted_tables() {
        let mut o = Outside::new();
        let user = |s: &str| Place::User {
            module: "dd".into(),
            symbol: s.into(),
        };
        o.add("dd", 42, user("main"), 3);
        o.add("sh", 7, user("main"), 1);
        o.add(
            "dd",
            42,
            Place::KernelModule {
                module: "kvm".into(),
                symbol: "vmx_run".into(),
            },
            1,
        );
        let text = o.render(10);
        assert_eq!(
            text,
            format!(
                "outside kernel text: 5 ticks: {OUTSIDE_MEANS}\n\
             \nby process\nticks\t  %\tpid\tcomm\n4\t 80.0\t42\tdd\n1\t 20.0\t7\tsh\n\
             \nby user-space function\nticks\t  %\tmodule\tsymbol\n4\t 80.0\tdd\tmain\n\
             \nby kernel-module symbol\nticks\t  %\tmodule\tsymbol\n1\t 20.0\tkvm\tvmx_run\n"
            )
        );
    }
}
