//! The uprobe fallback's conditions, probe plans and program, tried.

// (Constants the tests match on must be in scope, or a pattern binds.)
use super::link::*;
use super::program::*;
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
