//! Exact call arcs from exact block counts: what `profdev gmon --exact`
//! writes into gmon.out's call graph.
//!
//! Blocks are split after calls and are straight-line code, so a block
//! that ends in a call ran exactly as many times as that call was made.
//! Each counted block's last instruction is decoded (from the module's
//! file) and becomes an arc of that many calls:
//!
//! * `call F` (direct): from the call site to F's entry;
//! * `call foo@plt`: to `foo` when the module defines `foo` itself (a PIE
//!   calling its own exported function through the PLT); otherwise the
//!   call leaves the module (a shared library) and is counted in
//!   [`Arcs::library_calls`], not made an arc;
//! * `jmp F` or `jcc F` to another function's entry (a tail call): from
//!   the jump to F, as often as the jump was taken;
//! * `call *foo@GOTPCREL(%rip)` (`-fno-plt`), and `jmp` through such a
//!   slot: as `call foo@plt`, the slot's relocation naming `foo`;
//! * `call *%reg`, `call *mem` (indirect) and `jmp *` that is not a
//!   recovered jump table: the targets recorded at run time
//!   ([`CallTarget`], from [`crate::launch::Server::call_targets`]), each
//!   with its exact count: a target in the module is an arc to the
//!   function holding it (a jump only when it enters another function at
//!   its entry or a PLT stub: else it is a switch or a computed goto, not
//!   a call); a target in another module counts in
//!   [`Arcs::library_calls`]; one outside every file-backed module (the
//!   vDSO, JIT code) in [`Arcs::outside_calls`]. An indirect call made
//!   more often than its records say (records lost, or a site that could
//!   not be recorded), and any indirect call of a run without records, is
//!   counted in [`Arcs::indirect_calls`] per site, not made an arc; so is
//!   `jmp *mem` without an index then. A GOT call with records takes them
//!   (they say the same as the slot's relocation, below).
//!
//! `from_pc` is the call's return address less one (the last byte of the
//! call, inside the caller even when the call is the function's last
//! instruction), as gprof's `mcount` arcs are read; `self_pc` the callee's
//! entry.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use iced_x86::{Decoder, DecoderOptions, FlowControl, OpKind};
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};
use profdev_core::FileAddr;
use profdev_symbolize::elf::{ElfBytes, ElfObject, SymOrigin};

use crate::counts::ModuleCoverage;

/// The exact call arcs of one module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Arcs {
    /// `(from_pc, self_pc) -> calls`, link-time addresses.
    pub arcs: BTreeMap<(u64, u64), u64>,
    /// Calls (and tail-call jumps) into other modules: through the PLT,
    /// a GOT slot, or a pointer.
    pub library_calls: u64,
    /// Indirect calls made whose target is not known (no record: see
    /// [`CallTarget`]), and the number of sites that made them.
    pub indirect_calls: u64,
    /// Sites of [`Arcs::indirect_calls`].
    pub indirect_sites: u64,
    /// Indirect calls (and tail-call jumps) to code outside every module
    /// mapped from a file (the vDSO, JIT code), recorded.
    pub outside_calls: u64,
    /// Calls whose target is in no function of the module's symbols.
    pub unresolved: u64,
}

/// Where a recorded indirect call or jump went.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Into the module mapped from `path`, at link-time address `addr`.
    Module { path: PathBuf, addr: u64 },
    /// Outside every module mapped from a file (the vDSO, JIT code): the
    /// run-time address.
    Outside(u64),
}

/// The calls one indirect call site (or indirect jump) made to one
/// target, recorded at run time
/// ([`crate::launch::Server::call_targets`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallTarget {
    /// The site's module.
    pub module: PathBuf,
    /// The call's (or jump's) link-time address.
    pub site: u64,
    /// Where it went.
    pub target: Target,
    /// How many times.
    pub count: u64,
}

/// What went wrong reading the module's code.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the code of {path}: {why}")]
pub struct ArcsError {
    path: String,
    why: String,
}

/// The exact call arcs of `m`, whose file is read again for its code and
/// symbols (`elf`), with the indirect calls' recorded `targets` (those
/// of other modules are ignored).
pub fn module_arcs(
    m: &ModuleCoverage,
    elf: &ElfObject,
    targets: &[CallTarget],
) -> Result<Arcs, ArcsError> {
    let err = |why: String| ArcsError {
        path: m.path.display().to_string(),
        why,
    };
    let bytes = ElfBytes::open_followed(&m.path).map_err(|e| err(e.reason()))?;
    let file = profdev_symbolize::elf::parse(&*bytes, &m.path).map_err(|e| err(e.reason()))?;
    let mut sections: Vec<(u64, &[u8])> = Vec::new();
    for s in file.sections() {
        if s.kind() == object::SectionKind::Text {
            if let Ok(d) = s.data() {
                sections.push((s.address(), d));
            }
        }
    }
    // GOT slots the loader fills with a symbol's address: a call through
    // one (`call *foo@GOTPCREL(%rip)`, -fno-plt) is a call to `foo`.
    let mut got = HashMap::new();
    if let (Some(relocs), Some(dynsym)) = (file.dynamic_relocations(), file.dynamic_symbol_table())
    {
        for (slot, r) in relocs {
            if let object::RelocationTarget::Symbol(i) = r.target() {
                if let Some(name) = dynsym.symbol_by_index(i).ok().and_then(|s| s.name().ok()) {
                    got.entry(slot).or_insert_with(|| name.to_string());
                }
            }
        }
    }
    Ok(arcs_of(m, elf, &sections, &got, targets))
}

/// [`module_arcs`] over code given as (address, bytes) sections, with the
/// symbol names the GOT's slots are filled with (by slot address).
pub fn arcs_of(
    m: &ModuleCoverage,
    elf: &ElfObject,
    sections: &[(u64, &[u8])],
    got: &HashMap<u64, String>,
    targets: &[CallTarget],
) -> Arcs {
    let mut recorded: HashMap<u64, Vec<(&Target, u64)>> = HashMap::new();
    for t in targets.iter().filter(|t| t.module == m.path) {
        recorded
            .entry(t.site)
            .or_default()
            .push((&t.target, t.count));
    }
    let code = |addr: u64, len: u64| -> Option<&[u8]> {
        let (base, b) = sections
            .iter()
            .find(|(a, b)| *a <= addr && addr + len <= a + b.len() as u64)?;
        let off = (addr - base) as usize;
        Some(&b[off..off + len as usize])
    };
    // A function the module defines, by name: where a PLT call to it lands.
    let defined: HashMap<&str, u64> = elf
        .symbols()
        .iter()
        .filter(|s| s.origin == SymOrigin::Table)
        .map(|s| (s.mangled.as_str(), s.addr))
        .collect();
    // The entry of the function holding `t`, when `t` is one: through a
    // PLT stub to the module's own definition (Err(()) when it leaves).
    let callee = |t: u64| -> Option<Result<u64, ()>> {
        let (sym, off) = elf.symbol(FileAddr(t))?;
        if sym.origin == SymOrigin::Plt {
            let name = sym.mangled.split('@').next().unwrap_or("");
            return Some(defined.get(name).copied().ok_or(()));
        }
        Some(Ok(t - off))
    };
    let branch_taken: HashMap<u64, u64> = m.branches.iter().map(|b| (b.addr, b.taken)).collect();
    let mut out = Arcs::default();
    for b in &m.blocks {
        let Some(last) = b.insns.last() else {
            continue;
        };
        if b.count == 0 || b.end <= last {
            continue;
        }
        let Some(bytes) = code(last, b.end - last) else {
            continue;
        };
        let x = Decoder::with_ip(64, bytes, last, DecoderOptions::NONE).decode();
        let direct = x.op0_kind() == OpKind::NearBranch64;
        let indirect = matches!(
            x.flow_control(),
            FlowControl::IndirectCall | FlowControl::IndirectBranch
        );
        // Recorded targets: each an arc (or a call out of the module).
        if let (true, Some(recs)) = (indirect, recorded.get(&last)) {
            let is_call = x.flow_control() == FlowControl::IndirectCall;
            let from = if is_call { x.next_ip() - 1 } else { last };
            let here = elf.symbol(FileAddr(last)).map(|(s, _)| s.addr);
            let mut seen = 0u64;
            for &(target, calls) in recs {
                seen = seen.saturating_add(calls);
                match target {
                    Target::Module { path, addr } if *path == m.path => {
                        if !is_call {
                            // A jump is a call only into another
                            // function's entry (or a PLT stub); else a
                            // switch or computed goto.
                            match elf.symbol(FileAddr(*addr)) {
                                Some((s, _)) if s.origin == SymOrigin::Plt => {}
                                Some((s, 0)) if Some(s.addr) != here => {}
                                _ => continue,
                            }
                        }
                        match callee(*addr) {
                            Some(Ok(entry)) => {
                                let c = out.arcs.entry((from, entry)).or_insert(0);
                                *c = c.saturating_add(calls);
                            }
                            Some(Err(())) => out.library_calls += calls,
                            None => out.unresolved += calls,
                        }
                    }
                    Target::Module { .. } => out.library_calls += calls,
                    Target::Outside(_) => out.outside_calls += calls,
                }
            }
            // Calls made and not recorded (lost records) stay unattributed.
            if is_call && b.count > seen {
                out.indirect_calls += b.count - seen;
                out.indirect_sites += 1;
            }
            continue;
        }
        // Through a GOT slot the loader fills: to the module's own
        // definition, or out of the module.
        if matches!(
            x.flow_control(),
            FlowControl::IndirectCall | FlowControl::IndirectBranch
        ) && x.is_ip_rel_memory_operand()
        {
            if let Some(name) = got.get(&x.ip_rel_memory_address()) {
                let name = name.split('@').next().unwrap_or("");
                let calls = b.count;
                match defined.get(name) {
                    Some(&entry) => {
                        let from = if x.flow_control() == FlowControl::IndirectCall {
                            x.next_ip() - 1
                        } else {
                            last
                        };
                        let c = out.arcs.entry((from, entry)).or_insert(0);
                        *c = c.saturating_add(calls);
                    }
                    None => out.library_calls += calls,
                }
                continue;
            }
        }
        let (from, calls) = match x.flow_control() {
            FlowControl::Call if direct => (x.next_ip() - 1, b.count),
            // `jmp *mem` with no index: a tail call through a pointer (a
            // jump table needs an index; `jmp *%reg` may be either and is
            // left out).
            FlowControl::IndirectBranch
                if x.op0_kind() == OpKind::Memory
                    && x.memory_index() == iced_x86::Register::None =>
            {
                out.indirect_calls += b.count;
                out.indirect_sites += 1;
                continue;
            }
            FlowControl::IndirectCall => {
                out.indirect_calls += b.count;
                out.indirect_sites += 1;
                continue;
            }
            FlowControl::UnconditionalBranch if direct => (last, b.count),
            FlowControl::ConditionalBranch if direct => {
                (last, branch_taken.get(&last).copied().unwrap_or(0))
            }
            _ => continue,
        };
        if calls == 0 {
            continue;
        }
        let t = x.near_branch_target();
        let is_call = x.flow_control() == FlowControl::Call;
        if !is_call {
            // A jump is a call only when it enters another function at its
            // entry (or a PLT stub).
            let here = elf.symbol(FileAddr(last)).map(|(s, _)| s.addr);
            match elf.symbol(FileAddr(t)) {
                Some((s, _)) if s.origin == SymOrigin::Plt => {}
                Some((s, 0)) if Some(s.addr) != here => {}
                _ => continue,
            }
        }
        match callee(t) {
            Some(Ok(entry)) => {
                let c = out.arcs.entry((from, entry)).or_insert(0);
                *c = c.saturating_add(calls);
            }
            Some(Err(())) => out.library_calls += calls,
            None => out.unresolved += calls,
        }
    }
    out
}
