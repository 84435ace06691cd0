//! `profdev cprof -p PID`: coverage of a process that is already running
//! (tests/data/cprof/pid_loop.c), attached mid-run, counted exactly from
//! the attach on. The program runs its outer loop K times per line it
//! reads, the inner loop exactly 10 times per outer iteration, and waits
//! in read(2) between lines until its stdin ends (its stop). Lines sent
//! before the attach are not counted; from the attach on the INNER line's
//! count is exactly 10 times the OUTER line's, in `cprof -f`'s listing and
//! in the lcov file. Interrupted, cprof lists the counts so far and the
//! program runs on. A pid that does not exist: one sentence, non-zero. A
//! statically linked program is counted the same, through uprobes.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The fixture's source.
fn source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cprof/pid_loop.c")
}

fn compile(out: &Path) {
    compile_with(out, &[]);
}

fn compile_with(out: &Path, extra: &[&str]) {
    let status = Command::new("cc")
        .args(["-g", "-O0"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(source())
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc failed");
}

/// The source line (1-based) holding `mark`.
fn line_of(mark: &str) -> usize {
    let text = std::fs::read_to_string(source()).unwrap();
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(mark))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines.len(), 1, "{mark}");
    lines[0]
}

/// The running fixture.
struct Program {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Program {
    fn start(exe: &Path) -> Program {
        let mut child = Command::new(exe)
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

    /// Run the outer loop `k` times; wait for "done".
    fn run(&mut self, k: u64) {
        writeln!(self.child.stdin.as_mut().unwrap(), "{k}").unwrap();
        assert_eq!(self.line(), "done\n");
    }

    /// End its input (its stop); its last line, after a clean exit.
    fn stop(mut self) -> String {
        drop(self.child.stdin.take());
        let last = self.line();
        let status =
            profdev_testkit::wait_exit("the program", &mut self.child, Duration::from_secs(60));
        assert!(status.success(), "{status}");
        last
    }
}

/// What the program prints at its stop after `n` outer iterations.
fn last_line(n: u64) -> String {
    let mut x = 0u64;
    for _ in 0..n {
        for j in 0..10u64 {
            x = x.wrapping_mul(3).wrapping_add(j);
        }
    }
    format!("n {n} x {x}\n")
}

/// `profdev cprof ARGS -p PID`, started; returns once it says it is
/// counting (bounded), with its stderr lines so far and the rest to come.
struct Cprof {
    child: Child,
    stderr: mpsc::Receiver<String>,
    said: Vec<String>,
}

impl Cprof {
    fn attach(args: &[&str], pid: u32) -> Cprof {
        Cprof::attach_with(args, pid, &[])
    }

    fn attach_with(args: &[&str], pid: u32, env: &[(&str, &str)]) -> Cprof {
        let mut child = profdev()
            .arg("cprof")
            .args(args)
            .arg("-p")
            .arg(pid.to_string())
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let err = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for l in err.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let mut c = Cprof {
            child,
            stderr: rx,
            said: Vec::new(),
        };
        loop {
            let l = c
                .stderr
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("cprof did not attach ({e}): {:?}", c.said));
            c.said.push(l.clone());
            if l.starts_with(&format!("cprof: counting process {pid} ")) {
                return c;
            }
        }
    }

    /// Its exit status, stdout and every stderr line, after it exits
    /// (bounded).
    fn finish(mut self) -> (std::process::ExitStatus, String, Vec<String>) {
        let mut out = String::new();
        let mut stdout = self.child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
            out
        });
        let status = profdev_testkit::wait_exit(
            "profdev cprof -p",
            &mut self.child,
            Duration::from_secs(120),
        );
        let out = reader.join().unwrap();
        while let Ok(l) = self.stderr.recv_timeout(Duration::from_secs(10)) {
            self.said.push(l);
        }
        (status, out, self.said)
    }
}

/// The `-f` counts of the fixture's module: source line -> count text.
fn counts(listing: &str) -> Vec<(usize, String)> {
    let module = listing
        .split("Module: ")
        .find(|m| m.starts_with("pid_loop("))
        .unwrap_or_else(|| panic!("no pid_loop module in:\n{listing}"));
    module
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '\t');
            let line = f.next()?.parse().ok()?;
            Some((line, f.next()?.to_string()))
        })
        .collect()
}

fn count_at(counts: &[(usize, String)], line: usize) -> &str {
    counts
        .iter()
        .find(|(l, _)| *l == line)
        .map(|(_, c)| c.as_str())
        .unwrap_or_else(|| panic!("no line {line} in {counts:?}"))
}

/// The lcov file's `DA` count of `line` in the fixture's source.
fn lcov_count(info: &str, line: usize) -> u64 {
    let src = source();
    let section = info
        .split("end_of_record")
        .find(|r| {
            r.lines()
                .any(|l| l.strip_prefix("SF:").is_some_and(|f| Path::new(f) == src))
        })
        .unwrap_or_else(|| panic!("no record of {} in:\n{info}", src.display()));
    section
        .lines()
        .find_map(|l| {
            let (n, c) = l.strip_prefix("DA:")?.split_once(',')?;
            (n.parse::<usize>().ok()? == line).then(|| c.parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no DA for line {line}:\n{section}"))
}

fn can_attach() -> Result<(), String> {
    if profdev_testkit::is_root() {
        Ok(())
    } else {
        Err("attaching to another process with ptrace needs root (CAP_SYS_PTRACE)".into())
    }
}

fn gate(what: &str) -> bool {
    privileged(what, can_attach()) && profdev_testkit::tools(what, &["cc"])
}

#[test]
fn cprof_p_counts_a_running_program_exactly_from_the_attach_on() {
    if !gate("cprof -p PID") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("pid_loop");
    compile(&exe);
    let info = tmp.path().join("pid.info");
    let mut p = Program::start(&exe);
    p.run(1000); // before the attach: not counted
    let c = Cprof::attach(&["-f", "--lcov", info.to_str().unwrap()], p.child.id());
    p.run(300);
    p.run(123);
    // It runs on and computes what it computes without profdev; at its
    // stop cprof lists.
    assert_eq!(p.stop(), last_line(1423));
    let (status, listing, said) = c.finish();
    assert!(status.success(), "{status}: {said:?}");
    let (outer, inner, never) = (
        line_of("/* OUTER */"),
        line_of("/* INNER */"),
        line_of("/* NEVER */"),
    );
    let f = counts(&listing);
    assert_eq!(count_at(&f, outer), "423", "{f:?}");
    assert_eq!(count_at(&f, inner), "4230", "exactly 10 per outer: {f:?}");
    assert_eq!(count_at(&f, never), "0");
    let info = std::fs::read_to_string(&info).unwrap();
    assert_eq!(lcov_count(&info, outer), 423);
    assert_eq!(lcov_count(&info, inner), 4230);
    assert_eq!(lcov_count(&info, never), 0);
}

#[test]
fn cprof_p_without_f_marks_a_running_program_in_hit_mode() {
    if !gate("cprof -p PID") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("pid_loop");
    compile(&exe);
    let mut p = Program::start(&exe);
    p.run(1000);
    let c = Cprof::attach(&["-e"], p.child.id());
    p.run(300);
    assert_eq!(p.stop(), last_line(1300));
    let (status, listing, said) = c.finish();
    assert!(status.success(), "{status}: {said:?}");
    let m = counts(&listing);
    assert_eq!(count_at(&m, line_of("/* OUTER */")), "+", "{m:?}");
    assert_eq!(count_at(&m, line_of("/* INNER */")), "+", "{m:?}");
    assert_eq!(count_at(&m, line_of("/* NEVER */")), "-", "{m:?}");
    // Hit mode: the total is the instructions that ran, each once (the
    // 3,000 inner iterations alone would count more than 3,000).
    let total: u64 = listing
        .lines()
        .find_map(|l| l.strip_prefix("**** module instructions "))
        .and_then(|r| r.trim_end_matches(" ****").parse().ok())
        .unwrap_or_else(|| panic!("no total in {listing}"));
    assert!(total > 0 && total < 1000, "{total}");
}

#[test]
fn cprof_p_hits_lcov_is_the_counting_tracefile_mapped_to_ran_or_not() {
    if !gate("cprof -p PID --hits") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("pid_loop");
    compile(&exe);
    // The DA, FNDA and BRDA lines, each count mapped to 1 if not 0.
    let tracefile = |extra: &[&str]| -> Vec<String> {
        let info = tmp.path().join("p.info");
        let mut p = Program::start(&exe);
        p.run(1000);
        let mut args = vec!["-e", "--lcov", info.to_str().unwrap()];
        args.extend_from_slice(extra);
        let c = Cprof::attach(&args, p.child.id());
        p.run(300);
        assert_eq!(p.stop(), last_line(1300));
        let (status, _, said) = c.finish();
        assert!(status.success(), "{status}: {said:?}");
        let text = std::fs::read_to_string(&info).unwrap();
        common::lcov_coverage_lines(&text, true)
    };
    let counts = tracefile(&[]);
    let hits = tracefile(&["--hits"]);
    assert!(hits.iter().any(|l| l.starts_with("BRDA:")), "{hits:?}");
    assert_eq!(hits, counts);
}

#[test]
fn cprof_p_without_f_marks_every_module_the_runtime_itself_calls_into() {
    // Every module, the C library too: the runtime, called by the
    // injector, runs C library code it has just given one-shot probes;
    // their SIGTRAPs reach its handler during the call (held back, the
    // program went on inside an instruction and crashed).
    if !gate("cprof -p PID") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("pid_loop");
    compile(&exe);
    let mut p = Program::start(&exe);
    p.run(10);
    let c = Cprof::attach(&[], p.child.id());
    p.run(20);
    assert_eq!(p.stop(), last_line(30));
    let (status, listing, said) = c.finish();
    assert!(status.success(), "{status}: {said:?}");
    let m = counts(&listing);
    assert_eq!(count_at(&m, line_of("/* OUTER */")), "+", "{m:?}");
    assert!(listing.contains("Module: libc.so.6("), "{said:?}");
}

#[test]
fn cprof_p_marks_a_thread_that_blocked_every_signal_before_the_attach() {
    if !gate("cprof -p PID") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("pid_masked");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/cprof/pid_masked.c");
    let st = Command::new("cc")
        .args(["-g", "-O0", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("cc runs");
    assert!(st.success());
    let mut p = Program::start(&exe);
    let c = Cprof::attach(&["-e"], p.child.id());
    // The worker runs work() for the first time: its breakpoints, with
    // SIGTRAP blocked in that thread, would kill the process.
    p.run(5);
    p.run(7);
    let last = p.stop();
    assert!(last.starts_with("n 12 "), "{last}");
    let (status, listing, said) = c.finish();
    assert!(status.success(), "{status}: {said:?}");
    let text = std::fs::read_to_string(&src).unwrap();
    let work = text.lines().position(|l| l.contains("/* WORK */")).unwrap() + 1;
    let module = listing
        .split("Module: ")
        .find(|m| m.starts_with("pid_masked("))
        .unwrap_or_else(|| panic!("no pid_masked module in:\n{listing}"));
    let mark = module
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, '\t');
            (f.next()?.parse::<usize>().ok()? == work).then(|| f.next().map(str::to_string))?
        })
        .unwrap_or_else(|| panic!("no line {work} in {module}"));
    assert_eq!(mark, "+");
}

#[test]
fn cprof_p_counts_a_running_static_program_exactly_by_either_route() {
    if !gate("cprof -p PID on a static program") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("pid_loop");
    compile_with(&exe, &["-static"]);
    // Patched and followed through ptrace (its counts read as it exits),
    // or through uprobes where asked.
    for (env, route) in [
        (&[][..], "patched by cprof through ptrace"),
        (
            &[("PROFDEV_COV_UPROBES", "1")][..],
            "counted through uprobes",
        ),
    ] {
        let mut p = Program::start(&exe);
        p.run(1000); // before the attach: not counted
        let c = Cprof::attach_with(&["-f"], p.child.id(), env);
        assert!(c.said.iter().any(|l| l.contains(route)), "{:?}", c.said);
        p.run(77);
        assert_eq!(p.stop(), last_line(1077));
        let (status, listing, said) = c.finish();
        assert!(status.success(), "{route}: {status}: {said:?}");
        let f = counts(&listing);
        assert_eq!(count_at(&f, line_of("/* OUTER */")), "77", "{route}: {f:?}");
        assert_eq!(
            count_at(&f, line_of("/* INNER */")),
            "770",
            "{route}: {f:?}"
        );
        assert_eq!(count_at(&f, line_of("/* NEVER */")), "0", "{route}");
    }
}

#[test]
fn interrupted_cprof_p_lists_the_counts_so_far_and_the_program_runs_on() {
    if !gate("cprof -p PID") {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("pid_loop");
    compile(&exe);
    let mut p = Program::start(&exe);
    p.run(7);
    let pid = p.child.id();
    let c = Cprof::attach(&["-f", "-e"], pid);
    p.run(200);
    // SAFETY: kill has no memory-safety preconditions.
    let r = unsafe { libc::kill(c.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(r, 0);
    let (status, listing, said) = c.finish();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{said:?}");
    let f = counts(&listing);
    assert_eq!(count_at(&f, line_of("/* OUTER */")), "200", "{f:?}");
    assert_eq!(count_at(&f, line_of("/* INNER */")), "2000", "{f:?}");
    let sentence = said
        .iter()
        .find(|l| l.starts_with("cprof: interrupted by SIGTERM;"))
        .unwrap_or_else(|| panic!("{said:?}"));
    assert!(
        sentence.contains(&format!("process {pid} runs on, still counted")),
        "{sentence}"
    );
    // Still running, still patched: it goes on and ends as it would have.
    p.run(5);
    assert_eq!(p.stop(), last_line(212));
    // The private directory cprof left for it: named, kept, removable.
    let dir = sentence
        .split("(in ")
        .nth(1)
        .and_then(|r| r.split(": remove it").next())
        .unwrap_or_else(|| panic!("{sentence}"));
    assert!(Path::new(dir).join("out").is_dir(), "{sentence}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn cprof_p_of_no_process_is_one_sentence() {
    let out = run(profdev().args(["cprof", "-f", "-p", "2147483647"]));
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        err,
        "cprof: no process 2147483647: -p needs the id of a running process\n"
    );
    assert!(out.stdout.is_empty());
    // And -p with a command, or without a pid: refused before anything.
    let out = run(profdev().args(["cprof", "-p", "1", "true"]));
    assert!(!out.status.success());
    let out = run(profdev().args(["cprof", "-p", "x"]));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("cprof: -p needs a process id"));
}

#[test]
fn cprof_p_of_a_process_it_may_not_trace_is_one_sentence() {
    if !gate("cprof -p PID as nobody") || !profdev_testkit::tools("cprof -p", &["setpriv"]) {
        return;
    }
    let tmp = tempdir();
    // nobody must reach the binary.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let exe = profdev_copy(tmp.path());
    // This test, root's: nobody may not ptrace it.
    let me = std::process::id();
    let out = as_nobody(&format!("exec \"$1\" cprof -f -p {me}"), &[&exe]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "cprof: not permitted to ptrace process {me}: uid 65534 may not trace a process of uid 0"
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}
