//! Pass 4, masked functions: those that may run with every signal
//! blocked. A function that changes the signal mask or creates a thread
//! or a process (a `syscall` with `%eax` set just before to
//! `rt_sigprocmask`, `clone`, `fork`, `vfork` or `clone3`), and what it
//! calls, two calls deep: a trap there would kill the process (a blocked
//! SIGTRAP is fatal), so their short blocks get no `int3`.

use iced_x86::{FlowControl, Mnemonic, OpKind, Register};
use rustc_hash::FxHashSet as HashSet;

use super::decode::{Code, Funcs};

/// The system calls after which every signal may be blocked:
/// rt_sigprocmask, clone, fork, vfork, clone3.
const MASKING: [u64; 5] = [14, 56, 57, 58, 435];

/// The functions (their starts) that may run with every signal blocked.
pub(super) fn masked_functions(code: &Code, funcs: &Funcs) -> HashSet<u64> {
    let mut masked: HashSet<u64> = HashSet::default();
    let mut eax: Option<u64> = None;
    for x in &code.insns {
        if x.mnemonic() == Mnemonic::Syscall {
            if eax.is_some_and(|n| MASKING.contains(&n)) {
                masked.insert(funcs.of(x.ip()));
            }
        } else if x.mnemonic() == Mnemonic::Mov
            && x.op_count() == 2
            && matches!(x.op0_register(), Register::EAX | Register::RAX)
            && matches!(x.op1_kind(), OpKind::Immediate32 | OpKind::Immediate32to64)
        {
            eax = Some(x.immediate(1));
        }
        if x.flow_control() != FlowControl::Next {
            eax = None;
        }
    }
    for _ in 0..2 {
        let mut more = Vec::new();
        for x in &code.insns {
            if x.flow_control() == FlowControl::Call
                && x.op0_kind() == OpKind::NearBranch64
                && masked.contains(&funcs.of(x.ip()))
            {
                more.push(x.near_branch_target());
            }
        }
        masked.extend(more);
    }
    masked
}

/// The functions (their starts) whose own bytes some instruction reads
/// or writes as data: a memory operand relative to the instruction
/// pointer (not a `lea`, which only computes an address) whose address
/// lies in one of the module's executable `sections`. Code that loads
/// constants kept among its instructions reads them this way: a patch
/// there would change the constant. Such a function is not patched.
///
/// Only instructions of functions that decode whole count: data in the
/// code (OpenSSL's tables, node links them in) decodes as instructions
/// too, some of them loads from random addresses (in node, 6,945 blocks
/// of V8's `CodeGenerator::AssembleArchInstruction` were left unpatched
/// for one of them); data of any size holds bytes that are no
/// instruction (`Code::INVALID`).
pub(super) fn read_as_data(code: &Code, funcs: &Funcs, sections: &[(u64, u64)]) -> HashSet<u64> {
    let garbled: HashSet<u64> = code
        .insns
        .iter()
        .filter(|x| x.code() == iced_x86::Code::INVALID)
        .map(|x| funcs.of(x.ip()))
        .collect();
    let mut read: HashSet<u64> = HashSet::default();
    for x in &code.insns {
        if !x.is_ip_rel_memory_operand() || x.mnemonic() == Mnemonic::Lea {
            continue;
        }
        let a = x.ip_rel_memory_address();
        if sections.iter().any(|&(lo, hi)| lo <= a && a < hi)
            && !garbled.contains(&funcs.of(x.ip()))
        {
            read.insert(funcs.of(a));
        }
    }
    read
}

#[cfg(test)]
mod tests {
    use super::super::decode::decode;
    use super::*;

    fn sorted(s: HashSet<u64>) -> Vec<u64> {
        let mut v: Vec<u64> = s.into_iter().collect();
        v.sort_unstable();
        v
    }

    /// Functions at 0x1000, 0x1100, 0x1200, 0x1300, 0x1400: `f` is the
    /// first one's body, each other one calls the next (`call rel32`),
    /// the last returns.
    fn chain(f: &[u8]) -> (Code, Funcs) {
        let mut bytes = f.to_vec();
        bytes.resize(0x100, 0xcc);
        for k in 1..5u64 {
            let at = 0x1000 + 0x100 * k;
            let mut g = vec![0xe8];
            g.extend(((0x100i32 - 5) as u32).to_le_bytes()); // call the next
            g.push(0xc3);
            if k == 4 {
                g = vec![0xc3];
            }
            g.resize(0x100, 0xcc);
            debug_assert_eq!(at, 0x1000 + bytes.len() as u64);
            bytes.extend(g);
        }
        let funcs = Funcs::new(&[0x1000, 0x1100, 0x1200, 0x1300, 0x1400]);
        (decode(&[(0x1000, bytes)]), funcs)
    }

    /// `mov $n,%eax; syscall; call 0x1100; ret`
    fn syscall_then_call(n: u8) -> Vec<u8> {
        let mut f = vec![0xb8, n, 0, 0, 0, 0x0f, 0x05, 0xe8];
        f.extend(((0x100i32 - 12) as u32).to_le_bytes());
        f.push(0xc3);
        f
    }

    #[test]
    fn a_mask_change_marks_its_function_and_two_calls_deep() {
        let (code, funcs) = chain(&syscall_then_call(14));
        assert_eq!(
            sorted(masked_functions(&code, &funcs)),
            [0x1000, 0x1100, 0x1200]
        );
    }

    #[test]
    fn another_system_call_marks_nothing() {
        let (code, funcs) = chain(&syscall_then_call(1)); // write
        assert!(masked_functions(&code, &funcs).is_empty());
    }

    #[test]
    fn the_number_must_be_set_just_before() {
        // mov $57,%eax; jmp +0; syscall: the jump forgets %eax.
        let (code, funcs) = chain(&[0xb8, 57, 0, 0, 0, 0xeb, 0x00, 0x0f, 0x05, 0xc3]);
        assert!(masked_functions(&code, &funcs).is_empty());
        // mov $435,%rax (clone3, sign-extended imm32); syscall
        let (code, funcs) = chain(&[0x48, 0xc7, 0xc0, 0xb3, 0x01, 0, 0, 0x0f, 0x05, 0xc3]);
        assert_eq!(sorted(masked_functions(&code, &funcs)), [0x1000]);
    }

    /// A load from another function's bytes (V8's builtins read the
    /// constants among their instructions) leaves that function
    /// unpatched; a `lea` of it (an address only) does not.
    #[test]
    fn a_function_whose_bytes_are_loaded_is_read_as_data() {
        // 0x1000: mov 0x1200(%rip-relative),%eax (6 bytes: 8b 05 rel32);
        // lea 0x1300(%rip),%rax (7 bytes); ret.
        let mut f = vec![0x8b, 0x05];
        f.extend(((0x1200 - 0x1006) as u32).to_le_bytes());
        f.extend([0x48, 0x8d, 0x05]);
        f.extend(((0x1300 - 0x100d) as u32).to_le_bytes());
        f.push(0xc3);
        let (code, funcs) = chain(&f);
        let read = read_as_data(&code, &funcs, &[(0x1000, 0x1500)]);
        assert_eq!(sorted(read), [0x1200]);
        // Outside the code: data, nothing to leave.
        assert!(read_as_data(&code, &funcs, &[(0x1300, 0x1500)]).is_empty());
        // The same load from a function holding a byte that is no
        // instruction (0x06: data decoded as code) counts for nothing.
        let mut g = vec![0x06, 0x8b, 0x05];
        g.extend(((0x1200 - 0x1007) as u32).to_le_bytes());
        g.push(0xc3);
        let (code, funcs) = chain(&g);
        assert!(read_as_data(&code, &funcs, &[(0x1000, 0x1500)]).is_empty());
    }
}
