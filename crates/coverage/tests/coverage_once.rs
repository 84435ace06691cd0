//! One-shot probes (hit mode, cprof's marks): each probe is one `int3`
//! that records its block and puts the original byte back at its first
//! hit. Four threads run the same function at once while its probes
//! remove themselves; the program reads its own code: the probe before,
//! the original byte after. A forked child's probe is removed in the
//! child's memory only. The marks equal the counting run's (run or not).

use object::{Object, ObjectSection, ObjectSymbol};
use profdev_coverage::counts::ModuleCoverage;
use profdev_coverage::launch::launch_in;
use profdev_coverage::plan::{How, Mode, Plan};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn build(dir: &Path, opt: &str) -> PathBuf {
    let out = dir.join(format!("once{opt}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/once.c");
    profdev_testkit::cc(&src, &[opt, "-g", "-pthread"], &out);
    out
}

/// Run `prog` in `mode`: its module's coverage and what it printed.
fn run(prog: &Path, mode: Mode, dir: &Path, off: u64) -> (ModuleCoverage, String) {
    let out = dir.join(format!("out-{mode:?}"));
    let mut cmd = Command::new(prog);
    cmd.arg(off.to_string())
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()));
    let name = prog.file_name().unwrap().to_string_lossy().into_owned();
    let r = launch_in(cmd, &[name], mode).expect("launches");
    assert!(r.status.success(), "{:?}", r.status);
    let mut m = r.modules;
    assert_eq!(m.len(), 1, "{m:?}");
    (m.pop().unwrap(), std::fs::read_to_string(out).unwrap())
}

/// A function's address range and the byte at `off` in its code in the
/// file.
fn func_at(bytes: &[u8], name: &str, off: u64) -> (u64, u64, u8) {
    let elf = object::File::parse(bytes).expect("parses");
    let s = elf
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    let sec = elf
        .sections()
        .find(|x| x.address() <= s.address() && s.address() < x.address() + x.size())
        .expect("its section");
    let b = sec.data_range(s.address() + off, 1).unwrap().unwrap()[0];
    (s.address(), s.address() + s.size(), b)
}

fn func(bytes: &[u8], name: &str) -> (u64, u64, u8) {
    func_at(bytes, name, 0)
}

/// The two hex bytes after `word ` on the line that starts with it.
fn printed(out: &str, word: &str) -> Vec<u8> {
    let line = out
        .lines()
        .find(|l| l.starts_with(word))
        .unwrap_or_else(|| panic!("no {word:?} line in {out:?}"));
    line[word.len()..]
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect()
}

#[test]
fn probes_remove_themselves_while_threads_run_the_same_code() {
    let tmp = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let prog = build(tmp.path(), opt);
        let bytes = std::fs::read(&prog).unwrap();
        let plan = Plan::of_bytes_in(&bytes, &prog, Mode::Hits).unwrap();
        // Every probe is one-shot: no trampoline, no other patch.
        assert!(plan.blocks.iter().all(|b| matches!(
            b.how,
            How::Once | How::Implied { .. } | How::Branches { .. } | How::None
        )));
        let (work, work_end, _) = func(&bytes, "work");
        // A block of work() with a probe (its first may be implied).
        let probe = plan
            .blocks
            .iter()
            .find(|b| work <= b.start && b.start < work_end && b.how == How::Once)
            .expect("a probe in work()")
            .start;
        let (_, _, work_byte) = func_at(&bytes, "work", probe - work);
        let (child_only, _, child_byte) = func(&bytes, "child_only");
        assert_ne!(work_byte, 0xcc);
        assert_eq!(
            plan.blocks[plan.block_at(child_only).unwrap()].how,
            How::Once
        );

        let (hits, out) = run(&prog, Mode::Hits, tmp.path(), probe - work);
        // The probe was there when main started, and is gone after four
        // threads ran work() 8,000 times (the original byte is back).
        assert_eq!(printed(&out, "before "), [0xcc, 0xcc], "{opt}: {out}");
        assert_eq!(printed(&out, "after "), [work_byte], "{opt}: {out}");
        // The child removed child_only's probe in its own memory only.
        assert_eq!(printed(&out, "child "), [child_byte], "{opt}: {out}");
        assert_eq!(printed(&out, "parent "), [0xcc], "{opt}: {out}");

        // The marks are the counting run's, block by block.
        let (exact, _) = run(&prog, Mode::Counts, tmp.path(), probe - work);
        assert_eq!(hits.blocks.len(), exact.blocks.len());
        for (h, e) in hits.blocks.iter().zip(&exact.blocks) {
            assert_eq!(h.start, e.start);
            assert!(h.count <= 1, "{opt}: {:#x} counted {}", h.start, h.count);
            assert_eq!(h.count > 0, e.count > 0, "{opt}: block {:#x}", h.start);
        }
        let ran = |lo: u64, hi: u64| {
            hits.blocks
                .iter()
                .filter(|b| lo <= b.start && b.start < hi)
                .map(|b| b.count)
                .collect::<Vec<_>>()
        };
        // Both ways of work()'s branch ran (at -O0, where each is a
        // block); never() did not; the child's
        // function is marked (the union of the processes' marks).
        let w = ran(work, work_end);
        assert!(w.contains(&1), "{opt}");
        if opt == "-O0" {
            assert!(w.iter().all(|&c| c == 1), "{opt}");
        }
        let (never, never_end, _) = func(&bytes, "never");
        assert!(ran(never, never_end).iter().all(|&c| c == 0), "{opt}");
        assert_eq!(ran(child_only, child_only + 1), [1], "{opt}");
    }
}
