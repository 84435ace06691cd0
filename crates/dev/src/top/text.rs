//! `profdev top`'s words: the health line, the column heads and a row as
//! the screen and the batch snapshots print them, and a whole batch
//! snapshot.

use super::{Row, Snapshot, Sort};
use crate::health::HealthSnapshot;
use std::fmt::Write as _;

/// Rows below this share are left out of a batch snapshot.
const BATCH_MIN_SHARE: f64 = 0.001;

/// The word for an order: `self` or `total`.
pub fn sort_word(s: Sort) -> &'static str {
    match s {
        Sort::SelfShare => "self",
        Sort::Total => "total",
    }
}

/// What a title says about the run: `system-wide at 1000 Hz`, `process
/// 42 at 1000 Hz, -g`.
pub fn run_title(pid: Option<u32>, frequency: u32, callgraph: bool) -> String {
    let what = match pid {
        Some(pid) => format!("process {pid}"),
        None => "system-wide".into(),
    };
    format!(
        "{what} at {frequency} Hz{}",
        if callgraph { ", -g" } else { "" }
    )
}

/// The title of batch snapshot `n` (of `count`, if given), taken every
/// `delay` seconds of the run `run` ([`run_title`]), rows by `sort`.
pub fn batch_title(n: u64, count: Option<u64>, delay: f64, run: &str, sort: Sort) -> String {
    format!(
        "profdev top: snapshot {n}{}, every {} s, {}, by {}",
        count.map_or_else(String::new, |c| format!(" of {c}")),
        delay,
        run,
        sort_word(sort)
    )
}

/// The health line, in the words of the progress lines and `stat/` keys.
pub fn health_line(h: &HealthSnapshot) -> String {
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
pub fn heads(total: bool) -> String {
    format!(
        "  self%{}  {:<15} {:>7}  {:<20} FUNCTION",
        if total { "  total%" } else { "" },
        "COMMAND",
        "PID",
        "MODULE"
    )
}

/// One row as text.
pub fn row_text(r: &Row, total: bool) -> String {
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
pub fn batch_text(title: &str, h: &HealthSnapshot, snap: &Snapshot, total: bool) -> String {
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
    use super::super::{FuncId, View, Window};
    use super::*;
    use crate::health::Health;
    use profdev_core::SessionConfig;

    #[test]
    fn batch_text_has_the_health_line_and_the_rows_above_a_tenth_of_a_percent() {
        let mut w = Window::new();
        for _ in 0..999 {
            w.add(42, "spin", &[FuncId(1), FuncId(2)], 1.0);
        }
        w.add(7, "rare", &[FuncId(3)], 1.0);
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
        assert_eq!(
            (sort_word(Sort::SelfShare), sort_word(Sort::Total)),
            ("self", "total")
        );
        let run = run_title(None, 1000, false);
        assert_eq!(
            batch_title(1, Some(2), 1.0, &run, Sort::SelfShare),
            "profdev top: snapshot 1 of 2, every 1 s, system-wide at 1000 Hz, by self"
        );
        assert_eq!(
            batch_title(3, None, 0.5, &run_title(Some(42), 99, true), Sort::Total),
            "profdev top: snapshot 3, every 0.5 s, process 42 at 99 Hz, -g, by total"
        );
    }
}
