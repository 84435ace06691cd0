//! Trampolines: a [`Plan`] made into code for one load of the module.
//!
//! Given the module's load bias, the address of the trampoline area the
//! runtime mapped (within ±2 GiB of the module) and the module's first
//! counter index, [`encode`] returns the area's bytes and the patches to
//! write into the module's code. A count is `incq %gs:8*INDEX`: each
//! thread's GS base is its own counter array (set by the runtime), so a
//! count is one unlocked instruction and no count is lost between threads.
//! Where the flags are live the count saves and restores them with
//! `lahf`/`seto` and `add`/`sahf` around it, below the red zone.
//!
//! **Reuse.** The code holds no absolute address: branches back into the
//! module and its RIP-relative operands are relative, and an emulated
//! call computes its return address RIP-relative. So one encoding serves
//! every load (in any process) whose area lies at the same distance from
//! the module's load bias: [`Encoded::code_for`] copies it with the
//! counters' displacements moved to another first counter (the only
//! relocation, listed in [`Encoded::counter_fixups`]), and
//! [`Encoded::patches_for`] moves the patches to the new bias and area.
//!
//! **Call targets** ([`Options::call_targets`], what `profdev gmon
//! --exact` asks for; off for `cprof` and `startcp`, whose code is then
//! exactly what it is without the option). Each indirect call (`call
//! *%reg`, `call *mem`, any addressing, with a segment prefix or not) and
//! each indirect jump that is not a recovered jump table (a possible tail
//! call through a pointer, [`Plan::tables`]) gets, in its trampoline just
//! before the instruction runs ([`record_seq`]): `lea -128(%rsp),%rsp`
//! (the red zone is the program's), `push %rax`, the target loaded into
//! `%rax` exactly as the instruction will load it (the same operand with
//! the registers of that moment; a RIP-relative operand re-encoded for the
//! copy's place; a `%rsp`-based one moved past the 136 bytes skipped and
//! pushed), `push %rax; lea %gs:8*KEY,%rax; push %rax; call *%gs:0`, and
//! everything undone; no instruction of it writes a flag. KEY is the
//! counter index of the site's block (relocated with the counts, listed
//! in [`Encoded::counter_fixups`]); `%gs:0` holds the runtime's recorder
//! in every thread's counter array (the first [`RESERVED_SLOTS`] slots are
//! not counters), which preserves every register and the flags and adds
//! one to the thread's own count of (KEY, target): no atomics, no lock.
//! Where the trampoline copies the block without its final call (the call
//! then runs in the original code, right after the trampoline jumps back)
//! the recording is the trampoline's last act, with the registers the call
//! will see; where it emulates the call (push of the return address and a
//! jump), the recording comes before the push; a block that is one `call
//! *disp(%rip)` records in its counting stub; a block the planner leaves
//! unpatched because its count derives from the fall-through before it
//! ([`How::Fell`]) gets a trampoline anyway when it ends in a site, entered
//! from the trampoline before it (still unpatched, its count still
//! derived). A site whose target cannot
//! be evaluated there (`call *%rsp`, a 32-bit address) is not recorded: its
//! calls stay counted, unattributed. Cost, measured: 5 to 7 ns per
//! recorded call (`profdev gmon --exact` of a loop of 10^8 calls through a
//! table of two functions: 0.8 to 1.0 s user against 0.3 s for `cprof -m`
//! of the same loop, which only counts; native 0.2 s; a loaded machine). The recorder saves the
//! flags with `seto`/`lahf` (with `pushfq`/`popfq` it cost 15 ns).

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Instruction,
    InstructionBlock, MemoryOperand, Register,
};

use crate::plan::{How, Plan};

/// What the runtime writes at one address of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patch {
    /// Run-time address.
    pub addr: u64,
    /// Run-time address of the trampoline it leads to.
    pub entry: u64,
    /// [`PATCH_JMP`], [`PATCH_INT3`], [`PATCH_CALL5`] or [`PATCH_CALL6`].
    pub kind: u32,
    /// Bytes overwritten (a jump fills the rest with `int3`).
    pub len: u32,
}

/// `jmp rel32` to `entry`, the rest of `len` bytes `int3`.
pub const PATCH_JMP: u32 = 1;
/// One `int3`; the SIGTRAP handler resumes at `entry`.
pub const PATCH_INT3: u32 = 2;
/// `call rel32` to `entry` (replacing a `call rel32`).
pub const PATCH_CALL5: u32 = 3;
/// `ds call rel32` to `entry` (replacing a 6-byte `call *disp(%rip)`).
pub const PATCH_CALL6: u32 = 4;

/// `jmp rel8` to `entry` (a nearby `jmp rel32`).
pub const PATCH_REL8: u32 = 5;

/// The area's code and the patches.
#[derive(Clone, Debug, Default)]
pub struct Encoded {
    /// The trampoline area's bytes, to be mapped at the area's address.
    pub code: Vec<u8>,
    /// Patches by address.
    pub patches: Vec<Patch>,
    /// Blocks the planner meant to count whose trampoline failed to encode.
    pub failed: u64,
    /// Blocks counted through a trap.
    pub trapped: u64,
    /// Indices of the blocks that failed (counted in `failed`).
    pub failed_blocks: Vec<usize>,
    /// Offsets in `code` of the 32-bit displacements of the counts
    /// (`incq %gs:DISP`) and of the recorded sites' keys (`lea
    /// %gs:DISP,%rax`), each `8 * (first counter + index)`.
    pub counter_fixups: Vec<u32>,
    /// The first counter the code was encoded for.
    pub first_counter: u64,
}

impl Encoded {
    /// The area's code for a load whose area lies at the same distance
    /// from the module as the one this was encoded for (every branch and
    /// RIP-relative operand between them is then unchanged: the code is
    /// position-independent), its counters from `first_counter`.
    pub fn code_for(&self, first_counter: u64) -> Vec<u8> {
        let mut code = self.code.clone();
        if first_counter != self.first_counter {
            let add = first_counter
                .wrapping_sub(self.first_counter)
                .wrapping_mul(8) as u32;
            for &o in &self.counter_fixups {
                let o = o as usize;
                let v = u32::from_le_bytes(code[o..o + 4].try_into().expect("4 bytes"));
                code[o..o + 4].copy_from_slice(&v.wrapping_add(add).to_le_bytes());
            }
        }
        code
    }

    /// The patches for a load at `bias` with its area at `area`, from an
    /// encoding made for `bias0` and `area0` (`area - bias == area0 -
    /// bias0`).
    pub fn patches_for(&self, bias0: u64, area0: u64, bias: u64, area: u64) -> Vec<Patch> {
        self.patches
            .iter()
            .map(|p| Patch {
                addr: p.addr.wrapping_sub(bias0).wrapping_add(bias),
                entry: if p.kind == PATCH_REL8 {
                    p.entry.wrapping_sub(bias0).wrapping_add(bias)
                } else {
                    p.entry.wrapping_sub(area0).wrapping_add(area)
                },
                ..*p
            })
            .collect()
    }
}

/// What the trampolines do beyond counting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Options {
    /// Record the target of every indirect call, and of every indirect
    /// jump whose jump table was not recovered (a possible tail call
    /// through a pointer: [`Plan::tables`]), with the registers of the
    /// moment it is made: see the module's "Call targets". Off, the code
    /// is exactly what it is without this option.
    pub call_targets: bool,
}

/// Counter slots the runtime keeps at the start of each thread's array
/// (its counter indices start at this): slot 0 holds the address of the
/// runtime's recording function (`call *%gs:0`).
pub const RESERVED_SLOTS: u64 = 8;

/// Bytes the recording sequence of one site adds, at most.
const RECORD_BYTES: u64 = 96;

/// A bound on the trampoline area's size for `plan`, in bytes.
pub fn area_size(plan: &Plan) -> u64 {
    area_size_with(plan, Options::default())
}

/// [`area_size`] for trampolines made with `opts`.
pub fn area_size_with(plan: &Plan, opts: Options) -> u64 {
    let mut n = 4096u64;
    if opts.call_targets {
        for b in plan.blocks.iter().filter(|b| ends_in_site(plan, b)) {
            n += RECORD_BYTES;
            if matches!(b.how, How::Fell { .. }) {
                n += 96 + 5 * (b.end - b.start);
            }
        }
    }
    for b in &plan.blocks {
        n += match b.how {
            How::Jmp { from, to, .. } => 96 + 5 * (to - from),
            How::Int3 { to } | How::Hop { to, .. } => 96 + 5 * (to - b.start),
            How::Call { .. } => 48,
            How::Covered => 48,
            How::None | How::Fell { .. } => 0,
        };
        if b.branch.is_some() {
            n += 48;
        }
    }
    n.div_ceil(4096) * 4096
}

/// The last instruction of `b`, decoded at its link-time address.
fn last_insn(plan: &Plan, b: &crate::plan::PlannedBlock) -> Option<Instruction> {
    let &last = b.insns.last()?;
    let bytes = plan.bytes(last, b.end.checked_sub(last)?)?;
    let x = Decoder::with_ip(64, bytes, last, DecoderOptions::NONE).decode();
    (x.code() != Code::INVALID).then_some(x)
}

/// Whether `x` (at its link-time address) is a site whose targets are
/// recorded: an indirect call, or an indirect jump that is not a
/// recovered jump table.
fn is_site(plan: &Plan, x: &Instruction, bias: u64) -> bool {
    match x.flow_control() {
        FlowControl::IndirectCall => true,
        FlowControl::IndirectBranch => plan
            .tables
            .binary_search(&x.ip().wrapping_sub(bias))
            .is_err(),
        _ => false,
    }
}

/// Whether block `b` ends in a site ([`is_site`]).
fn ends_in_site(plan: &Plan, b: &crate::plan::PlannedBlock) -> bool {
    last_insn(plan, b).is_some_and(|x| is_site(plan, &x, 0))
}

/// Whether the unpatched block `b` (How::Fell) gets a trampoline that
/// records its final site.
fn records_fell(plan: &Plan, b: &crate::plan::PlannedBlock, opts: Options) -> bool {
    opts.call_targets && ends_in_site(plan, b)
}

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
const SENTINEL: u64 = 0xffff_fff0_0000_0000;

fn count_seq(index: u64, flags_live: bool) -> Vec<Instruction> {
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

/// A call made of a push of its original return address and a jump, so
/// the return address stays in the original code.
fn emulate_call(call: &Instruction) -> Option<Vec<Instruction>> {
    let ret = call.next_ip();
    let slot = |d: i64| MemoryOperand::with_base_displ(Register::RSP, d);
    // The return address is computed RIP-relative (through %rax, saved
    // below the new slot: at a call nothing live is below %rsp), so the
    // trampoline holds no absolute address and serves every load whose
    // area sits at the same distance from the module.
    let mut v = vec![
        Instruction::with2(Code::Lea_r64_m, Register::RSP, slot(-8)).ok()?,
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
fn bound(list: &[Instruction]) -> u64 {
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

fn jmp(target: u64) -> Instruction {
    Instruction::with_branch(Code::Jmp_rel32_64, target).expect("jmp is valid")
}

/// Whether `x` is a count made by [`count_seq`].
fn is_count(x: &Instruction) -> bool {
    x.code() == Code::Inc_rm64
        && x.segment_prefix() == Register::GS
        && x.memory_base() == Register::None
        && x.memory_index() == Register::None
}

/// Whether `x` is the `lea %gs:8*KEY, %rax` of a [`record_seq`].
fn is_key(x: &Instruction) -> bool {
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
fn detached(list: &[Instruction]) -> Vec<Instruction> {
    list.iter()
        .map(|x| {
            let mut y = *x;
            y.set_ip(0);
            y
        })
        .collect()
}

fn enc_fix(list: &[Instruction], rip: u64, fixups: &mut Vec<u32>, base: u64) -> Option<Vec<u8>> {
    let list = &detached(list)[..];
    let counts = list.iter().any(|x| is_count(x) || is_key(x));
    let opts = if counts {
        BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS
            | BlockEncoderOptions::RETURN_CONSTANT_OFFSETS
    } else {
        BlockEncoderOptions::NONE
    };
    let r = BlockEncoder::encode(64, InstructionBlock::new(list, rip), opts).ok()?;
    if counts {
        for (k, x) in list.iter().enumerate() {
            let c = r.constant_offsets.get(k)?;
            let at = *r.new_instruction_offsets.get(k)?;
            if !is_count(x) && !is_key(x) {
                continue;
            }
            if at == u32::MAX || !c.has_displacement() || c.displacement_size() != 4 {
                return None;
            }
            fixups.push((base + u64::from(at) + c.displacement_offset() as u64) as u32);
        }
    }
    Some(r.code_buffer)
}

fn enc(list: &[Instruction], rip: u64) -> Option<Vec<u8>> {
    BlockEncoder::encode(
        64,
        InstructionBlock::new(&detached(list), rip),
        BlockEncoderOptions::NONE,
    )
    .ok()
    .map(|r| r.code_buffer)
}

/// One block's trampoline pieces, before layout.
struct Piece {
    block: usize,
    /// Stubs (taken edges, or a call's counting stub), then main part.
    stubs: Vec<Vec<Instruction>>,
    main: Vec<Instruction>,
}

/// The trampolines for `plan` loaded at `bias`, the area at `area`, the
/// module's counters from `first_counter`.
pub fn encode(plan: &Plan, bias: u64, area: u64, first_counter: u64) -> Encoded {
    encode_with(plan, bias, area, first_counter, Options::default())
}

/// [`encode`], with what `opts` adds (its area sized by
/// [`area_size_with`]).
pub fn encode_with(
    plan: &Plan,
    bias: u64,
    area: u64,
    first_counter: u64,
    opts: Options,
) -> Encoded {
    // The recording of the site ending the block holding `x` (run-time
    // address), when wanted.
    let record = |x: &Instruction| -> Option<Vec<Instruction>> {
        if !opts.call_targets || !is_site(plan, x, bias) {
            return None;
        }
        let link = x.ip().wrapping_sub(bias);
        let i = plan
            .blocks
            .partition_point(|b| b.start <= link)
            .checked_sub(1)?;
        record_seq(x, first_counter + i as u64)
    };
    let nblocks = plan.blocks.len() as u64;
    let decode = |from: u64, to: u64| -> Option<Vec<Instruction>> {
        let bytes = plan.bytes(from, to - from)?;
        let mut d = Decoder::with_ip(64, bytes, from + bias, DecoderOptions::NONE);
        let mut v = Vec::new();
        while d.can_decode() {
            let x = d.decode();
            if x.code() == Code::INVALID {
                return None;
            }
            v.push(x);
        }
        Some(v)
    };
    // Build each block's instruction lists with placeholder targets; the
    // stub of a taken edge is referenced by the jcc through its address,
    // filled in at layout.
    let mut pieces = Vec::new();
    let mut failed = 0;
    let mut failed_blocks = Vec::new();
    for (i, b) in plan.blocks.iter().enumerate() {
        let counter = first_counter + i as u64;
        // A block left unpatched because it takes its count from the
        // fall-through of the block before it (How::Fell) and ending in a
        // site gets a trampoline all the same, for the recording, reached
        // from the trampoline before it (which jumps there by `entry`);
        // still unpatched, its count still derived, nothing lost if it
        // cannot be made.
        let fell_site = matches!(b.how, How::Fell { .. }) && records_fell(plan, b, opts);
        let how = if fell_site {
            How::Int3 { to: b.end }
        } else {
            b.how
        };
        let piece = match how {
            How::None | How::Fell { .. } => continue,
            How::Call { .. } => (|| {
                let x = decode(b.start, b.end)?.pop()?;
                let mut stub = count_seq(counter, false);
                stub.extend(record(&x).into_iter().flatten());
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
            })(),
            How::Jmp { to, .. } | How::Int3 { to } | How::Hop { to, .. } => (|| {
                let from = match how {
                    How::Jmp { from, .. } => from,
                    _ => b.start,
                };
                let mut copied = decode(from, to)?;
                let last_uncond = copied.last().is_some_and(|x| {
                    matches!(
                        x.flow_control(),
                        FlowControl::UnconditionalBranch
                            | FlowControl::IndirectBranch
                            | FlowControl::Return
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
                    let mut v = record(&call).unwrap_or_default();
                    v.extend(emulate_call(&call)?);
                    emulated = Some(v);
                }
                let mut main = count_seq(counter, b.flags_live);
                let stubs = Vec::new();
                for x in copied {
                    let link = x.ip() - bias;
                    if link != from {
                        // A block the window runs into: count it here.
                        if let Some(c) = plan.block_at(link) {
                            main.extend(count_seq(
                                first_counter + c as u64,
                                plan.blocks[c].flags_live,
                            ));
                        }
                    }
                    let mut fell = None;
                    if x.flow_control() == FlowControl::ConditionalBranch {
                        let c = plan.blocks.partition_point(|k| k.start <= link) - 1;
                        let cb = &plan.blocks[c];
                        let derived = cb.branch.and_then(|j| plan.fell_from[j as usize]);
                        if let (Some(j), true, None) =
                            (cb.branch, cb.end == x.next_ip() - bias, derived)
                        {
                            let (_, live) = plan.branches[j as usize];
                            fell = Some(count_seq(first_counter + nblocks + u64::from(j), live));
                        }
                    }
                    if x.flow_control() == FlowControl::IndirectBranch {
                        main.extend(record(&x).into_iter().flatten());
                    }
                    main.push(x);
                    main.extend(fell.into_iter().flatten());
                }
                match emulated {
                    Some(v) => main.extend(v),
                    None if !last_uncond => {
                        // The window stops before its block's final call,
                        // run in the original code: record its target
                        // here (the registers are those it will see).
                        if opts.call_targets && plan.block_at(to).is_none() {
                            let k = plan.blocks.partition_point(|k| k.start <= to);
                            let end = k.checked_sub(1).map_or(to, |k| plan.blocks[k].end);
                            let call = (end > to)
                                .then(|| decode(to, end))
                                .flatten()
                                .and_then(|v| v.into_iter().next())
                                .filter(|c| c.flow_control() == FlowControl::IndirectCall);
                            if let Some(c) = call {
                                main.extend(record(&c).into_iter().flatten());
                            }
                        }
                        main.push(jmp(to + bias));
                    }
                    None => {}
                }
                Some(Piece {
                    block: i,
                    stubs,
                    main,
                })
            })(),
            How::Covered => continue,
        };
        match piece {
            Some(p) => pieces.push(p),
            None if fell_site => {}
            None => {
                failed += 1;
                failed_blocks.push(i);
            }
        }
    }
    // Sizes: a bound per piece, without encoding.
    const STUB: u64 = 48;
    // (A stub holding a recording is longer than STUB.)
    let stub_size = |p: &Piece| -> u64 {
        p.stubs
            .iter()
            .map(|s| bound(s).max(STUB))
            .max()
            .unwrap_or(STUB)
    };
    let slots: Vec<(u64, u64)> = pieces
        .iter()
        .map(|p| {
            let stub = stub_size(p) * p.stubs.len() as u64;
            let main = if p.main.is_empty() { 0 } else { bound(&p.main) };
            (stub, main)
        })
        .collect();

    // Layout: entries of every block.
    let mut entry = rustc_hash::FxHashMap::default();
    let mut at = area;
    let mut places = Vec::with_capacity(pieces.len());
    for (p, (s, m)) in pieces.iter().zip(&slots) {
        let b = &plan.blocks[p.block];
        let stub_at = at;
        let main_at = at + s;
        let e = if matches!(b.how, How::Call { .. }) {
            stub_at
        } else {
            main_at
        };
        // Only a block whose patch sits at its start can be entered
        // through its trampoline from another one.
        match b.how {
            How::Int3 { .. } | How::Hop { .. } => {
                entry.insert(b.start + bias, e);
            }
            How::Fell { .. } => {
                entry.insert(b.start + bias, e);
            }
            How::Jmp { from, .. } if from == b.start => {
                entry.insert(b.start + bias, e);
            }
            _ => {}
        }
        places.push((stub_at, main_at, e));
        at = main_at + m;
    }
    let redirect = |t: u64| entry.get(&t).copied().unwrap_or(t);
    // Pass 2: encode in place with redirected targets.
    let mut code = vec![0xCCu8; (at - area) as usize];
    let mut patches = Vec::new();
    let mut trapped = 0;
    let mut counter_fixups = Vec::new();
    for ((p, (_, m)), (stub_at, main_at, e)) in pieces.into_iter().zip(&slots).zip(&places) {
        let b = &plan.blocks[p.block];
        let ssize = stub_size(&p);
        let main = p.main;
        let mut ok = true;
        for (k, mut stub) in p.stubs.into_iter().enumerate() {
            let at = *stub_at + ssize * k as u64;
            let last = stub.len() - 1;
            if stub[last].code() == Code::Jmp_rel32_64 {
                let t = redirect(stub[last].near_branch_target());
                stub[last].set_near_branch64(t);
            }
            let mut fx = Vec::new();
            match enc_fix(&stub, at, &mut fx, at - area) {
                Some(c) if c.len() as u64 <= ssize => {
                    let off = (at - area) as usize;
                    code[off..off + c.len()].copy_from_slice(&c);
                    counter_fixups.extend(fx);
                }
                _ => ok = false,
            }
        }
        if ok && !main.is_empty() {
            let mut tries = vec![];
            let mut redirected = main.clone();
            for x in redirected.iter_mut() {
                let t = x.near_branch_target();
                if x.op0_kind() == iced_x86::OpKind::NearBranch64 && t >= SENTINEL {
                    x.set_near_branch64(*stub_at + ssize * (t - SENTINEL));
                } else if matches!(
                    x.flow_control(),
                    FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
                ) && matches!(x.op0_kind(), iced_x86::OpKind::NearBranch64)
                {
                    let t = redirect(x.near_branch_target());
                    x.set_near_branch64(t);
                }
            }
            tries.push(redirected);
            drop(main);
            ok = false;
            for t in &tries {
                let mut fx = Vec::new();
                if let Some(c) = enc_fix(t, *main_at, &mut fx, *main_at - area) {
                    if c.len() as u64 <= *m {
                        let off = (*main_at - area) as usize;
                        code[off..off + c.len()].copy_from_slice(&c);
                        counter_fixups.extend(fx);
                        ok = true;
                        break;
                    }
                }
            }
        }
        if !ok {
            // Other trampolines may lead here: go on, uncounted, in the
            // original code (left unpatched).
            if !matches!(b.how, How::Fell { .. }) {
                failed += 1;
                failed_blocks.push(p.block);
            }
            if let Some(c) = enc(&[jmp(b.start + bias)], *e) {
                let off = (*e - area) as usize;
                code[off..off + c.len()].copy_from_slice(&c);
            }
            continue;
        }
        let (kind, addr, len) = match b.how {
            How::Jmp {
                from, overwrite, ..
            } => (PATCH_JMP, from, overwrite),
            How::Int3 { .. } => {
                trapped += 1;
                (PATCH_INT3, b.start, 1)
            }
            How::Hop { slot, .. } => {
                patches.push(Patch {
                    addr: slot + bias,
                    entry: *e,
                    kind: PATCH_JMP,
                    len: 5,
                });
                patches.push(Patch {
                    addr: b.start + bias,
                    entry: slot + bias,
                    kind: PATCH_REL8,
                    len: 2,
                });
                continue;
            }
            How::Call { len: 5 } => (PATCH_CALL5, b.start, 5),
            How::Call { .. } => (PATCH_CALL6, b.start, 6),
            How::None | How::Covered | How::Fell { .. } => continue,
        };
        patches.push(Patch {
            addr: addr + bias,
            entry: *e,
            kind,
            len,
        });
    }
    patches.sort_by_key(|p| p.addr);
    Encoded {
        code,
        patches,
        failed,
        trapped,
        failed_blocks,
        counter_fixups,
        first_counter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan of real code: this test binary's own.
    fn own_plan() -> Plan {
        let exe = std::env::current_exe().expect("the test binary's path");
        Plan::of_file(&exe).expect("the test binary plans")
    }

    #[test]
    fn one_encoding_serves_another_load_at_the_same_offset() {
        let plan = own_plan();
        let (bias1, area1, first1) = (0x5555_0000_0000u64, 0x5555_4000_0000u64, 0u64);
        let (bias2, area2, first2) = (0x7f12_3456_0000u64, 0x7f12_7456_0000u64, 12_345u64);
        assert_eq!(area1 - bias1, area2 - bias2);
        let once = encode(&plan, bias1, area1, first1);
        let fresh = encode(&plan, bias2, area2, first2);
        assert!(!once.counter_fixups.is_empty());
        assert!(once.patches.len() > 1000, "{} patches", once.patches.len());
        assert_eq!(once.failed, fresh.failed);
        assert_eq!(once.code_for(first2), fresh.code, "code relocated");
        assert_eq!(
            once.patches_for(bias1, area1, bias2, area2),
            fresh.patches,
            "patches relocated"
        );
        // And back, from an encoding with a non-zero first counter.
        assert_eq!(fresh.code_for(first1), once.code);
    }

    #[test]
    fn an_encoding_recording_call_targets_serves_another_load_too() {
        // The sites' keys are relocated with the counts.
        let plan = own_plan();
        let on = Options { call_targets: true };
        let (bias1, area1, first1) = (0x5555_0000_0000u64, 0x5555_4000_0000u64, 8u64);
        let (bias2, area2, first2) = (0x7f12_3456_0000u64, 0x7f12_7456_0000u64, 12_345u64);
        let once = encode_with(&plan, bias1, area1, first1, on);
        let fresh = encode_with(&plan, bias2, area2, first2, on);
        let plain = encode(&plan, bias1, area1, first1);
        assert!(once.code.len() as u64 <= area_size_with(&plan, on));
        assert!(
            once.counter_fixups.len() > plain.counter_fixups.len() + 100,
            "{} fixups with call targets, {} without",
            once.counter_fixups.len(),
            plain.counter_fixups.len()
        );
        assert_eq!(once.failed, plain.failed, "recording costs no block");
        assert_eq!(once.code_for(first2), fresh.code, "code relocated");
        // `call *%gs:0`, the recorder's call: only with the option.
        let recorder_call = [0x65, 0xff, 0x14, 0x25, 0, 0, 0, 0];
        let calls = |code: &[u8]| code.windows(8).filter(|w| *w == recorder_call).count();
        assert!(calls(&once.code) > 100, "{} recordings", calls(&once.code));
        assert_eq!(calls(&plain.code), 0);
    }

    #[test]
    fn another_offset_changes_the_code() {
        // The code is only reusable at the same offset: branches into the
        // module are relative to the area.
        let plan = own_plan();
        let a = encode(&plan, 0x5555_0000_0000, 0x5555_4000_0000, 0);
        let b = encode(&plan, 0x5555_0000_0000, 0x5555_5000_0000, 0);
        assert_ne!(a.code, b.code);
    }

    // The recorder the sequences call in `the_recorded_target_is_the_real_one`:
    // it stores the key and the target in slots 1 and 2 of the thread's
    // GS array, and clobbers only %rax (which the sequence restores).
    std::arch::global_asm!(
        ".globl profdev_test_recorder",
        "profdev_test_recorder:",
        "mov rax, [rsp + 8]",
        "mov qword ptr gs:[8], rax",
        "mov rax, [rsp + 16]",
        "mov qword ptr gs:[16], rax",
        "ret",
    );

    extern "C" {
        fn profdev_test_recorder();
    }

    /// Run the recording sequence of the call or jump `x` (encoded at
    /// `ip` and decoded again, as the encoder sees code) with %rsi, %rdx
    /// and %rax as given and `stack` just above the return address of
    /// the call into it (what `8(%rsp)` reads at the site): the key and
    /// target recorded, and whether %rax, %rsp and the flags came back.
    fn record(
        x: Instruction,
        ip: u64,
        area: &mut [u8],
        rsi: u64,
        rdx: u64,
        stack: u64,
    ) -> (u64, u64) {
        let bytes = enc(&[x], ip).expect("the site encodes");
        let site = Decoder::with_ip(64, &bytes, ip, DecoderOptions::NONE).decode();
        assert_eq!(site.code(), x.code());
        let mut seq = record_seq(&site, 5).expect("a recording");
        seq.push(Instruction::with(Code::Retnq));
        let at = area.as_ptr() as u64;
        let code = BlockEncoder::encode(
            64,
            InstructionBlock::new(&seq, at),
            BlockEncoderOptions::NONE,
        )
        .map(|r| r.code_buffer)
        .unwrap_or_else(|e| panic!("{e}: {seq:?}"));
        area[..code.len()].copy_from_slice(&code);
        let page = area.len();
        // SAFETY: `area` is a page-aligned mapping of ours; made
        // executable for the call below, then writable again.
        unsafe {
            assert_eq!(
                libc::mprotect(
                    area.as_mut_ptr().cast(),
                    page,
                    libc::PROT_READ | libc::PROT_EXEC
                ),
                0
            );
        }
        let mut gs = [0u64; 4];
        gs[0] = profdev_test_recorder as *const () as u64;
        let mut old_gs = 0u64;
        let (rax_in, mut rax_out) = (0x1234_5678_9abc_def0u64, 0u64);
        let (mut f0, mut f1, mut sp0, mut sp1): (u64, u64, u64, u64);
        // SAFETY: arch_prctl on this thread's GS base (Rust does not use
        // GS), restored below; the called code is the sequence encoded
        // above, which returns with every register but the ones declared
        // here as they were.
        unsafe {
            assert_eq!(
                libc::syscall(libc::SYS_arch_prctl, 0x1004, &mut old_gs as *mut u64),
                0
            );
            assert_eq!(
                libc::syscall(libc::SYS_arch_prctl, 0x1001, gs.as_mut_ptr()),
                0
            );
            std::arch::asm!(
                "stc",
                "pushfq",
                "pop {f0}",
                "mov {sp0}, rsp",
                "push {stack}",
                "call {code}",
                "lea rsp, [rsp + 8]",
                "mov {sp1}, rsp",
                "pushfq",
                "pop {f1}",
                code = in(reg) at,
                stack = in(reg) stack,
                f0 = out(reg) f0,
                f1 = out(reg) f1,
                sp0 = out(reg) sp0,
                sp1 = out(reg) sp1,
                in("rsi") rsi,
                in("rdx") rdx,
                inout("rax") rax_in => rax_out,
            );
            assert_eq!(libc::syscall(libc::SYS_arch_prctl, 0x1001, old_gs), 0);
            assert_eq!(
                libc::mprotect(
                    area.as_mut_ptr().cast(),
                    page,
                    libc::PROT_READ | libc::PROT_WRITE
                ),
                0
            );
        }
        assert_eq!(rax_out, rax_in, "%rax restored");
        assert_eq!(sp1, sp0, "%rsp restored");
        assert_eq!(f1, f0, "flags untouched");
        (gs[1], gs[2])
    }

    #[test]
    fn the_recorded_target_is_the_real_one() {
        use iced_x86::MemoryOperand as M;
        // One page for the code, one readable page holding the pointers.
        // SAFETY: a fresh private anonymous mapping, unmapped at the end.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: the mapping above, 8192 bytes, ours alone.
        let (area, data) =
            unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), 8192) }.split_at_mut(4096);
        let data_at = data.as_ptr() as u64;
        let words = |k: usize| data_at + 8 * k as u64;
        for (k, w) in data.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&(0x7000_0000_0000u64 + 0x10 * k as u64).to_le_bytes());
        }
        let value = |k: usize| 0x7000_0000_0000u64 + 0x10 * k as u64;
        let call = |m: M| Instruction::with1(Code::Call_rm64, m).unwrap();
        let ip = area.as_ptr() as u64 + 2048; // where the site "is"
        let key = 8 * 5;
        // Register.
        let x = Instruction::with1(Code::Call_rm64, Register::RSI).unwrap();
        assert_eq!(record(x, ip, area, 0x4242_4242, 0, 0), (key, 0x4242_4242));
        // [reg+disp]
        let x = call(M::with_base_displ(Register::RSI, 0x10));
        assert_eq!(record(x, ip, area, words(3) - 0x10, 0, 0), (key, value(3)));
        // [rip+disp]: re-encoded for the copy's place.
        let x = call(M::with_base_displ(Register::RIP, words(7) as i64));
        assert_eq!(record(x, ip, area, 0, 0, 0), (key, value(7)));
        // [rsp+disp]: past what the sequence pushes.
        let x = call(M::with_base_displ(Register::RSP, 8));
        assert_eq!(record(x, ip, area, 0, 0, 0xfeed_f00d), (key, 0xfeed_f00d));
        // [base+index*scale+disp]
        let x = call(M::new(
            Register::RSI,
            Register::RDX,
            8,
            8,
            1,
            false,
            Register::None,
        ));
        assert_eq!(record(x, ip, area, words(2), 4, 0), (key, value(7)));
        // [index*scale+disp], no base.
        let x = call(M::new(
            Register::None,
            Register::RDX,
            8,
            0x48,
            4,
            false,
            Register::None,
        ));
        assert_eq!(record(x, ip, area, 0, words(0) / 8, 0), (key, value(9)));
        // A segment prefix: %fs (the thread pointer: its word 0 is itself).
        let fs0: u64;
        // SAFETY: reads the TCB's self pointer, as glibc does.
        unsafe { std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) fs0) };
        let x = call(M::new(
            Register::None,
            Register::None,
            1,
            0,
            4,
            false,
            Register::FS,
        ));
        assert_eq!(record(x, ip, area, 0, 0, 0), (key, fs0));
        // A tail call through a pointer: `jmp *0x10(%rsi)`.
        let x =
            Instruction::with1(Code::Jmp_rm64, M::with_base_displ(Register::RSI, 0x10)).unwrap();
        assert_eq!(
            record(x, ip, area, words(11) - 0x10, 0, 0),
            (key, value(11))
        );
        // `call *%rsp` cannot be evaluated there: no recording.
        let x = Instruction::with1(Code::Call_rm64, Register::RSP).unwrap();
        assert!(record_seq(&x, 5).is_none());
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(map, 8192) };
    }
}
