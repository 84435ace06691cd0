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
        let mut out = String::new();
        let _ = writeln!(out, "outside kernel text: {} ticks", self.total);
        if self.total == 0 {
            return out;
        }
        let pct = |n: u64| {
            let t = 1000 * n / self.total;
            format!("{:3}.{}", t / 10, t % 10)
        };
        let mut procs: Vec<_> = self.by_process.iter().collect();
        procs.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        out.push_str("\nby process\nticks\t  %\tpid\tcomm\n");
        for ((comm, pid), n) in procs.iter().take(limit) {
            let _ = writeln!(out, "{n}\t{}\t{pid}\t{comm}", pct(**n));
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
            let _ = writeln!(out, "\n{title}");
            for (m, s, n) in rows.iter().take(limit) {
                let _ = writeln!(out, "{n}\t{}\t{m}\t{s}", pct(*n));
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
            "outside kernel text: 5 ticks\n\
             \nby process\nticks\t  %\tpid\tcomm\n4\t 80.0\t42\tdd\n1\t 20.0\t7\tsh\n\
             \nby user-space function\nticks\t  %\tmodule\tsymbol\n4\t 80.0\tdd\tmain\n\
             \nby kernel-module symbol\nticks\t  %\tmodule\tsymbol\n1\t 20.0\tkvm\tvmx_run\n"
        );
    }
}
