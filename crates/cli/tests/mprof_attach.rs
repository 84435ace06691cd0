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
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mprof")
        .join(name);
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
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("attaching to a process that is not mprof's child needs root".into());
    }
    Ok(())
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
