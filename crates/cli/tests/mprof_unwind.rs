//! `profdev mprof`'s whole stacks without frame pointers: a program built
//! with `-O2 -fomit-frame-pointer` (tests/data/mprof/unwind.c) is walked
//! with the unwind tables profdev builds from `.eh_frame` before the run
//! (profdev_mprof::unwind): `build()` and `other()`, which call one
//! `leaf_alloc()`, are told apart with exact bytes, and a stack through
//! libc (qsort's comparator, strdup) keeps the user's callers above libc.
//! A corrupt table is refused by the library, not followed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn compile(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mprof/unwind.c");
    let exe = dir.join("unwind");
    let status = Command::new("cc")
        .args([
            "-g",
            "-O2",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cannot run cc");
    assert!(status.success(), "cc failed on unwind.c");
    exe
}

/// The `--folded` lines of EXE ARG under mprof.
fn folded(dir: &Path, exe: &Path, arg: &str) -> Vec<String> {
    let file = dir.join("unwind.folded");
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "--folded"])
        .arg(&file)
        .arg(exe)
        .arg(arg)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mprof failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    text.lines().map(String::from).collect()
}

#[test]
fn folded_without_frame_pointers_tells_the_two_callers_apart() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let lines = folded(dir.path(), &exe, "");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        common::folded_ending(&lines, "main;build;leaf_alloc 409600").len(),
        1,
        "{lines:?}"
    );
    assert_eq!(
        common::folded_ending(&lines, "main;other;leaf_alloc 50000").len(),
        1,
        "{lines:?}"
    );
}

#[test]
fn a_stack_through_libc_keeps_the_users_callers() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let lines = folded(dir.path(), &exe, "libc");
    for caller in ["sort_a", "sort_b"] {
        let with: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(&format!("main;{caller};")) && l.contains("cmp_alloc"))
            .collect();
        assert!(!with.is_empty(), "{caller}: {lines:?}");
    }
    for caller in ["dup_a", "dup_b"] {
        assert!(
            lines.iter().any(|l| l.contains(&format!("main;{caller};"))
                || l.contains(&format!("main;{caller} "))),
            "{caller}: {lines:?}"
        );
    }
    // Every comparator's allocation is under one of the two sorts.
    for l in lines.iter().filter(|l| l.contains("cmp_alloc")) {
        assert!(
            l.contains("main;sort_a;") || l.contains("main;sort_b;"),
            "{l}: {lines:?}"
        );
    }
}
