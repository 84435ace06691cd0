//! `profdev mprof`'s whole stacks: `--folded`, `--folded-type inuse` and
//! `--pprof` of a program whose `build()` and `other()` call one
//! `leaf_alloc()` (tests/data/mprof/stacks.c), at -O0 and -O2 with frame
//! pointers: the two callers are told apart, with exact bytes, in one
//! thread or four at once.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn compile(opt: &str, dir: &Path) -> PathBuf {
    build("stacks", &[opt, "-fno-omit-frame-pointer", "-pthread"], dir)
}

/// tests/data/mprof/NAME.c built with `-g` and `flags` into dir (the
/// program's name: NAME and its flags).
fn build(name: &str, flags: &[&str], dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/mprof/{name}.c"));
    let exe = dir.join(format!("{name}{}", flags.concat()));
    let status = Command::new("cc")
        .arg("-g")
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cannot run cc");
    assert!(status.success(), "cc failed on {name}.c");
    exe
}

/// mprof with `args`, then CMD; the tables go to standard output.
fn mprof(args: &[&str], files: &[&Path], cmd: &[&std::ffi::OsStr]) {
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-"])
        .args(args)
        .args(files)
        .args(cmd)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mprof failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The folded file's lines.
fn folded(dir: &Path, exe: &Path, arg: &str, inuse: bool) -> Vec<String> {
    let file = dir.join("stacks.folded");
    let kind: &[&str] = if inuse {
        &["--folded-type", "inuse"]
    } else {
        &[]
    };
    let mut args = kind.to_vec();
    args.push("--folded");
    mprof(&args, &[&file], &[exe.as_os_str(), arg.as_ref()]);
    let text = std::fs::read_to_string(&file).unwrap();
    text.lines().map(String::from).collect()
}

#[test]
fn folded_tells_the_two_callers_apart() {
    let dir = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let exe = compile(opt, dir.path());
        let lines = folded(dir.path(), &exe, "", false);
        // Exactly two stacks, whatever is above main.
        assert_eq!(lines.len(), 2, "{opt}: {lines:?}");
        assert_eq!(
            common::folded_ending(&lines, "main;build;leaf_alloc 409600").len(),
            1,
            "{opt}: {lines:?}"
        );
        assert_eq!(
            common::folded_ending(&lines, "main;other;leaf_alloc 50000").len(),
            1,
            "{opt}: {lines:?}"
        );
        // Bytes live at exit: other()'s, kept.
        let lines = folded(dir.path(), &exe, "keep", true);
        assert_eq!(lines.len(), 1, "{opt}: {lines:?}");
        assert_eq!(
            common::folded_ending(&lines, "main;other;leaf_alloc 50000").len(),
            1,
            "{opt}: {lines:?}"
        );
        // Everything freed: nothing in use.
        assert!(folded(dir.path(), &exe, "", true).is_empty());
    }
}

/// A process killed by SIGKILL leaves no report: its stacks are read
/// from its shared table.
#[test]
fn stacks_of_a_killed_process_come_from_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("-O2", dir.path());
    let lines = killed_folded(dir.path(), &exe, "kill", "inuse");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        common::folded_ending(&lines, "main;other;leaf_alloc 50000").len(),
        1,
        "{lines:?}"
    );
}

/// The folded file's lines (`--folded-type kind`) of `exe arg`, which ends
/// by SIGKILL.
fn killed_folded(dir: &Path, exe: &Path, arg: &str, kind: &str) -> Vec<String> {
    let file = dir.join("killed.folded");
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "--folded-type", kind, "--folded"])
        .arg(&file)
        .arg(exe)
        .arg(arg)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(137),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    text.lines().map(String::from).collect()
}

/// The lines of `lines` ending in `suffix`, their bytes added up.
fn sum_ending(lines: &[String], suffix: &str) -> u64 {
    lines
        .iter()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(k, _)| k.ends_with(suffix))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum()
}

/// Four threads at once, then SIGKILL: the threads' counts of each stack
/// (kept in their lanes, c/mprof.c's "lanes") are read from the shared
/// table with the stack's own.
#[test]
fn threads_stacks_of_a_killed_process_come_from_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("-O2", dir.path());
    for (kind, build, other) in [
        ("alloc", 4 * 409600u64, 4 * 50000u64),
        ("inuse", 0, 4 * 50000),
    ] {
        let lines = killed_folded(dir.path(), &exe, "threads-kill", kind);
        assert_eq!(
            sum_ending(&lines, "thread_body;build;leaf_alloc"),
            build,
            "{kind}: {lines:?}"
        );
        assert_eq!(
            sum_ending(&lines, "thread_body;other;leaf_alloc"),
            other,
            "{kind}: {lines:?}"
        );
    }
}

/// Four threads at once: each stack's bytes exactly four times one
/// thread's (what lies above thread_body may differ between threads: the
/// lines ending the same are added up).
#[test]
fn threads_keep_exact_totals_per_stack() {
    let dir = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let exe = compile(opt, dir.path());
        let lines = folded(dir.path(), &exe, "threads", false);
        for (suffix, total) in [
            ("thread_body;build;leaf_alloc", 4 * 409600u64),
            ("thread_body;other;leaf_alloc", 4 * 50000),
        ] {
            assert_eq!(
                sum_ending(&lines, suffix),
                total,
                "{opt} {suffix}: {lines:?}"
            );
        }
        assert!(folded(dir.path(), &exe, "threads", true)
            .iter()
            .all(|l| !l.contains("leaf_alloc")));
    }
}

/// `go tool pprof -traces` of `--pprof` shows both stacks, with their
/// bytes under `-sample_index=alloc_space`.
#[test]
fn pprof_traces_show_both_stacks() {
    if !profdev_testkit::tools("mprof's pprof stacks", &["go"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = compile("-O2", dir.path());
    let file = dir.path().join("heap.pb");
    mprof(&["--pprof"], &[&file], &[exe.as_os_str()]);
    let o = Command::new("go")
        .args(["tool", "pprof", "-traces", "-sample_index=alloc_space"])
        .arg(&file)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Each trace: its value and its frames, the site first.
    let traces: Vec<Vec<&str>> = out
        .split("-----------+")
        .map(|t| {
            t.lines()
                .skip(1)
                .map(|l| l.split_whitespace().last().unwrap_or(""))
                .collect()
        })
        .collect();
    let values: Vec<&str> = out
        .split("-----------+")
        .map(|t| {
            t.lines()
                .nth(1)
                .and_then(|l| l.split_whitespace().next())
                .unwrap_or("")
        })
        .collect();
    for (caller, value) in [("build", "400kB"), ("other", "48.83kB")] {
        let i = traces
            .iter()
            .position(|t| t.starts_with(&["leaf_alloc", caller, "main"]))
            .unwrap_or_else(|| panic!("no trace through {caller}: {out}"));
        assert_eq!(values[i], value, "{out}");
    }
    // --no-stacks: today's one frame per site.
    mprof(&["--no-stacks", "--pprof"], &[&file], &[exe.as_os_str()]);
    let o = Command::new("go")
        .args(["tool", "pprof", "-traces"])
        .arg(&file)
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("leaf_alloc") && !out.contains("build"),
        "{out}"
    );
}

/// The memo of stacks (issue 29: a stack met before costs a compare of
/// the words its walk read) stays exact: memo.c's one line is reached by
/// two stacks with the same site, stack pointer and frame pointer, told
/// apart only two frames up, alternately; each keeps its own bytes, with
/// the frame-pointer walk and with unwind tables (no frame pointers).
/// The same holds for a thread's last walk (`c/unwind.c`): each walk
/// reaches the other's `mid` frame at the same stack pointer, and must
/// find the word above it changed (without that check, one line of
/// 310,000 bytes).
#[test]
fn stacks_alike_near_the_site_keep_their_own_bytes() {
    let dir = tempfile::tempdir().unwrap();
    for flags in [
        &["-O0", "-fno-omit-frame-pointer"][..],
        &["-O2", "-fno-omit-frame-pointer"],
        &["-O2", "-fomit-frame-pointer"],
    ] {
        let exe = build("memo", flags, dir.path());
        let file = dir.path().join("memo.folded");
        mprof(&["--folded"], &[&file], &[exe.as_os_str()]);
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<String> = text.lines().map(String::from).collect();
        assert_eq!(lines.len(), 2, "{flags:?}: {lines:?}");
        for want in [
            "main;outer_a;mid;leaf 300000",
            "main;outer_b;mid;leaf 10000",
        ] {
            assert_eq!(
                common::folded_ending(&lines, want).len(),
                1,
                "{flags:?}: {want}: {lines:?}"
            );
        }
    }
}

/// A forked child's stacks are in a table of its own: the same stack
/// met by the parent, then by the child, is charged in each process's
/// table and the two add up (3 x 1,000 before the fork, 5 x 700 after).
/// With the forking thread's memo kept in the child (tried), the child's
/// bytes went to a slot of the parent's table and were lost.
#[test]
fn a_forked_child_charges_its_own_stacks() {
    let dir = tempfile::tempdir().unwrap();
    for opt in ["-O0", "-O2"] {
        let exe = build("stacks_fork", &[opt, "-fno-omit-frame-pointer"], dir.path());
        let lines = folded(dir.path(), &exe, "", false);
        assert_eq!(
            common::folded_ending(&lines, "main;work;leaf_alloc 6500").len(),
            1,
            "{opt}: {lines:?}"
        );
        assert_eq!(sum_ending(&lines, ";leaf_alloc"), 6500, "{opt}: {lines:?}");
    }
}
