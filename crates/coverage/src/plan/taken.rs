//! Pass 12, counting mode only: blocks entered only by the taken edge of
//! one conditional jump, whose count derives from it and which therefore
//! count nothing themselves ([`Plan::taken_from`](super::Plan)).
//!
//! **The rule.** Block T is derived from block P when P ends in a
//! conditional jump to T that its trampoline copies (so the jump's
//! fall-throughs are counted: [`PlannedBlock::branch`]), P holds nothing
//! before that jump that may not go on (no call: calls end blocks; no
//! `syscall`, `int` or `hlt`), P counts itself, and that jump is T's only
//! way in. Then T ran exactly as often as P ran less the times P's jump
//! fell through: `count(T) = count(P) - fall(P)`. T keeps its trampoline
//! (a loop stays in trampolines), without the count: one increment fewer
//! each time the edge is taken. The commonest case is the body of a
//! loop laid out after its test (`jmp test; body: ...; test: cmp; jl
//! body`): one count per iteration instead of two.
//!
//! **Why it is exact.** The same two facts as hit mode's chains
//! (`hits.rs`): once entered, P reaches its jump; and nothing else enters
//! T: no other jump, call or fall-through of the module leads there, it
//! is no function or section start, no jump table's target, no code
//! address stored in data, and its function has no indirect jump whose
//! targets are unknown. A module with C++ exception tables is left alone
//! (landing pads are entered by the unwinder, from no jump). A derived
//! block is never the P of another (no chain of derivations to follow).
//!
//! **The limits**, shared with every block count: a fault or an
//! asynchronous signal whose handler does not return, inside P before its
//! jump, leaves P counted as run and neither edge taken, so T is counted
//! once too often (P's own instructions after that point already are).
//! Attached (`startcp`, `cprof -p`), a thread stopped inside P's original
//! code at the attach goes on to T without P having been counted: T is
//! one short per such thread (as a block derived from a fall-through
//! already is).

use rustc_hash::FxHashMap as HashMap;

use super::hits::{direct_target, insn_at, plain_before, ways, Facts};
use super::{How, PlannedBlock};
use iced_x86::FlowControl;

/// The blocks derived from a taken edge, as (T, P) block indices, sorted
/// by T. Empty where blocks may not be derived at all (`f.prune` false).
pub(super) fn taken_from(blocks: &[PlannedBlock], f: &Facts) -> Vec<(u32, u32)> {
    if !f.prune {
        return Vec::new();
    }
    let ways = ways(blocks, f.code);
    let by_start: HashMap<u64, usize> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| (b.start, i))
        .collect();
    let counts_itself = |b: &PlannedBlock| match b.how {
        How::Jmp { from, .. } => from == b.start,
        How::Int3 { .. } | How::Hop { .. } => true,
        _ => false,
    };
    let mut out: Vec<(u32, u32)> = Vec::new();
    for (p, pb) in blocks.iter().enumerate() {
        if pb.branch.is_none() || !counts_itself(pb) || f.scope.unresolved_at(pb.start) {
            continue;
        }
        let Some(last) = pb.insns.last().and_then(|&a| insn_at(f.code, a)) else {
            continue;
        };
        if last.flow_control() != FlowControl::ConditionalBranch || !plain_before(pb, f.code) {
            continue;
        }
        let Some(target) = direct_target(last) else {
            continue;
        };
        let Some(&t) = by_start.get(&target) else {
            continue;
        };
        let tb = &blocks[t];
        let alone = t != p
            && ways.get(&target) == Some(&1)
            && !f.entered.contains(&target)
            && !f.scope.unresolved_at(target);
        if alone && counts_itself(tb) {
            out.push((t as u32, p as u32));
        }
    }
    // No derivation from a derived block.
    let derived: std::collections::HashSet<u32> = out.iter().map(|&(t, _)| t).collect();
    out.retain(|&(_, p)| !derived.contains(&p));
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use crate::plan::testing::asm;
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
    fn a_loop_body_entered_only_by_the_back_edge_counts_nothing() {
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
        assert_eq!(p.taken_from, [(body as u32, test as u32)], "{:?}", p.blocks);
        // The test ran 11 times and fell through once: the body ran 10.
        let j = p.blocks[test].branch.expect("a counted branch") as usize;
        let mut c = vec![0u64; p.counters() as usize];
        c[test] = 11;
        c[p.blocks.len() + j] = 1;
        c[body] = 999; // never written: derived blocks count nothing
        assert_eq!(p.count(body, &c), 10);
        assert_eq!(p.counted_by(body), [test]);
        // Without pruning (a module with C++ exception tables), none.
        let q = Plan::new(vec![(0x1000, the_loop())], &[0x1000], &[], &[]);
        assert!(q.taken_from.is_empty());
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
        assert!(p.taken_from.is_empty(), "{:?}", p.taken_from);
        // And in hit mode the rule is not used at all.
        let h = Plan::new_in(Mode::Hits, vec![(0x1000, the_loop())], &[0x1000], &[], &[]);
        assert!(h.taken_from.is_empty());
        assert!(h
            .blocks
            .iter()
            .all(|b| b.how != How::None || b.insns.is_empty()));
    }
}
