//! `startcp PID` on a mounted prof/ctl: coverage of a program already
//! running (tests/data/cprof/attach_loop.c), counted exactly from the
//! attach on. The program runs `outer_X()` once per command it gets, each
//! calling the straight-line `inner()` exactly 10 times, and waits in
//! read(2) between commands, so the counts after the attach are known
//! exactly: every instruction of `inner` 10 times per command, `outer_X`'s
//! first instruction once per command; code that ran only before the
//! attach (`before_only`, `main`'s entry) and code never run (`never`)
//! have no pair. Two threads running the same code at once lose no
//! count. The program runs on after the attach and after `stop`, and
//! exits 0 with the values it computes without profdev.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

/// `outer_X()` calls per command (attach_loop.c's REPS).
const REPS: u32 = 1000;

fn compile(args: &[&str], out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cprof/attach_loop.c");
    let status = Command::new("cc")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc failed");
}

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

/// The pairs inside function `name`.
fn within(
    pairs: &BTreeMap<u64, u64>,
    syms: &BTreeMap<String, (u64, u64)>,
    name: &str,
) -> Vec<(u64, u64)> {
    let (a, s) = syms[name];
    pairs.range(a..a + s).map(|(&a, &c)| (a, c)).collect()
}

/// The running fixture: its stdin and stdout.
struct Program {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Program {
    /// Start `exe` with `threads` workers; wait for "ready".
    fn start(exe: &Path, threads: u32) -> Program {
        Program::spawn(Command::new(exe).arg(threads.to_string()))
    }

    /// Start `cmd` (the fixture); wait for "ready".
    fn spawn(cmd: &mut Command) -> Program {
        let mut child = cmd
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

    /// Run `outer_X()` `k` * [`REPS`] times in every worker; wait for
    /// "done".
    fn go(&mut self, k: u32) {
        writeln!(self.child.stdin.as_mut().unwrap(), "go {k}").unwrap();
        assert_eq!(self.line(), "done\n");
    }

    /// The GS bases of its threads (main first), as they read them.
    fn gs(&mut self) -> Vec<u64> {
        writeln!(self.child.stdin.as_mut().unwrap(), "gs").unwrap();
        let line = self.line();
        let v: Vec<u64> = line
            .strip_prefix("gs ")
            .unwrap_or_else(|| panic!("{line:?}"))
            .split_whitespace()
            .map(|w| u64::from_str_radix(w, 16).unwrap())
            .collect();
        v
    }

    /// Ask it to end; its "sum" line, after a clean exit (bounded).
    fn quit(mut self) -> String {
        writeln!(self.child.stdin.as_mut().unwrap(), "quit").unwrap();
        let sum = self.line();
        let status =
            profdev_testkit::wait_exit("the program", &mut self.child, Duration::from_secs(60));
        assert!(status.success(), "{status}");
        sum
    }
}

/// What a worker prints after `n` commands (`outer_X()` 1000 times
/// each), computed here.
fn worker_value(n: u32) -> u64 {
    let mut x = 0u64;
    for _ in 0..n * REPS {
        for j in 0..10u64 {
            x = x.wrapping_mul(3).wrapping_add(1) ^ j;
        }
    }
    x
}

fn gate(what: &str) -> bool {
    privileged(what, can_mount()) && profdev_testkit::tools(what, &["cc", "nm"])
}

/// `outer` ran `n` times, `inner` 10 times per run of every worker
/// (`total` runs in all), exactly; `before_only`, `never` and `main`'s
/// entry have no pair.
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
        // Its blocks: once per call, the loop's body 10 times, its test 11.
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
    let main = syms["main"].0;
    assert_eq!(got.get(&main), None, "main's entry ran before the attach");
}

#[test]
fn startcp_counts_a_running_program_exactly_from_the_attach_on() {
    if !gate("startcp PID through the mount") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("attach_loop");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let syms = symbols(&exe);
    let m = Mount::new();
    let mut p = Program::start(&exe, 1);
    p.go(10); // before the attach: not counted
    let pid = p.child.id();
    m.ctl("module attach_loop\n").unwrap();
    let msg = format!("startcp {pid}\n");
    assert_eq!(m.ctl(&msg).unwrap(), msg.len());
    // Coverage mode is on: a second startcp is refused.
    let again = m.ctl(&msg).unwrap_err();
    assert_eq!(again.raw_os_error(), Some(libc::EBUSY), "{again}");
    for _ in 0..4 {
        p.go(50);
    }
    // It runs on, and computes what it computes without profdev.
    assert_eq!(p.quit(), format!("sum {}\n", worker_value(210)));
    // The device reads the exit report once it sees the process gone.
    let mut rec = None;
    wait_until(
        "the attached program's histogram",
        Duration::from_secs(30),
        || {
            rec = m.record("attach_loop");
            rec.is_some()
        },
    );
    let got = pairs(&rec.unwrap().join("histogram"));
    assert_counts(&got, &syms, &[("outer_a", 200_000)], 200_000);
    assert_eq!(within(&got, &syms, "outer_b"), [], "no second worker");
    m.ctl("end\n").unwrap();
}

#[test]
fn stop_reports_two_threads_exactly_and_the_program_runs_on() {
    if !gate("startcp PID through the mount") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("attach_loop");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let syms = symbols(&exe);
    let m = Mount::new();
    let mut p = Program::start(&exe, 2);
    assert_eq!(p.gs(), [0, 0, 0]);
    p.go(5);
    m.ctl("module attach_loop\n").unwrap();
    m.ctl(format!("startcp {}\n", p.child.id())).unwrap();
    // Each thread counts into an array of its own (its GS base, 0 before
    // the attach), so two threads running inner() at once lose nothing.
    let gs = p.gs();
    assert_eq!(gs.len(), 3);
    assert!(gs.iter().all(|&g| g != 0), "{gs:x?}");
    assert!(
        gs[0] != gs[1] && gs[1] != gs[2] && gs[0] != gs[2],
        "{gs:x?}"
    );
    p.go(300);
    assert!(m.record("attach_loop").is_none(), "nothing before a report");
    m.ctl("stop\n").unwrap();
    let rec = m.record("attach_loop").expect("stop filled the histogram");
    let got = pairs(&rec.join("histogram"));
    assert_counts(
        &got,
        &syms,
        &[("outer_a", 300_000), ("outer_b", 300_000)],
        600_000,
    );
    // Still running, still patched: it goes on and ends as it would have.
    p.go(7);
    let v = worker_value(312);
    assert_eq!(p.quit(), format!("sum {v} {v}\n"));
    m.ctl("end\n").unwrap();
}

#[test]
fn a_process_of_another_user_is_counted() {
    if !gate("startcp PID through the mount") || !profdev_testkit::tools("startcp", &["setpriv"]) {
        return;
    }
    let tmp = tempdir();
    // nobody must reach the program.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let exe = tmp.path().join("attach_loop");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let syms = symbols(&exe);
    let m = Mount::new();
    // The runtime, loaded by nobody's process, must read its library,
    // reach profdev's socket and write its reports.
    let mut p = Program::spawn(
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(&exe)
            .arg("1"),
    );
    m.ctl("module attach_loop\n").unwrap();
    m.ctl(format!("startcp {}\n", p.child.id())).unwrap();
    p.go(20);
    assert_eq!(p.quit(), format!("sum {}\n", worker_value(20)));
    let mut rec = None;
    wait_until(
        "nobody's program's histogram",
        Duration::from_secs(30),
        || {
            rec = m.record("attach_loop");
            rec.is_some()
        },
    );
    let got = pairs(&rec.unwrap().join("histogram"));
    assert_counts(&got, &syms, &[("outer_a", 20_000)], 20_000);
    m.ctl("end\n").unwrap();
}

#[test]
fn every_module_with_threads_stopped_inside_libc() {
    if !gate("startcp PID through the mount") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("attach_loop");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let syms = symbols(&exe);
    let m = Mount::new();
    let mut p = Program::start(&exe, 2);
    p.go(2);
    // No module list: the executable and every library, libc too, whose
    // read(2) every thread is stopped in.
    m.ctl(format!("startcp {}\n", p.child.id())).unwrap();
    p.go(100);
    m.ctl("stop\n").unwrap();
    let rec = m.record("attach_loop").expect("the executable's record");
    let got = pairs(&rec.join("histogram"));
    assert_counts(
        &got,
        &syms,
        &[("outer_a", 100_000), ("outer_b", 100_000)],
        200_000,
    );
    let libc = m.record("libc.so.6").expect("libc's record");
    // read(2) and write(2) ran, once per command and thread at least.
    assert!(pairs(&libc.join("histogram")).values().any(|&c| c >= 200));
    p.go(1);
    let v = worker_value(103);
    assert_eq!(p.quit(), format!("sum {v} {v}\n"));
    m.ctl("end\n").unwrap();
}
