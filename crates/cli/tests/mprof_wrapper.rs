//! `profdev mprof` charges an allocation made through an allocator wrapper
//! (xmalloc, on the wrapper list) to the wrapper's caller, in a program CMD
//! execs too (cc's cc1 is one: no unwind tables are built for it before
//! the run). tests/data/mprof/xwrap.c's `build()` and `other()` each call
//! `xmalloc`; built with frame pointers (-O0) and without (-O2
//! -fomit-frame-pointer), run by `sh -c`, in the default mode (stacks on)
//! and with `--no-stacks`, each caller's line gets exactly its bytes and
//! xmalloc's own line none. This pins the answer the resolution of
//! wrapper sites (mprof.c's `resolve_site`) must keep when made cheaper.

mod common;

use std::path::Path;
use std::process::Command;

/// The line of xwrap.c holding `marker`.
fn line_of(marker: &str) -> usize {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mprof/xwrap.c");
    let text = std::fs::read_to_string(src).unwrap();
    1 + text
        .lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("no {marker} in xwrap.c"))
}

/// `line live total` of each row of module xwrap's section when EXE runs
/// as a child of `sh -c` under `mprof ARGS`.
fn rows(exe: &Path, args: &[&str]) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "-l", "-m", "xwrap"])
        .args(args)
        .args(["sh", "-c"])
        .arg(format!("{}; exit 0", exe.display()))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "mprof failed: {}{out}",
        String::from_utf8_lossy(&o.stderr)
    );
    let start = out
        .find("\nModule: xwrap(")
        .unwrap_or_else(|| panic!("no module xwrap in:\n{out}"));
    out[start..]
        .lines()
        .skip(3)
        .take_while(|l| !l.is_empty())
        .map(|r| r.split('\t').take(3).collect::<Vec<_>>().join(" "))
        .collect()
}

fn check(flags: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("xwrap");
    common::cc_mprof_fixture("xwrap.c", flags, &exe);
    let want = [
        format!("{} 0 409600", line_of("build's site")),
        format!("{} 0 50000", line_of("other's site")),
    ];
    for mode in [&[][..], &["--no-stacks"][..]] {
        assert_eq!(rows(&exe, mode), want, "cc {flags:?}, mprof {mode:?}");
    }
}

#[test]
fn a_wrapper_with_a_frame_pointer_in_an_execd_program_charges_its_callers() {
    check(&["-g", "-O0"]);
}

#[test]
fn a_wrapper_without_a_frame_pointer_in_an_execd_program_charges_its_callers() {
    check(&["-g", "-O2", "-fomit-frame-pointer"]);
}
