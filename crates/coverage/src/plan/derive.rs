//! Pass 12, counting mode only: blocks whose count derives from the
//! counted edges that lead into them, and which therefore count nothing
//! themselves ([`Plan::derived`](super::Plan)).
//!
//! **The edges known.** A block P that counts itself (its trampoline's
//! first act) and holds nothing before its last instruction that may not
//! go on (no call: calls end blocks; no `syscall`, `int` or `hlt`) leaves
//! by its last instruction, as often as it ran:
//!
//! * a conditional jump its trampoline copies (its fall-throughs are
//!   counted: [`PlannedBlock::branch`]): taken `count(P) - fall(P)` times
//!   ([`Edge::Taken`]), fallen through `fall(P)` times ([`Edge::Fell`]);
//! * a direct `jmp`, or no branch at all (it falls into the next block):
//!   `count(P)` times ([`Edge::Whole`]).
//!
//! **The rule.** Block J is derived when every way into it from the
//! module's own code (every direct branch or call to it, the fall-through
//! of the block before it) is such an edge, and nothing else enters it: it
//! is no function or section start, no jump table's target, no code
//! address stored in data, and its function has no indirect jump whose
//! targets are unknown. Then J ran exactly as often as those edges were
//! taken, their sum. J keeps its trampoline (a loop stays in trampolines),
//! without the count: one increment fewer each time it runs. A block is
//! derived only from blocks that count themselves (chosen in address
//! order: a block some derived block reads is not derived), never from
//! itself, and never when its own counter is read as a branch's
//! fall-throughs ([`Plan::fell_from`](super::Plan)). A C++ landing pad
//! is entered by the unwinder, from no jump, so it is never derived (it
//! is in `entered`); a module whose exception tables cannot all be read
//! is left alone. The commonest cases: the body of a loop laid
//! out after its test (`jmp test; body: ...; test: cmp; jl body`), and the
//! block where an `if`'s two arms meet again.
//!
//! **Why it is exact**: flow is conserved at J (what enters it is the sum
//! of its ways in, each counted), and each P, once entered, reaches its
//! last instruction. The limits, shared with every block count: a fault
//! or an asynchronous signal whose handler does not return, inside P,
//! leaves P counted as run and no edge taken, so a block derived from P
//! is counted once too often (P's own instructions after that point
//! already are). Attached (`startcp`, `cprof -p`), a thread stopped inside
//! P's original code at the attach goes on without P having been
//! counted: a block derived from P is one short per such thread (as a
//! block derived from a fall-through already is).

use std::collections::HashSet;

use rustc_hash::FxHashMap as HashMap;

use super::hits::{direct_target, insn_at, plain_before, stops, ways, Facts};
use super::{How, PlannedBlock};
use iced_x86::FlowControl;

/// How often a counted block left by one of its edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Edge {
    /// Every time it ran (a direct `jmp`, or falling into the next block).
    Whole,
    /// Its final conditional jump taken: its count less its fall-throughs.
    Taken,
    /// Its final conditional jump fallen through.
    Fell,
}

/// A block whose count is the sum of the edges into it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Derived {
    /// The block's index.
    pub block: u32,
    /// Each way in: the block it comes from, and which of its edges.
    pub from: Vec<(u32, Edge)>,
}

/// Whether block `b` counts itself at its start (in its trampoline).
fn counts_itself(b: &PlannedBlock) -> bool {
    match b.how {
        How::Jmp { from, .. } => from == b.start,
        How::Int3 { .. } | How::Hop { .. } => true,
        _ => false,
    }
}

/// The blocks derived from their ways in, sorted by block. Empty where
/// blocks may not be derived at all (`f.prune` false).
pub(super) fn derived(
    blocks: &[PlannedBlock],
    fell_from: &[Option<u32>],
    f: &Facts,
) -> Vec<Derived> {
    if !f.prune {
        return Vec::new();
    }
    let ways = ways(blocks, f.code);
    let by_start: HashMap<u64, usize> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| (b.start, i))
        .collect();
    // The known edges into each block.
    let mut into: HashMap<usize, Vec<(u32, Edge)>> = HashMap::default();
    for (p, pb) in blocks.iter().enumerate() {
        if !counts_itself(pb) || f.scope.unresolved_at(pb.start) || !plain_before(pb, f.code) {
            continue;
        }
        let Some(last) = pb.insns.last().and_then(|a| insn_at(f.code, a)) else {
            continue;
        };
        let mut edge = |to: u64, e: Edge| {
            if let Some(&t) = by_start.get(&to) {
                into.entry(t).or_default().push((p as u32, e));
            }
        };
        match last.flow_control() {
            FlowControl::ConditionalBranch if pb.branch.is_some() => {
                if let Some(t) = direct_target(last) {
                    edge(t, Edge::Taken);
                }
                edge(pb.end, Edge::Fell);
            }
            FlowControl::UnconditionalBranch => {
                if let Some(t) = direct_target(last) {
                    edge(t, Edge::Whole);
                }
            }
            FlowControl::Next if !stops(last) => edge(pb.end, Edge::Whole),
            _ => {}
        }
    }
    // A block whose counter is read as a branch's fall-throughs counts.
    let read: HashSet<u32> = fell_from.iter().flatten().copied().collect();
    let mut out = Vec::new();
    let mut derived: HashSet<u32> = HashSet::new();
    let mut sources: HashSet<u32> = HashSet::new();
    // Joins first (the most ways in), as they run as often as their ways
    // together: where an `if`'s arms meet, the meeting block rather than
    // one arm.
    let mut order: Vec<(usize, &Vec<(u32, Edge)>)> = into.iter().map(|(&t, f)| (t, f)).collect();
    order.sort_unstable_by_key(|&(t, f)| (std::cmp::Reverse(f.len()), t));
    for (t, from) in order {
        let tb = &blocks[t];
        let ti = t as u32;
        let eligible = counts_itself(tb)
            && ways.get(&tb.start).copied() == Some(from.len() as u32)
            && !f.entered.contains(&tb.start)
            && !f.scope.unresolved_at(tb.start)
            && !read.contains(&ti)
            && !sources.contains(&ti)
            && from.iter().all(|&(p, _)| p != ti && !derived.contains(&p));
        if !eligible {
            continue;
        }
        derived.insert(ti);
        sources.extend(from.iter().map(|&(p, _)| p));
        out.push(Derived {
            block: ti,
            from: from.clone(),
        });
    }
    out.sort_unstable_by_key(|d| d.block);
    out
}

#[cfg(test)]
mod tests {
    use super::{Derived, Edge};
    use crate::plan::testing::{asm, diamond};
    use crate::plan::{How, Mode, Plan};

    /// `jmp test | body: add; add; add | test: cmp; jl body | ret`: a loop
    /// laid out after its test.
    fn the_loop() -> Vec<u8> {
        asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut body = a.create_label();
            let mut test = a.create_label();
            a.xor(eax, eax).unwrap();
            a.jmp(test).unwrap();
            a.set_label(&mut body).unwrap();
            a.add(eax, ecx).unwrap();
            a.add(eax, edx).unwrap();
            a.add(eax, esi).unwrap();
            a.set_label(&mut test).unwrap();
            a.cmp(eax, edi).unwrap();
            a.add(ecx, 1).unwrap();
            a.jl(body).unwrap();
            a.ret().unwrap();
        })
    }

    #[test]
    fn a_loop_test_where_entry_and_body_meet_counts_nothing() {
        let p = Plan::new_in(
            Mode::Counts,
            vec![(0x1000, the_loop())],
            &[0x1000],
            &[],
            &[],
        );
        let starts: Vec<u64> = p.blocks.iter().map(|b| b.start).collect();
        let body = starts.iter().position(|&s| s == 0x1004).expect("the body");
        let test = starts.iter().position(|&s| s == 0x100a).expect("the test");
        // The test is where the entry's jump and the body meet: derived
        // from both (a join is preferred to the body, entered one way).
        assert_eq!(
            p.derived,
            [Derived {
                block: test as u32,
                from: vec![(0, Edge::Whole), (body as u32, Edge::Whole)],
            }],
            "{:?}",
            p.blocks
        );
        // Entered once, the body ran 10 times: the test ran 11.
        let mut c = vec![0u64; p.counters() as usize];
        c[0] = 1;
        c[body] = 10;
        c[test] = 999; // never written: derived blocks count nothing
        assert_eq!(p.count(test, &c), 11);
        assert_eq!(p.counted_by(test), [0, body]);
        // And its branch: taken 10 times, fallen through once.
        let j = p.blocks[test].branch.expect("a counted branch") as usize;
        c[p.blocks.len() + j] = 1;
        assert_eq!(p.fell(j, &c), 1);
        // Without pruning (a module whose exception tables cannot be read), none.
        let q = Plan::new(vec![(0x1000, the_loop())], &[0x1000], &[], &[]);
        assert!(q.derived.is_empty());
    }

    #[test]
    fn where_two_arms_meet_the_block_is_their_sum() {
        // p: cmp; je else | then: add; add; jmp join | else: sub; sub |
        // join: add; ret
        let bytes = diamond(false, false);
        let p = Plan::new_in(Mode::Counts, vec![(0x1000, bytes)], &[0x1000], &[], &[]);
        let at = |a: u64| p.blocks.iter().position(|b| b.start == a).unwrap();
        let (then, other, join) = (at(0x1007), at(0x100d), at(0x1011));
        let d = p.derived_of(join).expect("the join is derived");
        let mut from = d.from.clone();
        from.sort_unstable();
        assert_eq!(
            from,
            [(then as u32, Edge::Whole), (other as u32, Edge::Whole)]
        );
        assert!(p.derived_of(then).is_none() && p.derived_of(other).is_none());
        let mut c = vec![0u64; p.counters() as usize];
        c[then] = 7;
        c[other] = 5;
        c[join] = 999; // never written
        assert_eq!(p.count(join, &c), 12);
    }

    #[test]
    fn a_block_with_another_way_in_counts_itself() {
        // The body is also a function start (an address stored elsewhere).
        let p = Plan::new_in(
            Mode::Counts,
            vec![(0x1000, the_loop())],
            &[0x1000, 0x1004],
            &[],
            &[],
        );
        assert!(p
            .derived
            .iter()
            .all(|d| p.blocks[d.block as usize].start != 0x1004));
        // And in hit mode the rule is not used at all.
        let h = Plan::new_in(Mode::Hits, vec![(0x1000, the_loop())], &[0x1000], &[], &[]);
        assert!(h.derived.is_empty());
        assert!(h
            .blocks
            .iter()
            .all(|b| b.how != How::None || b.insns.is_empty()));
    }
}
