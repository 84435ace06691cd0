//! End to end: `profdev gmon --exact` counts calls, with the real GNU
//! gprof as the oracle. tests/fixtures/callcount.c makes known numbers of
//! calls (main -> a 1000, a -> b 3000, a -> t 1000, t -> u 1000 by a
//! tail-call jump, b -> c 7 through a function pointer); gprof's "called"
//! column must show exactly those numbers, and the histogram must stay
//! sampled (tests/fixtures/hotcall.c: its hot function first in the flat
//! profile although it runs in the trampolines that count).
//! tests/fixtures/indirect.c calls through pointers only (a table of two
//! functions from two threads, a tail call through a pointer in a forked
//! child, libc's `abs` through a pointer, a call through a pointer made
//! on one side of a branch): each target with its exact count.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(dir: &Path, src: &str, args: &[&str], out: &str) -> PathBuf {
    let exe = dir.join(out);
    let o = Command::new("gcc")
        .args(args)
        .arg("-o")
        .arg(&exe)
        .arg(fixture(src))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    exe
}

/// `profdev gmon --exact EXTRA -- EXE ARGS`, then `gprof -b EXE gmon.out`:
/// gprof's report and profdev's stderr.
fn profile(dir: &Path, exe: &Path, extra: &[&str], args: &[&str]) -> (String, String) {
    let out_file = dir.join("gmon.out");
    let o = run(profdev()
        .current_dir(dir)
        .arg("gmon")
        .arg("--exact")
        .args(extra)
        .arg("--")
        .arg(exe)
        .args(args));
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "profdev gmon --exact: {stderr}");
    let g = Command::new("gprof")
        .arg("-b")
        .arg(exe)
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(
        g.status.success(),
        "gprof: {}",
        String::from_utf8_lossy(&g.stderr)
    );
    (String::from_utf8_lossy(&g.stdout).into_owned(), stderr)
}

/// The call graph's entry of `name`: its callers' lines (`n/total
/// caller`), then its primary line's "called" column.
fn entry<'a>(report: &'a str, name: &str) -> Option<(Vec<&'a str>, &'a str)> {
    let graph = report.split("Call graph").nth(1)?;
    graph
        .split("-----------------------------------------------")
        .find_map(|e| {
            let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
            let p = lines.iter().position(|l| l.starts_with('['))?;
            if !lines[p].contains(&format!(" {name} [")) {
                return None;
            }
            // [2]      0.0    0.00    0.00    1000         a [2]
            let called = lines[p].split_whitespace().nth(4)?;
            // (The first entry also holds the graph's heading.)
            let callers = lines[..p]
                .iter()
                .copied()
                .filter(|l| l.contains('/') && l.trim_end().ends_with(']'))
                .collect();
            Some((callers, called))
        })
}

/// `name` is called exactly `n` times, all from `caller`.
fn assert_called(report: &str, name: &str, n: u64, caller: &str) {
    let (callers, called) =
        entry(report, name).unwrap_or_else(|| panic!("no entry for {name}: {report}"));
    assert_eq!(called, n.to_string(), "{name}'s called column: {report}");
    assert_eq!(callers.len(), 1, "{name}'s callers: {report}");
    let f: Vec<&str> = callers[0].split_whitespace().collect();
    assert_eq!(
        &f[f.len() - 3..f.len() - 1],
        &[format!("{n}/{n}").as_str(), caller],
        "{name}'s caller line: {report}"
    );
}

fn check_counts(report: &str, stderr: &str) {
    assert_called(report, "a", 1000, "main");
    assert_called(report, "b", 3000, "a");
    assert_called(report, "t", 1000, "a");
    // A tail call: `jmp u` at t's end.
    assert_called(report, "u", 1000, "t");
    // b's `call *%rax` to c: its target recorded at run time.
    assert_called(report, "c", 7, "b");
    assert!(!stderr.contains("not attributed"), "{stderr}");
    assert!(
        stderr.contains("gprof's \"called\" column shows exact numbers of calls"),
        "{stderr}"
    );
    assert!(!stderr.contains("not numbers of calls"), "{stderr}");
}

#[test]
fn called_column_holds_exact_call_counts() {
    if !ready("profdev gmon --exact", &["gcc", "gprof"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "callcount.c", &["-O2"], "callcount");
    let (report, stderr) = profile(d.path(), &exe, &[], &[]);
    check_counts(&report, &stderr);
    // The 4.4BSD layout holds the same arcs.
    let (report, stderr) = profile(d.path(), &exe, &["--format", "bsd"], &[]);
    check_counts(&report, &stderr);
    // Library calls through the GOT (-fno-plt) leave the executable: not
    // arcs, counted in a note; the executable's own calls are unchanged.
    let exe = build(
        d.path(),
        "callcount.c",
        &["-O2", "-fPIC", "-fno-plt"],
        "callcount_noplt",
    );
    let (report, stderr) = profile(d.path(), &exe, &[], &[]);
    check_counts(&report, &stderr);
    assert!(
        stderr.contains(
            "calls into shared libraries (through the PLT, the GOT or a pointer) not written"
        ),
        "{stderr}"
    );
}

#[test]
fn recording_a_call_target_keeps_the_flags() {
    if !ready("profdev gmon --exact flags", &["gcc", "gprof"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "callflags.c", &["-O2"], "callflags");
    // (profile() asserts success: the program exits 1 on a changed flag.)
    let (report, _) = profile(d.path(), &exe, &[], &[]);
    assert_called(&report, "flags_of", 4, "main");
}

/// The number in profdev's note on calls into shared libraries.
fn library_calls(stderr: &str) -> u64 {
    stderr
        .lines()
        .filter(|l| l.contains(" calls into shared libraries "))
        .find_map(|l| {
            l.strip_prefix("profdev gmon: ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no note on library calls: {stderr}"))
}

#[test]
fn indirect_calls_are_counted_per_target() {
    if !ready("profdev gmon --exact indirect calls", &["gcc", "gprof"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "indirect.c", &["-O2", "-pthread"], "indirect");
    let (report, stderr) = profile(d.path(), &exe, &[], &["45"]);
    // Two threads, each 1234 + 567 calls through the table.
    assert_called(&report, "f0", 2468, "dispatch");
    assert_called(&report, "f1", 1134, "dispatch");
    // `jmp *%rax` to tt, 89 times, in the forked child alone (what the
    // parent ran before the fork is not counted again).
    assert_called(&report, "tail", 89, "main");
    assert_called(&report, "tt", 89, "tail");
    // `je` over a lone `call *%rax`: 500 of maybe's 1000 calls.
    assert_called(&report, "h", 500, "maybe");
    assert!(!stderr.contains("not attributed"), "{stderr}");
    // abs through a pointer leaves the executable: each call is one more
    // call into a shared library.
    let at_45 = library_calls(&stderr);
    let (_, stderr) = profile(d.path(), &exe, &[], &["100"]);
    assert_eq!(library_calls(&stderr), at_45 + 55, "{stderr}");
}

#[test]
fn a_static_executable_is_one_sentence() {
    if !ready("profdev gmon --exact on a static program", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "callcount.c", &["-O2", "-static"], "static");
    let o = run(profdev()
        .current_dir(d.path())
        .args(["gmon", "--exact", "--"])
        .arg(&exe));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "profdev gmon: --exact counts calls by rewriting the executable through the dynamic \
             loader, and {} is statically linked: run profdev gmon without --exact for sampled \
             call counts",
            exe.display()
        )
    );
    assert!(!d.path().join("gmon.out").exists());
}

#[test]
fn histogram_stays_sampled() {
    if !ready("profdev gmon --exact histogram", &["gcc", "gprof"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "hotcall.c", &["-O2"], "hot");
    let (report, stderr) = profile(d.path(), &exe, &[], &["1500"]);
    assert_called(&report, "hot_spin", 1500, "caller_loop");
    // hot_spin runs in its trampoline; its samples are still its own.
    let mut flat = report
        .lines()
        .skip_while(|l| !l.starts_with(" time   seconds"));
    let first = flat.nth(1).and_then(|l| l.split_whitespace().last());
    assert_eq!(first, Some("hot_spin"), "{report}\n{stderr}");
    assert!(stderr.contains("charged to the code they copy"), "{stderr}");
}
