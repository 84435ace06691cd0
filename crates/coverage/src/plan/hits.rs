//! Pass 11, hit mode only ([`Mode::Hits`](super::Mode::Hits)): the
//! blocks whose having run other blocks' probes imply, left without a
//! probe, and the branch edges no derived block reads, left uncounted.
//!
//! **One-shot probes** ([`How::Once`], first): in a module that makes no
//! system call itself, every block with a probe gets one `int3` at its
//! start instead of a trampoline. The runtime's SIGTRAP handler marks the
//! block (a byte in the first thread array), puts the original byte back
//! (through `/proc/self/mem`: the page is never made writable) and resumes
//! there: every later run is native, so a loop costs one trap per block
//! once (about 4 µs on the 2-vCPU VM), then nothing (UnTracer's and
//! bias-free sampling's idea). One byte is written each way, so no thread
//! ever sees a torn instruction: another thread reaching the probe at
//! once traps too and finds the byte back, or runs the original. Any
//! block can hold one (nothing is relocated), so every encoder constraint
//! below is void for them and more blocks are implied. Not in code that
//! may run with SIGTRAP blocked, where an `int3` kills
//! ([`masked_functions`]: the C library's, around `pthread_create`,
//! `posix_spawn`, `raise`), nor in a block a kept patch writes into.
//!
//! **The rules** (the simplest sound ones over Agrawal's superblocks):
//!
//! * **Chains** ([`How::Implied`]): block B is implied by block A when A's
//!   last instruction is a direct `jmp` to B, or A simply falls into B,
//!   and that is B's only way in. Then B ran exactly when A did.
//! * **Forks** ([`How::Branches`]): block X ending in a conditional jump
//!   is the only way into both blocks the jump leads to, and each has a
//!   probe at its start. Then X ran exactly when one of them did.
//! * **Meetings** ([`How::Implied`], [`meeting`]): block J is where the
//!   ways out of X ending in a conditional jump meet again: the blocks
//!   between (at most [`REGION`]) are entered from X and one another
//!   alone, each goes on as A does (no call, no return, no indirect
//!   jump), none leads back to X or into the region, and every way into J
//!   comes from them (an `if` with or without an `else`, nested ones).
//!   Then J ran exactly when X did: once in X, control crosses a few of
//!   them (no cycle) and must reach J, and J is reached only so.
//! * **Dominance** and **joins** (`dom.rs`, last): X that runs to its end
//!   and goes on only to blocks it dominates ran exactly when one of
//!   them did (a loop's guard, an entry falling into a loop); J entered
//!   by two ways alone, from blocks that each go on to J alone, ran
//!   exactly when one of them did (the join after two calls). Their
//!   hits may be read through other derived blocks, with no cycle.
//!
//! The first three hold because (the last two: `dom.rs`):
//!
//! * A (or X, up to its jump) holds no call (calls end blocks) and no
//!   instruction that may not go on (`syscall`, `int`, `hlt`), so once
//!   entered it reaches its jump: a callee that exits or longjmps ends a
//!   *call* block, never such an A;
//! * nothing else enters B (or X's two, or a meeting's region and J): no
//!   other jump, call or fall-through of the module leads there, it is no
//!   function or section start, no jump table's target, no code address
//!   stored in data (computed gotos, function pointers), no C++ landing
//!   pad (the unwinder enters those, from no jump: read from each FDE's
//!   LSDA by `profdev_symbolize::elf::landing_pads`, and each starts a
//!   block), and its function has no indirect jump whose targets are
//!   unknown. A module whose exception tables cannot all be read (an LSDA
//!   with a landing pad base of its own, through a pointer, in an
//!   encoding not known) is not pruned at all: any instruction may be a
//!   landing pad.
//!
//! Chains are followed to their first block, which is counted (it may be
//! a fork); a cycle (code no one enters) is left probed. A fork's two
//! keep their probes (neither is made a fork or implied itself). What the
//! encoder needs of a block is kept: a block hosting another's hop slot,
//! running its window on into the next block ([`How::Covered`]), or whose
//! branch a derived block ([`How::Fell`]) reads keeps its trampoline;
//! only blocks patched at their start (a jump, a trap, a hop) are left
//! unpatched, so their bytes run in place.
//!
//! **Edges** ([`Mode::Edges`](super::Mode::Edges), `cprof --hits
//! --lcov`): whether each edge of each counted conditional jump ran. An
//! edge whose target block has no other way in (the same test as a
//! chain's: [`ways`], no entry from outside, no unknown indirect jump,
//! the module pruned at all) ran exactly when its target did, given the
//! jump's block ran: it is read from the target's hit. A jump with an
//! edge that is not so implied keeps its trampoline (as in counting mode,
//! so every entry into its block runs the copy): the copied jump's
//! fall-through stores a byte (the branch's counter) and its taken path
//! goes through a stub that stores another (`encode/piece.rs`), both
//! `movb`, which writes no flag. That block is then neither one-shot nor
//! implied, and its branch is kept. Nothing else changes: every block's
//! hit is recorded as in [`Mode::Hits`](super::Mode::Hits).
//!
//! The one way the rules can err is the one a block's count already
//! shares: a fault or an asynchronous signal whose handler does not
//! return, inside A (or X), leaves A counted as run whole, and so B (and
//! a fork interrupted before its jump is marked as not run).

use iced_x86::{FlowControl, Instruction, Mnemonic, OpKind};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::decode::{Code, Funcs};
use super::short::Scope;
use super::{ends_flow, How, PlannedBlock};

/// What the pass reads of the earlier ones.
pub(super) struct Facts<'a> {
    pub code: &'a Code,
    /// Addresses control may reach from outside the module's own
    /// instructions (function and section starts, jump tables' targets,
    /// stored code addresses).
    pub entered: &'a HashSet<u64>,
    pub scope: &'a Scope<'a>,
    /// Whether blocks may be implied at all (the landing pads are known).
    pub prune: bool,
}

/// Per branch of `blocks` (`n` in all), where whether it was taken and
/// whether it fell through are read ([`super::Plan::edges`]): the target
/// block whose only way in the edge is, or `None`, a flag of the branch's
/// own.
pub(super) fn edges(
    blocks: &[PlannedBlock],
    n: usize,
    f: &Facts,
) -> Vec<(Option<u32>, Option<u32>)> {
    let mut out = vec![(None, None); n];
    let ways = ways(blocks, f.code);
    for (x, b) in blocks.iter().enumerate() {
        let (Some(j), Some(last)) = (b.branch, b.insns.last().and_then(|a| insn_at(f.code, a)))
        else {
            continue;
        };
        let implied = |t: u64| {
            let k = only_from(blocks, &ways, f, t, x)?;
            (f.prune && blocks[k].how != How::None).then_some(k as u32)
        };
        let taken = direct_target(last).and_then(implied);
        out[j as usize] = (taken, implied(b.end));
    }
    out
}

/// The branches whose edges are not all implied ([`edges`]): their
/// blocks keep their trampolines.
pub(super) fn flagged(edges: &[(Option<u32>, Option<u32>)]) -> HashSet<u32> {
    (0..edges.len() as u32)
        .filter(|&j| matches!(edges[j as usize], (None, _) | (_, None)))
        .collect()
}

/// Where nothing but the block `from` leads: the block starting at `t`,
/// when it is one (`ways`: every way into each address).
fn only_from(
    blocks: &[PlannedBlock],
    ways: &HashMap<u64, u32>,
    f: &Facts,
    t: u64,
    from: usize,
) -> Option<usize> {
    let k = blocks.binary_search_by_key(&t, |b| b.start).ok()?;
    let alone = k != from
        && ways.get(&t) == Some(&1)
        && !f.entered.contains(&t)
        && !f.scope.unresolved_at(t);
    alone.then_some(k)
}

/// Leave implied blocks without a probe, and the branches no derived
/// block reads uncounted (but those whose edges are flagged: `edges`,
/// [`super::Mode::Edges`]).
pub(super) fn hits(blocks: &mut [PlannedBlock], f: &Facts, edges: &[(Option<u32>, Option<u32>)]) {
    let flagged = flagged(edges);
    if f.prune {
        for (i, how) in derived(blocks, f, &flagged).into_iter().enumerate() {
            if let Some(how) = how {
                blocks[i].how = how;
            }
        }
    }
    let mut read: HashSet<u32> = blocks
        .iter()
        .filter_map(|b| match b.how {
            How::Fell { branch } => Some(branch),
            _ => None,
        })
        .collect();
    read.extend(flagged);
    for b in blocks.iter_mut() {
        if b.branch.is_some_and(|j| !read.contains(&j)) {
            b.branch = None;
        }
    }
}

/// The functions of a module that may run with SIGTRAP blocked, by the
/// module's own doing: the runtime keeps SIGTRAP out of the masks set
/// through the C library's `sigprocmask`, `pthread_sigmask` and
/// `sigaction` (interposed), not out of a raw `rt_sigprocmask`, and an
/// `int3` reached with SIGTRAP blocked kills the process. The C library
/// blocks every signal itself around `pthread_create` (and the new
/// thread starts so), `posix_spawn` (and its child), `raise`; so these
/// keep their trampolines, the rest of the module gets one-shot probes.
///
/// Which: the functions holding a system call that sets a mask
/// (`rt_sigprocmask`, `rt_sigaction`'s `sa_mask`) or whose number is not
/// a constant before it (`syscall()`), and everything they reach by
/// direct call or jump, or whose address they take (a thread's or
/// spawned child's start); and their direct callers (a wrapper such as
/// `pthread_sigmask` returns with the mask it set: glibc's aio and timer
/// helpers block all, create a thread, restore). A function reached only
/// through a pointer or an IFUNC slot from there, or called by such a
/// caller while it holds the mask, is not followed (see cprof's Bugs).
pub(super) fn masked_functions(code: &Code, funcs: &Funcs) -> HashSet<u64> {
    let mut seeds: HashSet<u64> = HashSet::default();
    let mut edges: HashMap<u64, HashSet<u64>> = HashMap::default();
    let mut callers: HashMap<u64, HashSet<u64>> = HashMap::default();
    let mut returns: HashSet<u64> = HashSet::default();
    let starts: HashSet<u64> = funcs.0.iter().copied().collect();
    for (k, x) in code.insns.iter().enumerate() {
        let f = funcs.of(x.ip());
        let sys = matches!(x.mnemonic(), Mnemonic::Syscall | Mnemonic::Sysenter)
            || (x.mnemonic() == Mnemonic::Int && x.immediate8() == 0x80);
        if sys && masks(code, k, f, funcs) {
            seeds.insert(f);
        }
        if x.flow_control() == FlowControl::Return {
            returns.insert(f);
        }
        let to = if x.is_ip_rel_memory_operand() && x.mnemonic() == Mnemonic::Lea {
            Some(x.ip_rel_memory_address())
        } else {
            direct_target(x)
        };
        if let Some(t) = to.filter(|t| starts.contains(t) && *t != f) {
            edges.entry(f).or_default().insert(t);
            if x.flow_control() == FlowControl::Call {
                callers.entry(t).or_default().insert(f);
            }
        }
    }
    let mut out: HashSet<u64> = seeds.clone();
    let mut todo: Vec<u64> = out.iter().copied().collect();
    while let Some(f) = todo.pop() {
        for &g in edges.get(&f).into_iter().flatten() {
            if out.insert(g) {
                todo.push(g);
            }
        }
    }
    // (Callers of a seed that never returns, `abort`, go on unmasked.)
    for s in seeds.iter().filter(|s| returns.contains(s)) {
        out.extend(callers.get(s).into_iter().flatten().copied());
    }
    out
}

/// Whether the system call at `code.insns[k]` (in the function at `f`)
/// may set a signal mask: its number (`%eax`, from a constant moved into
/// it or into the register copied into it, up to 16 instructions back in
/// the function, no jump crossed) is `rt_sigaction` (13) or
/// `rt_sigprocmask` (14), or is not known.
fn masks(code: &Code, k: usize, f: u64, funcs: &Funcs) -> bool {
    use iced_x86::Register;
    let mut want = Register::RAX;
    for x in code.insns[..k].iter().rev().take(16) {
        if funcs.of(x.ip()) != f || ends_flow(x) {
            return true;
        }
        let writes = x.op_count() > 0
            && x.op0_kind() == OpKind::Register
            && x.op0_register().full_register() == want;
        if !writes {
            continue;
        }
        match (x.mnemonic(), x.op1_kind()) {
            (Mnemonic::Mov, OpKind::Immediate32 | OpKind::Immediate32to64) => {
                return matches!(x.immediate(1), 13 | 14);
            }
            (Mnemonic::Mov, OpKind::Register) => want = x.op1_register().full_register(),
            // `xor %eax,%eax`: read(2).
            (Mnemonic::Xor, OpKind::Register) if x.op1_register() == x.op0_register() => {
                return false;
            }
            _ => return true,
        }
    }
    true
}

/// One-shot probes: every block with a probe of its own (patched or
/// counted in a trampoline in counting mode) outside the functions
/// `masked` ([`masked_functions`]) and not ending in a jump whose edges
/// are flagged (`edges`) gets [`How::Once`], an `int3` at its start, and
/// no branch edge; blocks that cannot be counted stay so (code read as
/// data, code that does not decode).
pub(super) fn once(
    blocks: &mut [PlannedBlock],
    funcs: &Funcs,
    masked: &HashSet<u64>,
    edges: &[(Option<u32>, Option<u32>)],
) {
    let flagged = flagged(edges);
    let mut keep: Vec<bool> = blocks
        .iter()
        .map(|b| {
            masked.contains(&funcs.of(b.start)) || b.branch.is_some_and(|j| flagged.contains(&j))
        })
        .collect();
    // A block some kept block's patch writes into (a jump's window run
    // on into it, a hop's slot in its dead bytes) keeps its plan too: its
    // bytes do not run in place. So does the block a kept one is counted
    // in.
    let mut todo: Vec<usize> = (0..blocks.len()).filter(|&i| keep[i]).collect();
    while let Some(i) = todo.pop() {
        let b = &blocks[i];
        // Counted in (or derived from) the trampoline of the block before
        // it: that one keeps its plan as well.
        if matches!(b.how, How::Covered | How::Fell { .. }) && i > 0 && !keep[i - 1] {
            keep[i - 1] = true;
            todo.push(i - 1);
        }
        let written: Vec<(u64, u64)> = match b.how {
            How::Jmp {
                from, overwrite, ..
            } => vec![(from, from + u64::from(overwrite))],
            How::Hop { slot, .. } => vec![(b.start, b.start + 2), (slot, slot + 5)],
            _ => Vec::new(),
        };
        for (lo, hi) in written {
            let first = blocks.partition_point(|x| x.end <= lo);
            for j in first..blocks.len() {
                if blocks[j].start >= hi {
                    break;
                }
                if !keep[j] {
                    keep[j] = true;
                    todo.push(j);
                }
            }
        }
    }
    for (b, kept) in blocks.iter_mut().zip(keep) {
        if kept {
            continue;
        }
        if b.how != How::None {
            b.how = How::Once;
        }
        b.branch = None;
    }
}

/// The instruction at `addr`.
pub(super) fn insn_at(code: &Code, addr: u64) -> Option<&Instruction> {
    let k = code
        .insns
        .binary_search_by_key(&addr, Instruction::ip)
        .ok()?;
    Some(&code.insns[k])
}

/// Whether `x` may not go on although it does not branch (a system
/// call, a software interrupt, `hlt`).
pub(super) fn stops(x: &Instruction) -> bool {
    matches!(
        x.mnemonic(),
        Mnemonic::Syscall
            | Mnemonic::Sysenter
            | Mnemonic::Int
            | Mnemonic::Int1
            | Mnemonic::Into
            | Mnemonic::Hlt
    )
}

/// Whether `x` is a direct branch (or call) and where it leads.
pub(super) fn direct_target(x: &Instruction) -> Option<u64> {
    let branches = matches!(
        x.flow_control(),
        FlowControl::UnconditionalBranch
            | FlowControl::ConditionalBranch
            | FlowControl::Call
            | FlowControl::XbeginXabortXend
    );
    (branches && x.op0_kind() == OpKind::NearBranch64).then(|| x.near_branch_target())
}

/// The ways into each address from the module's own blocks: every
/// direct branch or call to it, and the fall-through of the block before
/// it.
pub(super) fn ways(blocks: &[PlannedBlock], code: &Code) -> HashMap<u64, u32> {
    let mut ways: HashMap<u64, u32> = HashMap::default();
    for b in blocks {
        let Some(last) = b.insns.last().and_then(|a| insn_at(code, a)) else {
            continue;
        };
        if let Some(t) = direct_target(last) {
            *ways.entry(t).or_default() += 1;
        }
        if !ends_flow(last) {
            *ways.entry(b.end).or_default() += 1;
        }
    }
    ways
}

/// Whether every instruction of `b` before its last goes on to the next
/// (no branch, no call, nothing that may not go on): once entered, `b`
/// reaches its last instruction.
pub(super) fn plain_before(b: &PlannedBlock, code: &Code) -> bool {
    let plain = |x: &Instruction| x.flow_control() == FlowControl::Next && !stops(x);
    if let Some((_, before)) = super::dom::insns_of(b, code).and_then(|x| x.split_last()) {
        return before.iter().all(plain);
    }
    b.insns
        .iter()
        .take(b.insns.len().saturating_sub(1))
        .all(|a| insn_at(code, a).is_some_and(plain))
}

/// Per block, how its hit derives from other blocks' probes, if it does.
/// (`flagged`: branches whose blocks keep their trampolines.)
fn derived(blocks: &[PlannedBlock], f: &Facts, flagged: &HashSet<u32>) -> Vec<Option<How>> {
    let n = blocks.len();
    let ways = ways(blocks, f.code);
    // Per block, the block it always goes on to, when it goes on to one
    // only (a direct jump, or falling through) and runs to its end.
    let mut next: Vec<Option<u64>> = vec![None; n];
    // Per block ending in a conditional jump with nothing before it that
    // may not go on, where the jump leads (taken, fallen through).
    let mut forks: Vec<Option<(u64, u64)>> = vec![None; n];
    for (i, b) in blocks.iter().enumerate() {
        let Some(last) = b.insns.last().and_then(|a| insn_at(f.code, a)) else {
            continue;
        };
        let before = plain_before(b, f.code);
        let goes_on = before
            && match last.flow_control() {
                FlowControl::Next => !stops(last),
                FlowControl::UnconditionalBranch => true,
                _ => false,
            };
        if before && last.flow_control() == FlowControl::ConditionalBranch {
            forks[i] = direct_target(last).map(|t| (t, b.end));
        }
        if !goes_on {
            continue;
        }
        next[i] = match last.flow_control() {
            FlowControl::Next => Some(b.end),
            _ => direct_target(last),
        };
    }
    // What the encoder needs of each block.
    let mut slots: Vec<u64> = blocks
        .iter()
        .filter_map(|b| match b.how {
            How::Hop { slot, .. } => Some(slot),
            _ => None,
        })
        .collect();
    slots.sort_unstable();
    let mut read: HashSet<u32> = blocks
        .iter()
        .filter_map(|b| match b.how {
            How::Fell { branch } => Some(branch),
            _ => None,
        })
        .collect();
    read.extend(flagged.iter().copied());
    let free = |b: &PlannedBlock| {
        let patched_at_start = match b.how {
            How::Jmp { from, to, .. } => from == b.start && to <= b.end,
            How::Int3 { .. } | How::Hop { .. } | How::Once => true,
            _ => false,
        };
        patched_at_start
            && slots
                .get(slots.partition_point(|&s| s < b.start))
                .is_none_or(|&s| s >= b.end)
            && b.branch.is_none_or(|j| !read.contains(&j))
    };
    // Where nothing but the block at `from` leads: the block starting at
    // `t`, when it is one.
    let only_from = |t: u64, from: usize| only_from(blocks, &ways, f, t, from);
    let mut out: Vec<Option<How>> = vec![None; n];
    // A fork both of whose ways lead to blocks entered from it alone,
    // each patched at its start: one of the two ran exactly when it did.
    // (Those two keep their probes: a fork is never the way into one.)
    let mut kept = vec![false; n];
    for (x, fork) in forks.iter().enumerate() {
        let Some((t, fl)) = *fork else { continue };
        if kept[x] || !free(&blocks[x]) || f.scope.unresolved_at(blocks[x].start) {
            continue;
        }
        let (Some(kt), Some(kf)) = (only_from(t, x), only_from(fl, x)) else {
            continue;
        };
        let own = |k: usize| free(&blocks[k]) || matches!(blocks[k].how, How::Call { .. });
        if kt == kf || out[kt].is_some() || out[kf].is_some() || !own(kt) || !own(kf) {
            continue;
        }
        kept[kt] = true;
        kept[kf] = true;
        out[x] = Some(How::Branches {
            taken: kt as u32,
            fell: kf as u32,
        });
    }
    // A chain: each block implied by the one before it.
    let mut by: Vec<Option<usize>> = vec![None; n];
    for (a, t) in next.iter().enumerate() {
        let Some(t) = *t else { continue };
        let Some(bi) = only_from(t, a) else { continue };
        if free(&blocks[bi]) && !kept[bi] && out[bi].is_none() {
            by[bi] = Some(a);
        }
    }
    // A region: the block a fork's ways meet again at, when nothing else
    // leads into the region or to that block (an `if` with or without an
    // `else`, nested ones, no call): it ran exactly when the fork did.
    for (x, fork) in forks.iter().enumerate() {
        if fork.is_none() || f.scope.unresolved_at(blocks[x].start) {
            continue;
        }
        let Some(j) = meeting(blocks, &ways, f, &next, &forks, x) else {
            continue;
        };
        if free(&blocks[j]) && !kept[j] && out[j].is_none() && by[j].is_none() {
            by[j] = Some(x);
        }
    }
    // Each chain to its first block, which must be counted (by a probe of
    // its own or a fork's two); a cycle (no way in) stays probed.
    for (i, o) in out.iter_mut().enumerate() {
        let mut r = i;
        let mut steps = 0;
        while let Some(p) = by[r] {
            r = p;
            steps += 1;
            if r == i || steps > n {
                break;
            }
        }
        let counted = !matches!(blocks[r].how, How::None);
        if r != i && by[r].is_none() && counted {
            *o = Some(How::Implied { by: r as u32 });
        }
    }
    super::dom::from_dominated(blocks, f, &ways, |k| free(&blocks[k]), &mut out);
    out
}

/// The most blocks [`meeting`] takes into a region.
const REGION: usize = 16;

/// Where every way out of the fork `x` meets again: the block `j` such
/// that the blocks between (the region, at most [`REGION`]) are entered
/// from `x` and one another alone, each runs to its end and goes on
/// (`next`, `forks`: no call, nothing that may not go on, no return or
/// indirect jump), none leads back into the region or to `x`, and every
/// way into `j` comes from the region; `j` is no entry from outside
/// either. Then `x` ran exactly when `j` did: once in `x`, control passes
/// a few region blocks (no cycle) and must reach `j`; and `j` is reached
/// only through the region, which is entered only through `x`.
fn meeting(
    blocks: &[PlannedBlock],
    ways: &HashMap<u64, u32>,
    f: &Facts,
    next: &[Option<u64>],
    forks: &[Option<(u64, u64)>],
    x: usize,
) -> Option<usize> {
    let at = |t: u64| blocks.binary_search_by_key(&t, |b| b.start).ok();
    let outs = |k: usize| match (forks[k], next[k]) {
        (Some((t, fl)), _) => Some([Some(t), Some(fl)]),
        (None, Some(t)) => Some([Some(t), None]),
        (None, None) => None,
    };
    let alone = |t: u64, edges: u32| {
        ways.get(&t) == Some(&edges) && !f.entered.contains(&t) && !f.scope.unresolved_at(t)
    };
    let mut region: Vec<u64> = vec![blocks[x].start];
    // The ways from the region into each address outside it.
    let mut open: Vec<(u64, u32)> = Vec::new();
    let add = |k: usize, open: &mut Vec<(u64, u32)>| -> Option<()> {
        for t in outs(k)?.into_iter().flatten() {
            match open.iter_mut().find(|e| e.0 == t) {
                Some(e) => e.1 += 1,
                None => open.push((t, 1)),
            }
        }
        Some(())
    };
    add(x, &mut open)?;
    loop {
        // No way back into the region (to `x`: the other blocks are
        // entered from the region alone, so a later way into one is
        // already counted in its ways).
        if open.iter().any(|e| region.contains(&e.0)) {
            return None;
        }
        if let [(t, edges)] = open[..] {
            return at(t).filter(|&j| j != x && alone(t, edges));
        }
        if region.len() >= REGION {
            return None;
        }
        let i = open
            .iter()
            .position(|&(t, edges)| alone(t, edges) && at(t).is_some_and(|k| outs(k).is_some()))?;
        let (t, _) = open.swap_remove(i);
        region.push(t);
        add(at(t)?, &mut open)?;
    }
}

#[cfg(test)]
mod tests {
    use crate::plan::testing::{asm, diamond};
    use crate::plan::{How, Mode, Plan};

    /// A chain of three blocks laid out out of order, each entered only by
    /// the jump before it: `a: mov; jmp b | c: add; ret | b: mov; jmp c`.
    fn chain() -> Vec<u8> {
        asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut b = a.create_label();
            let mut c = a.create_label();
            a.mov(eax, 1).unwrap();
            a.jmp(b).unwrap();
            a.set_label(&mut c).unwrap();
            a.add(eax, ecx).unwrap();
            a.add(eax, edx).unwrap();
            a.add(eax, esi).unwrap();
            a.ret().unwrap();
            a.set_label(&mut b).unwrap();
            a.mov(ecx, 2).unwrap();
            a.jmp(c).unwrap();
        })
    }

    #[test]
    fn a_chain_has_one_probe_in_hit_mode() {
        let bytes = chain();
        let counts = Plan::new(vec![(0x1000, bytes.clone())], &[0x1000], &[], &[]);
        let hits = Plan::new_in(Mode::Hits, vec![(0x1000, bytes)], &[0x1000], &[], &[]);
        assert_eq!(counts.blocks.len(), 3);
        assert_eq!(counts.probes(), 3);
        assert_eq!(hits.mode, Mode::Hits);
        assert_eq!(hits.blocks.len(), 3);
        assert_eq!(hits.probes(), 1, "{:?}", hits.blocks);
        // Blocks by address: a, c, b; both later ones implied by a.
        assert!(!matches!(hits.blocks[0].how, How::Implied { .. }));
        assert_eq!(hits.blocks[1].how, How::Implied { by: 0 });
        assert_eq!(hits.blocks[2].how, How::Implied { by: 0 });
        // Each block ran exactly when the first did.
        for ran in [0, 1] {
            let c = [ran, 0, 0];
            let marks: Vec<u64> = (0..3).map(|i| hits.count(i, &c)).collect();
            assert_eq!(marks, [ran; 3]);
        }
    }

    #[test]
    fn where_a_forks_ways_meet_again_the_block_ran_when_the_fork_did() {
        let plan = |call, outside| {
            Plan::new_in(
                Mode::Hits,
                vec![(0x1000, diamond(call, outside))],
                &[0x1000],
                &[],
                &[],
            )
        };
        // x is a fork of then and else (each its only way in), and join
        // is where they meet: no probe but then's and else's.
        let p = plan(false, false);
        assert_eq!(p.blocks.len(), 4, "{:?}", p.blocks);
        assert_eq!(p.blocks[0].how, How::Branches { taken: 2, fell: 1 });
        assert_eq!(p.blocks[3].how, How::Implied { by: 0 }, "{:?}", p.blocks);
        assert_eq!(p.probes(), 2);
        for (c, ran) in [([0, 0, 0, 0], 0), ([0, 1, 0, 0], 1), ([0, 0, 1, 0], 1)] {
            assert_eq!(p.count(3, &c), ran, "{c:?}");
        }
        // A call in then may not return: join keeps its probe (and so
        // does then, a call block; x is no fork of two blocks run whole).
        let p = plan(true, false);
        assert!(!matches!(p.blocks.last().unwrap().how, How::Implied { .. }));
        assert!(p
            .blocks
            .iter()
            .all(|b| !matches!(b.how, How::Implied { .. })));
        // Another way into join (a jump from outside the region): join
        // keeps its probe.
        let p = plan(false, true);
        assert!(
            p.blocks
                .iter()
                .all(|b| !matches!(b.how, How::Implied { .. })),
            "{:?}",
            p.blocks
        );
    }

    #[test]
    fn an_if_without_else_and_a_loop() {
        // x: cmp; je join | then: add; add | join: add; ret. then is
        // entered from x alone, join from x and then: join ran exactly
        // when x did.
        let bytes = asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut join = a.create_label();
            a.cmp(eax, edi).unwrap();
            a.add(ecx, 1).unwrap();
            a.je(join).unwrap();
            a.add(eax, ecx).unwrap();
            a.add(eax, edx).unwrap();
            a.set_label(&mut join).unwrap();
            a.add(eax, 7).unwrap();
            a.ret().unwrap();
        });
        let p = Plan::new_in(Mode::Hits, vec![(0x1000, bytes)], &[0x1000], &[], &[]);
        assert_eq!(p.blocks.len(), 3);
        assert_eq!(p.blocks[2].how, How::Implied { by: 0 }, "{:?}", p.blocks);
        assert_eq!(p.probes(), 2);
        assert_eq!(p.count(2, &[1, 0, 0]), 1);
        assert_eq!(p.count(2, &[0, 0, 0]), 0);
        // A loop: x: cmp; je out | body: add; jmp x | out: ret. The way
        // back makes no region (x may run many times, out once).
        let bytes = asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut top = a.create_label();
            let mut out = a.create_label();
            a.add(eax, 1).unwrap();
            a.set_label(&mut top).unwrap();
            a.cmp(eax, edi).unwrap();
            a.add(ecx, 1).unwrap();
            a.je(out).unwrap();
            a.add(eax, ecx).unwrap();
            a.add(eax, edx).unwrap();
            a.jmp(top).unwrap();
            a.set_label(&mut out).unwrap();
            a.ret().unwrap();
        });
        let p = Plan::new_in(Mode::Hits, vec![(0x1000, bytes)], &[0x1000], &[], &[]);
        let out = p.blocks.len() - 1;
        assert!(
            !matches!(p.blocks[out].how, How::Implied { .. }),
            "{:?}",
            p.blocks
        );
    }

    #[test]
    fn a_fork_ran_when_one_of_its_two_ways_did() {
        // x: cmp; je t | f: mov; ret | t: mov; ret
        let bytes = asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut t = a.create_label();
            a.cmp(eax, ecx).unwrap();
            a.add(eax, 7).unwrap();
            a.je(t).unwrap();
            a.mov(eax, 1).unwrap();
            a.ret().unwrap();
            a.set_label(&mut t).unwrap();
            a.mov(eax, 2).unwrap();
            a.ret().unwrap();
        });
        let hits = Plan::new_in(Mode::Hits, vec![(0x1000, bytes)], &[0x1000], &[], &[]);
        assert_eq!(hits.blocks.len(), 3);
        assert_eq!(hits.blocks[0].how, How::Branches { taken: 2, fell: 1 });
        assert_eq!(hits.probes(), 2);
        // No branch edge stored: nothing derives from it.
        assert_eq!(hits.blocks[0].branch, None);
        for (c, ran) in [
            ([0, 0, 0], 0),
            ([0, 1, 0], 1),
            ([0, 0, 1], 1),
            ([0, 1, 1], 1),
        ] {
            assert_eq!(hits.count(0, &c), ran, "{c:?}");
        }
        // A call before the jump may not return: then the block keeps
        // its probe.
        let bytes = asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut t = a.create_label();
            a.cmp(eax, ecx).unwrap();
            a.syscall().unwrap();
            a.je(t).unwrap();
            a.mov(eax, 1).unwrap();
            a.ret().unwrap();
            a.set_label(&mut t).unwrap();
            a.mov(eax, 2).unwrap();
            a.ret().unwrap();
        });
        let hits = Plan::new_in(Mode::Hits, vec![(0x1000, bytes)], &[0x1000], &[], &[]);
        assert!(hits
            .blocks
            .iter()
            .all(|b| !matches!(b.how, How::Branches { .. })));
    }

    #[test]
    fn an_edge_into_a_block_with_two_ways_in_is_flagged() {
        // x: cmp; jne m | t: add; (falls into m) | m: mov; ret. The fall
        // to t is t's only way in (read from t's hit); the jump to m is
        // one of m's two (a byte of its own).
        let bytes = asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut m = a.create_label();
            a.mov(eax, 1).unwrap();
            a.mov(ecx, 2).unwrap();
            a.cmp(eax, ecx).unwrap();
            a.jne(m).unwrap();
            a.add(eax, 7).unwrap();
            a.add(eax, 8).unwrap();
            a.set_label(&mut m).unwrap();
            a.mov(edx, 3).unwrap();
            a.mov(esi, 4).unwrap();
            a.ret().unwrap();
        });
        let plan = |mode| Plan::new_in(mode, vec![(0x1000, bytes.clone())], &[0x1000], &[], &[]);
        let (hits, edges) = (plan(Mode::Hits), plan(Mode::Edges));
        assert_eq!(edges.blocks.len(), 3);
        assert_eq!(edges.branches.len(), 1);
        assert_eq!(edges.edges, [(None, Some(1))]);
        assert!(hits.edges.is_empty());
        assert_eq!(hits.counters(), 4);
        assert_eq!(edges.counters(), 5);
        // The jump's block keeps its trampoline and its branch; in hit
        // mode alone it is one-shot.
        assert_eq!(hits.blocks[0].how, How::Once);
        assert!(
            matches!(edges.blocks[0].how, How::Jmp { .. }),
            "{:?}",
            edges.blocks
        );
        assert_eq!(edges.blocks[0].branch, Some(0));
        // Counters: x, t, m, fell through, taken.
        for (c, want) in [
            ([1, 1, 1, 1, 0], (0, 1)),
            ([1, 0, 1, 0, 1], (1, 0)),
            ([1, 1, 1, 1, 1], (1, 1)),
        ] {
            assert_eq!(edges.edge_hits(0, &c), want, "{c:?}");
        }
        // Both ways implied (the fork of the test above): no flag.
        let fork = asm(0x1000, |a| {
            use iced_x86::code_asm::*;
            let mut t = a.create_label();
            a.cmp(eax, ecx).unwrap();
            a.add(eax, 7).unwrap();
            a.je(t).unwrap();
            a.mov(eax, 1).unwrap();
            a.ret().unwrap();
            a.set_label(&mut t).unwrap();
            a.mov(eax, 2).unwrap();
            a.ret().unwrap();
        });
        let p = Plan::new_in(Mode::Edges, vec![(0x1000, fork)], &[0x1000], &[], &[]);
        assert_eq!(p.edges, [(Some(2), Some(1))]);
        assert_eq!(p.blocks[0].how, How::Branches { taken: 2, fell: 1 });
        assert_eq!(p.edge_hits(0, &[0, 0, 1, 0, 0]), (1, 0));
    }

    /// One function each, at 0x1000 + 0x100 * k.
    fn funcs(bodies: Vec<Vec<u8>>) -> Plan {
        let starts: Vec<u64> = (0..bodies.len() as u64)
            .map(|k| 0x1000 + 0x100 * k)
            .collect();
        let sections = starts.iter().copied().zip(bodies).collect();
        Plan::new_in(Mode::Hits, sections, &starts, &[], &[])
    }

    /// How the first block of the function at `at` is probed.
    fn first(p: &Plan, at: u64) -> How {
        p.blocks[p.block_at(at).unwrap()].how
    }

    #[test]
    fn code_that_may_run_with_sigtrap_blocked_keeps_its_trampolines() {
        use iced_x86::code_asm::*;
        // 0x1000 masks (rt_sigprocmask) and calls 0x1100, and returns;
        // 0x1200 calls 0x1000 (it goes on with the mask it set); 0x1300
        // makes getpid, 0x1400 read (`xor %eax,%eax`), both one-shot;
        // 0x1500 takes 14 through a register; 0x1600 a number not known
        // (syscall()); 0x1700 calls nothing masking.
        let bodies = vec![
            asm(0x1000, |a| {
                a.mov(eax, 14).unwrap();
                a.syscall().unwrap();
                a.call(0x1100u64).unwrap();
                a.ret().unwrap();
            }),
            asm(0x1100, |a| {
                a.add(eax, 1).unwrap();
                a.ret().unwrap();
            }),
            asm(0x1200, |a| {
                a.call(0x1000u64).unwrap();
                a.add(eax, 2).unwrap();
                a.ret().unwrap();
            }),
            asm(0x1300, |a| {
                a.mov(eax, 39).unwrap();
                a.syscall().unwrap();
                a.ret().unwrap();
            }),
            asm(0x1400, |a| {
                a.xor(eax, eax).unwrap();
                a.syscall().unwrap();
                a.ret().unwrap();
            }),
            asm(0x1500, |a| {
                a.mov(r9d, 14).unwrap();
                a.mov(eax, r9d).unwrap();
                a.syscall().unwrap();
                a.ret().unwrap();
            }),
            asm(0x1600, |a| {
                a.mov(rax, rdi).unwrap();
                a.syscall().unwrap();
                a.ret().unwrap();
            }),
            asm(0x1700, |a| {
                a.add(eax, 3).unwrap();
                a.ret().unwrap();
            }),
        ];
        let p = funcs(bodies);
        for at in [0x1000, 0x1100, 0x1200, 0x1500, 0x1600] {
            assert_ne!(first(&p, at), How::Once, "{at:#x}: {:?}", p.blocks);
        }
        for at in [0x1300, 0x1400, 0x1700] {
            assert_eq!(first(&p, at), How::Once, "{at:#x}: {:?}", p.blocks);
        }
    }

    #[test]
    fn a_block_entered_another_way_keeps_its_probe() {
        let counts = Plan::new(vec![(0x1000, chain())], &[0x1000], &[], &[]);
        let c = counts.blocks[1].start; // the `add` block
        let hits = |funcs: &[u64], taken: &[u64]| {
            Plan::new_in(Mode::Hits, vec![(0x1000, chain())], funcs, &[], taken).probes()
        };
        assert_eq!(hits(&[0x1000], &[]), 1);
        // c is a function too: entered from elsewhere.
        assert_eq!(hits(&[0x1000, c], &[]), 2);
        // c's address is stored in data.
        assert_eq!(hits(&[0x1000], &[c]), 2);
        // c is a C++ landing pad: the unwinder enters it.
        let padded = |pads: Vec<u64>| {
            let known = crate::plan::Known {
                mode: Mode::Hits,
                prune: true,
                sync: &[0x1000],
                copied: Vec::new(),
                pads,
            };
            Plan::build(vec![(0x1000, chain())], &[0x1000], &[], &[], known)
        };
        assert_eq!(padded(Vec::new()).probes(), 1);
        let p = padded(vec![c]);
        assert_eq!(p.probes(), 2, "{:?}", p.blocks);
        assert!(!matches!(p.blocks[1].how, How::Implied { .. }));
        // Counting: the pad counts itself, not derived from the jump.
        let counts = |pads: Vec<u64>| {
            let known = crate::plan::Known {
                mode: Mode::Counts,
                prune: true,
                sync: &[0x1000],
                copied: Vec::new(),
                pads,
            };
            Plan::build(vec![(0x1000, chain())], &[0x1000], &[], &[], known)
        };
        assert!(counts(Vec::new()).derived_of(1).is_some());
        assert!(counts(vec![c]).derived_of(1).is_none());
    }
}
