//! Frames in code a runtime generated, named as perf names them (issue
//! 27, item 2): from a jitdump that a small code generator writes
//! (`fixtures/jitgen.c`: its function, its lines, its callers through
//! the generated code's frame pointer), from the perf map of
//! `node --perf-basic-prof` (a hot JavaScript function's name and
//! share), and never from a file another user planted: a perf map that is
//! a symbolic link (here to a root-only file naming the same address) is
//! not read, and the frame stays `[anon]`.
//!
//! The shares are set by the programs' work (the generated loop is
//! nearly all of jitgen's; the hot function nearly all of the script's),
//! not by timing.

mod common;

use common::{fixture, profdev, ready, tempdir};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn jitgen(dir: &Path) -> PathBuf {
    let exe = dir.join("jitgen");
    let o = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(fixture("jitgen.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    exe
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "{o:?}");
    String::from_utf8(o.stdout).unwrap()
}

/// Record CMD with -g into `data`, run in `data`'s directory (node's
/// `--perf-basic-prof` leaves an `isolate-*-v8.log` in its working
/// directory).
fn record(data: &Path, cmd: &[&std::ffi::OsStr]) {
    ok(profdev()
        .current_dir(data.parent().unwrap())
        .args(["record", "-g", "-o"])
        .arg(data)
        .arg("--")
        .args(cmd)
        .output()
        .unwrap());
}

/// The self share of the rows of `report --sort sym` whose symbol
/// contains `name`, in percent.
fn share(data: &Path, name: &str) -> f64 {
    let t = ok(profdev()
        .args(["report", "--sort", "sym", "-i"])
        .arg(data)
        .output()
        .unwrap());
    t.lines()
        .filter(|l| !l.starts_with('#') && l.contains(name))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .trim_end_matches('%')
                .parse::<f64>()
                .ok()
        })
        .sum()
}

/// `report --sort dso,sym` of `data`, for a failure's message.
fn report(data: &Path) -> String {
    let o = profdev()
        .args(["report", "--sort", "dso,sym", "-i"])
        .arg(data)
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_jitdump_names_generated_code_its_lines_and_its_callers() {
    if !ready("JIT frames from a jitdump", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = jitgen(d.path());
    let data = d.path().join("jit.data");
    record(
        &data,
        &[exe.as_os_str(), d.path().as_os_str(), "0.5".as_ref()],
    );
    let s = share(&data, "gen_spin");
    assert!(
        s >= 50.0,
        "gen_spin has {s}% of the samples:\n{}",
        report(&data)
    );
    // Callers through the generated code's frame pointer.
    let folded = ok(profdev()
        .args(["export", "folded", "-i"])
        .arg(&data)
        .output()
        .unwrap());
    assert!(
        folded.lines().any(|l| l.contains(";main;driver;gen_spin ")),
        "{folded}"
    );
    // Lines, as go tool pprof reads them from the pprof export.
    if profdev_testkit::tools("go tool pprof", &["go"]) {
        let pb = d.path().join("jit.pb.gz");
        ok(profdev()
            .args(["export", "pprof", "-i"])
            .arg(&data)
            .arg("-o")
            .arg(&pb)
            .output()
            .unwrap());
        let top = ok(Command::new("go")
            .args(["tool", "pprof", "-top", "-lines", "-symbolize=none"])
            .arg(&pb)
            .output()
            .unwrap());
        assert!(top.contains(" gen_spin gen_spin.js:"), "{top}");
    }
    // The names outlive the process: the recording holds them.
    let t = ok(profdev()
        .args(["report", "--sort", "dso,sym", "-i"])
        .arg(&data)
        .output()
        .unwrap());
    assert!(
        t.lines()
            .any(|l| l.contains("jit-") && l.ends_with(".dump  gen_spin")),
        "{t}"
    );
}

/// The perf maps /tmp holds now.
fn perf_maps() -> Vec<PathBuf> {
    std::fs::read_dir("/tmp")
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("perf-") && n.ends_with(".map"))
        })
        .collect()
}

#[test]
fn node_perf_basic_prof_names_the_hot_javascript_function() {
    if !ready("JIT frames of node --perf-basic-prof", &["node"]) {
        return;
    }
    let d = tempdir();
    let script = d.path().join("hot.js");
    std::fs::write(
        &script,
        "function profdevHotLoop(n) {\n  let x = 0;\n  for (let i = 0; i < n; i++) x = (x * 31 + i) % 1000003;\n  return x;\n}\n\
         const t0 = process.cpuUsage();\nlet s = 0;\n\
         for (;;) {\n  s += profdevHotLoop(1e6);\n  const u = process.cpuUsage(t0);\n  if (u.user + u.system > 1e6) break;\n}\n\
         console.log(s > 0 ? 'done' : 'zero');\n",
    )
    .unwrap();
    let before = perf_maps();
    let data = d.path().join("node.data");
    record(
        &data,
        &[
            "node".as_ref(),
            "--perf-basic-prof".as_ref(),
            script.as_os_str(),
        ],
    );
    for m in perf_maps() {
        if !before.contains(&m) {
            let _ = std::fs::remove_file(m);
        }
    }
    let s = share(&data, "profdevHotLoop");
    assert!(
        s >= 50.0,
        "profdevHotLoop has {s}% of the samples:\n{}",
        report(&data)
    );
}

#[test]
fn a_perf_map_that_is_a_link_is_not_read() {
    let setpriv = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "true",
        ])
        .status()
        .map_err(|e| e.to_string())
        .and_then(|s| s.success().then_some(()).ok_or("setpriv needs root".into()));
    if !common::privileged("a planted perf map", setpriv) || !ready("a planted perf map", &["gcc"])
    {
        return;
    }
    let d = tempdir();
    let exe = jitgen(d.path());
    // The program runs as nobody, from a directory it may read.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = d.path().join("secret.map");
    let data = d.path().join("link.data");
    let mut child = profdev()
        .args(["record", "-g", "-o"])
        .arg(&data)
        .args([
            "--",
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
        ])
        .arg(&exe)
        .arg(d.path())
        .args(["0.3", "link"])
        .arg(&secret)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.split_whitespace().nth(1).expect("ready ADDR PID");
    // A root-only file naming the program's code: what a link would leak.
    std::fs::write(&secret, format!("{addr} 40 leaked_secret_name\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let t = ok(profdev()
        .args(["report", "--sort", "sym", "-i"])
        .arg(&data)
        .output()
        .unwrap());
    assert!(!t.contains("leaked_secret_name"), "{t}");
    assert!(t.lines().any(|l| l.ends_with("  [anon]")), "{t}");
}
