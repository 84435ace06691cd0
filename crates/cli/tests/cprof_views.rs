//! cprof's views on real counts of a real program.
//!
//! `tests/cprof/known.c` is built with `cc -O0 -g -no-pie` and run under
//! ptrace one instruction at a time: every instruction of its `.text`
//! (listed by `objdump -d`) gets the number of times the processor stopped
//! there, and every conditional jump whether the next stop was its target
//! or the instruction after it. Those exact counts, independent of profdev's
//! engine, fill a `ModuleCoverage` (one block per instruction), which is
//! recorded as `known.prf`; `profdev cprof -m known` then shows it, and its
//! marks, counts, lcov lines and genhtml's acceptance are checked against
//! what the program does: `called` runs 10 times, the branch of the
//! `MARK:branch` line is taken by 2 of the 10 iterations (the other 8 jump
//! over `k++`), `never_called` never runs, the `MARK:partly` line runs its
//! test and not its call.

#[path = "cprof/stepper.rs"]
mod stepper;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use stepper::measure;

fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cprof/known.c")
}

/// The 1-based line holding `MARK:name` in known.c.
fn line_of(mark: &str) -> u32 {
    let text = std::fs::read_to_string(source()).unwrap();
    let at = text
        .lines()
        .position(|l| l.contains(&format!("MARK:{mark} ")))
        .unwrap_or_else(|| panic!("no MARK:{mark} in known.c"));
    at as u32 + 1
}

/// Build known.c into `dir`.
fn build(dir: &Path, extra: &[&str]) -> PathBuf {
    let exe = dir.join("known");
    let st = Command::new("cc")
        .args(["-O0", "-g", "-no-pie", "-o"])
        .arg(&exe)
        .arg(source())
        .args(extra)
        .status()
        .expect("cc runs");
    assert!(st.success(), "cc failed");
    exe
}

fn profdev(dir: &Path, args: &[&str]) -> (String, String, bool) {
    let out = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["cprof", "-o", "-"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("profdev runs");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

/// The row of `line` in a listing: (mark, text).
fn row(listing: &str, line: u32) -> String {
    listing
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, '\t');
            (f.next()? == line.to_string()).then(|| f.next().unwrap_or("").to_string())
        })
        .unwrap_or_else(|| panic!("no line {line} in\n{listing}"))
}

fn tools_ok() -> bool {
    profdev_testkit::tools("cprof views", &["cc", "objdump", "genhtml"])
}

#[test]
fn marks_counts_lcov_and_genhtml_on_exact_counts() {
    if !tools_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), &[]);
    let m = measure(&exe);
    let called = profdev_symbolize::ElfObject::open(&exe)
        .unwrap()
        .symbols()
        .iter()
        .find(|s| s.name() == "called")
        .unwrap()
        .addr;
    let entry = m.blocks.iter().find(|b| b.start == called).unwrap();
    assert_eq!(
        entry.count, 10,
        "the stepper sees called() entered 10 times"
    );
    profdev_coverage::prf::record(dir.path(), &m).unwrap();

    let (marks, err, ok) = profdev(dir.path(), &["-m", "known"]);
    assert!(ok, "{err}");
    assert!(err.is_empty(), "no note expected: {err}");
    assert_eq!(row(&marks, line_of("never")), "-");
    assert_eq!(row(&marks, line_of("branch")), "+");
    assert_eq!(row(&marks, line_of("partly")), "+|-");
    assert_eq!(row(&marks, line_of("for")), "+");
    assert_eq!(row(&marks, 3), " ", "a declaration has no code");
    assert!(marks.starts_with(&format!("\nModule: known({})\t", exe.display())));
    assert!(marks.contains("% coverage\n\n"));

    let (prefixed, _, ok) = profdev(dir.path(), &["-n", "-m", "known"]);
    assert!(ok);
    let for_line = format!("{}:{}\t+\t", source().display(), line_of("for"));
    assert!(
        prefixed.lines().any(|l| l.starts_with(&for_line)),
        "{prefixed}"
    );

    let (counts, err, ok) = profdev(dir.path(), &["-f", "-m", "known"]);
    assert!(ok, "{err}");
    assert_eq!(
        row(&counts, line_of("for")),
        "1|11|10",
        "init, test, increment"
    );
    assert_eq!(row(&counts, line_of("branch")), "10");
    assert_eq!(
        row(&counts, line_of("branch") + 1),
        "2",
        "k++ runs for i = 0 and 5"
    );
    assert_eq!(row(&counts, line_of("never")), "0");
    assert_eq!(row(&counts, line_of("partly")), "1|0");
    assert_eq!(row(&counts, line_of("called") + 2), "10", "called's body");
    let shown = |text: &str| text.replace(&dir.path().display().to_string(), "$DIR");
    // The marks and counts listing, whole (instruction totals depend on gcc 12's code).
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cprof");
    profdev_testkit::golden(&golden.join("known.f.golden"), shown(&counts).as_bytes());

    let (_, err, ok) = profdev(
        dir.path(),
        &[
            "-m",
            "known",
            "--lcov",
            "known.info",
            "--cobertura",
            "known.xml",
        ],
    );
    assert!(ok, "{err}");
    let info = std::fs::read_to_string(dir.path().join("known.info")).unwrap();
    assert!(
        info.contains(&format!("SF:{}\n", source().display())),
        "{info}"
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).display().to_string();
    profdev_testkit::golden(
        &golden.join("known.info.golden"),
        info.replace(&repo, "$CLI").as_bytes(),
    );
    assert!(info.contains("FNDA:10,called\n"), "{info}");
    assert!(info.contains("FNDA:0,never_called\n"), "{info}");
    assert!(info.contains("FNDA:1,main\n"), "{info}");
    assert!(info.contains(&format!("DA:{},0\n", line_of("never"))));
    assert!(info.contains(&format!("DA:{},11\n", line_of("for"))));
    assert!(info.contains(&format!("DA:{},2\n", line_of("branch") + 1)));
    let b = line_of("branch");
    let brda: Vec<&str> = info
        .lines()
        .filter(|l| l.starts_with(&format!("BRDA:{b},")))
        .collect();
    assert_eq!(
        brda,
        [format!("BRDA:{b},0,0,8"), format!("BRDA:{b},0,1,2")],
        "jne over k++: taken 8 times, fallen through 2"
    );
    let f = line_of("for");
    assert!(
        info.contains(&format!("BRDA:{f},0,0,10\nBRDA:{f},0,1,1\n")),
        "{info}"
    );
    let p = line_of("partly");
    assert!(
        info.contains(&format!("BRDA:{p},0,0,1\nBRDA:{p},0,1,0\n")),
        "{info}"
    );
    let xml = std::fs::read_to_string(dir.path().join("known.xml")).unwrap();
    assert!(xml.contains(&format!(
        "<line number=\"{b}\" hits=\"10\" branch=\"true\" condition-coverage=\"100% (2/2)\"/>"
    )));

    profdev_testkit::genhtml_renders(&dir.path().join("known.info"), &dir.path().join("html"));
}

#[test]
fn records_add_up_and_another_build_is_refused() {
    if !tools_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), &[]);
    let m = measure(&exe);
    profdev_coverage::prf::record(dir.path(), &m).unwrap();
    profdev_coverage::prf::record(dir.path(), &m).unwrap();
    let (_, err, ok) = profdev(dir.path(), &["-m", "known", "--lcov", "two.info"]);
    assert!(ok, "{err}");
    let info = std::fs::read_to_string(dir.path().join("two.info")).unwrap();
    assert!(info.contains("FNDA:20,called\n"), "two runs: {info}");
    let b = line_of("branch");
    assert!(info.contains(&format!("BRDA:{b},0,0,16\nBRDA:{b},0,1,4\n")));

    // Rebuilt with another build id: the records no longer place.
    build(dir.path(), &["-Wl,--build-id=0x0123"]);
    let (out, err, ok) = profdev(dir.path(), &["-m", "known"]);
    assert!(!ok && out.is_empty());
    assert!(err.starts_with("cprof: known.prf records build "), "{err}");
    assert!(err.contains("is now build 0123"), "{err}");
    // And a run of the new build is not merged into the old records.
    let again = measure(&exe);
    let e = profdev_coverage::prf::record(dir.path(), &again).unwrap_err();
    assert!(e.to_string().contains("another build"), "{e}");
}

#[test]
fn sources_not_found_are_said_and_left_out_of_the_exports() {
    if !tools_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Compiled from a copy that is then removed.
    let copy = dir.path().join("gone.c");
    std::fs::copy(source(), &copy).unwrap();
    let exe = dir.path().join("known");
    assert!(Command::new("cc")
        .args(["-O0", "-g", "-no-pie", "-o"])
        .arg(&exe)
        .arg(&copy)
        .status()
        .unwrap()
        .success());
    std::fs::remove_file(&copy).unwrap();
    let m = measure(&exe);
    profdev_coverage::prf::record(dir.path(), &m).unwrap();
    let (out, err, ok) = profdev(dir.path(), &["-a", "-m", "known", "--lcov", "x.info"]);
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!(
            "cprof: source file {} not found: line numbers only",
            copy.display()
        )),
        "{err}"
    );
    assert!(err.contains("left out of the exports"), "{err}");
    assert_eq!(row(&out, line_of("never")), "-", "marks without text");
    let info = std::fs::read_to_string(dir.path().join("x.info")).unwrap();
    assert!(!info.contains("gone.c"), "{info}");
}

/// `profdev cprof CMD` (the engine, launch mode) counts exactly what the
/// stepper counts: every instruction of known's `.text` and every
/// conditional jump's outcomes, from `_start` on; the listing agrees
/// with the stepper's on every line.
#[test]
fn a_launch_counts_what_the_stepper_counts() {
    if !tools_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = build(dir.path(), &[]);
    let oracle = measure(&exe);

    let run = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["cprof", "-f", "-r", "--lcov", "launch.info", "-e"])
        .arg(&exe)
        .current_dir(dir.path())
        .output()
        .expect("profdev runs");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(!err.contains("could not be counted"), "{err}");
    let got = profdev_coverage::prf::read(&dir.path().join("known.prf"))
        .unwrap()
        .expect("cprof -r wrote known.prf");
    let engine: HashMap<u64, u64> = got.insns.iter().copied().collect();
    let mut compared = 0;
    for (addr, want) in profdev_coverage::lines::instruction_counts(&oracle) {
        // The engine plans the functions of .text; the stepper also sees
        // padding between them, which never runs.
        let Some(&n) = engine.get(&addr) else {
            assert_eq!(
                want, 0,
                "instruction {addr:#x} ran but is not planned; cprof said: {err}"
            );
            continue;
        };
        assert_eq!(n, want, "instruction {addr:#x}; cprof said: {err}");
        compared += 1;
    }
    let ran = profdev_coverage::lines::instruction_counts(&oracle)
        .iter()
        .filter(|p| p.1 > 0)
        .count();
    assert!(
        ran > 50 && compared >= ran,
        "{compared} instructions compared, {ran} ran"
    );
    let branches: HashMap<u64, (u64, u64)> = got
        .branches
        .iter()
        .map(|b| (b.addr, (b.taken, b.not_taken)))
        .collect();
    for b in &oracle.branches {
        assert_eq!(
            branches.get(&b.addr).copied(),
            Some((b.taken, b.not_taken)),
            "conditional jump at {:#x}; cprof said: {err}",
            b.addr
        );
    }
    // Among them, jumps whose fall-through is read from the block after
    // them (no count of its own), and ones that fell through: the
    // stepper's counts cover the derivation.
    let plan = profdev_coverage::plan::Plan::of_file(&exe).unwrap();
    let derived: Vec<u64> = plan
        .branches
        .iter()
        .zip(&plan.fell_from)
        .filter(|(_, f)| f.is_some())
        .map(|(b, _)| b.0)
        .collect();
    assert!(
        oracle
            .branches
            .iter()
            .any(|b| b.not_taken > 0 && derived.contains(&b.addr)),
        "no derived fall-through ran: {derived:x?}"
    );
    // The lcov file of the launch is the one the stepper's counts give
    // (the golden of marks_counts_lcov_and_genhtml_on_exact_counts).
    let info = std::fs::read_to_string(dir.path().join("launch.info")).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).display().to_string();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cprof/known.info.golden");
    assert_eq!(
        info.replace(&repo, "$CLI"),
        std::fs::read_to_string(golden).unwrap(),
        "lcov of the launch"
    );
}

/// A Rust release binary with debug info (`rustc -O -g`), counted by
/// `profdev cprof -f CMD`: `sometimes` runs 1000 times, its `if` is true
/// for 250 of them, so `called` runs 250 times; main once.
#[test]
fn a_rust_release_binary_counts_exactly() {
    if !profdev_testkit::tools("cprof on a Rust release binary", &["rustc"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("calls.rs");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cprof/calls.rs"),
        &src,
    )
    .unwrap();
    let exe = dir.path().join("calls");
    let o = Command::new("rustc")
        .args(["-O", "-g", "-C", "panic=abort", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "rustc: {o:?}");
    let (listing, err, ok) = profdev(dir.path(), &["-f", "-e", exe.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(listing.contains("748750"), "the program's own output");
    // The listing of calls.rs alone (the module also has std's files).
    let header = format!("{}:\n", src.display());
    let at = listing
        .find(&header)
        .unwrap_or_else(|| panic!("no {header:?} in\n{listing}"));
    let mine = &listing[at + header.len()..];
    let mine = &mine[..mine.find("\n\n").unwrap_or(mine.len())];
    for (line, want) in [
        (3, "250"),
        (7, "1000"),
        (8, "1000"),
        (9, "250"),
        (15, "1"),
        (18, "1000"),
    ] {
        assert_eq!(row(mine, line), want, "line {line} of calls.rs in\n{mine}");
    }
}
