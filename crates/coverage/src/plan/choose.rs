//! Pass 8, patch choice: for each block, how it is counted ([`How`]),
//! whether the flags are live where its count goes, and which of its
//! conditional jumps' edges are counted.
//!
//! In order of preference: a jump over the block's first 5 bytes or more
//! (never a call; with the padding after a final jump or return; in an
//! unresolved function, over its first instruction only) to a
//! trampoline copying the whole block up to a final call; a jump over a
//! short prefix and its final call (the trampoline emulates the call);
//! for a block that is one call, the call retargeted; else a trap. A
//! short block ending in a conditional jump instead runs its window on
//! into the blocks its fall-through alone enters ([`run_on`]), which are
//! then counted in its trampoline ([`How::Covered`]).

use iced_x86::{Code as Op, FlowControl, Instruction, OpKind};
use rustc_hash::FxHashSet as HashSet;

use super::decode::Funcs;
use super::flags::Flags;
use super::{ends_flow, How, PlannedBlock};

/// What the earlier passes found, as the patch choice reads it.
pub(super) struct Facts<'a> {
    /// The module's instructions.
    pub insns: &'a [Instruction],
    /// Its function starts.
    pub funcs: &'a Funcs,
    /// Functions with an unresolved indirect jump.
    pub unresolved: &'a HashSet<u64>,
    /// Functions that may run with every signal blocked.
    pub masked: &'a HashSet<u64>,
    /// Functions whose bytes the code reads as data: not patched.
    pub read: &'a HashSet<u64>,
    /// Code the module copies at run time (start, end): not patched.
    pub copied: &'a [(u64, u64)],
    /// Padding instructions' addresses.
    pub padding: &'a HashSet<u64>,
    /// Leaders entered only by falling through a conditional jump.
    pub soft: &'a HashSet<u64>,
    /// The blocks, as instruction index ranges.
    pub raw: &'a [(usize, usize)],
    /// The flags' liveness.
    pub flags: &'a Flags<'a>,
}

/// The blocks planned, the branches whose edges are counted, and per
/// block whether it must not trap (in a masked function).
#[derive(Default)]
pub(super) struct Chosen {
    pub blocks: Vec<PlannedBlock>,
    pub branches: Vec<(u64, bool)>,
    pub forbidden: Vec<bool>,
}

impl Chosen {
    /// A branch for the conditional jump `last` ending a block, when its
    /// trampoline copies it (`copied`).
    fn branch(&mut self, f: &Facts, last: &Instruction, copied: bool) -> Option<u32> {
        if !copied || !is_near_conditional(last) {
            return None;
        }
        let j = self.branches.len() as u32;
        self.branches
            .push((last.ip(), f.flags.live_at_block(last.next_ip())));
        Some(j)
    }
}

/// Whether `x` calls (directly or not).
fn is_call(x: &Instruction) -> bool {
    matches!(
        x.flow_control(),
        FlowControl::Call | FlowControl::IndirectCall
    )
}

/// Whether `x` is a direct conditional jump.
fn is_near_conditional(x: &Instruction) -> bool {
    x.flow_control() == FlowControl::ConditionalBranch && x.op0_kind() == OpKind::NearBranch64
}

/// Choose how every block of `f.raw` is counted.
pub(super) fn choose(f: &Facts) -> Chosen {
    let insns = f.insns;
    let mut out = Chosen {
        blocks: Vec::with_capacity(f.raw.len()),
        branches: Vec::new(),
        forbidden: Vec::with_capacity(f.raw.len()),
    };
    // Blocks still to be counted in the trampoline of an earlier one
    // whose window runs into them, and where that window ends.
    let mut cover_left = 0usize;
    let mut cover_to = 0u64;
    for (bi, &(s, e)) in f.raw.iter().enumerate() {
        let last = &insns[e - 1];
        let (start, end) = (insns[s].ip(), last.next_ip());
        let ips: Vec<u64> = insns[s..e].iter().map(Instruction::ip).collect();
        if cover_left > 0 {
            cover_left -= 1;
            let branch = out.branch(f, last, cover_to >= end);
            out.blocks.push(PlannedBlock {
                start,
                end,
                insns: ips.into(),
                how: How::Covered,
                flags_live: f.flags.live_from(s, e),
                branch,
            });
            out.forbidden.push(false);
            continue;
        }
        let bad = insns[s..e].iter().any(|x| x.code() == Op::INVALID)
            || f.read.contains(&f.funcs.of(start))
            || super::copied::within(f.copied, start);
        let restricted = f.unresolved.contains(&f.funcs.of(start));
        let mut how = How::None;
        if !bad {
            how = window(f, s, e, restricted);
            if how == How::None {
                how = call_or_trap(insns, s, e);
            }
        }
        if !bad && !restricted && matches!(how, How::None | How::Int3 { .. }) {
            if let Some((to, len, covers)) = run_on(f, bi) {
                how = How::Jmp {
                    from: start,
                    to,
                    overwrite: len as u32,
                };
                cover_left = covers;
                cover_to = to;
            }
        }
        let copies_last = match how {
            How::Jmp { to, .. } | How::Int3 { to } | How::Hop { to, .. } => to >= end,
            _ => false,
        };
        let branch = out.branch(f, last, copies_last);
        let flags_live = match how {
            How::Jmp { .. } | How::Int3 { .. } => f.flags.live_from(s, e),
            _ => false,
        };
        let no_trap = f.masked.contains(&f.funcs.of(start));
        out.forbidden
            .push(no_trap && matches!(how, How::Int3 { .. }));
        out.blocks.push(PlannedBlock {
            start,
            end,
            insns: ips.into(),
            how,
            flags_live,
            branch,
        });
    }
    out
}

/// The padding after `insns[e - 1]` (which does not go on) that a patch
/// may overwrite, in bytes.
fn pad_after(f: &Facts, e: usize) -> u64 {
    let insns = f.insns;
    let mut pad = 0u64;
    let mut k = e;
    while k < insns.len()
        && f.padding.contains(&insns[k].ip())
        && insns[k].ip() == insns[k - 1].next_ip()
    {
        pad += insns[k].len() as u64;
        k += 1;
    }
    pad
}

/// A jump for the block `insns[s..e]`, or `How::None`: the trampoline
/// copies the whole block, up to a final call; the jump overwrites its
/// first instructions (at least 5 bytes, never the call; in a
/// `restricted` function the first instruction alone), and any padding
/// after a final jump or return; or, when the instructions before a
/// final call are shorter, them and the call.
fn window(f: &Facts, s: usize, e: usize, restricted: bool) -> How {
    let insns = f.insns;
    let (first, last) = (&insns[s], &insns[e - 1]);
    let (start, end) = (first.ip(), last.next_ip());
    let copy_end = if is_call(last) { e - 1 } else { e };
    if copy_end <= s {
        return How::None;
    }
    let to = insns[copy_end - 1].next_ip();
    if restricted {
        if first.len() >= 5 {
            return How::Jmp {
                from: start,
                to,
                overwrite: first.len() as u32,
            };
        }
        return How::None;
    }
    let mut k = s;
    let mut len = 0u64;
    while k < copy_end && len < 5 {
        len += insns[k].len() as u64;
        k += 1;
    }
    if len < 5 && k == e && ends_flow(last) {
        len += pad_after(f, e);
    }
    if len >= 5 {
        How::Jmp {
            from: start,
            to,
            overwrite: len as u32,
        }
    } else if copy_end == e - 1 && retargetable(last).is_some() {
        // A short prefix and a call that can be retargeted (`mov
        // %rbx,%rdi; call f`): the prefix runs in place and the call
        // goes through a stub that counts the block (it runs exactly
        // when the block is entered: nothing in it branches). Its return
        // address stays the original one, and returns stay predicted:
        // emulating the call in a trampoline (below) costs a mispredicted
        // return at each (sqlite3: 14% of the counted run).
        How::Call {
            len: retargetable(last).expect("checked"),
        }
    } else if let Some(len) = (copy_end == e - 1)
        .then(|| moved_call(&insns[s..e]))
        .flatten()
    {
        // A short prefix and an indirect call (`mov %rbx,%rdi; call
        // *0x28(%rbp)`) whose last 5 or 6 bytes start at an instruction:
        // those bytes become the retargeted call, and what they held
        // before the call runs in its stub (`moved_call`).
        How::Call { len }
    } else if copy_end == e - 1 && end - start >= 5 {
        // A short prefix and a call of another form (`call *%rax`): the
        // trampoline makes the call as a push of the original return
        // address and a jump, so the return still lands in the original
        // code.
        How::Jmp {
            from: start,
            to: end,
            overwrite: (end - start) as u32,
        }
    } else {
        How::None
    }
}

/// The length of call `x` when it can be retargeted to a counting stub
/// in place ([`How::Call`]): `call rel32` (5), `call *disp(%rip)` (6).
fn retargetable(x: &Instruction) -> Option<u32> {
    if x.code() == Op::Call_rel32_64 {
        Some(5)
    } else if x.code() == Op::Call_rm64 && x.is_ip_rel_memory_operand() && x.len() == 6 {
        Some(6)
    } else {
        None
    }
}

/// [`How::Call`] for a block `block` (a short prefix, then an indirect
/// call of a form that cannot be retargeted where it is: `call *%rax`,
/// `call *0x28(%rbp)`) whose last 5 or 6 bytes start at an instruction:
/// the length of those bytes, which the patch turns into `call rel32`
/// (`ds call rel32` for 6) to a stub that runs the instructions they held
/// before the call, counts, and jumps where the call went. The return
/// address is the original one, pushed by a real call, so the callee's
/// return is predicted (an emulated call, a push and a jump, mispredicts
/// it once). The moved instructions run one push lower: none of them, nor
/// the call's operand, may use `%rsp` or the stack, explicitly or not
/// (one reading the red zone through another register would read the
/// return address there; a compiler keeps nothing live in the red zone
/// across a call, which overwrites it too).
fn moved_call(block: &[Instruction]) -> Option<u32> {
    let call = block.last()?;
    if call.code() != Op::Call_rm64 {
        return None;
    }
    let end = call.next_ip();
    let k = block.iter().position(|x| matches!(end - x.ip(), 5 | 6))?;
    let rsp = |r: iced_x86::Register| r.full_register() == iced_x86::Register::RSP;
    if (call.op0_kind() == OpKind::Register && rsp(call.op0_register()))
        || rsp(call.memory_base())
        || rsp(call.memory_index())
    {
        return None;
    }
    let mut info = iced_x86::InstructionInfoFactory::new();
    for x in &block[k..block.len() - 1] {
        let i = info.info(x);
        if x.stack_pointer_increment() != 0
            || x.flow_control() != FlowControl::Next
            || i.used_registers().iter().any(|u| rsp(u.register()))
            || i.used_memory()
                .iter()
                .any(|m| rsp(m.base()) || rsp(m.index()))
        {
            return None;
        }
    }
    Some((end - block[k].ip()) as u32)
}

/// A block with no jump: one call retargeted (`call rel32`, `call
/// *disp(%rip)`), else a trap whose trampoline copies the whole block up
/// to a final call (a lone call of another form is emulated there, its
/// return address the original one). `How::None` for a block of a call
/// and more that no jump could cover.
fn call_or_trap(insns: &[Instruction], s: usize, e: usize) -> How {
    let first = &insns[s];
    if is_call(first) {
        if e - s != 1 {
            return How::None;
        }
        return match retargetable(first) {
            Some(len) => How::Call { len },
            None => How::Int3 {
                to: first.next_ip(),
            },
        };
    }
    let mut k = s;
    while k < e && !is_call(&insns[k]) {
        k += 1;
    }
    How::Int3 {
        to: insns[k - 1].next_ip(),
    }
}

/// For the short block `raw[bi]` ending in a conditional jump, a window
/// run on into the blocks its fall-through enters (each entered no other
/// way, in a resolved function, decodable), until it is 5 bytes long:
/// where the window ends, its length, and how many blocks it covers.
fn run_on(f: &Facts, bi: usize) -> Option<(u64, u64, usize)> {
    let insns = f.insns;
    let (s, e) = f.raw[bi];
    if !is_near_conditional(&insns[e - 1]) {
        return None;
    }
    let end = insns[e - 1].next_ip();
    let mut len = end - insns[s].ip();
    let mut to = end;
    let mut covers = 0;
    for &(ns, ne) in &f.raw[bi + 1..] {
        let nstart = insns[ns].ip();
        if nstart != to
            || !f.soft.contains(&nstart)
            || f.unresolved.contains(&f.funcs.of(nstart))
            || insns[ns..ne].iter().any(|x| x.code() == Op::INVALID)
        {
            return None;
        }
        let mut k = ns;
        while k < ne && len < 5 && !is_call(&insns[k]) {
            len += insns[k].len() as u64;
            k += 1;
        }
        if k == ns {
            return None;
        }
        // Copy all of it, up to a final call.
        let ce = if is_call(&insns[ne - 1]) { ne - 1 } else { ne };
        to = insns[ce - 1].next_ip();
        covers += 1;
        if len >= 5 {
            return Some((to, len, covers));
        }
        if k < ne || insns[ne - 1].flow_control() != FlowControl::ConditionalBranch {
            return None;
        }
        to = insns[ne - 1].next_ip();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::testing::Passes;
    use super::*;

    #[test]
    fn a_long_block_is_a_jump_over_its_first_5_bytes() {
        // mov eax,1 (5); add eax,ecx (2); ret
        let p = Passes::of(&[0xb8, 1, 0, 0, 0, 0x01, 0xc8, 0xc3], &[0x1000]);
        let c = p.choose();
        assert_eq!(
            c.blocks[0].how,
            How::Jmp {
                from: 0x1000,
                to: 0x1008,
                overwrite: 5
            }
        );
        assert_eq!(c.forbidden, [false]);
        assert!(c.branches.is_empty());
    }

    #[test]
    fn a_block_that_is_a_call_is_retargeted_or_trapped() {
        // call rel32 | call *0(%rip) | call *%rax | ret
        let bytes = [0xe8, 0, 0, 0, 0, 0xff, 0x15, 0, 0, 0, 0, 0xff, 0xd0, 0xc3];
        let p = Passes::of(&bytes, &[0x1000]);
        let hows: Vec<How> = p.choose().blocks.iter().map(|b| b.how).collect();
        assert_eq!(
            hows[..3],
            [
                How::Call { len: 5 },
                How::Call { len: 6 },
                How::Int3 { to: 0x100d }
            ]
        );
    }

    #[test]
    fn a_short_prefix_and_a_call_is_retargeted_in_place() {
        // mov %rbx,%rdi; call rel32 | mov %rbx,%rdi; call *0(%rip) |
        // mov %rbx,%rdi; call *%rax | ret
        let bytes = [
            0x48, 0x89, 0xdf, 0xe8, 0, 0, 0, 0, // 0x1000
            0x48, 0x89, 0xdf, 0xff, 0x15, 0, 0, 0, 0, // 0x1008
            0x48, 0x89, 0xdf, 0xff, 0xd0, // 0x1011
            0xc3,
        ];
        let p = Passes::of(&bytes, &[0x1000]);
        let hows: Vec<How> = p.choose().blocks.iter().map(|b| b.how).collect();
        assert_eq!(
            hows[..3],
            [
                How::Call { len: 5 },
                How::Call { len: 6 },
                // An indirect call: the mov moves into the stub with it.
                How::Call { len: 5 },
            ]
        );
    }

    #[test]
    fn a_prefix_using_the_stack_keeps_its_call_emulated() {
        // The moved bytes would run one push lower: mov %rsp,%rdi; call
        // *%rax | mov %rbx,%rdi; call *8(%rsp) | mov %rbx,%rdi; call
        // *0x28(%rbp) (moved) | ret
        let bytes = [
            0x48, 0x89, 0xe7, 0xff, 0xd0, // 0x1000
            0x48, 0x89, 0xdf, 0xff, 0x54, 0x24, 0x08, // 0x1005
            0x48, 0x89, 0xdf, 0xff, 0x55, 0x28, // 0x100c
            0xc3,
        ];
        let p = Passes::of(&bytes, &[0x1000]);
        let hows: Vec<How> = p.choose().blocks.iter().map(|b| b.how).collect();
        assert_eq!(
            hows[..3],
            [
                How::Jmp {
                    from: 0x1000,
                    to: 0x1005,
                    overwrite: 5
                },
                How::Jmp {
                    from: 0x1005,
                    to: 0x100c,
                    overwrite: 7
                },
                How::Call { len: 6 },
            ]
        );
    }

    #[test]
    fn padding_after_a_return_lengthens_a_short_window() {
        // xor eax,eax; ret | nop; nop; int3 (padding) | next function
        let bytes = [0x31, 0xc0, 0xc3, 0x90, 0x90, 0xcc, 0xc3];
        let p = Passes::of(&bytes, &[0x1000, 0x1006]);
        let c = p.choose();
        assert_eq!(
            c.blocks[0].how,
            How::Jmp {
                from: 0x1000,
                to: 0x1003,
                overwrite: 6
            }
        );
        // Without the padding: a trap, and in a masked function a trap
        // is forbidden.
        let p = Passes::of(&[0x31, 0xc0, 0xc3, 0xc3], &[0x1000, 0x1003]).masked(&[0x1000]);
        let c = p.choose();
        assert_eq!(c.blocks[0].how, How::Int3 { to: 0x1003 });
        assert_eq!(c.forbidden, [true, false]);
    }

    #[test]
    fn an_unresolved_function_jumps_over_one_instruction_only() {
        // mov eax,1 (5); ret | xor eax,eax; inc ecx; inc edx; ret (7)
        let bytes = [
            0xb8, 1, 0, 0, 0, 0xc3, 0x31, 0xc0, 0xff, 0xc1, 0xff, 0xc2, 0xc3,
        ];
        let p = Passes::of(&bytes, &[0x1000, 0x1006]).unresolved(&[0x1000, 0x1006]);
        let hows: Vec<How> = p.choose().blocks.iter().map(|b| b.how).collect();
        assert_eq!(
            hows,
            [
                How::Jmp {
                    from: 0x1000,
                    to: 0x1006,
                    overwrite: 5
                },
                How::Int3 { to: 0x100d }
            ]
        );
    }

    #[test]
    fn a_short_conditional_block_runs_on_into_its_fall_through() {
        // test eax,eax; je +5 (4 bytes) | inc ecx; inc edx; nop (5) | ret
        let bytes = [0x85, 0xc0, 0x74, 0x05, 0xff, 0xc1, 0xff, 0xc2, 0x90, 0xc3];
        let p = Passes::of(&bytes, &[0x1000]);
        let c = p.choose();
        assert_eq!(
            c.blocks[0].how,
            How::Jmp {
                from: 0x1000,
                to: 0x1009,
                overwrite: 6
            }
        );
        assert_eq!(c.blocks[1].how, How::Covered);
        assert_eq!(c.blocks[0].branch, Some(0));
        // The flags are dead where it falls through (`inc` writes them).
        assert_eq!(c.branches, [(0x1002, false)]);
        // Entered by a jump too (not soft): no running on, a trap.
        let bytes = [0x85, 0xc0, 0x74, 0x00, 0xff, 0xc1, 0xff, 0xc2, 0x90, 0xc3];
        let c = Passes::of(&bytes, &[0x1000]).choose();
        assert_eq!(c.blocks[0].how, How::Int3 { to: 0x1004 });
        assert_eq!(c.blocks[0].branch, Some(0), "the trap's copy holds it");
    }
}
