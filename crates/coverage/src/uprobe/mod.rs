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

// Conditions, and which instructions a uprobe takes.
mod insn;
// The BPF program.
mod program;
// bpf(2): the map, the program loaded, the link.
mod link;
// A static program run counted.
mod spawn;
#[cfg(test)]
mod tests;

pub use insn::{flags_index, flags_of, probeable, taken, truth_table};
pub use link::Counter;
pub use program::{program, FLAGS_OFFSET};
pub use spawn::spawn_counted;
// (The submodules share this module's names: `use super::*`.)
use insn::*;

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
    blocks: Vec<(u64, u64, crate::insns::Insns, Source)>,
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
            let ends = b.insns.iter().skip(1).chain([b.end]);
            for (a, end) in b.insns.iter().zip(ends) {
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
