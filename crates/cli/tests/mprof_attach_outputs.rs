//! `profdev mprof -p PID` with launch mode's outputs: `--folded` and
//! `--pprof` (whole stacks), `--sample-bytes` (estimates and their error)
//! and `--temporary`, of allocations made after the attach
//! (tests/data/mprof/attach_outputs.c, which waits for "go" on stdin
//! before it allocates). Synchronized on the program's "ready", mprof's
//! "attached" line and the program's exit, which ends mprof's wait.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn can_attach() -> Result<(), String> {
    can_attach_any()
}

/// attach_outputs.c compiled at -O0 with frame pointers into `dir`.
fn compile(dir: &Path) -> PathBuf {
    compile_with(dir, &["-O0", "-fno-omit-frame-pointer"])
}

/// attach_outputs.c compiled with `opts` into `dir`.
fn compile_with(dir: &Path, opts: &[&str]) -> PathBuf {
    let exe = dir.join("attach_outputs");
    let flags: Vec<&str> = ["-g"]
        .iter()
        .chain(opts)
        .chain(&["-pthread"])
        .copied()
        .collect();
    cc_mprof_fixture("attach_outputs.c", &flags, &exe);
    exe
}

/// `profdev mprof -o - ARGS -p PID` on `exe MODE` (its private directory
/// under `tmp`): the program started and its "ready" read, mprof's
/// "attached" line read, "go" sent; mprof's standard output and error
/// once the program's exit ended it.
fn mprof_p(exe: &Path, mode: &str, args: &[&std::ffi::OsStr], tmp: &Path) -> (String, String) {
    mprof_p_of(exe, &[mode.as_ref()], args, tmp)
}

/// [`mprof_p`] with the program's arguments `prog` (its mode first).
fn mprof_p_of(
    exe: &Path,
    prog: &[&std::ffi::OsStr],
    args: &[&std::ffi::OsStr],
    tmp: &Path,
) -> (String, String) {
    let mut child = Command::new(exe)
        .args(prog)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let mut mprof = profdev()
        .args(["mprof", "-o", "-"])
        .args(args)
        .arg("-p")
        .arg(child.id().to_string())
        .env("TMPDIR", tmp)
        .env("PROFDEV_MPROF_SAMPLE_SEED", "12345")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(mprof.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    // Attached, or refused (then the program was not touched and still
    // waits): either way it runs to its end.
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let status = profdev_testkit::wait_exit("the program", &mut child, Duration::from_secs(120));
    let out = std::thread::spawn({
        let mut o = mprof.stdout.take().unwrap();
        move || {
            let mut s = String::new();
            o.read_to_string(&mut s).unwrap();
            s
        }
    });
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let st = profdev_testkit::wait_exit("mprof -p", &mut mprof, Duration::from_secs(60));
    let (out, err) = (out.join().unwrap(), format!("{first}{rest}"));
    assert!(first.contains("attached to process"), "{err}");
    assert!(status.success(), "the program: {status}");
    assert!(st.success(), "mprof -p: {st}: {err}");
    (out, err)
}

#[test]
fn folded_of_an_attached_process_has_exact_stacks() {
    if !privileged("mprof -p --folded", can_attach())
        || !profdev_testkit::tools("mprof -p --folded", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = compile(tmp.path());
    let file = tmp.path().join("attach.folded");
    let (_, err) = mprof_p(
        &exe,
        "stacks",
        &["--folded".as_ref(), file.as_os_str()],
        tmp.path(),
    );
    let text = std::fs::read_to_string(&file).expect(&err);
    let lines: Vec<&str> = text.lines().collect();
    // Exactly the two stacks made after the attach, whatever is above main.
    assert_eq!(lines.len(), 2, "{lines:?} {err}");
    assert_eq!(
        common::folded_ending(&lines, "main;stacks_main;build;leaf_alloc 409600").len(),
        1,
        "{lines:?}"
    );
    assert_eq!(
        common::folded_ending(&lines, "main;stacks_main;other;leaf_alloc 50000").len(),
        1,
        "{lines:?}"
    );
}

/// The same without frame pointers (-O2 -fomit-frame-pointer): the walk
/// follows the unwind tables profdev built for the process's modules.
#[test]
fn folded_of_an_attached_process_without_frame_pointers() {
    if !privileged("mprof -p --folded", can_attach())
        || !profdev_testkit::tools("mprof -p --folded", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let opts = [
        "-O2",
        "-fomit-frame-pointer",
        "-fno-optimize-sibling-calls",
        "-fno-inline",
    ];
    let exe = compile_with(tmp.path(), &opts);
    let file = tmp.path().join("attach.folded");
    let (_, err) = mprof_p(
        &exe,
        "stacks",
        &["--folded".as_ref(), file.as_os_str()],
        tmp.path(),
    );
    let text = std::fs::read_to_string(&file).expect(&err);
    let lines: Vec<&str> = text.lines().collect();
    for want in [
        "main;stacks_main;build;leaf_alloc 409600",
        "main;stacks_main;other;leaf_alloc 50000",
    ] {
        assert_eq!(
            common::folded_ending(&lines, want).len(),
            1,
            "{want}: {lines:?} {err}"
        );
    }
}

/// A library the process loads with `dlopen` after the attach, built
/// without frame pointers, is walked by a table profdev builds on the
/// library's request (the attach's service, in the process's tables
/// directory): before it, its frames were followed by a frame pointer
/// the code does not keep.
#[test]
fn folded_of_an_attached_process_walks_a_library_loaded_after_the_attach() {
    if !privileged("mprof -p --folded", can_attach())
        || !profdev_testkit::tools("mprof -p --folded", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = compile(tmp.path());
    let lib = tmp.path().join("libunwind_late.so");
    let no_fp = [
        "-g",
        "-O2",
        "-fomit-frame-pointer",
        "-fno-optimize-sibling-calls",
        "-shared",
        "-fPIC",
        "-Dmain=unwind_main",
    ];
    cc_mprof_fixture("unwind.c", &no_fp, &lib);
    let file = tmp.path().join("attach.folded");
    let (_, err) = mprof_p_of(
        &exe,
        &["dlopen".as_ref(), lib.as_os_str()],
        &["--folded".as_ref(), file.as_os_str()],
        tmp.path(),
    );
    let text = std::fs::read_to_string(&file).expect(&err);
    let lines: Vec<&str> = text.lines().collect();
    for want in [
        "main;unwind_main;build;leaf_alloc 409600",
        "main;unwind_main;other;leaf_alloc 50000",
    ] {
        assert_eq!(
            common::folded_ending(&lines, want).len(),
            1,
            "{want}: {lines:?} {err}"
        );
    }
}

/// `go tool pprof -traces` reads `--pprof` of an attached process and
/// shows both stacks, with their bytes under `-sample_index=alloc_space`.
#[test]
fn pprof_of_an_attached_process_shows_both_stacks() {
    if !privileged("mprof -p --pprof", can_attach())
        || !profdev_testkit::tools("mprof -p --pprof", &["cc", "go"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = compile(tmp.path());
    let file = tmp.path().join("heap.pb");
    mprof_p(
        &exe,
        "stacks",
        &["--pprof".as_ref(), file.as_os_str()],
        tmp.path(),
    );
    let o = Command::new("go")
        .args(["tool", "pprof", "-traces", "-sample_index=alloc_space"])
        .arg(&file)
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Each trace: its value, then its frames, the site first.
    let traces: Vec<(String, Vec<String>)> = out
        .split("-----------+")
        .skip(1)
        .map(|t| {
            let mut rows = t.lines().skip(1).map(|l| {
                l.split_whitespace()
                    .map(String::from)
                    .collect::<Vec<String>>()
            });
            let first = rows.next().unwrap_or_default();
            let value = first.first().cloned().unwrap_or_default();
            let mut frames = vec![first.last().cloned().unwrap_or_default()];
            frames.extend(rows.filter_map(|r| r.last().cloned()));
            (value, frames)
        })
        .collect();
    for (caller, value) in [("build", "400kB"), ("other", "48.83kB")] {
        assert!(
            traces.iter().any(|(v, f)| v == value
                && f.len() >= 3
                && f[0] == "leaf_alloc"
                && f[1] == caller
                && f[2] == "stacks_main"),
            "{caller}: {out}"
        );
    }
}

/// `--sample-bytes 524288 -p PID` on 600,000 blocks of 1,000 bytes
/// allocated after the attach (seed fixed through the config): the
/// estimate is within 15% (its standard error is at most √(N·B), 3% of
/// 600 MB: 15% is 5 of them), and the line after the tables says so.
#[test]
fn sample_bytes_of_an_attached_process_estimates_within_15_percent() {
    if !privileged("mprof -p --sample-bytes", can_attach())
        || !profdev_testkit::tools("mprof -p --sample-bytes", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = compile(tmp.path());
    let (out, err) = mprof_p(
        &exe,
        "sample",
        &["--sample-bytes".as_ref(), "524288".as_ref()],
        tmp.path(),
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("mprof: estimates from sampling every 524288 bytes"))
        .unwrap_or_else(|| panic!("no estimate line: {out}{err}"));
    let total: f64 = line
        .split("allocated in all: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect(line);
    let rel = (total - 600e6).abs() / 600e6;
    assert!(
        rel < 0.15,
        "estimate {total} against 600000000 ({rel:.3}): {line}"
    );
    assert!(line.contains(" bytes +- "), "{line}");
}

/// `--temporary -p PID`: the loop that frees each block before its next
/// allocation (temporary.c line 9) is counted as temporary at its site.
#[test]
fn temporary_of_an_attached_process_counts_the_loop() {
    if !privileged("mprof -p --temporary", can_attach())
        || !profdev_testkit::tools("mprof -p --temporary", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let exe = compile(tmp.path());
    let (out, err) = mprof_p(
        &exe,
        "temporary",
        &["-e".as_ref(), "--temporary".as_ref()],
        tmp.path(),
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/mprof/temporary.c")
        .canonicalize()
        .unwrap();
    let at = out
        .find("Temporary: ")
        .unwrap_or_else(|| panic!("{out}{err}"));
    let rows: Vec<&str> = out[at..].lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        rows,
        [
            "Temporary: 1000 of 1101 blocks freed by their thread before its next allocation",
            "temporary\tblocks\tsite\tfunction",
            &format!("1000\t1000\t{}:9\ttemporary_main()", src.display()),
        ],
        "{out}"
    );
}

/// A run that ends by the detach (SIGINT to mprof once known_attach.c
/// said "done", the process still running): the report asked for before
/// the detach gives `--temporary`, `--peak` and `--folded` (its table of
/// counts has no temporary blocks nor peak).
#[test]
fn outputs_of_a_run_ended_by_the_detach() {
    if !privileged("mprof -p, interrupted", can_attach())
        || !profdev_testkit::tools("mprof -p, interrupted", &["cc"])
    {
        return;
    }
    let tmp = tempdir();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mprof/known_attach.c");
    let exe = tmp.path().join("known_attach");
    let flags = ["-g", "-O0", "-fno-omit-frame-pointer", "-pthread"];
    cc_mprof_fixture("known_attach.c", &flags, &exe);
    let mut child = Command::new(&exe)
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let folded = tmp.path().join("known.folded");
    let mut mprof = with_default_signals(&mut profdev())
        .args(["mprof", "-e", "--temporary", "--peak", "--folded"])
        .arg(&folded)
        .arg("-p")
        .arg(child.id().to_string())
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(mprof.stderr.take().unwrap());
    let mut first = String::new();
    err.read_line(&mut first).unwrap();
    assert!(first.contains("attached to process"), "{first}");
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    line.clear();
    said.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n");
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(mprof.id() as i32, libc::SIGINT) }, 0);
    let out = std::thread::spawn({
        let mut o = mprof.stdout.take().unwrap();
        move || {
            let mut s = String::new();
            o.read_to_string(&mut s).unwrap();
            s
        }
    });
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    let st = profdev_testkit::wait_exit("mprof -p", &mut mprof, Duration::from_secs(60));
    let out = out.join().unwrap();
    assert_eq!(st.code(), Some(130), "{rest}");
    assert!(rest.contains("it was detached and runs on"), "{rest}");
    // Detached, it runs to its end.
    child.stdin.as_mut().unwrap().write_all(b"end\n").unwrap();
    let status = profdev_testkit::wait_exit("the program", &mut child, Duration::from_secs(60));
    assert!(status.success(), "{status}");
    // At the barrier: both threads' MiB, line 31's 400 blocks, line 34's
    // 64 KiB.
    assert!(
        out.contains("Peak: 2202688 bytes live at the high-water mark\n"),
        "{out}{rest}"
    );
    // The 10 bytes realloc'd at 37 and line 37's block, freed at once.
    let site = |line: u32, f: &str| format!("1\t1\t{}:{line}\t{f}()", src.display());
    assert!(out.contains(&site(36, "main")), "{out}");
    assert!(out.contains(&site(37, "main")), "{out}");
    let text = std::fs::read_to_string(&folded).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        common::folded_ending(&lines, "thread_body 2097152").len(),
        1,
        "{lines:?}"
    );
}
