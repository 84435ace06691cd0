//! The encoder on real code: reuse at another load, and the recording
//! sequences run.

use super::seq::enc;
use super::*;
use iced_x86::{BlockEncoder, BlockEncoderOptions, InstructionBlock, Register};

/// A plan of real code: this test binary's own.
fn own_plan() -> Plan {
    let exe = std::env::current_exe().expect("the test binary's path");
    Plan::of_file(&exe).expect("the test binary plans")
}

#[test]
fn one_encoding_serves_another_load_at_the_same_offset() {
    let plan = own_plan();
    let (bias1, area1, first1) = (0x5555_0000_0000u64, 0x5555_4000_0000u64, 0u64);
    let (bias2, area2, first2) = (0x7f12_3456_0000u64, 0x7f12_7456_0000u64, 12_345u64);
    assert_eq!(area1 - bias1, area2 - bias2);
    let once = encode(&plan, bias1, area1, first1);
    let fresh = encode(&plan, bias2, area2, first2);
    assert!(!once.counter_fixups.is_empty());
    assert!(once.patches.len() > 1000, "{} patches", once.patches.len());
    assert_eq!(once.failed, fresh.failed);
    assert_eq!(once.code_for(first2), fresh.code, "code relocated");
    assert_eq!(
        once.patches_for(bias1, area1, bias2, area2),
        fresh.patches,
        "patches relocated"
    );
    // And back, from an encoding with a non-zero first counter.
    assert_eq!(fresh.code_for(first1), once.code);
}

#[test]
fn one_encoding_moves_to_another_distance_from_its_module() {
    // The runtime of another process may not map the area at the
    // distance the kept encoding was made for (another library is
    // there): the code moves instead of being encoded again.
    let plan = own_plan();
    let (bias1, area1, first1) = (0x5555_0000_0000u64, 0x5555_4000_0000u64, 0u64);
    let (bias2, area2, first2) = (0x7f12_3456_0000u64, 0x7f12_0456_0000u64, 77u64);
    for opts in [Options::default(), Options { call_targets: true }] {
        let once = encode_with(&plan, bias1, area1, first1, opts);
        let fresh = encode_with(&plan, bias2, area2, first2, opts);
        assert!(once.movable);
        assert!(once.far_fixups.len() > 1000, "{}", once.far_fixups.len());
        assert_eq!(once.failed, fresh.failed);
        let moved = area2.wrapping_sub(bias2) as i64 - (area1 - bias1) as i64;
        let code = once.code_at(first2, moved).expect("the code moves");
        assert!(code == fresh.code, "code moved to another distance");
        assert_eq!(
            once.patches_for(bias1, area1, bias2, area2),
            fresh.patches,
            "patches moved"
        );
        assert!(fresh.code_at(first1, -moved).expect("and back") == once.code);
    }
    // Out of a rel32's reach: refused, not wrapped.
    let once = encode(&plan, bias1, area1, first1);
    assert!(once.code_at(first1, 3 << 30).is_none());
    assert!(once.code_at(first1, 0).is_some());
}

#[test]
fn an_encoding_recording_call_targets_serves_another_load_too() {
    // The sites' keys are relocated with the counts.
    let plan = own_plan();
    let on = Options { call_targets: true };
    let (bias1, area1, first1) = (0x5555_0000_0000u64, 0x5555_4000_0000u64, 8u64);
    let (bias2, area2, first2) = (0x7f12_3456_0000u64, 0x7f12_7456_0000u64, 12_345u64);
    let once = encode_with(&plan, bias1, area1, first1, on);
    let fresh = encode_with(&plan, bias2, area2, first2, on);
    let plain = encode(&plan, bias1, area1, first1);
    assert!(once.code.len() as u64 <= area_size_with(&plan, on));
    assert!(
        once.counter_fixups.len() > plain.counter_fixups.len() + 100,
        "{} fixups with call targets, {} without",
        once.counter_fixups.len(),
        plain.counter_fixups.len()
    );
    assert_eq!(once.failed, plain.failed, "recording costs no block");
    assert_eq!(once.code_for(first2), fresh.code, "code relocated");
    // `call *%gs:0`, the recorder's call: only with the option.
    let recorder_call = [0x65, 0xff, 0x14, 0x25, 0, 0, 0, 0];
    let calls = |code: &[u8]| code.windows(8).filter(|w| *w == recorder_call).count();
    assert!(calls(&once.code) > 100, "{} recordings", calls(&once.code));
    assert_eq!(calls(&plain.code), 0);
}

#[test]
fn another_offset_changes_the_code() {
    // The code is only reusable at the same offset: branches into the
    // module are relative to the area.
    let plan = own_plan();
    let a = encode(&plan, 0x5555_0000_0000, 0x5555_4000_0000, 0);
    let b = encode(&plan, 0x5555_0000_0000, 0x5555_5000_0000, 0);
    assert_ne!(a.code, b.code);
}

// The recorder the sequences call in `the_recorded_target_is_the_real_one`:
// it stores the key and the target in slots 1 and 2 of the thread's
// GS array, and clobbers only %rax (which the sequence restores).
std::arch::global_asm!(
    ".globl profdev_test_recorder",
    "profdev_test_recorder:",
    "mov rax, [rsp + 8]",
    "mov qword ptr gs:[8], rax",
    "mov rax, [rsp + 16]",
    "mov qword ptr gs:[16], rax",
    "ret",
);

extern "C" {
    fn profdev_test_recorder();
}

/// Run the recording sequence of the call or jump `x` (encoded at
/// `ip` and decoded again, as the encoder sees code) with %rsi, %rdx
/// and %rax as given and `stack` just above the return address of
/// the call into it (what `8(%rsp)` reads at the site): the key and
/// target recorded, and whether %rax, %rsp and the flags came back.
fn record(x: Instruction, ip: u64, area: &mut [u8], rsi: u64, rdx: u64, stack: u64) -> (u64, u64) {
    let bytes = enc(&[x], ip).expect("the site encodes");
    let site = Decoder::with_ip(64, &bytes, ip, DecoderOptions::NONE).decode();
    assert_eq!(site.code(), x.code());
    let mut seq = record_seq(&site, 5).expect("a recording");
    seq.push(Instruction::with(Code::Retnq));
    let at = area.as_ptr() as u64;
    let code = BlockEncoder::encode(
        64,
        InstructionBlock::new(&seq, at),
        BlockEncoderOptions::NONE,
    )
    .map(|r| r.code_buffer)
    .unwrap_or_else(|e| panic!("{e}: {seq:?}"));
    area[..code.len()].copy_from_slice(&code);
    let page = area.len();
    // SAFETY: `area` is a page-aligned mapping of ours; made
    // executable for the call below, then writable again.
    unsafe {
        assert_eq!(
            libc::mprotect(
                area.as_mut_ptr().cast(),
                page,
                libc::PROT_READ | libc::PROT_EXEC
            ),
            0
        );
    }
    let mut gs = [0u64; 4];
    gs[0] = profdev_test_recorder as *const () as u64;
    let mut old_gs = 0u64;
    let (rax_in, mut rax_out) = (0x1234_5678_9abc_def0u64, 0u64);
    let (mut f0, mut f1, mut sp0, mut sp1): (u64, u64, u64, u64);
    // SAFETY: arch_prctl on this thread's GS base (Rust does not use
    // GS), restored below; the called code is the sequence encoded
    // above, which returns with every register but the ones declared
    // here as they were.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_arch_prctl, 0x1004, &mut old_gs as *mut u64),
            0
        );
        assert_eq!(
            libc::syscall(libc::SYS_arch_prctl, 0x1001, gs.as_mut_ptr()),
            0
        );
        std::arch::asm!(
            "stc",
            "pushfq",
            "pop {f0}",
            "mov {sp0}, rsp",
            "push {stack}",
            "call {code}",
            "lea rsp, [rsp + 8]",
            "mov {sp1}, rsp",
            "pushfq",
            "pop {f1}",
            code = in(reg) at,
            stack = in(reg) stack,
            f0 = out(reg) f0,
            f1 = out(reg) f1,
            sp0 = out(reg) sp0,
            sp1 = out(reg) sp1,
            in("rsi") rsi,
            in("rdx") rdx,
            inout("rax") rax_in => rax_out,
        );
        assert_eq!(libc::syscall(libc::SYS_arch_prctl, 0x1001, old_gs), 0);
        assert_eq!(
            libc::mprotect(
                area.as_mut_ptr().cast(),
                page,
                libc::PROT_READ | libc::PROT_WRITE
            ),
            0
        );
    }
    assert_eq!(rax_out, rax_in, "%rax restored");
    assert_eq!(sp1, sp0, "%rsp restored");
    assert_eq!(f1, f0, "flags untouched");
    (gs[1], gs[2])
}

#[test]
fn the_recorded_target_is_the_real_one() {
    use iced_x86::MemoryOperand as M;
    // One page for the code, one readable page holding the pointers.
    // SAFETY: a fresh private anonymous mapping, unmapped at the end.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    // SAFETY: the mapping above, 8192 bytes, ours alone.
    let (area, data) =
        unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), 8192) }.split_at_mut(4096);
    let data_at = data.as_ptr() as u64;
    let words = |k: usize| data_at + 8 * k as u64;
    for (k, w) in data.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(0x7000_0000_0000u64 + 0x10 * k as u64).to_le_bytes());
    }
    let value = |k: usize| 0x7000_0000_0000u64 + 0x10 * k as u64;
    let call = |m: M| Instruction::with1(Code::Call_rm64, m).unwrap();
    let ip = area.as_ptr() as u64 + 2048; // where the site "is"
    let key = 8 * 5;
    // Register.
    let x = Instruction::with1(Code::Call_rm64, Register::RSI).unwrap();
    assert_eq!(record(x, ip, area, 0x4242_4242, 0, 0), (key, 0x4242_4242));
    // [reg+disp]
    let x = call(M::with_base_displ(Register::RSI, 0x10));
    assert_eq!(record(x, ip, area, words(3) - 0x10, 0, 0), (key, value(3)));
    // [rip+disp]: re-encoded for the copy's place.
    let x = call(M::with_base_displ(Register::RIP, words(7) as i64));
    assert_eq!(record(x, ip, area, 0, 0, 0), (key, value(7)));
    // [rsp+disp]: past what the sequence pushes.
    let x = call(M::with_base_displ(Register::RSP, 8));
    assert_eq!(record(x, ip, area, 0, 0, 0xfeed_f00d), (key, 0xfeed_f00d));
    // [base+index*scale+disp]
    let x = call(M::new(
        Register::RSI,
        Register::RDX,
        8,
        8,
        1,
        false,
        Register::None,
    ));
    assert_eq!(record(x, ip, area, words(2), 4, 0), (key, value(7)));
    // [index*scale+disp], no base.
    let x = call(M::new(
        Register::None,
        Register::RDX,
        8,
        0x48,
        4,
        false,
        Register::None,
    ));
    assert_eq!(record(x, ip, area, 0, words(0) / 8, 0), (key, value(9)));
    // A segment prefix: %fs (the thread pointer: its word 0 is itself).
    let fs0: u64;
    // SAFETY: reads the TCB's self pointer, as glibc does.
    unsafe { std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) fs0) };
    let x = call(M::new(
        Register::None,
        Register::None,
        1,
        0,
        4,
        false,
        Register::FS,
    ));
    assert_eq!(record(x, ip, area, 0, 0, 0), (key, fs0));
    // A tail call through a pointer: `jmp *0x10(%rsi)`.
    let x = Instruction::with1(Code::Jmp_rm64, M::with_base_displ(Register::RSI, 0x10)).unwrap();
    assert_eq!(
        record(x, ip, area, words(11) - 0x10, 0, 0),
        (key, value(11))
    );
    // `call *%rsp` cannot be evaluated there: no recording.
    let x = Instruction::with1(Code::Call_rm64, Register::RSP).unwrap();
    assert!(record_seq(&x, 5).is_none());
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(map, 8192) };
}

#[test]
fn hit_mode_has_one_shot_probes_and_no_trampolines() {
    // The test binary: a one-shot patch per one-shot block.
    let exe = std::env::current_exe().expect("the test binary's path");
    let bytes = std::fs::read(&exe).unwrap();
    let hits = Plan::of_bytes_in(&bytes, &exe, crate::plan::Mode::Hits).unwrap();
    let (bias, area) = (0x5555_0000_0000u64, 0x5555_4000_0000u64);
    let e = encode(&hits, bias, area, RESERVED_SLOTS);
    let n = hits.blocks.iter().filter(|b| b.how == How::Once).count();
    assert!(n > 1000, "{n}");
    assert_eq!(e.patches.iter().filter(|p| p.kind == PATCH_ONCE).count(), n);
    // `test; je` | `xor; ret` | `mov $1; ret`: one-shot probes only, on
    // the fork's two ways.
    let code = vec![
        0x85, 0xc0, 0x74, 0x03, 0x31, 0xc0, 0xc3, 0xb8, 0x01, 0, 0, 0, 0xc3,
    ];
    let sections = vec![(0x1000, code)];
    let counts = Plan::new(sections.clone(), &[0x1000], &[], &[]);
    let hits = Plan::new_in(crate::plan::Mode::Hits, sections, &[0x1000], &[], &[]);
    let e = encode(&counts, bias, area, RESERVED_SLOTS);
    assert!(e.patches.iter().all(|p| p.kind != PATCH_ONCE));
    let e = encode(&hits, bias, area, RESERVED_SLOTS);
    // No code at all: an `int3` at the start of each probed block, whose
    // entry is the block's index (its counter, from the module's first).
    assert!(e.code.iter().all(|&b| b == 0xCC), "no trampoline");
    assert!(e.counter_fixups.is_empty());
    let once: Vec<usize> = (0..hits.blocks.len())
        .filter(|&i| hits.blocks[i].how == How::Once)
        .collect();
    assert_eq!(once, [1, 2]);
    assert_eq!(once.len(), hits.probes());
    assert_eq!(e.patches.len(), once.len());
    for (p, &i) in e.patches.iter().zip(&once) {
        assert_eq!(
            (p.addr, p.entry, p.kind, p.len),
            (hits.blocks[i].start + bias, i as u64, PATCH_ONCE, 1)
        );
    }
    // Moved to another load: the addresses move, the block indices not.
    let moved = e.patches_for(bias, area, bias + 0x1000, area + 0x1000);
    assert_eq!(moved[0].addr, e.patches[0].addr + 0x1000);
    assert_eq!(moved[0].entry, e.patches[0].entry);
}

#[test]
fn patch_bytes_are_what_the_runtime_writes() {
    let p = |kind, entry, len| Patch {
        addr: 0x1000,
        entry,
        kind,
        len,
    };
    // jmp rel32 from the byte after it, the rest int3.
    assert_eq!(
        p(PATCH_JMP, 0x2000, 7).bytes().unwrap(),
        [0xe9, 0xfb, 0x0f, 0, 0, 0xcc, 0xcc]
    );
    assert_eq!(
        p(PATCH_CALL5, 0x1005, 5).bytes().unwrap(),
        [0xe8, 0, 0, 0, 0]
    );
    assert_eq!(
        p(PATCH_CALL6, 0x1000, 6).bytes().unwrap(),
        [0x3e, 0xe8, 0xfa, 0xff, 0xff, 0xff]
    );
    assert_eq!(p(PATCH_REL8, 0x1010, 2).bytes().unwrap(), [0xeb, 0x0e]);
    assert_eq!(p(PATCH_INT3, 0x3000, 1).bytes().unwrap(), [0xcc]);
    // Out of reach, a one-shot probe, a patch too short: nothing.
    assert_eq!(p(PATCH_REL8, 0x2000, 2).bytes(), None);
    assert_eq!(p(PATCH_JMP, 0x1_0000_2000, 5).bytes(), None);
    assert_eq!(p(PATCH_ONCE, 3, 1).bytes(), None);
    assert_eq!(p(PATCH_JMP, 0x2000, 2).bytes(), None);
}

#[test]
fn an_emulated_call_opens_with_a_real_call_and_returns_to_the_original_code() {
    // One page: the sequence at its start, the "original" return site
    // (`ret`) at 2048, the callee (`mov (%rsp),%rax; ret`: it returns
    // the return address it sees) at 3072.
    // SAFETY: a fresh private anonymous mapping, unmapped at the end.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    // SAFETY: the mapping above, 4096 bytes, ours alone.
    let page = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), 4096) };
    let at = page.as_ptr() as u64;
    let (landing, callee) = (at + 2048, at + 3072);
    page[2048] = 0xc3;
    page[3072..3077].copy_from_slice(&[0x48, 0x8b, 0x04, 0x24, 0xc3]);
    // The original `call *%rsi`, two bytes ending at the return site.
    let mut call = Instruction::with1(Code::Call_rm64, Register::RSI).unwrap();
    call.set_ip(landing - 2);
    call.set_len(2);
    call.set_next_ip(landing);
    let seq = super::seq::emulate_call(&call).expect("an emulated call");
    let code = BlockEncoder::encode(
        64,
        InstructionBlock::new(&seq, at),
        BlockEncoderOptions::NONE,
    )
    .map(|r| r.code_buffer)
    .unwrap_or_else(|e| panic!("{e}: {seq:?}"));
    // A real call over one byte takes the return address's slot, so the
    // processor's return stack stays in step with the stack (with `lea
    // -8(%rsp),%rsp` there, every return above the callee mispredicted).
    assert_eq!(code[..6], super::seq::CALL_OVER, "{code:02x?}");
    page[..code.len()].copy_from_slice(&code);
    let (seen, mut sp0, mut sp1): (u64, u64, u64);
    // SAFETY: the page holds the code written above, made executable
    // for the call and writable again; the sequence leaves every
    // register but %rax (declared) as it was, and returns through the
    // return site's `ret` to the call below.
    unsafe {
        assert_eq!(
            libc::mprotect(map, 4096, libc::PROT_READ | libc::PROT_EXEC),
            0
        );
        std::arch::asm!(
            "mov {sp0}, rsp",
            "call {code}",
            "mov {sp1}, rsp",
            code = in(reg) at,
            sp0 = out(reg) sp0,
            sp1 = out(reg) sp1,
            in("rsi") callee,
            out("rax") seen,
        );
        assert_eq!(
            libc::mprotect(map, 4096, libc::PROT_READ | libc::PROT_WRITE),
            0
        );
    }
    assert_eq!(seen, landing, "the callee saw the original return address");
    assert_eq!(sp1, sp0, "%rsp restored");
    // SAFETY: the mapping made above, no longer used.
    unsafe { libc::munmap(map, 4096) };
}
