//! The data and the running of `profdev top`: a decaying window of
//! functions by process, the sampling thread that feeds it and the names
//! of its rows. No terminal, no clock of its own: the command opens the
//! session, hands its source to [`Live`], and draws or prints the
//! [`Snapshot`]s it takes, in [`text`]'s words.
//!
//! Top's aggregation lives here rather than in a crate of its own (or in
//! `profdev-record`) because it counts into the device layer's
//! [`Health`](crate::health::Health), the counts the `stat/` files serve,
//! and reads samples only through core's `SampleSource`: it needs nothing
//! of `sample`.
//!
//! * A [`Frame`] is a place as the sampler saw it: a kernel pc, or a user
//!   address already placed in its object (the mapping's
//!   [`Object`](profdev_symbolize::Object) and the file offset), so the
//!   sampling thread does no symbol work and the object outlives the
//!   process.
//! * [`Symbolizer`] (symbolize's, the one `record` names with too) names
//!   frames, caching by kernel pc and by (object id, file offset), and
//!   interns each (module, function) once as a [`FuncId`].
//! * [`Live`] (`live.rs`): the sampling thread (rings, tasks, unwinding,
//!   placing) and the display side that names what it sends into the
//!   window and keeps the health counts.
//! * [`Window`] counts, per (process, function), the samples whose leaf is
//!   that function (*self*) and those whose stack holds it (*total*, once
//!   per sample however deep the recursion). [`Window::decay`] scales every
//!   weight, as perf top does at each refresh, so old samples fade.
//! * [`Window::snapshot`] is a plain value: rows sorted by self or total
//!   share, within a zoom (one process, one module).
//!
//! ```
//! use profdev_dev::top::{Sort, View, Window, FuncId};
//!
//! let mut w = Window::new();
//! let (f, g) = (FuncId(0), FuncId(1));
//! w.add(7, "spin", &[f, g], 1.0);
//! w.add(7, "spin", &[g], 1.0);
//! let s = w.snapshot(&View { sort: Sort::Total, zoom: None }, |id| {
//!     (if id == f { "f" } else { "g" }.into(), "a.out".into())
//! });
//! assert_eq!(s.rows[0].function, "g");
//! assert_eq!((s.rows[0].self_share, s.rows[0].total_share), (0.5, 1.0));
//! ```

mod live;
pub mod text;

pub use live::{check_process, session, wall_session, Live, Wake, DECAY, STACK_BYTES};
pub use profdev_symbolize::symbolizer::{Frame, Func, FuncId, Symbolizer, UNKNOWN};
use std::collections::HashMap;
use std::sync::Arc;

/// What the rows are ordered by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sort {
    /// Samples whose leaf is the function.
    SelfShare,
    /// Samples whose stack holds the function.
    Total,
}

/// Which rows a snapshot holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Zoom {
    /// One process.
    Process(u32),
    /// One module (`[kernel]`, `libc.so.6`...).
    Module(String),
}

/// How to take a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The order.
    pub sort: Sort,
    /// The rows kept, all when `None`.
    pub zoom: Option<Zoom>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Weights {
    own: f64,
    total: f64,
}

/// Weights below this (in samples) are forgotten after a decay.
const PRUNE: f64 = 0.01;

/// The decaying counts, per (process, function).
#[derive(Debug, Default)]
pub struct Window {
    rows: HashMap<(u32, FuncId), Weights>,
    comms: HashMap<u32, Arc<str>>,
    seen: Vec<FuncId>,
}

/// One row of a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The process.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// The function's module.
    pub module: String,
    /// The function.
    pub function: String,
    /// Share of the view's samples whose leaf is the function, 0 to 1.
    pub self_share: f64,
    /// Share of the view's samples whose stack holds the function.
    pub total_share: f64,
}

/// A snapshot: the rows of a view, sorted, and the weight they share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Rows, largest first.
    pub rows: Vec<Row>,
    /// The (decayed) samples in the view.
    pub weight: f64,
}

impl Window {
    /// An empty window.
    pub fn new() -> Self {
        Window::default()
    }

    /// Count `weight` (a sample: 1; time off the CPU: in sampling
    /// periods) for process `pid` (named `comm`) whose stack is `stack`,
    /// leaf first.
    pub fn add(&mut self, pid: u32, comm: &str, stack: &[FuncId], weight: f64) {
        let Some(&leaf) = stack.first() else {
            return;
        };
        if self.comms.get(&pid).is_none_or(|c| **c != *comm) {
            self.comms.insert(pid, Arc::from(comm));
        }
        self.rows.entry((pid, leaf)).or_default().own += weight;
        self.seen.clear();
        for &f in stack {
            if !self.seen.contains(&f) {
                self.seen.push(f);
                self.rows.entry((pid, f)).or_default().total += weight;
            }
        }
    }

    /// Scale every weight by `factor` (0 to 1) and forget what fell below
    /// a hundredth of a sample.
    pub fn decay(&mut self, factor: f64) {
        self.rows.retain(|_, w| {
            w.own *= factor;
            w.total *= factor;
            w.total >= PRUNE
        });
        let comms = &mut self.comms;
        let live: std::collections::HashSet<u32> = self.rows.keys().map(|k| k.0).collect();
        comms.retain(|pid, _| live.contains(pid));
    }

    /// Empty the window.
    pub fn clear(&mut self) {
        self.rows.clear();
        self.comms.clear();
    }

    /// The rows of `view`, sorted; `names` gives each function's (name,
    /// module). Shares are of the samples in the view (a zoom's shares add
    /// up to 1 on their own).
    pub fn snapshot(
        &self,
        view: &View,
        mut names: impl FnMut(FuncId) -> (String, String),
    ) -> Snapshot {
        let mut named: HashMap<FuncId, (String, String)> = HashMap::new();
        let mut kept = Vec::new();
        for (&(pid, f), w) in &self.rows {
            let (name, module) = named.entry(f).or_insert_with(|| names(f)).clone();
            let keep = match &view.zoom {
                None => true,
                Some(Zoom::Process(p)) => *p == pid,
                Some(Zoom::Module(m)) => *m == module,
            };
            if keep {
                kept.push((pid, name, module, *w));
            }
        }
        // Every sample has exactly one leaf: the self weights add up to
        // the samples in the view.
        let weight: f64 = kept.iter().map(|k| k.3.own).sum();
        let share = |x: f64| if weight > 0.0 { x / weight } else { 0.0 };
        let mut rows: Vec<Row> = kept
            .into_iter()
            .map(|(pid, function, module, w)| Row {
                pid,
                comm: self
                    .comms
                    .get(&pid)
                    .map_or_else(String::new, |c| c.to_string()),
                module,
                function,
                self_share: share(w.own),
                total_share: share(w.total),
            })
            .collect();
        let key = |r: &Row| match view.sort {
            Sort::SelfShare => (r.self_share, r.total_share),
            Sort::Total => (r.total_share, r.self_share),
        };
        rows.sort_by(|a, b| {
            key(b)
                .partial_cmp(&key(a))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.function.cmp(&b.function))
                .then_with(|| a.pid.cmp(&b.pid))
        });
        Snapshot { rows, weight }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(id: FuncId) -> (String, String) {
        let module = if id.0 >= 10 { "libc.so.6" } else { "a.out" };
        (format!("f{}", id.0), module.into())
    }

    fn all(sort: Sort) -> View {
        View { sort, zoom: None }
    }

    #[test]
    fn self_and_total_shares() {
        let mut w = Window::new();
        let (leaf, mid, root) = (FuncId(1), FuncId(2), FuncId(3));
        for _ in 0..3 {
            w.add(10, "spin", &[leaf, mid, root], 1.0);
        }
        w.add(10, "spin", &[mid, root], 1.0);
        // Recursion counts once in total.
        w.add(11, "other", &[root, root, root], 1.0);
        let s = w.snapshot(&all(Sort::SelfShare), names);
        assert_eq!(s.weight, 5.0);
        let first = &s.rows[0];
        assert_eq!((first.function.as_str(), first.pid), ("f1", 10));
        assert_eq!((first.self_share, first.total_share), (0.6, 0.6));
        let s = w.snapshot(&all(Sort::Total), names);
        let order: Vec<(&str, u32, f64)> = s
            .rows
            .iter()
            .map(|r| (r.function.as_str(), r.pid, r.total_share))
            .collect();
        assert_eq!(
            order,
            vec![
                ("f2", 10, 0.8),
                ("f3", 10, 0.8),
                ("f1", 10, 0.6),
                ("f3", 11, 0.2)
            ]
        );
        // f2 and f3 of pid 10 tie on total: self breaks the tie (f2: 0.2).
        assert_eq!(s.rows[0].self_share, 0.2);
        assert_eq!(s.rows[1].self_share, 0.0);
        assert_eq!(s.rows[3].comm, "other");
    }

    #[test]
    fn decay_fades_old_samples_and_forgets_them() {
        let mut w = Window::new();
        let (old, new) = (FuncId(1), FuncId(2));
        for _ in 0..8 {
            w.add(1, "a", &[old], 1.0);
        }
        w.decay(0.5);
        for _ in 0..6 {
            w.add(1, "a", &[new], 1.0);
        }
        let s = w.snapshot(&all(Sort::SelfShare), names);
        assert_eq!(s.weight, 10.0);
        assert_eq!(s.rows[0].function, "f2");
        assert_eq!(s.rows[0].self_share, 0.6);
        assert_eq!(s.rows[1].self_share, 0.4);
        // Decayed far enough, a row goes, and its process's name with it.
        w.add(2, "gone", &[old], 1.0);
        for _ in 0..10 {
            w.decay(0.5);
        }
        assert!(w.snapshot(&all(Sort::SelfShare), names).rows.is_empty());
        assert!(w.comms.is_empty());
    }

    #[test]
    fn zoom_keeps_one_process_or_module_and_renormalizes() {
        let mut w = Window::new();
        w.add(1, "a", &[FuncId(1)], 1.0);
        w.add(1, "a", &[FuncId(10)], 1.0);
        w.add(1, "a", &[FuncId(10)], 1.0);
        w.add(2, "b", &[FuncId(10)], 1.0);
        let s = w.snapshot(
            &View {
                sort: Sort::SelfShare,
                zoom: Some(Zoom::Process(2)),
            },
            names,
        );
        assert_eq!(s.rows.len(), 1);
        assert_eq!((s.rows[0].comm.as_str(), s.rows[0].self_share), ("b", 1.0));
        let s = w.snapshot(
            &View {
                sort: Sort::SelfShare,
                zoom: Some(Zoom::Module("libc.so.6".into())),
            },
            names,
        );
        assert_eq!(s.weight, 3.0);
        let rows: Vec<(u32, String)> = s.rows.iter().map(|r| (r.pid, r.module.clone())).collect();
        assert_eq!(rows, vec![(1, "libc.so.6".into()), (2, "libc.so.6".into())]);
        w.clear();
        assert_eq!(w.snapshot(&all(Sort::Total), names), Snapshot::default());
    }
}
