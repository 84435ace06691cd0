//! Pass 11, hit mode only ([`Mode::Hits`](super::Mode::Hits)): the
//! blocks whose having run another block's probe implies, left without
//! a probe ([`How::Implied`]), and the branch edges no derived block
//! reads, left uncounted.
//!
//! **The rule** (the simplest sound pruning over Agrawal's superblocks):
//! block B is implied by block A when A's last instruction is a direct
//! `jmp` to B, or A simply falls into B, and that is B's only way in. Then
//! B ran exactly when A did:
//!
//! * A holds no call (calls end blocks) and no instruction that does not
//!   go on (`syscall`, `int`, `ud2`, `hlt`), so once entered it reaches
//!   its jump: a callee that exits or longjmps ends a *call* block, never
//!   such an A;
//! * nothing else enters B: no other jump, call or fall-through of the
//!   module leads there, it is no function or section start, no jump
//!   table's target, no code address stored in data (computed gotos,
//!   function pointers, landing sites), and its function has no indirect
//!   jump whose targets are unknown. A module with C++ exception tables
//!   (`.gcc_except_table`) is not pruned at all: its landing pads are
//!   entered by the unwinder, from no jump.
//!
//! Chains are followed to their first block, which is probed; a cycle
//! (code no one enters) is left probed. What the encoder needs of a block
//! is kept: a block hosting another's hop slot, running its window on
//! into the next block ([`How::Covered`]), or whose branch a derived block
//! ([`How::Fell`]) reads keeps its trampoline; only blocks patched at
//! their start (a jump, a trap, a hop) are left unpatched, so their bytes
//! run in place.
//!
//! The one way the rule can err is the one a block's count already
//! shares: a fault or an asynchronous signal whose handler does not
//! return, inside A, leaves A counted as run whole, and so B.

use iced_x86::{FlowControl, Instruction, Mnemonic, OpKind};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::decode::Code;
use super::short::Scope;
use super::{ends_flow, How, PlannedBlock};

/// What the pass reads of the earlier ones.
pub(super) struct Facts<'a> {
    pub code: &'a Code,
    /// Addresses control may reach from outside the module's own
    /// instructions (function and section starts, jump tables' targets,
    /// stored code addresses).
    pub entered: &'a HashSet<u64>,
    pub scope: &'a Scope<'a>,
    /// Whether blocks may be implied at all (no exception tables).
    pub prune: bool,
}

/// Leave implied blocks without a probe, and the branches no derived
/// block reads uncounted.
pub(super) fn hits(blocks: &mut [PlannedBlock], f: &Facts) {
    if f.prune {
        let by = implied(blocks, f);
        for (i, by) in by.into_iter().enumerate() {
            if let Some(a) = by {
                blocks[i].how = How::Implied { by: a as u32 };
            }
        }
    }
    let read: HashSet<u32> = blocks
        .iter()
        .filter_map(|b| match b.how {
            How::Fell { branch } => Some(branch),
            _ => None,
        })
        .collect();
    for b in blocks.iter_mut() {
        if b.branch.is_some_and(|j| !read.contains(&j)) {
            b.branch = None;
        }
    }
}

/// The instruction at `addr`.
fn insn_at<'a>(code: &'a Code, addr: u64) -> Option<&'a Instruction> {
    let k = code
        .insns
        .binary_search_by_key(&addr, Instruction::ip)
        .ok()?;
    Some(&code.insns[k])
}

/// Whether `x` is a direct branch (or call) and where it leads.
fn direct_target(x: &Instruction) -> Option<u64> {
    let branches = matches!(
        x.flow_control(),
        FlowControl::UnconditionalBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Call
            | FlowControl::XbeginXabortXend
    );
    (branches && x.op0_kind() == OpKind::NearBranch64).then(|| x.near_branch_target())
}

/// Per block, the block whose probe implies it (the first of its chain).
fn implied(blocks: &[PlannedBlock], f: &Facts) -> Vec<Option<usize>> {
    let n = blocks.len();
    // The ways into each address: every direct branch or call to it, and
    // the fall-through of the block before it.
    let mut ways: HashMap<u64, u32> = HashMap::default();
    // Per block, the block it always goes on to, when it goes on to one
    // only (a direct jump, or falling through) and runs to its end.
    let mut next: Vec<Option<u64>> = vec![None; n];
    for (i, b) in blocks.iter().enumerate() {
        let Some(last) = b.insns.last().and_then(|&a| insn_at(f.code, a)) else {
            continue;
        };
        if let Some(t) = direct_target(last) {
            *ways.entry(t).or_default() += 1;
        }
        if !ends_flow(last) {
            *ways.entry(b.end).or_default() += 1;
        }
        let goes_on = b.insns.iter().all(|&a| {
            insn_at(f.code, a).is_some_and(|x| {
                let plain = x.flow_control() == FlowControl::Next
                    && !matches!(
                        x.mnemonic(),
                        Mnemonic::Syscall
                            | Mnemonic::Sysenter
                            | Mnemonic::Int
                            | Mnemonic::Int1
                            | Mnemonic::Into
                            | Mnemonic::Hlt
                    );
                plain || (a == last.ip() && x.flow_control() == FlowControl::UnconditionalBranch)
            })
        });
        if !goes_on {
            continue;
        }
        next[i] = match last.flow_control() {
            FlowControl::Next => Some(b.end),
            _ => direct_target(last),
        };
    }
    // What the encoder needs of each block.
    let slots: Vec<u64> = blocks
        .iter()
        .filter_map(|b| match b.how {
            How::Hop { slot, .. } => Some(slot),
            _ => None,
        })
        .collect();
    let read: HashSet<u32> = blocks
        .iter()
        .filter_map(|b| match b.how {
            How::Fell { branch } => Some(branch),
            _ => None,
        })
        .collect();
    let free = |b: &PlannedBlock| {
        let patched_at_start = match b.how {
            How::Jmp { from, to, .. } => from == b.start && to <= b.end,
            How::Int3 { .. } | How::Hop { .. } => true,
            _ => false,
        };
        patched_at_start
            && !slots.iter().any(|&s| b.start <= s && s < b.end)
            && b.branch.is_none_or(|j| !read.contains(&j))
    };
    let mut by: Vec<Option<usize>> = vec![None; n];
    for (a, t) in next.iter().enumerate() {
        let Some(t) = *t else { continue };
        let Ok(bi) = blocks.binary_search_by_key(&t, |b| b.start) else {
            continue;
        };
        let b = &blocks[bi];
        if bi == a
            || ways.get(&t) != Some(&1)
            || f.entered.contains(&t)
            || f.scope.unresolved_at(t)
            || !free(b)
        {
            continue;
        }
        by[bi] = Some(a);
    }
    // Each chain to its first block, which must have a probe of its own;
    // a cycle (no way in) stays probed.
    let mut root: Vec<Option<usize>> = vec![None; n];
    for i in 0..n {
        let mut r = i;
        let mut steps = 0;
        while let Some(p) = by[r] {
            r = p;
            steps += 1;
            if r == i || steps > n {
                break;
            }
        }
        let probed = !matches!(blocks[r].how, How::None);
        if r != i && by[r].is_none() && probed {
            root[i] = Some(r);
        }
    }
    root
}

#[cfg(test)]
mod tests {
    use crate::plan::testing::asm;
    use crate::plan::{How, Mode, Plan};

    /// A chain of three blocks laid out out of order, each entered only by
    /// the jump before it: `a: mov; jmp b | c: add; ret | b: mov; jmp c`.
    fn chain() -> Vec<u8> {
        asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut b = a.create_label();
            let mut c = a.create_label();
            a.mov(eax, 1).unwrap();
            a.jmp(b).unwrap();
            a.set_label(&mut c).unwrap();
            a.add(eax, ecx).unwrap();
            a.add(eax, edx).unwrap();
            a.add(eax, esi).unwrap();
            a.ret().unwrap();
            a.set_label(&mut b).unwrap();
            a.mov(ecx, 2).unwrap();
            a.jmp(c).unwrap();
        })
    }

    #[test]
    fn a_chain_has_one_probe_in_hit_mode() {
        let bytes = chain();
        let counts = Plan::new(vec![(0x1000, bytes.clone())], &[0x1000], &[], &[]);
        let hits = Plan::new_in(Mode::Hits, vec![(0x1000, bytes)], &[0x1000], &[], &[]);
        assert_eq!(counts.blocks.len(), 3);
        assert_eq!(counts.probes(), 3);
        assert_eq!(hits.mode, Mode::Hits);
        assert_eq!(hits.blocks.len(), 3);
        assert_eq!(hits.probes(), 1, "{:?}", hits.blocks);
        // Blocks by address: a, c, b; both later ones implied by a.
        assert!(!matches!(hits.blocks[0].how, How::Implied { .. }));
        assert_eq!(hits.blocks[1].how, How::Implied { by: 0 });
        assert_eq!(hits.blocks[2].how, How::Implied { by: 0 });
        // Each block ran exactly when the first did.
        for ran in [0, 1] {
            let c = [ran, 0, 0];
            let marks: Vec<u64> = (0..3).map(|i| hits.count(i, &c)).collect();
            assert_eq!(marks, [ran; 3]);
        }
    }

    #[test]
    fn a_block_entered_another_way_keeps_its_probe() {
        let counts = Plan::new(vec![(0x1000, chain())], &[0x1000], &[], &[]);
        let c = counts.blocks[1].start; // the `add` block
        let hits = |funcs: &[u64], taken: &[u64]| {
            Plan::new_in(Mode::Hits, vec![(0x1000, chain())], funcs, &[], taken).probes()
        };
        assert_eq!(hits(&[0x1000], &[]), 1);
        // c is a function too: entered from elsewhere.
        assert_eq!(hits(&[0x1000, c], &[]), 2);
        // c's address is stored in data.
        assert_eq!(hits(&[0x1000], &[c]), 2);
    }
}
