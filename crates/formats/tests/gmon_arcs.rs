//! Arc building on synthetic stacks (`gmon::build::CallGraph`): which
//! adjacent frames become arcs, and what a refused callee or an unplaced
//! frame does to the rest of the stack. The rules that `profdev gmon` and
//! kgmon rely on, tested at known addresses instead of where timer samples
//! happen to land.
//!
//! A made-up text [0x1000, 0x1400): `_init` at 0x1000, a PLT stub
//! `lib@plt` at 0x1030 (16 bytes), `main` at 0x1100, `mid` at 0x1200,
//! `leaf` at 0x1300. The entry function names the program's functions and
//! refuses the stub (`None`), as `profdev gmon` does.

use profdev_formats::gmon::build::{ArcCounts, ArcSink, CallGraph, Counts};
use profdev_formats::gmon::mcount::ArcTable;
use profdev_formats::gmon::Arc;
use std::cell::Cell;

const INIT: u64 = 0x1000;
const STUB: u64 = 0x1030;
const MAIN: u64 = 0x1100;
const MID: u64 = 0x1200;
const LEAF: u64 = 0x1300;

/// The function entry holding `pc`; None for the PLT stub (counted in
/// `refused`).
fn entry(refused: &Cell<u64>) -> impl FnMut(u64) -> Option<u64> + '_ {
    move |pc| match pc {
        STUB..=0x103f => {
            refused.set(refused.get() + 1);
            None
        }
        INIT..=0x102f => Some(INIT),
        MAIN..=0x11ff => Some(MAIN),
        MID..=0x12ff => Some(MID),
        LEAF..=0x13ff => Some(LEAF),
        _ => None,
    }
}

fn graph() -> CallGraph<ArcCounts> {
    CallGraph::new(0x1000, 0x1400, ArcCounts::default())
}

fn arc(from_pc: u64, self_pc: u64, count: u64) -> Arc {
    Arc {
        from_pc,
        self_pc,
        count,
    }
}

#[test]
fn a_call_through_the_plt_makes_no_arc_and_nothing_into_init() {
    let refused = Cell::new(0);
    let mut g = graph();
    // Sampled in the stub, called from main at 0x1140, main called from
    // mid (made up: the point is the rest of the stack).
    g.sample(
        [Some(STUB + 4), Some(0x1140), Some(0x1220)],
        entry(&refused),
    )
    .unwrap();
    let out = g.gmon_out(1000);
    assert_eq!(out.arcs, vec![arc(0x1220, MAIN, 1)]);
    assert!(!out
        .arcs
        .iter()
        .any(|a| a.self_pc == INIT || a.self_pc == STUB));
    assert_eq!(refused.get(), 1);
    // The stub's own cell is ticked: the histogram keeps the time.
    assert_eq!(
        out.histograms[0].bins[((STUB + 4 - 0x1000) / 4) as usize],
        1
    );
}

#[test]
fn a_sample_in_a_shared_library_makes_no_arc_from_its_caller() {
    let refused = Cell::new(0);
    let mut g = graph();
    // Innermost frame outside the executable (None): no tick, no arc into
    // main from it; the arc main -> mid above it stays.
    g.sample([None, Some(0x1150), Some(0x1240)], entry(&refused))
        .unwrap();
    assert_eq!(g.arcs().arcs(), vec![arc(0x1240, MAIN, 1)]);
    assert_eq!(
        g.counts(),
        Counts {
            ticks: 0,
            ..Counts::default()
        }
    );
    assert_eq!(refused.get(), 0);
    assert!(g.bins().iter().all(|&n| n == 0));
}

#[test]
fn an_unplaced_frame_breaks_the_chain_on_both_sides() {
    let refused = Cell::new(0);
    let mut g = graph();
    // leaf <- mid, then a frame in a library, then main's call site, then
    // mid's: arcs leaf<-mid and main<-mid only.
    g.sample(
        [Some(0x1310), Some(0x1210), None, Some(0x1160), Some(0x1250)],
        entry(&refused),
    )
    .unwrap();
    assert_eq!(
        g.arcs().arcs(),
        vec![arc(0x1210, LEAF, 1), arc(0x1250, MAIN, 1)]
    );
}

#[test]
fn each_arc_counts_once_per_sample_that_holds_it() {
    let refused = Cell::new(0);
    let mut g = graph();
    for _ in 0..3 {
        g.sample([Some(0x1320), Some(0x1210), Some(0x1130)], entry(&refused))
            .unwrap();
    }
    g.sample([Some(0x1220), Some(0x1130)], entry(&refused))
        .unwrap();
    assert_eq!(
        g.arcs().arcs(),
        vec![arc(0x1130, MID, 4), arc(0x1210, LEAF, 3)]
    );
    assert_eq!(g.counts().ticks, 4);
    // A stack of one frame: a tick, no arc.
    g.sample([Some(0x1100)], entry(&refused)).unwrap();
    assert_eq!(g.arcs().len(), 2);
    assert_eq!(g.counts().ticks, 5);
}

#[test]
fn the_bounded_table_refuses_the_same_plt_arcs() {
    // kgmon's froms/tos table, fed the same stack: the same arcs.
    let refused = Cell::new(0);
    let mut g = CallGraph::new(0x1000, 0x1400, ArcTable::with_limit(0x1000, 0x400, 64));
    g.sample([Some(STUB), Some(0x1140), Some(0x1220)], entry(&refused))
        .unwrap();
    assert_eq!(g.gmon_out(100).arcs, vec![arc(0x1220, MAIN, 1)]);
    assert_eq!(refused.get(), 1);
}
