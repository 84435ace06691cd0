//! End to end: `profdev gmon` on real programs, with the real GNU gprof as
//! the oracle. tests/fixtures/hotcall.c is built with gcc -O2 (no -pg) with
//! and without frame pointers, tests/fixtures/hotcall.rs with rustc -O; in
//! each, `hot_spin` must come first in gprof's flat profile and the arc
//! `caller_loop -> hot_spin` must be in its call graph.

mod common;
mod prof_fixture;
use common::*;
use profdev_formats::gmon;
use std::path::Path;
use std::process::Command;

fn build(dir: &Path, compiler: &str, args: &[&str], src: &str, out: &str) -> std::path::PathBuf {
    let exe = dir.join(out);
    let o = Command::new(compiler)
        .args(args)
        .arg("-o")
        .arg(&exe)
        .arg(fixture(src))
        .output()
        .unwrap();
    assert!(o.status.success(), "{compiler}: {o:?}");
    exe
}

/// Run `profdev gmon` on `exe` and then `gprof -b exe gmon.out`; returns
/// gprof's output and profdev's stderr.
fn profile(dir: &Path, exe: &Path, extra: &[&str], rounds: &str) -> (String, String) {
    let out_file = dir.join(format!(
        "{}.gmon",
        exe.file_name().unwrap().to_string_lossy()
    ));
    let o = run(profdev()
        .arg("gmon")
        .args(extra)
        .arg("-o")
        .arg(&out_file)
        .arg("--")
        .arg(exe)
        .arg(rounds));
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "profdev gmon: {stderr}");
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(
        printed == "0\n" || printed == "1\n",
        "the program's own output: {printed:?}"
    );
    // Our own parser reads what we wrote, over the executable's text.
    let bytes = std::fs::read(&out_file).unwrap();
    let d = gmon::parse(&bytes, gmon::Target::X86_64).unwrap();
    let h = &d.gmon.histograms[0];
    assert!(h.low_pc < h.high_pc && h.prof_rate == 1000, "{h:?}");
    let g = Command::new("gprof")
        .arg("-b")
        .arg(exe)
        .arg(&out_file)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&g.stdout).into_owned();
    assert!(
        g.status.success(),
        "gprof: {}",
        String::from_utf8_lossy(&g.stderr)
    );
    (report, stderr)
}

/// The first function of the flat profile.
fn first_in_flat_profile(report: &str) -> &str {
    let mut lines = report.lines();
    lines.find(|l| l.starts_with(" time   seconds"));
    lines
        .next()
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or("")
}

/// Does the call graph list `caller` as a parent of `callee`?
fn has_arc(report: &str, caller: &str, callee: &str) -> bool {
    let graph = report.split("Call graph").nth(1).unwrap_or("");
    graph
        .split("-----------------------------------------------")
        .any(|entry| {
            let lines: Vec<&str> = entry.lines().filter(|l| !l.trim().is_empty()).collect();
            let Some(primary) = lines.iter().position(|l| l.starts_with('[')) else {
                return false;
            };
            lines[primary].contains(&format!(" {callee} ["))
                && lines[..primary]
                    .iter()
                    .any(|l| l.contains(&format!(" {caller} [")))
        })
}

fn check(report: &str, stderr: &str) {
    assert_eq!(first_in_flat_profile(report), "hot_spin", "{report}");
    assert!(has_arc(report, "caller_loop", "hot_spin"), "{report}");
    // The honesty note, after writing.
    assert!(
        stderr.contains("not numbers of calls"),
        "no note about counts on stderr: {stderr}"
    );
}

#[test]
fn c_without_frame_pointers() {
    if !ready(
        "profdev gmon on C -O2 -fomit-frame-pointer",
        &["gcc", "gprof"],
    ) {
        return;
    }
    let d = tempdir();
    let exe = build(
        d.path(),
        "gcc",
        &["-O2", "-fomit-frame-pointer"],
        "hotcall.c",
        "hot_nofp",
    );
    let (report, stderr) = profile(d.path(), &exe, &[], "1500");
    check(&report, &stderr);
    // Frame pointers alone cannot find hot_spin's caller here.
    assert!(stderr.contains("unwound by CFI"), "{stderr}");
}

#[test]
fn c_with_frame_pointers() {
    if !ready(
        "profdev gmon on C -O2 -fno-omit-frame-pointer",
        &["gcc", "gprof"],
    ) {
        return;
    }
    let d = tempdir();
    let exe = build(
        d.path(),
        "gcc",
        &["-O2", "-fno-omit-frame-pointer"],
        "hotcall.c",
        "hot_fp",
    );
    let (report, stderr) = profile(d.path(), &exe, &[], "1500");
    check(&report, &stderr);
    // (The kernel's frame-pointer chain alone, --stack-bytes 0, would not
    // do even here: gcc omits the frame of a leaf like hot_spin, so the walk
    // skips caller_loop and credits main.) The 4.4BSD layout reads the same.
    let (report, stderr) = profile(d.path(), &exe, &["--format", "bsd"], "1500");
    check(&report, &stderr);
}

#[test]
fn rust_release_binary() {
    if !ready("profdev gmon on a Rust release binary", &["rustc", "gprof"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "rustc", &["-O"], "hotcall.rs", "hot_rs");
    let (report, stderr) = profile(d.path(), &exe, &[], "2500");
    check(&report, &stderr);
    // gprof shows hot_spin's caller for (at least) 99% of its samples: the
    // arcs into it, one per sample whose stack was unwound past it, against
    // its histogram samples.
    let bytes = std::fs::read(d.path().join("hot_rs.gmon")).unwrap();
    let g = gmon::parse(&bytes, gmon::Target::X86_64).unwrap().gmon;
    let elf = profdev_symbolize::ElfObject::open(&exe).unwrap();
    let hot = elf
        .symbols()
        .iter()
        .find(|s| s.mangled == "hot_spin")
        .expect("hot_spin's symbol");
    let h = &g.histograms[0];
    let cell = |pc: u64| ((pc - h.low_pc) / 4) as usize;
    let samples: u64 = h.bins[cell(hot.addr)..=cell(hot.addr + hot.size - 1)]
        .iter()
        .map(|&n| u64::from(n))
        .sum();
    let called = called(&report, "hot_spin").unwrap_or_else(|| panic!("{report}"));
    assert!(samples >= 300, "too few samples in hot_spin: {samples}");
    assert!(
        called * 100 >= samples * 99,
        "gprof shows callers for {called} of hot_spin's {samples} samples: {stderr}"
    );
}

/// The "called" column of `name`'s primary line in gprof's call graph.
fn called(report: &str, name: &str) -> Option<u64> {
    let graph = report.split("Call graph").nth(1)?;
    let line = graph
        .lines()
        .find(|l| l.starts_with('[') && l.contains(&format!(" {name} [")))?;
    // [1]    100.0    0.41    0.00     410         hot_spin [1]
    let f: Vec<&str> = line.split_whitespace().collect();
    f.get(4)?.split('+').next()?.parse().ok()
}

#[test]
fn errors_are_one_sentence() {
    let d = tempdir();
    // A script is not an ELF executable: refused before running.
    let script = d.path().join("job.sh");
    let marker = d.path().join("ran");
    let body = format!("#!/bin/sh\ntouch {}\n", marker.display());
    profdev_testkit::write_executable(&script, body.as_bytes(), 0o755);
    let o = run(profdev()
        .arg("gmon")
        .arg("-o")
        .arg(d.path().join("g.out"))
        .arg("--")
        .arg(&script));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!(
            "profdev gmon: {} is not an ELF executable\n",
            script.display()
        )
    );
    assert!(!marker.exists());

    // An output that cannot be written: refused before running CMD.
    let o = run(profdev()
        .args(["gmon", "-o", "/nonexistent/dir/gmon.out", "--"])
        .arg(env!("CARGO_BIN_EXE_profdev"))
        .arg("--version"));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "profdev gmon: cannot write /nonexistent/dir/gmon.out: No such file or directory (os error 2)\n"
    );
    assert!(o.stdout.is_empty(), "CMD must not have run");

    // No such command.
    let o = run(profdev().args(["gmon", "--", "/nonexistent/prog"]));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "profdev gmon: /nonexistent/prog: no such executable file\n"
    );
}

#[test]
fn help_says_what_called_counts_are() {
    let o = run(profdev().args(["gmon", "--help"]));
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("not numbers of calls"), "{help}");
}

/// Calls through the PLT (work.c of prof_fixture calls random_r through
/// `random_r@plt`) are calls into a shared library: no arc into `_init`,
/// or into anything but the program's own functions. Whether any sample
/// lands in the one-instruction stub (and so whether stderr counts arcs
/// into PLT stubs) depends on the machine and its load: that rule is tested
/// on synthetic stacks (`gmon::plt_arcs` in the binary's unit tests,
/// formats' tests/gmon_arcs.rs); here only what any run shows.
#[test]
fn plt_calls_make_no_arc_into_init() {
    if !ready("profdev gmon on PLT calls", &["cc", "gprof"]) {
        return;
    }
    let d = tempdir();
    let exe = prof_fixture::compile_work(d.path(), "work-gmon");
    let out_file = d.path().join("work.gmon");
    let o = run(profdev()
        .arg("gmon")
        .arg("-o")
        .arg(&out_file)
        .arg("--")
        .arg(&exe));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "profdev gmon: {stderr}");
    // If any, said in one line with its number.
    for l in stderr.lines().filter(|l| l.contains("arcs into PLT stubs")) {
        let n = l
            .strip_prefix("profdev gmon: ")
            .and_then(|l| l.split_once(' '))
            .and_then(|(n, _)| n.parse::<u64>().ok());
        assert!(n.is_some_and(|n| n > 0), "{stderr}");
    }
    let g = Command::new("gprof")
        .arg("-b")
        .arg(&exe)
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(g.status.success(), "{g:?}");
    let report = String::from_utf8_lossy(&g.stdout);
    assert!(!report.contains("_init"), "{report}");
    assert!(has_arc(&report, "main", "hot"), "{report}");
}

/// A stripped executable: gprof reads symbols only from the file on its
/// command line, so profdev writes `EXE.syms` beside gmon.out (functions
/// from .eh_frame, `sub_ADDR`) and prints the gprof command that reads it.
/// The names must be the unstripped binary's function addresses (nm).
#[test]
fn stripped_executable_gets_a_symbols_file() {
    if !ready(
        "profdev gmon on a stripped executable",
        &["gcc", "gprof", "strip", "nm"],
    ) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path(), "gcc", &["-O2"], "hotcall.c", "hot_full");
    let nm = Command::new("nm").arg(&exe).output().unwrap();
    let nm = String::from_utf8_lossy(&nm.stdout);
    let addr_of = |f: &str| {
        nm.lines()
            .find_map(|l| {
                let (a, rest) = l.split_once(' ')?;
                (rest.split_whitespace().nth(1)? == f)
                    .then(|| a.trim_start_matches('0').to_string())
            })
            .unwrap_or_else(|| panic!("{f} not in nm: {nm}"))
    };
    let (hot, caller) = (
        format!("sub_{}", addr_of("hot_spin")),
        format!("sub_{}", addr_of("caller_loop")),
    );
    let stripped = d.path().join("hot_stripped");
    let st = Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&exe)
        .status()
        .unwrap();
    assert!(st.success());
    let out_dir = d.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out_file = out_dir.join("gmon.out");
    let o = run(profdev()
        .arg("gmon")
        .arg("-o")
        .arg(&out_file)
        .arg("--")
        .arg(&stripped)
        .arg("1500"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "profdev gmon: {stderr}");
    let syms = out_dir.join("hot_stripped.syms");
    let want = format!(
        "read the profile with: gprof {} {}\n",
        syms.display(),
        out_file.display()
    );
    assert!(stderr.ends_with(&want), "{stderr}");
    // gprof on the executable itself has no symbols to use.
    let g = Command::new("gprof")
        .arg("-b")
        .arg(&stripped)
        .arg(&out_file)
        .output()
        .unwrap();
    assert!(
        !g.status.success() || !String::from_utf8_lossy(&g.stdout).contains(&hot),
        "{g:?}"
    );
    let g = Command::new("gprof")
        .arg("-b")
        .arg(&syms)
        .arg(&out_file)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&g.stdout);
    assert!(g.status.success(), "gprof: {g:?}");
    assert_eq!(first_in_flat_profile(&report), hot, "{report}");
    assert!(has_arc(&report, &caller, &hot), "{report}");
}

/// A Rust release program whose time is all in a trait method: its
/// legacy-mangled name (`_ZN…$LT$…Spinner$u20$as$u20$…Work$GT$4work…`) is
/// a local symbol with `$`, which gprof drops, charging the time to the
/// function before (`frame_dummy`). profdev writes `CMD.syms` with it as a
/// global symbol under the same name and prints the gprof command that
/// reads it; gprof then charges the time to the method and none to crt
/// functions.
#[test]
fn rust_names_with_dollars_get_a_symbols_file() {
    if !ready(
        "profdev gmon on a Rust program with '$' names",
        &["rustc", "gprof"],
    ) {
        return;
    }
    let d = tempdir();
    let src = d.path().join("dollar.rs");
    std::fs::write(
        &src,
        r#"
use std::hint::black_box;
trait Work { fn work(&self, n: u64) -> u64; }
struct Spinner(u64);
impl Work for Spinner {
    #[inline(never)]
    fn work(&self, n: u64) -> u64 {
        let mut x = n ^ self.0;
        for _ in 0..200_000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
        }
        x
    }
}
fn main() {
    let rounds: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3000);
    let s: Box<dyn Work> = Box::new(Spinner(black_box(7)));
    let mut acc = 0u64;
    for r in 0..rounds { acc = acc.wrapping_add(s.work(black_box(r))); }
    println!("{}", acc & 1);
}
"#,
    )
    .unwrap();
    let exe = d.path().join("dollar");
    let o = Command::new("rustc")
        .args(["-O", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "rustc: {o:?}");
    let out_file = d.path().join("gmon.out");
    let o = run(profdev()
        .arg("gmon")
        .arg("-o")
        .arg(&out_file)
        .arg("--")
        .arg(&exe)
        .arg("2500"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "profdev gmon: {stderr}");
    let syms = d.path().join("dollar.syms");
    let last = stderr.lines().last().unwrap_or("");
    assert!(
        last.starts_with("profdev gmon: gprof would drop ")
            && last.ends_with(&format!(
                "read the profile with: gprof {} {}",
                syms.display(),
                out_file.display()
            )),
        "{stderr}"
    );
    let g = Command::new("gprof")
        .args(["-b", "-p", "--no-demangle"])
        .arg(&syms)
        .arg(&out_file)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&g.stdout);
    assert!(g.status.success(), "gprof: {g:?}");
    let first = first_in_flat_profile(&report);
    assert!(
        first.contains("Spinner") && first.contains('$') && first.contains("4work"),
        "{report}"
    );
    let crt: f64 = report
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let crt = [
                "frame_dummy",
                "_init",
                "_start",
                "register_tm_clones",
                "deregister_tm_clones",
                "__do_global_dtors_aux",
            ];
            crt.contains(f.last()?).then(|| f[0].parse::<f64>().ok())?
        })
        .sum();
    assert!(crt < 5.0, "{crt}% on crt functions: {report}");
}

/// Many short-lived processes (issue: a process that exits while its last
/// samples are still in the ring is unwound fully): CMD forks 150 children
/// in turn, each spinning about 3 ms in `leaf_spin` under `middle` and
/// exiting at once. Their samples are charged and their stacks unwound
/// after they are gone: gprof shows `middle` calling `leaf_spin` for (at
/// least) 99% of leaf_spin's samples.
#[test]
fn short_lived_processes_keep_their_stacks() {
    if !ready("profdev gmon on short-lived processes", &["cc", "gprof"]) {
        return;
    }
    let d = tempdir();
    let exe = build(
        d.path(),
        "cc",
        &["-O2", "-fomit-frame-pointer"],
        "forks.c",
        "forks",
    );
    let (report, stderr) = profile(d.path(), &exe, &[], "150");
    assert!(has_arc(&report, "middle", "leaf_spin"), "{report}");
    let bytes = std::fs::read(d.path().join("forks.gmon")).unwrap();
    let g = gmon::parse(&bytes, gmon::Target::X86_64).unwrap().gmon;
    let elf = profdev_symbolize::ElfObject::open(&exe).unwrap();
    let leaf = elf
        .symbols()
        .iter()
        .find(|s| s.mangled == "leaf_spin")
        .expect("leaf_spin's symbol");
    let h = &g.histograms[0];
    let cell = |pc: u64| ((pc - h.low_pc) / 4) as usize;
    let samples: u64 = h.bins[cell(leaf.addr)..=cell(leaf.addr + leaf.size - 1)]
        .iter()
        .map(|&n| u64::from(n))
        .sum();
    let called = called(&report, "leaf_spin").unwrap_or_else(|| panic!("{report}"));
    assert!(
        samples >= 150,
        "too few samples in leaf_spin: {samples}: {stderr}"
    );
    assert!(
        called * 100 >= samples * 99,
        "gprof shows callers for {called} of leaf_spin's {samples} samples: {stderr}"
    );
}
