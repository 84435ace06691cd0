//! The uprobe fallback: exact counts of a statically linked program
//! (which the loader-based engine cannot reach) through one multi-uprobe
//! BPF link.
//!
//! # Synopsis
//!
//! ```no_run
//! use profdev_coverage::uprobe::{Counter, Probes};
//!
//! let probes = Probes::of_file("/proc/4242/exe".as_ref(), "/usr/local/bin/prog".into())?;
//! let counter = Counter::attach(probes, "/proc/4242/exe".as_ref(), 4242)?;
//! // ... 4242 runs ...
//! let counts = counter.coverage(); // a ModuleCoverage, like the engine's
//! # Ok::<(), profdev_coverage::uprobe::UprobeError>(())
//! ```
//!
//! # Description
//!
//! [`Probes::of_file`] plans the module with the engine's planner
//! ([`crate::plan::Plan`]: the same blocks) and picks, per block, one
//! instruction to probe. Every instruction of a block runs as often as
//! the block, so the probe goes where a uprobe is cheapest: an
//! instruction the kernel emulates (a conditional or direct jump, a direct
//! call, a nop, a register push: about 0.2–0.5 µs per hit) rather than
//! one it single-steps (about 16 µs), and never after a `syscall` in the
//! block (the process may end there). Instructions the kernel refuses to
//! probe (its `good_insns_64`/`good_2byte_insns` tables, the lock and
//! segment-override prefixes, `0x66`-prefixed branches, `mov %ss`, and,
//! to stay on the safe side, VEX/EVEX and three-byte opcodes) are never
//! chosen; a block with no instruction left is not counted and reported
//! in `uncounted`.
//!
//! **Branches.** Each conditional jump (`jcc`, both encodings) gets a
//! probe of its own, which runs before the jump executes: the BPF program
//! reads the saved flags (`pt_regs.flags`) and decides whether the jump
//! will be taken, exactly. The condition travels in the probe's cookie as
//! a 32-entry truth table over (CF, PF, ZF, SF, OF) built by
//! [`truth_table`] from the condition code (the base conditions O, B, E,
//! BE, S, P, L, LE, negated by the code's low bit); the program computes
//! the flags' index ([`flags_index`]) and looks the answer up, so it has no
//! branch per condition. The jump's counter pair is `[not taken, taken]`.
//! When the cheapest instruction of a block is its final `jcc`, that one
//! probe serves both: the block's count is taken + not taken. `jrcxz` and
//! `loop` are not counted as branches (their blocks are).
//!
//! **Counting.** One `BPF_MAP_TYPE_PERCPU_ARRAY` of u64, one slot per
//! block probe and two per jump; the probe's cookie holds the slot (low
//! 32 bits) and the truth table (high 32 bits, 0 for a block probe). The
//! program, hand-assembled with profdev-sample's BPF assembler
//! ([`program`]), does `slot += table >> flags_index(flags) & 1; counts[slot] += 1`;
//! the add is atomic although the slot is per-CPU, because a uprobe's
//! program runs preemptibly (migration is disabled, preemption is not),
//! and a plain load-add-store could lose a count to another task on the
//! same CPU. [`Counter::coverage`] sums the CPUs' values.
//!
//! **Attach.** [`Counter::attach`] loads the program
//! (`BPF_PROG_TYPE_KPROBE`, expected attach type
//! `BPF_TRACE_UPROBE_MULTI`, license GPL) and creates one link
//! (`BPF_LINK_CREATE`, `link_create.uprobe_multi`: the file's path, the
//! probes' **file offsets** (the link-time address converted through its
//! `PT_LOAD` segment), the cookies, and the **pid filter**). The kernel's
//! pid filter is a thread group: the process's threads are counted; a
//! child it forks runs the same breakpoints but its hits are dropped (not
//! counted), and a program it execs is another file. For a program
//! profdev starts, [`spawn_counted`] holds the child between fork and
//! exec (a pipe gate in a `pre_exec` hook) until the link, made with
//! the child's pid, exists: the breakpoints go in as exec maps the
//! file, before its first instruction.
//!
//! # Errors
//!
//! One sentence each: without CAP_BPF and CAP_PERFMON (or root), or with
//! `kernel.unprivileged_bpf_disabled` set for an unprivileged caller,
//! [`UprobeError::Permission`]; a kernel without multi-uprobe links
//! (before Linux 6.6: `EINVAL` or `EOPNOTSUPP` from the program load or
//! the link), [`UprobeError::Unsupported`].
//!
//! # Bugs
//!
//! * Slow: every block executed costs a trap into the kernel, about
//!   0.2–0.5 µs at an emulated instruction and 16 µs where the block has
//!   none (single-stepped), so a CPU-bound program runs many times slower
//!   than under the loader-based engine.
//! * Children of the counted process are not counted (the pid filter
//!   matches one thread group); programs it execs neither.
//! * A block left by a fault or a signal handler's `longjmp` before its
//!   probed instruction is not counted that time (probes sit on emulated
//!   instructions, often the block's last).
//! * x86-64 only; Linux 6.6 or later.

use crate::counts::{Block, Branch, ModuleCoverage};
use crate::plan::{Plan, PlanError};
use iced_x86::{
    Decoder, DecoderOptions, EncodingKind, FlowControl, Instruction, Mnemonic, OpKind, Register,
};
use object::{Object, ObjectSegment, SegmentFlags};
use profdev_sample::bpf::asm::{op, Asm, Insn, FP, R0, R1, R2, R3, R6, R7, R8};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Why the fallback could not count.
#[derive(Debug, thiserror::Error)]
pub enum UprobeError {
    /// The module could not be planned.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The kernel refused for want of privilege.
    #[error("{0}")]
    Permission(String),
    /// The kernel has no multi-uprobe links.
    #[error("{0}")]
    Unsupported(String),
    /// Anything else, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What failed.
        context: String,
        /// The system's error.
        source: io::Error,
    },
}

fn io_error(context: impl Into<String>, source: io::Error) -> UprobeError {
    UprobeError::Io {
        context: context.into(),
        source,
    }
}

/// The kernel features this path needs, for notes and errors.
pub const FEATURE: &str = "a multi-uprobe BPF link (Linux 6.6 or later)";

// ---------------------------------------------------------------------
// Conditions

/// x86 EFLAGS bits the conditions read.
const CF: u64 = 1 << 0;
const PF: u64 = 1 << 2;
const ZF: u64 = 1 << 6;
const SF: u64 = 1 << 7;
const OF: u64 = 1 << 11;

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
const GOOD_1BYTE: [&str; 16] = [
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
const GOOD_2BYTE: [&str; 16] = [
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

fn good(table: &[&str; 16], opcode: u32) -> bool {
    let (row, col) = ((opcode >> 4) as usize & 15, opcode as usize & 15);
    table[row].as_bytes()[col] == b'1'
}

/// The legacy prefixes at the start of `bytes`.
fn prefixes(bytes: &[u8]) -> &[u8] {
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
enum Opcode {
    One(u8),
    Two(u8),
}

/// The opcode after the prefixes and REX (`None` for three-byte opcodes
/// and what is cut short).
fn opcode(bytes: &[u8]) -> Option<Opcode> {
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
fn jcc(x: &Instruction, bytes: &[u8]) -> Option<u8> {
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
fn emulated(x: &Instruction, bytes: &[u8]) -> bool {
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

fn ends_process(x: &Instruction) -> bool {
    matches!(
        x.mnemonic(),
        Mnemonic::Syscall | Mnemonic::Sysenter | Mnemonic::Int | Mnemonic::Hlt | Mnemonic::Ud2
    )
}

// ---------------------------------------------------------------------
// The plan of probes

/// Where a block's count comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Its own counter slot.
    Slot(u32),
    /// The sum of jump `j`'s pair (the probe on its final `jcc`).
    Jump(usize),
    /// Not counted.
    None,
}

/// A module's probes: one per block (or shared with its final `jcc`),
/// one per conditional jump.
#[derive(Clone, Debug)]
pub struct Probes {
    /// The module's file, as reported.
    pub path: PathBuf,
    build_id: Option<Vec<u8>>,
    blocks: Vec<(u64, u64, Vec<u64>, Source)>,
    /// Conditional jumps: address and first slot of its pair.
    jumps: Vec<(u64, u32)>,
    /// File offsets and cookies, one per probe, offsets ascending.
    offsets: Vec<u64>,
    cookies: Vec<u64>,
    slots: u32,
}

impl Probes {
    /// Plan the module in `file` (read now, only what its ELF headers
    /// name, within [`crate::image::Limits::for_file`]: another user's
    /// file is planned within [`crate::image::FOREIGN_CODE`], 4 MiB) whose counts
    /// report as `path`.
    pub fn of_file(file: &Path, path: PathBuf) -> Result<Probes, UprobeError> {
        let f = std::fs::File::open(file)
            .map_err(|e| io_error(format!("cannot read {}", file.display()), e))?;
        let meta = f
            .metadata()
            .map_err(|e| io_error(format!("cannot read {}", file.display()), e))?;
        let bytes = crate::image::read(&f, file, crate::image::Limits::for_file(&meta))?;
        let plan = Plan::of_bytes(&bytes, file)?;
        let elf = profdev_symbolize::elf::parse(&*bytes, file).map_err(|e| {
            UprobeError::Plan(PlanError::Read {
                path: file.display().to_string(),
                why: e.reason(),
            })
        })?;
        let segments: Vec<(u64, u64, u64)> = elf
            .segments()
            .filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
            .map(|s| (s.address(), s.file_range().0, s.file_range().1))
            .collect();
        let file_offset = |a: u64| {
            segments
                .iter()
                .find(|(va, _, size)| a >= *va && a < va + size)
                .map(|(va, off, _)| a - va + off)
        };
        Ok(Probes::new(&plan, path, &file_offset))
    }

    fn new(plan: &Plan, path: PathBuf, file_offset: &dyn Fn(u64) -> Option<u64>) -> Probes {
        let mut p = Probes {
            path,
            build_id: plan.build_id.clone(),
            blocks: Vec::with_capacity(plan.blocks.len()),
            jumps: Vec::new(),
            offsets: Vec::new(),
            cookies: Vec::new(),
            slots: 0,
        };
        let mut probes: Vec<(u64, u64)> = Vec::new();
        for b in &plan.blocks {
            // Decode the block's instructions.
            // (instruction, probeable, its jcc condition, emulated)
            let mut insns: Vec<(Instruction, bool, Option<u8>, bool)> =
                Vec::with_capacity(b.insns.len());
            for (k, &a) in b.insns.iter().enumerate() {
                let end = b.insns.get(k + 1).copied().unwrap_or(b.end);
                let Some(bytes) = plan.bytes(a, end.saturating_sub(a)) else {
                    insns.clear();
                    break;
                };
                let mut d = Decoder::with_ip(64, bytes, a, DecoderOptions::NONE);
                let x = d.decode();
                let ok = probeable(&x, bytes) && file_offset(a).is_some();
                insns.push((x, ok, jcc(&x, bytes), emulated(&x, bytes)));
            }
            // The final jcc's probe, if any.
            let jump = match insns.last() {
                Some((x, true, Some(cc), _)) => Some((x.ip(), *cc)),
                _ => None,
            };
            // The cheapest probeable instruction, none after a syscall.
            let mut best: Option<(u8, usize)> = None;
            let mut after_end = false;
            for (k, (x, ok, _, cheap)) in insns.iter().enumerate() {
                if *ok {
                    let rank = u8::from(after_end) * 2 + u8::from(!cheap);
                    if best.is_none_or(|(r, _)| rank < r) {
                        best = Some((rank, k));
                    }
                }
                after_end |= ends_process(x);
            }
            let jump_index = jump.map(|(addr, cc)| {
                let slot = p.slots;
                p.slots += 2;
                p.jumps.push((addr, slot));
                let cookie = (u64::from(truth_table(cc)) << 32) | u64::from(slot);
                probes.push((file_offset(addr).unwrap_or(0), cookie));
                p.jumps.len() - 1
            });
            // The final jcc, when it is as cheap as the best, serves both.
            if let (Some((rank, _)), Some(_)) = (best, jump) {
                let before = insns[..insns.len() - 1].iter().any(|i| ends_process(&i.0));
                if rank == u8::from(before) * 2 {
                    best = Some((rank, insns.len() - 1));
                }
            }
            let source = match best {
                None => Source::None,
                Some((_, k)) if jump.is_some() && k == insns.len() - 1 => {
                    Source::Jump(jump_index.unwrap_or(0))
                }
                Some((_, k)) => {
                    let slot = p.slots;
                    p.slots += 1;
                    probes.push((file_offset(insns[k].0.ip()).unwrap_or(0), u64::from(slot)));
                    Source::Slot(slot)
                }
            };
            p.blocks.push((b.start, b.end, b.insns.clone(), source));
        }
        probes.sort_unstable();
        p.offsets = probes.iter().map(|x| x.0).collect();
        p.cookies = probes.iter().map(|x| x.1).collect();
        p
    }

    /// The number of probes.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// No probe at all.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Blocks that have no instruction a uprobe takes.
    pub fn uncounted(&self) -> u64 {
        self.blocks.iter().filter(|b| b.3 == Source::None).count() as u64
    }

    /// The module's counts from the slots' values.
    fn coverage(&self, slots: &[u64]) -> ModuleCoverage {
        let at = |s: u32| slots.get(s as usize).copied().unwrap_or(0);
        let mut m = ModuleCoverage {
            path: self.path.clone(),
            build_id: self.build_id.clone(),
            ..ModuleCoverage::default()
        };
        for (start, end, insns, source) in &self.blocks {
            let count = match *source {
                Source::Slot(s) => at(s),
                Source::Jump(j) => at(self.jumps[j].1).saturating_add(at(self.jumps[j].1 + 1)),
                Source::None => {
                    m.uncounted += 1;
                    continue;
                }
            };
            m.blocks.push(Block {
                start: *start,
                end: *end,
                insns: insns.clone(),
                count,
            });
        }
        m.branches = self
            .jumps
            .iter()
            .map(|&(addr, s)| Branch {
                addr,
                not_taken: at(s),
                taken: at(s + 1),
            })
            .collect();
        m.branches.sort_by_key(|b| b.addr);
        m
    }
}

// ---------------------------------------------------------------------
// The BPF program

// The kprobe program's context: `struct pt_regs` of the x86_64 uapi
// `<asm/ptrace.h>`, as the sampler's BPF programs read it.
use profdev_sample::bpf::PtRegs;

/// Offset of the saved flags in the context.
pub const FLAGS_OFFSET: i16 = std::mem::offset_of!(PtRegs, eflags) as i16;
const _: () = assert!(FLAGS_OFFSET == 144);

/// `BPF_FUNC_get_attach_cookie`.
const FUNC_GET_ATTACH_COOKIE: i32 = 174;
/// `BPF_OR` (the assembler's `op` has no name for it).
const OR: u8 = 0x40;
/// The u32 key on the stack.
const KEY_SLOT: i16 = -4;

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

// ---------------------------------------------------------------------
// bpf(2)

use profdev_sample::bpf::attr::{
    obj_name, MapCreate, MapLookupElem, ProgLoad, UprobeMultiLink, BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI,
};
use profdev_sample::bpf::{fd as bpf_fd, syscall as bpf};
/// The kernel's ENOTSUPP (not in libc).
const ENOTSUPP: i32 = 524;

fn permission(what: &str) -> UprobeError {
    let knob = std::fs::read_to_string("/proc/sys/kernel/unprivileged_bpf_disabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    UprobeError::Permission(format!(
        "the kernel refused {what}: counting a static program through uprobes needs CAP_BPF and \
         CAP_PERFMON (or root); run profdev as root or grant it those capabilities \
         (sysctl kernel.unprivileged_bpf_disabled is {knob}, and uprobe programs need the \
         capabilities whatever its value)"
    ))
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn unsupported(what: &str, e: &io::Error) -> UprobeError {
    UprobeError::Unsupported(format!(
        "the kernel refused {what} ({e}): counting a static program needs {FEATURE}, and this \
         kernel is {}; run it on Linux 6.6 or later, or build the program without -static",
        kernel_release()
    ))
}

fn refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

fn no_feature(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP | libc::ENOSYS)
    )
}

/// The number of possible CPUs (a per-CPU value has one entry each).
fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut max = 0usize;
    for part in s.trim().split(',') {
        let hi = part.rsplit('-').next().unwrap_or(part);
        let n: usize = hi.parse().map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidData, format!("possible CPUs {s:?}"))
        })?;
        max = max.max(n);
    }
    Ok(max + 1)
}

/// A module counted through one multi-uprobe link.
pub struct Counter {
    probes: Probes,
    // Field order is drop order: the link first (removes the probes).
    link: Mutex<Option<OwnedFd>>,
    _prog: OwnedFd,
    map: OwnedFd,
    cpus: usize,
}

impl Counter {
    /// Attach `probes` to the file `path` (what the kernel resolves: the
    /// module's file, or `/proc/PID/exe`), counting only process `pid`'s
    /// threads.
    pub fn attach(probes: Probes, path: &Path, pid: u32) -> Result<Counter, UprobeError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(UprobeError::Unsupported(
                "the uprobe fallback reads x86-64 flags: it runs on x86-64 only".into(),
            ));
        }
        if probes.is_empty() {
            return Err(io_error(
                format!(
                    "{} has no instruction a uprobe can take",
                    probes.path.display()
                ),
                io::Error::from_raw_os_error(libc::ENOEXEC),
            ));
        }
        let cpus = possible_cpus().map_err(|e| io_error("cannot count the possible CPUs", e))?;
        let slots = probes.slots.max(1);
        let map = bpf_fd(&mut MapCreate {
            map_type: BPF_MAP_TYPE_PERCPU_ARRAY,
            key_size: 4,
            value_size: 8,
            max_entries: slots,
            ..MapCreate::default()
        })
        .map_err(|e| {
            if refused(&e) {
                permission("creating a BPF map")
            } else {
                io_error(
                    format!("cannot create a per-CPU BPF array of {slots} counters"),
                    e,
                )
            }
        })?;

        let insns = program(map.as_raw_fd());
        let code = profdev_sample::bpf::asm::encode(&insns);
        let license = c"GPL";
        let mut log = vec![0u8; 1 << 16];
        let mut attr = ProgLoad {
            prog_type: BPF_PROG_TYPE_KPROBE,
            insn_cnt: insns.len() as u32,
            insns: code.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: 1,
            log_size: log.len() as u32,
            log_buf: log.as_mut_ptr() as u64,
            prog_name: obj_name(b"cprofupr"),
            expected_attach_type: BPF_TRACE_UPROBE_MULTI,
            ..ProgLoad::default()
        };
        let prog = match bpf_fd(&mut attr) {
            Ok(fd) => fd,
            Err(e) if refused(&e) && log.iter().all(|&b| b == 0) => {
                return Err(permission("loading a BPF program"));
            }
            Err(e) if no_feature(&e) && log.iter().all(|&b| b == 0) => {
                return Err(unsupported("a uprobe-multi BPF program", &e));
            }
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                let head: Vec<&str> = text.lines().take(8).collect();
                return Err(io_error(
                    format!(
                        "the BPF verifier rejected the uprobe counting program: {}",
                        head.join(" | ")
                    ),
                    e,
                ));
            }
        };

        let cpath = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
            io_error(
                format!("{} holds a NUL byte", path.display()),
                io::Error::from_raw_os_error(libc::EINVAL),
            )
        })?;
        let link = bpf_fd(&mut UprobeMultiLink {
            prog_fd: prog.as_raw_fd() as u32,
            attach_type: BPF_TRACE_UPROBE_MULTI,
            path: cpath.as_ptr() as u64,
            offsets: probes.offsets.as_ptr() as u64,
            cookies: probes.cookies.as_ptr() as u64,
            cnt: probes.offsets.len() as u32,
            pid,
            ..UprobeMultiLink::default()
        })
        .map_err(|e| {
            if refused(&e) {
                permission("a uprobe link")
            } else if no_feature(&e) && kernel_older_than(6, 6) {
                unsupported("a multi-uprobe link", &e)
            } else if e.raw_os_error() == Some(libc::ESRCH) {
                io_error(format!("process {pid} is gone"), e)
            } else {
                io_error(
                    format!(
                        "cannot attach {} uprobes to {} for process {pid}",
                        probes.offsets.len(),
                        path.display()
                    ),
                    e,
                )
            }
        })?;
        Ok(Counter {
            probes,
            link: Mutex::new(Some(link)),
            _prog: prog,
            map,
            cpus,
        })
    }

    /// Remove the probes (the counts so far stay readable).
    pub fn detach(&self) {
        self.link.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// The number of probes attached.
    pub fn probes(&self) -> usize {
        self.probes.len()
    }

    /// Blocks no probe counts.
    pub fn uncounted(&self) -> u64 {
        self.probes.uncounted()
    }

    /// The counts so far, summed over the CPUs.
    pub fn coverage(&self) -> ModuleCoverage {
        let n = self.probes.slots as usize;
        let mut slots = vec![0u64; n];
        let mut value = vec![0u64; self.cpus];
        for (key, total) in slots.iter_mut().enumerate() {
            let key = key as u32;
            let mut attr = MapLookupElem {
                map_fd: self.map.as_raw_fd() as u32,
                key: &key as *const u32 as u64,
                value: value.as_mut_ptr() as u64,
                ..MapLookupElem::default()
            };
            if bpf(&mut attr).is_ok() {
                *total = value.iter().fold(0u64, |s, v| s.saturating_add(*v));
            }
        }
        self.probes.coverage(&slots)
    }
}

/// Is the running kernel older than `major.minor`? (False when unknown.)
fn kernel_older_than(major: u32, minor: u32) -> bool {
    release_older_than(&kernel_release(), major, minor)
}

/// Is the kernel release `r` (`6.1.0-18-amd64`) older than
/// `major.minor`? False when it does not start with two numbers.
fn release_older_than(r: &str, major: u32, minor: u32) -> bool {
    let mut it = r.split(|c: char| !c.is_ascii_digit());
    match (
        it.next().and_then(|a| a.parse::<u32>().ok()),
        it.next().and_then(|b| b.parse::<u32>().ok()),
    ) {
        (Some(a), Some(b)) => (a, b) < (major, minor),
        _ => false,
    }
}

// ---------------------------------------------------------------------
// Launch

/// Spawn `cmd` (a static program whose probes are `probes`, attached to
/// the file `path`) with the probes in place before its first
/// instruction: the child, between fork and exec, writes its pid into a
/// pipe and waits on another; a helper thread attaches the link for that
/// pid and opens the gate (or closes it, and the spawn fails: the attach
/// error is returned). Call after every other `pre_exec` hook is added.
pub fn spawn_counted(
    cmd: &mut std::process::Command,
    probes: Probes,
    path: PathBuf,
) -> Result<(std::process::Child, Counter), UprobeError> {
    use std::io::{Read as _, Write as _};
    use std::os::unix::process::CommandExt as _;
    let pipe = || -> io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills the two-element array on success.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: two fresh descriptors we own.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    };
    let (pid_r, pid_w) = pipe().map_err(|e| io_error("cannot make a pipe", e))?;
    let (go_r, go_w) = pipe().map_err(|e| io_error("cannot make a pipe", e))?;
    let (pr, pw, gr, gw) = (
        pid_r.as_raw_fd(),
        pid_w.as_raw_fd(),
        go_r.as_raw_fd(),
        go_w.as_raw_fd(),
    );
    // SAFETY: the hook runs between fork and exec and makes only
    // async-signal-safe calls (close, getpid, write, read) on descriptor
    // numbers copied in; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::close(pr);
            libc::close(gw);
            let pid = libc::getpid();
            let b = pid.to_ne_bytes();
            if libc::write(pw, b.as_ptr().cast(), b.len()) != b.len() as isize {
                return Err(io::Error::last_os_error());
            }
            libc::close(pw);
            let mut go = [0u8; 1];
            loop {
                let n = libc::read(gr, go.as_mut_ptr().cast(), 1);
                if n == 1 {
                    break;
                }
                if n < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                return Err(io::Error::from_raw_os_error(libc::ECANCELED));
            }
            libc::close(gr);
            Ok(())
        });
    }
    let attacher = std::thread::Builder::new()
        .name("cprof-uprobe".into())
        .spawn(move || -> Result<Counter, UprobeError> {
            let mut r = std::fs::File::from(pid_r);
            let mut b = [0u8; 4];
            r.read_exact(&mut b)
                .map_err(|e| io_error("the program did not start", e))?;
            let pid = i32::from_ne_bytes(b) as u32;
            let counter = Counter::attach(probes, &path, pid)?;
            let mut w = std::fs::File::from(go_w);
            w.write_all(b"g")
                .map_err(|e| io_error("cannot let the program run", e))?;
            Ok(counter)
        })
        .map_err(|e| io_error("cannot start a thread", e))?;
    let spawned = cmd.spawn();
    // The child has written its pid or is gone: our copies go, so that the
    // helper sees the end of the pipe if the child never wrote.
    drop(pid_w);
    drop(go_r);
    let counter = attacher.join().unwrap_or_else(|_| {
        Err(io_error(
            "the attach thread panicked",
            io::Error::from_raw_os_error(libc::EIO),
        ))
    });
    match (spawned, counter) {
        (Ok(child), Ok(counter)) => Ok((child, counter)),
        (Ok(mut child), Err(e)) => {
            // Cannot happen (the gate stays shut), but never leave it.
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
        (Err(_), Err(e)) => Err(e),
        (Err(e), Ok(_)) => Err(io_error("cannot run the program", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The conditions by name, from the Intel manual's table.
    #[test]
    fn truth_tables_match_the_conditions_by_name() {
        let all: Vec<u64> = (0..32).map(flags_of).collect();
        for (i, &f) in all.iter().enumerate() {
            assert_eq!(flags_index(f), i as u32);
        }
        /// (CF, PF, ZF, SF, OF) -> taken.
        type Cond = fn(bool, bool, bool, bool, bool) -> bool;
        let named: [(u8, Cond); 16] = [
            (0x0, |_, _, _, _, o| o),            // jo
            (0x1, |_, _, _, _, o| !o),           // jno
            (0x2, |c, _, _, _, _| c),            // jb
            (0x3, |c, _, _, _, _| !c),           // jae
            (0x4, |_, _, z, _, _| z),            // je
            (0x5, |_, _, z, _, _| !z),           // jne
            (0x6, |c, _, z, _, _| c || z),       // jbe
            (0x7, |c, _, z, _, _| !c && !z),     // ja
            (0x8, |_, _, _, s, _| s),            // js
            (0x9, |_, _, _, s, _| !s),           // jns
            (0xa, |_, p, _, _, _| p),            // jp
            (0xb, |_, p, _, _, _| !p),           // jnp
            (0xc, |_, _, _, s, o| s != o),       // jl
            (0xd, |_, _, _, s, o| s == o),       // jge
            (0xe, |_, _, z, s, o| z || s != o),  // jle
            (0xf, |_, _, z, s, o| !z && s == o), // jg
        ];
        for (cc, f) in named {
            let t = truth_table(cc);
            for &e in &all {
                let want = f(
                    e & CF != 0,
                    e & PF != 0,
                    e & ZF != 0,
                    e & SF != 0,
                    e & OF != 0,
                );
                // Other flag bits (AF, TF, IF, bit 1) change nothing.
                let noisy = e | 0x2 | 0x10 | 0x200 | 0x100;
                assert_eq!(taken(cc, noisy), want, "cc {cc:#x} flags {e:#x}");
                assert_eq!(
                    t >> flags_index(noisy) & 1 == 1,
                    want,
                    "table of cc {cc:#x} at {e:#x}"
                );
            }
        }
    }

    /// The program's index and table arithmetic, run by a tiny evaluator
    /// of the ALU instructions it uses, against [`flags_index`] and
    /// [`truth_table`].
    #[test]
    fn the_program_computes_the_slot_the_rust_mirror_does() {
        let p = program(3);
        // Run from after the flags load to the key store, with r8 = flags
        // and r7 = cookie.
        let start = p
            .iter()
            .position(|i| i.code == op::LDX | op::MEM | op::DW && i.off == FLAGS_OFFSET)
            .unwrap()
            + 1;
        let end = p
            .iter()
            .position(|i| i.code == op::STX | op::MEM | op::W && i.off == KEY_SLOT)
            .unwrap();
        let run = |flags: u64, cookie: u64| -> u64 {
            let mut r = [0u64; 11];
            r[8] = flags;
            r[7] = cookie;
            for i in &p[start..end] {
                assert_eq!(
                    i.code & 0x07,
                    op::ALU64,
                    "only 64-bit ALU between load and store"
                );
                let src = if i.code & op::X != 0 {
                    r[i.src as usize]
                } else {
                    i.imm as i64 as u64
                };
                let d = &mut r[i.dst as usize];
                *d = match i.code & 0xf0 {
                    op::MOV => src,
                    op::ADD => d.wrapping_add(src),
                    op::AND => *d & src,
                    OR => *d | src,
                    op::LSH => *d << (src & 63),
                    op::RSH => *d >> (src & 63),
                    c => panic!("unexpected ALU op {c:#x}"),
                };
            }
            r[7]
        };
        for cc in 0..16u8 {
            let table = u64::from(truth_table(cc));
            for i in 0..32u64 {
                let flags = flags_of(i as u32) | 0x202;
                let slot = 1000 + 2 * u64::from(cc);
                let got = run(flags, table << 32 | slot);
                assert_eq!(
                    got,
                    slot + u64::from(taken(cc, flags)),
                    "cc {cc} flags {flags:#x}"
                );
            }
        }
        // A block probe (table 0) always counts its own slot.
        assert_eq!(run(0xffff, 77), 77);
    }

    #[test]
    fn a_block_is_never_probed_on_an_instruction_the_kernel_refuses() {
        let code: Vec<u8> = vec![
            0x55, // 0x1000 push %rbp
            0x0f, 0x05, // 0x1001 syscall
            0x85, 0xc0, // 0x1003 test %eax,%eax
            0x75, 0x03, // 0x1005 jne 0x100a
            0xf0, 0xff, 0x00, // 0x1007 lock incl (%rax)
            0xf0, 0xff, 0x00, // 0x100a lock incl (%rax)
            0xc3, // 0x100d ret
        ];
        let plan = Plan::new(vec![(0x1000, code)], &[0x1000], &[], &[]);
        let p = Probes::new(&plan, "/x".into(), &|a| Some(a));
        let starts: Vec<u64> = p.blocks.iter().map(|b| b.0).collect();
        // The planner ends a block after a syscall.
        assert_eq!(starts, [0x1000, 0x1003, 0x1007, 0x100a]);
        // The push, not the refused syscall, counts the first block.
        assert_eq!(p.blocks[0].3, Source::Slot(0));
        // test; jne: one probe on the jne serves block and branch.
        assert_eq!(p.blocks[1].3, Source::Jump(0));
        assert_eq!(p.jumps, [(0x1005, 1)]);
        // The lone lock-prefixed block has nothing a uprobe takes; the
        // next one is probed at its ret.
        assert_eq!(p.blocks[2].3, Source::None);
        assert_eq!(p.blocks[3].3, Source::Slot(3));
        assert_eq!(p.offsets, [0x1000, 0x1005, 0x100d]);
        assert_eq!(p.uncounted(), 1);
        let m = p.coverage(&[10, 4, 6, 6]);
        assert_eq!(m.uncounted, 1);
        let counts: Vec<(u64, u64)> = m.blocks.iter().map(|b| (b.start, b.count)).collect();
        assert_eq!(counts, [(0x1000, 10), (0x1003, 10), (0x100a, 6)]);
        assert_eq!(m.branches[0].taken, 6);
        assert_eq!(m.branches[0].not_taken, 4);
    }

    #[test]
    fn kernel_releases_before_6_6_lack_the_feature() {
        assert!(release_older_than("6.1.0-18-amd64", 6, 6));
        assert!(release_older_than("5.15.0", 6, 6));
        assert!(!release_older_than("6.6.0", 6, 6));
        assert!(!release_older_than("6.18.44-fc-v595", 6, 6));
        assert!(!release_older_than("10.0", 6, 6));
        assert!(
            !release_older_than("unknown", 6, 6),
            "unknown: not said to be old"
        );
    }

    fn decode(bytes: &[u8]) -> Instruction {
        Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode()
    }

    #[test]
    fn probeable_follows_the_kernels_refusals() {
        let yes: &[&[u8]] = &[
            &[0x55],                                        // push %rbp
            &[0x48, 0x89, 0xe5],                            // mov %rsp,%rbp
            &[0x74, 0x05],                                  // je
            &[0x0f, 0x84, 0, 0, 0, 0],                      // je rel32
            &[0xe8, 0, 0, 0, 0],                            // call
            &[0x0f, 0x1f, 0x44, 0, 0],                      // nopl
            &[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], // mov %fs:0x28,%rax
            &[0xf3, 0x0f, 0x1e, 0xfa],                      // endbr64
            &[0xc3],                                        // ret
        ];
        for b in yes {
            assert!(probeable(&decode(b), b), "{b:02x?}");
        }
        let no: &[&[u8]] = &[
            &[0xcc],                         // int3
            &[0xf0, 0x48, 0x0f, 0xb1, 0x0a], // lock cmpxchg
            &[0x2e, 0x74, 0x05],             // cs je (hint)
            &[0x3e, 0xff, 0xe0],             // notrack jmp *%rax
            &[0x0f, 0x05],                   // syscall
            &[0x0f, 0x0b],                   // ud2
            &[0xf4],                         // hlt
            &[0x66, 0xe8, 0, 0],             // call with a 16-bit override
            &[0xc5, 0xfe, 0x6f, 0x06],       // vmovdqu (VEX)
            &[0x66, 0x0f, 0x38, 0x00, 0xc1], // pshufb (three-byte opcode)
            &[0x8e, 0xd0],                   // mov %eax,%ss
        ];
        for b in no {
            assert!(!probeable(&decode(b), b), "{b:02x?}");
        }
    }

    #[test]
    fn blocks_probe_their_cheapest_instruction_and_share_a_final_jcc() {
        // f: mov %edi,%eax; cmp $5,%eax; jle +2 | add $1,%eax | ret
        let code: Vec<u8> = vec![
            0x89, 0xf8, // 0x1000 mov
            0x83, 0xf8, 0x05, // 0x1002 cmp
            0x7e, 0x03, // 0x1005 jle 0x100a
            0x83, 0xc0, 0x01, // 0x1007 add
            0xc3, // 0x100a ret
        ];
        let plan = Plan::new(vec![(0x1000, code)], &[0x1000], &[], &[]);
        let p = Probes::new(&plan, "/x".into(), &|a| Some(a - 0x1000 + 0x40));
        assert_eq!(p.blocks.len(), 3);
        // Block 1 shares its jle's probe; blocks 2 and 3 have their own
        // (single-stepped: no emulated instruction in them).
        assert_eq!(p.blocks[0].3, Source::Jump(0));
        assert_eq!(p.jumps, [(0x1005, 0)]);
        assert_eq!(p.offsets, [0x45, 0x47, 0x4a]);
        assert_eq!(p.cookies[0], u64::from(truth_table(0xe)) << 32);
        assert_eq!(p.cookies[1..], [2, 3]);
        // Counts: 7 not taken, 3 taken, add ran 7, ret 10.
        let m = p.coverage(&[7, 3, 7, 10]);
        let counts: Vec<u64> = m.blocks.iter().map(|b| b.count).collect();
        assert_eq!(counts, [10, 7, 10]);
        assert_eq!(
            m.branches,
            [Branch {
                addr: 0x1005,
                taken: 3,
                not_taken: 7
            }]
        );
        assert_eq!(m.uncounted, 0);
    }
}
