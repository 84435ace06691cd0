//! Counts mode on a computed-goto dispatch loop (an interpreter's, as in
//! CPython's eval loop) whose label blocks are shorter than a jump: the
//! labels are stored in data, so the function's leaders are all known and
//! those blocks are patched with jumps, not breakpoints. The breakpoints
//! taken do not grow with the iterations (before, each label's block
//! trapped on every dispatch: 4 per iteration), and every label's block is
//! counted exactly.

use profdev_coverage::launch::{launch_in, NOTE_TRAPS};
use profdev_coverage::plan::Mode;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn build(dir: &Path, opt: &str) -> PathBuf {
    let out = dir.join(format!("dispatch{opt}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dispatch.c");
    profdev_testkit::cc(&src, &[opt, "-g"], &out);
    out
}

fn main_at(path: &Path) -> u64 {
    let elf = profdev_symbolize::ElfObject::open(path).expect("parses");
    elf.symbols()
        .iter()
        .find(|s| s.mangled == "main")
        .expect("main")
        .addr
}

#[test]
fn dispatch_through_short_label_blocks_takes_no_breakpoint_per_iteration() {
    let tmp = tempfile::tempdir().unwrap();
    let n: u64 = 20_000;
    for opt in ["-O2", "-O0"] {
        let prog = build(tmp.path(), opt);
        let native = Command::new(&prog).arg(n.to_string()).output().unwrap();
        assert!(native.status.success());
        let out = tmp.path().join(format!("out{opt}"));
        let mut cmd = Command::new(&prog);
        cmd.arg(n.to_string())
            .stdout(Stdio::from(std::fs::File::create(&out).unwrap()));
        let name = prog.file_name().unwrap().to_string_lossy().into_owned();
        let r = launch_in(cmd, &[name], Mode::Counts).expect("launches");
        assert!(r.status.success(), "{:?}", r.status);
        let printed = std::fs::read_to_string(&out).unwrap();
        assert_eq!(printed.as_bytes(), native.stdout, "{opt}");
        let traps: u64 = r
            .notes
            .iter()
            .filter_map(|n| n.strip_suffix(NOTE_TRAPS)?.parse::<u64>().ok())
            .sum();
        assert!(
            traps < 64,
            "{opt}: {traps} breakpoints taken: {:?}",
            r.notes
        );
        let m = &r.modules[0];
        let main = main_at(&prog);
        for line in printed.lines().filter(|l| !l.starts_with("result")) {
            let (label, off) = line.split_once(' ').unwrap();
            let at = main.wrapping_add(off.parse::<i64>().unwrap() as u64);
            let want = if label == "end" { 1 } else { n };
            let b = m
                .blocks
                .iter()
                .find(|b| b.start == at)
                .unwrap_or_else(|| panic!("{opt}: no block at {label} {at:#x}"));
            assert_eq!(b.count, want, "{opt}: {label} at {at:#x}");
        }
    }
}
