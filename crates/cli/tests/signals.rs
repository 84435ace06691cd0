//! Signals: `profdev sample`, `gmon` and `prof` run CMD in its own process
//! group, pass SIGINT, SIGTERM and SIGHUP on to it, end it within a bounded
//! time, write what they gathered and exit with 128 + the signal; no
//! process CMD started survives (see `crates/sample/src/job.rs`). `cprof`
//! of a static program (traced: `profdev_coverage::traced`) gives CMD the
//! terminal and follows its ^Z the same way.
//!
//! The workload (built here from C) spins in `hot` for 0.2 s of CPU time,
//! so every profile has samples, then forks a child that stays in its
//! process group and one that leaves it with setsid(), records the three
//! pids in a file, and spins until killed. Tests wait for that file (a poll
//! with a deadline), signal profdev, wait for it to exit (with a deadline)
//! and check the profile with its reader, the exit status, and that none of
//! the three processes and nothing of CMD's process group is left.

mod common;
use common::*;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const WORKLOAD: &str = r#"
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

/* Spin; return after `cpu` seconds of this process's CPU time (never if 0). */
__attribute__((noinline)) void hot(double cpu)
{
    struct timespec t;
    for (;;) {
        for (int i = 0; i < 100000; i++)
            sink = sink * 6364136223846793005UL + 1442695040888963407UL;
        if (cpu > 0) {
            clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
            if (t.tv_sec + t.tv_nsec / 1e9 >= cpu)
                return;
        }
    }
}

/* argv[1]: the pid file; argv[2]: "plain", or "stubborn" to ignore
   SIGINT, SIGTERM and SIGHUP (in all three processes). */
int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    if (strcmp(argv[2], "stubborn") == 0) {
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
    }
    hot(0.2);
    pid_t kid = fork();
    if (kid == 0)
        hot(0);
    int p[2];
    if (pipe(p) != 0)
        return 3;
    pid_t away = fork();
    if (away == 0) {
        setsid();
        close(p[0]);
        if (write(p[1], "x", 1) != 1)
            return 4;
        close(p[1]);
        hot(0);
    }
    close(p[1]);
    char c;
    if (read(p[0], &c, 1) != 1)
        return 5;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return 6;
    fprintf(f, "%d %d %d\n", (int)getpid(), (int)kid, (int)away);
    fclose(f);
    rename(tmp, argv[1]);
    hot(0);
}
"#;

/// How long anything here may take before the test fails.
const BOUND: Duration = Duration::from_secs(60);

/// The workload binary, built once per test process.
fn workload() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let src = dir.join("spin.c");
        std::fs::write(&src, WORKLOAD).unwrap();
        let exe = dir.join("spin");
        let o = Command::new("cc")
            .args(["-g", "-O1", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("running cc");
        assert!(o.status.success(), "cc: {o:?}");
        exe
    })
}

/// The workload linked statically (cprof's traced route), built once per
/// test process; None without libc.a.
fn static_workload() -> Option<&'static Path> {
    static EXE: OnceLock<Option<PathBuf>> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let src = dir.join("spin.c");
        std::fs::write(&src, WORKLOAD).unwrap();
        let exe = dir.join("spin-static");
        let o = Command::new("cc")
            .args(["-g", "-O1", "-static", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .expect("running cc");
        o.status.success().then_some(exe)
    })
    .as_deref()
}

/// Can this process sample system wide (which covers its children)?
fn ready(what: &str) -> bool {
    privileged(what, can_sample_system())
}

#[derive(Clone, Copy, Debug)]
enum Cmd {
    Sample,
    Gmon,
    Prof,
    /// `cprof` of the static workload (its traced route).
    CprofStatic,
}

/// One run: its directory, the pid file, and where stdout and stderr go.
struct Run {
    dir: tempfile::TempDir,
    cmd: Cmd,
    /// The processes the test started, to kill if the test fails.
    started: std::cell::RefCell<Vec<i32>>,
}

impl Drop for Run {
    /// A failing test leaves nothing running: kill what it started and
    /// every process the workload recorded, with their groups.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut victims: Vec<i32> = self.started.borrow().clone();
        victims.extend(self.pids().into_iter().flatten());
        for p in victims {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(-p, libc::SIGKILL);
                libc::kill(p, libc::SIGKILL);
            }
        }
    }
}

impl Run {
    fn new(cmd: Cmd) -> Self {
        Run {
            dir: tempdir(),
            cmd,
            started: Default::default(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `profdev CMD ... -- spin PIDFILE MODE` as arguments.
    fn args(&self, mode: &str) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = match self.cmd {
            Cmd::Sample => vec!["sample".into(), "-o".into(), self.path("out").into()],
            Cmd::Gmon => vec!["gmon".into(), "-o".into(), self.path("gmon.out").into()],
            Cmd::Prof => vec!["prof".into(), "-f".into()],
            Cmd::CprofStatic => vec!["cprof".into(), "-o".into(), self.path("listing").into()],
        };
        a.push("--".into());
        a.push(match self.cmd {
            Cmd::CprofStatic => static_workload().expect("libc.a").into(),
            _ => workload().into(),
        });
        a.push(self.path("pids").into());
        a.push(mode.into());
        a
    }

    /// The same, quoted for a shell.
    fn command_line(&self, mode: &str) -> String {
        std::iter::once(std::ffi::OsString::from(env!("CARGO_BIN_EXE_profdev")))
            .chain(self.args(mode))
            .map(|a| format!("'{}'", a.to_str().unwrap()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn stdio(&self, c: &mut Command) {
        c.stdin(Stdio::null())
            .stdout(std::fs::File::create(self.path("stdout")).unwrap())
            .stderr(std::fs::File::create(self.path("stderr")).unwrap());
    }

    fn start(&self, mode: &str) -> Child {
        let mut c = profdev();
        c.args(self.args(mode));
        self.stdio(&mut c);
        self.spawn(&mut c)
    }

    /// Spawn `c`, remembering it for the clean-up of a failed test. The
    /// signals the tests send start with their default dispositions, as a
    /// user's shell gives them: a runner that started the test suite with
    /// them ignored (`cmd &` in a non-interactive shell, nohup) must not
    /// change what is tested. (The nohup test's `nohup` ignores SIGHUP
    /// again itself, after this.)
    fn spawn(&self, c: &mut Command) -> Child {
        // SAFETY: signal is async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let child = c.spawn().unwrap();
        self.started.borrow_mut().push(child.id() as i32);
        child
    }

    /// The workload's three pids, once it has written them.
    fn wait_for_pids(&self, child: &mut Child) -> [i32; 3] {
        let deadline = Instant::now() + BOUND;
        loop {
            if let Ok(s) = std::fs::read_to_string(self.path("pids")) {
                let v: Vec<i32> = s.split_whitespace().map(|w| w.parse().unwrap()).collect();
                return v.try_into().unwrap();
            }
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "profdev exited ({st}) before the workload ran: {}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the workload did not start in {BOUND:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn pids(&self) -> Option<[i32; 3]> {
        let s = std::fs::read_to_string(self.path("pids")).ok()?;
        let v: Vec<i32> = s.split_whitespace().map(|w| w.parse().unwrap()).collect();
        v.try_into().ok()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.path("stderr")).unwrap_or_default()
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(self.path("stdout")).unwrap_or_default()
    }

    /// The profile is there and its reader accepts it.
    fn check_profile(&self) {
        match self.cmd {
            Cmd::Sample => {
                let kpdata = self.path("out/kpdata");
                let bytes = std::fs::read(&kpdata).expect("kpdata was written");
                profdev_formats::kpdata::Kpdata::parse(&bytes).expect("kpdata parses");
                let o = run(profdev().arg("kprof").arg("/proc/kallsyms").arg(&kpdata));
                assert!(o.status.success(), "profdev kprof: {o:?}");
                kprof_top(&String::from_utf8_lossy(&o.stdout), 1);
                // The report went to stderr (a file, or the terminal of
                // the terminal tests, which leave none), not into CMD's
                // stdout.
                let err = self.stderr();
                assert!(
                    err.is_empty() || err.lines().any(|l| l.starts_with("total: ")),
                    "{err}"
                );
                assert!(self.stdout().is_empty(), "{}", self.stdout());
            }
            Cmd::Gmon => {
                let out = self.path("gmon.out");
                let bytes = std::fs::read(&out).expect("gmon.out was written");
                profdev_formats::gmon::parse(&bytes, profdev_formats::gmon::Target::X86_64)
                    .expect("gmon.out parses");
                let o = run(Command::new("gprof")
                    .args(["-b", "-p"])
                    .arg(workload())
                    .arg(&out));
                assert!(o.status.success(), "gprof: {o:?}");
                let flat = String::from_utf8_lossy(&o.stdout);
                assert!(
                    flat.lines()
                        .any(|l| l.split_whitespace().last() == Some("hot")),
                    "gprof's flat profile names hot:\n{flat}"
                );
            }
            Cmd::Prof => {
                // The listing goes to stderr when prof runs CMD.
                let out = self.stderr();
                assert!(
                    out.contains("**** module sampling points"),
                    "prof printed its listing:\n{out}\n{}",
                    self.stderr()
                );
                assert!(out.contains("hot("), "the listing names hot:\n{out}");
            }
            Cmd::CprofStatic => {
                let out = std::fs::read_to_string(self.path("listing")).unwrap_or_default();
                assert!(
                    out.contains("hot(double cpu)"),
                    "cprof listed the workload's source:\n{out}\n{}",
                    self.stderr()
                );
            }
        }
    }
}

/// Wait for `child` to exit, at most BOUND.
fn wait_bounded(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("profdev did not exit within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// None of `pids` exists any more, and no process is in the group of the
/// first (CMD, its group's leader).
fn assert_all_gone(pids: [i32; 3]) {
    for p in pids {
        // The processes were re-parented to profdev, which reaped them
        // before exiting: no zombie is left either.
        assert!(
            !Path::new(&format!("/proc/{p}")).exists(),
            "process {p} of the workload survived: {:?}",
            std::fs::read_to_string(format!("/proc/{p}/stat"))
        );
    }
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(-pids[0], 0) };
    let err = std::io::Error::last_os_error().raw_os_error();
    assert!(
        r == -1 && err == Some(libc::ESRCH),
        "CMD's process group {} still has members",
        pids[0]
    );
}

fn send(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

/// Signal profdev while the workload runs; check everything.
fn interrupted(cmd: Cmd, sig: i32, mode: &str) -> Run {
    let r = Run::new(cmd);
    let mut child = r.start(mode);
    let pids = r.wait_for_pids(&mut child);
    send(child.id(), sig);
    let status = wait_bounded(&mut child);
    let err = r.stderr();
    assert_eq!(
        status.code(),
        Some(128 + sig),
        "profdev's status after signal {sig}: {status}; stderr: {err}"
    );
    assert_all_gone(pids);
    r.check_profile();
    let name = match cmd {
        Cmd::Sample => "profdev sample",
        Cmd::Gmon => "profdev gmon",
        Cmd::Prof => "prof",
        Cmd::CprofStatic => "cprof",
    };
    let signame = match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "SIGHUP",
    };
    assert!(
        err.lines()
            .any(|l| l.starts_with(&format!("{name}: interrupted by {signame}; "))),
        "the one sentence saying so: {err}"
    );
    r
}

macro_rules! matrix {
    ($($name:ident: $cmd:expr, $sig:expr;)*) => {$(
        #[test]
        fn $name() {
            if ready(stringify!($name)) {
                let r = interrupted($cmd, $sig, "plain");
                assert!(
                    r.stderr().contains("; CMD's process group was ended; "),
                    "{}",
                    r.stderr()
                );
            }
        }
    )*};
}

matrix! {
    sample_sigint: Cmd::Sample, libc::SIGINT;
    sample_sigterm: Cmd::Sample, libc::SIGTERM;
    sample_sighup: Cmd::Sample, libc::SIGHUP;
    gmon_sigint: Cmd::Gmon, libc::SIGINT;
    gmon_sigterm: Cmd::Gmon, libc::SIGTERM;
    gmon_sighup: Cmd::Gmon, libc::SIGHUP;
    prof_sigint: Cmd::Prof, libc::SIGINT;
    prof_sigterm: Cmd::Prof, libc::SIGTERM;
    prof_sighup: Cmd::Prof, libc::SIGHUP;
}

/// A workload that ignores the signal is killed with SIGKILL after the
/// grace period; the one that left the group with setsid() too.
#[test]
fn stubborn_workload_is_killed() {
    for cmd in [Cmd::Sample, Cmd::Gmon] {
        if !ready("stubborn_workload_is_killed") {
            return;
        }
        let r = interrupted(cmd, libc::SIGTERM, "stubborn");
        assert!(
            r.stderr()
                .contains("; CMD's process group was killed with SIGKILL after 2 s; "),
            "{}",
            r.stderr()
        );
    }
}

/// `timeout --preserve-status 600 profdev CMD ...` ended by timeout's
/// SIGTERM: a complete profile and status 143. timeout passes a SIGTERM
/// it receives on to profdev (to profdev, then to its own process group,
/// each followed by SIGCONT) in the same handler, and the same way, as the
/// SIGTERM it sends when its time is up; so the test sends timeout SIGTERM
/// once the workload has recorded its pids, rather than racing a short
/// duration against profdev's start and the workload's 0.2 s of CPU time
/// on a loaded machine.
fn timed_out(cmd: Cmd) {
    let r = Run::new(cmd);
    let mut c = Command::new("timeout");
    c.args(["--preserve-status", "600"])
        .arg(env!("CARGO_BIN_EXE_profdev"))
        .args(r.args("plain"));
    r.stdio(&mut c);
    let mut child = r.spawn(&mut c);
    let pids = r.wait_for_pids(&mut child);
    send(child.id(), libc::SIGTERM);
    let status = wait_bounded(&mut child);
    assert_eq!(status.code(), Some(143), "{}", r.stderr());
    assert_all_gone(pids);
    r.check_profile();
}

#[test]
fn sample_timed_out() {
    if ready("sample_timed_out") {
        timed_out(Cmd::Sample);
    }
}

#[test]
fn gmon_timed_out() {
    if ready("gmon_timed_out") {
        timed_out(Cmd::Gmon);
    }
}

#[test]
fn prof_timed_out() {
    if ready("prof_timed_out") {
        timed_out(Cmd::Prof);
    }
}

/// A profdev in the background, in its own session with no terminal at
/// all (as `setsid profdev ... &`), ends on SIGINT.
#[test]
fn background_sigint_ends_it() {
    if !ready("background_sigint_ends_it") {
        return;
    }
    let r = Run::new(Cmd::Sample);
    let mut c = profdev();
    c.args(r.args("plain"));
    r.stdio(&mut c);
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = r.spawn(&mut c);
    let pids = r.wait_for_pids(&mut child);
    send(child.id(), libc::SIGINT);
    let status = wait_bounded(&mut child);
    assert_eq!(status.code(), Some(130), "{}", r.stderr());
    assert_all_gone(pids);
    r.check_profile();
}

/// A signal that was ignored when profdev started (as `nohup` leaves
/// SIGHUP) stays ignored, by profdev and by CMD.
#[test]
fn ignored_sighup_stays_ignored() {
    if !ready("ignored_sighup_stays_ignored") {
        return;
    }
    let r = Run::new(Cmd::Sample);
    let mut c = Command::new("nohup");
    c.arg(env!("CARGO_BIN_EXE_profdev")).args(r.args("plain"));
    r.stdio(&mut c);
    let mut child = r.spawn(&mut c);
    let pids = r.wait_for_pids(&mut child);
    // profdev neither catches SIGHUP nor lets it end the run: it is in
    // profdev's and in CMD's mask of ignored signals.
    for pid in [child.id() as i32, pids[0]] {
        let mask = |field: &str| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let hex = status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .unwrap()
                .to_string();
            u64::from_str_radix(&hex, 16).unwrap()
        };
        let hup = 1u64 << (libc::SIGHUP - 1);
        assert_ne!(mask("SigIgn:\t") & hup, 0, "SIGHUP ignored by {pid}");
        assert_eq!(mask("SigCgt:\t") & hup, 0, "SIGHUP not caught by {pid}");
    }
    send(child.id(), libc::SIGHUP);
    send(child.id(), libc::SIGTERM);
    let status = wait_bounded(&mut child);
    assert_eq!(status.code(), Some(143), "{}", r.stderr());
    assert_all_gone(pids);
    r.check_profile();
}

/// When profdev dies by SIGKILL, CMD dies with it (PR_SET_PDEATHSIG).
#[test]
fn cmd_dies_with_a_killed_profdev() {
    if !ready("cmd_dies_with_a_killed_profdev") {
        return;
    }
    let r = Run::new(Cmd::Sample);
    let mut child = r.start("plain");
    let pids = r.wait_for_pids(&mut child);
    send(child.id(), libc::SIGKILL);
    assert_eq!(wait_bounded(&mut child).signal(), Some(libc::SIGKILL));
    // CMD itself goes at once; its children are beyond PR_SET_PDEATHSIG's
    // reach (documented), so end them here.
    wait_gone(pids[0]);
    for p in &pids[1..] {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(*p, libc::SIGKILL);
        }
    }
}

/// Wait (bounded) until process `pid` is gone or a zombie (dead, waiting
/// for whichever process it was re-parented to to reap it).
fn wait_gone(pid: i32) {
    let deadline = Instant::now() + BOUND;
    loop {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return;
        };
        if stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
        {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} survived: {stat}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Through a pseudo-terminal: CMD's group is the terminal's foreground
/// group while it runs, so ^C reaches CMD (once) and not profdev, whose
/// status is then CMD's (130) and who writes the profile; afterwards the
/// terminal is given back to the group profdev was started in.
#[test]
fn terminal_ctrl_c_reaches_cmd_alone() {
    if !ready("terminal_ctrl_c_reaches_cmd_alone") {
        return;
    }
    let (mut master, slave) = openpty();
    let r = Run::new(Cmd::Sample);
    // A session on the terminal whose leader runs profdev in its own
    // (foreground) group, then reports the terminal's foreground group and
    // its own group (fields 8 and 5 of /proc/PID/stat).
    let args: Vec<String> = r
        .args("plain")
        .iter()
        .map(|a| format!("'{}'", a.to_str().unwrap()))
        .collect();
    let script = format!(
        "'{}' {} ; echo $? > '{}'; cut -d' ' -f5,8 /proc/$$/stat > '{}'",
        env!("CARGO_BIN_EXE_profdev"),
        args.join(" "),
        r.path("status").display(),
        r.path("fg").display(),
    );
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    r.stdio(&mut c);
    c.stdin(Stdio::from(slave.try_clone().unwrap()));
    // SAFETY: setsid and ioctl are async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = r.spawn(&mut c);
    drop(slave);
    let pids = r.wait_for_pids(&mut child);
    // SAFETY: tcgetpgrp on the master queries the slave's foreground group.
    let fg = unsafe { libc::tcgetpgrp(master.as_raw_fd()) };
    assert_eq!(fg, pids[0], "CMD's group is the terminal's foreground");
    master.write_all(b"\x03").unwrap();
    let status = wait_bounded(&mut child);
    assert!(status.success(), "the shell: {status} {}", r.stderr());
    let code = std::fs::read_to_string(r.path("status")).unwrap();
    assert_eq!(code.trim(), "130", "CMD's status: {}", r.stderr());
    assert!(
        !r.stderr().contains("interrupted by"),
        "profdev itself got no signal: {}",
        r.stderr()
    );
    let fg = std::fs::read_to_string(r.path("fg")).unwrap();
    let v: Vec<&str> = fg.split_whitespace().collect();
    assert_eq!(
        v[0], v[1],
        "the terminal was given back to the shell's group"
    );
    // ^C went to CMD's group: CMD and the child in its group are gone. The
    // child that left the group with setsid() got no ^C and runs on, as
    // after any ^C in a shell: end it here.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pids[2], libc::SIGKILL);
    }
    for p in pids {
        wait_gone(p);
    }
    r.check_profile();
}

/// Job control through an interactive bash on a pseudo-terminal: ^Z stops
/// CMD and profdev, and bash says so and gets the terminal back; `fg`
/// continues both with CMD in the foreground again; ^C then ends CMD, and
/// profdev, not signalled itself, writes the profile and exits with 130.
#[test]
fn terminal_job_control() {
    if !ready("terminal_job_control") {
        return;
    }
    job_control(Run::new(Cmd::Sample), false);
}

/// The same job control for `cprof` of a static program, whose route
/// traces CMD (the tracer's waits see CMD's stops, not a Job's): CMD runs
/// in its own group holding the terminal, ^Z stops CMD and cprof and bash
/// gets the terminal back, `fg` continues CMD in the foreground, and ^C
/// reaches CMD alone; cprof lists what ran and exits with 130.
#[test]
fn terminal_job_control_of_a_static_program_under_cprof() {
    let what = "terminal_job_control_of_a_static_program_under_cprof";
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").unwrap_or_default();
    let can = if scope.trim() == "3" {
        Err("kernel.yama.ptrace_scope is 3: no ptrace at all".to_string())
    } else if static_workload().is_none() {
        Err("cc -static failed: libc.a (libc6-dev) is not installed".to_string())
    } else {
        Ok(())
    };
    if !privileged(what, can) || !profdev_testkit::tools(what, &["cc", "bash"]) {
        return;
    }
    job_control(Run::new(Cmd::CprofStatic), true);
}

/// ^Z, `jobs`, `fg` and ^C through an interactive bash for run `r` (see
/// the two tests above). traced: CMD is traced by the profiler (cprof's
/// static route), so a stopped CMD may show 't', and the child that left
/// CMD's group, which gets no ^C and which the tracer follows to its end,
/// is killed before the ^C rather than after.
fn job_control(r: Run, traced: bool) {
    let mut sh = Bash::start(&r);
    let bash_pid = sh.child.id() as i32;
    sh.type_in(&format!(
        "{} >'{}' 2>'{}'\n",
        r.command_line("plain"),
        r.path("stdout").display(),
        r.path("stderr").display()
    ));
    let pids = r.wait_for_pids(&mut sh.child);
    let profiler = parent_of(pids[0]);
    r.started.borrow_mut().push(profiler);
    let master_fd = sh.master_fd;
    // SAFETY: tcgetpgrp on the master queries the slave's foreground group.
    let foreground = || unsafe { libc::tcgetpgrp(master_fd) };
    poll_until("CMD's group holds the terminal", || foreground() == pids[0]);
    // A traced process in a group stop shows 't' (held by the tracer).
    let stopped = |p| matches!(state(p), Some('T')) || traced && state(p) == Some('t');

    sh.type_in("\x1a");
    poll_until("^Z stopped CMD and the profiler", || {
        stopped(pids[0]) && state(profiler) == Some('T')
    });
    poll_until("bash has the terminal back", || foreground() == bash_pid);
    sh.type_in(&format!("jobs -l >'{}'\n", r.path("jobs").display()));
    poll_until("bash lists the stopped job", || {
        std::fs::read_to_string(r.path("jobs")).is_ok_and(|j| j.contains("Stopped"))
    });

    sh.type_in("fg\n");
    poll_until("fg continued CMD in the foreground", || {
        foreground() == pids[0] && state(pids[0]) == Some('R')
    });

    // The child that left CMD's group gets no ^C: it is ended here.
    // SAFETY: kill has no memory-safety preconditions.
    let end_loner = || unsafe {
        libc::kill(pids[2], libc::SIGKILL);
    };
    if traced {
        end_loner();
    }
    sh.type_in("\x03");
    poll_until("^C ended the profiler", || state(profiler).is_none());
    sh.type_in(&format!(
        "echo $? >'{}'; exit\n",
        r.path("status").display()
    ));
    let status = wait_bounded(&mut sh.child);
    assert!(status.success(), "bash: {status}");
    let code = std::fs::read_to_string(r.path("status")).unwrap();
    assert_eq!(code.trim(), "130", "CMD's status: {}", r.stderr());
    assert!(
        !r.stderr().contains("interrupted by"),
        "the profiler itself got no signal: {}",
        r.stderr()
    );
    if !traced {
        end_loner();
    }
    for p in pids {
        wait_gone(p);
    }
    r.check_profile();
}

/// With `stty tostop`, a background process that writes to the terminal
/// is stopped. profdev is one while CMD holds the terminal, and sample
/// writes its progress line there: it must not stop.
#[test]
fn terminal_tostop_does_not_stop_profdev() {
    if !ready("terminal_tostop_does_not_stop_profdev") {
        return;
    }
    let r = Run::new(Cmd::Sample);
    let mut sh = Bash::start(&r);
    sh.type_in("stty tostop\n");
    // Standard error stays the terminal: the progress line goes there.
    sh.type_in(&format!(
        "{} >'{}'\n",
        r.command_line("plain"),
        r.path("stdout").display(),
    ));
    let pids = r.wait_for_pids(&mut sh.child);
    let profdev_pid = parent_of(pids[0]);
    r.started.borrow_mut().push(profdev_pid);
    poll_until("sample's progress line reached the terminal", || {
        sh.screen().contains(" samples, ")
    });
    assert_ne!(state(profdev_pid), Some('T'), "profdev was stopped");
    sh.type_in("\x03");
    poll_until("^C ended profdev", || state(profdev_pid).is_none());
    sh.type_in(&format!(
        "echo $? >'{}'; exit\n",
        r.path("status").display()
    ));
    let status = wait_bounded(&mut sh.child);
    assert!(status.success(), "bash: {status}");
    let code = std::fs::read_to_string(r.path("status")).unwrap();
    assert_eq!(code.trim(), "130", "{}", sh.screen());
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(pids[2], libc::SIGKILL);
    }
    for p in pids {
        wait_gone(p);
    }
    r.check_profile();
}

/// Started in the background (`&`), CMD is stopped when it reads the
/// terminal, and so is profdev, as any background job; `fg` gives CMD the
/// terminal and continues it, and it reads what is typed.
#[test]
fn terminal_background_then_fg() {
    if !ready("terminal_background_then_fg") {
        return;
    }
    let r = Run::new(Cmd::Sample);
    std::fs::write(
        r.path("cmd.sh"),
        format!(
            "echo $$ >'{0}.tmp'; mv '{0}.tmp' '{0}'; read x; echo \"got:$x\" >'{1}'\n",
            r.path("shpid").display(),
            r.path("got").display()
        ),
    )
    .unwrap();
    let mut sh = Bash::start(&r);
    let bash_pid = sh.child.id() as i32;
    sh.type_in(&format!(
        "'{}' sample -o '{}' -- sh '{}' >'{}' 2>'{}' &\n",
        env!("CARGO_BIN_EXE_profdev"),
        r.path("out").display(),
        r.path("cmd.sh").display(),
        r.path("stdout").display(),
        r.path("stderr").display()
    ));
    let mut cmd_pid = 0;
    poll_until("CMD started", || {
        std::fs::read_to_string(r.path("shpid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .map(|p| cmd_pid = p)
            .is_some()
    });
    let profdev_pid = parent_of(cmd_pid);
    r.started.borrow_mut().extend([cmd_pid, profdev_pid]);
    poll_until(
        "CMD, reading from the background, and profdev stopped",
        || state(cmd_pid) == Some('T') && state(profdev_pid) == Some('T'),
    );
    // SAFETY: tcgetpgrp on the master queries the slave's foreground group.
    let foreground = |fd| unsafe { libc::tcgetpgrp(fd) };
    assert_eq!(foreground(sh.master_fd), bash_pid);
    sh.type_in("fg\n");
    poll_until("fg gave CMD the terminal", || {
        foreground(sh.master_fd) == cmd_pid
    });
    sh.type_in("hello\n");
    poll_until("CMD read the line", || {
        std::fs::read_to_string(r.path("got")).is_ok_and(|g| g == "got:hello\n")
    });
    poll_until("profdev ended", || state(profdev_pid).is_none());
    sh.type_in(&format!(
        "echo $? >'{}'; exit\n",
        r.path("status").display()
    ));
    let status = wait_bounded(&mut sh.child);
    assert!(status.success(), "bash: {status}");
    let code = std::fs::read_to_string(r.path("status")).unwrap();
    assert_eq!(code.trim(), "0", "{}\n{}", r.stderr(), sh.screen());
    r.check_profile();
}

/// An interactive bash on a fresh pseudo-terminal, its output collected.
struct Bash {
    child: Child,
    master: std::fs::File,
    master_fd: i32,
    screen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Bash {
    fn start(r: &Run) -> Bash {
        let (master, slave) = openpty();
        let mut c = Command::new("bash");
        c.args(["--norc", "--noprofile", "-i"])
            .env("PS1", "$ ")
            .env("HISTFILE", "/dev/null")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave.try_clone().unwrap()));
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            c.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = r.spawn(&mut c);
        drop(slave);
        // Drain the terminal so that bash never blocks writing to it.
        let mut reader = master.try_clone().unwrap();
        let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let copy = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut reader, &mut buf) {
                copy.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Bash {
            child,
            master_fd: master.as_raw_fd(),
            master,
            screen,
        }
    }

    fn type_in(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }
}

/// Wait (bounded) for `cond`.
fn poll_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The fields of /proc/PID/stat after the command name.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Process `pid`'s state letter (R, S, T, Z, ...), None once it is gone.
fn state(pid: i32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

fn parent_of(pid: i32) -> i32 {
    stat_fields(pid).unwrap()[1].parse().unwrap()
}

fn openpty() -> (std::fs::File, OwnedFd) {
    let (mut m, mut s) = (0, 0);
    // SAFETY: openpty writes two descriptors into our locals; the name,
    // termios and winsize arguments may be null.
    let rc = unsafe {
        libc::openpty(
            &mut m,
            &mut s,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors are fresh and ours alone.
    unsafe { (std::fs::File::from_raw_fd(m), OwnedFd::from_raw_fd(s)) }
}
