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

/// Run `prog` with `args` in `mode`, the runtime's launch window set to
/// `window` milliseconds (None: its default): its module's coverage and
/// what it printed.
fn run_with(
    prog: &Path,
    mode: Mode,
    dir: &Path,
    args: &[&str],
    window: Option<&str>,
) -> (ModuleCoverage, String) {
    let out = dir.join(format!("out-{mode:?}"));
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdout(Stdio::from(std::fs::File::create(&out).unwrap()));
    if let Some(ms) = window {
        cmd.env("PROFDEV_COV_WINDOW_MS", ms);
    }
    let name = prog.file_name().unwrap().to_string_lossy().into_owned();
    let r = launch_in(cmd, &[name], mode).expect("launches");
    assert!(r.status.success(), "{:?}", r.status);
    let mut m = r.modules;
    assert_eq!(m.len(), 1, "{m:?}");
    (m.pop().unwrap(), std::fs::read_to_string(out).unwrap())
}

fn run(
    prog: &Path,
    mode: Mode,
    dir: &Path,
    off: u64,
    window: Option<&str>,
) -> (ModuleCoverage, String) {
    run_with(prog, mode, dir, &[&off.to_string()], window)
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

        // Within the launch window (its default), a hit stores the byte;
        // with none, it writes through /proc/self/mem.
        for window in [None, Some("0")] {
            let (hits, out) = run(&prog, Mode::Hits, tmp.path(), probe - work, window);
            // The probe was there when main started, and is gone after four
            // threads ran work() 8,000 times (the original byte is back).
            assert_eq!(printed(&out, "before "), [0xcc, 0xcc], "{opt}: {out}");
            assert_eq!(printed(&out, "after "), [work_byte], "{opt}: {out}");
            // The child removed child_only's probe in its own memory only.
            assert_eq!(printed(&out, "child "), [child_byte], "{opt}: {out}");
            assert_eq!(printed(&out, "parent "), [0xcc], "{opt}: {out}");

            // The marks are the counting run's, block by block.
            let (exact, _) = run(&prog, Mode::Counts, tmp.path(), probe - work, None);
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
}

fn build_window(dir: &Path) -> PathBuf {
    let out = dir.join("window");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/window.c");
    profdev_testkit::cc(&src, &["-O2", "-g"], &out);
    out
}

/// The line of `out` that starts with `word`, less the word.
fn line_of<'a>(out: &'a str, word: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(word))
        .unwrap_or_else(|| panic!("no {word:?} line in {out:?}"))
}

/// The marks of `f`'s blocks.
fn marks_of(cov: &ModuleCoverage, bytes: &[u8], f: &str) -> Vec<u64> {
    let (lo, hi, _) = func(bytes, f);
    cov.blocks
        .iter()
        .filter(|b| lo <= b.start && b.start < hi)
        .map(|b| b.count)
        .collect()
}

#[test]
fn the_launch_window_ends_before_the_programs_own_mprotect() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_window(tmp.path());
    let bytes = std::fs::read(&prog).unwrap();
    // A window far longer than the run: the pages are writable at main,
    // until the program's own mprotect of one of them ends the window
    // (all its pages R-X again) before it is done; late()'s probe, hit
    // after that, is put back through /proc/self/mem.
    let (cov, out) = run_with(&prog, Mode::Hits, tmp.path(), &["mprotect"], Some("600000"));
    assert_eq!(line_of(&out, "start "), "rwxp", "{out}");
    assert_eq!(line_of(&out, "after "), "r-xp", "{out}");
    assert_eq!(line_of(&out, "other "), "r-xp 1", "{out}");
    assert_eq!(line_of(&out, "late "), "20", "{out}");
    let late = marks_of(&cov, &bytes, "late");
    assert!(
        late.contains(&1) && late.iter().all(|&c| c <= 1),
        "{late:?}"
    );
    // With no window the code is never writable.
    let (cov, out) = run_with(&prog, Mode::Hits, tmp.path(), &["mprotect"], Some("0"));
    assert_eq!(line_of(&out, "start "), "r-xp", "{out}");
    assert_eq!(marks_of(&cov, &bytes, "late"), late);
}

/// window.c's `MODE MS` in hit mode with a window of MS milliseconds,
/// open at its main (its code writable): what it printed.
fn windowed(mode: &str, ms: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let prog = build_window(tmp.path());
    let (_, out) = run_with(&prog, Mode::Hits, tmp.path(), &[mode, ms], Some(ms));
    assert_eq!(line_of(&out, "start "), "rwxp", "{out}");
    out
}

#[test]
fn the_launch_window_ends_at_a_hit_past_its_time() {
    // A window of 1 s from the end of the runtime's patching (so open
    // at main), which the program lets pass, twice, with no new code run:
    // of any 16 hits after that one reads the clock and ends the window
    // (every page R-X again).
    let out = windowed("expire", "1000");
    let n: usize = line_of(&out, "expired ")
        .parse()
        .unwrap_or_else(|_| panic!("{out}"));
    assert!(n <= 16, "{out}");
}

#[test]
fn the_launch_window_stays_open_while_new_code_runs() {
    // A window of 1 s, and new code run for 2.5 s at least, 16 hits in
    // every 40 ms: each hit that reads the clock moves the window on.
    let out = windowed("slide", "1000");
    let slid: Vec<&str> = line_of(&out, "slid ").split(' ').collect();
    let ms: u64 = slid[0].parse().unwrap_or_else(|_| panic!("{out}"));
    assert!(ms >= 2000, "{out}");
    assert_eq!(slid[1], "rwxp", "{out}");
}
