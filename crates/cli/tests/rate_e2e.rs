//! The rate a private run reports is samples per second of the sampled
//! tasks' CPU time (issue 25, item 4), and gmon says where samples went
//! when they were in other programs than CMD (item 10).
//!
//! Fixture recipe: `tests/fixtures/spinners.c`, compiled here with
//! `cc -O1 -pthread`: N threads, each burning a fixed amount of its own
//! CPU time in user mode (CLOCK_THREAD_CPUTIME_ID), never sleeping. So a
//! run's CPU time is known whatever the load of the machine, and at 1000
//! Hz each thread-second is about 1000 samples: one thread and two must
//! both read within 20% of the rate asked (a wall-clock or per-CPU rate
//! reads half or twice it).

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn spinners(dir: &Path) -> PathBuf {
    let exe = dir.join("spinners");
    let out = Command::new("cc")
        .args(["-O1", "-pthread", "-o"])
        .arg(&exe)
        .arg(fixture("spinners.c"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    exe
}

/// The Hz of the `NAME: totals: … R Hz (asked A)` line, and A.
fn rate(stderr: &str, name: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&format!("{name}: totals: ")))
        .unwrap_or_else(|| panic!("no totals line in:\n{stderr}"));
    let before = |w: &str| -> u64 {
        let i = line.find(w).unwrap_or_else(|| panic!("{w}: {line}"));
        line[..i]
            .rsplit(' ')
            .next()
            .unwrap()
            .trim_start_matches('(')
            .parse()
            .unwrap()
    };
    let asked = line.split("(asked ").nth(1).unwrap();
    (
        before(" Hz"),
        asked[..asked.find(')').unwrap()].parse().unwrap(),
    )
}

fn assert_near(what: &str, (hz, asked): (u64, u64), stderr: &str) {
    assert_eq!(asked, 1000, "{what}: {stderr}");
    assert!(
        (800..=1200).contains(&hz),
        "{what}: {hz} Hz for 1000 asked, not within 20%:\n{stderr}"
    );
}

#[test]
fn prof_and_gmon_rates_are_per_second_of_cpu_time() {
    let what = "prof_and_gmon_rates_are_per_second_of_cpu_time";
    if !ready(what, &["cc"]) {
        return;
    }
    let d = tempdir();
    let exe = spinners(d.path());
    for threads in ["1", "2"] {
        let out = run(profdev()
            .args(["prof", "-f", "--"])
            .arg(&exe)
            .args([threads, "1200"]));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert_near(
            &format!("prof, {threads} threads"),
            rate(&err, "prof"),
            &err,
        );

        let out = run(profdev()
            .args(["gmon", "-o"])
            .arg(d.path().join("gmon.out"))
            .arg("--")
            .arg(&exe)
            .args([threads, "1200"]));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert_near(
            &format!("gmon, {threads} threads"),
            rate(&err, "profdev gmon"),
            &err,
        );
    }
}

#[test]
fn gmon_says_which_other_programs_had_the_samples() {
    let what = "gmon_says_which_other_programs_had_the_samples";
    if !ready(what, &["cc", "sh"]) {
        return;
    }
    let d = tempdir();
    let exe = spinners(d.path());
    // sh forks the spinner: CMD (sh) has almost no sample of its own.
    let script = format!("{} 1 600; true", exe.display());
    let out = run(profdev()
        .args(["gmon", "-o"])
        .arg(d.path().join("gmon.out"))
        .args(["--", "sh", "-c", &script]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("were in other programs"))
        .unwrap_or_else(|| panic!("no line on other programs:\n{err}"));
    assert!(line.starts_with("profdev gmon: "), "{line}");
    assert!(line.contains("spinners "), "{line}");
    assert!(line.contains("profdev gmon -- "), "{line}");
}
