//! `startmp1 PID` on a mounted prof/ctl: attaching to a running program
//! (tests/data/mprof/known_attach.c, which waits for "go" on stdin before
//! it allocates) must give exactly known.c's bytes per line in the
//! module's histogram, in the seed's memory layout; a statically linked
//! program is refused (ENXIO) and runs on untouched.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn compile(args: &[&str], out: &Path) {
    compile_src("known_attach.c", args, out)
}

fn compile_src(name: &str, args: &[&str], out: &Path) {
    cc_mprof_fixture(name, args, out)
}

/// The histogram's pairs, one read(2) of 64 bytes each, until end of file.
fn pairs(path: &Path) -> Vec<(u64, u64)> {
    let mut f = File::open(path).unwrap();
    let mut out = Vec::new();
    loop {
        let mut buf = [0u8; 64];
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        out.push(profdev_formats::prof_histogram::parse_pair(text.as_bytes()).unwrap());
        assert!(out.len() < 1_000_000, "the histogram does not end");
    }
}

/// Start `exe`, wait (bounded) for its "ready".
fn start(exe: &Path) -> Child {
    start_with(exe, &[])
}

fn start_with(exe: &Path, args: &[&Path]) -> Child {
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    child
}

/// Send "go" and wait (bounded) for a clean exit.
fn finish(mut child: Child) {
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let status = profdev_testkit::wait_exit("the program", &mut child, Duration::from_secs(60));
    assert!(status.success(), "{status}");
}

/// Lines of link-time pcs, by addr2line (binutils, the oracle).
fn lines(exe: &Path, pcs: &[u64]) -> Vec<u32> {
    let out = Command::new("addr2line")
        .arg("-e")
        .arg(exe)
        .args(pcs.iter().map(|p| format!("{:#x}", p - 1)))
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let l = l.rsplit(':').next().unwrap();
            l.split_whitespace().next().unwrap().parse().unwrap_or(0)
        })
        .collect()
}

#[test]
fn startmp1_pid_counts_a_running_program_exactly() {
    if !privileged("startmp1 PID through the mount", can_mount())
        || !profdev_testkit::tools("startmp1 PID through the mount", &["cc", "addr2line"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("known_attach");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let m = Mount::new();
    let child = start(&exe);
    let pid = child.id();
    m.ctl("module known_attach\n").unwrap();
    assert_eq!(
        m.ctl(format!("startmp1 {pid}\n")).unwrap(),
        10 + pid.to_string().len()
    );
    // Counted already: a second attach is refused and changes nothing.
    let again = m.ctl(format!("startmp1 {pid}\n")).unwrap_err();
    assert_eq!(again.raw_os_error(), Some(libc::EBUSY), "{again}");
    finish(child);
    // The device reads the report once it sees the process gone.
    let mut rec = None;
    wait_until(
        "the attached program's histogram",
        Duration::from_secs(30),
        || {
            rec = m.record("known_attach");
            rec.is_some()
        },
    );
    assert_known(&exe, &rec.unwrap());
    m.ctl("end\n").unwrap();
}

/// The record `rec` holds exactly known_attach.c's bytes per line.
fn assert_known(exe: &Path, rec: &Path) {
    let got = pairs(&rec.join("histogram"));
    let (module, sites) = profdev_mprof::decode_pairs(&got);
    // 31: 1000 x 100, 600 freed; 34: 64 KiB never freed; 36: 10 bytes
    // realloc'd at 37 to 10000, then freed; 16: two threads, 1 MiB each in
    // 4 KiB blocks, all live at the barrier, all freed.
    let pcs: Vec<u64> = sites.keys().copied().collect();
    let mut by_line: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for (line, (cur, hw)) in lines(exe, &pcs).into_iter().zip(sites.values()) {
        let e = by_line.entry(line).or_default();
        e.0 += cur;
        e.1 += hw;
    }
    let want: BTreeMap<u32, (u64, u64)> = [
        (16, (0, 2 << 20)),
        (31, (40000, 100000)),
        (34, (65536, 65536)),
        (36, (0, 10)),
        (37, (0, 10000)),
    ]
    .into();
    assert_eq!(by_line, want, "pairs {got:?}");
    // Module totals: 40000 + 65536 left; the peak with both threads' MiBs.
    assert_eq!(module, (105536, 105536 + (2 << 20)), "pairs {got:?}");
}

#[test]
fn stop_fills_the_histogram_of_a_process_still_running() {
    if !privileged("startmp1 PID through the mount", can_mount())
        || !profdev_testkit::tools("startmp1 PID through the mount", &["cc", "addr2line"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("known_attach");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let m = Mount::new();
    let mut child = start_with(&exe, &[Path::new("hold")]);
    m.ctl("module known_attach\n").unwrap();
    m.ctl(format!("startmp1 {}\n", child.id())).unwrap();
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "done\n");
    // Still running: nothing yet; stop asks it for a report.
    assert!(m.record("known_attach").is_none());
    m.ctl("stop\n").unwrap();
    assert!(child.try_wait().unwrap().is_none(), "it runs on");
    let rec = m.record("known_attach").expect("stop filled the histogram");
    assert_known(&exe, &rec);
    finish(child);
}

#[test]
fn a_static_program_is_out_of_reach() {
    if !privileged("startmp1 PID through the mount", can_mount())
        || !profdev_testkit::tools("startmp1 PID through the mount", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("known_static");
    compile(&["-O0", "-pthread", "-static"], &exe);
    let m = Mount::new();
    let child = start(&exe);
    let e = m.ctl(format!("startmp1 {}\n", child.id())).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENXIO), "{e}");
    // Untouched: it runs to its end.
    finish(child);
}

#[test]
fn a_library_loaded_after_the_attach_is_counted() {
    if !privileged("startmp1 PID through the mount", can_mount())
        || !profdev_testkit::tools("startmp1 PID through the mount", &["cc", "addr2line"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("late_main");
    let lib = tmp.path().join("liblate.so");
    compile_src("late_main.c", &["-g", "-O0"], &exe);
    compile_src("late.c", &["-g", "-O0", "-fPIC", "-shared"], &lib);
    let m = Mount::new();
    let child = start_with(&exe, &[&lib]);
    m.ctl("module liblate.so\n").unwrap();
    m.ctl(format!("startmp1 {}\n", child.id())).unwrap();
    finish(child);
    let mut rec = None;
    wait_until(
        "the late library's histogram",
        Duration::from_secs(30),
        || {
            rec = m.record("liblate.so");
            rec.is_some()
        },
    );
    let got = pairs(&rec.unwrap().join("histogram"));
    let (module, sites) = profdev_mprof::decode_pairs(&got);
    assert_eq!(module, (12345, 12345), "{got:?}");
    let pcs: Vec<u64> = sites.keys().copied().collect();
    assert_eq!(lines(&lib, &pcs), [6], "{got:?}");
    assert_eq!(
        sites.values().copied().collect::<Vec<_>>(),
        [(12345, 12345)]
    );
}

fn can_attach() -> Result<(), String> {
    can_attach_any()
}

/// `profdev mprof ARGS -p PID` for `child`: started, its "attached" line
/// awaited, the child sent "go"; mprof's output.
fn mprof_p(args: &[&str], child: Child) -> std::process::Output {
    let mut mprof = profdev()
        .arg("mprof")
        .args(args)
        .arg("-p")
        .arg(child.id().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(mprof.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    // Attached, or refused (then the program was not touched and still
    // waits): either way it must run to a clean end.
    finish(child);
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let mut out = mprof.wait_with_output().unwrap();
    out.stderr = format!("{line}{rest}").into_bytes();
    out
}

#[test]
fn mprof_p_shows_a_running_programs_tables_and_leaks() {
    if !privileged("mprof -p PID", can_attach()) || !profdev_testkit::tools("mprof -p PID", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("known_attach");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let out = mprof_p(&["-l", "-M", "--leaks"], start(&exe));
    let text = String::from_utf8(out.stdout).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let start = text.find("\nModule: known_attach(").expect(&text);
    let rows: Vec<String> = text[start..]
        .lines()
        .skip(3)
        .take_while(|l| !l.is_empty())
        .map(|r| r.split('\t').take(3).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        rows,
        [
            "16 0 2097152",
            "31 40000 100000",
            "34 65536 65536",
            "36 0 10",
            "37 0 10000"
        ],
        "{text}"
    );
    assert!(text.contains("Module totals\t105536\t2202688\n"), "{text}");
    assert!(text.contains("65536\t1\t"), "the 64 KiB leak: {text}");
    assert!(text.contains("40000\t400\t"), "the 400 blocks: {text}");
}

#[test]
fn mprof_p_refuses_a_static_program_with_the_sentence() {
    if !privileged("mprof -p PID", can_attach()) || !profdev_testkit::tools("mprof -p PID", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("known_static");
    compile(&["-O0", "-pthread", "-static"], &exe);
    let child = start(&exe);
    let pid = child.id();
    let out = mprof_p(&[], child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "process {pid} is out of reach: statically linked, start it under profdev mprof instead"
        )),
        "{err}"
    );
}

/// The rows of known_attach's module in mprof's line table.
fn known_rows(text: &str) -> Vec<String> {
    let start = text.find("\nModule: known_attach(").expect(text);
    text[start..]
        .lines()
        .skip(3)
        .take_while(|l| !l.is_empty())
        .map(|r| r.split('\t').take(3).collect::<Vec<_>>().join(" "))
        .collect()
}

const KNOWN_ROWS: [&str; 5] = [
    "16 0 2097152",
    "31 40000 100000",
    "34 65536 65536",
    "36 0 10",
    "37 0 10000",
];

/// `mprof -l -p PID` (TMPDIR `tmp`) on known_attach started with an
/// argument: attached, "go" sent, its "done" awaited (all allocated);
/// then mprof and the program, still running.
fn attached_and_done(exe: &Path, tmp: &Path) -> (Child, Child) {
    let mut child = start_with(exe, &[Path::new("wait")]);
    let mut mprof = with_default_signals(&mut profdev())
        .args(["mprof", "-l", "-p"])
        .arg(child.id().to_string())
        .env("TMPDIR", tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(mprof.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("attached to process"), "{line}");
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut done = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut done)
        .unwrap();
    assert_eq!(done, "done\n");
    (mprof, child)
}

/// mprof's status, standard output and standard error once it exits.
/// Both pipes are drained while it runs: a report larger than a pipe's
/// buffer would otherwise hold mprof in write(2) for ever.
fn ended(mut mprof: Child) -> (std::process::ExitStatus, String, String) {
    fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).unwrap();
            s
        })
    }
    let out = drain(mprof.stdout.take().unwrap());
    let err = drain(mprof.stderr.take().unwrap());
    let status = profdev_testkit::wait_exit("mprof -p", &mut mprof, Duration::from_secs(60));
    (status, out.join().unwrap(), err.join().unwrap())
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

/// An attached process that dies of SIGSEGV or SIGKILL (the OOM killer)
/// writes no report: its table of counts, shared with profdev, is shown
/// (issue 23, item 6).
#[test]
fn mprof_p_shows_the_counts_of_a_process_killed_by_a_signal() {
    if !privileged("mprof -p PID", can_attach()) || !profdev_testkit::tools("mprof -p PID", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("known_attach");
    compile(&["-g", "-O0", "-pthread"], &exe);
    for sig in [libc::SIGSEGV, libc::SIGKILL] {
        let (mprof, mut child) = attached_and_done(&exe, tmp.path());
        kill(child.id(), sig);
        child.wait().unwrap();
        let (status, out, err) = ended(mprof);
        assert!(status.success(), "signal {sig}: {err}");
        assert_eq!(known_rows(&out), KNOWN_ROWS, "signal {sig}: {out}");
    }
}

/// SIGINT to `mprof -p`: what the process counted so far, the sentence,
/// 130; the process goes on, and its directory stays while it maps the
/// library from it, to be swept after it exits, by a later run.
#[test]
fn interrupted_mprof_p_shows_the_counts_so_far_and_exits_130() {
    if !privileged("mprof -p PID", can_attach()) || !profdev_testkit::tools("mprof -p PID", &["cc"])
    {
        return;
    }
    let dir = tempdir();
    let exe = dir.path().join("known_attach");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let (mprof, mut child) = attached_and_done(&exe, &tmp);
    kill(mprof.id(), libc::SIGINT);
    let (status, out, err) = ended(mprof);
    assert_eq!(status.code(), Some(130), "{err}");
    assert_eq!(known_rows(&out), KNOWN_ROWS, "{out}");
    assert!(err.contains("mprof: interrupted by SIGINT;"), "{err}");
    let attach_dirs = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(&tmp)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("/profdev-attach."))
            .collect()
    };
    let left = attach_dirs();
    assert_eq!(left.len(), 1, "kept while the process counts into it");
    child.stdin.as_mut().unwrap().write_all(b"end\n").unwrap();
    let status = profdev_testkit::wait_exit("the program", &mut child, Duration::from_secs(60));
    assert!(status.success(), "{status}");
    // Older than the sweep's grace (an attach may take 20 s), as if made a
    // minute ago: the next attach of this user removes it.
    let aged = Command::new("touch")
        .args(["-d", "@1000000000"])
        .arg(&left[0])
        .status()
        .unwrap();
    assert!(aged.success());
    let (mprof, mut child) = attached_and_done(&exe, &tmp);
    assert!(
        !left[0].exists(),
        "swept once no process maps its library: {:?}",
        attach_dirs()
    );
    child.stdin.as_mut().unwrap().write_all(b"end\n").unwrap();
    let (status, out, err) = ended(mprof);
    assert!(status.success(), "{err}");
    assert_eq!(known_rows(&out), KNOWN_ROWS, "{out}");
    child.wait().unwrap();
    assert!(attach_dirs().is_empty(), "{:?}", attach_dirs());
}

/// Reports forged in the attached process's own `out/` (its user owns
/// it): 128 MiB in 8 files of 16 MiB less a byte, each a well-formed
/// report of a million sites, and one sparse 128 MiB file. The sparse one
/// is refused by its size before it is read, and of the 8 no more than
/// the session's budget (64 MiB: 4 of them) is read: inotify names every
/// file of `out/` read, by whoever. mprof shows the process's own counts
/// (issue 23, item 4).
#[test]
fn forged_reports_are_refused_before_they_are_read() {
    if !privileged("mprof -p PID", can_attach()) || !profdev_testkit::tools("mprof -p PID", &["cc"])
    {
        return;
    }
    let dir = tempdir();
    let exe = dir.path().join("known_attach");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let (mprof, mut child) = attached_and_done(&exe, &tmp);
    let out_dir = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("/profdev-attach."))
        .unwrap()
        .join("out");
    let mut reads = Reads::watch(&out_dir);
    let mut text = String::from("profdev-mprof 1\npid 1\nmodule 0 0x0 1 2 0 0 /forged\n");
    let mut pc = 0u64;
    while text.len() < (16 << 20) - 64 {
        pc += 16;
        text.push_str(&format!("site {pc:#x} 0 1 1 1 1 1\n"));
    }
    text.push_str("end\n");
    text.truncate((16 << 20) - 1);
    let forged: Vec<String> = (0..8)
        .map(|i| format!("mprof.{}.0", 4_000_000 + i))
        .collect();
    for (i, name) in forged.iter().enumerate() {
        let text = text.replacen("pid 1\n", &format!("pid {}\n", 4_000_000 + i), 1);
        std::fs::write(out_dir.join(name), text).unwrap();
    }
    let sparse = "mprof.3999999.0";
    File::create(out_dir.join(sparse))
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    child.stdin.as_mut().unwrap().write_all(b"end\n").unwrap();
    let status = profdev_testkit::wait_exit("the program", &mut child, Duration::from_secs(60));
    assert!(status.success(), "{status}");
    let exited = std::time::Instant::now();
    let (status, out, err) = ended(mprof);
    eprintln!("mprof ended {:?} after the process", exited.elapsed());
    assert!(status.success(), "{err}");
    assert_eq!(known_rows(&out), KNOWN_ROWS, "{out}");
    assert!(!out.contains("forged"), "{out}");
    let read = reads.names();
    eprintln!("read in out/: {read:?}");
    assert!(
        !read.contains(sparse),
        "the sparse report was read: {read:?}"
    );
    let forged_read = forged.iter().filter(|n| read.contains(*n)).count();
    assert!(
        forged_read <= 4,
        "{forged_read} forged reports of 16 MiB were read, over the budget: {read:?}"
    );
}

/// The device's `startmp1 PID`: a process killed with SIGKILL (the OOM
/// killer) after its allocations writes no report; the device reads its
/// table of counts when it sees it gone (issue 23, item 6).
#[test]
fn startmp1_pid_counts_a_process_killed_with_sigkill() {
    if !privileged("startmp1 PID through the mount", can_mount())
        || !profdev_testkit::tools("startmp1 PID through the mount", &["cc", "addr2line"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("known_attach");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let m = Mount::new();
    let mut child = start_with(&exe, &[Path::new("hold")]);
    m.ctl("module known_attach\n").unwrap();
    m.ctl(format!("startmp1 {}\n", child.id())).unwrap();
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "done\n");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut rec = None;
    wait_until(
        "the killed program's histogram",
        Duration::from_secs(30),
        || {
            rec = m.record("known_attach");
            rec.is_some()
        },
    );
    assert_known(&exe, &rec.unwrap());
    m.ctl("end\n").unwrap();
}

/// The anonymous mappings of process `pid` (no file, no `[heap]`-like
/// name): (start, size in bytes).
fn anonymous_mappings(pid: u32) -> Vec<(u64, u64)> {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(5).is_none())
        .map(|l| {
            let range = l.split_whitespace().next().unwrap();
            let (a, b) = range.split_once('-').unwrap();
            let a = u64::from_str_radix(a, 16).unwrap();
            (a, u64::from_str_radix(b, 16).unwrap() - a)
        })
        .collect()
}

/// `mprof -p PID` initialises the accounting library once: dlopen runs
/// its constructor, which (the library not preloaded) leaves counting to
/// the attach entry, so the process maps one set of tables, not a first
/// one from its constructor beside the attach's (issue 29: 40 MiB of
/// untouched memory, which the leak scan read as roots). One set has one
/// large anonymous mapping, the block table's top level (16 MiB: a
/// pointer per 64 MiB of the address space); the tables of counts are
/// the shared file `live.PID.K`; the second set had two more (its top
/// level, and its tables in anonymous memory).
#[test]
fn an_attach_initialises_the_library_once() {
    if !privileged("mprof -p PID", can_attach()) || !profdev_testkit::tools("mprof -p PID", &["cc"])
    {
        return;
    }
    let dir = tempdir();
    let exe = dir.path().join("known_attach");
    compile(&["-g", "-O0", "-pthread"], &exe);
    let mut child = start_with(&exe, &[Path::new("wait")]);
    let pid = child.id();
    let before = anonymous_mappings(pid);
    let mut mprof = profdev()
        .args(["mprof", "-l", "-p"])
        .arg(pid.to_string())
        .env("TMPDIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(mprof.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("attached to process"), "{line}");
    // Attached, the program still waiting for "go": all that is new was
    // mapped by the attach.
    let large: Vec<(u64, u64)> = anonymous_mappings(pid)
        .into_iter()
        .filter(|m| !before.contains(m) && m.1 >= 16 << 20)
        .collect();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert_eq!(large.len(), 1, "{large:x?}\n{maps}");
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut done = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut done)
        .unwrap();
    assert_eq!(done, "done\n");
    child.stdin.as_mut().unwrap().write_all(b"end\n").unwrap();
    let status = profdev_testkit::wait_exit("the program", &mut child, Duration::from_secs(60));
    assert!(status.success(), "{status}");
    let (status, out, err) = ended(mprof);
    assert!(status.success(), "{err}");
    assert_eq!(known_rows(&out), KNOWN_ROWS, "counted, once: {out}");
}
