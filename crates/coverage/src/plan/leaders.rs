//! Passes 2 and 6, leaders and blocks: where blocks start, which bytes are
//! alignment padding (no block's), and the blocks as instruction ranges.
//!
//! Hard leaders are the addresses padding must not swallow: function
//! starts, section starts, direct branch and call targets (and, added by
//! later passes, jump tables' targets and code addresses stored in data).
//! The rest follow from the flow: the instruction after each one that
//! does not simply fall through starts a block, after any padding when
//! control cannot reach it. A leader entered only by falling through a
//! conditional jump is soft: a patch's window may run across it.

use std::collections::BTreeSet;

use iced_x86::{Code as Op, FlowControl, OpKind};
use rustc_hash::FxHashSet as HashSet;

use super::decode::Code;
use super::{ends_flow, is_padding};

/// The hard leaders the code itself shows: the function starts that are
/// instructions, the sections' starts, and every direct branch, call or
/// `xbegin` target that is an instruction.
pub(super) fn direct(code: &Code, function_starts: &[u64]) -> HashSet<u64> {
    let mut hard: HashSet<u64> = HashSet::default();
    hard.extend(function_starts.iter().copied().filter(|a| code.is_insn(*a)));
    hard.extend(code.section_starts.iter().copied());
    for x in &code.insns {
        match x.flow_control() {
            FlowControl::UnconditionalBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Call
            | FlowControl::XbeginXabortXend
                if x.op0_kind() == OpKind::NearBranch64 =>
            {
                let t = x.near_branch_target();
                if code.is_insn(t) {
                    hard.insert(t);
                }
            }
            _ => {}
        }
    }
    hard
}

/// Every leader, the padding, and the soft leaders.
pub(super) struct Leaders {
    /// Every block start.
    pub all: BTreeSet<u64>,
    /// Addresses of padding instructions (no-ops and `int3` after an
    /// instruction that does not go on, up to the next hard leader).
    pub padding: HashSet<u64>,
    /// The same padding as runs of bytes (start, end), by address.
    pub runs: Vec<(u64, u64)>,
    /// Leaders entered only by falling through a conditional jump.
    pub soft: HashSet<u64>,
}

/// The leaders of `code` given its hard ones.
pub(super) fn leaders(code: &Code, hard: &HashSet<u64>) -> Leaders {
    let insns = &code.insns;
    let mut all: BTreeSet<u64> = hard.iter().copied().collect();
    let mut padding: HashSet<u64> = HashSet::default();
    let mut runs = Vec::new();
    let mut soft: HashSet<u64> = HashSet::default();
    let mut i = 0;
    while i < insns.len() {
        let x = &insns[i];
        let flow = x.flow_control();
        if flow != FlowControl::Next || x.code() == Op::INVALID {
            let unconditional = ends_flow(x);
            let mut j = i + 1;
            if unconditional {
                while j < insns.len()
                    && insns[j].ip() == insns[j - 1].next_ip()
                    && is_padding(&insns[j])
                    && !hard.contains(&insns[j].ip())
                {
                    padding.insert(insns[j].ip());
                    j += 1;
                }
                if j > i + 1 {
                    runs.push((insns[i + 1].ip(), insns[j - 1].next_ip()));
                }
            }
            if j < insns.len() {
                all.insert(insns[j].ip());
                if flow == FlowControl::ConditionalBranch && !hard.contains(&insns[j].ip()) {
                    soft.insert(insns[j].ip());
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    Leaders {
        all,
        padding,
        runs,
        soft,
    }
}

/// The blocks, as ranges of instruction indices: each from a leader (or
/// the end of a gap or of padding) to the next leader, gap or padding, or
/// through an instruction that does not simply fall through.
pub(super) fn blocks(code: &Code, leaders: &Leaders) -> Vec<(usize, usize)> {
    let insns = &code.insns;
    let mut raw: Vec<(usize, usize)> = Vec::new();
    let mut cur: Option<usize> = None;
    for (k, x) in insns.iter().enumerate() {
        if leaders.padding.contains(&x.ip()) {
            if let Some(s) = cur.take() {
                raw.push((s, k));
            }
            continue;
        }
        let contiguous = k > 0 && insns[k - 1].next_ip() == x.ip();
        if cur.is_some() && (leaders.all.contains(&x.ip()) || !contiguous) {
            raw.push((cur.take().unwrap_or(k), k));
        }
        if cur.is_none() {
            cur = Some(k);
        }
        if x.flow_control() != FlowControl::Next || x.code() == Op::INVALID {
            raw.push((cur.take().unwrap_or(k), k + 1));
        }
    }
    if let Some(s) = cur {
        raw.push((s, insns.len()));
    }
    raw
}

#[cfg(test)]
mod tests {
    use super::super::decode::decode;
    use super::super::testing::asm;
    use super::*;

    /// The blocks' start addresses.
    fn starts(code: &Code, raw: &[(usize, usize)]) -> Vec<u64> {
        raw.iter().map(|&(s, _)| code.insns[s].ip()).collect()
    }

    #[test]
    fn direct_targets_and_starts_are_hard_leaders() {
        let bytes = asm(0x1000, |a| {
            let mut top = a.create_label();
            a.set_label(&mut top).unwrap();
            a.nop().unwrap(); // 0x1000
            a.call(0x1000u64).unwrap(); // 0x1001, a direct call to 0x1000
            a.jne(top).unwrap(); // 0x1006
            a.ret().unwrap();
        });
        let code = decode(&[(0x1000, bytes)]);
        // 0x1001 is a function start; 0x1003 is not an instruction.
        let hard = direct(&code, &[0x1001, 0x1003]);
        let mut hard: Vec<u64> = hard.into_iter().collect();
        hard.sort_unstable();
        assert_eq!(hard, [0x1000, 0x1001]);
    }

    #[test]
    fn padding_after_a_jump_is_no_block_and_a_fall_through_is_soft() {
        // 0x1000 test eax,eax (2); 0x1002 je +? (2); 0x1004 inc eax (2);
        // 0x1006 ret; 0x1007 nop; 0x1008 int3; 0x1009 nop; 0x100a ret
        let bytes = vec![
            0x85, 0xc0, 0x74, 0x06, 0xff, 0xc0, 0xc3, 0x90, 0xcc, 0x90, 0xc3,
        ];
        let code = decode(&[(0x1000, bytes)]);
        // 0x100a is the je's target; 0x1009 a function start (stops the
        // padding there).
        let hard = direct(&code, &[0x1000, 0x1009]);
        let l = leaders(&code, &hard);
        let mut pad: Vec<u64> = l.padding.iter().copied().collect();
        pad.sort_unstable();
        assert_eq!(pad, [0x1007, 0x1008]);
        assert_eq!(l.runs, [(0x1007, 0x1009)]);
        assert_eq!(l.soft.iter().copied().collect::<Vec<_>>(), [0x1004]);
        let raw = blocks(&code, &l);
        assert_eq!(starts(&code, &raw), [0x1000, 0x1004, 0x1009, 0x100a]);
        assert_eq!(raw[1], (2, 4), "inc; ret, without the padding");
    }

    #[test]
    fn a_hard_leader_after_a_conditional_jump_is_not_soft() {
        // 0x1000 jne 0x1002 (jumps to its own fall-through); 0x1002 ret
        let code = decode(&[(0x1000, vec![0x75, 0x00, 0xc3])]);
        let hard = direct(&code, &[]);
        let l = leaders(&code, &hard);
        assert!(l.soft.is_empty());
        assert!(l.all.contains(&0x1002));
    }

    #[test]
    fn a_gap_or_an_undecodable_byte_ends_a_block() {
        // nop; nop | (a gap) nop; (invalid) | (right after) nop: three
        // sections, the last two contiguous.
        let code = decode(&[
            (0x1000, vec![0x90, 0x90]),
            (0x1010, vec![0x90, 0x06]),
            (0x1012, vec![0x90]),
        ]);
        let l = leaders(&code, &HashSet::default());
        let raw = blocks(&code, &l);
        let ips: Vec<(u64, usize)> = code.insns.iter().map(|x| (x.ip(), x.len())).collect();
        assert_eq!(raw, [(0, 2), (2, 4), (4, 5)], "{ips:x?}");
    }
}
