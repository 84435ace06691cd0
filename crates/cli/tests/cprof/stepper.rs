//! The single-stepper the cprof tests compare profdev's counts with: a
//! program run under ptrace one instruction at a time, every instruction
//! of its `.text` (listed by `objdump -d`) counted as often as the
//! processor stopped there, every conditional jump's outcomes seen from
//! where the next stop was. Independent of profdev's engine: the oracle
//! of exact counts. Included with `#[path]` by the tests that use it.

use profdev_coverage::counts::{Block, Branch, ModuleCoverage};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// (address, mnemonic) of every instruction of `exe`'s .text.
pub fn instructions(exe: &Path) -> Vec<(u64, String)> {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-j", ".text"])
        .arg(exe)
        .output()
        .expect("objdump runs");
    assert!(out.status.success());
    let mut v = Vec::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((addr, rest)) = l.trim_start().split_once(":\t") else {
            continue;
        };
        let Ok(a) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        let mnemonic = rest.split_whitespace().next().unwrap_or("").to_string();
        v.push((a, mnemonic));
    }
    assert!(v.len() > 20, "objdump listed too few instructions");
    v
}

/// Run `exe` one instruction at a time under ptrace: the number of stops
/// at each pc of `insns` (ascending), and for each conditional jump among
/// them whether the next stop was the instruction after it (fallen
/// through) or elsewhere (taken).
pub fn step(exe: &Path, insns: &[(u64, String)]) -> (HashMap<u64, u64>, Vec<Branch>) {
    use std::ffi::CString;
    let lo = insns[0].0;
    let hi = insns.last().unwrap().0 + 1;
    let next: HashMap<u64, u64> = insns.windows(2).map(|w| (w[0].0, w[1].0)).collect();
    let mut branches: Vec<Branch> = insns
        .iter()
        .filter(|(_, m)| m.starts_with('j') && m != "jmp")
        .map(|(a, _)| Branch {
            addr: *a,
            taken: 0,
            not_taken: 0,
        })
        .collect();
    let jcc: HashMap<u64, usize> = branches
        .iter()
        .enumerate()
        .map(|(i, b)| (b.addr, i))
        .collect();
    let path = CString::new(exe.as_os_str().as_encoded_bytes()).unwrap();
    let argv = [path.as_ptr(), std::ptr::null()];
    // SAFETY: the child only calls async-signal-safe functions (ptrace,
    // execv, _exit) between fork and exec.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        // SAFETY: in the forked child: async-signal-safe calls only, on
        // `path` and `argv`, which the fork copied and which stay live
        // until execv replaces the image.
        unsafe {
            libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
            libc::execv(path.as_ptr(), argv.as_ptr());
            libc::_exit(127);
        }
    }
    let mut counts = HashMap::new();
    let mut prev: Option<u64> = None;
    let mut status = 0;
    loop {
        // SAFETY: plain system calls on our own traced child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(r, pid, "waitpid");
        if libc::WIFEXITED(status) {
            assert_eq!(libc::WEXITSTATUS(status), 0, "{} exits 0", exe.display());
            break;
        }
        assert!(libc::WIFSTOPPED(status), "the child stops or exits");
        // A signal the program raised is delivered with the next step (its
        // handler's first instruction is the next stop); the stepper's own
        // SIGTRAP is not.
        let sig = libc::WSTOPSIG(status);
        let deliver = if sig == libc::SIGTRAP { 0 } else { sig };
        // SAFETY: user_regs_struct is plain integers; all zeros is a value.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: GETREGS writes one user_regs_struct into `regs`, ours and
        // live; `pid` is our stopped tracee.
        let r = unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs) };
        assert_eq!(r, 0, "PTRACE_GETREGS");
        if let Some(p) = prev {
            if let Some(&i) = jcc.get(&p) {
                if next.get(&p) == Some(&regs.rip) {
                    branches[i].not_taken += 1;
                } else {
                    branches[i].taken += 1;
                }
            }
        }
        prev = (lo..hi).contains(&regs.rip).then_some(regs.rip);
        if let Some(pc) = prev {
            *counts.entry(pc).or_insert(0u64) += 1;
        }
        // SAFETY: SINGLESTEP takes no pointer (its data is a signal
        // number); `pid` is our stopped tracee.
        let r = unsafe { libc::ptrace(libc::PTRACE_SINGLESTEP, pid, 0, deliver) };
        assert_eq!(r, 0, "PTRACE_SINGLESTEP");
    }
    (counts, branches)
}

/// The exact counts of one run of `exe`.
pub fn measure(exe: &Path) -> ModuleCoverage {
    let insns = instructions(exe);
    let hi = insns.last().unwrap().0 + 1;
    let (counts, branches) = step(exe, &insns);
    let ends: Vec<u64> = insns.iter().skip(1).map(|i| i.0).chain([hi]).collect();
    let blocks = insns
        .iter()
        .zip(ends)
        .map(|((a, _), end)| Block {
            start: *a,
            end,
            insns: vec![*a].into(),
            count: counts.get(a).copied().unwrap_or(0),
        })
        .collect();
    let obj = profdev_symbolize::ElfObject::open(exe).unwrap();
    ModuleCoverage {
        path: exe.to_path_buf(),
        build_id: obj.build_id().map(<[u8]>::to_vec),
        blocks,
        branches,
        uncounted: 0,
        file: None,
    }
}
