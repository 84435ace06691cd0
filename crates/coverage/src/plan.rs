//! The planner: a module's code cut into basic blocks, and for each block
//! how it will be counted.
//!
//! A module is decoded once (iced-x86, linear sweep of every executable
//! section but the PLT's). Block leaders are the function starts (symbol
//! tables and `.eh_frame` FDEs, through profdev-symbolize), the sections'
//! starts, every direct branch or call target, and the instruction after
//! every instruction that does not simply fall through (calls included:
//! a return lands there). Alignment padding (no-ops and `int3` after an
//! unconditional jump or return, up to the next leader) belongs to no
//! block: it never runs, and a patch may overwrite it.
//!
//! Each block gets one [`How`]:
//!
//! * [`How::Jmp`]: its first instructions (at least 5 bytes, never a
//!   call; with any alignment padding after a final jump or return) are
//!   replaced by `jmp rel32` to a trampoline that counts, runs a copy of
//!   the whole block up to a final call (re-encoded), and jumps back. The
//!   copy's jumps lead straight into the trampolines of their targets, so
//!   a hot loop runs in trampolines. A copied conditional jump counts its
//!   fall-through inline (`taken = count - not_taken`, exactly). A copy
//!   never holds a call: return addresses stay in the original code,
//!   where the unwinder finds them. A block shorter than 5 bytes that ends
//!   in a conditional jump runs its jump on into the block it falls
//!   through to when that block is entered no other way ([`How::Covered`]).
//!   When the instructions before a block's final call are shorter than 5
//!   bytes, the jump covers the call too and the trampoline makes the call
//!   as a push of the original return address and a jump: the return
//!   lands in the original code, as the unwinder expects (at the price of
//!   one mispredicted return).
//! * [`How::Int3`]: blocks shorter than 5 bytes: `int3` at the start; the
//!   runtime's SIGTRAP handler resumes in the same kind of trampoline (a
//!   copy of the whole block up to a final call). A trampoline that falls
//!   or jumps into such a block goes to its trampoline directly, so only
//!   entries from unpatched code pay for the trap.
//!   Where the block is entered only by falling through the conditional
//!   jump that ends the block before it (no jump, table or stored address
//!   leads there, its function has no unresolved indirect jump) and that
//!   jump is copied in a trampoline (so its fall-throughs are counted),
//!   the block is left unpatched and takes that count ([`How::Fell`]):
//!   no trap, and exact. Elsewhere a short block with dead bytes of a
//!   copied block within 128 bytes hops there ([`How::Hop`]).
//! * [`How::Call`]: a block that is one call (`call rel32`, or `call
//!   *disp(%rip)`) is counted by retargeting the call to a stub that counts
//!   and jumps on; the return address does not change.
//! * [`How::None`]: anything else (a lone register-indirect call, code that
//!   does not decode): not counted, and reported in `uncounted`.
//!
//! A conditional jump's taken count is its block's count less its
//! fall-throughs. The fall-throughs are counted after the copied jump,
//! unless the block after it is entered only by falling through it and
//! is counted itself: then they are that block's count ([`Plan::fell_from`],
//! [`Plan::fell`]), one count fewer on every fall-through (python3's
//! loop: 16% less time, sqlite3's 13%).
//!
//! Indirect jumps: in a function holding a `jmp *reg` (a switch's jump
//! table, or a computed goto) some leaders are unknown, so there a window
//! is only ever the block's first instruction; shorter blocks trap. The
//! indirect jumps whose table was recovered, and those of functions whose
//! inner labels are stored in data (computed gotos: `jmp *%reg`, or an
//! indexed `jmp *`), are listed in [`Plan::tables`]: they are not calls;
//! any other `jmp *` (`jmp *8(%rax)`, `jmp *slot(%rip)`, or `jmp *%reg`
//! elsewhere) may be a tail
//! call through a pointer, and when call targets are wanted
//! ([`crate::encode::Options`]) its targets are recorded like an indirect
//! call's (a block ends at each call and each jump, so one block holds at
//! most one such site, and its count is the site's).

use std::collections::BTreeSet;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::path::Path;

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, Register, RflagsBits,
};
use object::{Object, ObjectSection, SectionFlags, SectionKind};

/// The flags `inc` writes (not CF): a count may clobber them only where
/// they are dead.
pub(crate) const INC_FLAGS: u32 =
    RflagsBits::OF | RflagsBits::SF | RflagsBits::ZF | RflagsBits::AF | RflagsBits::PF;

/// How one block is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// `jmp rel32` at `from` (the block's start), overwriting `overwrite`
    /// bytes; the trampoline copies `from..to`.
    Jmp { from: u64, to: u64, overwrite: u32 },
    /// `int3` at the block's start; the trampoline copies `start..to`.
    Int3 { to: u64 },
    /// `jmp rel8` at the block's start to a `jmp rel32` at `slot`, in
    /// the dead bytes of a nearby block whose trampoline copies it whole;
    /// the trampoline copies `start..to`.
    Hop { to: u64, slot: u64 },
    /// The block is one call of `len` bytes (5: `call rel32`; 6: `call
    /// *disp(%rip)`), retargeted to a counting stub.
    Call { len: u32 },
    /// Counted in the trampoline of an earlier block whose window runs
    /// on into this one (it is entered only by falling through from it).
    Covered,
    /// Not patched: the block is entered only by falling through the
    /// conditional jump that ends the block before it, whose trampoline
    /// counts its fall-throughs (branch `branch`): that is its count,
    /// exactly. (A short block there would otherwise trap.)
    Fell { branch: u32 },
    /// Not counted.
    None,
}

/// One planned block.
#[derive(Clone, Debug)]
pub struct PlannedBlock {
    /// Address of its first instruction (link-time).
    pub start: u64,
    /// Address past its last instruction.
    pub end: u64,
    /// Its instructions' addresses.
    pub insns: Vec<u64>,
    /// How it is counted.
    pub how: How,
    /// Whether the flags `inc` writes are live where the count goes.
    pub flags_live: bool,
    /// Index into [`Plan::branches`] of its final conditional jump, when
    /// the trampoline copies that jump (then its taken edge is counted).
    pub branch: Option<u32>,
}

/// The plan of one module: its blocks and the branches counted.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Blocks by address; block `i` uses counter `i`.
    pub blocks: Vec<PlannedBlock>,
    /// Conditional jumps whose edges are counted (link-time address,
    /// whether the flags are live where it falls through); branch `j` uses
    /// counter `blocks.len() + j`, the times it fell through (taken is its
    /// block's count less that).
    pub branches: Vec<(u64, bool)>,
    /// Per branch, the block its fall-through count is read from instead
    /// of a counter of its own: the block after the jump, entered only by
    /// falling through it and counted itself, runs exactly as often as
    /// the jump falls through (the counter `blocks.len() + j` then stays
    /// 0: one count fewer on every fall-through).
    pub fell_from: Vec<Option<u32>>,
    /// The module's GNU build id.
    pub build_id: Option<Vec<u8>>,
    /// Indirect jumps (link-time addresses, sorted) that are not calls:
    /// those whose jump table was recovered (a switch), and `jmp *%reg`
    /// or `jmp *table(,%idx,8)` in a function whose inner labels are
    /// stored in the module's data (computed gotos). Every other `jmp *`
    /// may be a tail call through a pointer, and its targets are recorded
    /// when call targets are wanted ([`crate::encode::Options`]).
    pub tables: Vec<u64>,
    /// The executable sections' addresses and bytes.
    pub(crate) sections: Vec<(u64, Vec<u8>)>,
}

/// What went wrong reading a module.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file could not be read or parsed.
    #[error("cannot read {path} as an ELF x86-64 module: {why}")]
    Read { path: String, why: String },
}

impl Plan {
    /// Counters the module needs: one per block, one per branch.
    pub fn counters(&self) -> u64 {
        (self.blocks.len() + self.branches.len()) as u64
    }

    /// Blocks that cannot be counted.
    pub fn uncounted(&self) -> u64 {
        self.blocks.iter().filter(|b| b.how == How::None).count() as u64
    }

    /// The bytes at `addr..addr+len` of an executable section.
    pub(crate) fn bytes(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let (base, bytes) = self
            .sections
            .iter()
            .find(|(a, b)| *a <= addr && addr + len <= a + b.len() as u64)?;
        let off = (addr - base) as usize;
        Some(&bytes[off..off + len as usize])
    }

    /// Index of the block starting at `addr`.
    pub fn block_at(&self, addr: u64) -> Option<usize> {
        self.blocks.binary_search_by_key(&addr, |b| b.start).ok()
    }

    /// Plan the module in the file `path`, reading only what its headers
    /// name ([`crate::image`], within [`crate::image::Limits::OWN`]).
    pub fn of_file(path: &Path) -> Result<Plan, PlanError> {
        let file = std::fs::File::open(path).map_err(|e| PlanError::Read {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        let bytes = crate::image::read(&file, path, crate::image::Limits::OWN)?;
        Plan::of_bytes(&bytes, path)
    }

    /// Plan the module whose file (at `path`, for messages) holds `bytes`.
    pub fn of_bytes(bytes: &[u8], path: &Path) -> Result<Plan, PlanError> {
        let err = |why: String| PlanError::Read {
            path: path.display().to_string(),
            why,
        };
        let elf = profdev_symbolize::elf::ElfObject::parse(bytes, path)
            .map_err(|e| err(e.to_string()))?;
        let starts: Vec<u64> = elf
            .all_symbols()
            .iter()
            .filter(|s| s.origin != profdev_symbolize::elf::SymOrigin::Plt)
            .map(|s| s.addr)
            .collect();
        let file = profdev_symbolize::elf::parse(bytes, path).map_err(|e| err(e.reason()))?;
        if file.architecture() != object::Architecture::X86_64 {
            return Err(err("it is not an x86-64 object".into()));
        }
        let mut sections = Vec::new();
        let mut data: Vec<(u64, &[u8])> = Vec::new();
        for s in file.sections() {
            if s.kind() != SectionKind::UninitializedData && s.address() != 0 {
                if let Ok(d) = s.data() {
                    data.push((s.address(), d));
                }
            }
            let exec = match s.flags() {
                SectionFlags::Elf { sh_flags } => {
                    sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0
                }
                _ => false,
            };
            let name = s.name().unwrap_or("");
            if !exec || s.kind() == SectionKind::UninitializedData || name.starts_with(".plt") {
                continue;
            }
            let data = s.data().map_err(|e| err(e.to_string()))?;
            if !data.is_empty() {
                sections.push((s.address(), data.to_vec()));
            }
        }
        sections.sort_by_key(|s| s.0);
        // Code addresses the data holds: 8-byte words of the data
        // sections, and the addends of relative relocations (PIC).
        let (lo, hi) = sections.iter().fold((u64::MAX, 0), |(l, h), (a, b)| {
            (l.min(*a), h.max(a + b.len() as u64))
        });
        let mut taken: Vec<u64> = Vec::new();
        for s in file.sections() {
            let exec = matches!(s.flags(), SectionFlags::Elf { sh_flags } if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0);
            if exec || s.kind() == SectionKind::UninitializedData || s.address() == 0 {
                continue;
            }
            if let Ok(d) = s.data() {
                let skip = (s.address().wrapping_neg() & 7) as usize;
                if skip < d.len() {
                    for w in d[skip..].chunks_exact(8) {
                        let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                        if v >= lo && v < hi {
                            taken.push(v);
                        }
                    }
                }
            }
        }
        if let Some(relocs) = file.dynamic_relocations() {
            for (_, r) in relocs {
                let v = r.addend() as u64;
                if v >= lo && v < hi {
                    taken.push(v);
                }
            }
        }
        let mut plan = Plan::new(sections, &starts, &data, &taken);
        plan.build_id = elf.build_id().map(<[u8]>::to_vec);
        Ok(plan)
    }

    /// Plan code given as sections (address, bytes) and function starts.
    /// `data` holds the module's other sections (jump tables are read
    /// there).
    pub fn new(
        sections: Vec<(u64, Vec<u8>)>,
        function_starts: &[u64],
        data: &[(u64, &[u8])],
        taken: &[u64],
    ) -> Plan {
        let mut insns: Vec<Instruction> = Vec::new();
        let mut section_starts = Vec::new();
        for (addr, bytes) in &sections {
            section_starts.push(*addr);
            let mut d = Decoder::with_ip(64, bytes, *addr, DecoderOptions::NONE);
            while d.can_decode() {
                insns.push(d.decode());
            }
        }
        let index: HashMap<u64, usize> =
            insns.iter().enumerate().map(|(i, x)| (x.ip(), i)).collect();
        let is_insn = |a: u64| index.contains_key(&a);

        // Leaders that padding must not swallow: function starts, sections,
        // direct targets.
        let mut hard: HashSet<u64> = HashSet::default();
        hard.extend(function_starts.iter().copied().filter(|a| is_insn(*a)));
        hard.extend(section_starts.iter().copied());
        for x in &insns {
            match x.flow_control() {
                FlowControl::UnconditionalBranch
                | FlowControl::ConditionalBranch
                | FlowControl::Call
                | FlowControl::XbeginXabortXend
                    if x.op0_kind() == iced_x86::OpKind::NearBranch64 =>
                {
                    let t = x.near_branch_target();
                    if is_insn(t) {
                        hard.insert(t);
                    }
                }
                _ => {}
            }
        }
        let mut funcs: Vec<u64> = function_starts.to_vec();
        funcs.sort_unstable();
        funcs.dedup();
        let func_of = |a: u64| -> u64 {
            match funcs.binary_search(&a) {
                Ok(i) => funcs[i],
                Err(0) => 0,
                Err(i) => funcs[i - 1],
            }
        };
        // Jump tables (gcc's and clang's switch forms): their targets are
        // leaders. Reading past a table's end only adds leaders, which
        // splits blocks and loses nothing; a table not recognized leaves
        // its function with unknown leaders.
        let func_end = |f: u64| -> u64 {
            match funcs.binary_search(&f) {
                Ok(i) if i + 1 < funcs.len() => funcs[i + 1],
                _ => u64::MAX,
            }
        };
        let mut unresolved: HashSet<u64> = HashSet::default();
        let mut tables = Vec::new();
        for (i, x) in insns.iter().enumerate() {
            if x.flow_control() != FlowControl::IndirectBranch || is_tail_call_through_memory(x) {
                continue;
            }
            let f = func_of(x.ip());
            let fe = func_end(f);
            let in_func = |t: u64| t >= f && t < fe && is_insn(t);
            let targets = jump_table(&insns, i, f, data, &in_func, &is_insn);
            if !targets.is_empty() {
                hard.extend(targets);
                tables.push(x.ip());
            } else if x.op0_kind() != iced_x86::OpKind::Register {
                unresolved.insert(f);
            }
            // `jmp *%reg` with no table: a tail call through a pointer, or
            // a computed goto whose labels are among the code addresses
            // stored in the module's data (added below).
        }

        // Functions that may run with every signal blocked (they change
        // the signal mask, or create a thread or process), and what they
        // call, two calls deep: a trap there would kill the process (a
        // blocked SIGTRAP is fatal), so they get no int3.
        let mut masked: HashSet<u64> = HashSet::default();
        let mut eax: Option<u64> = None;
        for x in &insns {
            if x.mnemonic() == Mnemonic::Syscall {
                if matches!(eax, Some(14 | 56 | 57 | 58 | 435)) {
                    masked.insert(func_of(x.ip()));
                }
            } else if x.mnemonic() == Mnemonic::Mov
                && x.op_count() == 2
                && matches!(x.op0_register(), Register::EAX | Register::RAX)
                && matches!(
                    x.op1_kind(),
                    iced_x86::OpKind::Immediate32 | iced_x86::OpKind::Immediate32to64
                )
            {
                eax = Some(x.immediate(1));
            }
            if x.flow_control() != FlowControl::Next {
                eax = None;
            }
        }
        for _ in 0..2 {
            let mut more = Vec::new();
            for x in &insns {
                if x.flow_control() == FlowControl::Call
                    && x.op0_kind() == iced_x86::OpKind::NearBranch64
                    && masked.contains(&func_of(x.ip()))
                {
                    more.push(x.near_branch_target());
                }
            }
            masked.extend(more);
        }

        // Code addresses stored in data (labels of computed gotos,
        // function pointers): leaders.
        hard.extend(taken.iter().copied().filter(|a| is_insn(*a)));
        // A function whose inner labels are stored in data uses computed
        // gotos (`goto *labels[op]`, an interpreter's dispatch): its
        // indirect jumps with no recovered table are those, not tail calls.
        let gotos: HashSet<u64> = taken
            .iter()
            .filter(|&&a| is_insn(a) && funcs.binary_search(&a).is_err())
            .map(|&a| func_of(a))
            .filter(|&f| f != 0)
            .collect();
        for x in &insns {
            if x.flow_control() == FlowControl::IndirectBranch
                && !is_tail_call_through_memory(x)
                && gotos.contains(&func_of(x.ip()))
            {
                tables.push(x.ip());
            }
        }

        // Padding and the remaining leaders.
        let mut leaders: BTreeSet<u64> = hard.iter().copied().collect();
        let mut padding: HashSet<u64> = HashSet::default();
        // Leaders entered only by falling through a conditional jump: a
        // window may run across them.
        let mut soft: HashSet<u64> = HashSet::default();
        let mut i = 0;
        while i < insns.len() {
            let x = &insns[i];
            let flow = x.flow_control();
            if flow != FlowControl::Next || x.code() == Code::INVALID {
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
                }
                if j < insns.len() {
                    leaders.insert(insns[j].ip());
                    if flow == FlowControl::ConditionalBranch && !hard.contains(&insns[j].ip()) {
                        soft.insert(insns[j].ip());
                    }
                }
                i = j;
            } else {
                i += 1;
            }
        }

        // Blocks.
        let mut raw: Vec<(usize, usize)> = Vec::new(); // insn index range
        let mut cur: Option<usize> = None;
        for (k, x) in insns.iter().enumerate() {
            if padding.contains(&x.ip()) {
                if let Some(s) = cur.take() {
                    raw.push((s, k));
                }
                continue;
            }
            let contiguous = k > 0 && insns[k - 1].next_ip() == x.ip();
            if cur.is_some() && (leaders.contains(&x.ip()) || !contiguous) {
                raw.push((cur.take().unwrap_or(k), k));
            }
            if cur.is_none() {
                cur = Some(k);
            }
            if x.flow_control() != FlowControl::Next || x.code() == Code::INVALID {
                raw.push((cur.take().unwrap_or(k), k + 1));
            }
        }
        if let Some(s) = cur {
            raw.push((s, insns.len()));
        }

        // Flags at each block's start, locally: Some(dead?) or None
        // (undecided at the block's end).
        let local = |from: usize, to: usize| -> Option<bool> {
            let mut killed = 0u32;
            for x in &insns[from..to] {
                if x.rflags_read() & INC_FLAGS & !killed != 0 {
                    return Some(false);
                }
                if matches!(
                    x.flow_control(),
                    FlowControl::Call | FlowControl::IndirectCall | FlowControl::Return
                ) {
                    return Some(true);
                }
                killed |= x.rflags_modified();
                if killed & INC_FLAGS == INC_FLAGS {
                    return Some(true);
                }
            }
            None
        };
        let start_index: HashMap<u64, usize> = raw
            .iter()
            .enumerate()
            .map(|(b, (s, _))| (insns[*s].ip(), b))
            .collect();
        let dead_at_block = |addr: u64| -> bool {
            match start_index.get(&addr) {
                Some(&b) => local(raw[b].0, raw[b].1) == Some(true),
                None => false,
            }
        };
        let flags_live_from = |from: usize, to: usize| -> bool {
            match local(from, to) {
                Some(dead) => !dead,
                None => {
                    let last = &insns[to - 1];
                    let next_ok = |a: u64| dead_at_block(a);
                    match last.flow_control() {
                        FlowControl::Next => !next_ok(last.next_ip()),
                        FlowControl::UnconditionalBranch
                            if last.op0_kind() == iced_x86::OpKind::NearBranch64 =>
                        {
                            !next_ok(last.near_branch_target())
                        }
                        FlowControl::ConditionalBranch
                            if last.op0_kind() == iced_x86::OpKind::NearBranch64 =>
                        {
                            !(next_ok(last.near_branch_target()) && next_ok(last.next_ip()))
                        }
                        _ => true,
                    }
                }
            }
        };
        // Whether the flags are live where a conditional jump falls
        // through to `addr` (looking one block further, as for a block).
        let live_at_block = |addr: u64| -> bool {
            match start_index.get(&addr) {
                Some(&b) => flags_live_from(raw[b].0, raw[b].1),
                None => true,
            }
        };

        let mut blocks = Vec::with_capacity(raw.len());
        let mut branches = Vec::new();
        let mut forbidden: Vec<bool> = Vec::with_capacity(raw.len());
        let mut cover_left = 0usize;
        let mut cover_to = 0u64;
        for (bi, &(s, e)) in raw.iter().enumerate() {
            let first = &insns[s];
            let last = &insns[e - 1];
            let start = first.ip();
            let end = last.next_ip();
            let ips: Vec<u64> = insns[s..e].iter().map(|x| x.ip()).collect();
            let bad = insns[s..e].iter().any(|x| x.code() == Code::INVALID);
            let restricted = unresolved.contains(&func_of(start));
            let no_trap = masked.contains(&func_of(start));
            let is_call = |x: &Instruction| {
                matches!(
                    x.flow_control(),
                    FlowControl::Call | FlowControl::IndirectCall
                )
            };
            // Padding after the block that a patch may overwrite.
            let mut pad_after = 0u64;
            if ends_flow(last) {
                let mut k = e;
                while k < insns.len()
                    && padding.contains(&insns[k].ip())
                    && insns[k].ip() == insns[k - 1].next_ip()
                {
                    pad_after += insns[k].len() as u64;
                    k += 1;
                }
            }
            let mut how = How::None;
            if cover_left > 0 {
                cover_left -= 1;
                let mut branch = None;
                if cover_to >= end
                    && last.flow_control() == FlowControl::ConditionalBranch
                    && last.op0_kind() == iced_x86::OpKind::NearBranch64
                {
                    branch = Some(branches.len() as u32);
                    branches.push((last.ip(), live_at_block(last.next_ip())));
                }
                blocks.push(PlannedBlock {
                    start,
                    end,
                    insns: ips,
                    how: How::Covered,
                    flags_live: flags_live_from(s, e),
                    branch,
                });
                forbidden.push(false);
                continue;
            }
            if !bad {
                // The trampoline copies the whole block, up to a final
                // call; the jump overwrites its first instructions (at
                // least 5 bytes, never the call), and any padding after
                // a final jump or return.
                let copy_end = if is_call(last) { e - 1 } else { e };
                if copy_end > s {
                    let to = insns[copy_end - 1].next_ip();
                    if restricted {
                        if first.len() >= 5 {
                            how = How::Jmp {
                                from: start,
                                to,
                                overwrite: first.len() as u32,
                            };
                        }
                    } else {
                        let mut k = s;
                        let mut len = 0u64;
                        while k < copy_end && len < 5 {
                            len += insns[k].len() as u64;
                            k += 1;
                        }
                        if len < 5 && k == e && ends_flow(last) {
                            len += pad_after;
                        }
                        if len >= 5 {
                            how = How::Jmp {
                                from: start,
                                to,
                                overwrite: len as u32,
                            };
                        } else if copy_end == e - 1 && end - start >= 5 {
                            // A short prefix and a call (`mov %rbx,%rdi;
                            // call f`): the trampoline makes the call as a
                            // push of the original return address and a
                            // jump, so the return still lands in the
                            // original code.
                            how = How::Jmp {
                                from: start,
                                to: end,
                                overwrite: (end - start) as u32,
                            };
                        }
                    }
                }
                if how == How::None {
                    if is_call(first) {
                        if e - s == 1 {
                            if first.code() == Code::Call_rel32_64 {
                                how = How::Call { len: 5 };
                            } else if first.code() == Code::Call_rm64
                                && first.is_ip_rel_memory_operand()
                                && first.len() == 6
                            {
                                how = How::Call { len: 6 };
                            } else {
                                // Trap, and emulate the call in the
                                // trampoline (the return address pushed
                                // is the original one).
                                how = How::Int3 { to: end };
                            }
                        }
                    } else {
                        // Copy the whole block up to a final call.
                        let mut k = s;
                        while k < e && !is_call(&insns[k]) {
                            k += 1;
                        }
                        how = How::Int3 {
                            to: insns[k - 1].next_ip(),
                        };
                    }
                }
            }
            // A short block ending in a conditional jump: run the window
            // on into the blocks its fall-through enters.
            if !bad
                && !restricted
                && matches!(how, How::None | How::Int3 { .. })
                && last.flow_control() == FlowControl::ConditionalBranch
                && last.op0_kind() == iced_x86::OpKind::NearBranch64
            {
                let mut len = end - start;
                let mut nb = bi + 1;
                let mut to = end;
                let mut covers = 0;
                let mut ok = false;
                while nb < raw.len() {
                    let (ns, ne) = raw[nb];
                    let nstart = insns[ns].ip();
                    if nstart != to
                        || !soft.contains(&nstart)
                        || unresolved.contains(&func_of(nstart))
                        || insns[ns..ne].iter().any(|x| x.code() == Code::INVALID)
                    {
                        break;
                    }
                    let mut k = ns;
                    while k < ne && len < 5 && !is_call(&insns[k]) {
                        len += insns[k].len() as u64;
                        k += 1;
                    }
                    if k == ns {
                        break;
                    }
                    // Copy all of it, up to a final call.
                    let ce = if is_call(&insns[ne - 1]) { ne - 1 } else { ne };
                    to = insns[ce - 1].next_ip();
                    covers += 1;
                    if len >= 5 {
                        ok = true;
                        break;
                    }
                    if k < ne || insns[ne - 1].flow_control() != FlowControl::ConditionalBranch {
                        break;
                    }
                    to = insns[ne - 1].next_ip();
                    nb += 1;
                }
                if ok {
                    how = How::Jmp {
                        from: start,
                        to,
                        overwrite: len as u32,
                    };
                    cover_left = covers;
                    cover_to = to;
                }
            }
            let trap_forbidden = no_trap && matches!(how, How::Int3 { .. });
            let copies_last = match how {
                How::Jmp { to, .. } | How::Int3 { to } | How::Hop { to, .. } => to >= end,
                _ => false,
            };
            let mut branch = None;
            if copies_last
                && last.flow_control() == FlowControl::ConditionalBranch
                && last.op0_kind() == iced_x86::OpKind::NearBranch64
            {
                branch = Some(branches.len() as u32);
                branches.push((last.ip(), live_at_block(last.next_ip())));
            }
            let flags_live = match how {
                How::Jmp { .. } | How::Int3 { .. } => flags_live_from(s, e),
                _ => false,
            };
            blocks.push(PlannedBlock {
                start,
                end,
                insns: ips,
                how,
                flags_live,
                branch,
            });
            forbidden.push(trap_forbidden);
        }

        // Short blocks: a 2-byte jump to a 5-byte one in dead bytes near
        // by (the bytes of a block, past its patch, that its trampoline
        // copies whole: nothing runs them any more), instead of a trap.
        let mut dead: Vec<(u64, u64)> = Vec::new(); // (cursor, end)
        for b in &blocks {
            if let How::Jmp {
                from,
                to,
                overwrite,
            } = b.how
            {
                let a = from + u64::from(overwrite);
                if to >= b.end && a + 5 <= b.end && !unresolved.contains(&func_of(b.start)) {
                    dead.push((a, b.end));
                }
            }
        }
        // A short block entered only by the fall-through of the block
        // before it, whose conditional jump a trampoline copies (its
        // fall-throughs are counted): derived, no patch at all.
        for bi in 1..blocks.len() {
            let (before, rest) = blocks.split_at_mut(bi);
            let (p, b) = (&before[bi - 1], &mut rest[0]);
            if !matches!(b.how, How::Int3 { .. }) || unresolved.contains(&func_of(b.start)) {
                continue;
            }
            let Some(j) = p.branch else { continue };
            if p.end == b.start
                && soft.contains(&b.start)
                && p.insns.last() == Some(&branches[j as usize].0)
            {
                b.how = How::Fell { branch: j };
            }
        }
        for (bi, b) in blocks.iter_mut().enumerate() {
            let How::Int3 { to } = b.how else { continue };
            if to - b.start < 2 || unresolved.contains(&func_of(b.start)) {
                if forbidden[bi] {
                    b.how = How::None;
                }
                continue;
            }
            let origin = b.start + 2;
            let lo = origin.saturating_sub(128);
            let hi = origin + 127; // the slot's first byte, at most
            let mut i = dead.partition_point(|d| d.1 < lo + 5);
            let mut found = None;
            while i < dead.len() && dead[i].0 <= hi {
                let at = dead[i].0.max(lo);
                if at + 5 <= dead[i].1 && at <= hi {
                    found = Some((i, at));
                    break;
                }
                i += 1;
            }
            match found {
                Some((i, at)) => {
                    dead[i].0 = at + 5;
                    b.how = How::Hop { to, slot: at };
                }
                None if forbidden[bi] => b.how = How::None,
                None => {}
            }
        }
        tables.sort_unstable();
        tables.dedup();
        // A fall-through into a block counted on its own is that block's
        // count.
        let mut fell_from = vec![None; branches.len()];
        for bi in 1..blocks.len() {
            let (p, b) = (&blocks[bi - 1], &blocks[bi]);
            let Some(j) = p.branch else { continue };
            let counted = match b.how {
                How::Jmp { from, .. } => from == b.start,
                How::Hop { .. } | How::Int3 { .. } | How::Call { .. } | How::Covered => true,
                How::Fell { .. } | How::None => false,
            };
            if counted
                && p.end == b.start
                && soft.contains(&b.start)
                && !unresolved.contains(&func_of(b.start))
                && p.insns.last() == Some(&branches[j as usize].0)
            {
                fell_from[j as usize] = Some(bi as u32);
            }
        }
        Plan {
            blocks,
            branches,
            fell_from,
            build_id: None,
            tables,
            sections,
        }
    }

    /// The times branch `j` fell through, from the module's counters `c`.
    pub fn fell(&self, j: usize, c: &[u64]) -> u64 {
        match self.fell_from.get(j).copied().flatten() {
            Some(k) => c[k as usize],
            None => c[self.blocks.len() + j],
        }
    }
}

/// Control does not go on to the next instruction.
fn ends_flow(x: &Instruction) -> bool {
    matches!(
        x.flow_control(),
        FlowControl::UnconditionalBranch | FlowControl::IndirectBranch | FlowControl::Return
    ) || x.mnemonic() == Mnemonic::Ud2
        || x.mnemonic() == Mnemonic::Hlt
}

/// Alignment padding: no-ops and traps.
fn is_padding(x: &Instruction) -> bool {
    matches!(x.mnemonic(), Mnemonic::Nop | Mnemonic::Int3)
}

/// `jmp *disp(%rip)` or `jmp *disp(%reg)`: a tail call through the GOT or
/// a structure's field, not a jump table (which needs an index).
fn is_tail_call_through_memory(x: &Instruction) -> bool {
    x.op0_kind() == iced_x86::OpKind::Memory
        && (x.is_ip_rel_memory_operand() || x.memory_index() == Register::None)
}

/// The targets of the jump table the indirect jump `insns[at]` reads, in
/// function `f` (`in_func` says whether an address is an instruction of
/// it): `jmp *table(,%idx,8)` (absolute entries), or `lea table(%rip),%rT;
/// movslq (%rT,%idx,4),%r; add %rT,%r; jmp *%r` (entries relative to the
/// table). Empty when the jump is not one of these. An absolute table's
/// entries may lead out of the function (gcc sends a switch's unlikely
/// cases to the function's cold part): they are read while they are
/// instructions of the module.
fn jump_table(
    insns: &[Instruction],
    at: usize,
    f: u64,
    data: &[(u64, &[u8])],
    in_func: &dyn Fn(u64) -> bool,
    is_insn: &dyn Fn(u64) -> bool,
) -> Vec<u64> {
    const MAX: usize = 4096;
    let read = |addr: u64, n: usize| -> Option<&[u8]> {
        let (base, bytes) = data
            .iter()
            .find(|(a, b)| *a <= addr && addr + n as u64 <= a + b.len() as u64)?;
        let off = (addr - base) as usize;
        Some(&bytes[off..off + n])
    };
    let x = &insns[at];
    let mut out = Vec::new();
    if x.op0_kind() == iced_x86::OpKind::Memory
        && x.memory_base() == Register::None
        && x.memory_index() != Register::None
        && x.memory_index_scale() == 8
    {
        let table = x.memory_displacement64();
        for k in 0..MAX {
            let Some(b) = read(table + 8 * k as u64, 8) else {
                break;
            };
            let t = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
            if !is_insn(t) {
                break;
            }
            out.push(t);
        }
        return out;
    }
    if x.op0_kind() != iced_x86::OpKind::Register {
        return out;
    }
    // Back through the function for the load of the entry, then for the
    // table's address.
    let mut movsxd_base = None;
    let mut k = at;
    let mut steps = 0;
    while k > 0 && steps < 400 {
        k -= 1;
        steps += 1;
        let y = &insns[k];
        if y.ip() < f {
            break;
        }
        match movsxd_base {
            None => {
                // `mov table(,%idx,8),%r; jmp *%r` (computed goto).
                if y.mnemonic() == Mnemonic::Mov
                    && y.op0_kind() == iced_x86::OpKind::Register
                    && y.op0_register() == x.op0_register()
                    && y.op1_kind() == iced_x86::OpKind::Memory
                    && y.memory_base() == Register::None
                    && y.memory_index() != Register::None
                    && y.memory_index_scale() == 8
                {
                    let table = y.memory_displacement64();
                    for j in 0..MAX {
                        let Some(b) = read(table + 8 * j as u64, 8) else {
                            break;
                        };
                        let t = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                        if !in_func(t) {
                            break;
                        }
                        out.push(t);
                    }
                    return out;
                }
                if y.mnemonic() == Mnemonic::Movsxd
                    && y.op1_kind() == iced_x86::OpKind::Memory
                    && y.memory_index_scale() == 4
                    && y.memory_base() != Register::None
                    && y.memory_base() != Register::RIP
                {
                    movsxd_base = Some(y.memory_base());
                }
            }
            Some(Register::None) => {}
            Some(r) => {
                if y.mnemonic() == Mnemonic::Lea
                    && y.op0_register() == r
                    && y.is_ip_rel_memory_operand()
                {
                    let table = y.ip_rel_memory_address();
                    for j in 0..MAX {
                        let Some(b) = read(table + 4 * j as u64, 4) else {
                            break;
                        };
                        let e = i32::from_le_bytes(b.try_into().unwrap_or([0; 4]));
                        let t = table.wrapping_add(e as i64 as u64);
                        if !in_func(t) {
                            break;
                        }
                        out.push(t);
                    }
                    return out;
                }
            }
        }
    }
    out
}
