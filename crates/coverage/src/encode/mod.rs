//! Trampolines: a [`Plan`] made into code for one load of the module.
//!
//! Given the module's load bias, the address of the trampoline area the
//! runtime mapped (within ±2 GiB of the module) and the module's first
//! counter index, [`encode`] returns the area's bytes and the patches to
//! write into the module's code. A count is `incq %gs:8*INDEX`: each
//! thread's GS base is its own counter array (set by the runtime), so a
//! count is one unlocked instruction and no count is lost between threads.
//! Where the flags are live the count saves and restores them with
//! `lahf`/`seto` and `add`/`sahf` around it, below the red zone. A plan in
//! hit mode ([`crate::plan::Mode::Hits`]) has one-shot probes
//! ([`PATCH_ONCE`], no trampoline) or, in functions that may run with
//! SIGTRAP blocked, records with `movb $1,%gs:8*INDEX`
//! instead (the counter's low byte: no flag written, none saved, no read
//! that one execution's store must wait for), and has no probe for a
//! block another one implies ([`How::Implied`]: no trampoline, its bytes
//! run in place).
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
//! ([`How::Fell`]), which has a trampoline only when it goes on into a
//! block that traps (`fell_copy`), has one for a final site too, entered from the
//! trampoline before it (still unpatched, its count still derived; the
//! call emulated there). A site whose target cannot
//! be evaluated there (`call *%rsp`, a 32-bit address) is not recorded: its
//! calls stay counted, unattributed. Cost, measured: 5 to 7 ns per
//! recorded call (`profdev gmon --exact` of a loop of 10^8 calls through a
//! table of two functions: 0.8 to 1.0 s user against 0.3 s for `cprof -m`
//! of the same loop, which only counts; native 0.2 s; a loaded machine). The recorder saves the
//! flags with `seto`/`lahf` (with `pushfq`/`popfq` it cost 15 ns).

mod layout;
mod piece;
mod seq;
#[cfg(test)]
mod tests;
pub mod wire;

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction};

use crate::plan::{How, Plan};
pub(crate) use seq::record_seq;

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

impl Patch {
    /// The bytes written at [`Patch::addr`] (what the runtime's `apply_run`
    /// writes; a tracer patching a stopped process writes these): the
    /// jump or call, the rest of `len` bytes `int3`. None for a one-shot
    /// probe ([`PATCH_ONCE`], whose byte is put back by its handler) or an
    /// unknown kind, or a target out of reach.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        let mut b = vec![0xcc; self.len.max(1) as usize];
        let rel = |after: u64| i32::try_from(self.entry.wrapping_sub(after) as i64).ok();
        match self.kind {
            PATCH_JMP | PATCH_CALL5 if b.len() >= 5 => {
                b[0] = if self.kind == PATCH_JMP { 0xe9 } else { 0xe8 };
                b[1..5].copy_from_slice(&rel(self.addr + 5)?.to_le_bytes());
            }
            PATCH_INT3 => {}
            PATCH_CALL6 if b.len() >= 6 => {
                b[0] = 0x3e;
                b[1] = 0xe8;
                b[2..6].copy_from_slice(&rel(self.addr + 6)?.to_le_bytes());
            }
            PATCH_REL8 if b.len() >= 2 => {
                b[0] = 0xeb;
                b[1] = i8::try_from(self.entry.wrapping_sub(self.addr + 2) as i64).ok()? as u8;
            }
            _ => return None,
        }
        Some(b)
    }
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

/// One `int3` that removes itself ([`How::Once`]): `entry` is the
/// block's index in its module (its counter, from the module's first);
/// the runtime's SIGTRAP handler records the hit, puts the original byte
/// back and resumes there.
pub const PATCH_ONCE: u32 = 6;

/// The area's code and the patches.
#[derive(Clone, Debug, Default)]
pub struct Encoded {
    /// The trampoline area's bytes, to be mapped at the area's address.
    pub code: Vec<u8>,
    /// Patches by address (none here when `records` holds them).
    pub patches: Vec<Patch>,
    /// The patches as a cache file keeps them, when the encoding was read
    /// from one: their wire records, served as they are and read into
    /// [`Patch`]es only when asked for ([`Encoded::patch_list`]). cc1's
    /// 1,350,000 one-shot probes had been 32 MB of patches made from the
    /// file and then 16 MB of records made from those, before its process
    /// could start.
    pub records: Option<wire::Records>,
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
    /// Offsets in `code` of the 32-bit fields that reach the module (the
    /// rel32 of a branch back into it, a RIP-relative operand): what a
    /// move to another distance between area and module adjusts
    /// ([`Encoded::code_at`]).
    pub far_fixups: Vec<u32>,
    /// Whether `far_fixups` lists every reference to the module (none is
    /// a rel8 that happened to reach it): the code can move.
    pub movable: bool,
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

    /// The area's code for a load whose area lies `moved` bytes further
    /// from its module than the one this was encoded for (`(area - bias)
    /// - (area0 - bias0)`), its counters from `first_counter`: each field
    /// reaching the module takes the difference. None when the code
    /// cannot move ([`Encoded::movable`]) or a field would not reach.
    pub fn code_at(&self, first_counter: u64, moved: i64) -> Option<Vec<u8>> {
        if moved == 0 {
            return Some(self.code_for(first_counter));
        }
        if !self.movable {
            return None;
        }
        let mut code = self.code_for(first_counter);
        for &o in &self.far_fixups {
            let o = o as usize;
            let v = i32::from_le_bytes(code.get(o..o + 4)?.try_into().ok()?);
            let w = i32::try_from(i64::from(v).checked_sub(moved)?).ok()?;
            code[o..o + 4].copy_from_slice(&w.to_le_bytes());
        }
        Some(code)
    }

    /// Whether the code can move `moved` bytes further from its module
    /// ([`Encoded::code_at`] then gives it).
    pub fn moves(&self, moved: i64) -> bool {
        moved == 0
            || (self.movable
                && self.far_fixups.iter().all(|&o| {
                    let o = o as usize;
                    self.code
                        .get(o..o + 4)
                        .and_then(|b| b.try_into().ok())
                        .map(i32::from_le_bytes)
                        .and_then(|v| i64::from(v).checked_sub(moved))
                        .is_some_and(|w| i32::try_from(w).is_ok())
                }))
    }

    /// Its patches, by address, for the load it was made for.
    pub fn patch_list(&self) -> std::borrow::Cow<'_, [Patch]> {
        match &self.records {
            Some(r) => r.patches().into(),
            None => (&self.patches[..]).into(),
        }
    }

    /// How many patches it has.
    pub fn patch_count(&self) -> usize {
        match &self.records {
            Some(r) => r.len(),
            None => self.patches.len(),
        }
    }

    /// The patches for a load at `bias` with its area at `area`, from an
    /// encoding made for `bias0` and `area0` (`area - bias == area0 -
    /// bias0`).
    pub fn patches_for(&self, bias0: u64, area0: u64, bias: u64, area: u64) -> Vec<Patch> {
        self.patch_list()
            .iter()
            .map(|p| Patch {
                addr: p.addr.wrapping_sub(bias0).wrapping_add(bias),
                entry: if p.kind == PATCH_REL8 {
                    p.entry.wrapping_sub(bias0).wrapping_add(bias)
                } else if p.kind == PATCH_ONCE {
                    p.entry
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
    // Saturating: a plan read back from a damaged cache file must not
    // overflow here.
    let code = |from: u64, to: u64| to.saturating_sub(from).saturating_mul(5).saturating_add(96);
    let mut n = 4096u64;
    if opts.call_targets {
        for _ in plan.blocks.iter().filter(|b| ends_in_site(plan, b)) {
            n = n.saturating_add(RECORD_BYTES);
        }
    }
    for b in plan
        .blocks
        .iter()
        .filter(|b| matches!(b.how, How::Fell { .. }))
    {
        if let Some(to) = fell_copy(plan, b, opts) {
            n = n.saturating_add(code(b.start, to));
        }
    }
    for b in &plan.blocks {
        n = n.saturating_add(match b.how {
            How::Jmp { from, to, .. } => code(from, to),
            How::Int3 { to } | How::Hop { to, .. } => code(b.start, to),
            How::Call { .. } => 48,
            How::Covered => 48,
            How::None
            | How::Once
            | How::Fell { .. }
            | How::Implied { .. }
            | How::Branches { .. } => 0,
        });
        if b.branch.is_some() {
            n = n.saturating_add(48);
        }
    }
    n.div_ceil(4096).saturating_mul(4096)
}

/// The last instruction of `b`, decoded at its link-time address.
fn last_insn(plan: &Plan, b: &crate::plan::PlannedBlock) -> Option<Instruction> {
    let last = b.insns.last()?;
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

/// Where the trampoline of the unpatched block `b` (How::Fell) ends its
/// copy, if it has one: the block's end, when it goes on into a block
/// counted through a breakpoint (falling or jumping there). Entered only
/// by falling through the jump that ends the block before it, whose
/// trampoline then goes on into this one instead of back into the
/// module: the block's bytes stay as they are (it counts nothing; its
/// count is that fall-through), and the short block after it is reached
/// from a trampoline, which goes to its trampoline directly, not from
/// the module, where it traps (cc1's `xor %eax,%eax; ret` took 72,000
/// breakpoints in one compile). Not for every such block: given
/// trampolines everywhere, python3's loop ran 1.3x slower (for no cause
/// found without hardware counters; `bench/README.md`, session 48). None
/// for a block ending in a call, run in place either way.
fn fell_copy(plan: &Plan, b: &crate::plan::PlannedBlock, opts: Options) -> Option<u64> {
    if records_fell(plan, b, opts) {
        return Some(b.end);
    }
    let last = last_insn(plan, b)?;
    let traps = |at: u64| {
        plan.block_at(at)
            .is_some_and(|k| matches!(plan.blocks[k].how, How::Int3 { .. }))
    };
    let goes_on = match last.flow_control() {
        FlowControl::Call | FlowControl::IndirectCall => return None,
        FlowControl::UnconditionalBranch => traps(last.near_branch_target()),
        FlowControl::ConditionalBranch => traps(last.near_branch_target()) || traps(b.end),
        FlowControl::Next => traps(b.end),
        _ => false,
    };
    goes_on.then_some(b.end)
}

/// The trampolines for `plan` loaded at `bias`, the area at `area`, the
/// module's counters from `first_counter`.
pub fn encode(plan: &Plan, bias: u64, area: u64, first_counter: u64) -> Encoded {
    encode_with(plan, bias, area, first_counter, Options::default())
}

/// [`encode`], with what `opts` adds (its area sized by
/// [`area_size_with`]).
///
/// In three steps: each block's trampoline as instruction lists, its
/// branch targets still those of the original code (`encode/piece.rs`);
/// a place in the area for each, from a bound on its size, which gives
/// every block's entry; and each encoded in its place, its branches led
/// to the entries of the blocks they reach, with the patches that lead
/// the module's code there (both `encode/layout.rs`).
pub fn encode_with(
    plan: &Plan,
    bias: u64,
    area: u64,
    first_counter: u64,
    opts: Options,
) -> Encoded {
    let cx = Ctx {
        plan,
        bias,
        area,
        first_counter,
        opts,
    };
    let piece::Pieces {
        pieces,
        mut failed,
        mut failed_blocks,
    } = piece::pieces(&cx);
    let mut laid = layout::lay_out(&cx, pieces);
    failed += laid.failed_blocks.len() as u64;
    failed_blocks.extend(laid.failed_blocks);
    // One-shot probes: no trampoline, an `int3` at the block's start.
    let once = plan
        .blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.how == How::Once);
    let before = laid.patches.len();
    laid.patches.extend(once.map(|(i, b)| Patch {
        addr: b.start + bias,
        entry: i as u64,
        kind: PATCH_ONCE,
        len: 1,
    }));
    if laid.patches.len() != before {
        laid.patches.sort_by_key(|p| p.addr);
    }
    Encoded {
        code: laid.code,
        patches: laid.patches,
        records: None,
        failed,
        trapped: laid.trapped,
        failed_blocks,
        counter_fixups: laid.counter_fixups,
        far_fixups: laid.far_fixups,
        movable: laid.movable,
        first_counter,
    }
}

/// One encoding's parameters.
struct Ctx<'a> {
    plan: &'a Plan,
    /// The module's load bias.
    bias: u64,
    /// The area's address.
    area: u64,
    /// The module's first counter.
    first_counter: u64,
    opts: Options,
}

impl Ctx<'_> {
    /// Whether the probes record hits only ([`crate::plan::Mode::Hits`]).
    fn hits(&self) -> bool {
        self.plan.mode.hits()
    }

    /// The recording of the site `x` (at its run-time address) ending a
    /// block, when call targets are wanted and it is a site.
    fn record(&self, x: &Instruction) -> Option<Vec<Instruction>> {
        if !self.opts.call_targets || !is_site(self.plan, x, self.bias) {
            return None;
        }
        let link = x.ip().wrapping_sub(self.bias);
        let i = self
            .plan
            .blocks
            .partition_point(|b| b.start <= link)
            .checked_sub(1)?;
        record_seq(x, self.first_counter + i as u64)
    }

    /// The instructions at `from..to` (link-time), decoded at their
    /// run-time addresses; None if any does not decode.
    fn decode(&self, from: u64, to: u64) -> Option<Vec<Instruction>> {
        let bytes = self.plan.bytes(from, to - from)?;
        let mut d = Decoder::with_ip(64, bytes, from + self.bias, DecoderOptions::NONE);
        let mut v = Vec::new();
        while d.can_decode() {
            let x = d.decode();
            if x.code() == Code::INVALID {
                return None;
            }
            v.push(x);
        }
        Some(v)
    }
}
