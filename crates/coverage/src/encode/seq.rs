//! The instruction sequences a trampoline is made of (a count, a call
//! emulated, a call target recorded), and their encoding at a place of
//! the area.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Instruction, InstructionBlock, MemoryOperand, OpKind,
    Register,
};

/// The code that records the target of the indirect call or jump `x`
/// (decoded at its run-time address) as it would be taken with the
/// registers and memory of this point, for the counter `key` (the site's
/// block's counter index): below the red zone, `%rax` saved, the target
/// loaded into `%rax` exactly as `x` would load it (a `%rsp`-based
/// operand moved past what was pushed, a RIP-relative one re-encoded for
/// the copy's place, a segment prefix kept), then `push %rax; lea
/// %gs:8*key,%rax; push %rax; call *%gs:0` (the runtime's recorder, which preserves every
/// register and the flags), and everything undone. No flag is touched
/// (`lea`, `push`, `mov`, `call`, `pop` write none). None when the
/// operand cannot be evaluated here (`%rsp` itself as the target, a
/// 32-bit address size).
pub(crate) fn record_seq(x: &Instruction, key: u64) -> Option<Vec<Instruction>> {
    const BELOW: i64 = 128;
    if !matches!(x.code(), Code::Call_rm64 | Code::Jmp_rm64) {
        return None; // (far calls and jumps: no user code makes them)
    }
    let slot = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    let load = match x.op0_kind() {
        iced_x86::OpKind::Register => {
            let r = x.op0_register();
            if !r.is_gpr64() || r == Register::RSP {
                return None;
            }
            Instruction::with2(Code::Mov_r64_rm64, Register::RAX, r).ok()?
        }
        iced_x86::OpKind::Memory => {
            let (base, index) = (x.memory_base(), x.memory_index());
            let ok = |r: Register| r == Register::None || r.is_gpr64() || r == Register::RIP;
            if !ok(base) || !ok(index) {
                return None;
            }
            let mut displ = x.memory_displacement64() as i64;
            let mut size = x.memory_displ_size().max(1);
            if base == Register::RSP {
                // Past the red zone skipped and %rax pushed.
                displ = displ.wrapping_add(BELOW + 8);
                size = 8; // (disp32: iced's size of a 64-bit address)
            }
            // (A bare displacement keeps its decoded size: 8, sign-extended
            // as the instruction reads it; 4 only under an address-size
            // prefix, which the copy then keeps.)
            if base == Register::RIP {
                size = 8;
            }
            let mem = MemoryOperand::new(
                base,
                index,
                x.memory_index_scale(),
                displ,
                size,
                false,
                x.segment_prefix(),
            );
            Instruction::with2(Code::Mov_r64_rm64, Register::RAX, mem).ok()?
        }
        _ => return None,
    };
    // (Displacement size 8: `[disp32]` through a SIB byte, no
    // address-size prefix; as the counts.)
    let recorder = MemoryOperand::new(Register::None, Register::None, 1, 0, 8, false, Register::GS);
    Some(vec![
        Instruction::with2(Code::Lea_r64_m, Register::RSP, slot(-BELOW)).ok()?,
        Instruction::with1(Code::Push_r64, Register::RAX).ok()?,
        load,
        Instruction::with1(Code::Push_r64, Register::RAX).ok()?,
        // The key as `lea %gs:8*KEY, %rax` (the segment is ignored by
        // `lea`; it marks the displacement as one to relocate, as a count's).
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RAX,
            MemoryOperand::new(
                Register::None,
                Register::None,
                1,
                i64::from(i32::try_from(key.checked_mul(8)?).ok()?),
                8,
                false,
                Register::GS,
            ),
        )
        .ok()?,
        Instruction::with1(Code::Push_r64, Register::RAX).ok()?,
        Instruction::with1(Code::Call_rm64, recorder).ok()?,
        Instruction::with2(Code::Lea_r64_m, Register::RSP, slot(16)).ok()?,
        Instruction::with1(Code::Pop_r64, Register::RAX).ok()?,
        Instruction::with2(Code::Lea_r64_m, Register::RSP, slot(BELOW)).ok()?,
    ])
}

/// Placeholder targets of the conditional jumps that lead to stub k.
pub(super) const SENTINEL: u64 = 0xffff_fff0_0000_0000;

/// The count of counter `index`: `incq %gs:8*index`, its flags saved
/// around it where they are live (`flags_live`); in hit mode (`hits`)
/// `movb $1,%gs:8*index`, which writes no flag and so never needs a save.
pub(super) fn count_seq(index: u64, flags_live: bool, hits: bool) -> Vec<Instruction> {
    // Displacement size 8: the 64-bit form, `[disp32]` through a SIB
    // byte. Size 4 makes iced add an address-size prefix (0x67), which
    // made a tight loop run 2.8x its native time instead of 1.4x.
    let mem = MemoryOperand::new(
        Register::None,
        Register::None,
        1,
        (index * 8) as i64,
        8,
        false,
        Register::GS,
    );
    if hits {
        // The counter's low byte (the array is zeroed): a plain store, no
        // read, no dependence from one execution to the next.
        let set = Instruction::with2(Code::Mov_rm8_imm8, mem, 1u32).expect("mov m8, imm8 is valid");
        return vec![set];
    }
    let inc = Instruction::with1(Code::Inc_rm64, mem).expect("inc m64 is valid");
    if !flags_live {
        return vec![inc];
    }
    // The flags saved in %ah (SF ZF AF PF CF: lahf) and %al (OF: seto),
    // %rax on the stack below the red zone, and restored: OF by adding
    // 0x7f to %al (it overflows exactly when %al is 1), the others by
    // sahf. Every instruction is a plain one (popfq is microcoded and
    // costs as much as dozens of counts), and the count stays one
    // instruction, so a signal handler cannot come between its read and
    // its write.
    let below = MemoryOperand::with_base_displ(Register::RSP, -128);
    let above = MemoryOperand::with_base_displ(Register::RSP, 128);
    let op = |r: Result<Instruction, iced_x86::IcedError>| r.expect("a valid instruction");
    vec![
        op(Instruction::with2(Code::Lea_r64_m, Register::RSP, below)),
        op(Instruction::with1(Code::Push_r64, Register::RAX)),
        Instruction::with(Code::Lahf),
        op(Instruction::with1(Code::Seto_rm8, Register::AL)),
        inc,
        op(Instruction::with2(Code::Add_AL_imm8, Register::AL, 0x7f)),
        Instruction::with(Code::Sahf),
        op(Instruction::with1(Code::Pop_r64, Register::RAX)),
        op(Instruction::with2(Code::Lea_r64_m, Register::RSP, above)),
    ]
}

/// The bytes that open an emulated call ([`emulate_call`]): `call +1;
/// int3`, a real call over one byte, which takes the return address's
/// slot on the stack and pushes an entry on the processor's return stack.
pub(super) const CALL_OVER: [u8; 6] = [0xe8, 0x01, 0x00, 0x00, 0x00, 0xcc];

/// A call made of a push of its original return address and a jump, so
/// the return address stays in the original code.
///
/// The slot is taken by a real call ([`CALL_OVER`]), not by moving
/// `%rsp`: the callee's `ret` is then predicted from the entry that call
/// pushed on the return stack buffer. It mispredicts once (the entry is
/// the trampoline's, the return goes to the original code), but the
/// buffer stays in step with the stack. Without that entry the callee's
/// `ret` took its caller's, and every return after it up the stack was
/// mispredicted in turn (sqlite3's `xMalloc`/`xFree`/mutex calls through
/// `sqlite3GlobalConfig`: the return sites of the functions above them
/// held a third of its counting run's time beyond native).
pub(super) fn emulate_call(call: &Instruction) -> Option<Vec<Instruction>> {
    let ret = call.next_ip();
    let slot = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    // The return address is computed RIP-relative (through %rax, saved
    // below the new slot: at a call nothing live is below %rsp), so the
    // trampoline holds no absolute address and serves every load whose
    // area sits at the same distance from the module.
    let mut v = vec![
        Instruction::with_declare_byte(&CALL_OVER).ok()?,
        Instruction::with1(Code::Push_r64, Register::RAX).ok()?,
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RAX,
            MemoryOperand::with_base_displ(Register::RIP, ret as i64),
        )
        .ok()?,
        Instruction::with2(Code::Mov_rm64_r64, slot(8), Register::RAX).ok()?,
        Instruction::with1(Code::Pop_r64, Register::RAX).ok()?,
    ];
    match call.code() {
        Code::Call_rel32_64 => v.push(jmp(call.near_branch_target())),
        Code::Call_rm64 => {
            let mut j = *call;
            j.set_code(Code::Jmp_rm64);
            if j.op0_kind() == iced_x86::OpKind::Memory {
                if j.memory_index() == Register::RSP {
                    return None;
                }
                if j.memory_base() == Register::RSP {
                    j.set_memory_displacement64(j.memory_displacement64().wrapping_add(8));
                    j.set_memory_displ_size(4);
                }
            } else if j.op0_register() == Register::RSP {
                return None;
            }
            v.push(j);
        }
        _ => return None,
    }
    Some(v)
}

/// A bound on the bytes `list` encodes to anywhere in the area: branches
/// take their longest form; instructions made here (no length yet) at
/// most 9 bytes.
pub(super) fn bound(list: &[Instruction]) -> u64 {
    let mut n = 8;
    for x in list {
        n += match x.len() {
            0 => 9,
            l if matches!(
                x.mnemonic(),
                iced_x86::Mnemonic::Jrcxz
                    | iced_x86::Mnemonic::Jecxz
                    | iced_x86::Mnemonic::Loop
                    | iced_x86::Mnemonic::Loope
                    | iced_x86::Mnemonic::Loopne
            ) =>
            {
                l as u64 + 16
            }
            l if x.op0_kind() == iced_x86::OpKind::NearBranch64 => (l as u64).max(6),
            l => l as u64 + 4,
        };
    }
    n
}

pub(super) fn jmp(target: u64) -> Instruction {
    Instruction::with_branch(Code::Jmp_rel32_64, target).expect("jmp is valid")
}

/// Whether `x` is a count made by [`count_seq`] (an increment, or a hit
/// mode's store).
pub(super) fn is_count(x: &Instruction) -> bool {
    matches!(x.code(), Code::Inc_rm64 | Code::Mov_rm8_imm8)
        && x.segment_prefix() == Register::GS
        && x.memory_base() == Register::None
        && x.memory_index() == Register::None
}

/// Whether `x` is the `lea %gs:8*KEY, %rax` of a [`record_seq`].
pub(super) fn is_key(x: &Instruction) -> bool {
    x.code() == Code::Lea_r64_m
        && x.segment_prefix() == Register::GS
        && x.memory_base() == Register::None
        && x.memory_index() == Register::None
}

/// `list` encoded at `rip`; the offsets (from the start of the result) of
/// the displacements of its counts and of its sites' keys are added to `fixups` (plus `base`).
/// `list` with every instruction's own address cleared for the block
/// encoder, which otherwise takes an operand whose address is that of an
/// instruction of the list for a reference to it and moves it with the
/// copy: `lea -9(%rip),%rax` at a function's second instruction (its own
/// address, as CPython's `subtype_traverse` takes it) would give the
/// trampoline's address. Branch targets are placed by the caller
/// (`redirect`); memory operands keep their absolute targets.
pub(super) fn detached(list: &[Instruction]) -> Vec<Instruction> {
    list.iter()
        .map(|x| {
            let mut y = *x;
            y.set_ip(0);
            y
        })
        .collect()
}

/// The 32-bit fields of an encoding that a move must adjust.
#[derive(Default)]
pub(super) struct Fixups {
    /// Offsets of the displacements of its counts and sites' keys.
    pub counters: Vec<u32>,
    /// Offsets of the rel32 branch targets and RIP-relative
    /// displacements that reach outside the area (into the module).
    pub far: Vec<u32>,
    /// False when such a reference is not a 32-bit field (a branch that
    /// reached the module with rel8): the code cannot move.
    pub movable: bool,
}

/// `list` encoded at `rip`, and its [`Fixups`] (offsets from the start
/// of the result); `area` is the trampoline area's span, what is not in
/// it is the module's.
pub(super) fn enc_fix(
    list: &[Instruction],
    rip: u64,
    area: (u64, u64),
) -> Option<(Vec<u8>, Fixups)> {
    let list = &detached(list)[..];
    let opts = BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS
        | BlockEncoderOptions::RETURN_CONSTANT_OFFSETS;
    let r = BlockEncoder::encode(64, InstructionBlock::new(list, rip), opts).ok()?;
    let mut fx = Fixups {
        movable: true,
        ..Fixups::default()
    };
    let outside = |t: u64| t < area.0 || t >= area.1;
    for (k, x) in list.iter().enumerate() {
        let c = r.constant_offsets.get(k)?;
        let at = *r.new_instruction_offsets.get(k)?;
        if is_count(x) || is_key(x) {
            if at == u32::MAX || !c.has_displacement() || c.displacement_size() != 4 {
                return None;
            }
            fx.counters
                .push((u64::from(at) + c.displacement_offset() as u64) as u32);
            continue;
        }
        let field = if x.is_ip_rel_memory_operand() && outside(x.ip_rel_memory_address()) {
            c.has_displacement()
                .then(|| (c.displacement_offset(), c.displacement_size()))
        } else if matches!(
            x.op0_kind(),
            OpKind::NearBranch64 | OpKind::NearBranch32 | OpKind::NearBranch16
        ) && outside(x.near_branch_target())
        {
            c.has_immediate()
                .then(|| (c.immediate_offset(), c.immediate_size()))
        } else {
            continue;
        };
        match field {
            Some((o, 4)) if at != u32::MAX => {
                fx.far.push((u64::from(at) + o as u64) as u32);
            }
            _ => fx.movable = false,
        }
    }
    Some((r.code_buffer, fx))
}

#[cfg(test)]
pub(super) fn enc(list: &[Instruction], rip: u64) -> Option<Vec<u8>> {
    BlockEncoder::encode(
        64,
        InstructionBlock::new(&detached(list), rip),
        BlockEncoderOptions::NONE,
    )
    .ok()
    .map(|r| r.code_buffer)
}
