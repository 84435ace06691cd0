//! The user-stack unwinder on a real binary: tests/fixtures/snapstack.c,
//! compiled here with gcc -O2 with and without frame pointers, captures its
//! own stack the way a perf sample does; we unwind the capture and name the
//! frames.

use profdev_core::{FileAddr, Record, Sample, UserRegs};
use profdev_symbolize::unwind::{UnwindMethod, UserUnwinder};
use profdev_symbolize::ElfObject;
use profdev_symbolize::{Objects, Tasks};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Capture {
    _dir: tempfile::TempDir,
    exe: PathBuf,
    regs: UserRegs,
    stack: Vec<u8>,
    /// Executable file mappings as mmap records of pid 1.
    mmaps: Vec<Record>,
}

/// Compile snapstack.c with `flags` and run it; `None` (after saying why)
/// without gcc.
fn capture(flags: &[&str]) -> Option<Capture> {
    if !profdev_testkit::tools("snapstack.c compiled by gcc", &["gcc"]) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapstack.c");
    let exe = dir.path().join("snapstack");
    let out = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc: {out:?}");
    let status = Command::new(&exe).current_dir(dir.path()).status().unwrap();
    assert!(status.success(), "snapstack: {status}");
    let bin = std::fs::read(dir.path().join("capture.bin")).unwrap();
    let word = |i: usize| u64::from_le_bytes(bin[i * 8..i * 8 + 8].try_into().unwrap());
    let regs = UserRegs {
        ip: word(0),
        sp: word(1),
        bp: word(2),
    };
    let len = word(3) as usize;
    let stack = bin[32..32 + len].to_vec();
    let maps = std::fs::read_to_string(dir.path().join("maps.txt")).unwrap();
    let mut mmaps = Vec::new();
    for line in maps.lines() {
        // 55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:01 123 /path
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') {
            continue;
        }
        let (a, b) = f[0].split_once('-').unwrap();
        let start = u64::from_str_radix(a, 16).unwrap();
        let end = u64::from_str_radix(b, 16).unwrap();
        mmaps.push(Record::Mmap {
            pid: 1,
            tid: 1,
            addr: start,
            len: end - start,
            pgoff: u64::from_str_radix(f[2], 16).unwrap(),
            path: f[5..].join(" "),
            file: None,
            build_id: None,
            time: 0,
        });
    }
    Some(Capture {
        _dir: dir,
        exe,
        regs,
        stack,
        mmaps,
    })
}

impl Capture {
    fn sample(&self, stack_bytes: usize, user_chain: Vec<u64>) -> Sample {
        Sample {
            pid: 1,
            tid: 1,
            ip: self.regs.ip,
            user_regs: Some(self.regs),
            user_stack: self.stack[..stack_bytes.min(self.stack.len())].to_vec(),
            user_chain,
            ..Sample::default()
        }
    }

    fn unwinder(&self) -> (Tasks, UserUnwinder) {
        let mut t = Tasks::with_objects(Objects::new());
        for r in &self.mmaps {
            t.observe(r);
        }
        (t, UserUnwinder::new())
    }

    /// Names of the frames that fall in the executable (None elsewhere).
    fn names(&self, frames: &[u64]) -> Vec<Option<String>> {
        let exe = ElfObject::open(&self.exe).unwrap();
        let exe_path = self.exe.to_str().unwrap();
        let maps: Vec<(u64, u64, u64)> = self
            .mmaps
            .iter()
            .filter_map(|r| match r {
                Record::Mmap {
                    addr,
                    len,
                    pgoff,
                    path,
                    ..
                } if path == exe_path => Some((*addr, *len, *pgoff)),
                _ => None,
            })
            .collect();
        frames
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let a = if i == 0 { a } else { a - 1 };
                let &(start, _, pgoff) = maps.iter().find(|m| a >= m.0 && a < m.0 + m.1)?;
                let fa: FileAddr = exe.file_addr_of_offset(pgoff + (a - start))?;
                exe.symbol(fa).map(|(s, _)| s.name())
            })
            .collect()
    }
}

fn frames_of(s: &profdev_symbolize::unwind::UserStack) -> Vec<u64> {
    s.frames.iter().map(|f| f.0).collect()
}

fn expect_leaf_to_main(names: &[Option<String>]) {
    let want = ["leaf", "mid", "top", "main"];
    let got: Vec<&str> = names
        .iter()
        .take(4)
        .map(|n| n.as_deref().unwrap_or("?"))
        .collect();
    assert_eq!(got, want, "all frames: {names:?}");
}

#[test]
fn cfi_unwinds_a_binary_without_frame_pointers() {
    let Some(c) = capture(&["-O2", "-fomit-frame-pointer"]) else {
        return;
    };
    let (t, mut u) = c.unwinder();
    let st = u.unwind(&t, &c.sample(usize::MAX, vec![]));
    assert_eq!(st.method, UnwindMethod::Cfi, "{:x?}", st.frames);
    let frames = frames_of(&st);
    let names = c.names(&frames);
    eprintln!("{names:?}");
    expect_leaf_to_main(&names);
    // The root is the executable's _start, through libc's frames.
    assert_eq!(
        names.last().unwrap().as_deref(),
        Some("_start"),
        "{names:?}"
    );
    assert!(frames.len() >= 6, "{names:?}");
    let stats = u.stats();
    assert_eq!((stats.samples, stats.cfi, stats.truncated), (1, 1, 0));

    // A copy too short for the whole stack: the unwind stops where it ends
    // and says so.
    let short = u.unwind(&t, &c.sample(64, vec![]));
    assert_eq!(short.method, UnwindMethod::Truncated);
    assert!(short.frames.len() < frames.len());
    assert_eq!(u.stats().truncated, 1);

    // …unless the kernel's frame-pointer chain carries on from a frame the
    // CFI unwind reached: then the two are spliced. The kernel chain here is
    // what a frame-pointer walk of FP-less code typically gives: it misses
    // the sampled function's caller.
    let copy = 160;
    let partial = frames_of(&u.unwind(&t, &c.sample(copy, vec![])));
    assert!(partial.len() > 2, "{partial:x?}");
    let mut kernel = vec![c.regs.ip];
    kernel.extend_from_slice(&frames[2..]);
    let spliced = u.unwind(&t, &c.sample(copy, kernel));
    assert_eq!(spliced.method, UnwindMethod::Spliced);
    assert_eq!(frames_of(&spliced), frames);
}

#[test]
fn frame_pointers_take_over_without_cfi() {
    let Some(c) = capture(&[
        "-O2",
        "-fno-omit-frame-pointer",
        "-fno-asynchronous-unwind-tables",
        "-fno-unwind-tables",
    ]) else {
        return;
    };
    // The object has no FDE for leaf/mid/top/main: the CFI unwinder cannot
    // get past the first frame, the frame-pointer walk can.
    let (t, mut u) = c.unwinder();
    let st = u.unwind(&t, &c.sample(usize::MAX, vec![]));
    assert!(
        matches!(
            st.method,
            UnwindMethod::FramePointers | UnwindMethod::Truncated
        ),
        "{st:?}"
    );
    let names = c.names(&frames_of(&st));
    eprintln!("{:?} {names:?}", st.method);
    expect_leaf_to_main(&names);
}

#[test]
fn without_a_stack_copy_the_kernel_chain_is_used() {
    let Some(c) = capture(&["-O2", "-fomit-frame-pointer"]) else {
        return;
    };
    let (t, mut u) = c.unwinder();
    let full = frames_of(&u.unwind(&t, &c.sample(usize::MAX, vec![])));
    let mut s = c.sample(0, full.clone());
    s.user_regs = None;
    let st = u.unwind(&t, &s);
    assert_eq!(st.method, UnwindMethod::KernelChain);
    assert_eq!(frames_of(&st), full);
    assert_eq!(u.stats().no_stack_copy, 1);
}
