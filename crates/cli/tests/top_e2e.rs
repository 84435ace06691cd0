//! `profdev top --batch`: while a compiled C program burns CPU in a known
//! function (`profdev_top_spin`, tests/fixtures/topspin.c), two snapshots
//! system-wide both show that function with the program's name and pid, and
//! the health line; `-p PID` keeps that process's rows alone; bad options,
//! a missing pid and a missing privilege are one sentence and a non-zero
//! status.
//!
//! The workload says `spinning` on its stdout as it enters the function and
//! burns CPU until the test kills it (at most 120 s of CPU), so it is
//! runnable through every snapshot's window: on any scheduler it gets CPU
//! time in two seconds, and each of its samples lands in the function.
//! No share is asserted, only presence.
//!
//! Needs root (or CAP_PERFMON) and cc; skips saying why without them, and
//! fails instead when PROFDEV_REQUIRE_PRIVILEGED=1.

mod common;
use common::*;
use profdev_testkit::Terminal;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The workload, running in its function; killed when dropped.
struct Spin(Child);

impl Spin {
    fn start(dir: &Path) -> Spin {
        Spin::program(dir, "topspin", "spinning")
    }

    /// Fixture NAME.c, started, once it said `says` as it enters its loop.
    fn program(dir: &Path, name: &str, says: &str) -> Spin {
        let exe = dir.join(name);
        let o = Command::new("cc")
            .args(["-O1", "-fno-inline", "-g", "-o"])
            .arg(&exe)
            .arg(fixture(&format!("{name}.c")))
            .output()
            .unwrap();
        assert!(o.status.success(), "cc: {o:?}");
        let mut child = Command::new(&exe).stdout(Stdio::piped()).spawn().unwrap();
        // Wait for it to be in the loop: its line comes as it enters.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, format!("{says}\n"));
        Spin(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ready(what: &str) -> bool {
    privileged(what, can_sample_system()) && profdev_testkit::tools(what, &["cc"])
}

/// The snapshots of a batch run: each a list of lines (title first).
fn snapshots(stdout: &str) -> Vec<Vec<&str>> {
    stdout
        .split("\n\n")
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.lines().collect())
        .collect()
}

/// The rows (after title, health line and heads) of a snapshot without
/// -g, split into [self%, COMMAND, PID, MODULE, FUNCTION] (FUNCTION may
/// hold spaces).
fn rows(snap: &[&str]) -> Vec<Vec<String>> {
    snap[3..]
        .iter()
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let mut row: Vec<String> = words.iter().take(4).map(|w| w.to_string()).collect();
            row.push(words.get(4..).unwrap_or(&[]).join(" "));
            row
        })
        .collect()
}

fn check_health(line: &str) {
    assert!(line.starts_with("health: "), "{line}");
    for key in [" Hz (asked 1000), ", " samples, ", " lost, ", " throttled"] {
        assert!(line.contains(key), "{key:?} missing: {line}");
    }
}

#[test]
fn system_wide_snapshots_show_the_hot_function_by_process() {
    let what = "system_wide_snapshots_show_the_hot_function_by_process";
    if !ready(what) {
        return;
    }
    let d = tempdir();
    let spin = Spin::start(d.path());
    let pid = spin.pid().to_string();
    let out = run(profdev().args(["top", "--batch", "-n", "2", "-d", "1", "-F", "1000", "-a"]));
    drop(spin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let snaps = snapshots(&stdout);
    assert_eq!(snaps.len(), 2, "{stdout}");
    for (i, snap) in snaps.iter().enumerate() {
        assert!(
            snap[0].starts_with(&format!(
                "profdev top: snapshot {} of 2, every 1 s, system-wide at 1000 Hz, by self",
                i + 1
            )),
            "{stdout}"
        );
        check_health(snap[1]);
        assert!(
            snap[2].contains("COMMAND") && snap[2].contains("FUNCTION"),
            "{stdout}"
        );
        let hot = rows(snap)
            .into_iter()
            .find(|r| r[4] == "profdev_top_spin")
            .unwrap_or_else(|| panic!("no profdev_top_spin row in snapshot {}:\n{stdout}", i + 1));
        assert_eq!(
            (hot[1].as_str(), hot[2].as_str(), hot[3].as_str()),
            ("topspin", pid.as_str(), "topspin"),
            "{stdout}"
        );
    }
}

#[test]
fn one_process_only_with_p() {
    let what = "one_process_only_with_p";
    if !ready(what) {
        return;
    }
    let d = tempdir();
    let spin = Spin::start(d.path());
    let pid = spin.pid().to_string();
    let out = run(profdev().args(["top", "--batch", "-n", "1", "-d", "1", "-p", &pid]));
    drop(spin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let snaps = snapshots(&stdout);
    assert_eq!(snaps.len(), 1, "{stdout}");
    assert!(
        snaps[0][0].contains(&format!("process {pid} at 1000 Hz")),
        "{stdout}"
    );
    check_health(snaps[0][1]);
    let rows = rows(&snaps[0]);
    assert!(rows.iter().all(|r| r[2] == pid), "{stdout}");
    assert!(rows.iter().any(|r| r[4] == "profdev_top_spin"), "{stdout}");
}

#[test]
fn callgraph_shows_total_shares_of_main() {
    let what = "callgraph_shows_total_shares_of_main";
    if !ready(what) {
        return;
    }
    let d = tempdir();
    let spin = Spin::start(d.path());
    let pid = spin.pid().to_string();
    let out = run(profdev().args([
        "top", "--batch", "-n", "1", "-d", "1", "-g", "--sort", "total", "-p", &pid,
    ]));
    drop(spin);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let snap = &snapshots(&stdout)[0];
    assert!(snap[1].contains(" unwind failures"), "{stdout}");
    assert!(snap[2].contains("total%"), "{stdout}");
    // main calls profdev_top_spin: unwound, main's total is at least the
    // spin function's.
    let total_of = |f: &str| {
        snap[3..]
            .iter()
            .find(|l| l.ends_with(&format!(" {f}")))
            .map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .trim_end_matches('%')
                    .parse::<f64>()
                    .unwrap()
            })
            .unwrap_or_else(|| panic!("no {f} row:\n{stdout}"))
    };
    assert!(total_of("main") >= total_of("profdev_top_spin"), "{stdout}");
}

/// `--wall`: a process that only sleeps, 10 ms at a time in a known
/// function, has that function in (nearly) all of its thread time,
/// though it is hardly ever on the CPU: each wait is counted from the
/// switch out to the switch back, with the stack it blocked in.
#[test]
fn the_wall_view_shows_where_a_sleeping_process_waits() {
    let what = "the_wall_view_shows_where_a_sleeping_process_waits";
    if !ready(what) {
        return;
    }
    let d = tempdir();
    let nap = Spin::program(d.path(), "topnap", "napping");
    let pid = nap.pid().to_string();
    let out = run(profdev().args([
        "top", "--batch", "-n", "1", "-d", "1", "--wall", "--sort", "total", "-p", &pid,
    ]));
    drop(nap);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let snap = &snapshots(&stdout)[0];
    assert!(snap[0].contains(", wall, by total"), "{stdout}");
    let row = snap[3..]
        .iter()
        .find(|l| l.ends_with(" profdev_top_nap"))
        .unwrap_or_else(|| panic!("no profdev_top_nap row:\n{stdout}"));
    let total: f64 = row
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_end_matches('%')
        .parse()
        .unwrap();
    assert!(total >= 50.0, "{stdout}");
}

fn one_sentence(args: &[&str], code: i32, says: &str) {
    let out = run(profdev().args(args));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    let first = err.lines().next().unwrap_or("");
    assert!(first.starts_with("profdev top: "), "{args:?}: {err}");
    // clap may put the argument it names on the next line.
    assert!(err.contains(says), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}");
}

#[test]
fn bad_options_and_a_missing_pid_are_one_sentence() {
    one_sentence(&["top", "--batch", "-d", "0"], 2, "-d takes the seconds");
    one_sentence(
        &["top", "-n", "2"],
        2,
        "required arguments were not provided:\n  --batch",
    );
    one_sentence(
        &["top", "--batch", "-p", "1", "-a"],
        2,
        "cannot be used with",
    );
    one_sentence(&["top", "--batch", "--sort", "up"], 2, "invalid value 'up'");
    one_sentence(&["top", "--batch", "-F", "0"], 1, "0 Hz takes no samples");
    // A pid above the kernel's limit is no process.
    one_sentence(
        &["top", "--batch", "-p", "4194305"],
        1,
        "process 4194305 does not exist",
    );
    // Without a terminal and without --batch: what to give instead.
    one_sentence(&["top"], 1, "give --batch");
}

/// Run by the user nobody with a kernel.perf_event_paranoid above 0: it
/// may not sample the machine, and top says which sysctl and capability.
#[test]
fn unprivileged_user_gets_the_sysctl_named() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let what = "top: unprivileged_user_gets_the_sysctl_named";
    let can = if !profdev_testkit::is_root() {
        Err("switching to the user nobody needs root".to_string())
    } else {
        match std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .map(|p| p.trim().parse::<i32>().unwrap_or(2))
        {
            Ok(p) if p > 0 => Ok(()),
            Ok(p) => Err(format!(
                "kernel.perf_event_paranoid is {p}: any user may sample"
            )),
            Err(e) => Err(format!("cannot read kernel.perf_event_paranoid: {e}")),
        }
    };
    if !privileged(what, can) {
        return;
    }
    let d = tempdir();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = profdev_copy(d.path());
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.current_dir(d.path())
        .uid(65534)
        .gid(65534)
        .args(["top", "--batch", "-n", "1"]);
    let out = run(&mut cmd);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("profdev top: the kernel refused system-wide sampling"),
        "{err}"
    );
    assert!(
        err.contains("kernel.perf_event_paranoid") && err.contains("CAP_PERFMON"),
        "{err}"
    );
}

/// `profdev top` on a pseudo-terminal of 30 rows of 120, refreshing
/// every 0.2 s.
fn start_top() -> Terminal {
    Terminal::spawn(&format!(
        "stty rows 30 cols 120; exec {} top -d 0.2",
        env!("CARGO_BIN_EXE_profdev")
    ))
}

/// The screen was left: the alternate screen off and the cursor shown,
/// after the last thing drawn.
fn restored(out: &str) -> bool {
    let left = out.rfind("\x1b[?1049l");
    let shown = out.rfind("\x1b[?25h");
    let drawn = out.rfind("\x1b[?25l");
    matches!((left, shown, drawn), (Some(l), Some(s), Some(d)) if l > d && s > d)
}

#[test]
fn keys_sort_zoom_and_quit_restoring_the_terminal() {
    let what = "keys_sort_zoom_and_quit_restoring_the_terminal";
    if !privileged(what, can_sample_system()) || !profdev_testkit::tools(what, &["script"]) {
        return;
    }
    let mut t = start_top();
    let at = t.wait_for("by self", 0);
    t.wait_for("health:", 0);
    t.press("s");
    let at = t.wait_for("total", at);
    // Rows: the machine always runs some kernel code (the idle loop at
    // least). Zoom into the first row's process, out, into its module.
    let at = t.wait_for("[kernel]", at);
    let at = t.press_until("p", ", process ", at);
    t.press("z");
    t.press_until("m", ", module ", at);
    t.press("q");
    let (code, out) = t.finish(std::time::Duration::from_secs(60));
    assert_eq!(code, Some(0), "{out:?}");
    assert!(restored(&out), "{out:?}");
}

#[test]
fn sigterm_restores_the_terminal() {
    let what = "sigterm_restores_the_terminal";
    if !privileged(what, can_sample_system()) || !profdev_testkit::tools(what, &["script"]) {
        return;
    }
    let t = start_top();
    t.wait_for("by self", 0);
    let pid = t.child_pid().expect("profdev top's pid");
    // SAFETY: kill has no memory preconditions; pid is our grandchild.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let (code, out) = t.finish(std::time::Duration::from_secs(60));
    assert_eq!(code, Some(128 + libc::SIGTERM), "{out:?}");
    assert!(restored(&out), "{out:?}");
}
