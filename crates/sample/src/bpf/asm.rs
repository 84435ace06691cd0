//! A tiny eBPF assembler with forward labels, and a disassembler for what
//! it emits.
//!
//! # Synopsis
//!
//! ```
//! use profdev_sample::bpf::asm::{disassemble, op, Asm, R0};
//!
//! let mut a = Asm::new();
//! let done = a.label();
//! a.jmp_imm(op::JEQ, R0, 0, done); // forward: resolved by `finish`
//! a.mov_imm(R0, 1);
//! a.bind(done);
//! a.exit();
//! let insns = a.finish().unwrap();
//! assert_eq!(insns[0].off, 1);
//! assert_eq!(
//!     disassemble(&insns),
//!     "   0: 15 00 01 00 00 00 00 00  if r0 == 0 goto +1 <2>\n\
//!     \x20  1: b7 00 00 00 01 00 00 00  r0 = 1\n\
//!     \x20  2: 95 00 00 00 00 00 00 00  exit\n"
//! );
//! ```
//!
//! # Description
//!
//! [`Insn`] is `struct bpf_insn` of `<linux/bpf.h>`: an opcode byte, the
//! destination register in the low nibble and the source register in the
//! high nibble of the second byte, a 16-bit signed offset and a 32-bit
//! signed immediate, little-endian ([`Insn::encode`]). The opcode is the
//! OR of the parts in [`op`]: class, size and mode for loads and stores,
//! class, operation and source (`K` immediate, `X` register) for ALU and
//! jumps.
//!
//! [`Asm`] appends instructions. A jump names a [`Label`] instead of an
//! offset; the label may be bound ([`Asm::bind`]) before or after the jump,
//! and [`Asm::finish`] patches every jump with `target - (jump + 1)`, the
//! offset the kernel adds to the next instruction's index. `ld_imm64`
//! takes two instruction slots and is counted as two. An unbound label, a
//! label bound twice, or an offset that does not fit 16 bits is an
//! [`AsmError`], never a wrong jump.
//!
//! [`disassemble`] prints one line per slot: index, the 8 bytes as given to
//! the kernel, and the instruction in the kernel verifier's notation
//! (`r2 += -4`, `*(u32 *)(r10 - 4) = r1`, `if r2 < r3 goto +8 <27>` with
//! the target index in angle brackets). The bytes make it exact, the text
//! makes it readable; an opcode outside the subset [`Asm`] emits is printed
//! as `.insn` with its fields.
//!
//! # Bugs
//!
//! * Only the instructions the kproftick program needs: 64-bit ALU, 32- and
//!   64-bit loads and stores, atomic add, conditional and unconditional
//!   jumps, helper calls and `ld_imm64` (a constant or a map descriptor).

use std::fmt::Write as _;

/// One eBPF instruction, `struct bpf_insn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode: the OR of parts of [`op`].
    pub code: u8,
    /// Destination register (0–10).
    pub dst: u8,
    /// Source register (0–10), or [`op::PSEUDO_MAP_FD`] in `ld_imm64`.
    pub src: u8,
    /// Memory offset, or jump offset in instructions.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

/// Opcode parts of `<linux/bpf.h>` and `<linux/bpf_common.h>`.
pub mod op {
    pub const LD: u8 = 0x00;
    pub const LDX: u8 = 0x01;
    pub const STX: u8 = 0x03;
    pub const ALU64: u8 = 0x07;
    pub const JMP: u8 = 0x05;
    pub const W: u8 = 0x00;
    pub const DW: u8 = 0x18;
    pub const IMM: u8 = 0x00;
    pub const MEM: u8 = 0x60;
    pub const ATOMIC: u8 = 0xc0;
    pub const K: u8 = 0x00;
    pub const X: u8 = 0x08;
    pub const ADD: u8 = 0x00;
    pub const SUB: u8 = 0x10;
    pub const LSH: u8 = 0x60;
    pub const RSH: u8 = 0x70;
    pub const AND: u8 = 0x50;
    pub const MOV: u8 = 0xb0;
    pub const JA: u8 = 0x00;
    pub const JEQ: u8 = 0x10;
    pub const JGE: u8 = 0x30;
    pub const JLT: u8 = 0xa0;
    pub const CALL: u8 = 0x80;
    pub const EXIT: u8 = 0x90;
    /// `BPF_PSEUDO_MAP_FD`: the ld_imm64 source register meaning "map fd".
    pub const PSEUDO_MAP_FD: u8 = 1;
    /// `BPF_FUNC_map_lookup_elem`.
    pub const FUNC_MAP_LOOKUP_ELEM: i32 = 1;
}

/// Register r0: helper return value, program return value.
pub const R0: u8 = 0;
/// Register r1: first helper argument; the context at entry.
pub const R1: u8 = 1;
/// Register r2: second helper argument.
pub const R2: u8 = 2;
/// Register r3: third helper argument.
pub const R3: u8 = 3;
/// Register r6: callee-saved.
pub const R6: u8 = 6;
/// Register r7: callee-saved.
pub const R7: u8 = 7;
/// Register r8: callee-saved.
pub const R8: u8 = 8;
/// Register r10: the read-only frame pointer (stack grows down from it).
pub const FP: u8 = 10;

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }
    /// `dst = imm` (64-bit, sign-extended).
    pub const fn mov_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(op::ALU64 | op::MOV | op::K, dst, 0, 0, imm)
    }
    /// `dst = src`.
    pub const fn mov_reg(dst: u8, src: u8) -> Insn {
        Insn::new(op::ALU64 | op::MOV | op::X, dst, src, 0, 0)
    }
    /// `dst OP= imm` (64-bit).
    pub const fn alu_imm(alu: u8, dst: u8, imm: i32) -> Insn {
        Insn::new(op::ALU64 | alu | op::K, dst, 0, 0, imm)
    }
    /// `dst OP= src` (64-bit).
    pub const fn alu_reg(alu: u8, dst: u8, src: u8) -> Insn {
        Insn::new(op::ALU64 | alu | op::X, dst, src, 0, 0)
    }
    /// `dst = *(size *)(src + off)`.
    pub const fn ldx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(op::LDX | op::MEM | size, dst, src, off, 0)
    }
    /// `*(size *)(dst + off) = src`.
    pub const fn stx(size: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(op::STX | op::MEM | size, dst, src, off, 0)
    }
    /// `lock *(size *)(dst + off) += src`.
    pub const fn atomic_add(size: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(op::STX | op::ATOMIC | size, dst, src, off, op::ADD as i32)
    }
    /// `if dst JOP imm goto pc + 1 + off`.
    pub const fn jmp_imm(jop: u8, dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(op::JMP | jop | op::K, dst, 0, off, imm)
    }
    /// `if dst JOP src goto pc + 1 + off`.
    pub const fn jmp_reg(jop: u8, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(op::JMP | jop | op::X, dst, src, off, 0)
    }
    /// `goto pc + 1 + off`.
    pub const fn ja(off: i16) -> Insn {
        Insn::new(op::JMP | op::JA, 0, 0, off, 0)
    }
    /// Call helper `func`.
    pub const fn call(func: i32) -> Insn {
        Insn::new(op::JMP | op::CALL, 0, 0, 0, func)
    }
    /// Return r0.
    pub const fn exit() -> Insn {
        Insn::new(op::JMP | op::EXIT, 0, 0, 0, 0)
    }
    /// `dst = imm64`: two instructions.
    pub const fn ld_imm64(dst: u8, imm: u64) -> [Insn; 2] {
        [
            Insn::new(op::LD | op::DW | op::IMM, dst, 0, 0, imm as u32 as i32),
            Insn::new(0, 0, 0, 0, (imm >> 32) as u32 as i32),
        ]
    }
    /// `dst = map` (the map's descriptor, resolved by the kernel at load).
    pub const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
        [
            Insn::new(op::LD | op::DW | op::IMM, dst, op::PSEUDO_MAP_FD, 0, fd),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }

    /// The 8 bytes of `struct bpf_insn` on a little-endian host
    /// (dst_reg in the low nibble).
    pub fn encode(&self) -> [u8; 8] {
        let off = self.off.to_le_bytes();
        let imm = self.imm.to_le_bytes();
        [
            self.code,
            (self.dst & 0xf) | (self.src << 4),
            off[0],
            off[1],
            imm[0],
            imm[1],
            imm[2],
            imm[3],
        ]
    }
}

/// The program's bytes, as handed to the kernel.
pub fn encode(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(Insn::encode).collect()
}

/// A jump target inside one [`Asm`], bound to an instruction index by
/// [`Asm::bind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// Why [`Asm::finish`] could not resolve the jumps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AsmError {
    /// A jump names a label that was never bound.
    #[error(
        "BPF assembler: the jump at instruction {at} goes to label {label}, which was never bound"
    )]
    Unbound {
        /// Index of the jump.
        at: usize,
        /// The label's number (in creation order).
        label: usize,
    },
    /// A label was bound twice.
    #[error("BPF assembler: label {label} is bound at instruction {first} and again at {second}")]
    Rebound {
        /// The label's number.
        label: usize,
        /// The first binding.
        first: usize,
        /// The second.
        second: usize,
    },
    /// The distance does not fit the 16-bit offset.
    #[error(
        "BPF assembler: the jump at instruction {at} to {target} is too far for a 16-bit offset"
    )]
    TooFar {
        /// Index of the jump.
        at: usize,
        /// Index of its target.
        target: usize,
    },
}

/// An instruction list under construction, with labels.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    /// Where each label is bound.
    labels: Vec<Option<usize>>,
    /// (jump index, label): offsets to patch in `finish`.
    fixups: Vec<(usize, Label)>,
    /// First error seen while binding, reported by `finish`.
    error: Option<AsmError>,
}

impl Asm {
    /// An empty program.
    pub fn new() -> Asm {
        Asm::default()
    }

    /// A new label, not yet bound.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Bind `l` to the next instruction appended.
    pub fn bind(&mut self, l: Label) {
        let here = self.insns.len();
        match self.labels[l.0] {
            None => self.labels[l.0] = Some(here),
            Some(first) => {
                self.error.get_or_insert(AsmError::Rebound {
                    label: l.0,
                    first,
                    second: here,
                });
            }
        }
    }

    /// Index of the next instruction appended.
    pub fn here(&self) -> usize {
        self.insns.len()
    }

    /// Append instructions as they are.
    pub fn raw(&mut self, insns: &[Insn]) -> &mut Asm {
        self.insns.extend_from_slice(insns);
        self
    }

    /// `dst = imm` (64-bit, sign-extended).
    pub fn mov_imm(&mut self, dst: u8, imm: i32) -> &mut Asm {
        self.raw(&[Insn::mov_imm(dst, imm)])
    }
    /// `dst = src`.
    pub fn mov_reg(&mut self, dst: u8, src: u8) -> &mut Asm {
        self.raw(&[Insn::mov_reg(dst, src)])
    }
    /// `dst OP= imm` (64-bit).
    pub fn alu_imm(&mut self, alu: u8, dst: u8, imm: i32) -> &mut Asm {
        self.raw(&[Insn::alu_imm(alu, dst, imm)])
    }
    /// `dst OP= src` (64-bit).
    pub fn alu_reg(&mut self, alu: u8, dst: u8, src: u8) -> &mut Asm {
        self.raw(&[Insn::alu_reg(alu, dst, src)])
    }
    /// `dst = *(size *)(src + off)`.
    pub fn ldx(&mut self, size: u8, dst: u8, src: u8, off: i16) -> &mut Asm {
        self.raw(&[Insn::ldx(size, dst, src, off)])
    }
    /// `*(size *)(dst + off) = src`.
    pub fn stx(&mut self, size: u8, dst: u8, src: u8, off: i16) -> &mut Asm {
        self.raw(&[Insn::stx(size, dst, src, off)])
    }
    /// `lock *(size *)(dst + off) += src`.
    pub fn atomic_add(&mut self, size: u8, dst: u8, src: u8, off: i16) -> &mut Asm {
        self.raw(&[Insn::atomic_add(size, dst, src, off)])
    }
    /// `dst = imm64` (two slots).
    pub fn ld_imm64(&mut self, dst: u8, imm: u64) -> &mut Asm {
        self.raw(&Insn::ld_imm64(dst, imm))
    }
    /// `dst = map` by descriptor (two slots).
    pub fn ld_map_fd(&mut self, dst: u8, fd: i32) -> &mut Asm {
        self.raw(&Insn::ld_map_fd(dst, fd))
    }
    /// Call helper `func`.
    pub fn call(&mut self, func: i32) -> &mut Asm {
        self.raw(&[Insn::call(func)])
    }
    /// Return r0.
    pub fn exit(&mut self) -> &mut Asm {
        self.raw(&[Insn::exit()])
    }

    fn jump(&mut self, insn: Insn, to: Label) -> &mut Asm {
        self.fixups.push((self.insns.len(), to));
        self.raw(&[insn])
    }
    /// `if dst JOP imm goto to`.
    pub fn jmp_imm(&mut self, jop: u8, dst: u8, imm: i32, to: Label) -> &mut Asm {
        self.jump(Insn::jmp_imm(jop, dst, imm, 0), to)
    }
    /// `if dst JOP src goto to`.
    pub fn jmp_reg(&mut self, jop: u8, dst: u8, src: u8, to: Label) -> &mut Asm {
        self.jump(Insn::jmp_reg(jop, dst, src, 0), to)
    }
    /// `goto to`.
    pub fn ja(&mut self, to: Label) -> &mut Asm {
        self.jump(Insn::ja(0), to)
    }

    /// Resolve every jump and return the instructions.
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        for &(at, label) in &self.fixups {
            let target = self.labels[label.0].ok_or(AsmError::Unbound { at, label: label.0 })?;
            let off = i16::try_from(target as i64 - (at as i64 + 1))
                .map_err(|_| AsmError::TooFar { at, target })?;
            self.insns[at].off = off;
        }
        Ok(self.insns)
    }
}

fn alu_name(alu: u8) -> Option<&'static str> {
    Some(match alu {
        op::ADD => "+=",
        op::SUB => "-=",
        op::LSH => "<<=",
        op::RSH => ">>=",
        op::AND => "&=",
        op::MOV => "=",
        _ => return None,
    })
}

fn jmp_name(jop: u8) -> Option<&'static str> {
    Some(match jop {
        op::JEQ => "==",
        op::JGE => ">=",
        op::JLT => "<",
        _ => return None,
    })
}

fn size_name(size: u8) -> Option<&'static str> {
    Some(match size {
        op::W => "u32",
        op::DW => "u64",
        _ => return None,
    })
}

/// `(rN + off)` / `(rN - off)`.
fn mem(reg: u8, off: i16) -> String {
    if off < 0 {
        format!("(r{reg} - {})", -i32::from(off))
    } else {
        format!("(r{reg} + {off})")
    }
}

/// One instruction's text; `second` is the slot after it (for ld_imm64).
/// Returns the text and the number of slots it takes.
fn text(at: usize, i: &Insn, second: Option<&Insn>) -> (String, usize) {
    let class = i.code & 0x07;
    let target = |off: i16| format!("{off:+} <{}>", at as i64 + 1 + i64::from(off));
    let one = |t: Option<String>| t.map(|t| (t, 1));
    let known =
        match class {
            op::ALU64 => one({
                let alu = i.code & 0xf0;
                alu_name(alu).map(|name| {
                    if i.code & op::X != 0 {
                        format!("r{} {name} r{}", i.dst, i.src)
                    } else {
                        format!("r{} {name} {}", i.dst, i.imm)
                    }
                })
            }),
            op::JMP => one({
                let jop = i.code & 0xf0;
                match jop {
                    op::JA if i.code == op::JMP | op::JA => Some(format!("goto {}", target(i.off))),
                    op::CALL => Some(match i.imm {
                        op::FUNC_MAP_LOOKUP_ELEM => "call map_lookup_elem".to_string(),
                        n => format!("call {n}"),
                    }),
                    op::EXIT => Some("exit".to_string()),
                    _ => jmp_name(jop).map(|name| {
                        let rhs = if i.code & op::X != 0 {
                            format!("r{}", i.src)
                        } else {
                            i.imm.to_string()
                        };
                        format!("if r{} {name} {rhs} goto {}", i.dst, target(i.off))
                    }),
                }
            }),
            op::LDX if i.code & 0xe0 == op::MEM => one(size_name(i.code & 0x18)
                .map(|t| format!("r{} = *({t} *){}", i.dst, mem(i.src, i.off)))),
            op::STX if i.code & 0xe0 == op::MEM => one(size_name(i.code & 0x18)
                .map(|t| format!("*({t} *){} = r{}", mem(i.dst, i.off), i.src))),
            op::STX if i.code & 0xe0 == op::ATOMIC && i.imm == i32::from(op::ADD) => {
                one(size_name(i.code & 0x18)
                    .map(|t| format!("lock *({t} *){} += r{}", mem(i.dst, i.off), i.src)))
            }
            op::LD if i.code == op::LD | op::DW | op::IMM => second.map(|hi| {
                let v = u64::from(i.imm as u32) | (u64::from(hi.imm as u32) << 32);
                let t = if i.src == op::PSEUDO_MAP_FD {
                    format!("r{} = map_fd {} ll", i.dst, i.imm)
                } else {
                    format!("r{} = {v:#x} ll", i.dst)
                };
                (t, 2)
            }),
            _ => None,
        };
    match known {
        Some((t, n)) => (t, n),
        None => (
            format!(
                ".insn code={:#04x} dst=r{} src=r{} off={} imm={}",
                i.code, i.dst, i.src, i.off, i.imm
            ),
            1,
        ),
    }
}

/// The disassembly: per slot, its index, its 8 bytes and its text.
pub fn disassemble(insns: &[Insn]) -> String {
    let mut out = String::new();
    let mut at = 0;
    while at < insns.len() {
        let (t, n) = text(at, &insns[at], insns.get(at + 1));
        for (k, i) in insns[at..at + n].iter().enumerate() {
            let hex: Vec<String> = i.encode().iter().map(|b| format!("{b:02x}")).collect();
            let t = if k == 0 { t.as_str() } else { "" };
            let _ = writeln!(out, "{:4}: {}  {t}", at + k, hex.join(" "));
        }
        at += n;
    }
    out.lines()
        .map(|l| l.trim_end().to_string() + "\n")
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_and_backward_labels_resolve() {
        let mut a = Asm::new();
        let top = a.label();
        let out = a.label();
        a.bind(top);
        a.jmp_imm(op::JEQ, R0, 0, out); // 0 -> 4
        a.ld_imm64(R1, 1); // 1, 2
        a.ja(top); // 3 -> 0
        a.bind(out);
        a.exit(); // 4
        let p = a.finish().unwrap();
        assert_eq!(p.len(), 5);
        assert_eq!(p[0].off, 3);
        assert_eq!(p[3].off, -4);
    }

    #[test]
    fn label_mistakes_are_errors() {
        let mut a = Asm::new();
        let l = a.label();
        a.ja(l);
        assert_eq!(a.finish(), Err(AsmError::Unbound { at: 0, label: 0 }));

        let mut a = Asm::new();
        let l = a.label();
        a.bind(l);
        a.exit();
        a.bind(l);
        assert_eq!(
            a.finish(),
            Err(AsmError::Rebound {
                label: 0,
                first: 0,
                second: 1
            })
        );

        let mut a = Asm::new();
        let l = a.label();
        a.ja(l);
        for _ in 0..40_000 {
            a.exit();
        }
        a.bind(l);
        a.exit();
        assert_eq!(
            a.finish(),
            Err(AsmError::TooFar {
                at: 0,
                target: 40_001
            })
        );
    }

    #[test]
    fn disassembler_prints_every_form_and_unknown_opcodes() {
        let p = [
            Insn::mov_reg(6, 1),
            Insn::mov_imm(1, -1),
            Insn::alu_imm(op::RSH, 2, 3),
            Insn::alu_reg(op::SUB, 2, 3),
            Insn::ldx(op::DW, 7, 6, 128),
            Insn::stx(op::W, 10, 1, -4),
            Insn::atomic_add(op::W, 0, 1, 4),
            Insn::jmp_reg(op::JGE, 2, 3, -2),
            Insn::call(7),
            Insn::new(0xff, 1, 2, 3, 4),
        ];
        let mut all = p.to_vec();
        all.extend(Insn::ld_imm64(3, 0xffff_ffff_8100_0030));
        let d = disassemble(&all);
        let text: Vec<&str> = d.lines().map(|l| l.get(31..).unwrap_or("")).collect();
        assert_eq!(
            text,
            [
                "r6 = r1",
                "r1 = -1",
                "r2 >>= 3",
                "r2 -= r3",
                "r7 = *(u64 *)(r6 + 128)",
                "*(u32 *)(r10 - 4) = r1",
                "lock *(u32 *)(r0 + 4) += r1",
                "if r2 >= r3 goto -2 <6>",
                "call 7",
                ".insn code=0xff dst=r1 src=r2 off=3 imm=4",
                "r3 = 0xffffffff81000030 ll",
                "",
            ]
        );
        assert!(d.starts_with("   0: bf 16 00 00 00 00 00 00  r6 = r1\n"));
        // A lone first half of ld_imm64 at the end is not decoded.
        let d = disassemble(&Insn::ld_imm64(3, 1)[..1]);
        assert!(d.contains(".insn code=0x18"), "{d}");
    }
}
