//! Conditions (which way a `jcc` goes for saved flags) and which
//! instructions a uprobe takes (emulated or single-stepped).

use super::*;

/// x86 EFLAGS bits the conditions read.
pub(super) const CF: u64 = 1 << 0;
pub(super) const PF: u64 = 1 << 2;
pub(super) const ZF: u64 = 1 << 6;
pub(super) const SF: u64 = 1 << 7;
pub(super) const OF: u64 = 1 << 11;

/// The index of `eflags` in a [`truth_table`]: CF, PF, ZF, SF, OF as
/// bits 0 to 4. The BPF program computes the same (see [`program`]).
pub fn flags_index(eflags: u64) -> u32 {
    ((eflags & CF)
        | ((eflags >> 1) & 2)
        | ((eflags >> 4) & 4)
        | ((eflags >> 4) & 8)
        | ((eflags >> 7) & 16)) as u32
}

/// Whether a `jcc` with condition code `cc` (the low nibble of its
/// opcode, 0 = O … 15 = G) jumps under `eflags`.
pub fn taken(cc: u8, eflags: u64) -> bool {
    let f = |bit: u64| eflags & bit != 0;
    let base = match (cc >> 1) & 7 {
        0 => f(OF),
        1 => f(CF),
        2 => f(ZF),
        3 => f(CF) || f(ZF),
        4 => f(SF),
        5 => f(PF),
        6 => f(SF) != f(OF),
        _ => f(ZF) || (f(SF) != f(OF)),
    };
    base ^ (cc & 1 == 1)
}

/// The jump's answer for every flags index: bit `i` is [`taken`] under
/// flags whose [`flags_index`] is `i`.
pub fn truth_table(cc: u8) -> u32 {
    (0..32u32).fold(0, |t, i| t | (u32::from(taken(cc, flags_of(i))) << i))
}

/// The flags whose [`flags_index`] is `index` (0 to 31), no other bit set.
pub fn flags_of(index: u32) -> u64 {
    [CF, PF, ZF, SF, OF]
        .iter()
        .enumerate()
        .filter(|(k, _)| index >> k & 1 == 1)
        .fold(0, |f, (_, bit)| f | bit)
}

// ---------------------------------------------------------------------
// Which instructions a uprobe takes

/// One row per 16 opcodes, as the kernel's tables are written
/// (arch/x86/kernel/uprobes.c, `good_insns_64`).
pub(super) const GOOD_1BYTE: [&str; 16] = [
    "1111110011111101", // 00
    "1111110011111100", // 10
    "1111111011111110", // 20
    "1111111011111110", // 30
    "1111111111111111", // 40
    "1111111111111111", // 50
    "0001111111110000", // 60
    "1111111111111111", // 70
    "1101111111111111", // 80
    "1111111111011111", // 90
    "1111111111111111", // a0
    "1111111111111111", // b0
    "1111111111110000", // c0
    "1111000111111111", // d0
    "1111000011010000", // e0
    "1011011111001111", // f0
];

/// `good_2byte_insns`: opcodes after `0f`.
pub(super) const GOOD_2BYTE: [&str; 16] = [
    "0011100000101111", // 00
    "1111111111111111", // 10
    "1111111111111111", // 20
    "0111001011111111", // 30
    "1111111111111111", // 40
    "1111111111111111", // 50
    "1111111111111111", // 60
    "1111111100111111", // 70
    "1111111111111111", // 80
    "1111111111111111", // 90
    "1111111111111101", // a0
    "1111111111111111", // b0
    "1111111111111111", // c0
    "1111111111111111", // d0
    "1111111111111111", // e0
    "1111111111111111", // f0
];

pub(super) fn good(table: &[&str; 16], opcode: u32) -> bool {
    let (row, col) = ((opcode >> 4) as usize & 15, opcode as usize & 15);
    table[row].as_bytes()[col] == b'1'
}

/// The legacy prefixes at the start of `bytes`.
pub(super) fn prefixes(bytes: &[u8]) -> &[u8] {
    let n = bytes
        .iter()
        .take_while(|b| {
            matches!(
                b,
                0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf0 | 0xf2 | 0xf3
            )
        })
        .count();
    &bytes[..n]
}

/// Would the kernel put a uprobe on `x` (whose bytes are `bytes`)? A
/// conservative mirror of `uprobe_init_insn` and `branch_setup_xol_ops`:
/// never yes where the kernel says no.
pub fn probeable(x: &Instruction, bytes: &[u8]) -> bool {
    if x.is_invalid() || x.code() == iced_x86::Code::Int3 {
        return false;
    }
    let pre = prefixes(bytes);
    if pre
        .iter()
        .any(|b| matches!(b, 0x26 | 0x2e | 0x36 | 0x3e | 0xf0))
    {
        return false;
    }
    if x.mnemonic() == Mnemonic::Mov
        && x.op0_kind() == OpKind::Register
        && x.op0_register() == Register::SS
    {
        return false;
    }
    let near = x.op_count() > 0 && x.op0_kind() == OpKind::NearBranch64;
    if near && pre.contains(&0x66) {
        return false;
    }
    if x.encoding() != EncodingKind::Legacy {
        return false;
    }
    match opcode(bytes) {
        Some(Opcode::One(o)) => good(&GOOD_1BYTE, u32::from(o)),
        Some(Opcode::Two(o)) => good(&GOOD_2BYTE, u32::from(o)),
        None => false,
    }
}

/// A legacy instruction's opcode: one byte, or `0f` and one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Opcode {
    One(u8),
    Two(u8),
}

/// The opcode after the prefixes and REX (`None` for three-byte opcodes
/// and what is cut short).
pub(super) fn opcode(bytes: &[u8]) -> Option<Opcode> {
    let mut rest = &bytes[prefixes(bytes).len()..];
    if let Some(b) = rest.first() {
        if b & 0xf0 == 0x40 {
            rest = &rest[1..];
        }
    }
    match rest {
        [0x0f, 0x38 | 0x3a, ..] => None,
        [0x0f, o, ..] => Some(Opcode::Two(*o)),
        [o, ..] => Some(Opcode::One(*o)),
        [] => None,
    }
}

/// The condition code of a `jcc` (`70`–`7f`, `0f 80`–`0f 8f`).
pub(super) fn jcc(x: &Instruction, bytes: &[u8]) -> Option<u8> {
    if x.encoding() != EncodingKind::Legacy || x.flow_control() != FlowControl::ConditionalBranch {
        return None;
    }
    match opcode(bytes)? {
        Opcode::One(o @ 0x70..=0x7f) | Opcode::Two(o @ 0x80..=0x8f) => Some(o & 15),
        _ => None,
    }
}

/// Does the kernel emulate `x` (no single step)? Direct jumps and calls,
/// `jcc`, nops and register pushes.
pub(super) fn emulated(x: &Instruction, bytes: &[u8]) -> bool {
    let near = x.op_count() > 0 && x.op0_kind() == OpKind::NearBranch64;
    match x.flow_control() {
        FlowControl::UnconditionalBranch | FlowControl::Call => near,
        FlowControl::ConditionalBranch => jcc(x, bytes).is_some(),
        _ => {
            x.mnemonic() == Mnemonic::Nop
                || (x.mnemonic() == Mnemonic::Push && x.op0_kind() == OpKind::Register)
        }
    }
}

pub(super) fn ends_process(x: &Instruction) -> bool {
    matches!(
        x.mnemonic(),
        Mnemonic::Syscall | Mnemonic::Sysenter | Mnemonic::Int | Mnemonic::Hlt | Mnemonic::Ud2
    )
}
