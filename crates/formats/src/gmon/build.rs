//! The one histogram-and-arc builder: what the profiling clock and
//! `mcount` fill, made from sampled stacks. kgmon (the kernel, in
//! `profdev_dev::kgmon`) and `profdev gmon` (a program) both use it; only
//! how they turn a sample into frames and a callee into its function entry
//! differs.
//!
//! * The **histogram** has one u16 cell per [`CELL_BYTES`] of text over
//!   `[lowpc, highpc)` rounded out to cells, as NetBSD's `kmstartup` and
//!   glibc's `monstartup` size it (HISTFRACTION 2). A full cell stays at
//!   65535 and counts the tick as saturated; a pc outside the text counts
//!   as outside.
//! * **Arcs**: each adjacent pair of frames (callee, caller) is one arc,
//!   `frompc` the call site, `selfpc` the entry of the function holding the
//!   callee, counted once per sample whose stack held it. Where arcs go is
//!   an [`ArcSink`]: NetBSD's bounded froms/tos table
//!   ([`mcount::ArcTable`], kgmon) or an unbounded map ([`ArcCounts`]).
//!
//! Frames are **lookup addresses**, innermost first: the sampled pc, then
//! for each caller its return address minus one (inside the call
//! instruction, so the call site stays in the caller even when the call
//! ends a function). A frame the caller cannot place (another object, no
//! mapping) is `None`: no cell, and no arc through it.
//!
//! Pure and allocation-free per sample: frames come as an iterator.
//!
//! ```
//! use profdev_formats::gmon::build::{ArcCounts, CallGraph};
//! use profdev_formats::gmon::Arc;
//!
//! let mut g = CallGraph::new(0x1000, 0x1100, ArcCounts::default());
//! // Sampled at 0x1042 in the function at 0x1040, called from 0x1013
//! // (return address 0x1014) in the function at 0x1000.
//! let entry = |pc: u64| Some(pc & !0x3f);
//! g.sample([Some(0x1042), Some(0x1013)], entry).unwrap();
//! assert_eq!(g.bins()[0x40 / 4], 1);
//! let out = g.gmon_out(100);
//! assert_eq!(out.arcs, vec![Arc { from_pc: 0x1013, self_pc: 0x1040, count: 1 }]);
//! ```

use super::mcount::{ArcTable, Recorded};
use super::{Arc, GmonOut, Histogram};
use std::collections::BTreeMap;

/// Text bytes per histogram cell: `HISTFRACTION` (2) u16 cells, as the
/// kernel's `kmstartup` and glibc's `monstartup` both size them.
pub const CELL_BYTES: u64 = 4;

/// `[start, end)` rounded out to cells: `(lowpc, highpc)`.
///
/// ```
/// assert_eq!(profdev_formats::gmon::build::text_bounds(0x1001, 0x1402), (0x1000, 0x1404));
/// ```
pub fn text_bounds(start: u64, end: u64) -> (u64, u64) {
    (
        start & !(CELL_BYTES - 1),
        end.div_ceil(CELL_BYTES).saturating_mul(CELL_BYTES),
    )
}

/// Where a call graph's arcs are counted.
pub trait ArcSink {
    /// Count one traversal of the arc from call site `frompc` into the
    /// function entered at `selfpc`.
    fn count(&mut self, frompc: u64, selfpc: u64) -> Recorded;
    /// The arcs, in the sink's order.
    fn arcs(&self) -> Vec<Arc>;
    /// Distinct arcs held.
    fn len(&self) -> u64;
    /// No arc held.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ArcSink for ArcTable {
    fn count(&mut self, frompc: u64, selfpc: u64) -> Recorded {
        self.record(frompc, selfpc)
    }
    fn arcs(&self) -> Vec<Arc> {
        ArcTable::arcs(self)
    }
    fn len(&self) -> u64 {
        self.used()
    }
}

/// Arcs in a map, without bound, listed by call site then callee.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArcCounts(BTreeMap<(u64, u64), u64>);

impl ArcSink for ArcCounts {
    fn count(&mut self, frompc: u64, selfpc: u64) -> Recorded {
        *self.0.entry((frompc, selfpc)).or_default() += 1;
        Recorded::Counted
    }
    fn arcs(&self) -> Vec<Arc> {
        self.0
            .iter()
            .map(|(&(from_pc, self_pc), &count)| Arc {
                from_pc,
                self_pc,
                count,
            })
            .collect()
    }
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

/// What a [`CallGraph`] counted besides its cells and arcs, so nothing is
/// lost silently.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Ticks in the text (saturated ones included).
    pub ticks: u64,
    /// Ticks outside the text.
    pub outside: u64,
    /// Ticks lost to cells stuck at 65535.
    pub saturated: u64,
    /// Arcs whose call site the sink refused as outside its text.
    pub arcs_outside: u64,
    /// Arcs refused because the sink was full.
    pub overflow: u64,
}

/// The arc sink is full: the arc was not counted, nor the rest of the
/// sample's stack (kgmon enters its `error` state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow;

/// A histogram over one text and the arcs among its functions.
#[derive(Clone, Debug)]
pub struct CallGraph<A> {
    lowpc: u64,
    highpc: u64,
    bins: Vec<u16>,
    arcs: A,
    counts: Counts,
}

impl<A: ArcSink> CallGraph<A> {
    /// An empty graph over `[start, end)` (rounded out to cells, see
    /// [`text_bounds`]), its arcs going to `arcs`.
    ///
    /// The cells are allocated here, 2 bytes per 4 bytes of text: the
    /// caller gives text that is present (the kernel's, from kallsyms; an
    /// executable's `.text` once checked to lie within its file and a
    /// loadable segment, as `profdev gmon` does), never a size an input
    /// merely claims.
    pub fn new(start: u64, end: u64, arcs: A) -> Self {
        let (lowpc, highpc) = text_bounds(start, end);
        CallGraph {
            lowpc,
            highpc,
            bins: vec![0; ((highpc - lowpc.min(highpc)) / CELL_BYTES) as usize],
            arcs,
            counts: Counts::default(),
        }
    }

    /// `lowpc`.
    pub fn lowpc(&self) -> u64 {
        self.lowpc
    }

    /// `highpc`.
    pub fn highpc(&self) -> u64 {
        self.highpc
    }

    /// The cells.
    pub fn bins(&self) -> &[u16] {
        &self.bins
    }

    /// The arc sink.
    pub fn arcs(&self) -> &A {
        &self.arcs
    }

    /// The counters.
    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// One tick of the profiling clock at `pc`: its cell, or `outside`.
    /// Returns true if `pc` is in the text.
    pub fn tick(&mut self, pc: u64) -> bool {
        let off = pc.wrapping_sub(self.lowpc);
        match self.bins.get_mut((off / CELL_BYTES) as usize) {
            Some(cell) if pc >= self.lowpc => {
                match cell.checked_add(1) {
                    Some(n) => *cell = n,
                    None => self.counts.saturated += 1,
                }
                self.counts.ticks += 1;
                true
            }
            _ => {
                self.counts.outside += 1;
                false
            }
        }
    }

    /// One sampled stack: `frames` are lookup addresses, innermost first
    /// (`None`: a frame outside what this graph describes). The first
    /// frame, if known, is [ticked](Self::tick); each adjacent pair of
    /// known frames (callee, call site) is an arc into `entry(callee)`, the
    /// function holding the callee; `entry` returns `None` for a callee it
    /// will not name (and counts why, if it cares).
    pub fn sample<I, F>(&mut self, frames: I, mut entry: F) -> Result<(), Overflow>
    where
        I: IntoIterator<Item = Option<u64>>,
        F: FnMut(u64) -> Option<u64>,
    {
        let mut frames = frames.into_iter();
        let Some(mut callee) = frames.next() else {
            return Ok(());
        };
        if let Some(pc) = callee {
            self.tick(pc);
        }
        for site in frames {
            if let (Some(callee), Some(site)) = (callee, site) {
                if let Some(selfpc) = entry(callee) {
                    match self.arcs.count(site, selfpc) {
                        Recorded::Counted => {}
                        Recorded::OutsideText => self.counts.arcs_outside += 1,
                        Recorded::Overflow => {
                            self.counts.overflow += 1;
                            return Err(Overflow);
                        }
                    }
                }
            }
            callee = site;
        }
        Ok(())
    }

    /// The profile as a [`GmonOut`]: one histogram at `hz` (a copy of the
    /// cells) and the sink's arcs.
    pub fn gmon_out(&self, hz: u32) -> GmonOut {
        let mut hist = Histogram::new(self.lowpc, self.highpc, 0, hz);
        hist.bins = self.bins.clone();
        GmonOut {
            histograms: vec![hist],
            arcs: self.arcs.arcs(),
            bb_counts: Vec::new(),
        }
    }

    /// Call `f` with the profile as [`gmon_out`](Self::gmon_out) makes
    /// it, the cells lent rather than copied (a kernel's are megabytes).
    pub fn with_gmon_out<R>(&mut self, hz: u32, f: impl FnOnce(&GmonOut) -> R) -> R {
        let mut hist = Histogram::new(self.lowpc, self.highpc, 0, hz);
        hist.bins = std::mem::take(&mut self.bins);
        let mut profile = GmonOut {
            histograms: vec![hist],
            arcs: self.arcs.arcs(),
            bb_counts: Vec::new(),
        };
        let r = f(&profile);
        self.bins = std::mem::take(&mut profile.histograms[0].bins);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LO: u64 = 0x40_1000;

    /// Functions every 0x100 bytes.
    fn entry(pc: u64) -> Option<u64> {
        (pc >= LO).then_some(pc & !0xff)
    }

    #[test]
    fn geometry_rounds_out_to_cells() {
        let g = CallGraph::new(LO + 1, LO + 0x402, ArcCounts::default());
        assert_eq!((g.lowpc(), g.highpc()), (LO, LO + 0x404));
        assert_eq!(g.bins().len(), 0x101);
        // An empty or inverted text has no cells.
        assert!(CallGraph::new(LO, LO, ArcCounts::default())
            .bins()
            .is_empty());
        assert!(CallGraph::new(LO + 8, LO, ArcCounts::default())
            .bins()
            .is_empty());
    }

    #[test]
    fn ticks_saturate_and_outside_is_counted() {
        let mut g = CallGraph::new(LO, LO + 0x100, ArcCounts::default());
        for _ in 0..65_537 {
            g.tick(LO + 0x11);
        }
        assert!(!g.tick(LO + 0x100));
        assert!(!g.tick(LO - 1));
        assert!(g.tick(LO + 0xff));
        assert_eq!(g.bins()[4], u16::MAX);
        assert_eq!(g.bins()[0x3f], 1);
        let c = g.counts();
        assert_eq!((c.ticks, c.saturated, c.outside), (65_538, 2, 2));
    }

    #[test]
    fn arcs_from_adjacent_known_frames() {
        let mut g = CallGraph::new(LO, LO + 0x400, ArcCounts::default());
        // f2 <- f1 <- (unknown) <- f0: the unknown frame breaks two arcs.
        let stack = [Some(LO + 0x210), Some(LO + 0x114), None, Some(LO + 0x020)];
        g.sample(stack, entry).unwrap();
        g.sample(stack, entry).unwrap();
        // An unknown innermost frame: no tick, arcs above it still count.
        g.sample([None, Some(LO + 0x114), Some(LO + 0x20)], entry)
            .unwrap();
        let out = g.gmon_out(1000);
        assert_eq!(
            out.arcs,
            vec![
                Arc {
                    from_pc: LO + 0x20,
                    self_pc: LO + 0x100,
                    count: 1
                },
                Arc {
                    from_pc: LO + 0x114,
                    self_pc: LO + 0x200,
                    count: 2
                },
            ]
        );
        assert_eq!(out.histograms[0].bins[0x210 / 4], 2);
        assert_eq!(g.counts().ticks, 2);
        assert_eq!(g.arcs().len(), 2);
    }

    #[test]
    fn callees_without_entry_make_no_arc() {
        let mut g = CallGraph::new(LO, LO + 0x400, ArcCounts::default());
        let mut refused = 0;
        g.sample([Some(LO + 0x10), Some(LO + 0x120)], |pc| {
            refused += 1;
            let _ = pc;
            None
        })
        .unwrap();
        assert_eq!(refused, 1);
        assert!(g.arcs().is_empty());
        // A lone frame is a tick and no arc; no frame is nothing.
        g.sample([Some(LO)], entry).unwrap();
        g.sample(std::iter::empty(), entry).unwrap();
        assert_eq!(g.counts().ticks, 2);
    }

    #[test]
    fn the_mcount_table_overflows_and_refuses_outside_sites() {
        // A tiny table: tolimit 3 holds two arcs.
        let table = ArcTable::with_limit(LO, 0x400, 3);
        let mut g = CallGraph::new(LO, LO + 0x400, table);
        g.sample([Some(LO + 0x200), Some(LO + 0x10)], entry)
            .unwrap();
        g.sample([Some(LO + 0x200), Some(LO + 0x500)], entry)
            .unwrap();
        assert_eq!(g.counts().arcs_outside, 1);
        g.sample([Some(LO + 0x200), Some(LO + 0x20)], entry)
            .unwrap();
        // The third distinct arc overflows; the arc above it is not tried.
        let third = [Some(LO + 0x200), Some(LO + 0x30), Some(LO + 0x40)];
        assert_eq!(g.sample(third, entry), Err(Overflow));
        assert_eq!(g.counts().overflow, 1);
        assert_eq!(g.arcs().len(), 2);
        // Lending the cells to a writer leaves them in place.
        let n = g.with_gmon_out(100, |p| p.histograms[0].bins[0x200 / 4]);
        assert_eq!(n, 4);
        assert_eq!(g.bins()[0x200 / 4], 4);
    }
}
