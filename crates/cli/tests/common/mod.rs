//! Shared helpers for the end-to-end tests: the binary, golden files, and
//! the privileged-capability gate.
#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `profdev` binary under test.
pub fn profdev() -> Command {
    Command::new(env!("CARGO_BIN_EXE_profdev"))
}

/// Run and capture.
pub fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("running profdev")
}

/// Compare `actual` with `tests/golden/NAME`; `PROFDEV_BLESS=1` rewrites it.
pub fn golden(name: &str, actual: &[u8]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("PROFDEV_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with PROFDEV_BLESS=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        String::from_utf8_lossy(actual),
        String::from_utf8_lossy(&expected),
        "output differs from {}",
        path.display()
    );
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Decide whether a privileged test can run. Returns false (after printing
/// why) when the capability is missing, unless PROFDEV_REQUIRE_PRIVILEGED=1,
/// in which case a missing capability fails the test.
pub fn privileged(what: &str, available: Result<(), String>) -> bool {
    match available {
        Ok(()) => true,
        Err(why) => {
            if std::env::var("PROFDEV_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
                panic!("{what} needs a capability this machine lacks: {why}");
            }
            eprintln!("SKIPPED {what}: {why}");
            false
        }
    }
}

/// Can this process sample system wide with perf_event_open?
pub fn can_sample_system() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map_err(|e| format!("cannot read kernel.perf_event_paranoid: {e}"))?;
    let paranoid: i32 = paranoid.trim().parse().unwrap_or(2);
    if root || paranoid <= 0 {
        Ok(())
    } else {
        Err(format!(
            "system-wide sampling needs root or CAP_PERFMON (kernel.perf_event_paranoid is {paranoid})"
        ))
    }
}

/// Path of a file in the test's fixture directory.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Kernel functions that do the zeroing for `dd if=/dev/zero` across
/// kernel versions (6.x inlines clear_user into read_zero).
pub fn is_zeroing(sym: &str) -> bool {
    [
        "read_zero",
        "clear_user",
        "rep_stos",
        "iov_iter_zero",
        "clear_page",
    ]
    .iter()
    .any(|z| sym.contains(z))
}

/// The symbol names of the first `n` rows of a kprof table, checking the
/// header lines `total: …`, `KTZERO …` and `ms\t  %\tsym` before them.
pub fn kprof_top(table: &str, n: usize) -> Vec<&str> {
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("total: "), "{table}");
    assert!(lines.next().unwrap().starts_with("KTZERO "), "{table}");
    assert_eq!(lines.next().unwrap(), "ms\t  %\tsym", "{table}");
    lines
        .take(n)
        .map(|l| l.rsplit('\t').next().unwrap())
        .collect()
}
