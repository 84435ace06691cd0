//! `profdev mprof -p PID` lets the process go on uncounted: interrupted,
//! or at `--snapshot SECONDS`, it shows what was counted, then detaches
//! (tests/data/mprof/detach.c: its GOT's malloc is the library's while
//! attached and the C library's again after; it forks and allocates
//! normally after the detach, and ends with status 0). A process once
//! attached is not attached again (its library stays loaded), in one
//! sentence. The prof device's `stop` detaches a `startmp1 PID` alike.

mod common;

use common::Prog;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("detach");
    common::cc_mprof_fixture("detach.c", &["-g", "-O0", "-ldl"], &exe);
    exe
}

/// `profdev mprof -l -o - -p PID EXTRA...`, started; its first stderr
/// line (the attach) read.
fn attach(pid: u32, extra: &[&str]) -> (Child, String) {
    let mut m = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-l", "-o", "-", "-p", &pid.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(m.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (m, line)
}

/// Root, to attach to a process that is not mprof's child (whatever
/// ptrace_scope says), and a C compiler.
fn attachable() -> bool {
    profdev_testkit::privileged("mprof -p's detach", common::can_attach_any())
        && profdev_testkit::tools("mprof -p's detach", &["cc"])
}

/// The rest of mprof's output once it has exited: (status, stdout, stderr).
fn finish(mut m: Child) -> (Option<i32>, String, String) {
    let status = profdev_testkit::wait_exit("mprof", &mut m, Duration::from_secs(120));
    let mut out = String::new();
    std::io::Read::read_to_string(m.stdout.as_mut().unwrap(), &mut out).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(m.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code(), out, err)
}

/// The names of `pid`'s threads.
fn threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
                .map(|c| c.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn interrupted_mprof_shows_the_counts_and_detaches() {
    if !attachable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut p = Prog::start(&build(dir.path()));
    assert_eq!(p.ask("w"), "malloc in libc.so.6");
    let (m, first) = attach(p.pid, &[]);
    assert!(first.contains("attached to process"), "{first}");
    assert_eq!(
        p.ask("w"),
        "malloc in libprofdev_mprof.so",
        "its GOT redirected"
    );
    let reporter = |c: &String| c == "profdev-mprof";
    assert!(threads(p.pid).iter().any(reporter), "the reporter runs");
    assert_eq!(p.ask("a"), "allocated 3");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(m.id() as i32, libc::SIGINT) }, 0);
    let (code, out, err) = finish(m);
    assert_eq!(code, Some(130), "{err}");
    let row = out
        .lines()
        .find(|l| l.contains("the allocating line"))
        .unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = row.split('\t').collect();
    assert_eq!(&cols[1..3], ["233331", "233331"], "3 x 77,777 bytes: {row}");
    assert!(err.contains("it was detached and runs on"), "{err}");
    // Unhooked: the C library's malloc again; it allocates and forks;
    // the library's reporter thread has ended.
    assert_eq!(p.ask("w"), "malloc in libc.so.6", "its GOT given back");
    profdev_testkit::wait_until("the reporter thread's end", Duration::from_secs(60), || {
        !threads(p.pid).iter().any(|c| c == "profdev-mprof")
    });
    assert_eq!(p.ask("a"), "allocated 6");
    assert_eq!(p.ask("f"), "forked 7");
    // Attached once: a second attach is refused in one sentence.
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-o", "-", "-p", &p.pid.to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("was detached: a process is attached once"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    p.quit();
}

#[test]
fn a_snapshot_shows_what_was_counted_and_detaches() {
    if !attachable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut p = Prog::start(&build(dir.path()));
    // Long enough for one command on a busy machine; the wait for it is
    // mprof's own.
    let (m, first) = attach(p.pid, &["--snapshot", "10"]);
    assert!(first.contains("its tables are shown in 10.0 s"), "{first}");
    assert_eq!(p.ask("a"), "allocated 3");
    let (code, out, err) = finish(m);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("the allocating line") && l.contains("\t233331\t")),
        "{out}"
    );
    assert!(
        err.contains("it was detached and runs on, no longer counted"),
        "{err}"
    );
    assert_eq!(p.ask("w"), "malloc in libc.so.6");
    assert_eq!(p.ask("f"), "forked 7");
    p.quit();
}

#[test]
fn the_devices_stop_detaches_the_process() {
    if !common::privileged("startmp1 PID through the mount", common::can_mount())
        || !profdev_testkit::tools("startmp1 PID through the mount", &["cc"])
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut p = Prog::start(&build(dir.path()));
    let m = common::Mount::new();
    m.ctl("module detach\n").unwrap();
    m.ctl(format!("startmp1 {}\n", p.pid)).unwrap();
    assert_eq!(p.ask("w"), "malloc in libprofdev_mprof.so");
    assert_eq!(p.ask("a"), "allocated 3");
    m.ctl("stop\n").unwrap();
    let rec = m.record("detach").expect("stop filled the histogram");
    // One pair per read, as the seed's layout has it.
    let mut f = std::fs::File::open(rec.join("histogram")).unwrap();
    let mut pairs = Vec::new();
    loop {
        let mut buf = [0u8; 64];
        let n = std::io::Read::read(&mut f, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        pairs.push(profdev_formats::prof_histogram::parse_pair(&buf[..n]).unwrap());
        assert!(pairs.len() < 100_000, "the histogram ends");
    }
    let (module, _) = profdev_mprof::decode_pairs(&pairs);
    assert_eq!(module, (233_331, 233_331), "3 x 77,777 bytes: {pairs:?}");
    assert_eq!(p.ask("w"), "malloc in libc.so.6", "detached at stop");
    assert_eq!(p.ask("f"), "forked 7");
    p.quit();
    m.ctl("end\n").unwrap();
}

#[test]
fn a_process_that_execd_is_left_alone() {
    if !attachable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut p = Prog::start(&build(dir.path()));
    let (m, first) = attach(p.pid, &[]);
    assert!(first.contains("attached to process"), "{first}");
    assert_eq!(p.ask("a"), "allocated 3");
    assert_eq!(p.ask("x"), "exec");
    // cat now: it echoes a line, so the exec is done.
    assert_eq!(p.ask("echoed\n"), "echoed");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(m.id() as i32, libc::SIGINT) }, 0);
    let (code, out, err) = finish(m);
    assert_eq!(code, Some(130), "{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("the allocating line") && l.contains("\t233331\t")),
        "the counts up to the exec: {out}"
    );
    assert!(
        err.contains("it exec'd another program, which was never counted"),
        "{err}"
    );
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", p.pid)).unwrap();
    assert!(
        !maps.contains("libprofdev_mprof"),
        "nothing loaded into cat: {maps}"
    );
    drop(p.child.stdin.take());
    let status = profdev_testkit::wait_exit("cat", &mut p.child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(0));
}

#[test]
fn snapshot_needs_p_and_a_number() {
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "--snapshot", "5", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--snapshot goes with -p PID"));
    let o = Command::new(env!("CARGO_BIN_EXE_profdev"))
        .args(["mprof", "-p", "1", "--snapshot", "soon"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--snapshot is seconds"));
}
