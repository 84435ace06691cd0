//! Step 1: each block's trampoline as instruction lists (stubs, then the
//! main part), with the branch targets of the original code; the layout
//! leads them to the trampolines.

use iced_x86::{Code, FlowControl, Instruction};

use super::seq::{count_seq, emulate_call, jmp, SENTINEL};
use super::{fell_copy, Ctx};
use crate::plan::{How, PlannedBlock};

/// One block's trampoline pieces, before layout.
#[derive(Clone)]
pub(super) struct Piece {
    /// The block's index.
    pub block: usize,
    /// Stubs (taken edges, or a call's counting stub), then main part.
    pub stubs: Vec<Vec<Instruction>>,
    pub main: Vec<Instruction>,
}

/// The pieces of every block that has a trampoline, and the blocks meant
/// to be counted whose trampoline could not be made.
pub(super) struct Pieces {
    pub pieces: Vec<Piece>,
    pub failed: u64,
    pub failed_blocks: Vec<usize>,
}

/// The pieces of the plan's blocks.
pub(super) fn pieces(cx: &Ctx) -> Pieces {
    let mut out = Pieces {
        pieces: Vec::new(),
        failed: 0,
        failed_blocks: Vec::new(),
    };
    for (i, b) in cx.plan.blocks.iter().enumerate() {
        let counter = cx.first_counter + i as u64;
        // A block left unpatched because it takes its count from the
        // fall-through of the block before it (How::Fell) gets a
        // trampoline all the same (`fell_copy`: for the run on, and the
        // recording of a final site), reached from the trampoline before
        // it (which jumps there by `entry`); still unpatched, its count
        // still derived, nothing lost if it cannot be made.
        let fell_to = match b.how {
            How::Fell { .. } => fell_copy(cx.plan, b, cx.opts),
            _ => None,
        };
        let fell_site = fell_to.is_some();
        let how = match fell_to {
            Some(to) => How::Int3 { to },
            None => b.how,
        };
        let piece = match how {
            How::None
            | How::Once
            | How::Fell { .. }
            | How::Covered
            | How::Implied { .. }
            | How::Branches { .. } => continue,
            How::Call { .. } => call_piece(cx, i, b, counter),
            How::Jmp { to, .. } | How::Int3 { to } | How::Hop { to, .. } => {
                let from = match how {
                    How::Jmp { from, .. } => from,
                    _ => b.start,
                };
                copy_piece(cx, i, b, from, to, counter)
            }
        };
        match piece {
            Some(p) => out.pieces.push(p),
            None if fell_site => {}
            None => {
                out.failed += 1;
                out.failed_blocks.push(i);
            }
        }
    }
    out
}

/// The counting stub of a block that is one call: count, record its
/// target, and jump where the call went (the return address is the
/// original one: the patch is the call itself, retargeted).
fn call_piece(cx: &Ctx, i: usize, b: &PlannedBlock, counter: u64) -> Option<Piece> {
    let How::Call { len } = b.how else {
        return None;
    };
    // The patched bytes: the call, and what comes before it there (run
    // here, one push lower, before the count: `choose::moved_call`).
    let mut stub = cx.decode(b.end.checked_sub(len.into())?, b.end)?;
    let x = stub.pop()?;
    stub.extend(count_seq(counter, false, cx.hits()));
    stub.extend(cx.record(&x).into_iter().flatten());
    if x.code() == Code::Call_rel32_64 {
        stub.push(jmp(x.near_branch_target()));
    } else {
        let mut j = x;
        j.set_code(Code::Jmp_rm64);
        stub.push(j);
    }
    Some(Piece {
        block: i,
        stubs: vec![stub],
        main: Vec::new(),
    })
}

/// The trampoline of block `i` copying `from..to`: its count, the copy
/// (with the counts of the blocks the window runs into, and of its
/// conditional jumps' fall-throughs), a final call emulated, and a jump
/// back where the copy ends.
fn copy_piece(
    cx: &Ctx,
    i: usize,
    b: &PlannedBlock,
    from: u64,
    to: u64,
    counter: u64,
) -> Option<Piece> {
    let plan = cx.plan;
    let mut copied = cx.decode(from, to)?;
    let last_uncond = copied.last().is_some_and(|x| {
        matches!(
            x.flow_control(),
            FlowControl::UnconditionalBranch | FlowControl::IndirectBranch | FlowControl::Return
        ) || x.mnemonic() == iced_x86::Mnemonic::Ud2
    });
    let mut emulated = None;
    if copied.last().is_some_and(|x| {
        matches!(
            x.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        )
    }) {
        let call = copied.pop()?;
        let mut v = cx.record(&call).unwrap_or_default();
        v.extend(emulate_call(&call)?);
        emulated = Some(v);
    }
    // A block derived from the edges into it, or from the fall-through
    // before it, counts nothing itself.
    let mut main = if plan.derived_of(i).is_some() || matches!(b.how, How::Fell { .. }) {
        Vec::new()
    } else {
        count_seq(counter, b.flags_live, cx.hits())
    };
    let mut stubs = Vec::new();
    for mut x in copied {
        let link = x.ip() - cx.bias;
        if link != from {
            // A block the window runs into: count it here (unless another
            // block's probe implies it).
            if let Some(c) = plan.block_at(link) {
                if !matches!(
                    plan.blocks[c].how,
                    How::Implied { .. } | How::Branches { .. }
                ) {
                    main.extend(count_seq(
                        cx.first_counter + c as u64,
                        plan.blocks[c].flags_live,
                        cx.hits(),
                    ));
                }
            }
        }
        let fell = fall_count(cx, &x, link);
        if let Some(stub) = taken_stub(cx, &x, link) {
            x.set_near_branch64(SENTINEL + stubs.len() as u64);
            stubs.push(stub);
        }
        if x.flow_control() == FlowControl::IndirectBranch {
            main.extend(cx.record(&x).into_iter().flatten());
        }
        main.push(x);
        main.extend(fell.into_iter().flatten());
    }
    match emulated {
        Some(v) => main.extend(v),
        None if !last_uncond => {
            // The window stops before its block's final call, run in the
            // original code: record its target here (the registers are
            // those it will see).
            main.extend(final_call_record(cx, to));
            main.push(jmp(to + cx.bias));
        }
        None => {}
    }
    Some(Piece {
        block: i,
        stubs,
        main,
    })
}

/// [`crate::plan::Mode::Edges`]: the stub the copied conditional jump `x`
/// (at link-time address `link`) leads to when it ends its block and its
/// taken edge is flagged ([`crate::plan::Plan::edges`]): store the
/// branch's taken byte, jump to the target.
fn taken_stub(cx: &Ctx, x: &Instruction, link: u64) -> Option<Vec<Instruction>> {
    let plan = cx.plan;
    if plan.mode != crate::plan::Mode::Edges || x.flow_control() != FlowControl::ConditionalBranch {
        return None;
    }
    let c = plan.blocks.partition_point(|k| k.start <= link) - 1;
    let cb = &plan.blocks[c];
    let j = cb.branch?;
    if cb.end != x.next_ip() - cx.bias || plan.edges.get(j as usize)?.0.is_some() {
        return None;
    }
    let nblocks = plan.blocks.len() as u64;
    let nbranches = plan.branches.len() as u64;
    let mut stub = count_seq(
        cx.first_counter + nblocks + nbranches + u64::from(j),
        false,
        true,
    );
    stub.push(jmp(x.near_branch_target()));
    Some(stub)
}

/// The count of the fall-throughs of the copied instruction `x` (at
/// link-time address `link`), placed right after it: when it is the
/// conditional jump ending its block, counted as a branch, and its
/// fall-throughs are not read from the block after it.
fn fall_count(cx: &Ctx, x: &Instruction, link: u64) -> Option<Vec<Instruction>> {
    if x.flow_control() != FlowControl::ConditionalBranch {
        return None;
    }
    let plan = cx.plan;
    let c = plan.blocks.partition_point(|k| k.start <= link) - 1;
    let cb = &plan.blocks[c];
    let j = cb.branch?;
    if cb.end != x.next_ip() - cx.bias || plan.fell_from[j as usize].is_some() {
        return None;
    }
    let (_, live) = plan.branches[j as usize];
    let nblocks = plan.blocks.len() as u64;
    Some(count_seq(
        cx.first_counter + nblocks + u64::from(j),
        live,
        cx.hits(),
    ))
}

/// The recording of the indirect call at `to`, the final call of a block
/// whose window stops before it (none when call targets are not wanted,
/// or a block starts at `to`, or there is no such call).
fn final_call_record(cx: &Ctx, to: u64) -> Vec<Instruction> {
    let plan = cx.plan;
    if !cx.opts.call_targets || plan.block_at(to).is_some() {
        return Vec::new();
    }
    let k = plan.blocks.partition_point(|k| k.start <= to);
    let end = k.checked_sub(1).map_or(to, |k| plan.blocks[k].end);
    let call = (end > to)
        .then(|| cx.decode(to, end))
        .flatten()
        .and_then(|v| v.into_iter().next())
        .filter(|c| c.flow_control() == FlowControl::IndirectCall);
    call.and_then(|c| cx.record(&c)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::Options;
    use super::*;
    use crate::plan::Plan;
    use iced_x86::Register;

    const BIAS: u64 = 0x5555_0000_0000;

    /// The plan of `bytes` at 0x1000, one function.
    fn plan(bytes: &[u8]) -> Plan {
        Plan::new(vec![(0x1000, bytes.to_vec())], &[0x1000], &[], &[])
    }

    fn cx(plan: &Plan, opts: Options) -> Ctx<'_> {
        Ctx {
            plan,
            bias: BIAS,
            area: BIAS + 0x1000_0000,
            first_counter: 100,
            opts,
        }
    }

    /// The counter `x` counts, if it is a count.
    fn counter(x: &Instruction) -> Option<u64> {
        super::super::seq::is_count(x).then(|| x.memory_displacement64() / 8)
    }

    #[test]
    fn a_call_block_counts_and_goes_where_the_call_went() {
        // call 0x1010 | (padding) | 0x1010: ret
        let mut bytes = vec![0xe8, 0x0b, 0, 0, 0];
        bytes.resize(0x10, 0xcc);
        bytes.push(0xc3);
        let plan = plan(&bytes);
        assert_eq!(plan.blocks[0].how, How::Call { len: 5 });
        let p = pieces(&cx(&plan, Options::default()));
        assert_eq!(p.failed, 0);
        let stub = &p.pieces[0].stubs[0];
        assert_eq!(counter(&stub[0]), Some(100));
        assert_eq!(stub[1].code(), Code::Jmp_rel32_64);
        assert_eq!(stub[1].near_branch_target(), BIAS + 0x1010);
        assert!(p.pieces[0].main.is_empty());
    }

    #[test]
    fn an_indirect_call_after_a_short_prefix_takes_the_prefix_into_its_stub() {
        // mov %rbx,%rdi; call *0x28(%rbp) | ret: the six bytes become `ds
        // call stub`; the stub runs the mov, counts (after it: the mov
        // may read the flags, the count writes them), and jumps through
        // the call's operand, the return address the original one.
        let plan = plan(&[0x48, 0x89, 0xdf, 0xff, 0x55, 0x28, 0xc3]);
        assert_eq!(plan.blocks[0].how, How::Call { len: 6 });
        let p = pieces(&cx(&plan, Options::default()));
        assert_eq!(p.failed, 0);
        let stub = &p.pieces[0].stubs[0];
        assert_eq!(stub.len(), 3, "{stub:?}");
        assert_eq!(stub[0].code(), Code::Mov_rm64_r64);
        assert_eq!(counter(&stub[1]), Some(100));
        assert_eq!(stub[2].code(), Code::Jmp_rm64);
        assert_eq!(stub[2].memory_base(), iced_x86::Register::RBP);
        assert_eq!(stub[2].memory_displacement64(), 0x28);
    }

    #[test]
    fn a_copy_counts_its_fall_throughs_after_the_jump() {
        // mov eax,1; cmp eax,ecx; jne L | xor eax,eax; ret | L: ret
        let bytes = [
            0xb8, 1, 0, 0, 0, 0x39, 0xc8, 0x75, 0x03, 0x31, 0xc0, 0xc3, 0xc3,
        ];
        let plan = plan(&bytes);
        assert_eq!(plan.blocks.len(), 3);
        // The block after the jump takes the jump's fall-through count:
        // the trampoline counts it.
        assert_eq!(plan.blocks[1].how, How::Fell { branch: 0 });
        let p = pieces(&cx(&plan, Options::default()));
        let main = &p.pieces[0].main;
        let codes: Vec<Option<u64>> = main.iter().map(counter).collect();
        // count, mov, cmp, jne, the fall-through's count (counter
        // 100 + 3 blocks + branch 0), jump back.
        assert_eq!(codes, [Some(100), None, None, None, Some(103), None]);
        assert_eq!(main[5].near_branch_target(), BIAS + plan.blocks[0].end);
        // Block 1 has no trampoline (it ends in a return, nothing after
        // it runs from the module); block 2 (a lone ret) traps into one
        // that ends with the ret itself.
        assert_eq!(p.pieces.len(), 2);
        assert_eq!(p.pieces[1].block, 2);
        assert_eq!(
            p.pieces[1].main.last().map(Instruction::code),
            Some(Code::Retnq)
        );
    }

    #[test]
    fn a_block_derived_from_a_fall_through_goes_on_into_a_short_one_from_a_trampoline() {
        // mov eax,1; cmp eax,ecx; jne L | xor eax,eax | R: ret | L: inc
        // eax; jmp R: the xor falls into a block that traps (a lone ret,
        // also jumped to); run in place, it would trap there.
        let bytes = [
            0xb8, 1, 0, 0, 0, 0x39, 0xc8, 0x75, 0x03, 0x31, 0xc0, 0xc3, 0xff, 0xc0, 0xeb, 0xfb,
        ];
        let plan = plan(&bytes);
        assert_eq!(plan.blocks[1].how, How::Fell { branch: 0 });
        assert_eq!(plan.blocks[2].how, How::Int3 { to: 0x100c });
        let p = pieces(&cx(&plan, Options::default()));
        let fell = p
            .pieces
            .iter()
            .find(|q| q.block == 1)
            .expect("a trampoline");
        // Its copy, counting nothing, and on to the ret's start (which
        // the layout leads to the ret's trampoline).
        assert!(fell.stubs.is_empty());
        let codes: Vec<Code> = fell.main.iter().map(Instruction::code).collect();
        assert_eq!(codes, [Code::Xor_rm32_r32, Code::Jmp_rel32_64]);
        assert_eq!(fell.main[1].near_branch_target(), BIAS + 0x100b);
    }

    #[test]
    fn a_block_derived_from_a_fall_through_ending_in_a_call_has_no_trampoline() {
        // mov eax,1; cmp eax,ecx; jne L | mov edi,eax; call *%rax | L:
        // ret: the block after the jump would only jump back to its call.
        let bytes = [
            0xb8, 1, 0, 0, 0, 0x39, 0xc8, 0x75, 0x04, 0x89, 0xc7, 0xff, 0xd0, 0xc3,
        ];
        let plan = plan(&bytes);
        assert_eq!(plan.blocks[1].how, How::Fell { branch: 0 });
        let p = pieces(&cx(&plan, Options::default()));
        assert!(p.pieces.iter().all(|q| q.block != 1));
        // Unless its call is recorded there.
        let on = Options { call_targets: true };
        let p = pieces(&cx(&plan, on));
        assert!(p.pieces.iter().any(|q| q.block == 1));
    }

    #[test]
    fn a_final_call_left_in_place_is_recorded_before_the_jump_back() {
        // mov eax,1; call *%rax | ret
        let bytes = [0xb8, 1, 0, 0, 0, 0xff, 0xd0, 0xc3];
        let plan = plan(&bytes);
        assert_eq!(
            plan.blocks[0].how,
            How::Jmp {
                from: 0x1000,
                to: 0x1005,
                overwrite: 5
            }
        );
        let recorder = |main: &[Instruction]| {
            main.iter()
                .filter(|x| x.code() == Code::Call_rm64 && x.segment_prefix() == Register::GS)
                .count()
        };
        let on = Options { call_targets: true };
        let with = pieces(&cx(&plan, on));
        let without = pieces(&cx(&plan, Options::default()));
        assert_eq!(recorder(&with.pieces[0].main), 1);
        assert_eq!(recorder(&without.pieces[0].main), 0);
        for p in [&with, &without] {
            let last = p.pieces[0].main.last().expect("a jump back");
            assert_eq!(last.near_branch_target(), BIAS + 0x1005);
        }
    }
}
