//! What every profdev test suite shares, written once so that every suite
//! behaves the same way:
//!
//! - [`privileged`]: the one gate in front of a test that needs a
//!   capability (root, perf_event_open, /dev/fuse, bpf). It fails the test
//!   when `PROFDEV_REQUIRE_PRIVILEGED=1` (as `.ci/run` sets) and prints
//!   `SKIPPED <test>: <why>` otherwise. No test returns early on a check of
//!   its own. [`tools`] is the same gate for external programs (gcc,
//!   gprof).
//! - [`wait_until`]: wait for a condition, bounded, instead of sleeping and
//!   hoping it has happened.
//! - [`golden`]: compare output with a golden file; `PROFDEV_BLESS=1`
//!   rewrites the file instead ([`blessing`] says whether it is set).
//! - [`assert_share_near`] and [`assert_share_at_least`]: check a sampled
//!   share against the share the workload is built to have, with a margin
//!   derived from the number of samples (five standard deviations of a
//!   binomial share), so that a correct profiler passes every time, not
//!   usually.
//! - [`Terminal`]: a command on a pseudo-terminal (script(1)), its output
//!   gathered as it comes and its keyboard a pipe, for live views.
//!
//! ```
//! use std::time::Duration;
//! // 702 of 1000 samples in a function built to take 70 % of the time.
//! profdev_testkit::assert_share_near("hot()", 0.702, 1000, 0.70);
//! let start = std::time::Instant::now();
//! profdev_testkit::wait_until("a millisecond to pass", Duration::from_secs(5), || {
//!     start.elapsed() >= Duration::from_millis(1)
//! });
//! ```

#![forbid(unsafe_code)]

pub mod terminal;
pub use terminal::Terminal;

use std::path::Path;
use std::time::{Duration, Instant};

/// The environment variable that turns a missing capability into a failure.
pub const REQUIRE_PRIVILEGED: &str = "PROFDEV_REQUIRE_PRIVILEGED";

/// The environment variable that makes [`golden`] rewrite golden files.
pub const BLESS: &str = "PROFDEV_BLESS";

/// True when `PROFDEV_REQUIRE_PRIVILEGED=1`: privileged tests must run.
pub fn privileged_required() -> bool {
    std::env::var(REQUIRE_PRIVILEGED).as_deref() == Ok("1")
}

/// Decide whether the privileged test `what` can run: true when `available`
/// is `Ok`. When it is `Err(why)`, panics under `PROFDEV_REQUIRE_PRIVILEGED=1`
/// and otherwise prints `SKIPPED <what>: <why>` on stderr and returns false;
/// the test then returns at once.
pub fn privileged(what: &str, available: Result<(), String>) -> bool {
    gate(what, available, privileged_required())
}

/// The environment variable that turns a missing external tool (gcc,
/// gprof, readprofile...) into a failure; `PROFDEV_REQUIRE_PRIVILEGED=1`
/// does too, as CI installs every tool the tests use.
pub const REQUIRE_TOOLS: &str = "PROFDEV_REQUIRE_TOOLS";

/// Decide whether a test that runs the external programs `tools` can run:
/// true when each of them starts (`TOOL --version`). Otherwise panics under
/// `PROFDEV_REQUIRE_TOOLS=1` or `PROFDEV_REQUIRE_PRIVILEGED=1`, and prints
/// `SKIPPED <what>: ...` and returns false without them.
pub fn tools(what: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            std::process::Command::new(t)
                .arg("--version")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_err()
        })
        .collect();
    let available = if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("not installed: {}", missing.join(", ")))
    };
    let required = privileged_required() || std::env::var(REQUIRE_TOOLS).as_deref() == Ok("1");
    gate(what, available, required)
}

fn gate(what: &str, available: Result<(), String>, required: bool) -> bool {
    match available {
        Ok(()) => true,
        Err(why) => {
            if required {
                panic!("{what} needs a capability this machine lacks: {why}");
            }
            eprintln!("SKIPPED {what}: {why}");
            false
        }
    }
}

/// Compile the C program `src` with `cc`, `flags` first, into `out`;
/// panics (naming `src`) when cc cannot run or fails.
pub fn cc(src: &Path, flags: &[&str], out: &Path) {
    let st = std::process::Command::new("cc")
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(src)
        .status()
        .expect("cc runs");
    assert!(st.success(), "cc failed on {}", src.display());
}

/// Copy the executable `from` to `to` with `mode`, for a test to run it.
/// cp(1) and chmod(1), child processes, do the writing: had this
/// multi-threaded test process held the copy's write descriptor, a fork by
/// another test thread at that moment would keep it open in the child
/// until that child's exec, and running the copy would fail with ETXTBSY.
pub fn copy_executable(from: &Path, to: &Path, mode: u32) {
    let st = std::process::Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp runs");
    assert!(
        st.success(),
        "cp {} {} failed",
        from.display(),
        to.display()
    );
    chmod(to, mode);
}

/// Write `bytes` to a new executable `to` with `mode`, for a test to run
/// it: written by a child process, for the reason [`copy_executable`]
/// gives.
pub fn write_executable(to: &Path, bytes: &[u8], mode: u32) {
    use std::io::Write;
    let mut child = std::process::Command::new("sh")
        .args(["-c", "cat > \"$1\"", "sh"])
        .arg(to)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("sh runs");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    assert!(
        child.wait().unwrap().success(),
        "writing {} failed",
        to.display()
    );
    chmod(to, mode);
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Render the lcov tracefile `info` into `html` with genhtml (branch and
/// function coverage on), the real consumer: panics with genhtml's words
/// when it fails or warns, or writes no index.
pub fn genhtml_renders(info: &Path, html: &Path) {
    let out = std::process::Command::new("genhtml")
        .args(["--branch-coverage", "--function-coverage", "-q", "-o"])
        .arg(html)
        .arg(info)
        .output()
        .expect("genhtml runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "genhtml fails: {said}");
    assert!(
        !said.to_lowercase().contains("warning"),
        "genhtml warns: {said}"
    );
    assert!(html.join("index.html").exists(), "genhtml wrote no index");
}

/// Is this process root? (Mounting and system-wide sampling need it, or
/// the capabilities the callers name.)
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Can this process mount a FUSE file system? (root and /dev/fuse)
pub fn can_mount() -> Result<(), String> {
    if !is_root() {
        return Err("mounting needs root (CAP_SYS_ADMIN)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse does not exist (modprobe fuse)".into());
    }
    Ok(())
}

/// Wait until `cond` holds, checking it every few milliseconds; panics
/// naming `what` when it still does not hold after `timeout`. The bound is
/// a hang guard, not a synchronisation: pick it generously.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Wait (bounded by `timeout`) for `child` to exit and return its status;
/// a child still running then is killed, and the test fails naming `what`.
pub fn wait_exit(
    what: &str,
    child: &mut std::process::Child,
    timeout: Duration,
) -> std::process::ExitStatus {
    let mut status = None;
    let deadline = Instant::now() + timeout;
    while status.is_none() {
        status = child.try_wait().expect("waiting for a child");
        if status.is_none() && Instant::now() >= deadline {
            let threads = where_threads_wait(child.id());
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {timeout:?}; its threads were in:\n{threads}");
        }
        if status.is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    status.unwrap_or_else(|| unreachable!())
}

/// Each thread of process `pid`: its name, state and where the kernel
/// has it wait (`wchan`, and the kernel stack where root may read it):
/// what a test that gave up on a process reports.
pub fn where_threads_wait(pid: u32) -> String {
    let mut out = String::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("  (process {pid} is gone)\n");
    };
    for t in tasks.flatten() {
        let dir = t.path();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let state = read("stat")
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next().map(str::to_string))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {} {} {state} wchan={}\n",
            t.file_name().to_string_lossy(),
            read("comm").trim_end(),
            read("wchan")
        ));
        for line in read("stack").lines().take(8) {
            out.push_str(&format!("      {line}\n"));
        }
    }
    out
}

/// CPU time this thread has used (CLOCK_THREAD_CPUTIME_ID).
pub fn thread_cpu_time() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Spin until this thread has used `cpu` more CPU time: a workload whose
/// size is CPU time, not wall time, so that a loaded machine makes it
/// slower, never smaller (a CPU clock ticks `cpu` worth of samples on it).
pub fn burn_cpu(cpu: Duration) {
    let until = thread_cpu_time() + cpu;
    let mut x = 1u64;
    while thread_cpu_time() < until {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
}

/// True when `PROFDEV_BLESS=1`: golden files are rewritten, not compared.
pub fn blessing() -> bool {
    std::env::var(BLESS).as_deref() == Ok("1")
}

/// Compare `actual` with the golden file at `path`; under `PROFDEV_BLESS=1`
/// write `actual` there instead. A difference prints both texts, or for
/// binary files the lengths and the first differing byte.
pub fn golden(path: &Path, actual: &[u8]) {
    if blessing() {
        std::fs::write(path, actual)
            .unwrap_or_else(|e| panic!("cannot bless {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with {BLESS}=1 to create it)", path.display()));
    if actual == expected.as_slice() {
        return;
    }
    match (std::str::from_utf8(&expected), std::str::from_utf8(actual)) {
        (Ok(want), Ok(got)) => panic!(
            "output differs from {} ({BLESS}=1 rewrites it)\n--- want\n{want}\n--- got\n{got}",
            path.display()
        ),
        _ => panic!(
            "output differs from {} ({BLESS}=1 rewrites it): lengths {} and {}, first difference at byte {:?}",
            path.display(),
            expected.len(),
            actual.len(),
            expected
                .iter()
                .zip(actual)
                .position(|(a, b)| a != b)
                .unwrap_or(expected.len().min(actual.len()))
        ),
    }
}

/// How many standard deviations [`assert_share_near`] and
/// [`assert_share_at_least`] allow: a correct profiler falls outside with
/// probability under one in a million per check.
pub const SIGMAS: f64 = 5.0;

/// The widest margin a share check accepts: with fewer samples than that
/// takes, the check says nothing and fails as such (five deviations of a
/// 50 % share are 25 points at 100 samples; of a 95 % share, at 19).
pub const MAX_MARGIN: f64 = 0.25;

/// The margin for a share `p` estimated from `n` samples: five standard
/// deviations of the binomial share, `5 * sqrt(p (1 - p) / n)`, never less
/// than half a sample (`0.5 / n`) so that a share of exactly 0 or 1 still
/// has room for rounding.
pub fn share_margin(n: u64, p: f64) -> f64 {
    assert!(
        (0.0..=1.0).contains(&p),
        "a share is between 0 and 1, not {p}"
    );
    let n = n.max(1) as f64;
    (SIGMAS * (p * (1.0 - p) / n).sqrt()).max(0.5 / n)
}

fn checked_margin(what: &str, n: u64, expected: f64) -> f64 {
    let m = share_margin(n, expected);
    assert!(
        m <= MAX_MARGIN,
        "{what}: {n} samples are too few to check a share of {:.0}% (the margin would be {:.0} points)",
        expected * 100.0,
        m * 100.0
    );
    m
}

/// Assert that `observed` (a share, 0 to 1) of `n` samples is within
/// [`share_margin`] of `expected`, the share the workload is built to have.
pub fn assert_share_near(what: &str, observed: f64, n: u64, expected: f64) {
    let m = checked_margin(what, n, expected);
    assert!(
        (observed - expected).abs() <= m,
        "{what}: {:.2}% of {n} samples is not within {:.2} points ({SIGMAS} standard deviations) of {:.2}%",
        observed * 100.0,
        m * 100.0,
        expected * 100.0
    );
}

/// Assert that `observed` (a share, 0 to 1) of `n` samples is at least
/// `expected` less [`share_margin`]: the workload is built so that its true
/// share is `expected` or more.
pub fn assert_share_at_least(what: &str, observed: f64, n: u64, expected: f64) {
    let m = checked_margin(what, n, expected);
    assert!(
        observed >= expected - m,
        "{what}: {:.2}% of {n} samples is below {:.2}% by more than {:.2} points ({SIGMAS} standard deviations)",
        observed * 100.0,
        expected * 100.0,
        m * 100.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margin_is_five_deviations() {
        // p = 0.7, n = 1000: sigma = sqrt(0.21 / 1000) = 0.01449.
        assert!((share_margin(1000, 0.7) - 0.07246).abs() < 1e-4);
        assert_eq!(share_margin(1000, 1.0), 0.0005);
    }

    #[test]
    fn near_accepts_inside_and_rejects_outside() {
        assert_share_near("x", 0.77, 1000, 0.70);
        let r = std::panic::catch_unwind(|| assert_share_near("x", 0.78, 1000, 0.70));
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| assert_share_near("x", 0.7, 10, 0.70));
        assert!(r.is_err(), "too few samples is a failure");
    }

    #[test]
    fn at_least_is_one_sided() {
        assert_share_at_least("x", 1.0, 1000, 0.9);
        assert_share_at_least("x", 0.86, 1000, 0.9);
        let r = std::panic::catch_unwind(|| assert_share_at_least("x", 0.85, 1000, 0.9));
        assert!(r.is_err());
    }

    #[test]
    fn privileged_skips_or_fails() {
        assert!(privileged("t", Ok(())));
        let r = std::panic::catch_unwind(|| privileged("t", Err("no".into())));
        // Whichever way the environment says, a missing capability never
        // lets the test body run.
        match r {
            Ok(ran) => assert!(!ran && !privileged_required()),
            Err(_) => assert!(privileged_required()),
        }
    }

    #[test]
    fn wait_until_times_out() {
        let r =
            std::panic::catch_unwind(|| wait_until("never", Duration::from_millis(20), || false));
        assert!(r.is_err());
        let mut n = 0;
        wait_until("three calls", Duration::from_secs(5), || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
    }

    #[test]
    fn burn_cpu_uses_cpu_time() {
        let t0 = thread_cpu_time();
        burn_cpu(Duration::from_millis(20));
        assert!(thread_cpu_time() - t0 >= Duration::from_millis(20));
    }

    #[test]
    fn golden_compares() {
        let d = std::env::temp_dir().join(format!("profdev-testkit-{}", std::process::id()));
        std::fs::write(&d, b"same\n").unwrap();
        if !blessing() {
            golden(&d, b"same\n");
            let r = std::panic::catch_unwind(|| golden(&d, b"other\n"));
            assert!(r.is_err());
        }
        std::fs::remove_file(&d).unwrap();
    }
}
