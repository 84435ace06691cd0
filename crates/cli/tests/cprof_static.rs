//! The uprobe fallback for statically linked programs
//! (`profdev_coverage::uprobe`): `profdev cprof CMD` on a static CMD, and
//! `startcp PID` on a static process through the mounted prof device,
//! with exact counts.
//!
//! Launch: tests/data/cprof/static_known.c (`cc -static -O1 -g`) calls
//! `called()` exactly N times and `hit()` exactly K of N times, behind a
//! conditional jump whose lcov branch pair must read K and N - K exactly.
//! Attach: tests/data/cprof/attach_loop.c built static (as
//! cprof_attach.rs runs it dynamic): after the attach, every instruction
//! of `inner` runs exactly 10 times per `outer_X` call, in two threads.

mod common;
#[path = "cprof/stepper.rs"]
mod stepper;

use common::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::time::Duration;

/// `called()`'s runs, and `hit()`'s (i % 7 == 3 for i < N).
const N: u64 = 777;
const K: u64 = 111;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/cprof")
        .join(name)
}

fn compile(src: &str, args: &[&str], out: &Path) {
    let status = Command::new("cc")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(data(src))
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc failed");
}

fn gate(what: &str) -> bool {
    privileged(
        what,
        // SAFETY: geteuid only queries.
        if unsafe { libc::geteuid() } == 0 {
            Ok(())
        } else {
            Err("uprobes through BPF need root (CAP_BPF and CAP_PERFMON)".into())
        },
    ) && profdev_testkit::tools(what, &["cc", "nm"])
        && static_libc(what)
}

/// `cc -static` needs libc.a (libc6-dev).
fn static_libc(what: &str) -> bool {
    let ok = Path::new("/usr/lib/x86_64-linux-gnu/libc.a").exists();
    ok || privileged(what, Err("libc.a (libc6-dev) is not installed".into()))
}

/// `cprof -f` listing lines of `file`'s section: line number -> count
/// text (tab-separated columns).
fn listing(out: &str, file: &str) -> BTreeMap<u32, String> {
    let mut on = false;
    let mut lines = BTreeMap::new();
    for l in out.lines() {
        if l.ends_with(':') && !l.contains('\t') {
            on = l.trim_end_matches(':').ends_with(file);
            continue;
        }
        if !on {
            continue;
        }
        let mut cols = l.splitn(3, '\t');
        if let (Some(n), Some(c)) = (cols.next(), cols.next()) {
            if let Ok(n) = n.parse() {
                lines.insert(n, c.trim().to_string());
            }
        }
    }
    lines
}

/// The 1-based line of `src` holding `text`.
fn line_of(src: &str, text: &str) -> u32 {
    src.lines()
        .position(|l| l.contains(text))
        .unwrap_or_else(|| panic!("{text:?} not in the source")) as u32
        + 1
}

/// The ptrace route's gate: the kernel lets a process trace its child.
fn ptrace_gate(what: &str) -> bool {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    privileged(
        what,
        if scope.trim() == "3" {
            Err("kernel.yama.ptrace_scope is 3: no ptrace at all".into())
        } else {
            Ok(())
        },
    ) && profdev_testkit::tools(what, &["cc", "nm"])
        && static_libc(what)
}

#[test]
fn cprof_counts_a_static_program_exactly_through_uprobes() {
    if gate("cprof on a static program") {
        static_known_counts(true);
    }
}

#[test]
fn cprof_counts_a_static_program_exactly_through_ptrace() {
    if ptrace_gate("cprof on a static program through ptrace") {
        static_known_counts(false);
    }
}

/// static_known's counts, lcov and records, through the uprobe fallback
/// (`PROFDEV_COV_UPROBES=1`) or the ptrace route.
fn static_known_counts(uprobes: bool) {
    let tmp = tempdir();
    let exe = tmp.path().join("static_known");
    compile("static_known.c", &["-static", "-O1", "-g"], &exe);
    let src = std::fs::read_to_string(data("static_known.c")).unwrap();
    let info = tmp.path().join("s.info");
    let mut cprof = profdev();
    if uprobes {
        cprof.env("PROFDEV_COV_UPROBES", "1");
    }
    let out = run(cprof
        .current_dir(tmp.path())
        .args(["cprof", "-o", "-", "-f", "-e", "--lcov"])
        .arg(&info)
        .arg(&exe));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    if uprobes {
        assert!(
            stderr.contains("is statically linked: counted through")
                && stderr.contains("uprobes")
                && stderr.contains("Linux 6.6"),
            "the fallback is said: {stderr}"
        );
    } else {
        assert!(
            stderr.contains("is statically linked: patched by cprof through ptrace"),
            "the route is said: {stderr}"
        );
    }
    let stdout = String::from_utf8(out.stdout).unwrap();
    // CMD ran as it does without profdev.
    let sink: u64 = (0..N).map(|i| 2 * i).sum::<u64>() + (0..N).filter(|i| i % 7 == 3).sum::<u64>();
    assert!(
        stdout.contains(&format!("sink {sink}")),
        "the program's output: {stdout}"
    );
    let lines = listing(&stdout, "static_known.c");
    let at = |text: &str| lines[&line_of(&src, text)].clone();
    assert_eq!(at("int called(int x)"), N.to_string(), "{lines:?}");
    assert_eq!(at("void hit(int x)"), K.to_string(), "{lines:?}");
    assert_eq!(at("void never(void)"), "0", "{lines:?}");
    assert_eq!(at("            hit(i);"), K.to_string(), "{lines:?}");

    // lcov: the functions' counts, and the `if`'s branch pair exactly.
    let lcov = std::fs::read_to_string(&info).unwrap();
    let ours = lcov
        .split("end_of_record")
        .find(|r| r.contains("static_known.c"))
        .expect("a record for the source");
    for (f, n) in [("called", N), ("hit", K), ("never", 0), ("main", 1)] {
        assert!(ours.contains(&format!("FNDA:{n},{f}\n")), "{f}: {ours}");
    }
    let if_line = line_of(&src, "if (i % 7 == 3)");
    let brda: Vec<u64> = ours
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("BRDA:{if_line},")))
        .map(|rest| rest.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    let mut got = brda.clone();
    got.sort_unstable();
    assert_eq!(got, [K, N - K], "the if's taken and not taken: {ours}");
    // The `for`'s jump runs N times in all (its pair sums to N or N - 1
    // with N + 1 tests, depending on how the loop is laid out): the total
    // of every pair on its line is what the compiler's layout gives, but
    // the line's count is N at least.
    let for_line = line_of(&src, "for (int i = 0; i < n; i++)");
    let c: u64 = lines[&for_line]
        .split('|')
        .map(|x| x.parse::<u64>().unwrap())
        .max()
        .unwrap();
    assert!(c >= N, "the loop's line: {}", lines[&for_line]);

    // -r records the same counts, shown afterwards by module name.
    let out = run(profdev()
        .current_dir(tmp.path())
        .args(["cprof", "-r", "-e"])
        .arg(&exe));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(profdev()
        .current_dir(tmp.path())
        .args(["cprof", "-f", "-m", "static_known"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = listing(&String::from_utf8(out.stdout).unwrap(), "static_known.c");
    assert_eq!(shown[&line_of(&src, "int called(int x)")], N.to_string());
    assert_eq!(shown[&line_of(&src, "void hit(int x)")], K.to_string());
}

#[test]
fn hit_mode_of_a_static_program_marks_what_ran_through_ptrace() {
    // `cprof --hits --lcov` of a static program: the ptrace route in hit
    // mode (a byte stored per block that ran, no count), its lines and
    // functions the counting run's mapped to ran or not.
    if !ptrace_gate("cprof --hits on a static program through ptrace") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("static_known");
    compile("static_known.c", &["-static", "-O1", "-g"], &exe);
    let record = |args: &[&str], name: &str| -> String {
        let info = tmp.path().join(name);
        let out = run(profdev()
            .current_dir(tmp.path())
            .args(["cprof", "-o", "-", "-e"])
            .args(args)
            .arg("--lcov")
            .arg(&info)
            .arg(&exe));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("patched by cprof through ptrace"),
            "{stderr}"
        );
        let lcov = std::fs::read_to_string(&info).unwrap();
        let ours = lcov
            .split("end_of_record")
            .find(|r| r.contains("static_known.c"));
        ours.expect("a record for the source").to_string()
    };
    let counts = record(&[], "counts.info");
    let hits = record(&["--hits"], "hits.info");
    // DA:<line>,<count> and FNDA:<count>,<name>, counts mapped to 1 or 0.
    let ran = |n: &str| if n == "0" { "0" } else { "1" };
    let da = |rec: &str, map: bool| -> Vec<String> {
        rec.lines()
            .filter_map(|l| l.strip_prefix("DA:"))
            .map(|r| {
                let (line, n) = r.split_once(',').unwrap();
                format!("{line},{}", if map { ran(n) } else { n })
            })
            .collect()
    };
    let fnda = |rec: &str, map: bool| -> Vec<String> {
        rec.lines()
            .filter_map(|l| l.strip_prefix("FNDA:"))
            .map(|r| {
                let (n, f) = r.split_once(',').unwrap();
                format!("{},{f}", if map { ran(n) } else { n })
            })
            .collect()
    };
    assert!(da(&counts, false).len() > 10, "{counts}");
    assert_eq!(da(&hits, false), da(&counts, true));
    assert_eq!(fnda(&hits, false), fnda(&counts, true));
    // Marks, not counts: called() ran N times, and is marked once.
    assert!(counts.contains(&format!("FNDA:{N},called\n")), "{counts}");
    assert!(hits.contains("FNDA:1,called\n"), "{hits}");
    assert!(hits.contains("FNDA:0,never\n"), "{hits}");
}

#[test]
fn every_condition_code_is_decided_as_the_cpu_decides_it() {
    if !gate("cprof on a static program") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("static_jcc");
    compile("static_jcc.c", &["-static", "-O1", "-g"], &exe);
    let src = std::fs::read_to_string(data("static_jcc.c")).unwrap();
    // The oracle: the program run natively counts what its CPU did.
    let native = Command::new(&exe).output().unwrap();
    assert!(native.status.success());
    let oracle = String::from_utf8(native.stdout).unwrap();
    let info = tmp.path().join("j.info");
    let out = run(profdev()
        .current_dir(tmp.path())
        .args(["cprof", "-o", "-", "-e", "--lcov"])
        .arg(&info)
        .arg(&exe));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&oracle),
        "the same answers under cprof"
    );
    let lcov = std::fs::read_to_string(&info).unwrap();
    let mut checked = 0;
    for l in oracle.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (cc, taken, fell) = (w[0], w[1], w[2]);
        assert!(
            taken != "0" && fell != "0",
            "the values set {cc} both ways: {l}"
        );
        let line = line_of(&src, &format!("J({cc})"));
        let brda: Vec<&str> = lcov
            .lines()
            .filter(|r| r.starts_with(&format!("BRDA:{line},")))
            .collect();
        assert_eq!(
            brda,
            [
                format!("BRDA:{line},0,0,{taken}"),
                format!("BRDA:{line},0,1,{fell}")
            ],
            "j{cc}"
        );
        checked += 1;
    }
    assert_eq!(checked, 16);
}

#[test]
fn cprof_passes_on_a_static_programs_exit_status() {
    if !gate("cprof on a static program") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("static_known");
    compile("static_known.c", &["-static", "-O1", "-g"], &exe);
    // Six arguments: never() runs and aborts (SIGABRT): profdev says so
    // in its status and still lists what ran.
    let out = run(profdev()
        .current_dir(tmp.path())
        .args(["cprof", "-o", "-", "-f", "-e"])
        .arg(&exe)
        .args(["3", "x", "x", "x", "x"]));
    assert!(!out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let src = std::fs::read_to_string(data("static_known.c")).unwrap();
    let lines = listing(&stdout, "static_known.c");
    assert_eq!(lines[&line_of(&src, "int called(int x)")], "3", "{stdout}");
    assert_eq!(lines[&line_of(&src, "void never(void)")], "1", "{stdout}");
}

#[test]
fn without_capabilities_cprof_says_what_to_do() {
    if !gate("cprof on a static program")
        || !profdev_testkit::tools("cprof as nobody", &["setpriv"])
    {
        return;
    }
    let tmp = tempdir();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let exe = tmp.path().join("static_known");
    compile("static_known.c", &["-static", "-O1", "-g"], &exe);
    let pd = profdev_copy(tmp.path());
    let out = run(Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(&pd)
        .args(["cprof", "-o", "-", "-f"])
        .arg(&exe)
        // The uprobe route (the ptrace route needs no capability: as
        // nobody it would count the program).
        .env("PROFDEV_COV_UPROBES", "1"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("CAP_BPF")
            && stderr.contains("CAP_PERFMON")
            && stderr.contains("kernel.unprivileged_bpf_disabled"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one sentence: {stderr}");
}

/// The count column of the line of `file`'s listing holding `text`.
fn count_at(out: &str, file: &str, text: &str) -> u64 {
    let src = std::fs::read_to_string(data(file)).unwrap();
    let n = line_of(&src, text);
    // One source listed has no header line.
    let c = match listing(out, file).remove(&n) {
        Some(c) => c,
        None => out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{n}\t")))
            .and_then(|l| l.split('\t').next())
            .unwrap_or_else(|| panic!("no line {n}: {out}"))
            .trim()
            .to_string(),
    };
    c.split('|')
        .map(|x| x.parse::<u64>().unwrap_or_else(|_| panic!("{c:?}: {out}")))
        .max()
        .unwrap()
}

#[test]
fn a_static_program_counts_as_the_single_stepper_does() {
    if !ptrace_gate("cprof on a static program through ptrace")
        || !profdev_testkit::tools("the single-stepper", &["objdump"])
    {
        return;
    }
    // The C library's start-up is compared too, and its path depends on
    // where the stack lies: a string function's vector loop reads aligned
    // blocks, so how often it goes round varies with the alignment of a
    // string copied onto the stack, whose place the kernel randomizes run
    // by run (seen under load: __strchr_evex's loop run 4 times under the
    // stepper, 5 under cprof, or the other way round). Both runs,
    // children of this thread, get one layout: no randomization.
    // SAFETY: personality(2) takes and returns flags; 0xffffffff only
    // reads them.
    unsafe {
        let now = libc::personality(0xffff_ffff) as libc::c_ulong;
        libc::personality(now | libc::ADDR_NO_RANDOMIZE as libc::c_ulong);
    }
    let tmp = tempdir();
    let exe = tmp.path().join("static_known");
    compile("static_known.c", &["-static", "-O2", "-g"], &exe);
    let oracle = stepper::measure(&exe);
    // The stepper stops at every iteration of a `rep` instruction (the
    // C library's memset): not compared.
    let rep: std::collections::HashSet<u64> = stepper::instructions(&exe)
        .into_iter()
        .filter(|(_, m)| m.starts_with("rep"))
        .map(|(a, _)| a)
        .collect();
    let out = run(profdev()
        .current_dir(tmp.path())
        .args(["cprof", "-f", "-r", "-e"])
        .arg(&exe));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("patched by cprof through ptrace"), "{err}");
    let got = profdev_coverage::prf::read(&tmp.path().join("static_known.prf"))
        .unwrap()
        .expect("cprof -r wrote a record");
    let engine: std::collections::HashMap<u64, u64> = got.insns.iter().copied().collect();
    let mut ran = 0;
    for (addr, n) in profdev_coverage::lines::instruction_counts(&oracle) {
        ran += usize::from(n > 0);
        if rep.contains(&addr) {
            continue;
        }
        match engine.get(&addr) {
            Some(&c) => assert_eq!(c, n, "instruction {addr:#x}: {err}"),
            None => assert_eq!(n, 0, "instruction {addr:#x} ran but is not counted"),
        }
    }
    // The C library's start-up included: every instruction from _start.
    assert!(ran > 1000, "only {ran} instructions ran");
}

/// `cprof -o - -f -e EXE ARGS` in `dir`: its listing, once it succeeded
/// through the ptrace route.
fn listed_through_ptrace(dir: &Path, exe: &Path, args: &[&str]) -> String {
    let out = run(profdev()
        .current_dir(dir)
        .args(["cprof", "-o", "-", "-f", "-e"])
        .arg(exe)
        .args(args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("patched by cprof through ptrace"),
        "{stderr}"
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn two_threads_of_a_static_program_count_exactly() {
    if !ptrace_gate("cprof on a static program through ptrace") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("static_threads");
    compile(
        "static_threads.c",
        &["-static", "-O2", "-g", "-pthread"],
        &exe,
    );
    let stdout = listed_through_ptrace(tmp.path(), &exe, &["1000000"]);
    let at = |text: &str| count_at(&stdout, "static_threads.c", text);
    assert_eq!(at("void step(unsigned long i)"), 4_000_000, "{stdout}");
    assert_eq!(at("printf(\"done"), 1, "{stdout}");
}

#[test]
fn a_static_programs_forked_child_counts_what_it_ran() {
    if !ptrace_gate("cprof on a static program through ptrace") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("static_fork");
    compile("static_fork.c", &["-static", "-O2", "-g"], &exe);
    let stdout = listed_through_ptrace(tmp.path(), &exe, &[]);
    // 300 before the fork, 500 in the child, 200 after: each once.
    let at = |text: &str| count_at(&stdout, "static_fork.c", text);
    assert_eq!(at("void work(long i)"), 1000, "{stdout}");
    assert_eq!(at("printf(\"done"), 1, "{stdout}");
}

/// The children of process `pid` (of all its threads).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|w| w.parse::<u32>().ok()),
        );
    }
    out
}

#[test]
fn sigterm_to_cprof_still_lists_a_static_program() {
    if !ptrace_gate("cprof on a static program through ptrace") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("static_forever");
    compile("static_forever.c", &["-static", "-O2", "-g"], &exe);
    let mut child = with_default_signals(
        profdev()
            .current_dir(tmp.path())
            .args(["cprof", "-o", "-", "-f", "-e"])
            .arg(&exe)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .spawn()
    .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "ready\n");
    // A stop aimed at CMD alone is honoured, and SIGCONT goes on.
    let cmd = children_of(child.id());
    assert_eq!(cmd.len(), 1, "cprof's one child: {cmd:?}");
    let cmd = cmd[0];
    let state = |want: fn(char) -> bool| {
        move || {
            std::fs::read_to_string(format!("/proc/{cmd}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").and_then(|(_, r)| r.chars().next()))
                .is_some_and(want)
        }
    };
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(cmd as i32, libc::SIGSTOP) };
    wait_until(
        "CMD stopped",
        Duration::from_secs(30),
        state(|c| c == 't' || c == 'T'),
    );
    // SAFETY: as above.
    unsafe { libc::kill(cmd as i32, libc::SIGCONT) };
    wait_until(
        "CMD running again",
        Duration::from_secs(30),
        state(|c| c == 'R' || c == 'S'),
    );
    // SAFETY: as above.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    assert!(
        stderr.contains("patched by cprof through ptrace"),
        "{stderr}"
    );
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    let ticks = count_at(&rest, "static_forever.c", "void tick(unsigned long i)");
    assert!(ticks > 1000, "{ticks}: {rest}");
}

// ---------------------------------------------------------------------
// Attach

/// `outer_X()` calls per command (attach_loop.c's REPS).
const REPS: u64 = 1000;

/// The histogram's pairs, one read(2) of 64 bytes each, until end of file.
fn pairs(path: &Path) -> BTreeMap<u64, u64> {
    let mut f = File::open(path).unwrap();
    let mut out = BTreeMap::new();
    loop {
        let mut buf = [0u8; 64];
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        let (a, c) = profdev_formats::prof_histogram::parse_pair(&buf[..n]).unwrap();
        assert!(out.insert(a, c).is_none(), "pc 0x{a:x} twice");
        assert!(out.len() < 1_000_000, "the histogram does not end");
    }
}

/// Function (start, size) by name, from `nm -S` (binutils).
fn symbols(exe: &Path) -> BTreeMap<String, (u64, u64)> {
    let out = Command::new("nm").arg("-S").arg(exe).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                [a, s, "T" | "t", name] => Some((
                    name.to_string(),
                    (
                        u64::from_str_radix(a, 16).ok()?,
                        u64::from_str_radix(s, 16).ok()?,
                    ),
                )),
                _ => None,
            }
        })
        .collect()
}

fn within(
    pairs: &BTreeMap<u64, u64>,
    syms: &BTreeMap<String, (u64, u64)>,
    name: &str,
) -> Vec<(u64, u64)> {
    let (a, s) = syms[name];
    pairs.range(a..a + s).map(|(&a, &c)| (a, c)).collect()
}

struct Program {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Program {
    fn start(exe: &Path, threads: u32) -> Program {
        let mut child = Command::new(exe)
            .arg(threads.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut p = Program { child, out };
        assert_eq!(p.line(), "ready\n");
        p
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line
    }

    fn go(&mut self, k: u32) {
        writeln!(self.child.stdin.as_mut().unwrap(), "go {k}").unwrap();
        assert_eq!(self.line(), "done\n");
    }

    fn quit(mut self) -> String {
        writeln!(self.child.stdin.as_mut().unwrap(), "quit").unwrap();
        let sum = self.line();
        let status =
            profdev_testkit::wait_exit("the program", &mut self.child, Duration::from_secs(60));
        assert!(status.success(), "{status}");
        sum
    }
}

fn worker_value(n: u64) -> u64 {
    let mut x = 0u64;
    for _ in 0..n * REPS {
        for j in 0..10u64 {
            x = x.wrapping_mul(3).wrapping_add(1) ^ j;
        }
    }
    x
}

/// `inner` ran 10 times per `outer_X` call (`total` calls in all),
/// each `outer_X` `n` times, exactly; code that ran only before the
/// attach, or never, has no pair.
fn assert_counts(
    got: &BTreeMap<u64, u64>,
    syms: &BTreeMap<String, (u64, u64)>,
    outers: &[(&str, u64)],
    total: u64,
) {
    let inner = within(got, syms, "inner");
    assert!(inner.len() >= 5, "inner's instructions: {inner:x?}");
    for &(a, c) in &inner {
        assert_eq!(c, 10 * total, "inner at 0x{a:x}: {inner:?}");
    }
    for &(name, n) in outers {
        let o = within(got, syms, name);
        assert_eq!(o.first(), Some(&(syms[name].0, n)), "{name}: {o:?}");
        for &(a, c) in &o {
            assert!([n, 10 * n, 11 * n].contains(&c), "{name} at 0x{a:x}: {o:?}");
        }
        for want in [10 * n, 11 * n] {
            assert!(o.iter().any(|&(_, c)| c == want), "{name}: {o:?}");
        }
    }
    for absent in ["before_only", "never"] {
        assert_eq!(
            within(got, syms, absent),
            [],
            "{absent} never ran after the attach"
        );
    }
    assert_eq!(
        got.get(&syms["main"].0),
        None,
        "main's entry ran before the attach"
    );
}

fn attach_gate(what: &str) -> bool {
    privileged(what, can_mount()) && gate(what)
}

#[test]
fn startcp_counts_a_static_process_in_two_threads_exactly_until_stop() {
    if !attach_gate("startcp on a static process") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("attach_static");
    compile("attach_loop.c", &["-g", "-O0", "-pthread", "-static"], &exe);
    let syms = symbols(&exe);
    let m = Mount::new();
    let mut p = Program::start(&exe, 2);
    p.go(5); // before the attach: not counted
    m.ctl("module attach_static\n").unwrap();
    let msg = format!("startcp {}\n", p.child.id());
    assert_eq!(m.ctl(&msg).unwrap(), msg.len());
    let again = m.ctl(&msg).unwrap_err();
    assert_eq!(again.raw_os_error(), Some(libc::EBUSY), "{again}");
    p.go(30);
    m.ctl("stop\n").unwrap();
    let rec = m
        .record("attach_static")
        .expect("stop filled the histogram");
    let got = pairs(&rec.join("histogram"));
    assert_counts(
        &got,
        &syms,
        &[("outer_a", 30 * REPS), ("outer_b", 30 * REPS)],
        60 * REPS,
    );
    // The probes are gone after stop: it runs on, and the histogram keeps
    // what stop took.
    p.go(4);
    let v = worker_value(39);
    assert_eq!(p.quit(), format!("sum {v} {v}\n"));
    assert_eq!(pairs(&rec.join("histogram")), got);
    m.ctl("end\n").unwrap();
}

#[test]
fn startcp_on_a_static_process_fills_the_histogram_at_its_exit() {
    if !attach_gate("startcp on a static process") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("attach_static");
    compile("attach_loop.c", &["-g", "-O0", "-pthread", "-static"], &exe);
    let syms = symbols(&exe);
    let m = Mount::new();
    let mut p = Program::start(&exe, 1);
    p.go(3);
    m.ctl("module attach_static\n").unwrap();
    m.ctl(format!("startcp {}\n", p.child.id())).unwrap();
    p.go(20);
    assert_eq!(p.quit(), format!("sum {}\n", worker_value(23)));
    let mut rec = None;
    wait_until(
        "the static program's histogram",
        Duration::from_secs(30),
        || {
            rec = m.record("attach_static");
            rec.is_some()
        },
    );
    let got = pairs(&rec.unwrap().join("histogram"));
    assert_counts(&got, &syms, &[("outer_a", 20 * REPS)], 20 * REPS);
    assert_eq!(within(&got, &syms, "outer_b"), [], "no second worker");
    m.ctl("end\n").unwrap();
}

/// The instruction counts of a `.prf` record, by address.
fn prf_pairs(path: &Path) -> BTreeMap<u64, u64> {
    let rec = profdev_coverage::prf::read(path)
        .unwrap()
        .unwrap_or_else(|| panic!("no record in {}", path.display()));
    rec.insns.into_iter().filter(|&(_, c)| c > 0).collect()
}

/// `profdev cprof ARGS -p` the static program `p`, run in `dir`, once it
/// says it counts the process through ptrace: cprof, its standard error
/// and what it has said so far.
fn attach_traced(
    dir: &Path,
    args: &[&str],
    p: &Program,
) -> (Child, BufReader<ChildStderr>, String) {
    let mut cprof = with_default_signals(
        profdev()
            .current_dir(dir)
            .arg("cprof")
            .args(args)
            .arg("-p")
            .arg(p.child.id().to_string())
            .stderr(Stdio::piped()),
    )
    .spawn()
    .unwrap();
    let mut err = BufReader::new(cprof.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("cprof: counting process") {
        assert!(err.read_line(&mut said).unwrap() > 0, "cprof ended: {said}");
    }
    assert!(said.contains("patched by cprof through ptrace"), "{said}");
    (cprof, err, said)
}

#[test]
fn cprof_p_counts_a_static_process_through_ptrace_and_lets_it_go() {
    if !ptrace_gate("cprof -p on a static process through ptrace") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("attach_static");
    compile("attach_loop.c", &["-g", "-O0", "-pthread", "-static"], &exe);
    let syms = symbols(&exe);
    let mut p = Program::start(&exe, 2);
    p.go(5); // before the attach: not counted
    let (mut cprof, mut err, mut said) = attach_traced(tmp.path(), &["-r", "-e"], &p);
    p.go(30);
    // A stop aimed at the process is honoured while it is followed.
    let pid = p.child.id() as i32;
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let state = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.chars().next()))
            .flatten()
    };
    wait_until("the process stopped", Duration::from_secs(30), || {
        matches!(state(), Some('T' | 't'))
    });
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    p.go(10);
    // A thread made after the attach counts into an array of its own,
    // read at its exit.
    writeln!(p.child.stdin.as_mut().unwrap(), "new 7").unwrap();
    assert_eq!(p.line(), format!("new {}\n", worker_value(7)));
    // Interrupted while the process is stopped (^Z): cprof ends, lists,
    // and leaves it stopped.
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    wait_until("the process stopped again", Duration::from_secs(30), || {
        matches!(state(), Some('T' | 't'))
    });
    // SAFETY: as above.
    unsafe { libc::kill(cprof.id() as i32, libc::SIGINT) };
    let status = profdev_testkit::wait_exit("cprof -p", &mut cprof, Duration::from_secs(120));
    err.read_to_string(&mut said).unwrap();
    assert!(said.contains("interrupted by SIGINT"), "{status}: {said}");
    let got = prf_pairs(&tmp.path().join("attach_static.prf"));
    assert_counts(
        &got,
        &syms,
        &[("outer_a", 40 * REPS), ("outer_b", 47 * REPS)],
        87 * REPS,
    );
    // Let go, it stays stopped (back in its group stop, untraced).
    wait_until(
        "the process let go, stopped",
        Duration::from_secs(30),
        || state() == Some('T'),
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // Let go: it runs on, its breakpoints put back, to the same sums.
    p.go(4);
    let v = worker_value(49);
    assert_eq!(p.quit(), format!("sum {v} {v}\n"));
}

/// `cprof -p` without `-f` of a static process: hit mode through ptrace
/// (the tracer takes each one-shot probe once, in every thread, a thread
/// made after the attach too), then the process let go with every probe
/// not taken put back: it runs on to the same sums.
#[test]
fn cprof_p_marks_a_static_process_in_hit_mode_and_lets_it_go() {
    if !ptrace_gate("cprof -p on a static process through ptrace, hit mode") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("attach_static");
    compile("attach_loop.c", &["-g", "-O0", "-pthread", "-static"], &exe);
    let src = std::fs::read_to_string(data("attach_loop.c")).unwrap();
    let mut p = Program::start(&exe, 2);
    p.go(5); // before the attach: not marked
    let out = tmp.path().join("marks.txt");
    let args = ["-e", "-o", out.to_str().unwrap()];
    let (mut cprof, mut err, mut said) = attach_traced(tmp.path(), &args, &p);
    p.go(3);
    writeln!(p.child.stdin.as_mut().unwrap(), "new 7").unwrap();
    assert_eq!(p.line(), format!("new {}\n", worker_value(7)));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(cprof.id() as i32, libc::SIGINT) };
    let status = profdev_testkit::wait_exit("cprof -p", &mut cprof, Duration::from_secs(120));
    err.read_to_string(&mut said).unwrap();
    assert!(said.contains("interrupted by SIGINT"), "{status}: {said}");
    // line -> mark of the listing.
    let listing = std::fs::read_to_string(&out).unwrap();
    let marks: BTreeMap<u32, String> = listing
        .lines()
        .filter_map(|l| {
            let mut c = l.splitn(3, '\t');
            Some((c.next()?.parse().ok()?, c.next()?.to_string()))
        })
        .collect();
    let at = |text: &str| marks[&line_of(&src, text)].clone();
    for f in ["uint64_t inner(", "uint64_t outer_a(", "uint64_t outer_b("] {
        assert_eq!(at(f), "+", "{f}: {listing}");
    }
    assert_eq!(at("void before_only(void)"), "-", "{listing}");
    assert_eq!(at("void never(void)"), "-", "{listing}");
    // Let go, its probes not taken put back: it runs on to the same sums.
    p.go(4);
    let v = worker_value(12);
    assert_eq!(p.quit(), format!("sum {v} {v}\n"));
}

/// A ^C on the terminal reaches a static CMD once, and cprof not at all:
/// on the ptrace route too CMD runs in its own process group, the
/// terminal's foreground group (before: CMD shared cprof's group, so
/// cprof caught the ^C as well, and once passed it on a second time).
/// The program catches SIGINT and goes on; the test ends it with SIGTERM.
/// Had cprof got the ^C, it would say it was interrupted and exit with
/// 130, not with CMD's 143, however late a loaded machine delivered it.
#[test]
fn a_terminal_interrupt_reaches_a_static_program_once() {
    if !ptrace_gate("cprof on a static program through ptrace")
        || !profdev_testkit::tools("a ^C on a terminal", &["script"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("static_sigint");
    compile("static_sigint.c", &["-static", "-O1"], &exe);
    let mut run = profdev_testkit::terminal::Terminal::spawn(&format!(
        "cd {} && exec {} cprof -o /dev/null -- {}",
        tmp.path().display(),
        env!("CARGO_BIN_EXE_profdev"),
        exe.display()
    ));
    let at = run.wait_for("ready ", 0);
    let pid: i32 = run.text()["ready ".len()..]
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("ready PID");
    run.press("\x03");
    run.wait_for("got 1 SIGINT", at);
    // CMD, in its own group holding the terminal, got the ^C and goes on
    // (it catches SIGINT); cprof, not in that group, got nothing.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    let (code, text) = run.finish(Duration::from_secs(120));
    assert!(
        text.contains("got 1 SIGINT") && !text.contains("got 2 SIGINT"),
        "{text}"
    );
    assert!(
        !text.contains("interrupted by"),
        "cprof got no signal: {text}"
    );
    // CMD's status: killed by SIGTERM.
    assert_eq!(code, Some(128 + libc::SIGTERM), "{text}");
}
