//! `profdev mprof`'s whole stacks without frame pointers: a program built
//! with `-O2 -fomit-frame-pointer` (tests/data/mprof/unwind.c) is walked
//! with the unwind tables profdev builds from `.eh_frame` before the run
//! (profdev_mprof::unwind): `build()` and `other()`, which call one
//! `leaf_alloc()`, are told apart with exact bytes, and a stack through
//! libc (qsort's comparator, strdup) keeps the user's callers above libc.
//! A corrupt table is refused by the library, not followed. A module
//! profdev did not know before the run (a program CMD executes, a
//! library it loads with `dlopen`) is walked as well: the library asks
//! profdev for its table when the walk first meets it
//! (profdev_mprof::unwind::serve); without that, its frames were followed
//! by a frame pointer the module does not keep.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mprof")
        .join(name)
}

/// `source` built into `out` without frame pointers, with `flags`.
fn cc(source: &Path, out: &Path, flags: &[&str]) {
    let status = Command::new("cc")
        .args([
            "-g",
            "-O2",
            "-fomit-frame-pointer",
            "-fno-optimize-sibling-calls",
        ])
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(source)
        .status()
        .expect("cannot run cc");
    assert!(status.success(), "cc failed on {}", source.display());
}

fn compile(dir: &Path) -> PathBuf {
    let exe = dir.join("unwind");
    cc(&data("unwind.c"), &exe, &[]);
    exe
}

/// The `--folded` lines of EXE ARG under mprof.
fn folded(dir: &Path, exe: &Path, arg: &str) -> Vec<String> {
    folded_of(dir, &[exe.as_os_str(), arg.as_ref()])
}

/// The `--folded` lines of CMD under mprof.
fn folded_of(dir: &Path, cmd: &[&std::ffi::OsStr]) -> Vec<String> {
    folded_in(dir, cmd, None)
}

/// [`folded_of`], with mprof's `$TMPDIR` (where its session goes) `tmp`.
fn folded_in(dir: &Path, cmd: &[&std::ffi::OsStr], tmp: Option<&Path>) -> Vec<String> {
    let file = dir.join("unwind.folded");
    let mut mprof = Command::new(env!("CARGO_BIN_EXE_profdev"));
    if let Some(t) = tmp {
        mprof.env("TMPDIR", t);
    }
    let o = mprof
        .args(["mprof", "-o", "-", "--folded"])
        .arg(&file)
        .args(cmd)
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

/// `build;leaf_alloc` and `other;leaf_alloc`, each once in `lines`, under
/// `caller`, with their exact bytes.
fn told_apart(lines: &[String], caller: &str) {
    for (callee, bytes) in [("build", 409600), ("other", 50000)] {
        let want = format!("{caller};{callee};leaf_alloc {bytes}");
        assert_eq!(
            common::folded_ending(lines, &want).len(),
            1,
            "{want}: {lines:?}"
        );
    }
}

#[test]
fn a_program_cmd_executes_is_walked_with_a_table_built_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    // The shell forks and executes the program (the `; true` after it
    // keeps the shell from replacing itself).
    let lines = folded_of(
        dir.path(),
        &[
            "sh".as_ref(),
            "-c".as_ref(),
            "\"$0\"; true".as_ref(),
            exe.as_os_str(),
        ],
    );
    told_apart(&lines, "main");
}

/// A session directory too long to name in a socket's address (a
/// `$TMPDIR` of over 100 bytes; the limit is 108) is named through a
/// descriptor of it, by profdev and by the library: tables are still
/// built on request (before, mprof refused to run).
#[test]
fn a_long_tmpdir_still_gets_tables_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile(dir.path());
    let tmp = dir.path().join("t".repeat(110));
    std::fs::create_dir(&tmp).unwrap();
    let lines = folded_in(
        dir.path(),
        &[
            "sh".as_ref(),
            "-c".as_ref(),
            "\"$0\"; true".as_ref(),
            exe.as_os_str(),
        ],
        Some(&tmp),
    );
    told_apart(&lines, "main");
}

#[test]
fn a_library_loaded_with_dlopen_is_walked_with_a_table_built_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libunwind_user.so");
    cc(
        &data("unwind.c"),
        &lib,
        &["-shared", "-fPIC", "-Dmain=unwind_main"],
    );
    let loader = dir.path().join("unwind_dlopen");
    cc(&data("unwind_dlopen.c"), &loader, &[]);
    let lines = folded_of(dir.path(), &[loader.as_os_str(), lib.as_os_str()]);
    told_apart(&lines, "main;unwind_main");
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
