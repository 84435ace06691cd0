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
//!   bytes, the call is retargeted ([`How::Call`]) where it can be;
//!   otherwise the jump covers the call too and the trampoline makes the
//!   call as a push of the original return address and a jump: the return
//!   lands in the original code, as the unwinder expects (at the price of
//!   one mispredicted return: the slot is taken by a real call over one
//!   byte, so the processor's return stack stays in step and the returns
//!   above it are predicted; `encode::seq::emulate_call`).
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
//!   copied block, or alignment padding, within 128 bytes hops there
//!   ([`How::Hop`]).
//! * [`How::Call`]: a block that ends in a call (`call rel32`, or `call
//!   *disp(%rip)`) after less than 5 bytes of other instructions (none,
//!   often) is counted by retargeting the call to a stub that counts and
//!   jumps on; the instructions before it run in place, and the return
//!   address does not change. Nothing in a block branches, so the call
//!   runs exactly when the block is entered. An indirect call of another
//!   form after such a prefix (`mov %rbx,%rdi; call *0x28(%rbp)`) is
//!   counted the same way when its block's last 5 or 6 bytes start at an
//!   instruction: those bytes become `call rel32` (or `ds call rel32`),
//!   and the instructions they held before the call run in the stub, one
//!   push lower (so none of them may use `%rsp` or the stack), before
//!   the count and a jump through the call's operand. Its return is
//!   predicted, where an emulated call's is not (sqlite3's calls through
//!   `sqlite3GlobalConfig`: counted runs 2.7x native before, 2.1x after).
//! * [`How::Implied`] (hit mode only, [`Mode::Hits`]): not patched; the
//!   block before it in a chain always jumps or falls into it and is its
//!   only way in, so it ran exactly when the chain's first block did
//!   (`plan/hits.rs` states the rules and their one limit).
//! * [`How::Branches`] (hit mode only): not patched; a block ending in a
//!   conditional jump that is the only way into both blocks it leads to
//!   ran exactly when one of them did.
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
//! Indirect jumps: in a function holding an indexed `jmp *` whose table
//! is not recovered some leaders are unknown, so there a window is only
//! ever the block's first instruction; shorter blocks trap. Unless the
//! function's inner labels are stored in data (a computed goto through
//! `jmp *(%base,%idx,8)`, CPython's eval loop): then every label it can
//! reach is a leader (`tables::resolve_gotos`) and it is planned as any
//! other (python 3.11's `for` loop took 11 traps per iteration). The
//! indirect jumps whose table was recovered, and those of functions whose
//! inner labels are stored in data (computed gotos: `jmp *%reg`, or an
//! indexed `jmp *`), are listed in [`Plan::tables`]: they are not calls;
//! any other `jmp *` (`jmp *8(%rax)`, `jmp *slot(%rip)`, or `jmp *%reg`
//! elsewhere) may be a tail
//! call through a pointer, and when call targets are wanted
//! ([`crate::encode::Options`]) its targets are recorded like an indirect
//! call's (a block ends at each call and each jump, so one block holds at
//! most one such site, and its count is the site's).

pub use derive::{Derived, Edge};
pub use dom::TREE;

mod choose;
mod copied;
mod decode;
mod derive;
mod dom;
mod fall;
mod flags;
mod hits;
mod leaders;
mod masked;
mod short;
mod tables;

use std::path::Path;

use iced_x86::{FlowControl, Instruction, Mnemonic, Register, RflagsBits};
use object::{Object, ObjectSection, SectionFlags, SectionKind};
use rustc_hash::FxHashSet as HashSet;

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
    /// The block's last `len` bytes (5 or 6) are a call (`call rel32`;
    /// `call *disp(%rip)`), or instructions and an indirect call of
    /// another form, none using the stack: they become a call (`ds call`
    /// for 6) to a counting stub, which runs what they held before the
    /// call and jumps where it went; what comes before them (less than 5
    /// bytes) runs in place.
    Call { len: u32 },
    /// Counted in the trampoline of an earlier block whose window runs
    /// on into this one (it is entered only by falling through from it).
    Covered,
    /// Not patched: the block is entered only by falling through the
    /// conditional jump that ends the block before it, whose trampoline
    /// counts its fall-throughs (branch `branch`): that is its count,
    /// exactly. (A short block there would otherwise trap.) When it goes
    /// on into a block counted through a breakpoint, it has a trampoline
    /// all the same, counting nothing, which the one before it goes on
    /// into (`encode`, `fell_copy`).
    Fell { branch: u32 },
    /// Hit mode only ([`Mode::Hits`]): not patched; it ran exactly when
    /// block `by` ran: `by` always ends by jumping (or falling) into the
    /// chain that reaches this block, its only way in, and is the chain's
    /// first block (see `hits.rs`); or this block always goes on to `by`,
    /// which it dominates (see `dom.rs`). `by`'s hit may be derived in
    /// turn.
    Implied { by: u32 },
    /// Hit mode only: not patched; it ran exactly when one of `taken`
    /// and `fell` did. Either it ends in a conditional jump with no call
    /// before it and is the only way into both blocks the jump leads to
    /// (`taken`, and `fell`, the next one), each with a probe of its own,
    /// or dominates both (`dom.rs`); or it is a join entered from these
    /// two alone, each going on to it alone (`dom.rs`). Their hits may be
    /// derived in turn.
    Branches { taken: u32, fell: u32 },
    /// Hit mode only ([`Mode::Hits`]): one `int3` at the block's start
    /// that removes itself. Its first hit, in any thread, records that
    /// the block ran (counter `i`) and puts the original byte back, so
    /// every later run of the block is native: no trampoline, nothing
    /// relocated, and any block can hold one (see `hits.rs`, "One-shot
    /// probes").
    Once,
    /// Not counted.
    None,
}

/// What a plan's probes record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Every block's exact count (`incq %gs:8*i`), every counted branch's
    /// fall-throughs.
    #[default]
    Counts,
    /// Whether each block ran: a probe only where another block's does
    /// not imply it ([`How::Implied`], [`How::Branches`]); each one-shot
    /// ([`How::Once`]) but in functions that may run with SIGTRAP blocked
    /// (then a trampoline storing a byte, `movb $1,%gs:8*i`, and branch
    /// edges only where a derived block reads them; `hits.rs`). For
    /// cprof's marks; never for counts.
    Hits,
    /// [`Mode::Hits`], and whether each edge of each counted conditional
    /// jump ran ([`Plan::edges`]: `cprof --hits --lcov`). An edge that is
    /// its target's only way in is read from the target's hit; a jump
    /// with another edge keeps its trampoline, which stores a byte on
    /// each edge (`hits.rs`, "Edges").
    Edges,
}

impl Mode {
    /// Whether the probes record hits only ([`Mode::Hits`] or
    /// [`Mode::Edges`]).
    pub fn hits(self) -> bool {
        matches!(self, Mode::Hits | Mode::Edges)
    }
}

/// One planned block.
#[derive(Clone, Debug)]
pub struct PlannedBlock {
    /// Address of its first instruction (link-time).
    pub start: u64,
    /// Address past its last instruction.
    pub end: u64,
    /// Its instructions' addresses.
    pub insns: crate::insns::Insns,
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
    /// What its probes record: counts, or hits (then some blocks are
    /// [`How::Implied`] and its counters read 0 or 1 per thread).
    pub mode: Mode,
    /// The executable sections' addresses and bytes (a plan read from a
    /// mapped cache file shares the mapping's: cc1's text is 25 MB).
    pub(crate) sections: Vec<(u64, bytes::Bytes)>,
    /// Code (start, end) the module copies elsewhere at run time, whose
    /// blocks are therefore never patched: V8's embedded builtins, found
    /// by symbol (`plan/copied.rs`).
    pub copied: Vec<(u64, u64)>,
    /// Counting mode: blocks whose every way in is a counted edge of a
    /// block that counts itself, sorted by block. Their trampolines count
    /// nothing: a count is the sum of those edges (`plan/derive.rs`
    /// states the rule and why it is exact).
    pub derived: Vec<Derived>,
    /// [`Mode::Edges`] only, per branch: where whether it was taken and
    /// whether it fell through are read. `Some(k)`: block `k`'s hit (the
    /// edge is that block's only way in); `None`: a byte of its own that
    /// the jump's trampoline stores (taken: counter `blocks.len() +
    /// branches.len() + j`; fallen through: [`Plan::fell`]).
    pub edges: Vec<(Option<u32>, Option<u32>)>,
}

/// What [`Plan::build`] knows of a module besides its code.
struct Known<'a> {
    /// The probes' mode.
    mode: Mode,
    /// Whether [`Mode::Hits`] may leave implied blocks without a probe.
    prune: bool,
    /// Where the sweep starts again (`decode`): function starts that are
    /// instruction starts for sure.
    sync: &'a [u64],
    /// Code the module copies at run time (`copied`): not patched.
    copied: Vec<(u64, u64)>,
    /// C++ landing pads (`.eh_frame`'s LSDAs): entered by the unwinder.
    pads: Vec<u64>,
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
        let taken = if self.mode == Mode::Edges {
            self.branches.len()
        } else {
            0
        };
        (self.blocks.len() + self.branches.len() + taken) as u64
    }

    /// Blocks with a probe of their own (patched, or counted in a
    /// trampoline): neither derived nor uncounted.
    pub fn probes(&self) -> usize {
        self.blocks
            .iter()
            .filter(|b| {
                !matches!(
                    b.how,
                    How::None | How::Fell { .. } | How::Implied { .. } | How::Branches { .. }
                )
            })
            .count()
    }

    /// Blocks in [`Plan::copied`] (code the module copies at run time,
    /// never counted).
    pub fn copied_blocks(&self) -> u64 {
        self.blocks
            .iter()
            .filter(|b| copied::within(&self.copied, b.start))
            .count() as u64
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
        Plan::of_bytes_in(bytes, path, Mode::Counts)
    }

    /// [`Plan::of_bytes`] for the probes of `mode`.
    pub fn of_bytes_in(bytes: &[u8], path: &Path, mode: Mode) -> Result<Plan, PlanError> {
        let err = |why: String| PlanError::Read {
            path: path.display().to_string(),
            why,
        };
        let elf = profdev_symbolize::elf::ElfObject::parse(bytes, path)
            .map_err(|e| err(e.to_string()))?;
        let symbols = elf.all_symbols();
        let starts: Vec<u64> = symbols
            .iter()
            .filter(|s| s.origin != profdev_symbolize::elf::SymOrigin::Plt)
            .map(|s| s.addr)
            .collect();
        // The sweep starts again at the symbol tables' functions only: an
        // FDE may begin off an instruction (glibc's `__restore_rt`'s
        // starts on the last byte of the nop before it, for the unwinder).
        let sync: Vec<u64> = symbols
            .iter()
            .filter(|s| s.origin == profdev_symbolize::elf::SymOrigin::Table)
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
        // C++ landing pads are entered by the unwinder, from no jump: they
        // are entries, as function starts are. Where they cannot all be
        // read from the exception tables, any block may be one, and no
        // block is implied by another.
        let (prune, pads) = match profdev_symbolize::elf::landing_pads(&file) {
            Ok(pads) => (true, pads),
            Err(_) => (
                file.section_by_name(".gcc_except_table").is_none(),
                Vec::new(),
            ),
        };
        let known = Known {
            mode,
            prune,
            sync: &sync,
            copied: copied::copied(&file, &data),
            pads,
        };
        let mut plan = Plan::build(sections, &starts, &data, &taken, known);
        crate::insns::share(&mut plan.blocks);
        plan.build_id = elf.build_id().map(<[u8]>::to_vec);
        Ok(plan)
    }

    /// Plan code given as sections (address, bytes) and function starts.
    /// `data` holds the module's other sections (jump tables are read
    /// there); `taken`, the code addresses stored in the module's data
    /// and relocations.
    ///
    /// The passes, in order, each in a module of its own (`plan/*.rs`):
    /// decode, the hard leaders (`leaders`), jump tables (`tables`),
    /// masked functions and functions read as data (`masked`), computed
    /// gotos (`tables`), the other
    /// leaders and the blocks (`leaders`), flag liveness (`flags`), the
    /// patch choice (`choose`), short blocks (`short`) and fall-throughs
    /// (`fall`).
    pub fn new(
        sections: Vec<(u64, Vec<u8>)>,
        function_starts: &[u64],
        data: &[(u64, &[u8])],
        taken: &[u64],
    ) -> Plan {
        let known = Known {
            mode: Mode::Counts,
            prune: false,
            sync: function_starts,
            copied: Vec::new(),
            pads: Vec::new(),
        };
        Plan::build(sections, function_starts, data, taken, known)
    }

    /// [`Plan::new`] for the probes of `mode`; in [`Mode::Hits`], the
    /// blocks other blocks imply are left without a probe (the last pass,
    /// `hits`).
    pub fn new_in(
        mode: Mode,
        sections: Vec<(u64, Vec<u8>)>,
        function_starts: &[u64],
        data: &[(u64, &[u8])],
        taken: &[u64],
    ) -> Plan {
        let known = Known {
            mode,
            prune: true,
            sync: function_starts,
            copied: Vec::new(),
            pads: Vec::new(),
        };
        Plan::build(sections, function_starts, data, taken, known)
    }

    fn build(
        sections: Vec<(u64, Vec<u8>)>,
        function_starts: &[u64],
        data: &[(u64, &[u8])],
        taken: &[u64],
        known: Known,
    ) -> Plan {
        let Known {
            mode,
            prune,
            sync,
            copied,
            pads,
        } = known;
        let funcs = decode::Funcs::new(function_starts);
        let code = decode::decode_at(&sections, &decode::Funcs::new(sync));
        let mut hard = leaders::direct(&code, function_starts);
        let tables::Tables {
            targets,
            jumps: mut tables,
            mut unresolved,
        } = tables::jump_tables(&code, &funcs, data);
        // Where control may arrive from no instruction of the module's
        // own: function and section starts, jump tables' targets, code
        // addresses stored in data, landing pads.
        let mut entered: HashSet<u64> = function_starts.iter().copied().collect();
        entered.extend(code.section_starts.iter().copied());
        entered.extend(targets.iter().copied());
        entered.extend(taken.iter().copied());
        entered.extend(pads.iter().copied());
        hard.extend(targets);
        // A landing pad starts a block (no patch's window runs across it).
        hard.extend(pads.iter().copied().filter(|a| code.is_insn(*a)));
        let masked = masked::masked_functions(&code, &funcs);
        let spans: Vec<(u64, u64)> = sections
            .iter()
            .map(|(a, b)| (*a, *a + b.len() as u64))
            .collect();
        let read = masked::read_as_data(&code, &funcs, &spans);
        // Code addresses stored in data (labels of computed gotos,
        // function pointers): leaders.
        hard.extend(taken.iter().copied().filter(|a| code.is_insn(*a)));
        tables.extend(tables::computed_gotos(&code, &funcs, taken));
        tables::resolve_gotos(&code, &funcs, taken, &mut unresolved, &mut hard);
        let leaders = leaders::leaders(&code, &hard);
        let raw = leaders::blocks(&code, &leaders);
        let flags = flags::Flags::new(&code.insns, &raw);
        let choose::Chosen {
            mut blocks,
            branches,
            forbidden,
        } = choose::choose(&choose::Facts {
            insns: &code.insns,
            funcs: &funcs,
            unresolved: &unresolved,
            masked: &masked,
            read: &read,
            copied: &copied,
            padding: &leaders.padding,
            soft: &leaders.soft,
            raw: &raw,
            flags: &flags,
        });
        let scope = short::Scope {
            funcs: &funcs,
            unresolved: &unresolved,
            soft: &leaders.soft,
        };
        let dead = short::dead_bytes(&blocks, &leaders.runs, &scope);
        short::fell(&mut blocks, &branches, &scope);
        short::hop(&mut blocks, dead, &forbidden, &scope);
        tables.sort_unstable();
        tables.dedup();
        let fell_from = fall::fell_from(&blocks, &branches, &scope);
        let mut edges = Vec::new();
        if mode.hits() {
            let facts = hits::Facts {
                code: &code,
                entered: &entered,
                scope: &scope,
                prune,
            };
            if mode == Mode::Edges {
                edges = hits::edges(&blocks, branches.len(), &facts);
            }
            let signals = hits::masked_functions(&code, &funcs);
            hits::once(&mut blocks, &funcs, &signals, &edges);
            hits::hits(&mut blocks, &facts, &edges);
        }
        let derived = if mode == Mode::Counts {
            let facts = hits::Facts {
                code: &code,
                entered: &entered,
                scope: &scope,
                prune,
            };
            derive::derived(&blocks, &fell_from, &facts)
        } else {
            Vec::new()
        };
        Plan {
            blocks,
            branches,
            fell_from,
            build_id: None,
            tables,
            mode,
            sections: sections.into_iter().map(|(a, b)| (a, b.into())).collect(),
            copied,
            derived,
            edges,
        }
    }

    /// How block `i`'s count derives from the edges into it, if it does
    /// ([`Plan::derived`]).
    pub fn derived_of(&self, i: usize) -> Option<&Derived> {
        let k = self
            .derived
            .binary_search_by_key(&(i as u32), |d| d.block)
            .ok()?;
        Some(&self.derived[k])
    }

    /// The times block `p` (which counts itself) left by edge `e`.
    fn edge(&self, p: usize, e: Edge, c: &[u64]) -> u64 {
        let fell = || {
            self.blocks[p]
                .branch
                .map_or(0, |j| self.fell(j as usize, c))
        };
        match e {
            Edge::Whole => c[p],
            Edge::Taken => c[p].saturating_sub(fell()),
            Edge::Fell => fell(),
        }
    }

    /// The count of block `i` from the module's counters `c` (in
    /// [`Mode::Hits`], not 0 when it ran): its own counter, the
    /// fall-throughs it is derived from, or the count of the block that
    /// implies it.
    pub fn count(&self, i: usize, c: &[u64]) -> u64 {
        // (What an implied or branching block reads is counted, by a
        // probe of its own or derived in turn, with no cycle and at most
        // `dom::TREE` blocks read in all: `hits.rs`, `dom.rs`, and the
        // cache's check; a derived block's ways in count themselves.)
        if let Some(d) = self.derived_of(i) {
            return d
                .from
                .iter()
                .map(|&(p, e)| self.edge(p as usize, e, c))
                .sum();
        }
        match self.blocks[i].how {
            How::Fell { branch } => self.fell(branch as usize, c),
            How::Implied { by } => self.count(by as usize, c),
            How::Branches { taken, fell } => self
                .count(taken as usize, c)
                .max(self.count(fell as usize, c)),
            _ => c[i],
        }
    }

    /// The blocks whose probes block `i`'s count comes from: `i` itself,
    /// or those of the block implying it, or those of the two it reads
    /// (each derived in turn, or counted itself).
    pub fn counted_by(&self, i: usize) -> Vec<usize> {
        if let Some(d) = self.derived_of(i) {
            let mut by = Vec::new();
            for &(p, e) in &d.from {
                by.push(p as usize);
                let j = self.blocks[p as usize].branch;
                if let Some(k) = j.and_then(|j| self.fell_from[j as usize]) {
                    if e != Edge::Whole {
                        by.push(k as usize);
                    }
                }
            }
            return by;
        }
        match self.blocks[i].how {
            How::Implied { by } => self.counted_by(by as usize),
            How::Branches { taken, fell } => {
                let mut by = self.counted_by(taken as usize);
                by.extend(self.counted_by(fell as usize));
                by
            }
            _ => vec![i],
        }
    }

    /// [`Mode::Edges`]: whether branch `j` was taken and whether it fell
    /// through (each 1 or 0), from the module's counters `c`.
    pub fn edge_hits(&self, j: usize, c: &[u64]) -> (u64, u64) {
        let (taken, fell) = self.edges.get(j).copied().unwrap_or_default();
        let flag = self.blocks.len() + self.branches.len() + j;
        let taken = match taken {
            Some(k) => self.count(k as usize, c),
            None => c.get(flag).copied().unwrap_or(0),
        };
        // (A fall-through read from the block after the jump is that
        // block's hit, which may itself derive from others.)
        let fell = match fell.or(self.fell_from.get(j).copied().flatten()) {
            Some(k) => self.count(k as usize, c),
            None => self.fell(j, c),
        };
        (taken.min(1), fell.min(1))
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

#[cfg(test)]
mod testing {
    //! Helpers for the passes' tests: code assembled by hand, and the
    //! passes up to the patch choice run over it.

    use iced_x86::code_asm::CodeAssembler;
    use iced_x86::{BlockEncoder, BlockEncoderOptions, IcedError, Instruction, InstructionBlock};
    use rustc_hash::FxHashSet as HashSet;

    use super::decode::{decode, Code, Funcs};
    use super::{choose, flags, leaders, How, PlannedBlock};

    /// The code `f` assembles at `ip`.
    pub fn asm(ip: u64, f: impl FnOnce(&mut CodeAssembler)) -> Vec<u8> {
        let mut a = CodeAssembler::new(64).expect("64-bit");
        f(&mut a);
        a.assemble(ip).expect("assembles")
    }

    /// An `if` with an `else`, at 0x1000: x: cmp; add; je else | then:
    /// add; add; [call 0x9000;] jmp join | else: sub; sub | join: add;
    /// add; ret [| out: jmp join]. Blocks by address: x, then, else,
    /// join (then at 0x1007, else at 0x100d, join at 0x1011 without the
    /// call).
    pub fn diamond(call: bool, outside: bool) -> Vec<u8> {
        asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut other = a.create_label();
            let mut join = a.create_label();
            a.cmp(eax, edi).unwrap();
            a.add(ecx, 1).unwrap();
            a.je(other).unwrap();
            a.add(eax, ecx).unwrap();
            a.add(eax, edx).unwrap();
            if call {
                a.call(0x9000u64).unwrap();
            }
            a.jmp(join).unwrap();
            a.set_label(&mut other).unwrap();
            a.sub(eax, ecx).unwrap();
            a.sub(eax, edx).unwrap();
            a.set_label(&mut join).unwrap();
            a.add(eax, esi).unwrap();
            a.add(eax, edi).unwrap();
            a.ret().unwrap();
            if outside {
                a.jmp(join).unwrap();
            }
        })
    }

    /// `list` encoded at `ip` (its branch targets and RIP-relative
    /// operands absolute).
    pub fn encode_at(ip: u64, list: &[Instruction]) -> Vec<u8> {
        BlockEncoder::encode(
            64,
            InstructionBlock::new(list, ip),
            BlockEncoderOptions::NONE,
        )
        .expect("encodes")
        .code_buffer
    }

    /// An instruction made by `Instruction::with*`.
    pub fn op(x: Result<Instruction, IcedError>) -> Instruction {
        x.expect("a valid instruction")
    }

    /// `n` one-byte returns.
    pub fn rets(n: usize) -> Vec<u8> {
        vec![0xc3; n]
    }

    /// A block of one instruction at `start`, counted `how`.
    pub fn block(start: u64, end: u64, how: How) -> PlannedBlock {
        PlannedBlock {
            start,
            end,
            insns: vec![start].into(),
            how,
            flags_live: false,
            branch: None,
        }
    }

    /// A block `start..end` patched by a jump at its start and copied
    /// whole, ending in conditional jump `branch` (its last instruction,
    /// 2 bytes).
    pub fn branching(start: u64, end: u64, branch: u32) -> PlannedBlock {
        let mut b = block(
            start,
            end,
            How::Jmp {
                from: start,
                to: end,
                overwrite: 5,
            },
        );
        b.insns = vec![start, end - 2].into();
        b.branch = Some(branch);
        b
    }

    /// The passes up to the blocks, over `bytes` at 0x1000.
    pub struct Passes {
        code: Code,
        funcs: Funcs,
        unresolved: HashSet<u64>,
        masked: HashSet<u64>,
        leaders: leaders::Leaders,
        raw: Vec<(usize, usize)>,
    }

    impl Passes {
        /// The code `bytes` at 0x1000 with functions at `funcs`.
        pub fn of(bytes: &[u8], funcs: &[u64]) -> Passes {
            let code = decode(&[(0x1000, bytes.to_vec())]);
            let hard = leaders::direct(&code, funcs);
            let leaders = leaders::leaders(&code, &hard);
            let raw = leaders::blocks(&code, &leaders);
            Passes {
                code,
                funcs: Funcs::new(funcs),
                unresolved: HashSet::default(),
                masked: HashSet::default(),
                leaders,
                raw,
            }
        }

        /// With the functions at `f` unresolved.
        pub fn unresolved(mut self, f: &[u64]) -> Passes {
            self.unresolved = f.iter().copied().collect();
            self
        }

        /// With the functions at `f` masked.
        pub fn masked(mut self, f: &[u64]) -> Passes {
            self.masked = f.iter().copied().collect();
            self
        }

        /// The patch choice over them.
        pub fn choose(&self) -> choose::Chosen {
            let flags = flags::Flags::new(&self.code.insns, &self.raw);
            choose::choose(&choose::Facts {
                insns: &self.code.insns,
                funcs: &self.funcs,
                unresolved: &self.unresolved,
                masked: &self.masked,
                read: &Default::default(),
                copied: &[],
                padding: &self.leaders.padding,
                soft: &self.leaders.soft,
                raw: &self.raw,
                flags: &flags,
            })
        }
    }
}
