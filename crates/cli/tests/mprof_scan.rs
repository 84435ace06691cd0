//! `profdev mprof -p PID --scan`: a running program
//! (tests/data/mprof/leaky.c) that leaked 5 blocks of 77,777 bytes before
//! anything attached, holds one of 55,555 in a global and has small blocks
//! in its tcache and a fastbin is scanned: the 5 blocks are reported, the
//! held one is not, and the program runs on to a clean end. A static
//! program and one with its own malloc (preloaded) are refused.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn compile(src: &str, args: &[&str], out: &Path) {
    cc_mprof_fixture(src, args, out)
}

fn ready() -> bool {
    privileged("mprof -p PID --scan", can_attach_any())
        && profdev_testkit::tools("mprof -p PID --scan", &["cc"])
}

/// Start `exe` with `args` (and `env`), wait for its "ready" (bounded by
/// the reading end: it exits if the program dies).
fn start(
    exe: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(exe)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    (child, out)
}

/// Send "go"; the program must say "done" and exit 0.
fn finish(mut child: Child, mut out: BufReader<std::process::ChildStdout>) {
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n", "the program went on after the scan");
    let status = profdev_testkit::wait_exit("the program", &mut child, Duration::from_secs(60));
    assert!(status.success(), "{status}");
}

fn scan(pid: u32) -> std::process::Output {
    profdev()
        .args(["mprof", "-p", &pid.to_string(), "--scan"])
        .output()
        .unwrap()
}

/// malloc_usable_size of a heap block of `n` bytes (64-bit glibc).
fn usable(n: u64) -> u64 {
    ((n + 8 + 15) & !15) - 8
}

fn scanned_leaks(args: &[&str], arenas: &str) {
    let tmp = tempdir();
    let exe = tmp.path().join("leaky");
    compile("leaky.c", &["-O0", "-pthread"], &exe);
    let (child, out) = start(&exe, args, &[]);
    let o = scan(child.id());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let leak = usable(77777);
    assert!(
        text.contains(&format!("\n5\t{leak}\t{}\n", 5 * leak)),
        "5 x 77,777 unreachable: {text}"
    );
    let held = usable(55555);
    assert!(
        !text
            .lines()
            .any(|l| l.split('\t').nth(1) == Some(&held.to_string())),
        "the held block is reachable: {text}"
    );
    assert!(text.contains(arenas), "{text}");
    // The pause, stated: "held N ms", within the bound.
    let ms: u64 = text
        .split("held ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .expect(&text);
    assert!(ms <= 5000, "{text}");
    finish(child, out);
}

#[test]
fn a_scan_finds_the_blocks_leaked_before_it() {
    if ready() {
        scanned_leaks(&[], "1 arenas, 1 threads");
    }
}

#[test]
fn a_scan_finds_the_leaks_of_a_thread_arena() {
    if ready() {
        scanned_leaks(&["thread"], "2 arenas, 2 threads");
    }
}

#[test]
fn a_static_program_is_refused_and_runs_on() {
    if !ready() {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("leaky_static");
    compile("leaky.c", &["-O0", "-pthread", "-static"], &exe);
    let (child, out) = start(&exe, &[], &[]);
    let o = scan(child.id());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "process {} cannot be scanned: it maps no glibc",
            child.id()
        )),
        "{err}"
    );
    finish(child, out);
}

#[test]
fn another_malloc_is_refused_and_runs_on() {
    if !ready() {
        return;
    }
    let tmp = tempdir();
    let lib = tmp.path().join("libbump.so");
    compile("bump_malloc.c", &["-O0", "-shared", "-fPIC"], &lib);
    let exe = tmp.path().join("leaky");
    compile("leaky.c", &["-O0", "-pthread"], &exe);
    let (child, out) = start(&exe, &[], &[("LD_PRELOAD", &lib)]);
    let o = scan(child.id());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("libbump.so carries its own allocator (malloc)"),
        "{err}"
    );
    finish(child, out);
}

#[test]
fn scan_needs_a_pid() {
    let o = profdev()
        .args(["mprof", "--scan", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--scan needs -p PID"));
}

#[test]
fn a_process_it_may_not_trace_is_refused_in_one_sentence() {
    if !ready() || !profdev_testkit::tools("mprof --scan as nobody", &["setpriv"]) {
        return;
    }
    let tmp = tempdir();
    // nobody must reach the binary.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let pd = profdev_copy(tmp.path());
    let exe = tmp.path().join("leaky");
    compile("leaky.c", &["-O0", "-pthread"], &exe);
    // root's program: nobody may neither trace nor read it.
    let (child, out) = start(&exe, &[], &[]);
    let pid = child.id();
    let o = as_nobody(&format!("exec \"$1\" mprof -p {pid} --scan"), &[&pd]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "mprof: not permitted to ptrace process {pid}: uid 65534 may not trace a process of uid 0"
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(o.stdout.is_empty());
    finish(child, out);
}

/// The children of process `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// `profdev mprof -o TABLES [ARGS] -- EXE`, once EXE said "ready": mprof,
/// its reader, and EXE's process id.
fn under_mprof(
    exe: &Path,
    tables: &Path,
    args: &[&Path],
) -> (Child, BufReader<std::process::ChildStdout>, u32) {
    let mut child = profdev()
        .arg("mprof")
        .arg("-o")
        .arg(tables)
        .args(args)
        .arg("--")
        .arg(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let pid = children(child.id())[0];
    (child, out, pid)
}

/// The rows of a scan's report whose size (second field) is `size`.
fn rows_of_size(text: &str, size: u64) -> Vec<&str> {
    text.lines()
        .filter(|l| l.split('\t').nth(1) == Some(&size.to_string()))
        .collect()
}

/// Blocks held only from memory the program mapped itself (Python's
/// object arenas) are reachable; the real leaks are still found. Before,
/// anonymous mappings were no roots: the 8 held blocks showed as leaked.
#[test]
fn memory_the_program_maps_is_a_root() {
    if !ready() {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("mapped");
    compile("mapped.c", &["-O0", "-g"], &exe);
    let (child, out) = start(&exe, &[], &[]);
    let o = scan(child.id());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lost = 3 * usable(4000) + 2 * usable(5000);
    assert!(
        text.starts_with(&format!("Unreachable: {lost} bytes in 5 blocks,")),
        "{text}"
    );
    assert!(rows_of_size(&text, usable(3333)).is_empty(), "{text}");
    assert!(text.contains("known only in a process running under mprof"));
    finish(child, out);
}

/// A block whose only pointer is in a thread's vector register (a copy
/// in progress) is reachable; one nothing points to is still a leak.
/// Before, vector registers were no roots: 66,666 bytes showed as leaked.
#[test]
fn a_pointer_held_in_a_vector_register_is_a_root() {
    if !ready() {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("vector");
    compile("vector.c", &["-O2", "-pthread"], &exe);
    let (child, out) = start(&exe, &[], &[]);
    let o = scan(child.id());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(rows_of_size(&text, usable(44444)).len(), 1, "{text}");
    assert!(rows_of_size(&text, usable(66666)).is_empty(), "{text}");
    finish(child, out);
}

/// glibc keeps a dead thread's stack for the next thread: its stale words
/// hide no leak, and the dtv it keeps with it is no leak either (before:
/// a false leak of 280 bytes).
#[test]
fn a_dead_threads_cached_stack_hides_no_leak() {
    if !ready() {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("dead_thread");
    compile("dead_thread.c", &["-O0", "-pthread"], &exe);
    let (child, out) = start(&exe, &[], &[]);
    let o = scan(child.id());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let leak = usable(66666);
    assert!(
        text.starts_with(&format!("Unreachable: {leak} bytes in 1 blocks,")),
        "{text}"
    );
    finish(child, out);
}

/// A process launched under mprof with stacks: its leaks grouped by the
/// two call paths that reach the one allocating line, with their bytes.
#[test]
fn leaks_grouped_by_the_stacks_mprof_saw() {
    if !ready() {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("mapped");
    compile("mapped.c", &["-O0", "-g", "-fno-omit-frame-pointer"], &exe);
    let folded = tmp.path().join("folded");
    let (child, out, pid) = under_mprof(
        &exe,
        &tmp.path().join("tables"),
        &[Path::new("--folded"), &folded],
    );
    let o = scan(pid);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let by_stack = text
        .split("By allocating stack")
        .nth(1)
        .unwrap_or_else(|| panic!("no stacks: {text}"));
    for (caller, n, asked) in [("build", 3, 4000), ("other", 2, 5000)] {
        let rows: Vec<&str> = by_stack
            .lines()
            .filter(|l| l.contains(&format!(" < {caller} ")))
            .collect();
        assert_eq!(rows.len(), 1, "{caller}: {text}");
        let f: Vec<&str> = rows[0].split('\t').collect();
        assert_eq!(
            f[..3],
            [
                n.to_string(),
                (n * usable(asked)).to_string(),
                (n * asked).to_string()
            ],
            "{text}"
        );
        let site = f[3].split(" < ").next().unwrap_or_default();
        assert!(
            site.starts_with("leaf_alloc ") && site.ends_with("/mapped.c:20"),
            "{text}"
        );
    }
    assert!(!by_stack.contains("(allocated before mprof)"), "{text}");
    finish(child, out);
}

/// A process mprof attached to: the leaks made after the attach grouped
/// by their site, the older ones as allocated before mprof.
#[test]
fn a_process_attached_by_mprof_has_its_later_leaks_by_site() {
    if !ready() {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("mapped");
    compile("mapped.c", &["-O0", "-g"], &exe);
    let (mut child, mut out) = start(&exe, &["late"], &[]);
    let mut mprof = profdev()
        .args(["mprof", "-o"])
        .arg(tmp.path().join("tables"))
        .args(["-p", &child.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(mprof.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("mprof: attached to process"), "{line}");
    child.stdin.as_mut().unwrap().write_all(b"l\n").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "leaked\n");
    let o = scan(child.id());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<Vec<&str>> = text
        .split("By allocating stack")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"))
        .lines()
        .skip(2)
        .map(|l| l.split('\t').collect())
        .collect();
    let later = (3 * usable(4000)).to_string();
    assert_eq!(rows[0][..3], ["3", &*later, "12000"], "{text}");
    assert!(
        rows[0][3].starts_with("leaf_alloc ") && rows[0][3].ends_with("/mapped.c:20"),
        "{text}"
    );
    assert_eq!(
        rows[1],
        ["2", "10000", "-", "(allocated before mprof)"],
        "{text}"
    );
    finish(child, out);
    let status = profdev_testkit::wait_exit("mprof", &mut mprof, Duration::from_secs(60));
    assert!(status.success(), "{status}");
}

#[test]
fn a_process_counted_by_mprof_is_scanned_too() {
    if !ready() {
        return;
    }
    let tmp = tempdir();
    let exe = tmp.path().join("leaky");
    compile("leaky.c", &["-O0", "-pthread"], &exe);
    // Launched under mprof: its library (a malloc of its own, by name)
    // is in the process, and is not refused.
    let mprof = tmp.path().join("tables");
    let (child, out, pid) = under_mprof(&exe, &mprof, &[]);
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains("libprofdev_mprof.so"), "{maps}");
    let o = scan(pid);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let leak = usable(77777);
    assert!(
        text.contains(&format!("\n5\t{leak}\t{}\n", 5 * leak)),
        "{text}"
    );
    // Without stacks, grouped by their site: the call in leak().
    assert!(
        text.contains(&format!("\n5\t{}\t{}\tleak", 5 * leak, 5 * 77777)),
        "{text}"
    );
    finish(child, out);
    assert!(std::fs::read_to_string(&mprof)
        .unwrap()
        .contains("Module: leaky"));
}

/// A user scans a process of their own, profdev running as them (no
/// privilege of profdev's to lend: the kernel's ptrace check is theirs).
#[test]
fn a_user_scans_their_own_process() {
    if !ready() || !profdev_testkit::tools("mprof --scan as nobody", &["setpriv", "mkfifo"]) {
        return;
    }
    let tmp = tempdir();
    // nobody must reach the binaries and make its FIFOs there.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let pd = profdev_copy(tmp.path());
    let exe = tmp.path().join("leaky");
    compile("leaky.c", &["-O0", "-pthread"], &exe);
    let script = r#"
        mkfifo "$3/in" "$3/out" || exit 90
        "$2" <"$3/in" >"$3/out" & p=$!
        exec 3>"$3/in" 4<"$3/out"
        read r <&4
        "$1" mprof -p "$p" --scan; rc=$?
        echo go >&3
        read r <&4
        wait "$p" || exit 91
        exit "$rc"
    "#;
    let o = as_nobody(script, &[&pd, &exe, tmp.path()]);
    let text = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let leak = usable(77777);
    assert!(
        text.contains(&format!("\n5\t{leak}\t{}\n", 5 * leak)),
        "5 x 77,777 unreachable: {text} {err}"
    );
}
