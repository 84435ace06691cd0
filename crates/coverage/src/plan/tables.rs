//! Passes 3 and 5, jump tables and computed gotos: the targets of the
//! switches' jump tables (gcc's and clang's forms) are leaders, and the
//! indirect jumps whose targets are known are not tail calls.
//!
//! Reading past a table's end only adds leaders, which splits blocks and
//! loses nothing; a table not recognized (an indexed `jmp *` of another
//! form) leaves its function with unknown leaders: it is unresolved, and
//! there a patch's window is only ever a block's first instruction,
//! unless its inner labels are stored in data ([`resolve_gotos`]).

use iced_x86::{FlowControl, Instruction, Mnemonic, OpKind, Register};
use rustc_hash::FxHashSet as HashSet;

use super::decode::{Code, Funcs};
use super::is_tail_call_through_memory;

/// What the jump tables show.
#[derive(Default)]
pub(super) struct Tables {
    /// The recovered tables' targets: leaders.
    pub targets: Vec<u64>,
    /// The indirect jumps whose table was recovered.
    pub jumps: Vec<u64>,
    /// Functions holding an indexed `jmp *` whose table was not
    /// recovered.
    pub unresolved: HashSet<u64>,
}

/// The jump tables of `code`, read in `data` (the module's other
/// sections).
pub(super) fn jump_tables(code: &Code, funcs: &Funcs, data: &[(u64, &[u8])]) -> Tables {
    let mut out = Tables::default();
    let is_insn = |a: u64| code.is_insn(a);
    for (i, x) in code.insns.iter().enumerate() {
        if x.flow_control() != FlowControl::IndirectBranch || is_tail_call_through_memory(x) {
            continue;
        }
        let f = funcs.of(x.ip());
        let fe = funcs.end(f);
        let in_func = |t: u64| t >= f && t < fe && is_insn(t);
        let targets = jump_table(&code.insns, i, f, data, &in_func, &is_insn);
        if !targets.is_empty() {
            out.targets.extend(targets);
            out.jumps.push(x.ip());
        } else if x.op0_kind() != OpKind::Register {
            out.unresolved.insert(f);
        }
        // `jmp *%reg` with no table: a tail call through a pointer, or
        // a computed goto whose labels are among the code addresses
        // stored in the module's data ([`computed_gotos`]).
    }
    out
}

/// The indirect jumps of functions whose inner labels are stored in data
/// (`taken`: labels of computed gotos, `goto *labels[op]`, an
/// interpreter's dispatch): those jumps with no recovered table are
/// computed gotos, not tail calls.
pub(super) fn computed_gotos(code: &Code, funcs: &Funcs, taken: &[u64]) -> Vec<u64> {
    let gotos = goto_functions(code, funcs, taken);
    code.insns
        .iter()
        .filter(|x| {
            x.flow_control() == FlowControl::IndirectBranch
                && !is_tail_call_through_memory(x)
                && gotos.contains(&funcs.of(x.ip()))
        })
        .map(Instruction::ip)
        .collect()
}

/// The functions with inner labels stored in data (`taken`).
fn goto_functions(code: &Code, funcs: &Funcs, taken: &[u64]) -> HashSet<u64> {
    taken
        .iter()
        .filter(|&&a| code.is_insn(a) && !funcs.is_start(a))
        .map(|&a| funcs.of(a))
        .filter(|&f| f != 0)
        .collect()
}

/// Resolves the unresolved functions whose inner labels are stored in
/// data (computed gotos, `goto *labels[op]` read as `jmp
/// *(%base,%idx,8)`: an interpreter's dispatch): their leaders are all
/// known. Such a jump goes where a pointer read from memory says, and a
/// code address the program can store is one the module's data holds
/// (`taken`, already leaders: its words and its relocations, so every
/// entry of an absolute table), or one its code forms: a RIP-relative
/// `lea` or an absolute immediate (non-PIE code), made leaders here when
/// they point into such a function. (Only an address computed by
/// arithmetic and stored, which compilers do not emit for a label, would
/// escape.) So a window there may cover more than a block's first
/// instruction, and short label blocks need not trap: under counts,
/// pyenv's python 3.11 took 11 traps per iteration of a `for` loop.
pub(super) fn resolve_gotos(
    code: &Code,
    funcs: &Funcs,
    taken: &[u64],
    unresolved: &mut HashSet<u64>,
    hard: &mut HashSet<u64>,
) {
    let gotos = goto_functions(code, funcs, taken);
    let resolved: HashSet<u64> = unresolved.intersection(&gotos).copied().collect();
    if resolved.is_empty() {
        return;
    }
    let mut formed = |a: u64| {
        if code.is_insn(a) && resolved.contains(&funcs.of(a)) {
            hard.insert(a);
        }
    };
    for x in &code.insns {
        if x.is_ip_rel_memory_operand() {
            formed(x.ip_rel_memory_address());
        }
        for k in 0..x.op_count() {
            match x.op_kind(k) {
                OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64 => {
                    formed(x.immediate(k));
                }
                _ => {}
            }
        }
    }
    unresolved.retain(|f| !resolved.contains(f));
}

/// The most entries read of one table.
const MAX: usize = 4096;

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
    let x = &insns[at];
    if x.op0_kind() == OpKind::Memory
        && x.memory_base() == Register::None
        && x.memory_index() != Register::None
        && x.memory_index_scale() == 8
    {
        return absolute(data, x.memory_displacement64(), is_insn);
    }
    if x.op0_kind() != OpKind::Register {
        return Vec::new();
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
                    && y.op0_kind() == OpKind::Register
                    && y.op0_register() == x.op0_register()
                    && y.op1_kind() == OpKind::Memory
                    && y.memory_base() == Register::None
                    && y.memory_index() != Register::None
                    && y.memory_index_scale() == 8
                {
                    return absolute(data, y.memory_displacement64(), in_func);
                }
                if y.mnemonic() == Mnemonic::Movsxd
                    && y.op1_kind() == OpKind::Memory
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
                    return relative(data, y.ip_rel_memory_address(), in_func);
                }
            }
        }
    }
    Vec::new()
}

/// `n` bytes at `addr` of the data, when one section holds them all.
fn read<'a>(data: &[(u64, &'a [u8])], addr: u64, n: usize) -> Option<&'a [u8]> {
    let (base, bytes) = data
        .iter()
        .find(|(a, b)| *a <= addr && addr + n as u64 <= a + b.len() as u64)?;
    let off = (addr - base) as usize;
    Some(&bytes[off..off + n])
}

/// A table of 8-byte addresses at `table`, up to the first entry `ok`
/// refuses (or the data's end).
fn absolute(data: &[(u64, &[u8])], table: u64, ok: &dyn Fn(u64) -> bool) -> Vec<u64> {
    let mut out = Vec::new();
    for k in 0..MAX {
        let Some(b) = read(data, table + 8 * k as u64, 8) else {
            break;
        };
        let t = u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
        if !ok(t) {
            break;
        }
        out.push(t);
    }
    out
}

/// A table of 4-byte offsets from `table` itself, up to the first entry
/// `ok` refuses (or the data's end).
fn relative(data: &[(u64, &[u8])], table: u64, ok: &dyn Fn(u64) -> bool) -> Vec<u64> {
    let mut out = Vec::new();
    for j in 0..MAX {
        let Some(b) = read(data, table + 4 * j as u64, 4) else {
            break;
        };
        let e = i32::from_le_bytes(b.try_into().unwrap_or([0; 4]));
        let t = table.wrapping_add(e as i64 as u64);
        if !ok(t) {
            break;
        }
        out.push(t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::decode::decode;
    use super::super::testing::{encode_at, op, rets};
    use super::*;
    use iced_x86::{Code as Op, MemoryOperand as M};

    const TEXT: u64 = 0x1000;
    const DATA: u64 = 0x8000;

    /// Code at TEXT: `prefix`, padded with `nop`s to TEXT+0x40, then
    /// `ret`s (the cases) to TEXT+0x100, a second function's `ret`.
    fn module(prefix: &[Instruction]) -> (Code, Funcs) {
        let mut bytes = encode_at(TEXT, prefix);
        bytes.resize(0x40, 0x90);
        bytes.extend(rets(0xc1));
        (decode(&[(TEXT, bytes)]), Funcs::new(&[TEXT, TEXT + 0x100]))
    }

    fn words(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn an_absolute_table_is_read_while_its_entries_are_instructions() {
        // jmp *DATA(,%rax,8); entries: two cases, one in the next function
        // (a cold part), then a word that is no instruction.
        let jmp = op(Instruction::with1(
            Op::Jmp_rm64,
            M::new(
                Register::None,
                Register::RAX,
                8,
                DATA as i64,
                8,
                false,
                Register::None,
            ),
        ));
        let (code, funcs) = module(&[jmp]);
        let table = words(&[TEXT + 0x40, TEXT + 0x41, TEXT + 0x100, 0xdead]);
        let t = jump_tables(&code, &funcs, &[(DATA, &table)]);
        assert_eq!(t.targets, [TEXT + 0x40, TEXT + 0x41, TEXT + 0x100]);
        assert_eq!(t.jumps, [TEXT]);
        assert!(t.unresolved.is_empty());
    }

    #[test]
    fn a_relative_table_is_found_back_through_the_function() {
        // lea DATA(%rip),%rdx; movslq (%rdx,%rax,4),%rax; add %rdx,%rax; jmp *%rax
        let table_at = DATA as i64;
        let prefix = [
            op(Instruction::with2(
                Op::Lea_r64_m,
                Register::RDX,
                M::with_base_displ(Register::RIP, table_at),
            )),
            op(Instruction::with2(
                Op::Movsxd_r64_rm32,
                Register::RAX,
                M::new(Register::RDX, Register::RAX, 4, 0, 0, false, Register::None),
            )),
            op(Instruction::with2(
                Op::Add_r64_rm64,
                Register::RAX,
                Register::RDX,
            )),
            op(Instruction::with1(Op::Jmp_rm64, Register::RAX)),
        ];
        let (code, funcs) = module(&prefix);
        let rel = |t: u64| (t.wrapping_sub(DATA) as i64 as i32).to_le_bytes();
        // Two cases, then one in the next function: a relative table
        // stays in its function.
        let table: Vec<u8> = [TEXT + 0x42, TEXT + 0x43, TEXT + 0x100]
            .iter()
            .flat_map(|&t| rel(t))
            .collect();
        let t = jump_tables(&code, &funcs, &[(DATA, &table)]);
        assert_eq!(t.targets, [TEXT + 0x42, TEXT + 0x43]);
        assert_eq!(t.jumps.len(), 1);
        assert!(t.unresolved.is_empty());
    }

    #[test]
    fn an_unknown_indexed_jump_leaves_its_function_unresolved() {
        // jmp *(%rbx,%rax,8): an index, but not a table recognized; and
        // jmp *8(%rax), a tail call through memory, is not a table at all.
        let prefix = [
            op(Instruction::with1(
                Op::Jmp_rm64,
                M::new(Register::RBX, Register::RAX, 8, 0, 0, false, Register::None),
            )),
            op(Instruction::with1(
                Op::Jmp_rm64,
                M::with_base_displ(Register::RAX, 8),
            )),
        ];
        let (code, funcs) = module(&prefix);
        let t = jump_tables(&code, &funcs, &[]);
        assert!(t.targets.is_empty() && t.jumps.is_empty());
        assert_eq!(t.unresolved.iter().copied().collect::<Vec<_>>(), [TEXT]);
    }

    #[test]
    fn a_computed_goto_is_known_by_its_labels_in_data() {
        // mov DATA(,%rcx,8),%rax; jmp *%rax: a table of labels (read while
        // they are in the function); and `jmp *%rdx` alone, which is a
        // computed goto only because a label of its function is stored.
        let load = op(Instruction::with2(
            Op::Mov_r64_rm64,
            Register::RAX,
            M::new(
                Register::None,
                Register::RCX,
                8,
                DATA as i64,
                8,
                false,
                Register::None,
            ),
        ));
        let prefix = [
            load,
            op(Instruction::with1(Op::Jmp_rm64, Register::RAX)),
            op(Instruction::with1(Op::Jmp_rm64, Register::RDX)),
        ];
        let (code, funcs) = module(&prefix);
        let table = words(&[TEXT + 0x44, TEXT + 0x100]);
        let t = jump_tables(&code, &funcs, &[(DATA, &table)]);
        assert_eq!(t.targets, [TEXT + 0x44]);
        let jmp_rax = code.insns[1].ip();
        let jmp_rdx = code.insns[2].ip();
        assert_eq!(t.jumps, [jmp_rax]);
        assert!(t.unresolved.is_empty(), "a jmp *%reg is never unresolved");
        // A stored function start is no label; a stored inner address is.
        assert!(computed_gotos(&code, &funcs, &[TEXT + 0x100]).is_empty());
        assert_eq!(
            computed_gotos(&code, &funcs, &[TEXT + 0x45]),
            [jmp_rax, jmp_rdx]
        );
    }

    #[test]
    fn labels_stored_in_data_resolve_an_indexed_jump() {
        // lea TEXT+0x46(%rip),%rdx (a label formed in code); jmp
        // *(%rbx,%rax,8) (a table not recognized); cases from TEXT+0x40.
        let prefix = [
            op(Instruction::with2(
                Op::Lea_r64_m,
                Register::RDX,
                M::with_base_displ(Register::RIP, (TEXT + 0x46) as i64),
            )),
            op(Instruction::with1(
                Op::Jmp_rm64,
                M::new(Register::RBX, Register::RAX, 8, 0, 0, false, Register::None),
            )),
        ];
        let (code, funcs) = module(&prefix);
        let mut t = jump_tables(&code, &funcs, &[]);
        assert_eq!(t.unresolved.iter().copied().collect::<Vec<_>>(), [TEXT]);
        // No label stored in data: it stays unresolved.
        let mut hard = HashSet::default();
        resolve_gotos(&code, &funcs, &[TEXT + 0x100], &mut t.unresolved, &mut hard);
        assert_eq!(t.unresolved.len(), 1);
        assert!(hard.is_empty());
        // A label stored: resolved, and the label the lea forms is a leader.
        resolve_gotos(&code, &funcs, &[TEXT + 0x41], &mut t.unresolved, &mut hard);
        assert!(t.unresolved.is_empty());
        assert_eq!(hard.into_iter().collect::<Vec<_>>(), [TEXT + 0x46]);
    }
}
