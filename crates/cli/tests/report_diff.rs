//! `profdev report --diff BASE NEW` on two real recordings of one program
//! whose hot function's share of the work moves from 70% to 30%: that
//! function, and the one that took its place, are starred with the
//! change's sign; a row that cannot have changed (`--sort comm`: every
//! sample is the program's in both) is not, nor is any row of a
//! recording compared with itself. The shares are set by the program's
//! work: the two functions take turns every few milliseconds, so a busy
//! machine, or time stolen from this virtual CPU, falls on both alike
//! (with the functions run one after the other, a stolen stretch during
//! the first once gave it 78% instead of 70%). With about a second of CPU
//! time per run at the default rate each recording has hundreds of
//! samples, far more than a 40-point change needs. (That
//! unchanged rows among many are left unstarred by chance is tested on
//! synthetic counts in `profdev_report::diff`.) `profdev export svg
//! --diff` of the same two draws NEW's graph with hot blue (faster), warm
//! red (slower) and main grey (unchanged).

mod common;

use common::{fixture, profdev, ready, tempdir};
use std::path::{Path, PathBuf};
use std::process::Command;

fn build(dir: &Path) -> PathBuf {
    let exe = dir.join("shares");
    let o = Command::new("gcc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(fixture("shares.c"))
        .output()
        .unwrap();
    assert!(o.status.success(), "gcc: {o:?}");
    exe
}

fn record(exe: &Path, out: &Path, hot: &str, warm: &str) {
    let o = profdev()
        .args(["record", "-g", "-o"])
        .arg(out)
        .arg("--")
        .arg(exe)
        .args([hot, warm])
        .output()
        .unwrap();
    assert!(o.status.success(), "record: {o:?}");
}

fn report(args: &[&str], files: &[&Path]) -> String {
    let o = profdev()
        .arg("report")
        .args(args)
        .arg("--diff")
        .args(files)
        .output()
        .unwrap();
    assert!(o.status.success(), "report: {o:?}");
    String::from_utf8(o.stdout).unwrap()
}

/// The data row whose last column is `key`.
fn row<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.ends_with(&format!("  {key}")))
        .unwrap_or_else(|| panic!("no row {key} in\n{text}"))
}

#[test]
fn a_hot_function_moving_from_70_to_30_percent_is_starred() {
    if !ready("profdev report --diff of two recordings", &["gcc"]) {
        return;
    }
    let d = tempdir();
    let exe = build(d.path());
    let (base, new) = (d.path().join("base.data"), d.path().join("new.data"));
    // 150 rounds of 10 units, about 1.5e9 loop steps per run: a second or
    // so of CPU time.
    record(&exe, &base, "7", "3");
    record(&exe, &new, "3", "7");

    let t = report(&["--sort", "sym"], &[&base, &new]);
    let (hot, warm) = (row(&t, "hot"), row(&t, "warm"));
    assert!(hot.contains(" *  ") && hot.contains(" -"), "{t}");
    assert!(warm.contains(" *  ") && warm.contains(" +"), "{t}");
    let change = |r: &str| -> f64 { r.split_whitespace().nth(2).unwrap().parse().unwrap() };
    // Of the program's samples 70% then 30%; a few samples elsewhere
    // (start-up, the kernel) move the shares a little.
    assert!((-45.0..=-30.0).contains(&change(hot)), "{t}");
    assert!((30.0..=45.0).contains(&change(warm)), "{t}");
    let first = t.lines().find(|l| !l.starts_with('#')).unwrap();
    assert!(first.ends_with("  hot") || first.ends_with("  warm"), "{t}");

    let t = report(&["--sort", "comm"], &[&base, &new]);
    let same = row(&t, "shares");
    assert!(same.starts_with("  100.00%   100.00%    +0.00"), "{t}");
    assert!(!same.contains('*'), "{t}");

    let t = report(&["--sort", "sym"], &[&base, &base]);
    assert!(
        !t.lines().any(|l| !l.starts_with('#') && l.contains('*')),
        "{t}"
    );
}

#[test]
fn diff_needs_two_recordings_and_an_svg() {
    let o = profdev()
        .args(["report", "--diff", "only-one.data"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = profdev()
        .args(["export", "folded", "--diff", "a.data", "b.data"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "profdev export: --diff draws a differential flame graph: give the format svg\n"
    );
}
