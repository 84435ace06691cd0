//! End to end: kernel call-graph profiling with the kgmon device, the real
//! perf_event engine and the real GNU gprof as the oracle.
//!
//! * `device_live_begin_halt_dump_gprof`: the device driven in process
//!   through its files (begin, workload, halt, read gmon.out); its
//!   histogram and gmonparam's counters must agree (every tick in a cell or
//!   counted as saturated), then `gprof -b vmlinux.syms gmon.out` must
//!   exit 0 and name the workload's kernel function among its top five.
//! * `kgmon_sequence_through_the_mount`: the same through `profdev kgmon
//!   -b`, `-h`, `-p` and a mounted device tree (started by kgmon itself).
//! * `no_server_and_none_startable`: one sentence, exit 1.

mod common;
use common::*;
use profdev_dev::kgmon::{Kgmon, KgmonConfig};
use profdev_dev::tree::walk;
use profdev_dev::{Dev, Engine, OpenMode, Qid};
use profdev_formats::gmon;
use profdev_symbolize::KernelSymbols;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// One `dd if=/dev/zero of=/dev/null` of 1.3 GB: kernel zeroing.
fn dd() {
    let st = Command::new("dd")
        .args(["if=/dev/zero", "of=/dev/null", "bs=64k", "count=20000"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
}

/// The value of `key` in a gmonparam text (`name value` lines).
fn param(gmonparam: &str, key: &str) -> u64 {
    gmonparam
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in gmonparam:\n{gmonparam}"))
}

/// Kernel ticks the workload runs until the profile holds: enough for
/// the checks (dd's zeroing among gprof's top five), whatever the load of
/// the machine.
const TICKS: u64 = 2000;

/// Run [`dd`] until `gmonparam()` (the profile's, while on) counts
/// [`TICKS`] kernel ticks, checked after each run. Stopping there, rather
/// than after a fixed amount of work that a slow VM may take a minute on,
/// keeps the histogram's cells far from full (65535). Fails when the ticks
/// are still short after two minutes (a hang guard: dd takes a fraction
/// of a second on an idle machine).
fn dd_until_ticks(mut gmonparam: impl FnMut() -> String) {
    let start = std::time::Instant::now();
    loop {
        dd();
        let p = gmonparam();
        if param(&p, "ticks") >= TICKS {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "fewer than {TICKS} kernel ticks after 120 s of dd:\n{p}"
        );
    }
}

fn have_gprof() -> bool {
    profdev_testkit::tools("kgmon's profile read by gprof", &["gprof"])
}

/// `gprof -b vmlinux.syms gmon.out` in `dir`: its flat profile's first
/// five function names (after checking it exits 0).
fn gprof_top5(dir: &Path) -> (Vec<String>, String) {
    let g = Command::new("gprof")
        .args(["-b", "vmlinux.syms", "gmon.out"])
        .current_dir(dir)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&g.stdout).into_owned();
    assert!(
        g.status.success(),
        "gprof failed: {}\n{out}",
        String::from_utf8_lossy(&g.stderr)
    );
    let top = out
        .lines()
        .skip_while(|l| !l.starts_with(" time   seconds"))
        .skip(1)
        .take(5)
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    (top, out)
}

fn ctl(dev: &Kgmon, msg: &str) {
    let e = walk(dev, Qid::ROOT, "ctl").unwrap();
    let mut c = dev.open(e.qid, OpenMode::Write).unwrap();
    dev.write(&mut c, 0, msg.as_bytes()).unwrap();
}

fn read(dev: &Kgmon, name: &str) -> Vec<u8> {
    let e = walk(dev, Qid::ROOT, name).unwrap();
    let mut c = dev.open(e.qid, OpenMode::Read).unwrap();
    let mut out = Vec::new();
    loop {
        let chunk = dev.read(&mut c, out.len() as u64, 1 << 16).unwrap();
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    assert_eq!(out.len() as u64, e.length, "{name}: stat length");
    out
}

#[test]
fn device_live_begin_halt_dump_gprof() {
    if !privileged("kgmon live sampling", can_sample_system()) || !have_gprof() {
        return;
    }
    let ksyms = KernelSymbols::running().unwrap();
    let text = ksyms.require_text("/proc/kallsyms").unwrap();
    let functions: Vec<u64> = ksyms.text_symbols().iter().map(|s| s.addr).collect();
    let dev = Kgmon::new(
        KgmonConfig::new(text, &functions),
        Engine::new(Arc::new(profdev_sample::PerfFactory::new())),
    );
    assert_eq!(read(&dev, "state"), b"off\n");
    ctl(&dev, "begin\n");
    assert_eq!(read(&dev, "state"), b"on\n");
    dd_until_ticks(|| String::from_utf8(read(&dev, "gmonparam")).unwrap());
    ctl(&dev, "halt\n");
    assert_eq!(read(&dev, "state"), b"off\n");
    let gmonparam = String::from_utf8(read(&dev, "gmonparam")).unwrap();
    let bytes = read(&dev, "gmon.out");
    let d = gmon::parse(&bytes, gmon::Target::X86_64).unwrap();
    assert_eq!(d.format, gmon::Format::Bsd);
    let h = &d.gmon.histograms[0];
    let binned: u64 = h.bins.iter().map(|&b| u64::from(b)).sum();
    assert!(binned > 50, "only {binned} kernel ticks\n{gmonparam}");
    assert!(
        d.gmon.arcs.len() > 5,
        "{} arcs\n{gmonparam}",
        d.gmon.arcs.len()
    );
    // Every tick of the text is in a cell or, its cell full, counted as
    // saturated; and only a full cell loses ticks. (The workload stops
    // far below a full cell, but on a slow machine the idle loop's cell
    // may still fill: not asserting `saturated 0` keeps that no failure.)
    let saturated = param(&gmonparam, "saturated");
    assert_eq!(
        binned + saturated,
        param(&gmonparam, "ticks"),
        "cells and saturated add up to the ticks\n{gmonparam}"
    );
    assert!(
        saturated == 0 || h.bins.contains(&u16::MAX),
        "saturated ticks but no full cell\n{gmonparam}"
    );

    let dir = tempdir();
    std::fs::write(dir.path().join("gmon.out"), &bytes).unwrap();
    // kgmon -p's vmlinux.syms (clones such as `.isra.0` as global symbols).
    std::fs::write(
        dir.path().join("vmlinux.syms"),
        profdev_gprof::symbols::vmlinux_syms(&ksyms, &d.gmon),
    )
    .unwrap();
    let (top, out) = gprof_top5(dir.path());
    eprintln!(
        "{gmonparam}{}",
        out.lines().take(40).collect::<Vec<_>>().join("\n")
    );
    assert!(
        top.iter().any(|s| is_zeroing(s)),
        "top five {top:?}\n{gmonparam}\n{out}"
    );
    // Kernel arcs show up as callers in the call graph.
    assert!(out.contains("\t\t\tCall graph\n"), "{out}");
}

/// Unmounts `0` when dropped, whatever happened.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = run(profdev().arg("unmount").arg(&self.0));
    }
}

fn is_mounted(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == dir.to_str())
}

#[test]
fn kgmon_sequence_through_the_mount() {
    if !privileged(
        "kgmon through the mount",
        can_sample_system().and(can_mount()),
    ) || !have_gprof()
    {
        return;
    }
    let d = tempdir();
    let mnt = d.path().join("mnt");
    let work = d.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let kgmon = |flags: &str| {
        let o = run(profdev()
            .arg("kgmon")
            .arg(flags)
            .env("PROFDEV_MOUNT", &mnt)
            .current_dir(&work));
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let guard = Unmount(mnt.clone());
    // No server yet: kgmon starts one and says so.
    let (code, out, err) = kgmon("-rb");
    assert_eq!(code, Some(0), "kgmon -rb: {out}{err}");
    assert_eq!(out, "kgmon: kernel profiling is running.\n");
    assert!(
        err.contains(&format!(
            "started a device server at {0} (stop it with: profdev unmount {0})\n",
            mnt.display()
        )),
        "kgmon must say it started a server, and how to stop it: {err}"
    );
    assert_eq!(
        std::fs::read_to_string(mnt.join("gmon/state")).unwrap(),
        "on\n"
    );
    dd_until_ticks(|| std::fs::read_to_string(mnt.join("gmon/gmonparam")).unwrap());
    let (code, out, err) = kgmon("-h");
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "kgmon: kernel profiling is off.\n"),
        "{err}"
    );
    assert_eq!(err, "", "the server is reused silently");
    let (code, out, err) = kgmon("-p");
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "kgmon: kernel profiling is off.\n"),
        "{err}"
    );
    assert!(err.contains("not numbers of calls"), "{err}");
    // The dump is the device's gmon.out, byte for byte.
    assert_eq!(
        std::fs::read(work.join("gmon.out")).unwrap(),
        std::fs::read(mnt.join("gmon/gmon.out")).unwrap()
    );
    drop(guard);
    assert!(!is_mounted(&mnt), "still mounted");
    let (top, report) = gprof_top5(&work);
    assert!(
        top.iter().any(|s| is_zeroing(s)),
        "top five {top:?}\n{report}"
    );
}

#[test]
fn no_server_and_none_startable() {
    let d = tempdir();
    // A regular file where the mount point should be: nothing can mount.
    let not_a_dir = d.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let o = run(profdev()
        .args(["kgmon", "-b"])
        .env("PROFDEV_MOUNT", &not_a_dir));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "kgmon: no device server is mounted on {} and none could be started",
            not_a_dir.display()
        )),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn usage_and_help() {
    let o = run(profdev().args(["kgmon", "-x"]));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "usage: profdev kgmon [-bhpr] [-N system]\n"
    );
    let o = run(profdev().args(["kgmon", "--help"]));
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("not numbers of calls"));
}
