//! The BPF program each probe runs: count into its slot, or for a
//! conditional jump into the slot of the way it goes.

use super::*;

// The kprobe program's context: `struct pt_regs` of the x86_64 uapi
// `<asm/ptrace.h>`, as the sampler's BPF programs read it.
use profdev_sample::bpf::PtRegs;

/// Offset of the saved flags in the context.
pub const FLAGS_OFFSET: i16 = std::mem::offset_of!(PtRegs, eflags) as i16;
const _: () = assert!(FLAGS_OFFSET == 144);

/// `BPF_FUNC_get_attach_cookie`.
pub(super) const FUNC_GET_ATTACH_COOKIE: i32 = 174;
/// `BPF_OR` (the assembler's `op` has no name for it).
pub(super) const OR: u8 = 0x40;
/// The u32 key on the stack.
pub(super) const KEY_SLOT: i16 = -4;

/// The counting program for the map `map_fd`.
pub fn program(map_fd: i32) -> Vec<Insn> {
    let mut a = Asm::new();
    let out = a.label();
    // r6 = ctx; r7 = cookie; r8 = flags
    a.mov_reg(R6, R1)
        .call(FUNC_GET_ATTACH_COOKIE)
        .mov_reg(R7, R0);
    a.ldx(op::DW, R8, R6, FLAGS_OFFSET);
    // r2 = flags_index(r8)
    a.mov_reg(R2, R8).alu_imm(op::AND, R2, 1);
    for (shift, bit) in [(1, 2), (4, 4), (4, 8), (7, 16)] {
        a.mov_reg(R3, R8)
            .alu_imm(op::RSH, R3, shift)
            .alu_imm(op::AND, R3, bit)
            .alu_reg(OR, R2, R3);
    }
    // r3 = (table >> index) & 1
    a.mov_reg(R3, R7)
        .alu_imm(op::RSH, R3, 32)
        .alu_reg(op::RSH, R3, R2)
        .alu_imm(op::AND, R3, 1);
    // key = (u32)cookie + r3
    a.alu_imm(op::LSH, R7, 32)
        .alu_imm(op::RSH, R7, 32)
        .alu_reg(op::ADD, R7, R3)
        .stx(op::W, FP, R7, KEY_SLOT);
    a.ld_map_fd(R1, map_fd)
        .mov_reg(R2, FP)
        .alu_imm(op::ADD, R2, i32::from(KEY_SLOT))
        .call(op::FUNC_MAP_LOOKUP_ELEM);
    a.jmp_imm(op::JEQ, R0, 0, out);
    a.mov_imm(R1, 1).atomic_add(op::DW, R0, R1, 0);
    a.bind(out);
    a.mov_imm(R0, 0).exit();
    a.finish()
        .expect("the counting program binds every label once, within 16-bit jumps")
}
