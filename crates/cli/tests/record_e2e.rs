//! `profdev record` end to end: a C program with a known call tree
//! (tests/fixtures/calltree.c: main -> a -> b -> c hot, main -> d warm)
//! recorded with -g and read back through `profdev export`; attaching to a
//! running process with -p; a recording killed with SIGKILL leaves a
//! `.partial` that exports; an existing recording is kept as `.old`.

mod common;

use common::{can_sample_children, fixture, privileged, profdev, ready, tempdir};
use profdev_formats::recording;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("calltree");
    let o = Command::new("gcc")
        .args(["-O1", "-g", "-o"])
        .arg(&exe)
        .arg(fixture("calltree.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    exe
}

/// How long bounded waits may take: a hang guard, not a duration.
const LONG: Duration = Duration::from_secs(120);

/// The CPU time a task of an attached recording must use while it
/// records.
const ATTACHED_CPU: Duration = Duration::from_millis(200);

/// The user and system time of the task whose `/proc/.../stat` is
/// `stat`; none once it is gone.
fn cpu_time(stat: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(stat).ok()?;
    // The fields after the command name, which may hold spaces: from 3.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let ticks = field(14)? + field(15)?;
    // SAFETY: sysconf only reads a constant of the system.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz.max(1)))
}

/// `profdev record ARGS -o DATA -- CMD`, attached (ARGS give -p), with a
/// CMD that ends once each task whose `/proc/.../stat` is in `busy` has
/// used [`ATTACHED_CPU`] since it started (after the sessions opened): a
/// window of the targets' CPU time, not of the wall clock, which a loaded
/// machine may give to others.
fn record_attached(args: &[&str], data: &Path, busy: &[String]) -> Output {
    let started = data.with_extension("started");
    let _ = std::fs::remove_file(&started);
    // CMD says it started, then waits for the end of its input.
    let mut rec = profdev()
        .arg("record")
        .args(args)
        .arg("-o")
        .arg(data)
        .args(["--", "sh", "-c", ": > \"$1\"; read -r _ || :", "sh"])
        .arg(&started)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    profdev_testkit::wait_until("record's CMD to start", LONG, || {
        started.exists() || rec.try_wait().unwrap().is_some()
    });
    if started.exists() {
        let from: Vec<Duration> = busy
            .iter()
            .map(|s| cpu_time(s).unwrap_or_else(|| panic!("{s} is gone")))
            .collect();
        profdev_testkit::wait_until(
            &format!("{busy:?} to use {ATTACHED_CPU:?} of CPU time while attached"),
            LONG,
            || {
                // (A recording that ended already says why in its output.)
                rec.try_wait().unwrap().is_some()
                    || busy
                        .iter()
                        .zip(&from)
                        .all(|(s, &t)| cpu_time(s).is_some_and(|now| now >= t + ATTACHED_CPU))
            },
        );
    }
    // End of input: CMD ends, and the recording with it.
    drop(rec.stdin.take());
    profdev_testkit::wait_exit("profdev record", &mut rec, LONG);
    rec.wait_with_output().unwrap()
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "status {:?}\nstdout {}\nstderr {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn export(args: &[&str], input: &Path) -> String {
    ok(profdev()
        .arg("export")
        .args(args)
        .arg("-i")
        .arg(input)
        .output()
        .unwrap())
}

/// (stack, count) of folded text, heaviest first.
fn folded(text: &str) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = text
        .lines()
        .map(|l| {
            let (s, n) = l.rsplit_once(' ').unwrap();
            (s.to_string(), n.parse().unwrap())
        })
        .collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v
}

#[test]
fn call_tree_of_a_c_program() {
    if !ready("profdev record -g of a C program", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path());
    let data = d.path().join("prog.data");
    let o = profdev()
        .args(["record", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .arg("1500")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    ok(o);
    assert!(err.contains("bytes per sample"), "{err}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&data).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let rec = recording::read(&std::fs::read(&data).unwrap()).unwrap();
    assert!(rec.complete && rec.torn.is_none());
    let obj = rec
        .objects
        .iter()
        .find(|o| o.info.path == exe.to_str().unwrap())
        .expect("the program is an object");
    assert!(obj.info.inode != 0 && !obj.info.build_id.is_empty());
    // profdev report: c leads by self, main and a hold c in their stacks.
    let report = ok(profdev()
        .args(["report", "--sort", "sym", "--ci", "-i"])
        .arg(&data)
        .output()
        .unwrap());
    let rows: Vec<&str> = report.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(rows[0].ends_with("  c"), "{report}");
    assert!(report.contains("Wilson"), "{report}");
    let report = ok(profdev()
        .args(["report", "--sort", "comm,sym", "--children", "-i"])
        .arg(&data)
        .output()
        .unwrap());
    let share = |sym: &str, col: usize| -> f64 {
        let row = report
            .lines()
            .find(|l| l.ends_with(&format!("  calltree  {sym}")))
            .unwrap_or_else(|| panic!("no row for {sym}: {report}"));
        row.split_whitespace()
            .nth(col)
            .unwrap()
            .trim_end_matches('%')
            .parse()
            .unwrap()
    };
    // Every calltree sample in its own code is under main; a's children
    // hold c's (a calls b calls c): at least c's self share.
    assert!(share("a", 0) >= share("c", 1), "{report}");
    assert!(
        share("main", 0) >= share("a", 0) + share("d", 1),
        "{report}"
    );
    let stacks = folded(&export(&["folded"], &data));
    assert!(
        stacks[0].0.ends_with("main;a;b;c"),
        "heaviest stack: {stacks:?}"
    );
    assert!(
        stacks.iter().any(|(s, _)| s.ends_with("main;d")),
        "{stacks:?}"
    );
    let svg = export(&["svg"], &data);
    for f in ["main", "a", "b", "c", "d"] {
        assert!(svg.contains(&format!("<title>{f} (")), "{f}");
    }
    // Source lines came from the program's DWARF.
    let c = obj.functions.iter().find(|f| f.name == "c").unwrap();
    let (file, _) = obj.line_at(c, c.lines[0].addr).unwrap();
    assert!(file.ends_with("calltree.c"), "{file}");
    if profdev_testkit::tools("go tool pprof reads a recorded profile", &["go"]) {
        let pb = d.path().join("p.pb.gz");
        ok(profdev()
            .args(["export", "pprof", "-i"])
            .arg(&data)
            .arg("-o")
            .arg(&pb)
            .output()
            .unwrap());
        let top = ok(Command::new("go")
            .args(["tool", "pprof", "-top"])
            .arg(&pb)
            .env("HOME", d.path())
            .output()
            .unwrap());
        let first = top
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"))
            .nth(1)
            .unwrap_or("");
        assert!(first.ends_with(" c"), "{top}");
    }
    if profdev_testkit::tools("gprof reads a recorded gmon export", &["gprof"]) {
        let gm = d.path().join("gmon.out");
        ok(profdev()
            .args(["export", "gmon", "-i"])
            .arg(&data)
            .arg("-o")
            .arg(&gm)
            .output()
            .unwrap());
        let flat = ok(Command::new("gprof")
            .args(["-b", "-p"])
            .arg(&exe)
            .arg(&gm)
            .output()
            .unwrap());
        let first = flat
            .lines()
            .skip_while(|l| !l.contains("time   seconds"))
            .nth(1)
            .unwrap_or("");
        assert!(first.ends_with(" c"), "{flat}");
    }
    let json = export(&["firefox"], &data);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["threads"][0]["name"], "calltree");
    let strings = v["shared"]["stringArray"]
        .as_array()
        .or_else(|| v["threads"][0]["stringArray"].as_array())
        .expect("a string table");
    for f in ["main", "a", "b", "c", "d"] {
        assert!(
            strings.iter().any(|s| s == f),
            "frame {f} in the Firefox profile"
        );
    }
}

/// -p attaches to a running process for the duration of CMD and leaves it
/// running; a second recording to the same name keeps the first as .old.
/// Each lasts until the process has run 200 ms while attached.
#[test]
fn attach_with_p_and_keep_old() {
    if !ready("profdev record -p PID", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path());
    let mut target = Command::new(&exe)
        .arg("1000000")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id();
    let data = d.path().join("attach.data");
    for _ in 0..2 {
        ok(record_attached(
            &["-g", "-p", &pid.to_string()],
            &data,
            &[format!("/proc/{pid}/stat")],
        ));
    }
    assert!(
        target.try_wait().unwrap().is_none(),
        "the target still runs"
    );
    // Detached cleanly: not left stopped or traced, and no profdev
    // process left behind holding it.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let state = stat.rsplit(')').next().unwrap().split_whitespace().next();
    assert!(matches!(state, Some("R" | "S")), "state {state:?}: {stat}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.contains("TracerPid:\t0\n"), "{status}");
    target.kill().unwrap();
    target.wait().unwrap();
    let mut old = data.clone().into_os_string();
    old.push(".old");
    for f in [data.clone(), PathBuf::from(old)] {
        let rec = recording::read(&std::fs::read(&f).unwrap()).unwrap();
        assert!(rec.complete);
        assert!(!rec.samples.is_empty(), "{}", f.display());
        assert!(rec.samples.iter().all(|s| s.pid == pid));
        assert!(rec.tasks.iter().any(|t| t.comm == "calltree"));
    }
    let stacks = folded(&export(&["folded"], &data));
    assert!(
        stacks.iter().any(|(s, _)| s.contains("main;a;b;c")),
        "{stacks:?}"
    );
}

/// SIGKILL while recording leaves FILE.partial, which exports the samples
/// it holds.
#[test]
fn killed_recording_leaves_an_exportable_partial() {
    if !ready("profdev record killed with SIGKILL", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path());
    let data = d.path().join("k.data");
    let partial = d.path().join("k.data.partial");
    let mut rec = profdev()
        .args(["record", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .arg("1000000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Samples, and the symbols of main, a, b and c (written once a second
    // for the addresses sampled in it: a .partial killed earlier would
    // hold the samples without their names).
    profdev_testkit::wait_until(
        "the .partial holds samples and calltree's symbols",
        Duration::from_secs(30),
        || {
            std::fs::read(&partial)
                .ok()
                .and_then(|b| recording::read(&b).ok())
                .is_some_and(|r| {
                    let named = |f: &str| {
                        r.objects.iter().any(|o| {
                            o.info.path.ends_with("/calltree")
                                && o.functions.iter().any(|g| g.name == f)
                        })
                    };
                    r.samples.len() >= 50 && ["main", "a", "b", "c"].into_iter().all(named)
                })
        },
    );
    rec.kill().unwrap();
    rec.wait().unwrap();
    assert!(!data.exists());
    let text = export(&["folded"], &partial);
    let n: u64 = folded(&text).iter().map(|(_, n)| n).sum();
    assert!(n >= 50, "{text}");
    assert!(text.contains("main;a;b;c"), "{text}");
    // A second record refuses to overwrite the .partial.
    let o = profdev()
        .args(["record", "-o"])
        .arg(&data)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("exists") && err.lines().count() == 1, "{err}");
}

/// A kernel-heavy command recorded without -g: readprofile reads the
/// proc-profile export with a System.map made from /proc/kallsyms, and
/// profdev kprof reads the kpdata export; both count the same kernel
/// samples the recording holds.
#[test]
fn kernel_exports_of_a_real_recording() {
    if !privileged(
        "profdev record of dd, kernel exports",
        can_sample_children(),
    ) || !profdev_testkit::tools(
        "readprofile reads a recorded proc-profile",
        &["readprofile"],
    ) {
        return;
    }
    let d = tempdir();
    let data = d.path().join("dd.data");
    ok(profdev()
        .args(["record", "-o"])
        .arg(&data)
        .args([
            "--",
            "dd",
            "if=/dev/zero",
            "of=/dev/null",
            "bs=64k",
            "count=300000",
        ])
        .output()
        .unwrap());
    let rec = recording::read(&std::fs::read(&data).unwrap()).unwrap();
    let kernel_id = rec
        .objects
        .iter()
        .find(|o| o.info.kind == recording::ObjectKind::Kernel)
        .expect("dd spends time in the kernel")
        .id;
    let in_kernel = rec
        .samples
        .iter()
        .filter(|s| s.kernel && rec.stack(s).first().is_some_and(|f| f.object == kernel_id))
        .count() as u64;
    assert!(in_kernel > 0);
    // System.map: the core kernel's text symbols, by address.
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let mut syms: Vec<(u64, &str)> = kallsyms
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && matches!(f[1], "T" | "t" | "W" | "w"))
                .then(|| Some((u64::from_str_radix(f[0], 16).ok()?, l)))
                .flatten()
        })
        .collect();
    syms.sort_by_key(|s| s.0);
    assert!(
        syms.iter().any(|s| s.0 != 0),
        "kallsyms shows addresses to root"
    );
    let map: String = syms.iter().map(|(_, l)| format!("{l}\n")).collect();
    let map_path = d.path().join("System.map");
    std::fs::write(&map_path, map).unwrap();
    let prof = d.path().join("profile");
    ok(profdev()
        .args(["export", "proc-profile", "-i"])
        .arg(&data)
        .arg("-o")
        .arg(&prof)
        .output()
        .unwrap());
    let text = ok(Command::new("readprofile")
        .arg("-p")
        .arg(&prof)
        .arg("-m")
        .arg(&map_path)
        .output()
        .unwrap());
    // Every kernel-mode sample is counted: in a function or *unknown*.
    let count = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} line:\n{text}"))
    };
    let kernel_mode = rec.samples.iter().filter(|s| s.kernel).count() as u64;
    // readprofile's total leaves out the sink (*unknown*).
    assert_eq!(count("total") + count("*unknown*"), kernel_mode, "{text}");
    assert!(count("total") > 0, "{text}");
    let kp = d.path().join("kpdata");
    ok(profdev()
        .args(["export", "kpdata", "-i"])
        .arg(&data)
        .arg("-o")
        .arg(&kp)
        .output()
        .unwrap());
    let report = ok(profdev()
        .arg("kprof")
        .arg(&map_path)
        .arg(&kp)
        .output()
        .unwrap());
    let total = format!("total: {}\t", rec.samples.len());
    assert!(report.starts_with(&total), "{report}");
}

/// Two named threads of one process are two threads of the recording and
/// of the Firefox export, each with its own function on top.
#[test]
fn two_threads_are_recorded_apart() {
    if !ready("profdev record -g of a two-thread program", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = d.path().join("twothreads");
    let o = Command::new("gcc")
        .args(["-O1", "-g", "-pthread", "-o"])
        .arg(&exe)
        .arg(fixture("twothreads.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    let data = d.path().join("t.data");
    ok(profdev()
        .args(["record", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .arg("2000")
        .output()
        .unwrap());
    let rec = recording::read(&std::fs::read(&data).unwrap()).unwrap();
    // Each worker's samples are in its own thread, under its own loop.
    for (worker, spin) in [("worker_a", "spin_a"), ("worker_b", "spin_b")] {
        let tids: std::collections::BTreeSet<u32> = rec
            .samples
            .iter()
            .filter(|s| rec.task(s).comm == worker)
            .map(|s| s.tid)
            .collect();
        assert_eq!(tids.len(), 1, "{worker}: {tids:?}");
        let tid = *tids.first().unwrap();
        let names = profdev_formats::export::Names::new(&rec);
        let on_top: u64 = rec
            .samples
            .iter()
            .enumerate()
            .filter(|(_, s)| s.tid == tid)
            .filter(|(i, _)| {
                names
                    .stack(*i)
                    .first()
                    .is_some_and(|&f| names.funcs[f as usize].name == spin)
            })
            .count() as u64;
        assert!(on_top > 0, "{worker} has no samples in {spin}");
        let other = if spin == "spin_a" { "spin_b" } else { "spin_a" };
        assert!(
            (0..rec.samples.len())
                .filter(|&i| rec.samples[i].tid == tid)
                .all(|i| names
                    .stack(i)
                    .iter()
                    .all(|&f| names.funcs[f as usize].name != other)),
            "{worker} ran {other}"
        );
    }
    // profdev report's per-thread rows: one per worker, each with its tid.
    let report = ok(profdev()
        .args(["report", "--sort", "comm,tid", "-i"])
        .arg(&data)
        .output()
        .unwrap());
    let mut worker_tids = Vec::new();
    for worker in ["worker_a", "worker_b"] {
        let rows: Vec<&str> = report
            .lines()
            .filter(|l| !l.starts_with('#') && l.split_whitespace().nth(1) == Some(worker))
            .collect();
        assert_eq!(rows.len(), 1, "one row for {worker}: {report}");
        let tid: u32 = rows[0].split_whitespace().nth(2).unwrap().parse().unwrap();
        assert!(rec.tasks.iter().any(|t| t.tid == tid && t.comm == worker));
        worker_tids.push(tid);
    }
    assert_ne!(worker_tids[0], worker_tids[1], "{report}");
    let v: serde_json::Value = serde_json::from_str(&export(&["firefox"], &data)).unwrap();
    let names: Vec<&str> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"worker_a") && names.contains(&"worker_b"),
        "{names:?}"
    );
}

/// SIGTERM while recording: CMD's group is ended, the recording is
/// completed and renamed into place, and the status is 128 + 15.
#[test]
fn sigterm_writes_a_complete_recording() {
    if !ready("profdev record interrupted by SIGTERM", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path());
    let data = d.path().join("s.data");
    let partial = d.path().join("s.data.partial");
    let child = profdev()
        .args(["record", "-g", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .arg("1000000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    profdev_testkit::wait_until(
        "the .partial holds samples",
        Duration::from_secs(30),
        || {
            std::fs::read(&partial)
                .ok()
                .and_then(|b| recording::read(&b).ok())
                .is_some_and(|r| r.samples.len() >= 20)
        },
    );
    // SAFETY: kill on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("interrupted by SIGTERM"), "{err}");
    assert!(!partial.exists());
    let rec = recording::read(&std::fs::read(&data).unwrap()).unwrap();
    assert!(rec.complete && rec.samples.len() >= 20);
}

/// `-a` with a CMD records the whole system while CMD runs, up to its very
/// end: the samples the time-order merge still held when CMD exited are
/// written too. calltree spends its CPU time in c and d; at 1 kHz its
/// samples are about its CPU milliseconds (bash's `times` reports them).
#[test]
fn system_wide_recording_keeps_its_last_samples() {
    if !ready("profdev record -a -- CMD", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path());
    let data = d.path().join("all.data");
    let o = profdev()
        .args(["record", "-a", "-o"])
        .arg(&data)
        .args(["--", "bash", "-c", "\"$0\" 200 >/dev/null; times"])
        .arg(&exe)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let stdout = ok(o);
    // `times`: the shell's user and system time, then its children's.
    let secs = |f: &str| -> f64 {
        let (m, s) = f.trim_end_matches('s').split_once('m').unwrap();
        m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
    };
    let children: Vec<&str> = stdout.lines().nth(1).unwrap().split_whitespace().collect();
    let cpu_ms = ((secs(children[0]) + secs(children[1])) * 1000.0) as u64;
    assert!(cpu_ms >= 50, "calltree ran {cpu_ms} ms of CPU: {stdout}");
    let rec = recording::read(&std::fs::read(&data).unwrap()).unwrap();
    let pids: Vec<u32> = rec
        .tasks
        .iter()
        .filter(|t| t.comm == "calltree")
        .map(|t| t.pid)
        .collect();
    let mine = rec.samples.iter().filter(|s| pids.contains(&s.pid)).count() as u64;
    // A sample per ms of CPU: half of that is five standard deviations
    // below what a whole recording holds. CMD runs about a tenth of a
    // second, about one read of the rings: what the merge held at its end
    // is most of it.
    assert!(
        mine * 2 >= cpu_ms,
        "{mine} samples of calltree for {cpu_ms} ms of CPU: {stderr}"
    );
}

/// `-p PID` follows every thread the process already has (an event opened
/// on the pid alone would follow only its main thread, which here waits
/// in pthread_join and takes no sample), and `-p` takes a list.
#[test]
fn attach_follows_every_thread_of_every_listed_process() {
    if !ready("profdev record -p PID,PID of two-thread programs", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = d.path().join("twothreads");
    let o = Command::new("gcc")
        .args(["-O1", "-g", "-pthread", "-o"])
        .arg(&exe)
        .arg(fixture("twothreads.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    let mut targets: Vec<std::process::Child> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .arg("1000000")
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let pids: Vec<u32> = targets.iter().map(|t| t.id()).collect();
    for pid in &pids {
        profdev_testkit::wait_until(
            "both worker threads to start",
            Duration::from_secs(30),
            || {
                std::fs::read_dir(format!("/proc/{pid}/task"))
                    .map(|d| d.count() == 3)
                    .unwrap_or(false)
            },
        );
    }
    let data = d.path().join("p.data");
    let list = format!("{},{}", pids[0], pids[1]);
    // The worker threads (every thread but the main one), each to run
    // while attached.
    let workers: Vec<String> = pids
        .iter()
        .flat_map(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .map(|t| t.unwrap().file_name().into_string().unwrap())
                .filter(|tid| *tid != pid.to_string())
                .map(move |tid| format!("/proc/{pid}/task/{tid}/stat"))
        })
        .collect();
    assert_eq!(workers.len(), 4, "{workers:?}");
    let o = record_attached(&["-p", &list], &data, &workers);
    for t in &mut targets {
        t.kill().unwrap();
        t.wait().unwrap();
    }
    ok(o);
    let rec = recording::read(&std::fs::read(&data).unwrap()).unwrap();
    for pid in &pids {
        for worker in ["worker_a", "worker_b"] {
            assert!(
                rec.samples
                    .iter()
                    .any(|s| s.pid == *pid && rec.task(s).comm == worker),
                "no sample of {worker} in {pid}: {:?}",
                rec.tasks
            );
        }
    }
    // A pid that does not exist: one sentence.
    let o = profdev()
        .args(["record", "-p", "999999999", "-o"])
        .arg(d.path().join("none.data"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no process 999999999") && err.lines().count() == 1,
        "{err}"
    );
}
