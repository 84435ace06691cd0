//! Entry points of the fuzz targets in `fuzz/` (cargo fuzz), shared with the
//! replay test that runs the committed corpus under `cargo test`, so the two
//! cannot drift. Each takes arbitrary bytes and must not panic.

use crate::unwind::{UserStack, UserUnwinder, MAX_FRAMES};
use crate::{ElfObject, KernelSymbols, Objects, Tasks};
use profdev_core::{CpuMode, FileAddr, Record, Sample, UserRegs};

/// `fuzz_targets/elf.rs`: an object file, as the symbolizer, the reader
/// of C++ landing pads and the kernel's vmlinux reader take it.
pub fn elf(data: &[u8]) {
    if let Ok(o) = ElfObject::parse(data, std::path::Path::new("fuzz")) {
        let _ = o.frames(FileAddr(0x1000));
        let _ = o.file_addr_of_offset(0x1000);
    }
    if let Ok(f) = crate::elf::parse(data, std::path::Path::new("fuzz")) {
        let _ = crate::elf::landing_pads(&f);
    }
    let _ = KernelSymbols::from_vmlinux(data, "fuzz");
}

/// `fuzz_targets/maps.rs`: a `/proc/PID/maps` text, as
/// [`crate::maps::read`] takes it. Every line that parses prints back, in
/// the kernel's format, to a line that parses to the same mapping.
pub fn maps(data: &[u8]) {
    for e in crate::maps::parse_bytes(data) {
        assert!(e.path.starts_with(e.file_path()), "{e:?}");
        assert_eq!(e.deleted(), e.file_path().len() < e.path.len());
        let line = format!(
            "{:x}-{:x} {} {:x} {:x}:{:x} {} {}",
            e.start, e.end, e.perms, e.offset, e.major, e.minor, e.inode, e.path
        );
        assert_eq!(
            crate::maps::MapsEntry::parse(&line).as_ref(),
            Some(&e),
            "{line:?}"
        );
    }
}

/// `fuzz_targets/kallsyms.rs`: a `/proc/kallsyms` or `System.map` text.
pub fn kallsyms(data: &[u8]) {
    if let Ok(k) = KernelSymbols::from_text(data, "fuzz") {
        let _ = k.text_symbols();
        let _ = k.lookup(0xffffffff81000000);
    }
}

/// The unwinder's fixed module: `fuzz-fixture/fx.elf`, a static x86_64
/// program without libc (source and recipe beside it) whose text
/// `[0x401000, 0x40112b)` holds `_start` (the root: its CFI marks the
/// return address undefined), `entry`, `outer`, `middle` (with a frame
/// pointer) and `leaf`.
pub const UNWIND_FIXTURE: &[u8] = include_bytes!("../fuzz-fixture/fx.elf");
/// The path the fixture is mapped under.
pub const UNWIND_FIXTURE_PATH: &str = "/fuzz/fx";
/// The fixture's text, mapped where it was linked (file offset 0x1000)…
pub const UNWIND_TEXT: (u64, u64, u64) = (0x401000, 0x1000, 0x1000);
/// …and again 64 GiB up, as a shared object would be (a load bias).
pub const UNWIND_TEXT_BIASED: (u64, u64, u64) = (0x10_0040_1000, 0x1000, 0x1000);

/// Fixed part of an unwind input, before the user chain and the stack.
pub const UNWIND_HEADER: usize = 25;

/// `fuzz_targets/unwind.rs`: one sample of process 1, which maps the
/// fixture twice, unwound from hostile registers and stack bytes.
///
/// The input is `ip`, `sp`, `bp` (u64 little-endian each), `n` (u8; the
/// low 4 bits count the user-chain entries that follow, u64 LE each), then
/// the stack copy (from `sp` up). The seeds are the fixture's own stacks,
/// copied by gdb at breakpoints in `leaf`, `middle`, `outer` and `_start`.
/// Whatever the bytes, the unwinder returns at most [`MAX_FRAMES`] frames,
/// and at least one unless the ip is 0 and the chain holds no address.
pub fn unwind(data: &[u8]) {
    let _ = unwind_input(data);
}

/// [`unwind`]'s work: the stacks found with the stack copy and without it
/// (`None`: the input is shorter than [`UNWIND_HEADER`]).
pub fn unwind_input(data: &[u8]) -> Option<[UserStack; 2]> {
    let (head, rest) = data.split_first_chunk::<UNWIND_HEADER>()?;
    let word = |i: usize| u64::from_le_bytes(head[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let regs = UserRegs {
        ip: word(0),
        sp: word(1),
        bp: word(2),
    };
    let n = usize::from(head[24] & 0xf).min(rest.len() / 8);
    let (chain, stack) = rest.split_at(8 * n);
    let user_chain: Vec<u64> = chain
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();

    let mut unwinder = UserUnwinder::new();
    let mut tasks = Tasks::with_objects(Objects::with_loader(|path| {
        (path == UNWIND_FIXTURE_PATH).then(|| UNWIND_FIXTURE.to_vec())
    }));
    tasks.observe(&Record::Comm {
        pid: 1,
        tid: 1,
        comm: "fx".into(),
        exec: true,
        time: 0,
    });
    for (addr, len, pgoff) in [UNWIND_TEXT, UNWIND_TEXT_BIASED] {
        tasks.observe(&Record::Mmap {
            pid: 1,
            tid: 1,
            addr,
            len,
            pgoff,
            path: UNWIND_FIXTURE_PATH.into(),
            file: None,
            build_id: None,
            time: 0,
        });
    }
    let sample = Sample {
        ip: regs.ip,
        pid: 1,
        tid: 1,
        mode: CpuMode::User,
        user_chain,
        user_regs: Some(regs),
        user_stack: stack.to_vec(),
        ..Sample::default()
    };
    // With the stack copy, then as if the kernel had sent none (the
    // kernel's chain alone).
    let without_copy = Sample {
        user_regs: None,
        user_stack: Vec::new(),
        ..sample.clone()
    };
    let stacks = [&sample, &without_copy].map(|s| {
        let stack = unwinder.unwind(&tasks, s);
        assert!(
            stack.frames.len() <= MAX_FRAMES,
            "{} frames",
            stack.frames.len()
        );
        // perf's context markers (PERF_CONTEXT_*) are no addresses.
        let chain_has_address = s.user_chain.iter().any(|&a| a < (-4095i64) as u64);
        assert!(
            !stack.frames.is_empty() || (s.ip == 0 && !chain_has_address),
            "no frame for ip {:#x}",
            s.ip
        );
        for i in 0..stack.frames.len() {
            let _ = stack.lookup_address(i);
        }
        stack
    });
    assert_eq!(unwinder.stats().samples, 2);
    Some(stacks)
}

/// `fuzz_targets/jit.rs`: a jitdump and a perf map, as the recorder reads
/// another user's. The input's first byte picks which; whatever parses
/// keeps no more functions than its bytes could describe.
pub fn jit(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which & 1 == 0 {
        if let Ok(d) = crate::jit::parse_jitdump(rest) {
            assert!(d.consumed <= rest.len());
            assert!(d.functions.len() <= rest.len() / 16);
        }
    } else {
        let f = crate::jit::parse_perf_map(rest);
        assert!(f.len() <= rest.len() / 6 + 1);
        assert!(f
            .iter()
            .all(|f| f.size > 0 && f.start.checked_add(f.size).is_some()));
    }
}
