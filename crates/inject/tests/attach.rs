//! profdev-inject against real processes: a counting program with a
//! second thread blocked in read(2) (fixtures/counter.c) gets a library
//! (fixtures/probe.c) loaded and functions called, and must go on exactly
//! as before: its reader's read returns what is written afterwards, its
//! main thread keeps counting, it exits 0.

use profdev_inject::{InjectError, Target};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn compile(src: &str, out: &Path, args: &[&str]) {
    let status = Command::new("cc")
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(fixture(src))
        .status()
        .expect("cc runs");
    assert!(status.success(), "cc failed on {src}");
}

/// ptrace of our own children: allowed unless Yama forbids every attach.
fn can_ptrace() -> Result<(), String> {
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope") {
        Ok(s) if s.trim() == "3" => Err("kernel.yama.ptrace_scope is 3".into()),
        Ok(s) if s.trim() == "2" && !profdev_testkit::is_root() => {
            Err("kernel.yama.ptrace_scope is 2 and this is not root".into())
        }
        _ => Ok(()),
    }
}

struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

/// Start the counter and wait (bounded) for its "ready".
fn start(exe: &Path, marker: &Path) -> Running {
    let mut child = Command::new(exe)
        .env("INJECT_MARKER", marker)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out: ChildStdout = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(first, "ready");
    Running { child, lines }
}

impl Running {
    /// Write "go", and the program must print "ok 3" and exit 0.
    fn finish(mut self) {
        self.child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(b"go\n")
            .unwrap();
        let line = self.lines.recv_timeout(Duration::from_secs(30)).unwrap();
        assert_eq!(line, "ok 3", "the blocked read returned what was written");
        let status =
            profdev_testkit::wait_exit("the counter", &mut self.child, Duration::from_secs(30));
        assert!(status.success(), "counter exited with {status}");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Built {
    _dir: tempfile::TempDir,
    counter: PathBuf,
    probe: PathBuf,
    marker: PathBuf,
}

fn build() -> Built {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let probe = dir.path().join("probe.so");
    compile("counter.c", &counter, &["-O1", "-pthread"]);
    compile("probe.c", &probe, &["-O1", "-fPIC", "-shared"]);
    let marker = dir.path().join("marker");
    Built {
        counter,
        probe,
        marker,
        _dir: dir,
    }
}

#[test]
fn loads_a_library_and_the_process_goes_on() {
    if !profdev_testkit::privileged("inject into a running process", can_ptrace()) {
        return;
    }
    let b = build();
    let run = start(&b.counter, &b.marker);
    let pid = run.child.id();
    {
        let mut t = Target::attach(pid).unwrap();
        let threads = t.threads();
        assert_eq!(threads.len(), 2, "{threads:?}");
        assert_eq!(t.main_thread(), pid);
        for &tid in &threads {
            assert_ne!(t.pc(tid).unwrap(), 0);
        }
        let h = t.dlopen(b.probe.to_str().unwrap()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&b.marker).unwrap(),
            format!("loaded {pid}\n"),
            "the library's constructor ran in the target"
        );
        let add = t.dlsym(h, "probe_add").unwrap();
        // Every argument register in its place.
        assert_eq!(t.call(pid, add, &[1, 2, 3, 4, 5, 6]).unwrap(), 91);
        // In the thread blocked in read(2), too.
        let reader = threads[1];
        assert_eq!(t.call(reader, add, &[1, 0, 0, 0, 0, 10]).unwrap(), 61);
        // A string on the stack, read by the C library.
        // (strlen is an IFUNC: dlsym resolves it, RTLD_DEFAULT = 0.)
        let strlen = t.dlsym(0, "strlen").unwrap();
        assert_ne!(strlen, t.libc_symbol("strlen").unwrap());
        let atoi = t.libc_symbol("atoi").unwrap();
        let n = t.write_string(reader, "4711").unwrap();
        assert_eq!(t.call(reader, atoi, &[n]).unwrap(), 4711);
        let s = t.write_string(pid, "hello, target").unwrap();
        assert_eq!(t.call(pid, strlen, &[s]).unwrap(), 13);
        assert_eq!(t.read_string(s, 100).unwrap(), "hello, target");
        // A missing symbol: one sentence with dlerror's text.
        let e = t.dlsym(h, "no_such_symbol").unwrap_err();
        assert!(
            matches!(e, InjectError::Symbol { .. }) && e.to_string().contains("no_such_symbol"),
            "{e}"
        );
    }
    run.finish();
}

#[test]
fn attach_twice_and_a_failed_dlopen() {
    if !profdev_testkit::privileged("inject into a running process", can_ptrace()) {
        return;
    }
    let b = build();
    let run = start(&b.counter, &b.marker);
    let pid = run.child.id();
    for _ in 0..2 {
        let mut t = Target::attach(pid).unwrap();
        // The same tracer again: the kernel says EPERM, we say who holds it.
        match Target::attach(pid) {
            Err(InjectError::AlreadyTraced { tracer, .. }) => {
                // The tracer is this test's thread.
                // SAFETY: gettid has no preconditions.
                let me = unsafe { libc::gettid() };
                assert_eq!(tracer as i32, me)
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("attached twice"),
        }
        let e = t.dlopen("/nonexistent/libnothing.so").unwrap_err();
        assert!(
            matches!(e, InjectError::Dlopen { .. })
                && e.to_string().contains("No such file or directory"),
            "{e}"
        );
    }
    run.finish();
}

#[test]
fn no_such_process() {
    match Target::attach(i32::MAX as u32) {
        Err(InjectError::NoProcess(p)) => assert_eq!(p, i32::MAX as u32),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("attached to nothing"),
    }
}

#[test]
fn a_static_binary_is_out_of_reach() {
    if !profdev_testkit::privileged("inject into a running process", can_ptrace()) {
        return;
    }
    let b = build();
    let exe = b.counter.with_file_name("counter-static");
    compile("counter.c", &exe, &["-O1", "-pthread", "-static"]);
    let run = start(&exe, &b.marker);
    {
        let mut t = Target::attach(run.child.id()).unwrap();
        let e = t.dlopen(b.probe.to_str().unwrap()).unwrap_err();
        assert!(matches!(e, InjectError::Static(_)), "{e}");
        assert!(e.to_string().contains("statically linked"), "{e}");
    }
    run.finish();
}

#[test]
fn not_permitted() {
    // Kernel threads can never be traced, not even by root: EPERM.
    let kthreadd = std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd");
    let gate = kthreadd
        .then_some(())
        .ok_or_else(|| "pid 2 is not kthreadd (a pid namespace)".to_string());
    if !profdev_testkit::privileged("ptrace refused", gate) {
        return;
    }
    match Target::attach(2) {
        Err(e @ InjectError::NotPermitted { .. }) => {
            assert!(
                e.to_string()
                    .starts_with("not permitted to ptrace process 2: "),
                "{e}"
            );
            assert_eq!(e.errno(), libc::EPERM);
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("attached to a kernel thread"),
    }
}

#[test]
fn a_target_never_detached_is_released_when_the_tracer_thread_ends() {
    if !profdev_testkit::privileged("inject into a running process", can_ptrace()) {
        return;
    }
    let b = build();
    let run = start(&b.counter, &b.marker);
    let pid = run.child.id();
    profdev_inject::on_tracer_thread(|| {
        let t = Target::attach(pid).unwrap();
        assert_eq!(t.threads().len(), 2);
        // As if a thread had never stopped: no detach at all.
        std::mem::forget(t);
    });
    // The kernel detached both threads when the tracer thread ended.
    run.finish();
}
