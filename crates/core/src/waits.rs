//! Threads off the CPU: the intervals a session with
//! [`SessionConfig::off_cpu`](crate::SessionConfig::off_cpu) measures,
//! from a thread's switch-out sample ([`Sample::switch_out`]) to the
//! [`Record::Switch`] that brings it back. The recorder and `top` both
//! pair them here.
//!
//! ```
//! use profdev_core::{Record, Sample, waits::Waits};
//! let mut w = Waits::new();
//! let out = Sample { pid: 7, tid: 7, time: 100, switch_out: true, ..Sample::default() };
//! assert!(w.left(&out, || "where it blocked"));
//! let back = Record::Switch { pid: 7, tid: 7, cpu: 0, out: false, preempt: false, time: 350 };
//! let wait = w.observe(&back).unwrap();
//! assert_eq!((wait.since, wait.until, wait.what), (100, 350, "where it blocked"));
//! ```

use crate::{Record, Sample};
use std::collections::{HashMap, HashSet};

/// The threads off the CPU now, each with what its holder keeps of the
/// moment it left (`T`: its stack, placed or written).
#[derive(Debug)]
pub struct Waits<T> {
    away: HashMap<u32, Away<T>>,
    /// Threads that exited: their last switch out is no wait.
    exited: HashSet<u32>,
}

#[derive(Debug)]
struct Away<T> {
    since: u64,
    preempted: bool,
    what: T,
}

/// One interval a thread spent off the CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait<T> {
    /// The thread.
    pub tid: u32,
    /// When it left, and came back (ns, the samples' clock).
    pub since: u64,
    pub until: u64,
    /// It left still runnable (preempted or yielding), not to wait.
    pub preempted: bool,
    /// What was kept when it left.
    pub what: T,
}

impl<T> Default for Waits<T> {
    fn default() -> Self {
        Waits {
            away: HashMap::new(),
            exited: HashSet::new(),
        }
    }
}

impl<T> Waits<T> {
    /// No thread away.
    pub fn new() -> Self {
        Self::default()
    }

    /// A switch-out sample: its thread is away from now, with `what` (made
    /// only when it is). False, and nothing kept, for a sample that is no
    /// switch out, the idle task's, or a thread's that exited (its last
    /// switch).
    pub fn left(&mut self, s: &Sample, what: impl FnOnce() -> T) -> bool {
        if !s.switch_out || s.is_idle() || self.exited.contains(&s.tid) {
            return false;
        }
        self.away.insert(
            s.tid,
            Away {
                since: s.time,
                preempted: false,
                what: what(),
            },
        );
        true
    }

    /// Take any other record: a switch back ends its thread's wait,
    /// which is returned; a switch out marks a preemption; an exit
    /// forgets the thread, a fork of its id lets it wait again.
    pub fn observe(&mut self, r: &Record) -> Option<Wait<T>> {
        match *r {
            Record::Switch {
                tid,
                out: true,
                preempt,
                ..
            } => {
                if let Some(a) = self.away.get_mut(&tid) {
                    a.preempted |= preempt;
                }
                None
            }
            Record::Switch {
                tid,
                out: false,
                time,
                ..
            } => self.away.remove(&tid).map(|a| Wait {
                tid,
                since: a.since,
                until: time.max(a.since),
                preempted: a.preempted,
                what: a.what,
            }),
            Record::Exit { tid, .. } => {
                self.away.remove(&tid);
                self.exited.insert(tid);
                None
            }
            Record::Fork { tid, .. } => {
                self.exited.remove(&tid);
                None
            }
            _ => None,
        }
    }

    /// Every thread still away, as if it came back at `time` (the end of
    /// a session), in the order of their ids.
    pub fn close(&mut self, time: u64) -> Vec<Wait<T>> {
        let mut out: Vec<Wait<T>> = self
            .away
            .drain()
            .map(|(tid, a)| Wait {
                tid,
                since: a.since,
                until: time.max(a.since),
                preempted: a.preempted,
                what: a.what,
            })
            .collect();
        out.sort_by_key(|w| w.tid);
        out
    }

    /// Forget the threads away (their `what` no longer holds).
    pub fn clear(&mut self) {
        self.away.clear();
    }

    /// Threads away now.
    pub fn len(&self) -> usize {
        self.away.len()
    }

    /// Whether no thread is away.
    pub fn is_empty(&self) -> bool {
        self.away.is_empty()
    }
}
